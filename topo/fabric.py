"""Generic cluster builder: servers (NVLink / PCIe / NICs) + a rail-optimized or ToR-grouped Clos.

One engine builds SimAI's templates (same numbering and cable order as its generator, so the files
are byte-identical) and clustersim's extensions (several pods under a core tier with chosen
oversubscription, NVL36/NVL72 domains, NVSwitch chips, NIC nodes, PCIe-only servers).

Numbering: GPUs, host-side switches (NVSwitch nodes or PCIe switches), NICs, ASWs (pod by pod;
within a pod bank 1 then bank 2), PSWs (pod by pod), core switches. Cable order: per GPU its host
links then its ToR links; PCIe-switch interconnects; per NIC its host links then its ToR links;
ASW-PSW (ASW-major); PSW-core (PSW-major).
"""

from __future__ import annotations

import gc
import math
from dataclasses import dataclass

from topo.errors import TopoError
from topo.limits import ALLOW_HUGE_ENV, MAX_CABLES, MAX_NODES, over_limit
from topo.model import LazyLinks, LazyNodes, LinkArrays, NodeArrays, Topology, link_maker, node_maker


@dataclass(frozen=True)
class Rate:
    """A bandwidth (bytes/s, one direction) or latency (s) with the ns-3 text written to files."""
    value: float
    text: str


@dataclass
class FabricSpec:
    """Parameters of a generated fabric (SimAI's generator flags where they exist)."""
    gpus: int
    gpus_per_server: int
    gpu_type: str
    error_rate: float = 0.0
    # ---- inside a server / NVLink domain ----
    host: str = "simai"                 # "simai" | "chips" | "pcie"
    nvlink_domain_size: int = 0         # 0 = gpus_per_server
    nvswitch_count: int = 1             # per server ("simai") or per domain ("chips")
    nvlink: Rate | None = None          # simai: per GPU-NVSwitch link; chips: per GPU, split over chips
    nvlink_latency: Rate | None = None
    nvlink_chip_links: tuple[int, ...] = ()  # chips: NVLink ports per GPU to each chip (H100: 5,4,4,5)
    pcie: Rate | None = None            # GPU-PCIe switch / GPU-NIC / NIC-PCIe links
    pcie_latency: Rate | None = None
    pcie_switches_per_server: int = 2
    nics: bool = False                  # NIC nodes (else the GPU is its own NIC endpoint, as SimAI)
    gpus_per_nic: int = 1
    # ---- network ----
    network: bool = True
    rail_optimized: bool = True
    dual_tor: bool = False
    dual_plane: bool = False
    nic: Rate | None = None             # endpoint-ASW link (per port)
    latency: Rate | None = None         # delay of every network link
    nics_per_asw: int = 64              # endpoints per ASW (SimAI -npa)
    psw_per_pod: int = 64               # SimAI -psn
    asw_per_psw: int = 64               # SimAI -app (capacity check)
    asw_psw: Rate | None = None         # SimAI -apbw
    asw_requested: int | None = None    # SimAI -asn, corrected with a note
    pods: int = 0                       # 0 = as many as needed (1 if it fits)
    segments_per_pod: int = 0           # 0 = the most the capacity check allows
    core: bool = False                  # force a core tier even with one pod
    core_oversubscription: float = 1.0  # PSW down bandwidth / PSW up bandwidth
    core_radix: int = 64                # ports per core switch, sets cores per group
    fat_tree_k: int = 0                 # > 0: classic k-ary fat-tree instead of the SimAI-style pod
    label: str = ""                     # flag names used in error messages, e.g. "-g"


class _Builder:
    """Nodes and cables in build order. A cable is kept as its two end nodes and a link class (rate,
    delay, kind, error rate); topology() turns them into the per-link columns (Topology.link_arrays)
    with numpy and leaves the Node and Link objects to be made on first use (topo.model.LazyNodes,
    LazyLinks), since a simulation reads only the columns."""

    def __init__(self) -> None:
        self.n_nodes = 0
        self.blocks: list[tuple[int, str, str]] = []     # nodes in id order: runs of (count, kind, tier)
        # cables in order: `parts` holds blocks of them as arrays (ends: a, b of each cable, flat; link
        # 2k = a -> b, 2k+1 = b -> a; cls: per cable an index into classes); `ends` / `cls` are the lists
        # appended to after the last block
        self.parts: list[tuple] = []
        self.ends: list[int] = []
        self.cls: list[int] = []
        self.classes: list[tuple[Rate, Rate, str, float]] = []
        self._class_ids: dict[tuple, int] = {}

    def add(self, count: int, kind: str, tier: str) -> int:
        """`count` nodes of one kind and tier; returns the first one's id."""
        base = self.n_nodes
        if count > 0:
            self.blocks.append((count, kind, tier))
            self.n_nodes += count
        return base

    def node_columns(self) -> tuple[NodeArrays, object]:
        """(NodeArrays of the nodes, a function making their Node tuple)."""
        import numpy as np
        blocks = self.blocks
        kinds = {k: i for i, k in enumerate(dict.fromkeys(b[1] for b in blocks))}
        tiers = {k: i for i, k in enumerate(dict.fromkeys(b[2] for b in blocks))}
        counts = np.array([b[0] for b in blocks], dtype=np.int64)
        arrays = NodeArrays(tuple(kinds), np.repeat(np.array([kinds[b[1]] for b in blocks], dtype=np.int64), counts),
                            tuple(tiers), np.repeat(np.array([tiers[b[2]] for b in blocks], dtype=np.int64), counts))

        def make_nodes():
            mk = node_maker()
            out, base = [], 0
            for count, kind, tier in blocks:
                out += [mk(i, kind, tier) for i in range(base, base + count)]
                base += count
            return out
        return arrays, make_nodes

    def link_class(self, rate: Rate, delay: Rate, kind: str, er: float) -> int:
        # by identity: a spec holds a few Rate objects, used by thousands of cables
        key = (id(rate), id(delay), kind, er)
        got = self._class_ids.get(key)
        if got is None:
            got = self._class_ids[key] = len(self.classes)
            self.classes.append((rate, delay, kind, er))
        return got

    def cable(self, a: int, b: int, rate: Rate, delay: Rate, kind: str, er: float) -> None:
        self.ends += (a, b)
        self.cls.append(self.link_class(rate, delay, kind, er))

    def block(self, ends, cls) -> None:
        """Cables as arrays, after those so far: ends (a, b of each cable, flat) and their link classes (one
        class for all, or one per cable)."""
        import numpy as np
        ends = np.asarray(ends, dtype=np.int64).reshape(-1)
        cls = np.broadcast_to(np.asarray(cls, dtype=np.int64), (len(ends) // 2,))
        if self.ends:
            self.parts.append((np.array(self.ends, dtype=np.int64), np.array(self.cls, dtype=np.int64)))
            self.ends, self.cls = [], []
        self.parts.append((ends, cls))

    def topology(self, G: int, gps: int, gpu_type: str, dom: int, name: str, notes: list[str]) -> Topology:
        import numpy as np
        parts = self.parts + [(np.array(self.ends, dtype=np.int64), np.array(self.cls, dtype=np.int64))]
        src = np.concatenate([p[0] for p in parts])                   # link 2k: a -> b, 2k+1: b -> a
        cable_cls = np.concatenate([p[1] for p in parts])
        n = len(src)
        dst = src.reshape(-1, 2)[:, ::-1].reshape(-1) if n else src.copy()
        link_cls = np.repeat(cable_cls, 2)
        classes = self.classes
        bw = [c[0].value for c in classes]
        lat = [c[1].value for c in classes]
        kinds = [c[2] for c in classes]
        ers = [c[3] for c in classes]
        rtext = [c[0].text for c in classes]
        dtext = [c[1].text for c in classes]

        def column(values: list[float]):
            return np.array(values, dtype=np.float64)[link_cls] if classes else np.zeros(0)

        def make_links():
            mk = link_maker()
            return [mk(i, s, d, bw[c], lat[c], kinds[c], ers[c], rtext[c], dtext[c])
                    for i, (s, d, c) in enumerate(zip(src.tolist(), dst.tolist(), link_cls.tolist()))]

        # kind codes (topo.model.link_kind_codes) from the classes: kinds numbered in first-seen order
        # over the cables (the classes ordered by their first cable)
        used = [c for c in range(len(classes)) if (cable_cls == c).any()]
        first = {c: int(np.argmax(cable_cls == c)) for c in used}
        names = {k: i for i, k in enumerate(dict.fromkeys(kinds[c] for c in sorted(used, key=first.__getitem__)))}
        by_class = np.array([names.get(k, -1) for k in kinds] or [0], dtype=np.int64)
        kind_col = np.array(kinds or [""], dtype=object)[link_cls].tolist()
        # the columns topo.model._link_arrays would read from the links (health: capacity_factor 1); links
        # of one class share every column (groups)
        arrays = LinkArrays(src, dst, column(bw), column(lat), 1.0 * (1.0 - column(ers)), kind_col,
                            (names, by_class[link_cls]), (link_cls, len(classes)))
        node_arrays, make_nodes = self.node_columns()
        return Topology(G, gps, gpu_type, dom, LazyNodes(self.n_nodes, make_nodes, node_arrays),
                        LazyLinks(n, make_links, arrays), name=name, notes=tuple(notes))


def _need(cond: bool, msg: str) -> None:
    if not cond:
        raise TopoError(msg)


def build_fabric(spec: FabricSpec, name: str = "", notes: tuple[str, ...] = ()) -> Topology:
    """The topology of `spec` (module docstring: numbering and cable order); `notes` follow the builder's."""
    # 10^5 Node / Link objects and no reference cycles: the cyclic collector would re-scan every
    # object built so far several times (~20% of a 9,216-GPU build); reference counting frees the rest
    was = gc.isenabled()
    gc.disable()
    try:
        return _build_fabric(spec, name, notes)
    finally:
        if was:
            gc.enable()


def _build_fabric(spec: FabricSpec, name: str, extra_notes: tuple[str, ...] = ()) -> Topology:
    G, gps = spec.gpus, spec.gpus_per_server
    _need(G > 0, f"{_flag(spec, 'gpus')}: GPU count must be > 0, got {G}")
    _need(gps > 0, f"{_flag(spec, 'gpus_per_server')}: GPUs per server must be > 0, got {gps}")
    _need(G % gps == 0, f"{_flag(spec, 'gpus')}: {G} GPUs is not a multiple of "
          f"{_flag(spec, 'gpus_per_server')} {gps}")
    # bounds before any per-node table is built (topo/limits.py)
    _need(not over_limit(G, MAX_NODES), f"{_flag(spec, 'gpus')}: {G} GPUs exceeds the limit of "
          f"{MAX_NODES:,} nodes (set {ALLOW_HUGE_ENV}=1 to build it anyway)")
    _need(not over_limit(G * max(spec.nvswitch_count, 1), MAX_CABLES),
          f"{_flag(spec, 'nvswitch_per_server')}: {spec.nvswitch_count} NVSwitches per GPU's domain x {G} GPUs "
          f"exceeds the limit of {MAX_CABLES:,} cables (set {ALLOW_HUGE_ENV}=1 to build it anyway)")
    notes: list[str] = []
    servers = G // gps
    dom = spec.nvlink_domain_size or gps
    if spec.host == "pcie":
        dom = 1
    else:
        _need(dom % gps == 0, f"{_flag(spec, 'nvlink_domain_size')}: {dom} is not a multiple of "
              f"{_flag(spec, 'gpus_per_server')} {gps}")
        _need(G % dom == 0, f"{_flag(spec, 'gpus')}: {G} GPUs is not a multiple of the NVLink domain size {dom}")
    b = _Builder()
    b.add(G, "gpu", "gpu")
    er = spec.error_rate

    # ---- host-side switches ----
    import numpy as np
    # NVSwitch hosts: per GPU its switches (a G x n array: base + domain x n + k) and the link class of
    # each of the n links; PCIe hosts: per GPU (switch, link class) pairs
    host_sw = np.zeros((G, 0), dtype=np.int64)
    host_cls: list[int] = []
    host_links: list[list[tuple[int, int]]] = []
    if spec.host == "simai":
        n = spec.nvswitch_count
        _need(n >= 0, f"{_flag(spec, 'nvswitch_per_server')}: must be >= 0")
        if n:
            # dom == gps: n switches per server, else n per NVLink domain
            base = b.add((servers if dom == gps else G // dom) * n, "nvswitch", "nvswitch")
            host_sw = base + (np.arange(G, dtype=np.int64) // dom * n)[:, None] + np.arange(n, dtype=np.int64)
            host_cls = [b.link_class(spec.nvlink, spec.nvlink_latency, "nvlink", er)] * n
    elif spec.host == "chips":
        n = spec.nvswitch_count
        _need(n >= 1, f"{_flag(spec, 'nvswitch_chips')}: must be >= 1")
        domains = G // dom
        base = b.add(domains * n, "nvswitch", "nvswitch")
        w = spec.nvlink_chip_links or (1,) * n
        _need(len(w) == n and min(w) > 0, f"{_flag(spec, 'nvswitch_chip_links')}: need {n} positive port counts, got {list(w)}")
        per_chip = [Rate(spec.nvlink.value * x / sum(w), _fmt_rate(spec.nvlink.value * x / sum(w))) for x in w]
        host_cls = [b.link_class(r, spec.nvlink_latency, "nvlink", er) for r in per_chip]
        host_sw = base + (np.arange(G, dtype=np.int64) // dom * n)[:, None] + np.arange(n, dtype=np.int64)
    elif spec.host == "pcie":
        p = spec.pcie_switches_per_server
        _need(p >= 1 and gps % p == 0, f"pcie_switches_per_server: {p} must divide GPUs per server {gps}")
        pcie_base = b.add(servers * p, "switch", "pcie")
        pc = b.link_class(spec.pcie, spec.pcie_latency, "pcie", er)
        for g in range(G):
            s, i = divmod(g, gps)
            host_links.append([(pcie_base + s * p + i // (gps // p), pc)])
    else:
        raise TopoError(f"host: unknown server model '{spec.host}' (simai, chips, pcie)")

    # ---- NICs ----
    use_nics = spec.nics or spec.host == "pcie"
    if use_nics:
        k = spec.gpus_per_nic
        _need(k >= 1 and gps % k == 0, f"{_flag(spec, 'gpus_per_nic')}: {k} must divide GPUs per server {gps}")
        rails = gps // k
        if spec.host == "pcie":
            _need(rails % spec.pcie_switches_per_server == 0,
                  f"{_flag(spec, 'gpus_per_nic')}: {rails} NICs per server must be a multiple of pcie_switches_per_server "
                  f"{spec.pcie_switches_per_server}")
        nic_base = b.add(servers * rails, "nic", "nic") if spec.network else -1
    else:
        rails = gps
        nic_base = -1
    n_ep = servers * rails  # network endpoints (GPUs or NICs)

    # ---- network ----
    ep_tor = np.zeros((0, 1), dtype=np.int64)      # per endpoint (row) its ToRs
    asw_psw = np.zeros((0, 2), dtype=np.int64)
    psw_core: list[tuple[np.ndarray, Rate]] = []
    if spec.network and spec.fat_tree_k:
        ep_tor, asw_psw, psw_core = _fat_tree(spec, b, n_ep)
    elif spec.network:
        ep_tor, asw_psw, psw_core = _clos(spec, b, n_ep, rails, notes)

    # ---- cables in SimAI order ----
    net_cls = b.link_class(spec.nic, spec.latency, "network", er) if spec.network and not use_nics else -1
    if not use_nics:      # (a PCIe host always uses NICs)
        # per GPU its host links, then its ToR links: one block of arrays
        tors = ep_tor[:G] if net_cls >= 0 else np.zeros((G, 0), dtype=np.int64)
        peers = np.concatenate((host_sw, tors), axis=1)
        per = peers.shape[1]
        ends = np.stack((np.repeat(np.arange(G, dtype=np.int64), per), peers.reshape(-1)), axis=1).reshape(-1)
        b.block(ends, np.tile(np.array(host_cls + [net_cls] * tors.shape[1], dtype=np.int64), G))
    else:
        ends, cls = b.ends, b.cls        # one cable per GPU link: appended here without a call each
        for g in range(G):
            for sw, c in (host_links[g] if host_links else zip(host_sw[g].tolist(), host_cls)):
                ends += (g, sw)
                cls.append(c)
            if spec.network and spec.host != "pcie":
                s, i = divmod(g, gps)
                b.cable(g, nic_base + s * rails + i // spec.gpus_per_nic, spec.pcie, spec.pcie_latency, "pcie", er)
    if spec.host == "pcie":
        p = spec.pcie_switches_per_server
        for s in range(servers):
            for x in range(p):
                for y in range(x + 1, p):
                    b.cable(pcie_base + s * p + x, pcie_base + s * p + y, spec.pcie, spec.pcie_latency, "pcie", er)
    if use_nics and spec.network:
        for e in range(n_ep):
            nic = nic_base + e
            if spec.host == "pcie":
                s, j = divmod(e, rails)
                p = spec.pcie_switches_per_server
                b.cable(nic, pcie_base + s * p + j // (rails // p), spec.pcie, spec.pcie_latency, "pcie", er)
            for tor in ep_tor[e].tolist():
                b.cable(nic, tor, spec.nic, spec.latency, "network", er)
    if len(asw_psw):
        b.block(asw_psw, b.link_class(spec.asw_psw, spec.latency, "network", er))
    for pairs, rate in psw_core:
        b.block(pairs, b.link_class(rate, spec.latency, "network", er))
    t = b.topology(G, gps, spec.gpu_type, dom, name, notes + list(extra_notes))
    _known_components(t, spec, dom)
    return t


def _known_components(t: Topology, spec: FabricSpec, dom: int) -> None:
    """Fill the caches of two per-GPU tables the wiring above fixes, which Topology.nvlink_domains and
    Topology.host_components would otherwise find by label propagation over the links: "domain"
    (NVLink components numbered by first GPU: the GPUs of a domain share its NVSwitch chips; a GPU
    without NVSwitch links, as on a PCIe server, is alone) and "host_components" (per GPU the lowest
    node id joined to it through NVSwitch / PCIe switches: its domain's or server's first GPU; -1
    without such switches)."""
    import numpy as np
    g = np.arange(t.num_gpus, dtype=np.int64)
    nvswitch = spec.host == "chips" or (spec.host == "simai" and spec.nvswitch_count > 0)
    t._cache["domain"] = (g // dom if nvswitch else g).tolist()
    if nvswitch or spec.host == "pcie":
        unit = dom if nvswitch else spec.gpus_per_server
        t._cache["host_components"] = (g // unit * unit).tolist()
    else:
        t._cache["host_components"] = [-1] * t.num_gpus


def _flag(spec: FabricSpec, field: str) -> str:
    simai = {"gpus": "-g", "gpus_per_server": "-gps", "nics_per_asw": "-npa", "asw_per_psw": "-app",
             "psw_per_pod": "-psn", "gpus_per_nic": "--gpus-per-nic", "nvlink_domain_size": "--nvlink-domain",
             "nvswitch_chips": "--nvswitch-chips", "nvswitch_chip_links": "--nvswitch-chip-links",
             "nvswitch_per_server": "-nsps"}
    return simai[field] if spec.label == "simai" else field


def _fmt_rate(bandwidth_Bps: float) -> str:
    from topo.units import format_rate
    return format_rate(bandwidth_Bps)


def _clos(spec: FabricSpec, b: _Builder, n_ep: int, rails: int, notes: list[str]):
    """ToR / spine / core wiring. Returns (ToRs per endpoint, ASW-PSW pairs, per pod its PSW-core
    cables as an (n, 2) node-id array with their Rate)."""
    npa, app, psn = spec.nics_per_asw, spec.asw_per_psw, spec.psw_per_pod
    _need(npa >= 1, f"{_flag(spec, 'nics_per_asw')}: must be >= 1")
    _need(psn >= 1, f"{_flag(spec, 'psw_per_pod')}: must be >= 1")
    banks = 2 if spec.dual_tor else 1
    planes = 2 if spec.dual_plane else 1
    _need(not spec.dual_plane or spec.dual_tor, "dual_plane: needs dual ToR (--dt)")
    _need(psn % planes == 0, f"{_flag(spec, 'psw_per_pod')}: {psn} PSWs cannot be split into 2 planes")
    if spec.rail_optimized:
        seg_eps = npa * rails
        asw_per_seg = rails
        max_seg = app // rails          # SimAI: segments <= app / gps
    else:
        seg_eps = npa
        asw_per_seg = 1
        max_seg = app                   # SimAI: segments <= app
    segments = -(-n_ep // seg_eps)
    if spec.asw_requested is not None and spec.asw_requested != segments * asw_per_seg * banks:
        notes.append(f"ASW count corrected from {spec.asw_requested} to {segments * asw_per_seg * banks} "
                     f"({segments} segment(s) x {asw_per_seg * banks} ASWs)")
    per_pod = spec.segments_per_pod or max_seg
    _need(per_pod <= max_seg, f"segments_per_pod: {per_pod} exceeds what a PSW's {app} ASW ports allow "
          f"({max_seg})")
    _need(per_pod >= 1, f"{_flag(spec, 'asw_per_psw')}: {app} ASWs per PSW cannot hold one segment of "
          f"{asw_per_seg} ASWs")
    pods = spec.pods or -(-segments // per_pod)
    if spec.pods:
        per_pod = -(-segments // pods)
        _need(per_pod <= max_seg, f"pods: {segments} segments of {seg_eps} endpoints do not fit in {pods} "
              f"pod(s) of at most {max_seg} segments ({_flag(spec, 'asw_per_psw')} {app})")
    if pods > 1 and not spec.core:
        raise TopoError(f"{_flag(spec, 'gpus')}: {spec.gpus} GPUs need {segments} segments of {seg_eps} "
                        f"endpoints but one pod holds at most {max_seg} ({_flag(spec, 'asw_per_psw')} {app}"
                        + (f" / {rails} rails" if spec.rail_optimized else "")
                        + "); pod capacity exceeded, use the multi-pod template")
    pod_segs = [min(per_pod, segments - p * per_pod) for p in range(pods)]
    _need(all(s > 0 for s in pod_segs), f"pods: {pods} pods for {segments} segments leaves a pod empty")

    # ASWs pod by pod, bank 1 then bank 2 inside a pod
    asw_base: list[int] = []
    for p in range(pods):
        asw_base.append(b.add(pod_segs[p] * asw_per_seg * banks, "switch", "asw"))
    psw_base = [b.add(psn, "switch", "psw") for _ in range(pods)]
    import numpy as np
    ep_parts = []          # per pod: its endpoints' ToRs (rows), one column per bank
    seg_start = 0
    for p in range(pods):
        bank_size = pod_segs[p] * asw_per_seg
        lo = seg_start * seg_eps
        hi = min(n_ep, (seg_start + pod_segs[p]) * seg_eps)
        local = np.arange(hi - lo, dtype=np.int64)
        idx = (local // seg_eps) * rails + local % rails if spec.rail_optimized else local // npa
        ep_parts.append(asw_base[p] + np.arange(banks, dtype=np.int64) * bank_size + idx[:, None])
        seg_start += pod_segs[p]
    ep_tor = np.concatenate(ep_parts)
    # ASW-PSW cables ASW-major: each ASW to every PSW of its plane (all of its pod's with one plane)
    blocks = []
    half = psn // planes
    fan = half if planes == 2 else psn
    for p in range(pods):
        bank_size = pod_segs[p] * asw_per_seg
        for bank in range(banks):
            asw = asw_base[p] + bank * bank_size + np.arange(bank_size, dtype=np.int64)
            lo = psw_base[p] + (bank if planes == 2 else 0) * half
            blocks.append(np.stack((np.repeat(asw, fan), np.tile(np.arange(lo, lo + fan, dtype=np.int64), bank_size)),
                                   axis=1))
    asw_psw = np.concatenate(blocks)
    psw_core: list[tuple[np.ndarray, Rate]] = []
    if pods > 1 or spec.core:
        ratio = spec.core_oversubscription
        _need(ratio > 0, f"core_oversubscription: must be > 0, got {ratio}")
        # a PSW's downlinks: every ASW of its plane in its pod, at the ASW-PSW rate
        down = [pod_segs[p] * asw_per_seg * (1 if planes == 2 else banks) for p in range(pods)]
        up_ports = math.ceil(max(down) / ratio)
        per_group = max(1, math.ceil(pods * up_ports / spec.core_radix))
        core_base = b.add(psn * per_group, "switch", "csw")
        # PSW j of every pod to core switches j x per_group .. + per_group - 1 (PSW-major)
        psw = np.repeat(np.arange(psn, dtype=np.int64), per_group)
        core = core_base + np.arange(psn * per_group, dtype=np.int64)
        for p in range(pods):
            up_bw = down[p] * spec.asw_psw.value / ratio / per_group
            psw_core.append((np.stack((psw_base[p] + psw, core), axis=1), Rate(up_bw, _fmt_rate(up_bw))))
    return ep_tor, asw_psw, psw_core


def _fat_tree(spec: FabricSpec, b: _Builder, n_ep: int):
    """k-ary fat-tree (Al-Fares): k pods of k/2 edge + k/2 aggregation switches, (k/2)^2 cores,
    k^3/4 endpoints at most; edge = "asw", aggregation = "psw", core = "csw". Pods without
    endpoints are not built."""
    k = spec.fat_tree_k
    _need(k >= 2 and k % 2 == 0, f"k: fat-tree arity must be even and >= 2, got {k}")
    h = k // 2
    _need(n_ep <= k * h * h, f"gpus: {n_ep} endpoints exceed a k={k} fat-tree ({k * h * h} hosts)")
    pods = -(-n_ep // (h * h))
    edge = b.add(pods * h, "switch", "asw")
    agg = b.add(pods * h, "switch", "psw")
    core = b.add(h * h, "switch", "csw")
    import numpy as np
    ep_tor = edge + np.arange(n_ep, dtype=np.int64)[:, None] // h
    asw_psw = np.array([(edge + p * h + i, agg + p * h + j) for p in range(pods) for i in range(h) for j in range(h)],
                       dtype=np.int64).reshape(-1, 2)
    psw_core = [(np.array([(agg + p * h + j, core + j * h + m) for p in range(pods) for j in range(h) for m in range(h)],
                          dtype=np.int64).reshape(-1, 2), spec.asw_psw)]
    return ep_tor, asw_psw, psw_core
