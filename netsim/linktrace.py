"""Link utilisation over time of the hottest links of a flow-backend run (for trace counter tracks).

Needs a FlowNetwork made with record_link_changes=True: its engine then keeps, at every rate
recomputation, the links whose carried rate changed (a step function stored as its steps). Each
link's utilisation is carried rate / effective capacity (topology line rate x link-class efficiency,
netsim.topoview), in [0, 1]; "busy" is the integral of the utilisation (bytes carried / capacity, s),
so the time-integral of utilisation x capacity equals the bytes that crossed the link.
Modelled: what the flow engine carried. Not modelled: traffic the caller timed without the network
(e.g. sim's estimated isolated kinds) and copies of groups the caller did not submit.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from netsim.errors import NetsimError


@dataclass
class LinkSeries:
    """One directed link's utilisation as a step function: util[i] holds from times_s[i] on."""
    link_id: int            # netsim channel id (= topology link id for topo.Topology inputs)
    name: str               # e.g. "asw0 -> psw3"
    kind: str               # "nvlink" | "pcie" | "network"
    capacity_Bps: float     # effective capacity used for the utilisation
    bytes_carried: float    # bytes that crossed the link (weighted by repeat crossings)
    busy_s: float           # bytes_carried / capacity_Bps
    times_s: list[float]
    util: list[float]


def _node_names(topology, ids) -> dict[int, str]:
    """'<tier><index within its tier>' for the given node ids (GPU ids are GPU numbers)."""
    wanted = set(int(i) for i in ids)
    counts: dict[str, int] = {}
    names = {}
    for n in topology.nodes:
        k = counts.get(n.tier, 0)
        counts[n.tier] = k + 1
        if n.id in wanted:
            names[n.id] = f"{n.tier}{k}"
    return names


def hottest_links(net, top_n: int = 8) -> list[LinkSeries]:
    """The `top_n` links with the largest busy time (ties: lower link id first), with their series.

    Links that carried nothing are left out (fewer than top_n when fewer links carried traffic).
    """
    eng = net.engine
    if not getattr(eng, "record_link_changes", False):
        raise NetsimError("link utilisation series need make_backend('flow', ..., record_link_changes=True)")
    if top_n < 0:
        raise NetsimError(f"top_n must be >= 0, got {top_n}")
    cap = eng.capacity_Bps
    with np.errstate(divide="ignore", invalid="ignore"):
        busy = np.where(cap > 0, eng.link_bytes / cap, 0.0)
    order = np.lexsort((np.arange(len(busy)), -busy))
    chosen = [int(i) for i in order[:top_n] if busy[i] > 0]
    if not chosen:
        return []
    pos = np.full(len(cap), -1, dtype=np.int64)
    pos[chosen] = np.arange(len(chosen))
    changes = eng.link_changes
    all_ids = np.concatenate([c[1] for c in changes]) if changes else np.zeros(0, dtype=np.int64)
    all_loads = np.concatenate([c[2] for c in changes]) if changes else np.zeros(0)
    all_t = np.repeat([c[0] for c in changes], [len(c[1]) for c in changes]) if changes else np.zeros(0)
    hit = pos[all_ids] >= 0            # one pass over every recorded change, in time order
    which, t_hit = pos[all_ids[hit]], all_t[hit]
    # max-min rates may exceed a capacity by float rounding only; clamp to the physical range
    u_hit = np.clip(all_loads[hit] / cap[all_ids[hit]], 0.0, 1.0)
    times: list[list[float]] = [[] for _ in chosen]
    vals: list[list[float]] = [[] for _ in chosen]
    for k, t, u in zip(which.tolist(), t_hit.tolist(), u_hit.tolist()):
        if times[k] and times[k][-1] == t:     # several recomputations at one instant: the last holds
            vals[k][-1] = u
        else:
            times[k].append(t)
            vals[k].append(u)
    view = net.planner.view
    src = [int(view.ch_src[i]) for i in chosen]
    dst = [int(view.ch_dst[i]) for i in chosen]
    names = _node_names(view.topology, src + dst)
    return [LinkSeries(lk, f"{names[a]} -> {names[b]}", str(view.ch_kind[lk]), float(cap[lk]),
                       float(eng.link_bytes[lk]), float(busy[lk]), times[k], vals[k])
            for k, (lk, a, b) in enumerate(zip(chosen, src, dst))]


def resample_mean(times_s, util, end_s: float, bins: int) -> tuple[list[float], list[float]]:
    """A step series on `bins` equal bins of [0, end_s], each the mean utilisation over its bin (the
    time-integral, hence the bytes carried, is kept exactly); then the value at end_s. For long runs whose
    series have more steps than a trace viewer needs."""
    t = np.asarray(times_s, dtype=np.float64)
    u = np.asarray(util, dtype=np.float64)
    if len(t) == 0 or bins < 1 or end_s <= 0:
        return list(t.tolist()), list(u.tolist())
    cum = np.concatenate([[0.0], np.cumsum(u[:-1] * np.diff(t))])     # integral up to each step

    def integral(x):
        i = np.searchsorted(t, x, side="right") - 1
        j = np.maximum(i, 0)
        return np.where(i < 0, 0.0, cum[j] + u[j] * (x - t[j]))

    edges = np.linspace(0.0, end_s, bins + 1)
    means = np.diff(integral(edges)) / np.diff(edges)
    last = u[np.searchsorted(t, end_s, side="right") - 1] if t[0] <= end_s else 0.0
    out_t, out_u = [], []
    for x, v in zip(edges[:-1].tolist(), means.tolist()):
        if not out_u or v != out_u[-1]:       # equal neighbours merged: fewer counter events
            out_t.append(x)
            out_u.append(v)
    out_t.append(float(end_s))
    out_u.append(float(last))
    return out_t, out_u
