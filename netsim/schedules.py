"""Collectives -> flow schedules the engine runs ("bundled" flows with dependencies).

A FlowSpec is one engine flow. A *lock-step* flow spans several hops that progress together: a ring
channel in steady state moves every chunk one hop per step, so all its hops advance at the rate of
the slowest one; modelling the channel as one flow whose rate is shared by all its hops is the fluid
limit of NCCL's pipelined ring (chunks of S / (channels x n) per step). Its latency is that of the
critical path of the first piece: the per-step alpha + propagation of every hop it crosses in
sequence (a ring: the worst run of `steps` consecutive hops; a chain or tree: its deepest path), so
only the hops that cross the network pay the network alpha. Flows whose hops run in parallel (one
all-to-all shift) pay steps x their slowest hop. The step-level p2p DAGs (every chunk transfer, used
to verify semantics) are in netsim.dag; `dag_specs` runs them through the same engine.

Group shape: GPUs are grouped by unit (NVLink domain; the server for PCIe-only machines) in order
of first appearance; inside a unit by GPU id (= local index, NCCL's intra-node order).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from netsim.errors import NetsimError

OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce", "send", "recv")
ALGORITHMS = ("auto", "ring", "tree", "nvls", "rhd", "direct", "pairwise", "hierarchical", "pxn", "p2p")

APPLICABLE = {
    "all_reduce": ("ring", "tree", "nvls", "rhd", "hierarchical"),
    "all_gather": ("ring", "nvls", "rhd", "hierarchical"),
    "reduce_scatter": ("ring", "nvls", "rhd", "hierarchical"),
    "all_to_all": ("direct", "pairwise", "pxn"),
    "broadcast": ("ring", "tree"),
    "reduce": ("ring", "tree"),
    "send": ("p2p",),
    "recv": ("p2p",),
}

DIRECT_BUNDLE_ABOVE = 8     # direct all-to-all over more ranks: one lock-step flow per shift


@dataclass
class FlowSpec:
    """hops: (src, dst) GPU pairs routed by topo, or ("up", gpu) / ("down", gpu) NVSwitch ports.
    Each hop carries nbytes x weight; steps: latency steps; deps: indices of specs that must finish.

    Latency (netsim.resolve): ring=True -> hops form a cycle in order and a piece crosses `steps`
    consecutive hops (the worst such run counts); lat_stages -> sequential stages, each a set of
    alternative hop-index paths (the deepest counts), e.g. a tree's leaf-to-root then root-to-leaf
    paths; otherwise steps x the slowest hop (hops in parallel).
    Pipeline fill: `share` of the collective's NCCL channels ride this flow (payload per channel =
    nbytes / (share x channels)); `fill` picks the chunk size; the fill stages are 1 for rings, NVLS
    and parallel transfers, the hops of the critical path - 1 for chains and trees."""
    hops: list
    nbytes: float
    steps: int = 1
    deps: tuple[int, ...] = ()
    weights: list[float] | None = None
    nvls: bool = False
    pxn: bool = False
    after: tuple[int, ...] = ()   # order-only predecessors: start after they finish, no extra latency
    ring: bool = False
    lat_stages: tuple[tuple[tuple[int, ...], ...], ...] | None = None
    share: float | None = None    # fraction of the collective's NCCL channels (None: one p2p connection)
    fill: str = "p2p"             # pipeline-fill kind: ring | chain | tree | nvls | p2p (netsim.calibration)


@dataclass
class GroupShape:
    gpus: tuple[int, ...]
    servers: list[list[int]]            # GPU ids per unit (NVLink domain, or PCIe server), NCCL order
    domains: int                        # distinct NVLink domains
    k_max: int = field(init=False)
    unit_sizes: tuple[int, ...] = field(init=False)     # len of each unit, in order (servers is not changed)

    def __post_init__(self):
        self.unit_sizes = tuple(map(len, self.servers))
        self.k_max = max(self.unit_sizes)

    @property
    def n(self) -> int:
        return len(self.gpus)

    @property
    def m(self) -> int:
        return len(self.servers)

    def ring_order(self, channel: int) -> list[int]:
        return ring_order(self.servers, channel)


def ring_order(servers: list[list[int]], channel: int) -> list[int]:
    """Ring of channel c over servers (NCCL-like, rail-aligned): every server-to-server hop joins two
    GPUs of the same local index (one rail: it stays under one rail switch), and channel c leaves
    servers through different NICs than channel c + 1. With an even number of servers, even-numbered
    servers are walked forward from local index c and odd ones backward from c - 1. With an odd number
    the entries c, c - 1, c, ..., c - 2 (three rails, as a ring of odd length needs) keep every hop on
    one rail when every server has at least 3 GPUs; otherwise the closing hop changes rail."""
    m = len(servers)
    if m % 2 == 1 and m > 1 and min(len(s) for s in servers) >= 3:
        entry = [channel if i % 2 == 0 else channel - 1 for i in range(m)]
        entry[-1] = channel - 2
        order: list[int] = []
        for i, s in enumerate(servers):
            k = len(s)
            a, b = entry[i] % k, entry[(i + 1) % m] % k
            order.append(s[a])
            order.extend(s[(a + j) % k] for j in range(1, k) if (a + j) % k != b)
            order.append(s[b])
        return order
    order = []
    for i, s in enumerate(servers):
        k = len(s)
        if i % 2 == 0:
            r = channel % k
            order.extend(s[r:] + s[:r])
        else:
            start = (channel - 1) % k
            order.extend([s[(start - j) % k] for j in range(k)])
    return order


def group_shape(view, gpus) -> GroupShape:
    by_server: dict[int, list[int]] = {}
    for g, u in zip(gpus, map(view.unit_of, gpus)):
        by_server.setdefault(u, []).append(g)
    servers = [sorted(v) for v in by_server.values()]
    domains = len(set(map(view.domain_of, gpus)))
    return GroupShape(tuple(gpus), servers, domains)


def validate_request(view, op: str, gpus, size_bytes) -> None:
    if op not in OPS:
        raise NetsimError(f"unknown collective op {op!r} (known: {', '.join(OPS)})")
    if len(gpus) == 0:
        raise NetsimError(f"{op}: empty group")
    view.check_gpus(gpus)
    if len(set(gpus)) != len(gpus):
        dup = next(g for g in gpus if list(gpus).count(g) > 1)
        raise NetsimError(f"{op}: GPU {dup} appears twice in the group")
    if not isinstance(size_bytes, int | float) or size_bytes < 0 or math.isnan(size_bytes):
        raise NetsimError(f"{op}: size_bytes must be >= 0 (got {size_bytes})")
    if op in ("send", "recv") and len(gpus) != 2:
        raise NetsimError(f"{op}: group must be (src, dst), got {len(gpus)} GPUs")


def check_algorithm(view, shape: GroupShape, op: str, algorithm: str) -> None:
    if algorithm not in ALGORITHMS:
        raise NetsimError(f"unknown algorithm {algorithm!r} (known: {', '.join(ALGORITHMS)})")
    if algorithm == "auto":
        return
    if algorithm not in APPLICABLE[op]:
        raise NetsimError(f"algorithm {algorithm!r} does not apply to {op} "
                          f"(use one of: {', '.join(APPLICABLE[op])})")
    if algorithm == "nvls":
        from netsim.calibration import supports_nvls
        if shape.domains > 1:
            raise NetsimError("algorithm 'nvls' needs the whole group inside one NVLink domain "
                              f"(group spans {shape.domains} domains)")
        if not supports_nvls(view.gpu_type) or not view.switch_channels(shape.gpus[0])[0]:
            raise NetsimError(f"algorithm 'nvls' needs NVSwitch with NVLink SHARP (gpu_type {view.gpu_type!r})")
    if algorithm == "hierarchical" and len({len(s) for s in shape.servers}) > 1:
        raise NetsimError("algorithm 'hierarchical' needs the same number of GPUs in every server")
    if algorithm == "rhd" and op != "all_reduce" and shape.n & (shape.n - 1):
        raise NetsimError(f"algorithm 'rhd' for {op} needs a power-of-two group (got {shape.n})")


# ------------------------------------------------------------------------ builders
def _ring_channels(shape: GroupShape) -> int:
    return shape.k_max if shape.m > 1 else 1


def ring_specs(shape: GroupShape, op: str, size: float) -> list[FlowSpec]:
    n = shape.n
    if n == 1:
        return []
    c_n = _ring_channels(shape)
    specs = []
    for c in range(c_n):
        order = shape.ring_order(c)
        if op in ("broadcast", "reduce"):
            # chain from the root (group rank 0) along the ring; reduce flows toward the root
            root = shape.gpus[0]
            i0 = order.index(root)
            chain = order[i0:] + order[:i0]
            hops = list(zip(chain[:-1], chain[1:]))
            if op == "reduce":
                hops = [(b, a) for a, b in reversed(hops)]
            specs.append(FlowSpec(hops, size / c_n, steps=n - 1, lat_stages=((tuple(range(len(hops))),),),
                                  share=1 / c_n, fill="chain"))
            continue
        hops = list(zip(order, order[1:] + order[:1]))
        if op == "all_reduce":
            specs.append(FlowSpec(hops, 2 * (n - 1) / n * size / c_n, steps=2 * (n - 1), ring=True,
                                  share=1 / c_n, fill="ring"))
        else:
            specs.append(FlowSpec(hops, (n - 1) / n * size / c_n, steps=n - 1, ring=True, share=1 / c_n,
                                  fill="ring"))
    return specs


def inorder_tree(m: int) -> list[int]:
    """Parent per position of a balanced in-order binary tree over positions 0..m-1 (root: -1)."""
    parent = [-1] * m

    def build(lo: int, hi: int, par: int) -> None:
        if lo >= hi:
            return
        mid = (lo + hi) // 2
        parent[mid] = par
        build(lo, mid, mid)
        build(mid + 1, hi, mid)

    build(0, m, -1)
    return parent


def tree_depth(parent: list[int]) -> int:
    depth = 0
    for i in range(len(parent)):
        d, j = 0, i
        while parent[j] >= 0:
            j = parent[j]
            d += 1
        depth = max(depth, d)
    return depth


def nccl_trees(servers: list[list[int]]) -> list[tuple[list[int], list[int]]]:
    """NCCL-like double binary trees: a balanced in-order binary tree over the units (servers /
    NVLink domains), the second tree over the units shifted by one (so that for an even number of
    units a leaf of one is an interior node of the other), and inside each unit a chain of its
    GPUs ending at the unit's head, which is the node of the unit in the inter-unit tree.
    One pair of trees per channel c = 0..k_min-1, the head of channel c is local index c (so the
    channels leave the units through different NICs). Returns [(nodes, parent index)] with
    parent -1 at the root."""
    m = len(servers)
    k = min(len(s) for s in servers)
    out = []
    inter = inorder_tree(m)
    for c in range(k):
        for shift in (0, 1) if m > 1 else (0,):
            nodes: list[int] = []
            parent: list[int] = []
            head_pos: dict[int, int] = {}
            units = servers[shift:] + servers[:shift]
            for u, srv in enumerate(units):
                chain = srv[c:] + srv[:c]
                base = len(nodes)
                head_pos[u] = base
                for j, g in enumerate(chain):
                    nodes.append(g)
                    parent.append(base + j - 1 if j > 0 else -2)   # head: filled below
            for u in range(m):
                p = inter[u]
                parent[head_pos[u]] = head_pos[p] if p >= 0 else -1
            out.append((nodes, parent))
    return out


def heap_tree(n: int) -> list[int]:
    return [-1] + [(i - 1) // 2 for i in range(1, n)]


def tree_paths(parent: list[int], edge_of: dict[int, int]) -> tuple[tuple[int, ...], ...]:
    """Root-to-leaf paths of a tree as sequences of edge indices (edge_of[v]: index of the edge
    between v and its parent)."""
    has_child = {p for p in parent if p >= 0}
    paths = []
    for leaf in range(len(parent)):
        if leaf in has_child or parent[leaf] < 0:
            continue
        path, v = [], leaf
        while parent[v] >= 0:
            path.append(edge_of[v])
            v = parent[v]
        paths.append(tuple(reversed(path)))
    return tuple(paths)


def tree_specs(shape: GroupShape, op: str, size: float) -> list[FlowSpec]:
    n = shape.n
    if n == 1:
        return []
    if op == "all_reduce":
        specs = []
        trees = nccl_trees(shape.servers)
        for order, parent in trees:
            kids = [i for i, p in enumerate(parent) if p >= 0]
            up = [(order[i], order[parent[i]]) for i in kids]
            down = [(b, a) for a, b in up]
            paths = tree_paths(parent, {v: j for j, v in enumerate(kids)})
            # reduce up every leaf-to-root path, then broadcast down every root-to-leaf path
            stages = (paths, tuple(tuple(len(up) + e for e in p) for p in paths))
            specs.append(FlowSpec(up + down, size / len(trees), steps=2 * tree_depth(parent), lat_stages=stages,
                                  share=1 / len(trees), fill="tree"))
        return specs
    order = shape.ring_order(0)
    root = shape.gpus[0]
    i0 = order.index(root)
    order = order[i0:] + order[:i0]
    parent = heap_tree(n)
    kids = [i for i, p in enumerate(parent) if p >= 0]
    edges = [(order[parent[i]], order[i]) for i in kids]
    if op == "reduce":
        edges = [(b, a) for a, b in edges]
    paths = tree_paths(parent, {v: j for j, v in enumerate(kids)})
    return [FlowSpec(edges, size, steps=tree_depth(parent), lat_stages=(paths,), share=1.0, fill="tree")]


def nvls_specs(shape: GroupShape, op: str, size: float) -> list[FlowSpec]:
    n = shape.n
    if n == 1:
        return []
    g = list(shape.gpus)
    if op == "all_reduce":
        w_up, w_down, steps = 1 + 1 / n, 1.0, 2
    elif op == "all_gather":
        w_up, w_down, steps = 1 / n, (n - 1) / n, 1
    else:  # reduce_scatter
        w_up, w_down, steps = 1.0, 1 / n, 1
    hops = [("up", x) for x in g] + [("down", x) for x in g]
    weights = [w_up] * n + [w_down] * n
    return [FlowSpec(hops, size, steps=steps, weights=weights, nvls=True, share=1.0, fill="nvls")]


def rhd_specs(shape: GroupShape, op: str, size: float) -> list[FlowSpec]:
    order = shape.ring_order(0)
    n = len(order)
    if n == 1:
        return []
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    specs: list[FlowSpec] = []
    last_in: dict[int, int] = {}    # virtual rank -> spec index of its latest incoming flow
    last_out: dict[int, int] = {}

    def add(src_v: int, dst_v: int, nbytes: float, src_g: int, dst_g: int) -> int:
        deps = tuple(sorted({d for d in (last_in.get(src_v), last_out.get(src_v)) if d is not None}))
        specs.append(FlowSpec([(src_g, dst_g)], nbytes, steps=1, deps=deps))
        return len(specs) - 1

    def exchange(d: int, nbytes: float) -> None:
        """One recursive step: every virtual rank v < p sends `nbytes` to its partner v ^ d."""
        new_in, new_out = {}, {}
        for v in range(p):
            idx = add(v, v ^ d, nbytes, order[v], order[v ^ d])
            new_out[v] = idx
            new_in[v ^ d] = idx
        last_in.update(new_in)
        last_out.update(new_out)

    if op == "all_reduce":
        for e in range(extra):
            idx = add(p + e, e, size, order[p + e], order[e])
            last_out[p + e] = idx
            pending_in = idx
            last_in[e] = pending_in
    do_rs = op in ("all_reduce", "reduce_scatter")
    do_ag = op in ("all_reduce", "all_gather")
    steps = p.bit_length() - 1
    if do_rs:
        frac = size / 2 if op != "all_gather" else 0
        for k in range(steps):
            exchange(p >> (k + 1), frac)
            frac /= 2
    if do_ag:
        frac = size / p
        for k in reversed(range(steps)):
            exchange(p >> (k + 1), frac)
            frac *= 2
    if op == "all_reduce":
        for e in range(extra):
            add(e, p + e, size, order[e], order[p + e])
    return specs


def a2a_specs(shape: GroupShape, size: float, algorithm: str) -> list[FlowSpec]:
    g = list(shape.gpus)
    n = len(g)
    if n == 1:
        return []
    per = size / n
    pxn = algorithm == "pxn"
    if algorithm == "pairwise":
        specs = []
        for k in range(1, n):
            deps = (k - 2,) if k > 1 else ()
            specs.append(FlowSpec([(g[i], g[(i + k) % n]) for i in range(n)], per, steps=1, deps=deps, pxn=pxn))
        return specs
    if n > DIRECT_BUNDLE_ABOVE:
        return [FlowSpec([(g[i], g[(i + k) % n]) for i in range(n)], per, steps=1, pxn=pxn) for k in range(1, n)]
    return [FlowSpec([(g[i], g[j])], per, steps=1, pxn=pxn) for i in range(n) for j in range(n) if i != j]


def hierarchical_specs(shape: GroupShape, op: str, size: float) -> list[FlowSpec]:
    """Two-level schedules. all_reduce: reduce-scatter in each unit, all-reduce of slice j across
    units (ring over local index j), all-gather in each unit. all_gather: all-gather across units
    (ring per local index), then in each unit. reduce_scatter: the reverse."""
    k = shape.k_max
    m = shape.m
    n = shape.n
    specs: list[FlowSpec] = []

    def intra(nbytes: float, deps: tuple[int, ...]) -> list[int]:
        out = []
        if k > 1:
            for s in shape.servers:
                specs.append(FlowSpec(list(zip(s, s[1:] + s[:1])), nbytes, steps=k - 1, deps=deps, ring=True,
                                      share=1.0, fill="ring"))
                out.append(len(specs) - 1)
        return out

    def inter(nbytes: float, steps: int, deps: tuple[int, ...]) -> list[int]:
        out = []
        if m > 1:
            for j in range(k):
                ring = [s[j] for s in shape.servers]
                specs.append(FlowSpec(list(zip(ring, ring[1:] + ring[:1])), nbytes, steps=steps, deps=deps,
                                      ring=True, share=1 / k, fill="ring"))
                out.append(len(specs) - 1)
        return out

    if op == "all_reduce":
        s1 = intra((k - 1) / k * size, ())
        s2 = inter(2 * (m - 1) / m * size / k, 2 * (m - 1), tuple(s1))
        intra((k - 1) / k * size, tuple(s2 or s1))
    elif op == "all_gather":
        s1 = inter((m - 1) * size / n, m - 1, ())
        intra((k - 1) / k * size, tuple(s1))
    else:
        s1 = intra((k - 1) / k * size, ())
        inter((m - 1) * size / n, m - 1, tuple(s1))
    return specs


def p2p_specs(shape: GroupShape, size: float) -> list[FlowSpec]:
    src, dst = shape.gpus
    return [FlowSpec([(src, dst)], size, steps=1)]


def build_specs(shape: GroupShape, op: str, algorithm: str, size: float) -> list[FlowSpec]:
    if op in ("send", "recv"):
        return p2p_specs(shape, size)
    if op == "all_to_all":
        return a2a_specs(shape, size, algorithm)
    if algorithm == "ring":
        return ring_specs(shape, op, size)
    if algorithm == "tree":
        return tree_specs(shape, op, size)
    if algorithm == "nvls":
        return nvls_specs(shape, op, size)
    if algorithm == "rhd":
        return rhd_specs(shape, op, size)
    if algorithm == "hierarchical":
        return hierarchical_specs(shape, op, size)
    raise NetsimError(f"algorithm {algorithm!r} does not apply to {op}")
