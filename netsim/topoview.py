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
from array import array
from collections import defaultdict

import numpy as np

from netsim import calibration as cal
from netsim.errors import NetsimError
from netsim.protocol import link_class

# auto (default): "rail" on a rail-optimized fabric (topo.analysis.is_rail_optimized), else "ecmp";
# rail: NCCL-like rail-aligned routes for same-rail traffic (topo.Router); ecmp: per-flow hashing everywhere
ROUTINGS = ("auto", "rail", "ecmp")
# group size from which group_bandwidths reads per-GPU arrays instead of searching GPU by GPU
ARRAY_MIN_GROUP = 16
# link classes by code (TopoView._kind_codes): link_class of a set of kinds is the class of its largest code
_CLASS_NAMES = ("nvlink", "pcie", "network")
_CLASS_BY_CODE = np.array([link_class({k}) for k in _CLASS_NAMES], dtype=object)


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
    # parallel links (the dictionary pairing picks the last twin): two cables joining the same two nodes, or
    # a cable from a node to itself (its two links are parallel)
    a, b = src[0::2], dst[0::2]
    if bool(np.any(a == b)):
        return None
    key = np.sort(np.minimum(a, b) * (int(max(src.max(), dst.max())) + 1) + np.maximum(a, b))
    if bool(np.any(key[1:] == key[:-1])):
        return None
    return np.arange(n, dtype=np.int64) ^ 1


def _efficiencies(kinds: list, bw: np.ndarray, gpu_type: str, override: dict,
                  kind_codes: tuple | None = None, groups: tuple | None = None) -> tuple[np.ndarray, dict, np.ndarray]:
    """cal.link_efficiency (or the calibration's override) of every channel, evaluated once per
    distinct (kind, line rate); with the distinct kinds ({kind: code}, first-seen order) and the
    code of every channel (`kind_codes`: those two already known, topo.model.link_kind_codes).
    groups: None or (group of every channel, number of groups) with kind and line rate alike within a
    group (topo.model.LinkArrays.groups): then evaluated once per group, read at any of its channels."""
    if kind_codes is None:
        names = {k: i for i, k in enumerate(dict.fromkeys(kinds))}     # distinct kinds, first-seen order
        codes = np.fromiter(map(names.__getitem__, kinds), dtype=np.int64, count=len(kinds))
    else:
        names, codes = kind_codes
    if groups is not None:
        group, n_groups = groups
        rep = np.full(n_groups, -1, dtype=np.int64)
        rep[group] = np.arange(len(group), dtype=np.int64)      # a channel of each group (alike: any)
        eff = np.zeros(n_groups)
        for g, c in enumerate(rep.tolist()):
            if c >= 0:
                k = kinds[c]
                eff[g] = override.get(k) or cal.link_efficiency(k, float(bw[c]), gpu_type)
        return eff[group], names, codes
    out = np.empty(len(kinds))
    for k, c in names.items():
        mask = codes == c
        rates, inv = np.unique(bw[mask], return_inverse=True)
        eff = np.array([override.get(k) or cal.link_efficiency(k, float(b), gpu_type) for b in rates.tolist()])
        out[mask] = eff[inv]
    return out, names, codes


class _Adjacency:
    """node -> [(out channel, peer)] in channel order, built on first use of each node from a CSR of
    the channels (a 9,216-GPU fabric has 56,000 channels; an analytical run touches a few dozen nodes,
    a flow run thousands). The CSR is sorted on first use; a node's row is sliced from its arrays until
    _LIST_AFTER nodes were asked for, then from Python lists of all channels (cheaper per node)."""

    __slots__ = ("_src", "_dst_all", "_order", "_ptr", "_ch", "_dst", "_lists", "_rows")
    _LIST_AFTER = 256

    def __init__(self, ch_src: np.ndarray, ch_dst: np.ndarray, order: np.ndarray | None = None) -> None:
        self._src, self._dst_all = ch_src, ch_dst
        self._order = order       # channels sorted by source (stable), when known (topo.model.link_order)
        self._ptr: list[int] | None = None
        self._ch = self._dst = None
        self._lists: tuple[list[int], list[int]] | None = None
        self._rows: dict[int, list[tuple[int, int]]] = {}

    def _index(self) -> list[int]:
        src, dst = self._src, self._dst_all
        order = self._order if self._order is not None else np.argsort(src, kind="stable")
        n_nodes = int(max(src.max(), dst.max())) + 1 if len(src) else 0
        self._ptr = np.searchsorted(src[order], np.arange(n_nodes + 1)).tolist()
        self._ch, self._dst = order, dst[order]
        return self._ptr

    def __getitem__(self, node: int) -> list[tuple[int, int]]:
        got = self._rows.get(node)
        if got is None:
            ptr = self._ptr if self._ptr is not None else self._index()
            if 0 <= node < len(ptr) - 1:
                lo, hi = ptr[node], ptr[node + 1]
                lists = self._lists
                if lists is None and len(self._rows) >= self._LIST_AFTER:
                    lists = self._lists = (self._ch.tolist(), self._dst.tolist())
                if lists is not None:
                    got = list(zip(lists[0][lo:hi], lists[1][lo:hi]))
                else:
                    got = list(zip(self._ch[lo:hi].tolist(), self._dst[lo:hi].tolist()))
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
        # channels = links (directed): the topology's per-link kind codes are the channels'
        from topo.model import link_kind_codes
        eff, self._kind_names, self._kind_ids = _efficiencies(
            self.ch_kind, ch_bw, self.gpu_type, override, link_kind_codes(topology) if self.directed else None,
            la.groups if self.directed else None)
        self.line_Bps = ch_bw
        self.capacity_Bps = ch_bw * eff * ch_health
        self.latency_s = ch_lat
        from topo.model import link_order, node_arrays_of
        self._node_arrays = na = node_arrays_of(topology)
        # per node id (and any id a channel names): 1 = network switch (is_network_switch), 2 = NIC or PCIe
        # switch (exits walks through), else 0; array.array forms for reads with Python ints (made by a copy
        # of the bytes, where tolist makes an object per entry)
        n_ids = max(len(na), int(max(src.max(), dst.max())) + 1 if nl else 0)
        role = np.zeros(n_ids, dtype=np.int64)
        role[:len(na)] = np.where(na.network_switches(), 1, np.where(na.kind_is("nic") | na.tier_is("pcie"), 2, 0))
        self._role_arr = role
        self._role_list = array("q", role.tobytes())
        nvsw = np.zeros(n_ids, dtype=bool)
        nvsw[:len(na)] = na.kind_is("nvswitch")
        self._nvsw_list = array("b", nvsw.astype(np.int8).tobytes())
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
        # node -> [(out channel, peer)], built per node on use (channels = links: the topology's link order)
        self._adj = _Adjacency(self.ch_src, self.ch_dst,
                               link_order(topology) if self.directed and isinstance(topology, topo.Topology) else None)
        self._server = (topology.server_ids() if hasattr(topology, "server_ids")
                        else [int(topology.server_of(g)) for g in range(self.num_gpus)])
        if isinstance(topology, topo.Topology):
            self._domain = list(topology.nvlink_domains())      # (Python ints already)
        else:
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
        self._hop_key_free: dict[tuple, tuple] = {}
        self._routed_specs: dict[tuple, object] = {}    # netsim.resolve.route_spec results by spec content
        self._lat_list = array("d", np.ascontiguousarray(self.latency_s, dtype=np.float64).tobytes())   # as floats
        self._one_switch = None     # one_switch_hops tables, built on first use
        self._single_exit = None    # net_hops: per GPU, one channel into the network and no NIC
        self._unit_np = None        # _unit as an array, on first use
        self._domain_np = None      # _domain as an array, on first use (pair_facts_many)
        self._kind_code = None      # _kind_codes, on first use
        self._inner_uniform: bool | None = None     # hop_keys: switch-to-switch links all alike
        self._gpu_ports = None      # _per_gpu_ports, on first use

    # ------------------------------------------------------------ structure
    def server_of(self, gpu: int) -> int:
        return self._server[gpu]

    def domain_of(self, gpu: int) -> int:
        return self._domain[gpu]

    def unit_of(self, gpu: int) -> int:
        return self._unit[gpu]

    def is_network_switch(self, node: int) -> bool:
        return 0 <= node < len(self._role_list) and self._role_list[node] == 1

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
        if len(gpus) and set(map(type, gpus)) == {int} and min(gpus) >= 0 and max(gpus) < self.num_gpus:
            return          # plain ints in range (C-level passes): the loop below finds nothing
        for g in gpus:
            if not isinstance(g, int | np.integer) or g < 0 or g >= self.num_gpus:
                raise NetsimError(f"rank {g} is not a GPU of the topology (GPU ids 0..{self.num_gpus - 1})")

    def switch_channels(self, gpu: int) -> tuple[list[int], list[int]]:
        """Channels GPU -> NVSwitch and NVSwitch -> GPU (NVLS traffic)."""
        up, down = [], []
        for ch, peer in self._adj[gpu]:
            if self._nvsw_list[peer]:
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
            # the per-GPU array's entry: its NVLink channels' capacities summed in channel order from 0.0
            # (_per_gpu_ports), the sum a loop over the GPU's channels makes
            got = self._nv_out[gpu] = float(self._per_gpu_ports()[0][gpu])
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
        role = self._role_list
        while frontier:
            nxt = []
            for node in frontier:
                for ch, peer in self._adj[node]:
                    r = role[peer]
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
            nvsw = self._nvsw_list
            ups = self._nvsw_up[src] = [(ch, sw) for ch, sw in self._adj[src] if nvsw[sw]]
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

    def one_switch_hops(self, src: np.ndarray, dst: np.ndarray):
        """hop() of many GPU pairs at once where it is a two-link route through the one host switch
        (NVSwitch or PCIe switch) both GPUs hang from: each GPU has exactly one link to a host-side
        switch, both reach the same one, and the pair is inside one unit (then hop() takes
        topo.Router.path_key_free's single candidate: GPU -> switch, the switch's first link -> peer).
        Returns (mask of such pairs, first channels, second channels, propagation s, link class per
        pair) with the channel/latency/class entries valid where the mask is set; None when the
        view cannot answer (undirected links, PXN by default)."""
        if not self.directed or self.pxn_default:
            return None
        tab = self._one_switch
        if tab is None:
            tab = self._one_switch = self._one_switch_tables()
        up, down, sw, unit, kind_code, classes = tab
        ok = (sw[src] >= 0) & (sw[src] == sw[dst]) & (down[dst] >= 0) & (src != dst) & (unit[src] == unit[dst])
        l1, l2 = up[src], down[dst]
        lat = self.latency_s
        prop = lat[l1] + lat[l2]     # = sum(latency of the path) in path order (0 + a + b)
        cls = classes[kind_code[l1] * 3 + kind_code[l2]]
        return ok, l1, l2, prop, cls

    def net_hops(self, src: np.ndarray, dst: np.ndarray, keys: np.ndarray):
        """hop(src[i], dst[i], keys[i]) of many GPU pairs at once where it is topo.Router's single
        network route (Router.net_paths): pairs in different units whose source reaches the network
        through one port (then hop() is the router's path with unit weights). Returns (indices of the
        pairs answered, their channels: one row per pair in path order, -1 = none, propagation s as
        hop()'s sequential sum, link class per pair) or None when the view cannot answer."""
        if not self.directed or self.pxn_default:
            return None
        router = self._routers.get(False)
        if router is None:
            return None
        unit, kind_code = self._unit_arr(), self._kind_codes()
        one_port = self._one_port()
        cand = np.flatnonzero((unit[src] != unit[dst]) & one_port[src])
        if not len(cand):
            return None
        got = router.net_paths(src[cand], dst[cand], keys[cand])
        if got is None:
            return None
        sel, rows = got
        valid = rows >= 0
        safe = np.where(valid, rows, 0)
        lat = self.latency_s
        prop = lat[safe[:, 0]]           # 0 + the first link's latency, then link by link (sum())
        code = np.where(valid[:, 0], kind_code[safe[:, 0]], 0)
        for c in range(1, rows.shape[1]):
            prop = np.where(valid[:, c], prop + lat[safe[:, c]], prop)
            code = np.maximum(code, np.where(valid[:, c], kind_code[safe[:, c]], 0))
        return cand[sel], rows, prop, _CLASS_BY_CODE[code]

    def hop_keys(self, src: np.ndarray, dst: np.ndarray) -> np.ndarray | None:
        """Per GPU pair a row of numbers such that pairs with bit-equal rows get the same link class
        and propagation latency from the batched routes (_route_ring_like_many: one_switch_hops,
        else net_hops), without walking the network routes; None when some pair is neither of those
        or the network's switch-to-switch links differ in latency or class. A one-switch pair's row
        is (0, propagation, class code of its two links); a network pair's (1, first link's latency
        and class code, number of links between, last link's latency and class code), those links
        all of one latency and class: net_hops' sequential sum and class maximum are then functions
        of the row. The channels are not keyed."""
        got = self.one_switch_hops(src, dst)
        router = self._routers.get(False)
        if got is None or router is None:
            return None
        ok, l1, l2, prop, _cls = got
        kind_code = self._one_switch[4]
        out = np.zeros((len(src), 6), dtype=np.float64)
        out[:, 1] = prop
        out[:, 2] = kind_code[l1] * 3 + kind_code[l2]
        rest = np.flatnonzero(~ok)
        if not len(rest):
            return out
        inner = self._inner_uniform
        if inner is None:
            lids = router.inner_links()
            lat, code = self.latency_s[lids], self._kind_codes()[lids]
            inner = self._inner_uniform = bool(not len(lids) or ((lat == lat[0]).all() and (code == code[0]).all()))
        if not inner:
            return None
        a, b = src[rest], dst[rest]
        parts = router.net_hop_parts(a, b)
        if parts is None:
            return None
        ok_net, first, last, dist = parts
        if not (ok_net & (self._unit_arr()[a] != self._unit_arr()[b]) & self._one_port()[a]).all():
            return None
        lat, code = self.latency_s, self._kind_codes()
        out[rest] = np.column_stack((np.ones(len(rest)), lat[first], code[first], dist, lat[last], code[last]))
        return out

    def hop_key_routes(self, rows: np.ndarray) -> tuple[list[str], list[float]]:
        """(link class, propagation s) per row of hop_keys: what the batched routes give a hop with
        that row, computed from the row alone. A one-switch row: one_switch_hops' class of its two
        links and its sum; a network row: net_hops' sequential sum (first link, then the row's number
        of switch-to-switch links, all of one latency and class (hop_keys checked), then the last
        link) and the largest class code of those links. Only for rows hop_keys returned."""
        n = len(rows)
        prop = rows[:, 1].copy()
        net = rows[:, 0] == 1.0
        classes = np.empty(n, dtype=object)
        one = ~net
        if one.any():
            classes[one] = self._one_switch[5][rows[one, 2].astype(np.int64)]
        if net.any():
            dist = rows[net, 3].astype(np.int64)
            code = np.maximum(rows[net, 2], rows[net, 5]).astype(np.int64)
            p = rows[net, 1]
            if dist.max(initial=0) > 0:
                lid = int(self._routers[False].inner_links()[0])
                inner_lat, inner_code = self.latency_s[lid], self._kind_codes()[lid]
                for j in range(int(dist.max())):
                    p = np.where(dist > j, p + inner_lat, p)
                code = np.where(dist > 0, np.maximum(code, inner_code), code)
            prop[net] = p + rows[net, 4]
            classes[net] = _CLASS_BY_CODE[code]
        return classes.tolist(), prop.tolist()

    def _group_bandwidths_arrays(self, gpus) -> tuple[float, float] | None:
        """group_bandwidths of a group whose GPUs all have NVLink and (group across units) one
        network port each, straight from per-GPU arrays: the same minima of the same values (NVLink:
        per GPU its ports' capacities summed in channel order; network: its port's capacity over the
        group GPUs on it, capped by the same capacity). None for the other groups."""
        nv_out, one_port, port = self._per_gpu_ports()
        g = np.asarray(gpus, dtype=np.int64)
        nv = nv_out[g]
        if not len(g) or not (nv > 0.0).all():
            return None
        b_intra = float(nv.min())
        unit = self._unit_arr()[g]
        if not (unit != unit[0]).any():
            return b_intra, math.inf
        if not one_port[g].all():
            return None
        chans = port[g]
        cap = self.capacity_Bps[chans]
        # exits() of each distinct GPU (a dict by GPU); np.unique(x) alone would import numpy.ma
        users = np.bincount(np.unique(chans, return_index=True)[0])[chans]
        # exits(): share = sum over its one channel (0 + cap / users), first = its capacity (inf if 0)
        share = cap / users
        first = np.where(cap > 0, cap, math.inf)
        return b_intra, self.capacity_Bps.dtype.type(np.minimum(share, first).min())

    def nvlink_out_array(self) -> np.ndarray:
        """nvlink_out_Bps of every GPU (the same sums; cached, do not modify)."""
        return self._per_gpu_ports()[0]

    def _per_gpu_ports(self):
        """Per GPU: NVLink bandwidth out (nvlink_out_Bps), whether it has one network port and no NIC
        / PCIe switch on its host side (exits() is then that one channel), and that channel."""
        got = self._gpu_ports
        if got is None:
            G = self.num_gpus
            src = self.ch_src
            nvl = (self._kind_ids == self._kind_names.get("nvlink", -1)) & (src < G)
            # bincount adds in channel order from 0.0: nvlink_out_Bps's sum over _adj (channel order)
            nv_out = np.bincount(src[nvl], weights=self.capacity_Bps[nvl], minlength=G)[:G]
            one_port = self._one_port()
            port = np.full(G, -1, dtype=np.int64)
            role = self._roles()
            lids = np.flatnonzero((src < G) & (role[self.ch_dst] == 1))
            port[src[lids]] = lids
            port[~one_port] = 0
            got = self._gpu_ports = (nv_out, one_port, port)
        return got

    def _roles(self) -> np.ndarray:
        """Exit roles (1 network switch, 2 NIC / PCIe switch, 0 other) as an array by node id."""
        return self._role_arr

    def _one_port(self) -> np.ndarray:
        """Per GPU: exits() is one channel into a network switch (no NIC / PCIe switch to cross)."""
        got = self._single_exit
        if got is None:
            G = self.num_gpus
            role = self._roles()
            src_g = self.ch_src < G
            r_dst = role[self.ch_dst]
            n = np.bincount(self.ch_src[src_g & (r_dst == 1)], minlength=G)
            other = np.bincount(self.ch_src[src_g & (r_dst == 2)], minlength=G) > 0
            got = self._single_exit = (n[:G] == 1) & ~other[:G]
        return got

    def _unit_arr(self) -> np.ndarray:
        got = self._unit_np
        if got is None:
            got = self._unit_np = np.asarray(self._unit, dtype=np.int64)
        return got

    def _kind_codes(self) -> np.ndarray:
        """Per channel its link class as a code (0 nvlink, 1 pcie, 2 network; other kinds count as
        nvlink, as link_class reads them): a path's class is its largest code."""
        got = self._kind_code
        if got is None:
            code = {k: i for i, k in enumerate(_CLASS_NAMES)}
            by_id = np.array([code.get(k, 0) for k in self._kind_names] or [0], dtype=np.int64)
            got = self._kind_code = by_id[self._kind_ids]
        return got

    def _one_switch_tables(self):
        G = self.num_gpus
        na = self._node_arrays
        hostsw = np.zeros(max(len(na), int(self.ch_dst.max()) + 1 if len(self.ch_dst) else 0), dtype=bool)
        hostsw[:len(na)] = na.host_switches()      # topo.Router's host switches: NVSwitch chips, PCIe switches
        src, dst = self.ch_src, self.ch_dst
        lids = np.flatnonzero((src < G) & hostsw[dst])
        count = np.bincount(src[lids], minlength=G)
        up = np.full(G, -1, dtype=np.int64)
        sw = np.full(G, -1, dtype=np.int64)
        up[src[lids]] = lids             # kept only where the GPU has exactly one such link
        sw[src[lids]] = dst[lids]
        sw[count != 1] = -1
        down = np.full(G, -1, dtype=np.int64)
        back = np.flatnonzero(hostsw[src] & (dst < G))          # switch -> GPU, ascending ids
        back = back[src[back] == sw[dst[back]]]
        gpus, first = np.unique(dst[back], return_index=True)   # the switch's first link to each GPU
        down[gpus] = back[first]
        unit, kind_code = self._unit_arr(), self._kind_codes()
        classes = np.array([link_class({a, b}) for a in _CLASS_NAMES for b in _CLASS_NAMES], dtype=object)
        return up, down, sw, unit, kind_code, classes

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
        # the array path pays numpy's per-call overhead: it wins from a few dozen GPUs up (a 2-GPU send
        # pair is 3x slower with it); both give the same values
        got = self._group_bandwidths_arrays(gpus) if len(gpus) >= ARRAY_MIN_GROUP else None
        if got is not None:
            return got
        if len(gpus) == 2 and gpus[0] != gpus[1]:
            return self._pair_bandwidths(int(gpus[0]), int(gpus[1]))
        return self._group_bandwidths_search(gpus)

    def _group_bandwidths_search(self, gpus) -> tuple[float, float]:
        """group_bandwidths GPU by GPU (any group)."""
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

    def _pair_bandwidths(self, a: int, b: int) -> tuple[float, float]:
        """group_bandwidths of two distinct GPUs (every send pair of a pipeline): the same values from
        the same terms in the same order, without the general case's per-unit tables. A channel of
        one GPU's exits is used by 2 group members when the other GPU exits through it too (exits
        are distinct per GPU)."""
        unit = self._unit
        same = unit[a] == unit[b]
        b_intra = math.inf
        for g, peer in ((a, b), (b, a)):
            nv = self.nvlink_out_Bps(g)
            if nv <= 0.0:
                if not same:
                    continue
                nv = min(self.capacity_Bps[c] for c in self.path(g, peer, 0))
            b_intra = min(b_intra, nv)
        if same:
            return b_intra, math.inf
        cap = self.capacity_Bps     # numpy scalars, as group_bandwidths sums (a zero share stays a float64)
        ex = self._exits
        ca, fa = ex.get(a) or self.exits(a)
        cb, fb = ex.get(b) or self.exits(b)
        b_net = math.inf
        for chans, first, other in ((ca, fa, cb), (cb, fb, ca)):
            if not chans:
                continue
            share = sum(cap[c] / 2 if c in other else cap[c] / 1 for c in chans)
            b_net = min(b_net, share, first if first > 0 else math.inf)
        return b_intra, b_net

    def pair_facts_many(self, a: np.ndarray, b: np.ndarray) -> tuple[list, list, list, list]:
        """Of many pairs of distinct GPUs (a[i], b[i]) at once: (both in one unit, both in one NVLink
        domain, group_bandwidths((a[i], b[i])), NVLink on both or not in one unit: GroupFacts.ll128_ok)
        as lists. The bandwidths are _pair_bandwidths' values
        and types from arrays where its terms are per-GPU entries: NVLink out of each GPU that has
        it (a Python float: inf when neither has it, pairs across units), and - pairs across units
        whose GPUs each have one network port and no NIC to cross (exits() = that one channel, first
        = its capacity) - the smaller of the two ports' capacities as a numpy float (the one-use
        shares; distinct GPUs never share such a port). Other pairs (same unit without NVLink on
        both, a multi-port or NIC GPU) take _pair_bandwidths itself."""
        unit = self._unit_arr()
        dom = self._domain_np
        if dom is None:
            dom = self._domain_np = np.asarray(self._domain, dtype=np.int64)
        nv_out, one_port, port = self._per_gpu_ports()
        same = unit[a] == unit[b]
        nva, nvb = nv_out[a], nv_out[b]
        # a GPU without NVLink is left out of b_intra across units; inside one unit it needs its path
        b_intra = np.minimum(np.where(nva > 0.0, nva, math.inf), np.where(nvb > 0.0, nvb, math.inf))
        easy = np.where(same, (nva > 0.0) & (nvb > 0.0), one_port[a] & one_port[b])
        cap = self.capacity_Bps
        # numpy floats, as _pair_bandwidths sums (no channels at all: no pair is easy across units)
        b_net = list(np.minimum(cap[port[a]], cap[port[b]])) if len(cap) else [math.inf] * len(a)
        bw = []
        for i, (s, e, x, y) in enumerate(zip(same.tolist(), easy.tolist(), b_intra.tolist(), b_net)):
            if not e:
                bw.append(self._pair_bandwidths(int(a[i]), int(b[i])))
            else:
                bw.append((x, math.inf) if s else (x, y))
        ll128 = (~same | ((nva > 0.0) & (nvb > 0.0))).tolist()
        return same.tolist(), (dom[a] == dom[b]).tolist(), bw, ll128
