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


def _paired_reverse(src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
    """Reverse channel of every link when links come in twins (2k, 2k+1) = (a->b, b->a), as topo
    writes cables, and no two links join the same (src, dst): then reverse(L) = L ^ 1. None otherwise
    (the caller pairs links through a dictionary)."""
    n = len(src)
    if n == 0 or n % 2 or not (np.array_equal(src[0::2], dst[1::2]) and np.array_equal(dst[0::2], src[1::2])):
        return None
    key = np.sort(src * (int(max(src.max(), dst.max())) + 1) + dst)
    if bool(np.any(key[1:] == key[:-1])):     # parallel links: the dictionary pairing picks the last twin
        return None
    return np.arange(n, dtype=np.int64) ^ 1


def _efficiencies(kinds: list, bw: np.ndarray, gpu_type: str, override: dict) -> np.ndarray:
    """cal.link_efficiency (or the calibration's override) of every channel, evaluated once per
    distinct (kind, line rate)."""
    names = {k: i for i, k in enumerate(dict.fromkeys(kinds))}     # distinct kinds, first-seen order
    codes = np.fromiter(map(names.__getitem__, kinds), dtype=np.int64, count=len(kinds))
    out = np.empty(len(kinds))
    for k, c in names.items():
        mask = codes == c
        rates, inv = np.unique(bw[mask], return_inverse=True)
        eff = np.array([override.get(k) or cal.link_efficiency(k, float(b), gpu_type) for b in rates.tolist()])
        out[mask] = eff[inv]
    return out


class _Adjacency:
    """node -> [(out channel, peer)] in channel order, built on first use of each node from a CSR of
    the channels (a 9,216-GPU fabric has 56,000 channels; a run touches a few thousand nodes)."""

    __slots__ = ("_ptr", "_ch", "_dst", "_rows")

    def __init__(self, ch_src: np.ndarray, ch_dst: np.ndarray) -> None:
        order = np.argsort(ch_src, kind="stable")
        n_nodes = int(max(ch_src.max(), ch_dst.max())) + 1 if len(ch_src) else 0
        self._ptr = np.searchsorted(ch_src[order], np.arange(n_nodes + 1)).tolist()
        self._ch = order.tolist()          # lists: slicing a list is cheaper than a numpy slice + tolist
        self._dst = ch_dst[order].tolist()
        self._rows: dict[int, list[tuple[int, int]]] = {}

    def __getitem__(self, node: int) -> list[tuple[int, int]]:
        got = self._rows.get(node)
        if got is None:
            if 0 <= node < len(self._ptr) - 1:
                lo, hi = self._ptr[node], self._ptr[node + 1]
                got = list(zip(self._ch[lo:hi], self._dst[lo:hi]))
            else:
                got = []
            self._rows[node] = got
        return got


class TopoView:
    def __init__(self, topology, *, pxn: bool = False, calibration=None, routing: str = "auto"):
        import topo  # netsim -> topo is an allowed dependency; imported lazily for testability

        self.topology = topology
        self.gpu_type = str(getattr(topology, "gpu_type", "") or "")
        self.num_gpus = int(topology.num_gpus)
        self.gpus_per_server = int(getattr(topology, "gpus_per_server", 1) or 1)
        from topo.model import link_arrays_of
        la = link_arrays_of(topology)
        src, dst, kind = la.src, la.dst, la.kind
        bw, lat, health = la.bandwidth_Bps, la.latency_s, la.health
        nl = len(src)
        # topo.Topology links are directed (a cable = two links); a topology whose links have no
        # reverse twin is read as full duplex: channel 2L = link L forward, 2L + 1 = backward.
        rev = _paired_reverse(src, dst)
        if rev is None:
            pairs = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist()))}
            self.directed = all((b, a) in pairs for (a, b) in pairs)
        else:
            self.directed = True
        if self.directed:
            self.ch_src, self.ch_dst, self.ch_kind = src, dst, kind
            ch_bw, ch_lat, ch_health = bw, lat, health
            self._rev = rev if rev is not None else np.array([pairs[(int(b), int(a))] for a, b in zip(src, dst)],
                                                             dtype=np.int64)
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
        eff = _efficiencies(self.ch_kind, ch_bw, self.gpu_type, override)
        self.line_Bps = ch_bw
        self.capacity_Bps = ch_bw * eff * ch_health
        self.latency_s = ch_lat
        self.node_kind = {n.id: str(n.kind) for n in topology.nodes}
        self._tier = {n.id: str(n.tier) for n in topology.nodes}
        # per node: 1 = network switch (is_network_switch), 2 = NIC or PCIe switch (exits walks through), else 0
        self._exit_role = {i: 1 if k == "switch" and self._tier[i] != "pcie" else
                           2 if k == "nic" or self._tier[i] == "pcie" else 0 for i, k in self.node_kind.items()}
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
        self._adj = _Adjacency(self.ch_src, self.ch_dst)   # node -> [(out channel, peer)], built per node on use
        self._server = [int(topology.server_of(g)) for g in range(self.num_gpus)]
        self._domain = ([int(d) for d in topology.nvlink_domains()] if hasattr(topology, "nvlink_domains")
                        else [int(topology.nvlink_domain_of(g)) for g in range(self.num_gpus)])
        # unit: the GPUs that reach each other without the scale-out network (NVLink domain; the
        # server when GPUs talk over PCIe only)
        dom_size = int(getattr(topology, "nvlink_domain_size", 1) or 1)
        self._unit = self._domain if dom_size > 1 else self._server
        self._remote: dict[int, int] = {}
        self._exits: dict[int, tuple[tuple[int, ...], float]] = {}
        self._gpu_facts: dict[int, tuple[float, float]] = {}
        self._nvsw_up: dict[int, list[tuple[int, int]]] = {}      # GPU -> [(channel, NVSwitch)]
        self._nvsw_down: dict[int, dict[int, int]] = {}           # NVSwitch -> {peer: first channel}
        self._hop_cache: dict[tuple, tuple] = {}
        self._nvsw_pairs: dict[tuple[int, int], list[tuple[int, int]]] = {}
        self._nv_out: dict[int, float] = {}
        self._cap_list: list[float] | None = None
        self._hop_key_free: dict[tuple, tuple] = {}
        self._routed_specs: dict[tuple, object] = {}    # netsim.resolve.route_spec results by spec content
        self._lat_list = self.latency_s.tolist()

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
            res = tuple(map(int, ids))
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
        got = self._nv_out.get(gpu)
        if got is None:
            cap = self._cap_list
            if cap is None:     # Python floats: the same sums as over numpy scalars, without their boxing
                cap = self._cap_list = self.capacity_Bps.tolist()
            kind = self.ch_kind
            got = self._nv_out[gpu] = float(sum(cap[ch] for ch, _ in self._adj[gpu] if kind[ch] == "nvlink"))
        return got

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
        role = self._exit_role
        while frontier:
            nxt = []
            for node in frontier:
                for ch, peer in self._adj[node]:
                    r = role.get(peer, 0)
                    if r == 1:
                        out.append(ch)
                        if node == gpu:
                            first += self.capacity_Bps[ch]
                    elif r == 2 and peer not in seen:
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
        if got is None:
            got = self._path_cache[ck] = self._route_uncached(src, dst, key, pxn)
        return got

    def _route_uncached(self, src: int, dst: int, key: int, pxn: bool) -> tuple[tuple[int, ...], tuple[float, ...]]:
        chans: dict[int, float] = {}
        if src != dst and self._unit[src] == self._unit[dst]:
            pairs = self._nvswitch_pairs(src, dst)
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
            return tuple(chans), tuple(chans.values())
        p = self.path(src, dst, key, pxn)
        return p, (1.0,) * len(p)

    def _nvswitch_pairs(self, src: int, dst: int) -> list[tuple[int, int]]:
        """(src -> NVSwitch, NVSwitch -> dst) channel pairs through every NVSwitch both reach (the
        first channel from the switch to dst when there are parallel ones)."""
        got = self._nvsw_pairs.get((src, dst))
        if got is not None:
            return got
        ups = self._nvsw_up.get(src)
        if ups is None:
            ups = self._nvsw_up[src] = [(ch, sw) for ch, sw in self._adj[src] if self.node_kind.get(sw) == "nvswitch"]
        pairs = []
        for ch, sw in ups:
            down = self._nvsw_down.get(sw)
            if down is None:
                down = {}
                for c2, p2 in self._adj[sw]:
                    down.setdefault(p2, c2)
                self._nvsw_down[sw] = down
            c2 = down.get(dst)
            if c2 is not None:
                pairs.append((ch, c2))
        self._nvsw_pairs[(src, dst)] = pairs
        return pairs

    def hop(self, src: int, dst: int, key: int = 0, pxn: bool = False) -> tuple:
        """route() with the hop's propagation latency (weight-averaged over striped / multi-port
        routes) and its link class (path_class), cached: (channels, weights, latency_s, class)."""
        pxn = pxn or self.pxn_default
        ck = (src, dst, key, pxn)
        got = self._hop_cache.get(ck)
        if got is not None:
            return got
        unit = self._unit
        if unit[src] != unit[dst]:
            ex = self._exits.get(src) or self.exits(src)
            router = self._routers.get(pxn)
            if len(ex[0]) <= 1 and router is not None and self.directed:
                # one network port: the single topo.Router route (path() without its memo), unit weights
                path = tuple(map(int, router.path(src, dst, key)))
                got = (path, (1.0,) * len(path), sum(map(self._lat_list.__getitem__, path)), self.path_class(path))
            elif len(ex[0]) <= 1:
                path = self.path(src, dst, key, pxn)
                got = (path, (1.0,) * len(path), sum(map(self._lat_list.__getitem__, path)), self.path_class(path))
            else:
                got = self._hop_of(*self._route_uncached(src, dst, key, pxn))
        else:
            # a hop inside one unit that no flow key can change (striped over every NVSwitch chip, or
            # one host switch between the two GPUs) is computed once for all keys
            free_key = (src, dst, pxn)
            got = self._hop_key_free.get(free_key)
            if got is None:
                router = self._routers.get(pxn)
                if self.directed and router is not None and len(self._nvswitch_pairs(src, dst)) <= 1:
                    # not striped: route() is the router's path; one pass tells whether the key matters
                    path, free = router.path_key_free(src, dst, key)
                    path = tuple(map(int, path))
                    got = self._hop_of(path, (1.0,) * len(path))
                else:
                    free = self._key_free(src, dst, pxn)
                    got = self._hop_of(*self._route_uncached(src, dst, 0 if free else key, pxn))
                if free:
                    self._hop_key_free[free_key] = got
        self._hop_cache[ck] = got
        return got

    def _hop_of(self, path: tuple[int, ...], pw: tuple[float, ...]) -> tuple:
        lat = self._lat_list
        # unit weights: the same sum without the products (x * 1.0 == x)
        prop = (sum(map(lat.__getitem__, path)) if pw.count(1.0) == len(pw)
                else sum(lat[c] * x for c, x in zip(path, pw)))
        return (path, pw, prop, self.path_class(path))

    def _key_free(self, src: int, dst: int, pxn: bool) -> bool:
        """route(src, dst, key, pxn) does not depend on key (see route and topo.Router.path)."""
        if src == dst or self._unit[src] != self._unit[dst]:
            return False
        if len(self._nvswitch_pairs(src, dst)) > 1:
            return True
        router = self._routers.get(pxn)
        if router is None:
            return False
        return router.host_route_is_key_free(src, dst)

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
