"""FlowSpecs -> engine flows on a TopoView (directed channels, weights, latency, rate cap)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from netsim import calibration as cal
from netsim.engine import FlowEngine
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


def ring_window_s(hop_lat: list[float], steps: int) -> float:
    """Latency of a piece crossing `steps` consecutive hops of a ring (hop_lat in ring order,
    cyclic): the worst such run."""
    h = len(hop_lat)
    if h == 0 or steps <= 0:
        return 0.0
    laps, rest = divmod(steps, h)
    total = laps * math.fsum(hop_lat)
    if rest == 0:
        return total
    run = math.fsum(hop_lat[:rest])
    best = run
    for i in range(1, h):
        run += hop_lat[(i + rest - 1) % h] - hop_lat[i - 1]
        best = max(best, run)
    return total + best


def critical_latency_s(spec: FlowSpec, hop_lat: list[float]) -> float:
    """Latency of a (lock-step) flow: the critical path of its first piece (FlowSpec docstring)."""
    if not hop_lat:
        return 0.0
    if spec.ring:
        return ring_window_s(hop_lat, spec.steps)
    if spec.lat_stages:
        return sum(max(math.fsum(hop_lat[e] for e in path) for path in stage) for stage in spec.lat_stages if stage)
    return spec.steps * max(hop_lat)


def resolve(view, spec: FlowSpec, spec_idx: int, unit_size: float = 1.0) -> ResolvedFlow:
    chans: list[int] = []
    ws: list[float] = []
    hop_lat: list[float] = []    # per-step alpha + propagation of each hop
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
            hop_lat.append(view.path_latency_s(cs[:1]))
            continue
        path, pw = view.route(int(hop[0]), int(hop[1]), ecmp_key(spec_idx, h), spec.pxn)
        chans.extend(path)
        ws.extend([w * x for x in pw])
        # striped / multi-port routes: the latency of one route (weight-averaged)
        lat = float(sum(view.latency_s[c] * x for c, x in zip(path, pw)))
        hop_lat.append(view.path_alpha_s(path) + lat)
    cap = math.inf
    if spec.nvls:
        wmax = max(spec.weights) if spec.weights else 1.0
        cap = cal.NVLS_PORT_EFFICIENCY * line_up / wmax
        # one NVLS phase = multimem request up to the switch and the result back down
        latency = spec.steps * (cal.NVLS_PHASE_ALPHA_S + 2 * max(hop_lat, default=0.0))
    else:
        latency = critical_latency_s(spec, hop_lat)
    if chans:
        arr = np.asarray(chans, dtype=np.int64)
        uniq, inv = np.unique(arr, return_inverse=True)
        wsum = np.zeros(len(uniq))
        np.add.at(wsum, inv, np.asarray(ws))
    else:
        uniq, wsum = np.zeros(0, dtype=np.int64), np.zeros(0)
    return ResolvedFlow(uniq, wsum, spec.nbytes / unit_size, latency, cap, tuple(spec.deps), tuple(spec.after))


class ScheduleRun:
    """One flow schedule in flight on a FlowEngine: releases flows as their dependencies finish.

    A flow starts `latency_s` after its last data dependency (`deps`) finishes, and not before its
    order-only predecessors (`after`, same-connection FIFO) finish. `on_done(t)` fires when the
    last flow completes (at once through the engine for an empty schedule).
    """

    __slots__ = ("engine", "flows", "size", "waiting", "succ", "left", "on_done", "ready")

    def __init__(self, engine, flows: list[ResolvedFlow], size: float, on_done):
        self.engine = engine
        self.flows = flows
        self.size = size
        self.on_done = on_done
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
                self.ready[i] = now + f.latency_s
        for i, w in enumerate(self.waiting):
            if w == 0:
                self._launch(i)

    def _launch(self, i: int) -> None:
        f = self.flows[i]
        lat = max(0.0, self.ready[i] - self.engine.now_s)
        self.engine.add_flow(f.channels, f.frac * self.size, weights=f.weights, latency_s=lat,
                             cap_Bps=f.cap_Bps, on_done=lambda _fid, t, i=i: self._flow_done(i, t))

    def _flow_done(self, i: int, t: float) -> None:
        self.left -= 1
        for j, data in self.succ[i]:
            r = t + self.flows[j].latency_s if data else t
            if r > self.ready[j]:
                self.ready[j] = r
            self.waiting[j] -= 1
            if self.waiting[j] == 0:
                self._launch(j)
        if self.left == 0:
            self.on_done(t)


def static_time_s(view, flows: list[ResolvedFlow], size: float, use_numba: bool | None = None) -> float:
    """Time of a flow schedule alone on the idle network: the exact fluid time (rates re-shared
    max-min whenever one of its flows starts or finishes), on a private engine."""
    if not flows or size <= 0:
        return 0.0
    engine = FlowEngine(view.capacity_Bps, use_numba=use_numba)
    done: list[float] = []
    ScheduleRun(engine, flows, float(size), done.append).start()
    engine.run()
    return done[0]
