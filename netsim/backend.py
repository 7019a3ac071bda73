"""NetworkBackend implementations: "flow" (contention-aware flow engine) and "analytical" (alpha-beta).

Both validate requests the same way, pick algorithms with the same automatic rule
(netsim.analytical.choose_algorithm) and are deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass

from netsim import analytical as ana
from netsim.api import CollectiveRequest
from netsim.engine import FlowEngine
from netsim.errors import NetsimError
from netsim.resolve import ResolvedFlow, ScheduleRun, resolve, static_time_s
from netsim.schedules import build_specs, check_algorithm, group_shape, validate_request
from netsim.topoview import TopoView


@dataclass
class CollectiveRecord:
    """Statistics of one finished collective."""
    tag: str
    op: str
    algorithm: str
    n: int
    size_bytes: int
    start_s: float
    end_s: float

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s


class Planner:
    """Validation, algorithm choice and resolved flow schedules, cached per group."""

    def __init__(self, topology, *, pxn: bool = False, view: TopoView | None = None):
        self.view = view if view is not None else TopoView(topology, pxn=pxn)
        self._shapes: dict[tuple[int, ...], tuple] = {}
        self._flows: dict[tuple, list[ResolvedFlow]] = {}
        self._est: dict[tuple, float] = {}
        self._auto: dict[tuple, str] = {}

    def shape(self, gpus: tuple[int, ...]):
        got = self._shapes.get(gpus)
        if got is None:
            shape = group_shape(self.view, gpus)
            got = (shape, ana.GroupFacts(self.view, shape))
            self._shapes[gpus] = got
        return got

    def prepare(self, req: CollectiveRequest):
        gpus = tuple(req.gpus)
        validate_request(self.view, req.op, gpus, req.size_bytes)
        shape, facts = self.shape(gpus)
        check_algorithm(self.view, shape, req.op, req.algorithm)
        alg = req.algorithm
        if alg == "auto":
            ck = (req.op, gpus, float(req.size_bytes))
            alg = self._auto.get(ck)
            if alg is None:
                alg = self._auto[ck] = ana.choose_algorithm(self.view, shape, facts, req.op,
                                                            float(req.size_bytes))
        elif req.op in ("send", "recv"):
            alg = "p2p"
        return gpus, shape, facts, alg

    def flows(self, op: str, alg: str, gpus: tuple[int, ...], shape) -> list[ResolvedFlow]:
        key = (op, alg, gpus)
        got = self._flows.get(key)
        if got is None:
            specs = build_specs(shape, op, alg, 1.0)
            got = [resolve(self.view, s, i) for i, s in enumerate(specs)]
            self._flows[key] = got
        return got

    def analytical_s(self, req: CollectiveRequest) -> tuple[float, str]:
        gpus, shape, facts, alg = self.prepare(req)
        key = (req.op, alg, gpus, float(req.size_bytes))
        t = self._est.get(key)
        if t is None:
            if alg in ("tree", "rhd", "pairwise", "pxn") or (alg == "direct" and req.op != "all_to_all"):
                t = static_time_s(self.view, self.flows(req.op, alg, gpus, shape), float(req.size_bytes)) \
                    if req.size_bytes > 0 and len(gpus) > 1 else 0.0
            else:
                t = ana.estimate_s(self.view, shape, facts, req.op, alg, float(req.size_bytes))
            self._est[key] = t
        return t, alg


class AnalyticalNetwork:
    """Alpha-beta backend: each collective takes its idle-network estimate; no contention."""

    kind = "analytical"

    def __init__(self, topology, *, pxn: bool = False, planner: Planner | None = None):
        self.planner = planner or Planner(topology, pxn=pxn)
        self._events: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = 0
        self.now_s = 0.0
        self.records: list[CollectiveRecord] = []

    def estimate(self, req: CollectiveRequest) -> float:
        return self.planner.analytical_s(req)[0]

    def submit(self, req: CollectiveRequest, now_s: float, on_done: Callable[[float], None]) -> None:
        t, alg = self.planner.analytical_s(req)
        start = max(now_s, self.now_s)
        end = start + t
        self.records.append(CollectiveRecord(req.tag, req.op, alg, len(req.gpus), int(req.size_bytes), start, end))
        heapq.heappush(self._events, (end, self._seq, on_done))
        self._seq += 1

    def next_event_time(self) -> float:
        return self._events[0][0] if self._events else math.inf

    def advance(self, until_s: float) -> None:
        while self._events and self._events[0][0] <= until_s:
            t, _, cb = heapq.heappop(self._events)
            self.now_s = max(self.now_s, t)
            cb(t)
        self.now_s = max(self.now_s, until_s)


def _run_collective(net, flows: list[ResolvedFlow], size: float, on_done, record: CollectiveRecord) -> None:
    """Start one collective's schedule on the network's engine; record and report its completion."""
    def finish(t: float) -> None:
        record.end_s = t
        net.records.append(record)
        net._in_flight -= 1
        on_done(t)

    ScheduleRun(net.engine, flows, size, finish).start()


class FlowNetwork:
    """Contention-aware backend: every collective becomes flows on the shared flow engine.

    options: pxn (route inter-node traffic through the NVLink peer on the destination rail),
    use_numba (None: automatic), check_invariants (debug: capacity, byte conservation, completion),
    record_flows / record_link_timeline (statistics).
    """

    kind = "flow"

    def __init__(self, topology, *, pxn: bool = False, use_numba: bool | None = None,
                 check_invariants: bool = False, record_flows: bool = False,
                 record_link_timeline: bool = False, planner: Planner | None = None):
        self.planner = planner or Planner(topology, pxn=pxn)
        self.options = dict(use_numba=use_numba, check_invariants=check_invariants,
                            record_flows=record_flows, record_link_timeline=record_link_timeline)
        self.engine = FlowEngine(self.planner.view.capacity_Bps, **self.options)
        self.records: list[CollectiveRecord] = []
        self._in_flight = 0
        self._est_cache: dict[tuple, float] = {}

    @property
    def now_s(self) -> float:
        return self.engine.now_s

    def submit(self, req: CollectiveRequest, now_s: float, on_done: Callable[[float], None]) -> None:
        gpus, shape, _facts, alg = self.planner.prepare(req)
        if now_s > self.engine.now_s:
            self.advance(now_s)
        flows = self.planner.flows(req.op, alg, gpus, shape) if req.size_bytes > 0 else []
        rec = CollectiveRecord(req.tag, req.op, alg, len(gpus), int(req.size_bytes), self.engine.now_s, math.nan)
        self._in_flight += 1
        _run_collective(self, flows, float(req.size_bytes), on_done, rec)

    def next_event_time(self) -> float:
        return self.engine.next_event_time()

    def advance(self, until_s: float) -> None:
        self.engine.advance(until_s)
        if self.engine.check_invariants and self.engine.idle() and self._in_flight:
            raise AssertionError(f"{self._in_flight} collectives unfinished on an idle network")

    def run_until_idle(self) -> float:
        return self.engine.run()

    def estimate(self, req: CollectiveRequest) -> float:
        """Seconds for `req` alone on an idle flow network (a private engine; no side effects)."""
        gpus, _shape, _facts, alg = self.planner.prepare(req)
        key = (req.op, alg, gpus, float(req.size_bytes))
        got = self._est_cache.get(key)
        if got is None:
            private = FlowNetwork(None, planner=self.planner, use_numba=self.options["use_numba"])
            done: list[float] = []
            private.submit(req, 0.0, done.append)
            private.run_until_idle()
            got = done[0]
            self._est_cache[key] = got
        return got

    # ------------------------------------------------------------ statistics
    def link_utilization(self):
        """Mean utilization per link (topology link id; the capacity is the effective one) so far."""
        return self.engine.link_utilization()

    def link_utilization_timeline(self, link_ids=None):
        """(times_s, utilization[len(times), len(link_ids)]): step function, each row holds from its
        time to the next. Needs record_link_timeline=True."""
        import numpy as np

        if not self.engine.record_link_timeline:
            raise NetsimError("link utilization over time needs make_backend(..., record_link_timeline=True)")
        ids = np.arange(len(self.engine.capacity_Bps)) if link_ids is None else np.asarray(link_ids)
        times = np.array([t for t, _ in self.engine.link_timeline])
        cap = self.engine.capacity_Bps[ids]
        util = np.array([load[ids] / cap for _, load in self.engine.link_timeline]).reshape(len(times), len(ids))
        return times, util

    def flow_completion_times(self):
        """Per completed flow: (bytes, start_s, end_s). Needs record_flows=True."""
        return [(r.nbytes, r.start_s, r.end_s) for r in self.engine.flow_records]


def make_backend(kind: str, topology, **options):
    """netsim.make_backend("flow" | "analytical", topology, **options) -> NetworkBackend.

    Options: pxn (both), and for "flow": use_numba, check_invariants, record_flows, record_link_timeline.
    """
    if kind == "flow":
        allowed = {"pxn", "use_numba", "check_invariants", "record_flows", "record_link_timeline"}
        bad = sorted(set(options) - allowed)
        if bad:
            raise NetsimError(f"flow backend: unknown option(s) {', '.join(bad)}")
        return FlowNetwork(topology, **options)
    if kind == "analytical":
        allowed = {"pxn"}
        bad = sorted(set(options) - allowed)
        if bad:
            raise NetsimError(f"analytical backend: unknown option(s) {', '.join(bad)}")
        return AnalyticalNetwork(topology, **options)
    raise NetsimError(f"unknown network backend {kind!r} (known: flow, analytical)")


def step_level_time_s(topology_or_planner, dag, gpus, *, check_invariants: bool = False) -> float:
    """Run a step-level DAG (netsim.dag) through the flow engine, every transfer its own flow.

    For validating the bundled schedules on small groups: both must agree for large messages.
    """
    from netsim.dag import dag_specs

    planner = topology_or_planner if isinstance(topology_or_planner, Planner) else Planner(topology_or_planner)
    specs = dag_specs(dag, tuple(gpus))
    flows = [resolve(planner.view, s, i) for i, s in enumerate(specs)]
    net = FlowNetwork(None, planner=planner, check_invariants=check_invariants)
    net._in_flight = 1
    done: list[float] = []
    rec = CollectiveRecord("dag", dag.op, dag.algorithm, dag.n, 0, 0.0, math.nan)
    _run_collective(net, flows, 1.0, done.append, rec)
    net.engine.run()
    if check_invariants:
        net.engine.check_all_done()
    return done[0]
