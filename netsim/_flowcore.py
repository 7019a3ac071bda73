"""Kernels of the flow engine's event loop (netsim.engine.FlowEngine): per-event work proportional
to the flows and links an event touches, not to the flows in flight.

State lives in a few arrays owned by the engine (layouts below). Active flows occupy *slots*; each
slot's links are a run of *entries* in an entry pool, and every link keeps a doubly linked list of
the entries that cross it (the link -> flows index, updated in O(1) per entry on arrivals and
departures). Progress is lazy: a slot stores its remaining bytes at its last rate change (`TUPD`),
its rate and its finish time; a min-heap of (finish time, slot, version) gives the next departure
(entries of superseded versions are skipped when they surface). Link loads and carried bytes are
updated only for the links of a re-solved component.

Compiled with numba (cache=True) when it is installed; the same functions run as plain Python
otherwise (`kernels(False)`), with the same arithmetic in the same order, so both give the same
results bit for bit.
"""

from __future__ import annotations

import math

import numpy as np

if globals().get("_COMPILE"):  # the compiled copy of this module (kernels(True)); numba is optional
    import numba

    _jit = numba.njit(cache=True)
    _jit_inline = numba.njit(cache=True, inline="always")   # small helpers of the heap loops
else:
    def _jit(f):
        return f

    _jit_inline = _jit

INF = math.inf

# slot columns, int64 [slots, 6]: flow id (-1: free), activation sequence, first entry, entries, version, BFS mark
S_FID, S_SEQ, S_START, S_LEN, S_VER, S_MARK = range(6)
N_SI = 6
# slot columns, float64 [slots, 5]: bytes left at TUPD, rate (B/s per unit weight), last rate change, finish time, cap
F_REM, F_RATE, F_TUPD, F_FIN, F_CAP = range(5)
N_SF = 5
# entry columns, int64 [entries, 4]: link, slot, next / previous entry on the same link (-1: none)
E_LINK, E_SLOT, E_NEXT, E_PREV = range(4)
N_EI = 4
# link columns, int64 [links, 4]: first entry (-1: none), BFS mark, index in the component, seed flag
L_HEAD, L_MARK, L_LOCAL, L_SEED = range(4)
N_LI = 4
# link columns, float64 [links, 3]: load (B/s), time of the last load change, bytes carried up to then
G_LOAD, G_TLOAD, G_BYTES = range(3)
N_LF = 3
# scalars, int64: entry pool top, dead entries, heap size, BFS epoch, free slots, next sequence,
# active flows, seed links, seed slots
C_ETOP, C_EDEAD, C_HSIZE, C_EPOCH, C_NFREE, C_SEQ, C_NACT, C_NSEEDL, C_NSEEDS = range(9)
N_SC = 9


@_jit
def _hpush(hk, hs, size, key, slot, ver):
    i = size
    hk[i] = key
    hs[i, 0] = slot
    hs[i, 1] = ver
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] <= hk[i]:
            break
        hk[p], hk[i] = hk[i], hk[p]
        a, b = hs[p, 0], hs[p, 1]
        hs[p, 0], hs[p, 1] = hs[i, 0], hs[i, 1]
        hs[i, 0], hs[i, 1] = a, b
        i = p
    return size + 1


@_jit
def _hpop(hk, hs, size):
    size -= 1
    hk[0] = hk[size]
    hs[0, 0] = hs[size, 0]
    hs[0, 1] = hs[size, 1]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= size:
            break
        c = a
        if a + 1 < size and hk[a + 1] < hk[a]:
            c = a + 1
        if hk[i] <= hk[c]:
            break
        hk[c], hk[i] = hk[i], hk[c]
        x, y = hs[c, 0], hs[c, 1]
        hs[c, 0], hs[c, 1] = hs[i, 0], hs[i, 1]
        hs[i, 0], hs[i, 1] = x, y
        i = c
    return size


@_jit_inline
def _less(hk, ht, a, b):
    return hk[a] < hk[b] or (hk[a] == hk[b] and ht[a] < ht[b])


@_jit_inline
def _swap(hk, ht, hp, a, b):
    hk[a], hk[b] = hk[b], hk[a]
    ht[a], ht[b] = ht[b], ht[a]
    hp[a], hp[b] = hp[b], hp[a]


@_jit_inline
def _sift_down(hk, ht, hp, i, size):
    while True:
        a = 2 * i + 1
        if a >= size:
            return
        c = a
        if a + 1 < size and _less(hk, ht, a + 1, a):
            c = a + 1
        if not _less(hk, ht, c, i):
            return
        _swap(hk, ht, hp, i, c)
        i = c


@_jit
def _solve(cap, ptr, fl, fw, fcap):
    """Max-min rates: the bottleneck algorithm of netsim.maxmin (take the link with the smallest
    fair share, freeze its flows, subtract them everywhere); equal shares are taken in link index
    order, flow caps after every link in flow order. The initial shares are sorted once (stable);
    a link whose share grew when it came up (lazy update) goes to a small heap, and the next link
    is the smaller of the two. Returns the rates per flow (inf: no link and no cap)."""
    n_flows = ptr.shape[0] - 1
    n_links = cap.shape[0]
    wsum = np.zeros(n_links)
    cnt = np.zeros(n_links + 1, np.int64)
    for i in range(fl.shape[0]):
        wsum[fl[i]] += fw[i]
        cnt[fl[i] + 1] += 1
    for j in range(n_links):
        cnt[j + 1] += cnt[j]
    fill = cnt[:-1].copy()
    lflows = np.empty(cnt[n_links], np.int64)
    for f in range(n_flows):
        for i in range(ptr[f], ptr[f + 1]):
            lflows[fill[fl[i]]] = f
            fill[fl[i]] += 1
    rem = cap.copy()
    # the sorted stream: links by (share, index), then caps by (cap, flow); entry e < n_links is a
    # link, else the cap of flow e - n_links (the stable sort keeps the index order of equal keys)
    n_cap = 0
    for f in range(n_flows):
        if fcap[f] < INF:
            n_cap += 1
    keys = np.empty(n_links + n_cap)
    ids = np.empty(n_links + n_cap, np.int64)
    m = 0
    for j in range(n_links):
        if wsum[j] > 0.0:
            keys[m] = rem[j] / wsum[j]
            ids[m] = j
            m += 1
    for f in range(n_flows):
        if fcap[f] < INF:
            keys[m] = fcap[f]
            ids[m] = n_links + f
            m += 1
    order = np.argsort(keys[:m], kind="mergesort")
    hk = np.empty(n_links + 1)      # re-pushed links: at most one entry per link at a time
    ht = np.empty(n_links + 1, np.int64)
    hp = np.empty(n_links + 1, np.int64)
    size = 0
    pos = 0
    rate = np.full(n_flows, INF)
    frozen = np.zeros(n_flows, np.bool_)
    while pos < m or size > 0:
        if size > 0 and (pos >= m or hk[0] < keys[order[pos]]
                         or (hk[0] == keys[order[pos]] and ht[0] < ids[order[pos]])):
            share = hk[0]
            e = ht[0]
            size -= 1
            if size > 0:
                hk[0], ht[0], hp[0] = hk[size], ht[size], hp[size]
                _sift_down(hk, ht, hp, 0, size)
        else:
            share = keys[order[pos]]
            e = ids[order[pos]]
            pos += 1
        if e >= n_links:     # private cap of one flow
            f = e - n_links
            if frozen[f]:
                continue
            frozen[f] = True
            rate[f] = share
            for i in range(ptr[f], ptr[f + 1]):
                rem[fl[i]] -= share * fw[i]
                wsum[fl[i]] -= fw[i]
            continue
        w = wsum[e]
        if w <= 1e-12:
            continue
        cur = rem[e] / w
        if cur < 0.0:
            cur = 0.0
        if cur > share * (1.0 + 1e-12) + 1e-300:     # stale: the share grew; back in order
            i = size
            hk[i], ht[i], hp[i] = cur, e, e
            size += 1
            while i > 0:
                p = (i - 1) >> 1
                if not _less(hk, ht, i, p):
                    break
                _swap(hk, ht, hp, i, p)
                i = p
            continue
        for q in range(cnt[e], cnt[e + 1]):
            f = lflows[q]
            if frozen[f]:
                continue
            frozen[f] = True
            rate[f] = cur
            for i in range(ptr[f], ptr[f + 1]):
                rem[fl[i]] -= cur * fw[i]
                wsum[fl[i]] -= fw[i]
    return rate


@_jit
def heap_top(hk, hs, si, sc):
    """Earliest finish time of an active flow (inf if none); drops superseded heap entries."""
    size = sc[C_HSIZE]
    while size > 0:
        s = hs[0, 0]
        if si[s, S_FID] >= 0 and si[s, S_VER] == hs[0, 1]:
            sc[C_HSIZE] = size
            return hk[0]
        size = _hpop(hk, hs, size)
    sc[C_HSIZE] = size
    return INF


@_jit
def heap_rebuild(si, sf, hk, hs, sc):
    """Heap of the active flows' current finish times only (drops every superseded entry)."""
    size = 0
    for s in range(si.shape[0]):
        if si[s, S_FID] >= 0 and sf[s, F_FIN] < INF:
            size = _hpush(hk, hs, size, sf[s, F_FIN], s, si[s, S_VER])
    sc[C_HSIZE] = size


@_jit
def _seed_link(li, seedl, sc, lk):
    if li[lk, L_SEED] == 0:
        li[lk, L_SEED] = 1
        seedl[sc[C_NSEEDL]] = lk
        sc[C_NSEEDL] += 1


@_jit
def add_flows(t, fids, lens, links, ws, nbytes, caps, si, sf, free, ei, ew, li, sc, seedl, seeds):
    """Activate flows at time t. Their slots become seeds of the next re-solve. Returns False, having
    changed nothing, when the free slots or the entry pool are too few (the caller grows them and
    calls again), else True."""
    if sc[C_NFREE] < fids.shape[0] or sc[C_ETOP] + links.shape[0] > ei.shape[0]:
        return False
    off = 0
    for k in range(fids.shape[0]):
        sc[C_NFREE] -= 1
        s = free[sc[C_NFREE]]
        si[s, S_FID] = fids[k]
        si[s, S_SEQ] = sc[C_SEQ]
        sc[C_SEQ] += 1
        si[s, S_START] = sc[C_ETOP]
        si[s, S_LEN] = lens[k]
        for j in range(lens[k]):
            e = sc[C_ETOP]
            sc[C_ETOP] += 1
            lk = links[off + j]
            ei[e, E_LINK] = lk
            ei[e, E_SLOT] = s
            ew[e] = ws[off + j]
            h = li[lk, L_HEAD]
            ei[e, E_NEXT] = h
            ei[e, E_PREV] = -1
            if h >= 0:
                ei[h, E_PREV] = e
            li[lk, L_HEAD] = e
        off += lens[k]
        sf[s, F_REM] = nbytes[k]
        sf[s, F_RATE] = 0.0
        sf[s, F_TUPD] = t
        sf[s, F_FIN] = INF
        sf[s, F_CAP] = caps[k]
        seeds[sc[C_NSEEDS]] = s
        sc[C_NSEEDS] += 1
        sc[C_NACT] += 1
    return True


@_jit
def pop_done(t, tol, hk, hs, si, sf, free, ei, li, sc, seedl, out_fid, out_left, out_rate):
    """Remove every active flow due by `tol`; returns how many (their flow ids in out_fid, the bytes
    they had left at t in out_left, their rates in out_rate) and the earliest finish time left (what
    heap_top would return next). Their links become seeds of the next re-solve."""
    n = 0
    size = sc[C_HSIZE]
    while size > 0:
        s = hs[0, 0]
        if si[s, S_FID] < 0 or si[s, S_VER] != hs[0, 1]:
            size = _hpop(hk, hs, size)
            continue
        if hk[0] > tol:
            break
        size = _hpop(hk, hs, size)
        out_fid[n] = si[s, S_FID]
        rate = sf[s, F_RATE]
        left = sf[s, F_REM]
        if rate > 0.0 and rate < INF:
            left -= rate * (t - sf[s, F_TUPD])
        out_left[n] = left
        out_rate[n] = rate
        n += 1
        start = si[s, S_START]
        for e in range(start, start + si[s, S_LEN]):
            lk = ei[e, E_LINK]
            p, q = ei[e, E_PREV], ei[e, E_NEXT]
            if p >= 0:
                ei[p, E_NEXT] = q
            else:
                li[lk, L_HEAD] = q
            if q >= 0:
                ei[q, E_PREV] = p
            _seed_link(li, seedl, sc, lk)
        sc[C_EDEAD] += si[s, S_LEN]
        si[s, S_FID] = -1
        free[sc[C_NFREE]] = s
        sc[C_NFREE] += 1
        sc[C_NACT] -= 1
    sc[C_HSIZE] = size
    # the loop stopped at an empty heap or at a live entry due after tol: heap_top's answer
    return n, hk[0] if size > 0 else INF


@_jit
def resolve(t, full, si, sf, ei, ew, li, lf, cap, hk, hs, sc, seedl, seeds, comp_slots, comp_links,
            out_load):
    """Re-solve the max-min rates of the flows connected (through shared links, transitively) to the
    seeds — every active flow when `full`. Returns (flows re-solved, links of the component, earliest
    finish time: heap_top's answer); the component's links are left in comp_links[:n] (in search order),
    their new loads in out_load[:n]. Returns (-1, 0, inf), having changed nothing, when the heap has less
    room than the active flows might push (the caller makes room and calls again).
    Flows are solved in activation order, links numbered as those flows first cross them: within a
    component the order (and so the arithmetic) is that of a full solve, so both give the same rates
    bit for bit. A flow's bytes left and finish time change only when its rate does."""
    if sc[C_HSIZE] + sc[C_NACT] > hk.shape[0]:
        return -1, 0, INF
    epoch = sc[C_EPOCH] + 1
    sc[C_EPOCH] = epoch
    nc = 0
    nl = 0
    for k in range(sc[C_NSEEDL]):
        lk = seedl[k]
        li[lk, L_SEED] = 0
        if li[lk, L_MARK] != epoch:
            li[lk, L_MARK] = epoch
            comp_links[nl] = lk
            nl += 1
    n_seed_slots = sc[C_NSEEDS]
    sc[C_NSEEDL] = 0
    sc[C_NSEEDS] = 0
    n_roots = si.shape[0] if full else n_seed_slots
    for k in range(n_roots):
        s = k if full else seeds[k]
        if si[s, S_FID] < 0 or si[s, S_MARK] == epoch:
            continue
        si[s, S_MARK] = epoch
        comp_slots[nc] = s
        nc += 1
        start = si[s, S_START]
        for e in range(start, start + si[s, S_LEN]):
            lk = ei[e, E_LINK]
            if li[lk, L_MARK] != epoch:
                li[lk, L_MARK] = epoch
                comp_links[nl] = lk
                nl += 1
    q = 0
    while q < nl:     # breadth-first over links: every flow on a reached link, every link of a reached flow
        e = li[comp_links[q], L_HEAD]
        q += 1
        while e >= 0:
            s = ei[e, E_SLOT]
            e = ei[e, E_NEXT]
            if si[s, S_MARK] == epoch:
                continue
            si[s, S_MARK] = epoch
            comp_slots[nc] = s
            nc += 1
            start = si[s, S_START]
            for e2 in range(start, start + si[s, S_LEN]):
                l2 = ei[e2, E_LINK]
                if li[l2, L_MARK] != epoch:
                    li[l2, L_MARK] = epoch
                    comp_links[nl] = l2
                    nl += 1
    # the solver's problem: flows in activation order, links in the order these flows cross them; a
    # link crossed once (by one flow) is that flow's private cap (capacity / weight: the share the
    # link would have)
    for j in range(nl):
        li[comp_links[j], L_LOCAL] = -1
    if nc > 1:
        seq = np.empty(nc, np.int64)
        for i in range(nc):
            seq[i] = si[comp_slots[i], S_SEQ]
        slots = comp_slots[:nc][np.argsort(seq)]
    else:
        slots = comp_slots[:nc].copy()
    n_entries = 0
    for i in range(nc):
        n_entries += si[slots[i], S_LEN]
    ptr = np.zeros(nc + 1, np.int64)
    fl = np.empty(n_entries, np.int64)
    fw = np.empty(n_entries, np.float64)
    fcap = np.empty(nc, np.float64)
    capl = np.empty(nl, np.float64)
    ns = 0
    k = 0
    for i in range(nc):
        s = slots[i]
        c = sf[s, F_CAP]
        start = si[s, S_START]
        for e in range(start, start + si[s, S_LEN]):
            lk = ei[e, E_LINK]
            if ei[e, E_NEXT] < 0 and ei[e, E_PREV] < 0:     # the only entry on its link
                v = cap[lk] / ew[e]
                if v < c:
                    c = v
                continue
            loc = li[lk, L_LOCAL]
            if loc < 0:
                loc = ns
                li[lk, L_LOCAL] = ns
                capl[ns] = cap[lk]
                ns += 1
            fl[k] = loc
            fw[k] = ew[e]
            k += 1
        ptr[i + 1] = k
        fcap[i] = c
    if ns > 0:
        rates = _solve(capl[:ns], ptr, fl[:k], fw[:k], fcap)
    else:
        # no link shared by two flows of the component (a lone pipeline send): each flow runs at its
        # private cap, which is what _solve returns for it (inf: no link and no cap)
        rates = fcap
    for j in range(nl):     # bytes carried so far at the old loads; the loads are summed anew below
        lk = comp_links[j]
        lf[lk, G_BYTES] += lf[lk, G_LOAD] * (t - lf[lk, G_TLOAD])
        lf[lk, G_TLOAD] = t
        lf[lk, G_LOAD] = 0.0
    size = sc[C_HSIZE]
    for i in range(nc):
        s = slots[i]
        r = rates[i]
        old = sf[s, F_RATE]
        if r != old:
            if old > 0.0 and old < INF:
                sf[s, F_REM] -= old * (t - sf[s, F_TUPD])
            sf[s, F_TUPD] = t
            sf[s, F_RATE] = r
            rem = sf[s, F_REM]
            if rem <= 0.0:
                fin = t
            elif r > 0.0:
                fin = t + rem / r
            else:
                fin = INF
            sf[s, F_FIN] = fin
            si[s, S_VER] += 1
            if fin < INF:
                size = _hpush(hk, hs, size, fin, s, si[s, S_VER])
        rr = r if r < INF else 0.0
        start = si[s, S_START]
        for e in range(start, start + si[s, S_LEN]):
            lf[ei[e, E_LINK], G_LOAD] += rr * ew[e]
    sc[C_HSIZE] = size
    for j in range(nl):
        out_load[j] = lf[comp_links[j], G_LOAD]
    return nc, nl, heap_top(hk, hs, si, sc)


@_jit
def compact_entries(si, ei, ew, li, ei2, ew2, sc):
    """Copy the active flows' entries into fresh pools (ei2, ew2) without the dead ones and
    rebuild the per-link lists."""
    li[:, L_HEAD] = -1
    top = 0
    for s in range(si.shape[0]):
        if si[s, S_FID] < 0:
            continue
        start = si[s, S_START]
        si[s, S_START] = top
        for j in range(si[s, S_LEN]):
            lk = ei[start + j, E_LINK]
            ei2[top, E_LINK] = lk
            ei2[top, E_SLOT] = s
            ew2[top] = ew[start + j]
            h = li[lk, L_HEAD]
            ei2[top, E_NEXT] = h
            ei2[top, E_PREV] = -1
            if h >= 0:
                ei2[h, E_PREV] = top
            li[lk, L_HEAD] = top
            top += 1
    sc[C_ETOP] = top
    sc[C_EDEAD] = 0


_NAMES = ("heap_top", "heap_rebuild", "add_flows", "pop_done", "resolve", "compact_entries")


def kernels(compiled: bool) -> dict:
    """The kernels by name: plain Python (this module), or compiled with numba (compiled=True).

    The compiled kernels come from a second copy of this file executed with the numba decorators on,
    loaded on first request: importing numba and loading its cached machine code costs about 1 s per
    process, which a run that never asks for them does not pay. Raises ImportError without numba.
    """
    if not compiled:
        return {n: globals()[n] for n in _NAMES}
    import sys
    name = __name__ + "_compiled"
    mod = sys.modules.get(name)
    if mod is None:
        import importlib.util

        import numba  # noqa: F401 - fail here, before a half-built module is registered
        spec = importlib.util.spec_from_file_location(name, __file__)
        mod = importlib.util.module_from_spec(spec)
        mod._COMPILE = True
        sys.modules[name] = mod     # numba's cache resolves functions through their module
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
    return {n: getattr(mod, n) for n in _NAMES}
