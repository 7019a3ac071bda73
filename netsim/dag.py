"""Step-level point-to-point DAGs of collectives: every chunk transfer with its dependencies.

These are the exact NCCL-like schedules (ring with channels and pipelined pieces, double binary
tree, NVLS through the switch, recursive halving-doubling, direct / pairwise all-to-all, hierarchical
two-level all-reduce). They are what the tests verify symbolically (every rank ends with what the
collective promises; data never leaves a rank before the transfers it depends on). The flow backend
runs the bundled form of the same schedules (netsim.schedules); `dag_specs` turns a DAG into engine
flows for step-level simulation of small groups.

Participants: group ranks 0..n-1; NVLS adds the NVSwitch as participant n. A transfer moves the
sender's current value of each listed chunk; op "reduce" adds it into the receiver's value, "copy"
replaces it. Chunk semantics (what each op promises) use `chunk_owner` / `chunk_dest`:
- all_reduce: every rank starts with its contribution to every chunk; all must end with the full sum.
- reduce_scatter: same start; rank chunk_owner[c] must end with the full sum of c.
- reduce: same start; the root (chunk_owner) ends with the full sum.
- all_gather / broadcast: chunk_owner[c] starts with c; every rank must end with it.
- all_to_all / send: chunk_owner[c] starts with c; chunk_dest[c] must end with it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from netsim.errors import NetsimError
from netsim.schedules import APPLICABLE, heap_tree, nccl_trees, ring_order


@dataclass(frozen=True)
class Transfer:
    src: int
    dst: int
    chunks: tuple[int, ...]
    op: str                      # "copy" | "reduce"
    nbytes: float
    deps: tuple[int, ...] = ()   # data dependencies (their completion + latency before this starts)
    after: tuple[int, ...] = ()  # order only: the previous transfer on the same connection (FIFO)


@dataclass
class StepDag:
    op: str
    algorithm: str
    n: int
    transfers: list[Transfer] = field(default_factory=list)
    chunk_bytes: list[float] = field(default_factory=list)
    chunk_owner: list[int] = field(default_factory=list)   # -1: every rank (reductions)
    chunk_dest: list[int] = field(default_factory=list)    # -1: not a point-to-point chunk
    n_participants: int = 0
    channel: int = 0                                       # connection key while building
    _last_on_conn: dict = field(default_factory=dict, repr=False)

    def new_chunk(self, nbytes: float, owner: int = -1, dest: int = -1) -> int:
        self.chunk_bytes.append(nbytes)
        self.chunk_owner.append(owner)
        self.chunk_dest.append(dest)
        return len(self.chunk_bytes) - 1

    def add(self, src: int, dst: int, chunks, op: str, deps=(), after=()) -> int:
        """Append a transfer; it is ordered after the previous transfer on the same connection
        (channel, src, dst), as a transport delivers in order."""
        chunks = tuple(chunks)
        nbytes = float(sum(self.chunk_bytes[c] for c in chunks))
        conn = (self.channel, src, dst)
        order = set(after)
        if conn in self._last_on_conn:
            order.add(self._last_on_conn[conn])
        deps = set(deps)
        t = len(self.transfers)
        self.transfers.append(Transfer(src, dst, chunks, op, nbytes, tuple(sorted(deps)),
                                       tuple(sorted(order - deps))))
        self._last_on_conn[conn] = t
        return t


def _ring_phase(dag: StepDag, order: list[int], segs: list[list[tuple[int, ...]]], kind: str,
                pre: dict[int, list[int]]) -> dict[int, list[int]]:
    """One ring pass (reduce-scatter "rs" or all-gather "ag") over positions `order`.

    segs[j][p] = chunks of piece p of the segment that position j ends with (rs) / starts with (ag).
    Returns transfers into each rank. A send from position i at step s depends on the transfer into
    i at step s-1 (same piece); the first send of a position also on `pre[rank]` (the connection's
    FIFO order makes that an ancestor of all later sends).
    """
    n = len(order)
    into: dict[int, list[int]] = {r: [] for r in order}
    if n == 1:
        return into
    pieces = len(segs[0])
    prev_in = {}     # (pos, piece) -> transfer into pos at the previous step
    last_send: dict[int, int] = {}
    for s in range(n - 1):
        cur_in = {}
        for p in range(pieces):
            for i in range(n):
                seg = (i - s - 1) % n if kind == "rs" else (i - s) % n
                deps = list(pre.get(order[i], ())) if i not in last_send else []
                if (i, p) in prev_in:
                    deps.append(prev_in[(i, p)])
                t = dag.add(order[i], order[(i + 1) % n], segs[seg][p], "reduce" if kind == "rs" else "copy", deps)
                last_send[i] = t
                cur_in[((i + 1) % n, p)] = t
                into[order[(i + 1) % n]].append(t)
        prev_in = cur_in
    return into


def _pieces(dag: StepDag, nbytes: float, pieces: int, owner: int = -1) -> list[tuple[int, ...]]:
    return [(dag.new_chunk(nbytes / pieces, owner),) for _ in range(pieces)]


def ring_dag(dag: StepDag, servers, size: float, channels: int, pieces: int) -> None:
    n = dag.n
    for c in range(channels):
        dag.channel = c
        order = ring_order(servers, c)
        share = size / channels
        if dag.op in ("broadcast", "reduce"):
            i0 = order.index(0)
            chain = order[i0:] + order[:i0]
            chunks = [dag.new_chunk(share / pieces, owner=0) for _ in range(pieces)]
            prev = {}
            hops = list(zip(chain[:-1], chain[1:]))
            if dag.op == "reduce":
                hops = [(b, a) for a, b in reversed(hops)]
            for p, ch in enumerate(chunks):
                for h, (a, b) in enumerate(hops):
                    deps = [x for x in (prev.get((h - 1, p)),) if x is not None]
                    prev[(h, p)] = dag.add(a, b, (ch,), "reduce" if dag.op == "reduce" else "copy", deps)
            continue
        if n == 1:
            continue
        owner_of = (lambda j, order=order: order[j]) if dag.op in ("all_gather", "reduce_scatter") else (lambda j: -1)
        segs = [_pieces(dag, share / n, pieces, owner_of(j)) for j in range(n)]
        if dag.op == "all_reduce":
            into = _ring_phase(dag, order, segs, "rs", {})
            _ring_phase(dag, order, segs, "ag", into)
        elif dag.op == "reduce_scatter":
            # rs phase: position i must end with segment i (owner order[i])
            _ring_phase(dag, order, segs, "rs", {})
        else:
            _ring_phase(dag, order, segs, "ag", {})


def tree_dag(dag: StepDag, servers, size: float, pieces: int) -> None:
    n = dag.n
    base = ring_order(servers, 0)
    if dag.op == "all_reduce":
        trees = nccl_trees(servers)
        for tree_id, (order, parent) in enumerate(trees):
            dag.channel = tree_id
            children: dict[int, list[int]] = {i: [] for i in range(n)}
            for i, p in enumerate(parent):
                if p >= 0:
                    children[p].append(i)
            root = parent.index(-1)
            post: list[int] = []

            def visit(v: int, children=children, post=post) -> None:
                for c in children[v]:
                    visit(c)
                post.append(v)

            visit(root)
            pre_order = list(reversed(post))
            for _p in range(pieces):
                ch = dag.new_chunk(size / len(trees) / pieces)
                up: dict[int, int] = {}
                for v in post:
                    if parent[v] >= 0:
                        up[v] = dag.add(order[v], order[parent[v]], (ch,), "reduce",
                                        [up[c] for c in children[v]])
                down: dict[int, int] = {}
                for v in pre_order:
                    p = parent[v]
                    if p < 0:
                        continue
                    deps = [up[c] for c in children[p]] if p == root else [down[p]]
                    down[v] = dag.add(order[p], order[v], (ch,), "copy", deps)
        return
    i0 = base.index(0)
    order = base[i0:] + base[:i0]
    parent = heap_tree(n)
    for _p in range(pieces):
        ch = dag.new_chunk(size / pieces, owner=0)
        done: dict[int, int] = {}
        if dag.op == "broadcast":
            for v in range(1, n):
                p = parent[v]
                done[v] = dag.add(order[p], order[v], (ch,), "copy", [done[p]] if p > 0 else [])
        else:
            for v in range(n - 1, 0, -1):
                kids = [c for c in (2 * v + 1, 2 * v + 2) if c < n]
                done[v] = dag.add(order[v], order[parent[v]], (ch,), "reduce", [done[c] for c in kids])


def nvls_dag(dag: StepDag, size: float, pieces: int) -> None:
    n = dag.n
    sw = n
    for k in range(n):
        for _p in range(pieces):
            owner = k if dag.op in ("all_gather", "reduce_scatter") else -1
            ch = (dag.new_chunk(size / n / pieces, owner),)
            if dag.op == "all_gather":
                t = dag.add(k, sw, ch, "copy")
                for r in range(n):
                    if r != k:
                        dag.add(sw, r, ch, "copy", [t])
                continue
            # reduce phase (multimem load-reduce) and store phase (multicast) are separate
            # queues: a GPU's stores do not wait behind its pending loads
            dag.channel = 0
            ups = [dag.add(r, sw, ch, "reduce") for r in range(n)]
            back = dag.add(sw, k, ch, "copy", ups)
            if dag.op == "reduce_scatter":
                continue
            dag.channel = 1
            store = dag.add(k, sw, ch, "copy", [back])
            for r in range(n):
                if r != k:
                    dag.add(sw, r, ch, "copy", [store])


def rhd_dag(dag: StepDag, servers, size: float) -> None:
    order = ring_order(servers, 0)
    n = dag.n
    p = 1 << (n.bit_length() - 1)
    extra = n - p
    into: dict[int, list[int]] = {v: [] for v in range(n)}   # by virtual rank (position)
    sends: dict[int, list[int]] = {v: [] for v in range(n)}

    def add(a: int, b: int, chunks, op: str, snap=None) -> None:
        # deps snapshot taken before the step: a pairwise exchange must not wait for its partner
        t = dag.add(order[a], order[b], chunks, op, (snap or into)[a], sends[a][-1:])
        into[b].append(t)
        sends[a].append(t)

    steps = p.bit_length() - 1
    # range of segments each virtual rank holds after the halving phase, and the segment owners
    ranges = {v: (0, p) for v in range(p)}
    final = {}
    for k in range(steps):
        d = p >> (k + 1)
        for v in range(p):
            lo, hi = ranges[v]
            mid = (lo + hi) // 2
            ranges[v] = (lo, mid) if not v & d else (mid, hi)
    for v in range(p):
        final[ranges[v][0]] = v
    op = dag.op
    if op == "all_reduce":
        segs = [dag.new_chunk(size / p) for _ in range(p)]
    elif op == "reduce_scatter":
        segs = [dag.new_chunk(size / p, owner=order[final[j]]) for j in range(p)]
    else:  # all_gather
        segs = [dag.new_chunk(size / p, owner=order[final[j]]) for j in range(p)]
    if op == "all_reduce":
        for e in range(extra):
            add(p + e, e, segs, "reduce")
    ranges = {v: (0, p) for v in range(p)}
    if op in ("all_reduce", "reduce_scatter"):
        for k in range(steps):
            d = p >> (k + 1)
            snap = {v: list(ts) for v, ts in into.items()}
            for v in range(p):
                lo, hi = ranges[v]
                mid = (lo + hi) // 2
                give = (mid, hi) if not v & d else (lo, mid)
                add(v, v ^ d, segs[give[0]:give[1]], "reduce", snap)
            for v in range(p):
                lo, hi = ranges[v]
                mid = (lo + hi) // 2
                ranges[v] = (lo, mid) if not v & d else (mid, hi)
    else:
        for v in range(p):
            ranges[v] = next((j, j + 1) for j, u in final.items() if u == v)
    if op in ("all_reduce", "all_gather"):
        for k in reversed(range(steps)):
            d = p >> (k + 1)
            snap = {v: list(ts) for v, ts in into.items()}
            for v in range(p):
                lo, hi = ranges[v]
                add(v, v ^ d, segs[lo:hi], "copy", snap)
            for v in range(p):
                lo, hi = ranges[v]
                plo, phi = ranges[v ^ d]
                ranges[v] = (min(lo, plo), max(hi, phi))
    if op == "all_reduce":
        for e in range(extra):
            add(e, p + e, segs, "copy")


def a2a_dag(dag: StepDag, size: float, pairwise: bool) -> None:
    n = dag.n
    ids = [[dag.new_chunk(size / n, owner=i, dest=j) for j in range(n)] for i in range(n)]
    prev: dict[int, int] = {}
    for k in range(1, n):
        for i in range(n):
            j = (i + k) % n
            after = [prev[i]] if pairwise and i in prev else []
            prev[i] = dag.add(i, j, (ids[i][j],), "copy", (), after)


def hierarchical_dag(dag: StepDag, servers, size: float) -> None:
    k = len(servers[0])
    m = len(servers)
    op = dag.op
    # chunks[j][u]: the slice of local index j and unit u (owner servers[u][j] for AG / RS)
    owner = (lambda j, u: servers[u][j]) if op != "all_reduce" else (lambda j, u: -1)
    chunks = [[dag.new_chunk(size / (k * m), owner(j, u)) for u in range(m)] for j in range(k)]
    into: dict[int, list[int]] = {r: [] for s in servers for r in s}

    def intra(kind: str) -> None:
        pre_all = {r: list(into[r]) for r in into}
        for s in servers:
            got = _ring_phase(dag, s, [[tuple(chunks[j])] for j in range(k)], kind,
                              {r: pre_all[r] for r in s})
            for r, ts in got.items():
                into[r].extend(ts)

    def inter(kinds) -> None:
        for j in range(k):
            dag.channel = 100 + j
            ring = [s[j] for s in servers]
            segs = [[(chunks[j][x],)] for x in range(m)]
            for kind in kinds:
                pre = {r: list(into[r]) for r in ring}
                got = _ring_phase(dag, ring, segs, kind, pre)
                for r in ring:
                    into[r].extend(got[r])
        dag.channel = 0

    if op == "all_reduce":
        intra("rs")          # position j of a unit ends with slice j reduced inside the unit
        inter(("rs", "ag"))  # slice j all-reduced across units
        intra("ag")
    elif op == "all_gather":
        inter(("ag",))       # rank (u, j) gathers the shards of local index j from every unit
        intra("ag")
    else:
        intra("rs")
        inter(("rs",))       # rank (u, j) ends with chunk (j, u) fully reduced


def build_dag(op: str, algorithm: str, servers: list[list[int]], size: float, *,
              channels: int | None = None, pieces: int = 2) -> StepDag:
    """Step-level DAG for a group given as group ranks per server (rank 0 is the root of
    broadcast/reduce). `channels`: ring channels (default: GPUs per server when the group spans
    several servers, else 1); `pieces`: pipelined pieces per segment."""
    n = sum(len(s) for s in servers)
    if sorted(r for s in servers for r in s) != list(range(n)):
        raise NetsimError("build_dag: servers must partition ranks 0..n-1")
    if op in ("send", "recv"):
        algorithm = "p2p"
    elif algorithm not in APPLICABLE.get(op, ()):
        raise NetsimError(f"algorithm {algorithm!r} does not apply to {op}")
    dag = StepDag(op, algorithm, n, n_participants=n + (1 if algorithm == "nvls" else 0))
    if algorithm == "p2p":
        ch = dag.new_chunk(size, owner=0, dest=1)
        dag.add(0, 1, (ch,), "copy")
    elif algorithm == "ring":
        c = channels or (max(len(s) for s in servers) if len(servers) > 1 else 1)
        ring_dag(dag, servers, size, c, pieces)
    elif algorithm == "tree":
        tree_dag(dag, servers, size, pieces)
    elif algorithm == "nvls":
        nvls_dag(dag, size, pieces)
    elif algorithm == "rhd":
        if op != "all_reduce" and n & (n - 1):
            raise NetsimError(f"algorithm 'rhd' for {op} needs a power-of-two group (got {n})")
        rhd_dag(dag, servers, size)
    elif algorithm in ("direct", "pairwise", "pxn"):
        a2a_dag(dag, size, algorithm == "pairwise")
    elif algorithm == "hierarchical":
        if len({len(s) for s in servers}) > 1:
            raise NetsimError("algorithm 'hierarchical' needs the same number of GPUs in every server")
        hierarchical_dag(dag, servers, size)
    return dag


def dag_specs(dag: StepDag, gpus) -> list:
    """Engine flows of a step-level DAG: one flow per transfer (NVSwitch participant -> its ports)."""
    from netsim.schedules import FlowSpec

    specs = []
    for t in dag.transfers:
        if t.src >= dag.n:
            hop, nvls = ("down", gpus[t.dst]), True
        elif t.dst >= dag.n:
            hop, nvls = ("up", gpus[t.src]), True
        else:
            hop, nvls = (gpus[t.src], gpus[t.dst]), False
        specs.append(FlowSpec([hop], t.nbytes, steps=1, deps=t.deps, weights=[1.0] if nvls else None,
                              nvls=nvls, after=t.after))
    return specs
