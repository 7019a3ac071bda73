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
