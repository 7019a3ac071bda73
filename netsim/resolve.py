"""FlowSpecs -> engine flows on a TopoView (directed channels, weights, latency, rate cap)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from netsim.protocol import fill_factor
from netsim.schedules import FlowSpec


@dataclass
class ResolvedFlow:
    channels: np.ndarray     # directed channel ids (unique)
    weights: np.ndarray      # bytes on the channel per byte of the flow (protocol wire overhead included)
    frac: float              # flow payload = frac x request size
    latency_s: float
    cap_Bps: float           # rate cap (NVLS port throughput, NCCL's LL cap), flow bytes / s
    deps: tuple[int, ...]
    after: tuple[int, ...] = ()
    nch: float = 1.0         # NCCL channels riding this flow (pipeline fill: payload per channel)
    fill_stages: float = 1.0
    fill_chunk: float = 0.0  # bytes per channel (0: no fill)

    def payload_bytes(self, size: float) -> float:
        """Bytes this flow moves for a request of `size`: its share times the pipeline-fill factor."""
        return self.frac * size * fill_factor(self.frac, size, self.nch, self.fill_stages, self.fill_chunk)


@dataclass(frozen=True)
class ResolveContext:
    """Protocol-level terms of one (algorithm, protocol, group): see netsim.protocol.NetModel."""
    hop_alpha_s: Callable[[str], float]   # link class -> per-hop latency (without propagation)
    efficiency: float                     # protocol efficiency: wire bytes = payload / efficiency
    cap_algbw_Bps: float                  # NCCL's LL cap as an algorithm bandwidth (inf if none)
    channels: int                         # NCCL channels of the collective (comm or NVLS channels)
    chunk: Callable[[str], float]         # fill kind -> chunk bytes per channel
    nvls_latency_s: float
    nvls_efficiency: float


def ecmp_key(spec_idx: int, hop_idx: int) -> int:
    # Persistent connections: the same (spec, hop) of a group always takes the same ECMP path.
    return (spec_idx * 1009 + hop_idx) & 0x7FFFFFFF


# From this many hops ring_window_s slides its window in numpy; below, numpy's per-call cost exceeds
# the Python loop's (about 190 hops on CPython 3.11).
RING_NUMPY_MIN_HOPS = 160


def ring_window_s(hop_lat: list[float] | np.ndarray, steps: int) -> float:
    """Latency of a piece crossing `steps` consecutive hops of a ring (hop_lat in ring order,
    cyclic): the worst such run."""
    h = len(hop_lat)
    if h == 0 or steps <= 0:
        return 0.0
    laps, rest = divmod(steps, h)
    seq = hop_lat.tolist() if type(hop_lat) is np.ndarray else hop_lat     # fsum reads floats faster
    total = laps * math.fsum(seq)
    if rest == 0:
        return total
    run = math.fsum(seq[:rest])
    if h == 1:
        return total + run
    # the window sliding by one hop: run_i = run_(i-1) + (hop[(i + rest - 1) % h] - hop[i - 1])
    if h < RING_NUMPY_MIN_HOPS and type(hop_lat) is list:
        best = run
        for entering, leaving in zip(hop_lat[rest:] + hop_lat[:rest - 1], hop_lat[:h - 1]):
            run += entering - leaving
            if run > best:
                best = run
        return total + best
    # a sequential accumulate (np.add.accumulate adds left to right) gives the loop's exact sums; the
    # differences d[1 + j] = hop[(j + rest) % h] - hop[j] (j < h - 1) in two slices (no wrap, wrap)
    a = np.asarray(hop_lat, dtype=np.float64)
    k = h - rest
    d = np.empty(h)
    d[0] = run
    np.subtract(a[rest:], a[:k], out=d[1:k + 1])
    np.subtract(a[:rest - 1], a[k:h - 1], out=d[k + 1:])
    np.add.accumulate(d, out=d)
    return total + float(d.max())


def critical_latency_s(spec: FlowSpec, hop_lat: list[float]) -> float:
    """Latency of a (lock-step) flow: the critical path of its first piece (FlowSpec docstring)."""
    if not hop_lat:
        return 0.0
    if spec.ring:
        return ring_window_s(hop_lat, spec.steps)
    if spec.lat_stages:
        return sum(max(math.fsum(hop_lat[e] for e in path) for path in stage) for stage in spec.lat_stages if stage)
    return spec.steps * max(hop_lat)


def fill_stages(spec: FlowSpec) -> int:
    """Store-and-forward stages beyond the first on the flow's pipeline: chains and trees, the hops
    of the critical path - 1; rings, NVLS and parallel transfers 1 (netsim.calibration)."""
    if spec.lat_stages and not spec.ring:
        hops = sum(max(len(p) for p in stage) for stage in spec.lat_stages if stage)
        return max(1, hops - 1)
    return 1


@dataclass(slots=True)
class RoutedSpec:
    """The protocol-independent part of a resolved flow: channels, weights, hop classes, propagation
    (slots: one per spec of every group routed, e.g. every pipeline send pair)."""
    spec: FlowSpec
    channels: np.ndarray
    weights: np.ndarray
    hop_class: tuple[str, ...]      # tuples: immutable, and the garbage collector stops tracking them
    hop_prop_s: tuple[float, ...]
    switch_prop_s: float
    line_up_Bps: float
    # finish's latencies of these hops (LatencyMemo): set by finish on long specs, or shared by
    # routed specs with equal hop classes and propagations (netsim.backend.Planner._quick_routed)
    memo: LatencyMemo | None = field(default=None, repr=False, compare=False)


# From this many hops, finish keeps a spec's latencies (LatencyMemo): below, hashing the memo's key
# costs about what the plain formula does.
MEMO_MIN_HOPS = 16


@dataclass(slots=True)
class LatencyMemo:
    """Critical latencies (finish) of one list of hops (link classes, propagations) under each set
    of per-class hop alphas: the same values in the same arithmetic, computed once per protocol,
    spec latency fields and hop list instead of once per spec and plan."""
    classes: tuple[str, ...]              # the hops' distinct link classes, in first-use order
    latency_s: dict[tuple, float]         # (alpha per class, ring, steps, lat_stages) -> latency s
    class_idx: np.ndarray | None = None   # long rings: per hop its class's position in `classes`
    prop_s: np.ndarray | None = None      # and its propagation s (hop latencies as one numpy sum)


def new_latency_memo(hop_class: tuple[str, ...]) -> LatencyMemo:
    return LatencyMemo(tuple(dict.fromkeys(hop_class)), {})


def routed_latency_s(routed: RoutedSpec, hop_alpha_s: Callable[[str], float]) -> float:
    """Latency of a routed (non-NVLS) spec: per hop, its class's alpha + its propagation, over the
    spec's critical path (critical_latency_s); kept in routed.memo (made here from MEMO_MIN_HOPS hops)."""
    spec = routed.spec
    memo = routed.memo
    if memo is None:
        if len(routed.hop_class) < MEMO_MIN_HOPS:
            alpha = {cls: hop_alpha_s(cls) for cls in set(routed.hop_class)}
            return critical_latency_s(spec, [alpha[c] + p for c, p in zip(routed.hop_class, routed.hop_prop_s)])
        memo = routed.memo = new_latency_memo(routed.hop_class)
    alphas = tuple([hop_alpha_s(c) for c in memo.classes])
    key = (alphas, spec.ring, spec.steps, spec.lat_stages)
    got = memo.latency_s.get(key)
    if got is None:
        if spec.ring and len(routed.hop_class) >= RING_NUMPY_MIN_HOPS:
            # the same per-hop sums alpha + propagation, elementwise in numpy (IEEE, like Python's +)
            if memo.class_idx is None:
                pos = {c: i for i, c in enumerate(memo.classes)}
                memo.class_idx = np.fromiter(map(pos.__getitem__, routed.hop_class), dtype=np.intp,
                                             count=len(routed.hop_class))
                memo.prop_s = np.array(routed.hop_prop_s, dtype=np.float64)
            got = ring_window_s(np.array(alphas, dtype=np.float64)[memo.class_idx] + memo.prop_s, spec.steps)
        else:
            alpha = dict(zip(memo.classes, alphas))
            got = critical_latency_s(spec, [alpha[c] + p for c, p in zip(routed.hop_class, routed.hop_prop_s)])
        memo.latency_s[key] = got
    return got


def _route_key(spec: FlowSpec, spec_idx: int) -> tuple:
    """What the routing of a spec depends on (the view's route cache key): index, PXN flag, hops, weights."""
    return (spec_idx, spec.pxn, tuple(spec.hops), None if spec.weights is None else tuple(spec.weights))


def _as_route_of(got: RoutedSpec, spec: FlowSpec) -> RoutedSpec:
    """`got`'s route carried by `spec` (a spec with the same route key); `got` itself when it is spec's."""
    if got.spec is spec:
        return got
    return RoutedSpec(spec, got.channels, got.weights, got.hop_class, got.hop_prop_s, got.switch_prop_s,
                      got.line_up_Bps)


def route_spec(view, spec: FlowSpec, spec_idx: int) -> RoutedSpec:
    """Route every hop of a FlowSpec (cached per group by the planner; shared by all protocols). The
    routing of a spec depends only on its hops, weights, PXN flag and index (the flow keys), so specs
    of other collectives with the same hops (a ring's reduce-scatter and all-gather) reuse it."""
    cache = getattr(view, "_routed_specs", None)
    if cache is None:
        return _route_spec(view, spec, spec_idx)
    key = _route_key(spec, spec_idx)
    got = cache.get(key)
    if got is None:
        got = cache[key] = _route_spec(view, spec, spec_idx)
    return _as_route_of(got, spec)


def route_specs(view, specs: list[FlowSpec]) -> list[RoutedSpec]:
    """route_spec(view, specs[i], i) of every spec of a collective, with the hops of its ring-like
    specs routed in one batch (_route_ring_like_many)."""
    cache = getattr(view, "_routed_specs", None)
    out: list[RoutedSpec | None] = [None] * len(specs)
    keys: list = [None] * len(specs)
    todo: list[int] = []
    for i, spec in enumerate(specs):
        if cache is not None:
            key = keys[i] = _route_key(spec, i)
            got = cache.get(key)
            if got is not None:
                out[i] = _as_route_of(got, spec)
                continue
        todo.append(i)
    batch = [i for i in todo if _ring_like(view, specs[i])]
    fresh: dict[int, RoutedSpec | None] = {}
    if batch:
        fresh = dict(zip(batch, _route_ring_like_many(view, [(specs[i], i) for i in batch])))
    for i in todo:
        got = fresh.get(i)
        if got is None:
            got = _route_hops(view, specs[i], i)
        if cache is not None:
            cache[keys[i]] = got
        out[i] = _as_route_of(got, specs[i])     # a fresh route already carries specs[i]: no copy
    return out


# From this many hops of pairwise specs in one route_specs_many call, they are routed as one numpy
# batch (_route_ring_like_many) whatever their length: the per-call overhead is paid once per batch.
BATCH_MIN_HOPS = 32
BATCH_MAX_HOPS = 1 << 15


def route_specs_many(view, spec_lists: list[list[FlowSpec]]) -> list[list[RoutedSpec]]:
    """[route_specs(view, specs) for specs in spec_lists] (the spec index of each spec is its
    position in its list), with the unweighted, non-PXN specs of GPU pairs of every list - short
    ones too, e.g. the one-hop specs of many point-to-point sends - routed in one batch
    (_route_ring_like_many) when they hold BATCH_MIN_HOPS hops or more. Each route is the one
    route_spec gives (the same channels, weights, classes and latencies; the view's cache is read
    and filled by the same keys)."""
    cache = getattr(view, "_routed_specs", None)
    out: list[list[RoutedSpec | None]] = [[None] * len(specs) for specs in spec_lists]
    pending: dict[tuple, list[tuple[int, int]]] = {}      # routing key -> (list, index) of specs to route
    for j, specs in enumerate(spec_lists):
        for i, spec in enumerate(specs):
            key = _route_key(spec, i)
            got = cache.get(key) if cache is not None else None
            if got is not None:
                out[j][i] = _as_route_of(got, spec)
                continue
            at = pending.get(key)
            if at is None:
                pending[key] = [(j, i)]
            else:
                at.append((j, i))
    batched = hasattr(view, "one_switch_hops")
    batch = [key for key in pending if batched and key[3] is None and not key[1]]
    fresh: dict[tuple, RoutedSpec | None] = {}
    if batch and sum(len(key[2]) for key in batch) >= BATCH_MIN_HOPS:
        # in chunks of at most BATCH_MAX_HOPS hops: the batch's arrays are a few words per hop and path link
        lo = 0
        while lo < len(batch):
            hi, hops = lo, 0
            while hi < len(batch) and (hi == lo or hops + len(batch[hi][2]) <= BATCH_MAX_HOPS):
                hops += len(batch[hi][2])
                hi += 1
            items = [(spec_lists[j][i], i) for j, i in (pending[key][0] for key in batch[lo:hi])]
            fresh.update(zip(batch[lo:hi], _route_ring_like_many(view, items)))
            lo = hi
    for key, at in pending.items():
        j, i = at[0]
        got = fresh.get(key)
        if got is None:
            got = _route_spec(view, spec_lists[j][i], i)
        if cache is not None:
            cache[key] = got
        for j, i in at:
            out[j][i] = _as_route_of(got, spec_lists[j][i])
    return out


def _ring_like(view, spec: FlowSpec) -> bool:
    """A spec _route_ring_like_many may take: unweighted, no PXN, more than 8 hops (shorter ones are
    routed faster hop by hop), on a view with batched routes."""
    return spec.weights is None and not spec.pxn and len(spec.hops) > 8 and hasattr(view, "one_switch_hops")


def _route_spec(view, spec: FlowSpec, spec_idx: int) -> RoutedSpec:
    if _ring_like(view, spec):
        got = _route_ring_like_many(view, [(spec, spec_idx)])[0]
        if got is not None:
            return got
    return _route_hops(view, spec, spec_idx)


def _route_hops(view, spec: FlowSpec, spec_idx: int) -> RoutedSpec:
    """_route_spec hop by hop (TopoView.hop, NVSwitch ports)."""
    chans: list[int] = []
    ws: list[float] = []
    classes: list[str] = []
    props: list[float] = []
    switch_prop = 0.0
    line_up = math.inf
    weights = spec.weights
    pxn = spec.pxn
    base = spec_idx * 1009           # ecmp_key(spec_idx, h) = (base + h) & 0x7FFFFFFF
    view_hop = view.hop
    for h, hop in enumerate(spec.hops):
        w = 1.0 if weights is None else float(weights[h])
        a = hop[0]
        if a == "up" or a == "down":
            up, down = view.switch_channels(int(hop[1]))
            cs = up if hop[0] == "up" else down
            if hop[0] == "up":
                line_up = min(line_up, float(sum(view.line_Bps[c] for c in cs)))
            for c in cs:
                chans.append(c)
                ws.append(w / len(cs))
            switch_prop = max(switch_prop, view.path_latency_s(cs[:1]))
            continue
        # striped / multi-port routes: the latency of one route (weight-averaged)
        path, pw, prop, cls = view_hop(int(a), int(hop[1]), (base + h) & 0x7FFFFFFF, pxn)
        chans.extend(path)
        ws.extend(pw if w == 1.0 else [w * x for x in pw])
        props.append(float(prop))
        classes.append(cls)
    if len(chans) <= SMALL_SPEC_CHANNELS:
        uniq, wsum = _merge_small(chans, ws)
    else:
        arr = np.asarray(chans, dtype=np.int64)
        uniq, inv = np.unique(arr, return_inverse=True)
        # per channel, the weights summed in hop order (as np.add.at does)
        wsum = np.bincount(inv.reshape(-1), weights=np.asarray(ws, dtype=np.float64), minlength=len(uniq))
    return RoutedSpec(spec, uniq, wsum, tuple(classes), tuple(props), switch_prop, line_up)


# Up to this many channel uses, _route_hops merges them in plain Python: numpy's per-call overhead
# (np.unique, np.bincount) dominates on the few channels of a point-to-point or small-group spec.
SMALL_SPEC_CHANNELS = 64


def _merge_small(chans: list[int], ws: list[float]) -> tuple[np.ndarray, np.ndarray]:
    """(sorted distinct channels, per channel the weights summed in use order) of a few channel
    uses: what np.unique + np.bincount give (each sum starts at 0.0 and adds in order), as
    int64 / float64 arrays."""
    acc: dict[int, float] = {}
    get = acc.get
    for c, w in zip(chans, ws):
        acc[c] = get(c, 0.0) + w
    keys = sorted(acc)
    return np.array(keys, dtype=np.int64), np.array([acc[k] for k in keys], dtype=np.float64)


def _route_ring_like_many(view, items: list[tuple[FlowSpec, int]]) -> list[RoutedSpec | None]:
    """_route_spec of unweighted specs of GPU pairs (rings, chains; (spec, index) pairs) with all
    their hops routed in batches (_route_pair_hops). None for a spec with a switch-port hop (or none)."""
    out: list[RoutedSpec | None] = [None] * len(items)
    lens = [len(spec.hops) for spec, _ in items]
    total = sum(lens)
    try:
        flat = np.fromiter(chain.from_iterable(chain.from_iterable(spec.hops for spec, _ in items)),
                           dtype=np.int64, count=2 * total)
        take = list(range(len(items)))
    except (TypeError, ValueError):          # ("up", gpu) / ("down", gpu) NVSwitch ports: spec by spec
        pairs, take = [], []
        for j, (spec, _idx) in enumerate(items):
            try:
                pairs.append(np.fromiter(chain.from_iterable(spec.hops), dtype=np.int64, count=2 * lens[j]))
            except (TypeError, ValueError):
                continue
            take.append(j)
        if not take:
            return out
        flat = np.concatenate(pairs)
        lens = [lens[j] for j in take]
        total = sum(lens)
    if not total:
        return out
    flat = flat.reshape(-1, 2)
    got = _route_pair_hops(view, flat[:, 0], flat[:, 1], [items[j][1] for j in take], lens)
    if got is None:
        return out
    for j, r in zip(take, got):
        if r is not None:
            out[j] = RoutedSpec(items[j][0], *r, 0.0, math.inf)
    return out


def route_relabelled(view, specs: list[FlowSpec], src: np.ndarray, dst: np.ndarray) -> list[list[RoutedSpec] | None]:
    """route_specs of several copies of one list of unweighted, non-PXN specs of GPU pairs, copy c's
    hops being (src[c, h], dst[c, h]) (all specs' hops end to end, spec i's ECMP keys those of index
    i): per copy its RoutedSpecs, or None when a spec of that copy is not routed in batch (a
    switch-port hop, a view without batched routes). Each RoutedSpec carries specs[i] (the fields
    the plans read; its hops are the template's, not the copy's) and the routes route_spec gives
    for the copy's hops, routed in chunks of about BATCH_MAX_HOPS hops without building them as
    Python pairs (netsim.backend.Planner._preroute: the translated groups of one template)."""
    n_copy, n_hop = src.shape
    lens = [len(s.hops) for s in specs]
    out: list[list[RoutedSpec] | None] = []
    if not hasattr(view, "one_switch_hops") or not n_hop:
        return [None] * n_copy
    step = max(1, BATCH_MAX_HOPS // n_hop)
    for lo in range(0, n_copy, step):
        hi = min(n_copy, lo + step)
        got = _route_pair_hops(view, src[lo:hi].reshape(-1), dst[lo:hi].reshape(-1),
                               list(range(len(specs))) * (hi - lo), lens * (hi - lo))
        for c in range(hi - lo):
            part = None if got is None else got[c * len(specs):(c + 1) * len(specs)]
            if part is None or any(r is None for r in part):
                out.append(None)
            else:
                out.append([RoutedSpec(sp, *r, 0.0, math.inf) for sp, r in zip(specs, part)])
    return out


def _route_pair_hops(view, src: np.ndarray, dst: np.ndarray, idxs: list[int], lens: list[int]):
    """The routes of consecutive runs of GPU-pair hops (run t: lens[t] hops, spec index idxs[t], its
    hop h keyed ecmp_key(idxs[t], h)), all hops routed at once: through a single host switch
    (TopoView.one_switch_hops), through the network on the router's single route
    (TopoView.net_hops), the rest hop by hop (TopoView.hop). Per run (channels, weights, hop
    classes, hop propagations) as _route_hops gives them (the same channels, weights, classes and
    latencies in the same order; the hops are rows of one channel matrix, -1 = none, read row by
    row), or None for a run without channels; None when the view cannot answer."""
    total = len(src)
    n_arr = np.array(lens, dtype=np.int64)
    starts = np.cumsum(n_arr) - n_arr
    # ecmp_key(idx, h) of hop h of each spec
    keys = (np.repeat(np.array(idxs, dtype=np.int64) * 1009 - starts, n_arr)
            + np.arange(total, dtype=np.int64)) & 0x7FFFFFFF
    got = view.one_switch_hops(src, dst)
    if got is None:
        return None
    ok, l1, l2, prop, cls = got
    blocks: list[tuple[np.ndarray, np.ndarray]] = [(np.flatnonzero(ok), np.column_stack((l1[ok], l2[ok])))]
    prop = prop.copy()
    cls = cls.copy()
    weighted: list[tuple[int, tuple[float, ...]]] = []
    rest = np.flatnonzero(~ok)
    if len(rest):
        net = view.net_hops(src[rest], dst[rest], keys[rest])
        if net is not None:
            at, rows, p, c = net
            hit = rest[at]
            blocks.append((hit, rows))
            prop[hit] = p
            cls[hit] = c
            left = np.ones(len(rest), dtype=bool)
            left[at] = False
            rest = rest[left]
        if len(rest):
            view_hop = view.hop
            paths = []
            for h, a, b, k in zip(rest.tolist(), src[rest].tolist(), dst[rest].tolist(), keys[rest].tolist()):
                path, pw, pr, kc = view_hop(a, b, k, False)
                if pw.count(1.0) != len(pw):
                    weighted.append((h, pw))
                paths.append(path)
                prop[h] = pr
                cls[h] = kc
            rows = np.full((len(rest), max(1, max(map(len, paths)))), -1, dtype=np.int64)
            for i, path in enumerate(paths):
                rows[i, :len(path)] = path
            blocks.append((rest, rows))
    width = max(r.shape[1] for _, r in blocks)
    mat = np.full((len(src), width), -1, dtype=np.int64)
    for at, rows in blocks:
        mat[at, :rows.shape[1]] = rows
    wmat = None
    if weighted:
        wmat = np.ones((len(src), width), dtype=np.float64)
        for h, pw in weighted:
            wmat[h, :len(pw)] = pw
    # per spec: its distinct channels (sorted) and per channel the weights of its uses summed in use
    # order (row by row: hop order, then path order), for all specs at once: a stable sort by (spec,
    # channel) keeps the use order inside each (spec, channel) run, and bincount adds in array order
    r_at, c_at = np.nonzero(mat >= 0)                     # row-major: hop order, then path order
    chans = mat[r_at, c_at]
    spec_of = np.repeat(np.arange(len(lens), dtype=np.int64), n_arr)[r_at]
    order = np.argsort(spec_of * (int(chans.max(initial=0)) + 1) + chans, kind="stable")
    chans, spec_of = chans[order], spec_of[order]
    new = np.empty(len(chans), dtype=bool)
    new[:1] = True
    np.not_equal(chans[1:], chans[:-1], out=new[1:])
    new[1:] |= spec_of[1:] != spec_of[:-1]
    run = np.cumsum(new) - 1                              # (spec, channel) run of each use
    uniq = chans[new]
    w = None if wmat is None else wmat[r_at, c_at][order]
    if w is None or (w == 1.0).all():
        # unit weights: per channel its number of uses, what the weighted sum gives exactly
        wsum = np.bincount(run).astype(np.float64)
    else:
        wsum = np.bincount(run, weights=w, minlength=len(uniq))
    bounds = np.searchsorted(spec_of[new], np.arange(len(lens) + 1)).tolist()
    props = prop.tolist()
    classes = cls.tolist()
    out: list[tuple | None] = []
    o = 0
    for t, n in enumerate(lens):
        a, b = bounds[t], bounds[t + 1]
        out.append((uniq[a:b].copy(), wsum[a:b].copy(), tuple(classes[o:o + n]), tuple(props[o:o + n]))
                   if b > a else None)
        o += n
    return out


def finish(routed: RoutedSpec, ctx: ResolveContext, unit_size: float = 1.0) -> ResolvedFlow:
    """A routed spec under one (algorithm, protocol): latency, wire weights, caps and fill terms."""
    spec = routed.spec
    frac = spec.nbytes / unit_size
    if spec.nvls:
        wmax = max(spec.weights) if spec.weights else 1.0
        cap = ctx.nvls_efficiency * routed.line_up_Bps / wmax
        # NCCL's NVLS latency (one per call) + the multimem round trips' propagation
        latency = ctx.nvls_latency_s + spec.steps * 2 * routed.switch_prop_s
    else:
        latency = routed_latency_s(routed, ctx.hop_alpha_s)
        cap = frac * ctx.cap_algbw_Bps
    weights = routed.weights / ctx.efficiency if ctx.efficiency != 1.0 else routed.weights
    nch = spec.share * ctx.channels if spec.share is not None else 1.0
    return ResolvedFlow(routed.channels, weights, frac, latency, cap, tuple(spec.deps), tuple(spec.after),
                        nch=nch, fill_stages=fill_stages(spec), fill_chunk=ctx.chunk(spec.fill))


def resolve(view, spec: FlowSpec, spec_idx: int, ctx: ResolveContext, unit_size: float = 1.0) -> ResolvedFlow:
    """FlowSpec -> ResolvedFlow (route_spec + finish)."""
    return finish(route_spec(view, spec, spec_idx), ctx, unit_size)


class ScheduleRun:
    """One flow schedule in flight on a FlowEngine: releases flows as their dependencies finish.

    The collective starts `delay_s` (launch + base latency) after now. A flow starts `latency_s` x
    `lat_mult` after its last data dependency (`deps`) finishes (root flows: after the delay), and
    not before its order-only predecessors (`after`, same-connection FIFO) finish; it moves its
    payload times the pipeline-fill factor (netsim.protocol.fill_factor). `on_done(t)` fires when
    the last flow completes (at once through the engine for an empty schedule).
    """

    __slots__ = ("engine", "flows", "size", "waiting", "succ", "left", "on_done", "ready", "delay_s", "lat_mult")

    def __init__(self, engine, flows: list[ResolvedFlow], size: float, on_done, *, delay_s: float = 0.0,
                 lat_mult: float = 1.0):
        self.engine = engine
        self.flows = flows
        self.size = size
        self.on_done = on_done
        self.delay_s = delay_s
        self.lat_mult = lat_mult
        self.waiting = [len(f.deps) + len(f.after) for f in flows]
        self.succ: list[list[tuple[int, bool]]] = [[] for _ in flows]
        for i, f in enumerate(flows):
            for d in f.deps:
                self.succ[d].append((i, True))
            for d in f.after:
                self.succ[d].append((i, False))
        self.left = len(flows)
        self.ready = [-math.inf] * len(flows)

    def start(self) -> None:
        now = self.engine.now_s
        if not self.flows:
            self.engine.add_flow([], 0.0, on_done=lambda _f, t: self.on_done(t))
            return
        for i, f in enumerate(self.flows):
            if not f.deps:
                self.ready[i] = now + self.delay_s + f.latency_s * self.lat_mult
        for i, w in enumerate(self.waiting):
            if w == 0:
                self._launch(i)

    def _launch(self, i: int) -> None:
        f = self.flows[i]
        lat = max(0.0, self.ready[i] - self.engine.now_s)
        nbytes = f.payload_bytes(self.size)
        self.engine.add_flow(f.channels, nbytes, weights=f.weights, latency_s=lat,
                             cap_Bps=f.cap_Bps, on_done=lambda _fid, t, i=i: self._flow_done(i, t))

    def _flow_done(self, i: int, t: float) -> None:
        self.left -= 1
        for j, data in self.succ[i]:
            r = t + self.flows[j].latency_s * self.lat_mult if data else t
            if r > self.ready[j]:
                self.ready[j] = r
            self.waiting[j] -= 1
            if self.waiting[j] == 0:
                self._launch(j)
        if self.left == 0:
            self.on_done(t)


def _sorted_unique(a: np.ndarray) -> np.ndarray:
    """np.unique of a 1-d array (sorted distinct values) without numpy's masked-array check, which
    imports numpy.ma (~10 ms) on first use."""
    a = np.sort(a)
    if len(a) == 0:
        return a
    keep = np.empty(len(a), dtype=bool)
    keep[0] = True
    np.not_equal(a[1:], a[:-1], out=keep[1:])
    return a[keep]


def compact_flows(capacity_Bps: np.ndarray, flows: list[ResolvedFlow]) -> tuple[np.ndarray, list[ResolvedFlow]]:
    """The flows with channels renumbered over the links they use, and those links' capacities: a
    schedule run alone needs only its own links (the max-min result is the same, each event costs
    O(its links) instead of O(all links of a large fabric))."""
    from dataclasses import replace

    used = _sorted_unique(np.concatenate([f.channels for f in flows])) if flows else np.zeros(0, dtype=np.int64)
    local = [replace(f, channels=np.searchsorted(used, f.channels).astype(np.int64)) for f in flows]
    return capacity_Bps[used], local


def static_time_s(view, flows: list[ResolvedFlow], size: float, use_numba: bool | None = None, *,
                  delay_s: float = 0.0, lat_mult: float = 1.0, compact=None) -> float:
    """Time of a flow schedule alone on the idle network: the exact fluid time (rates re-shared
    max-min whenever one of its flows starts or finishes), on a private engine over the schedule's own
    links (`compact`: a cached compact_flows result)."""
    if not flows or size <= 0:
        return 0.0
    cap, local = compact if compact is not None else compact_flows(view.capacity_Bps, flows)
    if len(local) == 1 and not local[0].deps and not local[0].after:
        f = local[0]     # one flow alone: its rate is its tightest link (or its cap)
        rate = min(float(np.min(cap[f.channels] / f.weights)) if len(f.channels) else math.inf, f.cap_Bps)
        nbytes = f.payload_bytes(size)
        return delay_s + f.latency_s * lat_mult + (nbytes / rate if nbytes > 0 else 0.0)
    from netsim.engine import FlowEngine  # the flow engine (numpy max-min) only when a schedule needs it
    engine = FlowEngine(cap, use_numba=use_numba)
    done: list[float] = []
    ScheduleRun(engine, local, float(size), done.append, delay_s=delay_s, lat_mult=lat_mult).start()
    engine.run()
    return done[0]
