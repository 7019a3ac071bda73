"""Topology data model: nodes, directed links, and GPU lookups.

A cable is two directed links with consecutive ids (2k: as written, 2k+1: reverse); this keeps the
one-line-per-cable mapping of SimAI files so that a file read and written back is unchanged.

Node kinds: "gpu", "nvswitch", "nic", "switch". Tiers: "gpu", "nvswitch", "nic", "pcie" (a PCIe
switch inside a server), and for network switches "asw" (ToR / leaf / edge), "psw" (spine /
aggregation, one pod), "csw" (core, across pods), "t4"... above. Link kinds: "nvlink", "pcie",
"network". Bandwidths are bytes/s in one direction, latencies seconds.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields

NODE_KINDS = ("gpu", "nvswitch", "nic", "switch")
LINK_KINDS = ("nvlink", "pcie", "network")
NETWORK_TIERS = ("asw", "psw", "csw")


@dataclass(frozen=True, slots=True)
class Node:
    """A topology node: a GPU, NVSwitch, NIC or network switch."""
    id: int
    kind: str   # "gpu" | "nvswitch" | "nic" | "switch"
    tier: str   # "gpu" | "nvswitch" | "nic" | "pcie" | "asw" | "psw" | "csw" | "t<n>"


@dataclass(frozen=True, slots=True)
class Link:
    """A directed link: bandwidth (B/s), latency (s), kind and error rate."""
    id: int
    src: int
    dst: int
    bandwidth_Bps: float
    latency_s: float
    kind: str                      # "nvlink" | "pcie" | "network"
    error_rate: float = 0.0
    # ns-3 strings as written / read (so files round-trip byte for byte); not part of equality
    rate_text: str = field(default="", compare=False, repr=False)
    delay_text: str = field(default="", compare=False, repr=False)
    # share of the (efficiency-scaled) capacity a degraded link still delivers (topo.faults); 1 = healthy
    capacity_factor: float = 1.0


def node_maker():
    """A function with Node's positional signature that builds the same frozen Node faster, through the
    slots' descriptors (as link_maker; 10,900 nodes in a 9,216-GPU fabric)."""
    names = ("id", "kind", "tier")
    if tuple(f.name for f in fields(Node)) != names:   # a new field must be set here too
        raise AssertionError("topo.model.node_maker: Node's fields changed")
    new = Node.__new__
    s_id, s_kind, s_tier = (Node.__dict__[n].__set__ for n in names)

    def make(id, kind, tier):
        nd = new(Node)
        s_id(nd, id)
        s_kind(nd, kind)
        s_tier(nd, tier)
        return nd
    return make


def link_maker():
    """A function with Link's positional signature (id .. delay_text; capacity_factor 1) that builds the
    same frozen Link about twice as fast: it fills the slots through their descriptors instead of the
    frozen __init__'s ten object.__setattr__ calls (1.6 us a link; 56,000 links in a 9,216-GPU fabric)."""
    names = ("id", "src", "dst", "bandwidth_Bps", "latency_s", "kind", "error_rate", "rate_text", "delay_text",
             "capacity_factor")
    if tuple(f.name for f in fields(Link)) != names:   # a new field must be set here too
        raise AssertionError("topo.model.link_maker: Link's fields changed")
    new = Link.__new__
    s_id, s_src, s_dst, s_bw, s_lat, s_kind, s_er, s_rt, s_dt, s_cf = (Link.__dict__[n].__set__ for n in names)

    def make(id, src, dst, bandwidth_Bps, latency_s, kind, error_rate=0.0, rate_text="", delay_text=""):
        lk = new(Link)
        s_id(lk, id)
        s_src(lk, src)
        s_dst(lk, dst)
        s_bw(lk, bandwidth_Bps)
        s_lat(lk, latency_s)
        s_kind(lk, kind)
        s_er(lk, error_rate)
        s_rt(lk, rate_text)
        s_dt(lk, delay_text)
        s_cf(lk, 1.0)
        return lk
    return make


class _LazyTuple(Sequence):
    """A tuple made on first use by `make()`, with its length known before; `arrays` holds the builder's
    columns of the same items (LazyLinks, LazyNodes). It behaves as the tuple: equal and hashed like
    it, slices and `+` give tuples, pickled as the tuple."""

    __slots__ = ("_n", "_make", "_items", "arrays")

    def __init__(self, n: int, make, arrays=None) -> None:
        self._n = n
        self._make = make
        self._items: tuple | None = None
        self.arrays = arrays

    def _all(self) -> tuple:
        if self._items is None:
            items = tuple(self._make())
            if len(items) != self._n:
                raise AssertionError(f"topo.model.{type(self).__name__}: made {len(items)} items, expected {self._n}")
            self._items, self._make = items, None
        return self._items

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i):
        return self._all()[i]

    def __iter__(self):
        return iter(self._all())

    def __reversed__(self):
        return reversed(self._all())

    def __contains__(self, x) -> bool:
        return x in self._all()

    def __eq__(self, other) -> bool:
        if isinstance(other, _LazyTuple):
            other = other._all()
        return self._all() == other if isinstance(other, tuple) else NotImplemented

    def __hash__(self) -> int:
        return hash(self._all())

    def __add__(self, other):
        return self._all() + tuple(other)

    def __radd__(self, other):
        return tuple(other) + self._all()

    def __repr__(self) -> str:
        return repr(self._all())

    def __reduce__(self):
        return (tuple, (self._all(),))


class LazyLinks(_LazyTuple):
    """Topology.links of a built fabric: the Link tuple is made on first use (a built 9,216-GPU fabric
    has 56,000 links, and a simulation reads only the per-link columns of Topology.link_arrays).
    `arrays` (the builder's LinkArrays of the same links) serves link_arrays() of every Topology
    holding it (dataclasses.replace of other fields keeps them)."""

    __slots__ = ()


class LazyNodes(_LazyTuple):
    """Topology.nodes of a built fabric: the Node tuple is made on first use (10,900 nodes in a 9,216-GPU
    fabric; a simulation reads only the per-node columns of Topology.node_arrays, kept in `arrays`)."""

    __slots__ = ()


def is_host_side(node: Node) -> bool:
    """Nodes inside a server / NVLink domain: NVSwitch chips, PCIe switches and NICs."""
    return node.kind in ("nvswitch", "nic") or node.tier == "pcie"


def is_network_switch(node: Node) -> bool:
    return node.kind == "switch" and node.tier != "pcie"


@dataclass(frozen=True)
class Topology:
    """A cluster: GPUs 0..num_gpus-1 first, then host-side switches, NICs, network switches.

    `nvlink_domain_size` is the number of GPUs that reach each other over NVLink (the server for
    HGX boxes, 36/72 for NVL racks, 1 for PCIe-only servers).
    """

    num_gpus: int
    gpus_per_server: int
    gpu_type: str
    nvlink_domain_size: int
    nodes: tuple[Node, ...]
    links: tuple[Link, ...]
    name: str = field(default="", compare=False)
    notes: tuple[str, ...] = field(default=(), compare=False)
    _cache: dict = field(default_factory=dict, init=False, compare=False, repr=False)

    # ---- sizes -------------------------------------------------------------------------------
    @property
    def num_servers(self) -> int:
        return -(-self.num_gpus // self.gpus_per_server)

    @property
    def num_cables(self) -> int:
        return len(self.links) // 2

    def nodes_of_tier(self, tier: str) -> list[int]:
        return [n.id for n in self.nodes if n.tier == tier]

    def network_tiers(self) -> list[str]:
        """Network switch tiers from the GPUs upward (e.g. ["asw", "psw", "csw"])."""
        seen: dict[str, None] = {}
        for n in self.nodes:
            if is_network_switch(n):
                seen.setdefault(n.tier, None)
        return sorted(seen, key=tier_rank)

    # ---- adjacency (lazy, cached) --------------------------------------------------------------
    def out_links(self, node: int) -> list[Link]:
        adj = self._cache.get("out")
        if adj is None:
            adj = [[] for _ in self.nodes]
            for link in self.links:
                adj[link.src].append(link)
            self._cache["out"] = adj
        return adj[node]

    # ---- GPU lookups ---------------------------------------------------------------------------
    def _check_gpu(self, gpu: int) -> None:
        if not 0 <= gpu < self.num_gpus:
            raise IndexError(f"GPU {gpu} out of range 0..{self.num_gpus - 1}")

    def server_of(self, gpu: int) -> int:
        self._check_gpu(gpu)
        return gpu // self.gpus_per_server

    def server_ids(self) -> list[int]:
        """server_of of every GPU (a new list)."""
        import numpy as np
        return (np.arange(self.num_gpus, dtype=np.int64) // self.gpus_per_server).tolist()

    def gpus_of_server(self, server: int) -> range:
        lo = server * self.gpus_per_server
        return range(lo, min(lo + self.gpus_per_server, self.num_gpus))

    def nvlink_domain_of(self, gpu: int) -> int:
        """Index of the NVLink domain (GPUs joined through NVSwitch nodes); numbered by lowest GPU."""
        self._check_gpu(gpu)
        dom = self._cache.get("domain")
        if dom is None:
            dom = _nvlink_domains(self)
            self._cache["domain"] = dom
        return dom[gpu]

    def tors_of(self, gpu: int) -> tuple[int, ...]:
        """Network switches a GPU reaches first (through its NIC / PCIe switch when modelled)."""
        self._check_gpu(gpu)
        return tuple(sorted({p[-1] for p in self.gpu_ports(gpu)}))

    def tor_of(self, gpu: int) -> int:
        """The first (lowest id) ToR of a GPU; -1 for a GPU without a network link."""
        tors = self.tors_of(gpu)
        return tors[0] if tors else -1

    def rail_of(self, gpu: int) -> int:
        """Rail = index of the GPU's NIC within its server (the GPU's local index when the GPU is
        its own NIC endpoint, as in SimAI)."""
        self._check_gpu(gpu)
        rails = self._cache.get("rail")
        if rails is None:
            rails = _rails(self)
            self._cache["rail"] = rails
        return rails[gpu]

    def network_bandwidth_of(self, gpu: int) -> float:
        """Scale-out bandwidth of one GPU (bytes/s, one direction): the sum over its exits of the
        NIC/ToR link rate shared by the GPUs using that NIC, capped by the GPU-side (PCIe) links."""
        self._check_gpu(gpu)
        users = self._cache.get("nic_users")
        if users is None:
            users = {}
            for g in range(self.num_gpus):
                for p in self.gpu_ports(g):
                    users.setdefault(p[-2], set()).add(g)
            users = {k: len(v) for k, v in users.items()}
            self._cache["nic_users"] = users
        total = 0.0
        seen: set[tuple[int, int]] = set()
        for p in self.gpu_ports(gpu):
            if (p[-2], p[-1]) in seen:
                continue
            seen.add((p[-2], p[-1]))
            hops = [self._link(a, b).bandwidth_Bps for a, b in zip(p, p[1:])]
            share = hops[-1] / (users[p[-2]] if p[-2] != gpu else 1)
            total += min([share] + hops[:-1])
        return total

    def _link(self, a: int, b: int) -> Link:
        for lk in self.out_links(a):
            if lk.dst == b:
                return lk
        raise KeyError((a, b))

    def nic_rail(self, nic: int) -> int:
        """Rail (index within its server) of a NIC node; -1 if no GPU uses it."""
        if "nic_rail" not in self._cache:
            self._cache["rail"] = _rails(self)
        return self._cache.get("nic_rail", {}).get(nic, -1)

    def nvlink_domains(self) -> list[int]:
        """NVLink domain index of every GPU (nvlink_domain_of for all GPUs at once; cached, do not modify)."""
        dom = self._cache.get("domain")
        if dom is None:
            dom = _nvlink_domains(self)
            self._cache["domain"] = dom
        return dom

    def host_components(self) -> list[int]:
        """Per GPU the lowest node id joined to it through NVSwitch / PCIe switches, -1 without such
        switches (topo.Router's host components; cached, do not modify; topo.fabric's builders fill it)."""
        got = self._cache.get("host_components")
        if got is None:
            from topo.routing import _host_components  # (topo.routing imports this module)
            got = self._cache["host_components"] = _host_components(self, self.node_arrays().host_switches())
        return got

    def rails(self) -> list[int]:
        """rail_of of every GPU (cached, do not modify)."""
        if self.num_gpus:
            self.rail_of(0)
        return self._cache.get("rail", [])

    def rail_array(self):
        """rails() as an int64 numpy array (cached, do not modify)."""
        got = self._cache.get("rail_array")
        if got is None:
            import numpy as np
            got = self._cache["rail_array"] = np.asarray(self.rails(), dtype=np.int64)
        return got

    def link_arrays(self) -> LinkArrays:
        """Per-link numpy columns (cached): what route and capacity tables need, without a Python loop
        over Link objects in each consumer (netsim.TopoView, topo.Router)."""
        return self._columns("link_arrays", self.links, _link_arrays)

    def node_arrays(self) -> NodeArrays:
        """Per-node kind and tier codes (cached; the builder's when its LazyNodes carry them)."""
        return self._columns("node_arrays", self.nodes, _node_arrays)

    def _columns(self, key: str, items, make):
        """The cached columns `key` of links or nodes: the builder's (a _LazyTuple's `arrays`), else
        make(items)."""
        got = self._cache.get(key)
        if got is None:
            got = items.arrays if isinstance(items, _LazyTuple) and items.arrays is not None else None
            if got is None:
                got = make(items)
            self._cache[key] = got
        return got

    def gpu_ports(self, gpu: int) -> list[tuple[int, ...]]:
        """Shortest host-side exits of a GPU: node paths (gpu, [pcie..., nic], network switch)."""
        ports = self._cache.setdefault("ports", {})
        got = ports.get(gpu)
        if got is None:
            got = ports[gpu] = _direct_ports(self, gpu) or _ports(self, gpu)
        return got


@dataclass(frozen=True)
class LinkArrays:
    """Columns of Topology.links (index = link id): src / dst node ids (int64), bandwidth_Bps, latency_s,
    health = capacity_factor x (1 - error_rate) (float64), kind (list of str); kind_codes: None or, from
    a builder that knows them, link_kind_codes' value ({kind: code} in first-seen order, codes); groups:
    None or, from a builder, (group of every link (int64), number of groups) where the links of a group
    share kind, bandwidth_Bps, latency_s and health (per-link values can then be computed per group)."""
    src: object
    dst: object
    bandwidth_Bps: object
    latency_s: object
    health: object
    kind: list
    kind_codes: tuple | None = field(default=None, compare=False, repr=False)
    groups: tuple | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class NodeArrays:
    """Columns of Topology.nodes by node id: kind and tier of every node as int64 codes into `kinds` /
    `tiers` (the distinct names in first-seen order). An id no node has (a topology-like object whose
    ids leave gaps) gets kind and tier "" (no node kind or tier is empty)."""
    kinds: tuple
    kind: object
    tiers: tuple
    tier: object

    def __len__(self) -> int:
        return len(self.kind)

    def kind_is(self, name: str):
        """Boolean numpy mask by node id: kind == name."""
        return self.kind == (self.kinds.index(name) if name in self.kinds else -1)

    def tier_is(self, name: str):
        """Boolean numpy mask by node id: tier == name."""
        return self.tier == (self.tiers.index(name) if name in self.tiers else -1)

    def network_switches(self):
        """Boolean numpy mask by node id: is_network_switch."""
        return self.kind_is("switch") & ~self.tier_is("pcie")

    def host_switches(self):
        """Boolean numpy mask by node id: NVSwitch chips and PCIe switches (topo.Router's host switches)."""
        return self.kind_is("nvswitch") | self.tier_is("pcie")


def node_arrays_of(t) -> NodeArrays:
    """Per-node columns of any topology-like object: its cached node_arrays() when it has one
    (topo.Topology), else computed from its nodes (placed by their ids)."""
    return t.node_arrays() if hasattr(t, "node_arrays") else _node_arrays(tuple(t.nodes))


def _node_arrays(nodes) -> NodeArrays:
    import numpy as np
    ids = [n.id for n in nodes]
    kinds_of = [str(n.kind) for n in nodes]
    tiers_of = [str(n.tier) for n in nodes]
    size = max(ids) + 1 if ids else 0
    if ids != list(range(size)):       # gaps or another order: ids without a node read as ""
        kind_by_id, tier_by_id = [""] * size, [""] * size
        for i, k, tr in zip(ids, kinds_of, tiers_of):
            kind_by_id[i], tier_by_id[i] = k, tr
        kinds_of, tiers_of = kind_by_id, tier_by_id

    def codes(values: list) -> tuple[tuple, object]:
        names = {k: i for i, k in enumerate(dict.fromkeys(values))}
        return tuple(names), np.fromiter(map(names.__getitem__, values), dtype=np.int64, count=len(values))

    return NodeArrays(*codes(kinds_of), *codes(tiers_of))


def link_arrays_of(t) -> LinkArrays:
    """Per-link columns of any topology-like object: its cached link_arrays() when it has one
    (topo.Topology), else computed from its links."""
    return t.link_arrays() if hasattr(t, "link_arrays") else _link_arrays(tuple(t.links))


def link_kind_mask(t, kind: str):
    """Boolean numpy mask of the links of `kind` (link_arrays_of(t).kind == kind)."""
    names, codes = link_kind_codes(t)
    return codes == names.get(kind, -1)


def link_kind_codes(t) -> tuple[dict, object]:
    """({kind: code} numbering the distinct link kinds in first-seen order, per-link code array (int64));
    computed once per Topology (cached; the builder's when its LinkArrays carry them). Do not modify."""
    import numpy as np
    cache = getattr(t, "_cache", None)
    got = cache.get("kind_codes") if isinstance(cache, dict) else None
    if got is None:
        la = link_arrays_of(t)
        got = la.kind_codes
        if got is None:
            kinds = la.kind
            names = {k: i for i, k in enumerate(dict.fromkeys(kinds))}
            got = (names, np.fromiter(map(names.__getitem__, kinds), dtype=np.int64, count=len(kinds)))
        if isinstance(cache, dict):
            cache["kind_codes"] = got
    return got


def _link_arrays(links) -> LinkArrays:
    from operator import attrgetter

    import numpy as np
    n = len(links)

    def col(name: str, dtype):
        return np.fromiter(map(attrgetter(name), links), dtype=dtype, count=n)

    return LinkArrays(col("src", np.int64), col("dst", np.int64), col("bandwidth_Bps", np.float64),
                      col("latency_s", np.float64),
                      col("capacity_factor", np.float64) * (1.0 - col("error_rate", np.float64)),
                      list(map(attrgetter("kind"), links)))


def tier_rank(tier: str) -> int:
    if tier in NETWORK_TIERS:
        return NETWORK_TIERS.index(tier)
    if tier.startswith("t") and tier[1:].isdigit():
        return int(tier[1:]) - 1
    return 99


def tier_name(level: int) -> str:
    """Network tier name of level 1, 2, 3, ... (1 = attached to GPUs / NICs)."""
    return NETWORK_TIERS[level - 1] if level <= len(NETWORK_TIERS) else f"t{level}"


class DisjointSets:
    """Union-find over node ids 0..n-1 (path halving; the smaller root becomes the parent)."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, x: int) -> int:
        parent = self.parent
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    def union(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)


def _nvlink_domains(t: Topology) -> list[int]:
    """Per GPU: index of its NVLink component (nodes joined by NVLink links), numbered in order of
    the components' first GPU. Components: min-label propagation with pointer jumping over the NVLink
    links (each node ends with its component's lowest id), vectorised over all links."""
    import numpy as np
    G = t.num_gpus
    if G == 0:
        return []
    la = t.link_arrays()
    nv = link_kind_mask(t, "nvlink")
    src, dst = la.src[nv], la.dst[nv]
    label = np.arange(len(t.nodes), dtype=np.int64)
    while True:
        new = label.copy()
        np.minimum.at(new, src, label[dst])
        np.minimum.at(new, dst, label[src])
        new = new[new]     # a node's label is a node of its component with a lower id: jump to its label
        if np.array_equal(new, label):
            break
        label = new
    roots = label[:G]
    uniq, first = np.unique(roots, return_index=True)
    rank = np.empty(len(uniq), dtype=np.int64)
    rank[np.argsort(first, kind="stable")] = np.arange(len(uniq))
    return rank[np.searchsorted(uniq, roots)].tolist()


def network_switch_mask(t: Topology):
    """Boolean numpy array by node id: is_network_switch (cached; do not modify)."""
    got = t._cache.get("net_mask")
    if got is None:
        got = t._cache["net_mask"] = t.node_arrays().network_switches()
    return got


def link_order(t: Topology):
    """Link ids sorted by source node, link id order within a node (a stable sort; the order of every
    out-link CSR: netsim.TopoView's adjacency, topo.Router's). Cached; do not modify."""
    got = t._cache.get("link_order")
    if got is None:
        got = t._cache["link_order"] = stable_order(t.link_arrays().src)
    return got


def stable_order(keys):
    """np.argsort(keys, kind="stable") of an int array; keys in [0, 2^16) are sorted as uint16, for which
    numpy's stable sort is a radix sort (the same order, faster)."""
    import numpy as np
    if len(keys) and int(keys.min()) >= 0 and int(keys.max()) < 1 << 16:
        keys = keys.astype(np.uint16)
    return np.argsort(keys, kind="stable")


def direct_gpu_links(t: Topology):
    """(GPU, network switch) node arrays of every link from a GPU straight to a network switch, in link
    order (cached), and whether every GPU has such a link (then each GPU's ports are exactly these: the
    GPU is its own NIC endpoint, as in SimAI's fabrics)."""
    got = t._cache.get("direct_links")
    if got is None:
        import numpy as np
        la = t.link_arrays()
        net = network_switch_mask(t)
        sel = np.flatnonzero((la.src < t.num_gpus) & net[la.dst])     # ascending link ids = out_links order
        g, sw = la.src[sel], la.dst[sel]
        every = bool(t.num_gpus) and bool((np.bincount(g, minlength=t.num_gpus) > 0).all())
        got = t._cache["direct_links"] = (g, sw, every)
    return got


def _direct_ports(t: Topology, gpu: int) -> list[tuple[int, ...]]:
    """_ports of a GPU when it links straight to a network switch (the BFS stops at its first level
    there, with those links in link order), else []: read from a per-GPU table of direct_gpu_links
    (made on first use, so routing one GPU does not build every GPU's port list)."""
    tab = t._cache.get("direct_ports")
    if tab is None:
        import numpy as np
        g_arr, sw_arr, _ = direct_gpu_links(t)
        order = np.argsort(g_arr, kind="stable")      # stable: each GPU's links stay in link order
        ptr = np.searchsorted(g_arr[order], np.arange(t.num_gpus + 1)).tolist()
        tab = t._cache["direct_ports"] = (ptr, sw_arr[order])
    ptr, sws = tab
    if not 0 <= gpu < t.num_gpus:
        return []
    lo, hi = ptr[gpu], ptr[gpu + 1]
    return [(gpu, sw) for sw in sws[lo:hi].tolist()]


def _ports(t: Topology, gpu: int) -> list[tuple[int, ...]]:
    """BFS from the GPU through PCIe switches / NICs (a NIC only forwards host -> network) to the
    first network switches; keep the shortest exits."""
    nodes = t.nodes
    frontier = [(gpu,)]
    seen = {gpu}
    while frontier:
        found: list[tuple[int, ...]] = []
        nxt: list[tuple[int, ...]] = []
        for path in frontier:
            here = nodes[path[-1]]
            for link in t.out_links(path[-1]):
                v = nodes[link.dst]
                if is_network_switch(v):
                    found.append(path + (v.id,))
                elif v.id not in seen and (v.kind == "nic" or v.tier == "pcie") and here.kind != "nic":
                    seen.add(v.id)
                    nxt.append(path + (v.id,))
        if found:
            return found
        frontier = nxt
    return []


def _rails(t: Topology) -> list[int]:
    if direct_gpu_links(t)[2]:
        # every GPU is its own network endpoint (no NIC node on any port): the rail is the local index
        t._cache["nic_rail"] = {}
        import numpy as np
        return (np.arange(t.num_gpus, dtype=np.int64) % t.gpus_per_server).tolist()
    rails = []
    nic_index: dict[int, int] = {}
    done: set[int] = set()
    for g in range(t.num_gpus):
        ports = t.gpu_ports(g)
        # a GPU whose ports all go straight to a switch (SimAI: the GPU is its own NIC) has no NIC
        nics = sorted({p[-2] for p in ports if len(p) > 2 and t.nodes[p[-2]].kind == "nic"}) \
            if any(len(p) > 2 for p in ports) else ()
        if not nics:
            rails.append(g % t.gpus_per_server)
            continue
        server = g // t.gpus_per_server
        if server not in done:
            # NICs of this server in id order define the rails
            found = set()
            for h in t.gpus_of_server(server):
                for p in t.gpu_ports(h):
                    if len(p) > 2 and t.nodes[p[-2]].kind == "nic":
                        found.add(p[-2])
            for i, nic in enumerate(sorted(found)):
                nic_index[nic] = i
            done.add(server)
        rails.append(nic_index[nics[0]])
    t._cache["nic_rail"] = dict(nic_index)
    return rails


def with_nvlink_rate(t: Topology, bandwidth_Bps: float, rate_text: str = "") -> Topology:
    """`t` with every NVLink link at `bandwidth_Bps` (one direction); other links, nodes and notes kept."""
    from dataclasses import replace
    links = tuple(replace(lk, bandwidth_Bps=float(bandwidth_Bps), rate_text=rate_text) if lk.kind == "nvlink" else lk
                  for lk in t.links)
    return replace(t, links=links)
