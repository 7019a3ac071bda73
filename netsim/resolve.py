"""FlowSpecs -> engine flows on a TopoView (directed channels, weights, latency, rate cap)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from netsim import calibration as cal
from netsim.schedules import FlowSpec


@dataclass
class ResolvedFlow:
    channels: np.ndarray     # directed channel ids (unique)
    weights: np.ndarray      # bytes on the channel per byte of the flow
    frac: float              # flow bytes = frac x request size
    latency_s: float
    cap_Bps: float
    deps: tuple[int, ...]
    after: tuple[int, ...] = ()


def ecmp_key(spec_idx: int, hop_idx: int) -> int:
    # Persistent connections: the same (spec, hop) of a group always takes the same ECMP path.
    return (spec_idx * 1009 + hop_idx) & 0x7FFFFFFF


def resolve(view, spec: FlowSpec, spec_idx: int, unit_size: float = 1.0) -> ResolvedFlow:
    chans: list[int] = []
    ws: list[float] = []
    step_lat = 0.0
    line_up = math.inf
    for h, hop in enumerate(spec.hops):
        w = 1.0 if spec.weights is None else float(spec.weights[h])
        if hop[0] in ("up", "down"):
            up, down = view.switch_channels(int(hop[1]))
            cs = up if hop[0] == "up" else down
            if hop[0] == "up":
                line_up = min(line_up, float(sum(view.line_Bps[c] for c in cs)))
            for c in cs:
                chans.append(c)
                ws.append(w / len(cs))
            hop_lat = view.path_latency_s(cs[:1])
            step_lat = max(step_lat, hop_lat)
            continue
        path, pw = view.route(int(hop[0]), int(hop[1]), ecmp_key(spec_idx, h), spec.pxn)
        chans.extend(path)
        ws.extend([w * x for x in pw])
        # striped / multi-port routes: the latency of one route (weight-averaged)
        lat = float(sum(view.latency_s[c] * x for c, x in zip(path, pw)))
        step_lat = max(step_lat, view.path_alpha_s(path) + lat)
    cap = math.inf
    if spec.nvls:
        wmax = max(spec.weights) if spec.weights else 1.0
        cap = cal.NVLS_PORT_EFFICIENCY * line_up / wmax
        # one NVLS phase = multimem request up to the switch and the result back down
        step_lat = cal.NVLS_PHASE_ALPHA_S + 2 * step_lat
    if chans:
        arr = np.asarray(chans, dtype=np.int64)
        uniq, inv = np.unique(arr, return_inverse=True)
        wsum = np.zeros(len(uniq))
        np.add.at(wsum, inv, np.asarray(ws))
    else:
        uniq, wsum = np.zeros(0, dtype=np.int64), np.zeros(0)
    return ResolvedFlow(uniq, wsum, spec.nbytes / unit_size, spec.steps * step_lat, cap, tuple(spec.deps),
                        tuple(spec.after))


def static_time_s(view, flows: list[ResolvedFlow], size: float, use_numba: bool | None = None) -> float:
    """Idle-network time of a flow set with dependencies: flows of one dependency level share links
    (one max-min allocation per level); a flow starts when its deps end, plus its latency."""
    from netsim.maxmin import maxmin_rates

    if not flows:
        return 0.0
    level = [0] * len(flows)
    for i, f in enumerate(flows):
        level[i] = 1 + max((level[d] for d in f.deps + f.after), default=-1)
    end = [0.0] * len(flows)
    for lv in range(max(level) + 1):
        idx = [i for i in range(len(flows)) if level[i] == lv]
        lens = [len(flows[i].channels) for i in idx]
        ptr = np.zeros(len(idx) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        fl = np.concatenate([flows[i].channels for i in idx]) if idx else np.zeros(0, np.int64)
        fw = np.concatenate([flows[i].weights for i in idx]) if idx else np.zeros(0)
        caps = np.array([flows[i].cap_Bps for i in idx])
        rates = maxmin_rates(view.capacity_Bps, ptr, fl, fw, caps, use_numba=use_numba)
        for j, i in enumerate(idx):
            f = flows[i]
            ready = max((end[d] for d in f.deps), default=0.0) + f.latency_s
            start = max([ready] + [end[d] for d in f.after])
            nbytes = f.frac * size
            dur = 0.0 if nbytes <= 0 else (nbytes / rates[j] if rates[j] > 0 else math.inf)
            end[i] = start + dur
    return max(end)
