"""netsim's view of a topo.Topology: directed channels, effective capacities, routes, GPU facts.

Channels are the directed links of the topology (topo models a cable as two directed links). The
engine sees channel capacities = line rate x calibrated efficiency of the link class x the link's
capacity_factor (degraded parts, topo.faults) x (1 - error_rate).

error_rate is read as a per-packet loss probability p (the ns-3 error model of SimAI files). Modelling
choice: selective-repeat retransmission, where each lost packet is sent again and nothing else, so
the goodput is (1 - p) of the rate. Go-back-N (older RoCE NICs) loses more, 1 / (1 + p W) with W the
window in packets; that needs a per-path window and is not modelled.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from netsim import calibration as cal
from netsim.errors import NetsimError
from netsim.protocol import link_class

# auto (default): "rail" on a rail-optimized fabric (topo.analysis.is_rail_optimized), else "ecmp";
# rail: NCCL-like rail-aligned routes for same-rail traffic (topo.Router); ecmp: per-flow hashing everywhere
ROUTINGS = ("auto", "rail", "ecmp")


def resolve_routing(topology, routing: str) -> str:
    """The routing "auto" stands for on `topology`:
    - "rail" on a rail-optimized fabric (each switch serving several servers serves one NIC index):
      NCCL joins same-rail NICs, so its rings and trees stay on their rail;
    - "rail" on clustersim's k-ary fat tree (template "fat-tree", named FatTree_*): modelled as an
      InfiniBand fabric, whose subnet manager routes deterministically by destination (OpenSM's ftree
      routing is D-mod-k), which is what the rail mode's D-mod-k next hops do;
    - "ecmp" otherwise (one ToR per server: DCN+, non-rail Ethernet): a flow's path through the aggregation
      and spine layers is the switches' ECMP hash of its 5-tuple, which NCCL cannot steer, so flows of
      different rings can collide."""
    if routing != "auto":
        return routing
    from topo.analysis import is_rail_optimized
    # the template's name says "InfiniBand fat tree"; a SimAI file of the same fabric does not (its format
    # has no routing field), so such a file routes by hash unless routing="rail" is given
    if str(topology.name).startswith("FatTree"):
        return "rail"
    return "rail" if is_rail_optimized(topology) else "ecmp"


class TopoView:
    def __init__(self, topology, *, pxn: bool = False, calibration=None, routing: str = "auto"):
        import topo  # netsim -> topo is an allowed dependency; imported lazily for testability

        self.topology = topology
        self.gpu_type = str(getattr(topology, "gpu_type", "") or "")
        self.num_gpus = int(topology.num_gpus)
        self.gpus_per_server = int(getattr(topology, "gpus_per_server", 1) or 1)
        links = list(topology.links)
        nl = len(links)
        src = np.fromiter((lk.src for lk in links), dtype=np.int64, count=nl)
        dst = np.fromiter((lk.dst for lk in links), dtype=np.int64, count=nl)
        kind = [str(lk.kind) for lk in links]
        bw = np.fromiter((float(lk.bandwidth_Bps) for lk in links), dtype=np.float64, count=nl)
        lat = np.fromiter((float(lk.latency_s) for lk in links), dtype=np.float64, count=nl)
        # share of the capacity a link delivers: a degraded part's factor (topo.faults) x (1 - error_rate),
        # the goodput of selective-repeat retransmission at per-packet loss probability error_rate
        health = np.fromiter((float(getattr(lk, "capacity_factor", 1.0)) * (1.0 - float(getattr(lk, "error_rate", 0.0)))
                              for lk in links), dtype=np.float64, count=nl)
        pairs = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist()))}
        # topo.Topology links are directed (a cable = two links); a topology whose links have no
        # reverse twin is read as full duplex: channel 2L = link L forward, 2L + 1 = backward.
        self.directed = all((b, a) in pairs for (a, b) in pairs)
        if self.directed:
            self.ch_src, self.ch_dst, self.ch_kind = src, dst, kind
            ch_bw, ch_lat, ch_health = bw, lat, health
            self._rev = np.array([pairs[(int(b), int(a))] for a, b in zip(src, dst)], dtype=np.int64)
        else:
            self.ch_src = np.stack([src, dst], axis=1).reshape(-1)
            self.ch_dst = np.stack([dst, src], axis=1).reshape(-1)
            self.ch_kind = [k for k in kind for _ in (0, 1)]
            ch_bw, ch_lat, ch_health = np.repeat(bw, 2), np.repeat(lat, 2), np.repeat(health, 2)
            self._rev = np.arange(2 * nl, dtype=np.int64) ^ 1
        self.link_src, self.link_dst = src, dst
        override = {} if calibration is None else {
            "nvlink": calibration.nvlink_efficiency, "network": calibration.network_efficiency,
            "pcie": calibration.pcie_efficiency}
        eff = np.array([override.get(k) or cal.link_efficiency(k, b, self.gpu_type)
                        for k, b in zip(self.ch_kind, ch_bw)])
        self.line_Bps = ch_bw
        self.capacity_Bps = ch_bw * eff * ch_health
        self.latency_s = ch_lat
        self.node_kind = {n.id: str(n.kind) for n in topology.nodes}
        self._tier = {n.id: str(n.tier) for n in topology.nodes}
        self.pxn_default = bool(pxn)   # make_backend(..., pxn=True): every route uses PXN
        if routing not in ROUTINGS:
            raise NetsimError(f"routing must be one of {', '.join(ROUTINGS)}, got {routing!r}")
        self.routing = resolve_routing(topology, routing)
        self._rail_aligned = self.routing == "rail"
        self._routers = {False: topo.Router(topology, pxn=False, rail_aligned=self._rail_aligned)}
        if pxn:
            self._routers[True] = topo.Router(topology, pxn=True, rail_aligned=self._rail_aligned)
        self._topo_mod = topo
        self._path_cache: dict[tuple[int, int, int, bool], tuple[int, ...]] = {}
        self._adj: dict[int, list[tuple[int, int]]] = defaultdict(list)  # node -> [(out channel, peer)]
        for ch, (a, b) in enumerate(zip(self.ch_src.tolist(), self.ch_dst.tolist())):
            self._adj[a].append((ch, b))
        self._server = [int(topology.server_of(g)) for g in range(self.num_gpus)]
        self._domain = [int(topology.nvlink_domain_of(g)) for g in range(self.num_gpus)]
        # unit: the GPUs that reach each other without the scale-out network (NVLink domain; the
        # server when GPUs talk over PCIe only)
        dom_size = int(getattr(topology, "nvlink_domain_size", 1) or 1)
        self._unit = self._domain if dom_size > 1 else self._server
        self._remote: dict[int, int] = {}
        self._exits: dict[int, tuple[tuple[int, ...], float]] = {}
        self._gpu_facts: dict[int, tuple[float, float]] = {}

    # ------------------------------------------------------------ structure
    def server_of(self, gpu: int) -> int:
        return self._server[gpu]

    def domain_of(self, gpu: int) -> int:
        return self._domain[gpu]

    def unit_of(self, gpu: int) -> int:
        return self._unit[gpu]

    def is_network_switch(self, node: int) -> bool:
        return self.node_kind.get(node) == "switch" and self._tier.get(node) != "pcie"

    def host_prefix(self, gpu: int) -> tuple[int, ...]:
        """Channels from the GPU to its first network switch on the route to a GPU of another unit
        (empty when the topology has a single unit)."""
        other = self._remote.get(gpu)
        if other is None:
            u = self._unit[gpu]
            other = next((g for g in range(self.num_gpus) if self._unit[g] != u), -1)
            self._remote[gpu] = other
        if other < 0:
            return ()
        prefix = []
        for ch in self.path(gpu, other, 0):
            prefix.append(ch)
            if self.is_network_switch(int(self.ch_dst[ch])):
                break
        return tuple(prefix)

    def check_gpus(self, gpus) -> None:
        for g in gpus:
            if not isinstance(g, int | np.integer) or g < 0 or g >= self.num_gpus:
                raise NetsimError(f"rank {g} is not a GPU of the topology (GPU ids 0..{self.num_gpus - 1})")

    def switch_channels(self, gpu: int) -> tuple[list[int], list[int]]:
        """Channels GPU -> NVSwitch and NVSwitch -> GPU (NVLS traffic)."""
        up, down = [], []
        for ch, peer in self._adj[gpu]:
            if self.node_kind.get(peer) == "nvswitch":
                up.append(ch)
                down.append(int(self._rev[ch]))
        return up, down

    def channel_kind(self, ch: int) -> str:
        return self.ch_kind[ch]

    # ------------------------------------------------------------ routes
    def path(self, src: int, dst: int, key: int = 0, pxn: bool = False) -> tuple[int, ...]:
        ck = (src, dst, key, pxn)
        got = self._path_cache.get(ck)
        if got is not None:
            return got
        if src == dst:
            self._path_cache[ck] = ()
            return ()
        router = self._routers.get(pxn)
        if router is None:
            router = self._routers[pxn] = self._topo_mod.Router(self.topology, pxn=pxn,
                                                                rail_aligned=self._rail_aligned)
        ids = router.path(src, dst, key)
        if self.directed:
            res = tuple(int(i) for i in ids)
        else:
            chans = []
            cur = src
            for lid in ids:
                lid = int(lid)
                if self.link_src[lid] == cur:
                    chans.append(2 * lid)
                    cur = int(self.link_dst[lid])
                else:
                    chans.append(2 * lid + 1)
                    cur = int(self.link_src[lid])
            res = tuple(chans)
        self._path_cache[ck] = res
        return res

    def path_latency_s(self, chans) -> float:
        return float(sum(self.latency_s[c] for c in chans))

    def path_class(self, chans) -> str:
        """Slowest link class on a path (network > pcie > nvlink); per-hop latencies follow it."""
        return link_class({self.ch_kind[c] for c in chans})

    # ------------------------------------------------------------ per-GPU bandwidths
    def nvlink_out_Bps(self, gpu: int) -> float:
        """Effective NVLink bandwidth out of a GPU (all its NVLink ports); 0 without NVLink."""
        return float(sum(self.capacity_Bps[ch] for ch, _ in self._adj[gpu] if self.ch_kind[ch] == "nvlink"))

    def exits(self, gpu: int) -> tuple[tuple[int, ...], float]:
        """(channels into the network switches a GPU reaches through its host side: NIC / PCIe
        switches, never other GPUs or NVSwitches; bandwidth of its own first hops on that side)."""
        got = self._exits.get(gpu)
        if got is not None:
            return got
        out: list[int] = []
        first = 0.0
        seen = {gpu}
        frontier = [gpu]
        while frontier:
            nxt = []
            for node in frontier:
                for ch, peer in self._adj[node]:
                    if self.is_network_switch(peer):
                        out.append(ch)
                        if node == gpu:
                            first += self.capacity_Bps[ch]
                    elif peer not in seen and (self.node_kind.get(peer) == "nic" or self._tier.get(peer) == "pcie"):
                        if node == gpu:
                            first += self.capacity_Bps[ch]
                        seen.add(peer)
                        nxt.append(peer)
            frontier = nxt
        got = (tuple(sorted(set(out))), first)
        self._exits[gpu] = got
        return got

    def route(self, src: int, dst: int, key: int = 0, pxn: bool = False) -> tuple[tuple[int, ...], tuple[float, ...]]:
        """Channels and weights of one flow src -> dst. Inside an NVLink domain with several NVSwitch
        chips the traffic is striped over every chip both GPUs reach (NVLink spreads a GPU's traffic
        over all its links); between units a GPU with several network ports (dual ToR, bonded NIC)
        spreads it over one ECMP route per port. Otherwise the single topo.Router route."""
        pxn = pxn or self.pxn_default
        ck = (src, dst, key, pxn, "w")
        got = self._path_cache.get(ck)
        if got is not None:
            return got
        chans: dict[int, float] = {}
        if src != dst and self._unit[src] == self._unit[dst]:
            pairs = []
            for ch, sw in self._adj[src]:
                if self.node_kind.get(sw) == "nvswitch":
                    down = next((c2 for c2, p2 in self._adj[sw] if p2 == dst), None)
                    if down is not None:
                        pairs.append((ch, down))
            if len(pairs) > 1:
                for up, down in pairs:
                    chans[up] = chans.get(up, 0.0) + 1.0 / len(pairs)
                    chans[down] = chans.get(down, 0.0) + 1.0 / len(pairs)
        if not chans and src != dst and self._unit[src] != self._unit[dst] and len(self.exits(src)[0]) > 1:
            ports = len(self.exits(src)[0])
            paths: dict[int, tuple[int, ...]] = {}
            entries: set[int] = set()
            for j in range(8 * ports):
                p = self.path(src, dst, key * 64 + j, pxn)
                port = next((c for c in p if self.is_network_switch(int(self.ch_dst[c]))), -1)
                entry = p[-1] if p else -1
                # one route per source port, preferring distinct destination ports as well
                if port not in paths and (entry not in entries or j >= 4 * ports):
                    paths[port] = p
                    entries.add(entry)
                if len(paths) == ports:
                    break
            for p in paths.values():
                for c in p:
                    chans[c] = chans.get(c, 0.0) + 1.0 / len(paths)
        if chans:
            got = (tuple(chans), tuple(chans.values()))
        else:
            p = self.path(src, dst, key, pxn)
            got = (p, (1.0,) * len(p))
        self._path_cache[ck] = got
        return got

    def group_bandwidths(self, gpus) -> tuple[float, float]:
        """(intra-unit B/s, network B/s) per GPU for a group: the slowest member's NVLink ports
        (or its PCIe path to a peer in its unit), and its share of its network ports: their
        capacity divided by the group members that use the same ports (NIC sharing), capped by
        the GPU's own host-side links."""
        gpus = list(gpus)
        by_unit: dict[int, list[int]] = defaultdict(list)
        for g in gpus:
            by_unit[self._unit[g]].append(g)
        b_intra = math.inf
        for g in gpus:
            nv = self.nvlink_out_Bps(g)
            if nv <= 0.0:
                peers = [h for h in by_unit[self._unit[g]] if h != g]
                if not peers:
                    continue
                nv = min(self.capacity_Bps[c] for c in self.path(g, peers[0], 0))
            b_intra = min(b_intra, nv)
        b_net = math.inf
        if len(by_unit) > 1:
            ex = {g: self.exits(g) for g in gpus}
            users: dict[int, int] = defaultdict(int)
            for chans, _ in ex.values():
                for c in chans:
                    users[c] += 1
            for chans, first in ex.values():
                if not chans:
                    continue
                share = sum(self.capacity_Bps[c] / users[c] for c in chans)
                b_net = min(b_net, share, first if first > 0 else math.inf)
        return b_intra, b_net
