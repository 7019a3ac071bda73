"""Max-min fair rate allocation (weighted, with optional per-flow caps).

A flow f crosses links l with weights w[f, l] > 0: at rate r_f it consumes r_f * w[f, l] of link l's
capacity (weight 2 = the flow crosses the link twice, as a lock-step ring channel whose two hops share
a link). Rates are max-min fair: no flow can be given more without taking from a flow that is not
faster. Computed with the heap-based bottleneck algorithm: repeatedly take the link with the smallest
fair share (remaining capacity / sum of unfrozen weights), freeze its flows at that share, subtract
them from every link they cross. Shares only grow as flows freeze, so the heap is lazy: a popped key
lower than the link's current share is pushed back. A flow cap is a private one-flow link.

Two implementations behind `maxmin_rates`: pure Python (always available, the reference) and numba
(optional; same results bit for bit: equal shares are taken in link-id order by every path). Input is CSR: flow f crosses links
`flow_links[flow_ptr[f]:flow_ptr[f+1]]` with the matching `flow_w` entries.
"""

from __future__ import annotations

import heapq
import math

import numpy as np

_INF = math.inf


def maxmin_rates_python(capacity_Bps, flow_ptr, flow_links, flow_w, flow_cap_Bps=None) -> np.ndarray:
    """Pure-Python heap-based max-min. Returns rates (bytes/s per unit weight) per flow.

    A flow with no links and no cap gets +inf. Set-up (sums, link -> flows index) is vectorised
    with numpy; the bottleneck loop is plain Python over lists.
    """
    if len(flow_links) < 512:
        return _maxmin_small(capacity_Bps, flow_ptr, flow_links, flow_w, flow_cap_Bps)
    cap = np.asarray(capacity_Bps, dtype=np.float64)
    ptr_a = np.asarray(flow_ptr, dtype=np.int64)
    fl_a = np.asarray(flow_links, dtype=np.int64)
    fw_a = np.asarray(flow_w, dtype=np.float64)
    n_flows = len(ptr_a) - 1
    n_links = len(cap)
    wsum_a = np.bincount(fl_a, weights=fw_a, minlength=n_links) if len(fl_a) else np.zeros(n_links)
    # link -> flows (CSR)
    entry_flow = np.repeat(np.arange(n_flows, dtype=np.int64), np.diff(ptr_a))
    order = np.argsort(fl_a, kind="stable")
    lflows = entry_flow[order].tolist()
    lptr = np.zeros(n_links + 1, dtype=np.int64)
    np.cumsum(np.bincount(fl_a, minlength=n_links), out=lptr[1:])
    lptr = lptr.tolist()
    used = np.flatnonzero(wsum_a > 0.0)
    heap = list(zip((cap[used] / wsum_a[used]).tolist(), used.tolist()))
    if flow_cap_Bps is not None:
        fcap = np.asarray(flow_cap_Bps, dtype=np.float64)
        capped = np.flatnonzero(np.isfinite(fcap))
        heap.extend(zip(fcap[capped].tolist(), (capped + n_links).tolist()))
    heapq.heapify(heap)
    rem = cap.tolist()
    wsum = wsum_a.tolist()
    ptr = ptr_a.tolist()
    fl = fl_a.tolist()
    fw = fw_a.tolist()
    rate = [_INF] * n_flows
    frozen = [False] * n_flows
    heappop, heappush = heapq.heappop, heapq.heappush
    while heap:
        share, lk = heappop(heap)
        if lk >= n_links:  # private cap link of one flow
            f = lk - n_links
            if frozen[f]:
                continue
            members = (f,)
        else:
            w = wsum[lk]
            if w <= 1e-12:
                continue
            cur = rem[lk] / w
            if cur < 0.0:
                cur = 0.0
            if cur > share * (1.0 + 1e-12) + 1e-300:
                heappush(heap, (cur, lk))
                continue
            share = cur
            members = lflows[lptr[lk]:lptr[lk + 1]]
        for f in members:
            if frozen[f]:
                continue
            frozen[f] = True
            rate[f] = share
            for i in range(ptr[f], ptr[f + 1]):
                l2 = fl[i]
                wi = fw[i]
                rem[l2] -= share * wi
                wsum[l2] -= wi
    return np.asarray(rate, dtype=np.float64)


def _maxmin_small(capacity_Bps, flow_ptr, flow_links, flow_w, flow_cap_Bps=None) -> np.ndarray:
    """Same algorithm with dict-based set-up: faster than numpy set-up for a few hundred entries."""
    ptr = flow_ptr.tolist() if isinstance(flow_ptr, np.ndarray) else list(flow_ptr)
    fl = flow_links.tolist() if isinstance(flow_links, np.ndarray) else list(flow_links)
    fw = flow_w.tolist() if isinstance(flow_w, np.ndarray) else list(flow_w)
    n_flows = len(ptr) - 1
    rem: dict[int, float] = {}
    wsum: dict[int, float] = {}
    members: dict[int, list[int]] = {}
    for f in range(n_flows):
        for i in range(ptr[f], ptr[f + 1]):
            lk = fl[i]
            if lk not in rem:
                rem[lk] = capacity_Bps.item(lk) if isinstance(capacity_Bps, np.ndarray) else capacity_Bps[lk]
                wsum[lk] = 0.0
                members[lk] = []
            wsum[lk] += fw[i]
            members[lk].append(f)
    heap = [(rem[lk] / w, lk) for lk, w in wsum.items() if w > 0.0]
    n_links = len(capacity_Bps)
    if flow_cap_Bps is not None:   # cap of flow f = private link n_links + f (the order of the other paths)
        heap.extend((float(c), n_links + f) for f, c in enumerate(flow_cap_Bps) if c < _INF)
    heapq.heapify(heap)
    rate = [_INF] * n_flows
    frozen = [False] * n_flows
    while heap:
        share, lk = heapq.heappop(heap)
        if lk >= n_links:
            f = lk - n_links
            if frozen[f]:
                continue
            group = (f,)
        else:
            w = wsum[lk]
            if w <= 1e-12:
                continue
            cur = max(rem[lk] / w, 0.0)
            if cur > share * (1.0 + 1e-12) + 1e-300:
                heapq.heappush(heap, (cur, lk))
                continue
            share = cur
            group = members[lk]
        for f in group:
            if frozen[f]:
                continue
            frozen[f] = True
            rate[f] = share
            for i in range(ptr[f], ptr[f + 1]):
                rem[fl[i]] -= share * fw[i]
                wsum[fl[i]] -= fw[i]
    return np.asarray(rate, dtype=np.float64)


def component_mask_python(n_links: int, flow_ptr, flow_links, seed_links, seed_flows) -> np.ndarray:
    """Flows connected to the seed links or seed flows through shared links (transitively): boolean
    mask over flows. Max-min rates decompose over these connected components (a component's
    bottleneck order and arithmetic involve only its own links and flows), so re-solving only the
    component of the flows that arrived or left gives the full solution bit for bit."""
    ptr = np.asarray(flow_ptr, dtype=np.int64)
    fl = np.asarray(flow_links, dtype=np.int64)
    n_flows = len(ptr) - 1
    entry_flow = np.repeat(np.arange(n_flows, dtype=np.int64), np.diff(ptr))
    in_flow = np.zeros(n_flows, dtype=bool)
    in_flow[np.asarray(seed_flows, dtype=np.int64)] = True
    in_link = np.zeros(n_links, dtype=bool)
    in_link[np.asarray(seed_links, dtype=np.int64)] = True
    in_link[fl[in_flow[entry_flow]]] = True
    while True:   # alternate link -> flows -> links until nothing is added
        hit = np.zeros(n_flows, dtype=bool)
        hit[entry_flow[in_link[fl]]] = True
        if (hit <= in_flow).all():
            return in_flow
        in_flow |= hit
        in_link[fl[in_flow[entry_flow]]] = True


def component_mask(n_links: int, flow_ptr, flow_links, seed_links, seed_flows,
                   use_numba: bool | None = None) -> np.ndarray:
    """component_mask_python, with the numba kernel when available (use_numba as in maxmin_rates)."""
    if use_numba is None:
        use_numba = len(flow_links) > 64 and numba_available()
    if use_numba and numba_available():
        from netsim import _maxmin_numba
        return _maxmin_numba.component(int(n_links), np.asarray(flow_ptr, dtype=np.int64),
                                       np.asarray(flow_links, dtype=np.int64),
                                       np.asarray(seed_links, dtype=np.int64),
                                       np.asarray(seed_flows, dtype=np.int64))
    return component_mask_python(n_links, flow_ptr, flow_links, seed_links, seed_flows)


def compact_links(flow_links, n_links: int, use_numba: bool | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(used link ids in increasing order, each entry's index into them). Renumbering a problem's
    links this way keeps the solvers' link-id tie order, so the rates are unchanged bit for bit."""
    fl = np.asarray(flow_links, dtype=np.int64)
    if use_numba is None:
        use_numba = len(fl) > 64 and numba_available()
    if use_numba and numba_available():
        from netsim import _maxmin_numba
        return _maxmin_numba.compact_links(fl, int(n_links))
    used, local = np.unique(fl, return_inverse=True)
    return used, local.reshape(-1).astype(np.int64, copy=False)


_NUMBA_IMPL = None
_NUMBA_TRIED = False


def _build_numba():
    from netsim import _maxmin_numba  # optional dependency, compiled (and cached on disk) on first use

    return _maxmin_numba.maxmin


def numba_available() -> bool:
    global _NUMBA_IMPL, _NUMBA_TRIED  # noqa: PLW0603 - a lazily compiled kernel, not model state
    if not _NUMBA_TRIED:
        _NUMBA_TRIED = True
        try:
            _NUMBA_IMPL = _build_numba()
        except Exception:  # numba missing or broken: the pure-Python path stays correct
            _NUMBA_IMPL = None
    return _NUMBA_IMPL is not None


def maxmin_rates_numba(capacity_Bps, flow_ptr, flow_links, flow_w, flow_cap_Bps=None) -> np.ndarray:
    if not numba_available():
        raise RuntimeError("numba is not available")
    n_flows = len(flow_ptr) - 1
    fcap = (np.full(n_flows, np.inf) if flow_cap_Bps is None
            else np.asarray(flow_cap_Bps, dtype=np.float64))
    return _NUMBA_IMPL(np.asarray(capacity_Bps, dtype=np.float64), np.asarray(flow_ptr, dtype=np.int64),
                       np.asarray(flow_links, dtype=np.int64), np.asarray(flow_w, dtype=np.float64), fcap)


def maxmin_rates(capacity_Bps, flow_ptr, flow_links, flow_w, flow_cap_Bps=None,
                 use_numba: bool | None = None) -> np.ndarray:
    """Max-min fair rates. use_numba: True (require), False (pure Python), None (numba if present
    and the problem is large enough to repay the call overhead)."""
    if use_numba is None:
        use_numba = len(flow_links) > 64 and numba_available()
    if use_numba:
        return maxmin_rates_numba(capacity_Bps, flow_ptr, flow_links, flow_w, flow_cap_Bps)
    return maxmin_rates_python(capacity_Bps, flow_ptr, flow_links, flow_w, flow_cap_Bps)
