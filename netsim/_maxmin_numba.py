"""numba kernel of the heap-based max-min allocation (same algorithm as maxmin_rates_python).

The heap orders entries by (share, link id) like Python's heapq on tuples, so equal shares (common in
symmetric collectives) are processed in the same order and both implementations give identical rates.

Imported lazily by netsim.maxmin only when numba is installed.
"""

import numba
import numpy as np


@numba.njit(cache=True)
def _heap_push(hk, hv, size, key, val):
    i = size
    hk[i] = key
    hv[i] = val
    while i > 0:
        p = (i - 1) >> 1
        if hk[p] < hk[i] or (hk[p] == hk[i] and hv[p] <= hv[i]):
            break
        hk[p], hk[i] = hk[i], hk[p]
        hv[p], hv[i] = hv[i], hv[p]
        i = p
    return size + 1

@numba.njit(cache=True)
def _heap_pop(hk, hv, size):
    key = hk[0]
    val = hv[0]
    size -= 1
    hk[0] = hk[size]
    hv[0] = hv[size]
    i = 0
    while True:
        a = 2 * i + 1
        if a >= size:
            break
        b = a + 1
        c = a
        if b < size and (hk[b] < hk[a] or (hk[b] == hk[a] and hv[b] < hv[a])):
            c = b
        if hk[i] < hk[c] or (hk[i] == hk[c] and hv[i] <= hv[c]):
            break
        hk[c], hk[i] = hk[i], hk[c]
        hv[c], hv[i] = hv[i], hv[c]
        i = c
    return key, val, size

@numba.njit(cache=True)
def maxmin(cap, ptr, fl, fw, fcap):
    n_flows = ptr.shape[0] - 1
    n_links = cap.shape[0]
    wsum = np.zeros(n_links)
    cnt = np.zeros(n_links + 1, np.int64)
    for f in range(n_flows):
        for i in range(ptr[f], ptr[f + 1]):
            wsum[fl[i]] += fw[i]
            cnt[fl[i] + 1] += 1
    for k in range(n_links):
        cnt[k + 1] += cnt[k]
    fill = cnt[:-1].copy()
    lflows = np.empty(cnt[n_links], np.int64)
    for f in range(n_flows):
        for i in range(ptr[f], ptr[f + 1]):
            lk = fl[i]
            lflows[fill[lk]] = f
            fill[lk] += 1
    rem = cap.copy()
    cap_total = n_links + n_flows
    # Lazy pushes: each freeze can re-push a link at most once per pop, bounded by pops + links.
    hk = np.empty(cap_total + fl.shape[0] + 1)
    hv = np.empty(cap_total + fl.shape[0] + 1, np.int64)
    size = 0
    for lk in range(n_links):
        if wsum[lk] > 0.0:
            size = _heap_push(hk, hv, size, rem[lk] / wsum[lk], lk)
    for f in range(n_flows):
        if fcap[f] < np.inf:
            size = _heap_push(hk, hv, size, fcap[f], n_links + f)
    rate = np.full(n_flows, np.inf)
    frozen = np.zeros(n_flows, np.bool_)
    while size > 0:
        share, lk, size = _heap_pop(hk, hv, size)
        if lk >= n_links:
            f = lk - n_links
            if frozen[f]:
                continue
            frozen[f] = True
            rate[f] = share
            for i in range(ptr[f], ptr[f + 1]):
                rem[fl[i]] -= share * fw[i]
                wsum[fl[i]] -= fw[i]
            continue
        w = wsum[lk]
        if w <= 1e-12:
            continue
        cur = rem[lk] / w
        if cur < 0.0:
            cur = 0.0
        if cur > share * (1.0 + 1e-12) + 1e-300:
            size = _heap_push(hk, hv, size, cur, lk)
            continue
        for j in range(cnt[lk], cnt[lk + 1]):
            f = lflows[j]
            if frozen[f]:
                continue
            frozen[f] = True
            rate[f] = cur
            for i in range(ptr[f], ptr[f + 1]):
                rem[fl[i]] -= cur * fw[i]
                wsum[fl[i]] -= fw[i]
    return rate


@numba.njit(cache=True)
def component(n_links, ptr, fl, seed_link, seed_flow):
    """Flows connected (through shared links, transitively) to the seed links or seed flows: a
    breadth-first search over the flow-link graph. Returns a boolean mask over flows."""
    n_flows = ptr.shape[0] - 1
    cnt = np.zeros(n_links + 1, np.int64)
    for i in range(fl.shape[0]):
        cnt[fl[i] + 1] += 1
    for k in range(n_links):
        cnt[k + 1] += cnt[k]
    fill = cnt[:-1].copy()
    lflows = np.empty(cnt[n_links], np.int64)
    for f in range(n_flows):
        for i in range(ptr[f], ptr[f + 1]):
            lflows[fill[fl[i]]] = f
            fill[fl[i]] += 1
    in_flow = np.zeros(n_flows, np.bool_)
    in_link = np.zeros(n_links, np.bool_)
    queue = np.empty(n_links, np.int64)
    qn = 0
    for lk in seed_link:
        if not in_link[lk]:
            in_link[lk] = True
            queue[qn] = lk
            qn += 1
    for f in seed_flow:
        if not in_flow[f]:
            in_flow[f] = True
            for i in range(ptr[f], ptr[f + 1]):
                if not in_link[fl[i]]:
                    in_link[fl[i]] = True
                    queue[qn] = fl[i]
                    qn += 1
    q = 0
    while q < qn:
        lk = queue[q]
        q += 1
        for j in range(cnt[lk], cnt[lk + 1]):
            f = lflows[j]
            if in_flow[f]:
                continue
            in_flow[f] = True
            for i in range(ptr[f], ptr[f + 1]):
                l2 = fl[i]
                if not in_link[l2]:
                    in_link[l2] = True
                    queue[qn] = l2
                    qn += 1
    return in_flow


@numba.njit(cache=True)
def compact_links(fl, n_links):
    """(used, local): the link ids in use in increasing order and each entry's index into them;
    O(entries + links) without sorting."""
    mark = np.zeros(n_links, np.int64)
    for i in range(fl.shape[0]):
        mark[fl[i]] = 1
    k = 0
    for lk in range(n_links):
        if mark[lk]:
            mark[lk] = k
            k += 1
        else:
            mark[lk] = -1
    used = np.empty(k, np.int64)
    for lk in range(n_links):
        if mark[lk] >= 0:
            used[mark[lk]] = lk
    local = np.empty(fl.shape[0], np.int64)
    for i in range(fl.shape[0]):
        local[i] = mark[fl[i]]
    return used, local
