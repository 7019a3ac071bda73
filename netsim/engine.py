"""Event-driven flow-level engine: flows on links, max-min fair rates, completion callbacks.

Modelled: each flow crosses a fixed set of links (weights > 1 when a lock-step flow crosses a link more
than once); it waits `latency_s` after being added (per-flow start overhead + propagation), then
transfers `nbytes` at its max-min fair rate; rates are recomputed whenever a flow starts or finishes.
Incremental (default): max-min rates decompose over the connected components of the flow-link graph,
so an event re-solves only the flows connected (through shared links) to the flows that started or
finished; the others keep their rates (the same bottleneck order and arithmetic as a full solve).
Per-event work is proportional to that component, not to the flows in flight: the link -> flows
index is kept incrementally, progress is lazy (a flow's bytes left are brought up to date only when
its rate changes) and the next departure comes from a heap of finish times (netsim._flowcore, numba
when installed, the same code as plain Python otherwise). `incremental=False` re-solves every flow
at every event (for comparisons); tests/netsim/reference_engine.py keeps the previous,
vectorised engine that advances every flow at every event (the tests' oracle).
Ignored: packets, queues, congestion control dynamics, head-of-line blocking.

Invariants (checked when `check_invariants=True`): no link carries more than its capacity at any
instant; a flow completes with its bytes delivered; at idle every flow has completed. Runs are
deterministic: flows are ordered by activation, ties by insertion order.
"""

from __future__ import annotations

import heapq
import math
import time
from collections.abc import Callable
from importlib.util import find_spec

import numpy as np

from netsim import _flowcore as fc
from netsim.errors import NetsimError
from netsim.flowrecord import FlowRecord
from netsim.maxmin import numba_available

__all__ = ["FlowEngine", "FlowRecord", "KernelBudget", "LINK_CHANGES_LIMIT", "process_budget"]

# automatic kernel choice: compiled (numba) kernels once the plain ones have spent this long in
# re-solves, about what loading numba's cached code costs a process (see KernelBudget)
COMPILE_AFTER_S = 1.0
# plain-kernel time of one event (s): a re-solve of a few flows with its bookkeeping, 69 us measured on
# the 2-core reference machine (pipeline sends of the 1T benchmark at PP 16); FlowEngine.expect_events
EVENT_PLAIN_S = 7e-5
# record_link_changes keeps at most this many (link, load) entries (16 bytes each, about 320 MB)
LINK_CHANGES_LIMIT = 20_000_000
_I = np.int64
_NO_I = np.zeros(0, dtype=_I)
_NO_F = np.zeros(0, dtype=np.float64)


class KernelBudget:
    """When flow engines move from the plain-Python kernels to the compiled ones: after the plain ones
    have spent `plain_s` in re-solves across the engines sharing the budget, about what loading
    numba's cached code costs a process (~1 s; about 14 s to compile once per install), which a small
    run would not earn back. Both kernel sets give bit-identical results, so where the switch falls (a
    wall-clock matter) never changes an output. Without numba the plain kernels are used throughout."""

    def __init__(self, plain_s: float | None = None):
        if plain_s is None:
            plain_s = COMPILE_AFTER_S
        self.left_s = plain_s if find_spec("numba") is not None else math.inf
        self.compiled: dict | None = None

    def spend(self, dt_s: float) -> None:
        self.left_s -= dt_s
        if self.left_s <= 0:
            self.left_s = math.inf
            try:
                self.compiled = fc.kernels(True)
            except Exception:  # numba present but broken: the plain kernels give the same results
                self.compiled = None


_PROCESS_BUDGET: list[KernelBudget] = []


def process_budget() -> KernelBudget:
    """The budget engines share by default: one per process, because what it pays for (loading
    numba's code) is paid once per process, whichever engine triggers it (a calibration sweep builds
    hundreds of networks). Only speed depends on it, never a result."""
    if not _PROCESS_BUDGET:
        _PROCESS_BUDGET.append(KernelBudget())
    return _PROCESS_BUDGET[0]


class FlowEngine:
    """Flows over links with fixed capacities (bytes/s).

    add_flow(...) -> id; next_event_time(); advance(until_s). Callbacks `on_done(flow_id, t_s)` fire in
    advance() and may add flows. use_numba: None (plain-Python kernels until `budget` (a KernelBudget;
    default: the process's, process_budget()) says to switch to compiled ones), True (compiled), False (plain Python: slow
    on large runs, for comparisons); all three give the same results bit for bit.
    """

    def __init__(self, capacity_Bps, *, use_numba: bool | None = None, check_invariants: bool = False,
                 record_flows: bool = False, record_link_timeline: bool = False,
                 record_link_changes: bool = False, incremental: bool = True, budget: KernelBudget | None = None):
        self.capacity_Bps = np.ascontiguousarray(capacity_Bps, dtype=np.float64)
        if use_numba and not numba_available():
            raise NetsimError("use_numba=True but numba is not installed")
        self.use_numba = use_numba
        self._budget = (budget if budget is not None else process_budget()) if use_numba is None else None
        self._set_kernels(fc.kernels(bool(use_numba)))
        self._budget_check()
        self.check_invariants = check_invariants
        self.record_flows = record_flows
        self.record_link_timeline = record_link_timeline
        self.record_link_changes = record_link_changes
        self.incremental = incremental
        self.now_s = 0.0
        n_links = len(self.capacity_Bps)
        # per flow (all flows ever added): links and weights until it starts, then None
        self._links: list[np.ndarray | None] = []
        self._w: list[np.ndarray | None] = []
        self._bytes: list[float] = []
        self._cap: list[float] = []
        self._cb: list[Callable[[int, float], None] | None] = []
        self._added: list[float] = []
        self._started: list[float] = []
        self._pending: list[tuple[float, int]] = []   # (activation time, flow id)
        # kernel state (layouts in netsim._flowcore)
        self._sc = np.zeros(fc.N_SC, dtype=_I)
        self._si = np.zeros((0, fc.N_SI), dtype=_I)
        self._sf = np.zeros((0, fc.N_SF))
        self._free = _NO_I
        self._seeds = _NO_I
        self._comp_slots = _NO_I
        self._ei = np.zeros((0, fc.N_EI), dtype=_I)
        self._ew = _NO_F
        self._li = np.zeros((n_links, fc.N_LI), dtype=_I)
        self._li[:, fc.L_HEAD] = -1
        self._lf = np.zeros((n_links, fc.N_LF))
        self._seedl = np.zeros(n_links, dtype=_I)
        self._comp_links = np.zeros(n_links, dtype=_I)
        self._out_load = np.zeros(n_links)
        self._hk = _NO_F
        self._hs = np.zeros((0, 2), dtype=_I)
        self._out_fid = _NO_I
        self._out_left = _NO_F
        self._out_rate = _NO_F
        self._grow_slots(64)
        self._grow_entries(1024)
        # _activate's arguments for a single flow: id, entries, bytes, cap
        self._one = (np.zeros(1, dtype=_I), np.zeros(1, dtype=_I), np.zeros(1), np.zeros(1))
        self._fin_min = math.inf
        self._dirty = False
        self._n_done = 0
        self.flow_records: list[FlowRecord] = []
        self.link_timeline: list[tuple[float, np.ndarray]] = []  # (t_s, load_Bps from t_s on)
        # sparse form (record_link_changes): (t_s, link ids whose load changed, their load_Bps from t_s on)
        self.link_changes: list[tuple[float, np.ndarray, np.ndarray]] = []
        self._recorded_load = np.zeros(n_links) if record_link_changes else None
        self.link_changes_limit = LINK_CHANGES_LIMIT
        self.link_changes_stopped_s = math.nan   # set when the limit stopped the recording
        self._n_change_entries = 0
        self.recomputes = 0
        self.resolved_flows = 0      # flows re-solved, summed over recomputations (statistics)

    def _budget_check(self) -> None:
        if self._budget is not None and self._budget.compiled is not None:
            self._set_kernels(self._budget.compiled)
            self._budget = None

    def expect_events(self, n: int) -> None:
        """A caller announces about `n` events: when the plain kernels would spend the budget on them
        (n * EVENT_PLAIN_S), switch to the compiled ones now instead of after the budget is spent.
        Same results either way (the kernel sets are bit-identical); only the wall time differs."""
        budget = self._budget
        if budget is not None and n * EVENT_PLAIN_S >= budget.left_s:
            budget.spend(budget.left_s)
            self._budget_check()

    def _set_kernels(self, k: dict) -> None:
        self._k_rebuild = k["heap_rebuild"]
        self._k_add, self._k_pop, self._k_resolve = k["add_flows"], k["pop_done"], k["resolve"]
        self._k_compact = k["compact_entries"]

    # ---------------------------------------------------------------- storage
    def _grow_slots(self, need_free: int) -> None:
        old = self._si.shape[0]
        new = max(2 * old, old + need_free, 64)
        si = np.zeros((new, fc.N_SI), dtype=_I)
        si[:old] = self._si
        si[old:, fc.S_FID] = -1
        sf = np.zeros((new, fc.N_SF))
        sf[:old] = self._sf
        nfree = int(self._sc[fc.C_NFREE])
        free = np.zeros(new, dtype=_I)
        free[:nfree] = self._free[:nfree]
        free[nfree:nfree + new - old] = np.arange(new - 1, old - 1, -1)   # lowest slot ids used first
        self._sc[fc.C_NFREE] = nfree + new - old
        seeds = np.zeros(new, dtype=_I)
        seeds[:len(self._seeds)] = self._seeds
        self._si, self._sf, self._free, self._seeds = si, sf, free, seeds
        self._comp_slots = np.zeros(new, dtype=_I)
        self._out_fid = np.zeros(new, dtype=_I)
        self._out_left = np.zeros(new)
        self._out_rate = np.zeros(new)

    def _grow_entries(self, need: int) -> None:
        cap = self._ei.shape[0]
        live = int(self._sc[fc.C_ETOP] - self._sc[fc.C_EDEAD])
        new = cap if live + need <= cap // 2 else max(2 * cap, 2 * (live + need))
        ei = np.zeros((new, fc.N_EI), dtype=_I)
        ew = np.zeros(new)
        if cap:
            self._k_compact(self._si, self._ei, self._ew, self._li, ei, ew, self._sc)
        self._ei, self._ew = ei, ew

    def _ensure_heap(self) -> None:
        sc = self._sc
        n_act = int(sc[fc.C_NACT])
        if sc[fc.C_HSIZE] + n_act <= len(self._hk):
            return
        if n_act and len(self._hk):
            self._k_rebuild(self._si, self._sf, self._hk, self._hs, sc)
        if sc[fc.C_HSIZE] + n_act > len(self._hk) // 2:
            new = max(1024, 4 * (int(sc[fc.C_HSIZE]) + n_act))
            hk = np.zeros(new)
            hs = np.zeros((new, 2), dtype=_I)
            size = int(sc[fc.C_HSIZE])
            hk[:size] = self._hk[:size]
            hs[:size] = self._hs[:size]
            self._hk, self._hs = hk, hs

    # ---------------------------------------------------------------- flows
    def add_flow(self, links, nbytes: float, *, weights=None, latency_s: float = 0.0,
                 cap_Bps: float = math.inf, on_done: Callable[[int, float], None] | None = None) -> int:
        links = np.asarray(links, dtype=_I)
        w = np.ones(len(links)) if weights is None else np.asarray(weights, dtype=np.float64)
        if nbytes < 0 or latency_s < 0:
            raise NetsimError(f"flow with negative size or latency ({nbytes} B, {latency_s} s)")
        fid = len(self._links)
        self._links.append(links)
        self._w.append(w)
        self._bytes.append(float(nbytes))
        self._cap.append(float(cap_Bps))
        self._cb.append(on_done)
        self._added.append(self.now_s)
        self._started.append(math.nan)
        heapq.heappush(self._pending, (self.now_s + latency_s, fid))
        return fid

    def add_flows(self, links: list, weights: list, nbytes: list, latency_s: list, cap_Bps: list,
                  on_done: list) -> int:
        """add_flow for several flows at once, in list order (the same ids, activation times and
        results as one add_flow per flow); per flow: links (an int64 array), weights (a float64 array,
        same length), bytes, latency (s), cap (B/s) and callback. Returns the id of the first; none is
        added when one has a negative size or latency."""
        for b, lat in zip(nbytes, latency_s):
            if b < 0 or lat < 0:
                raise NetsimError(f"flow with negative size or latency ({b} B, {lat} s)")
        n = len(nbytes)
        fid = len(self._links)
        now = self.now_s
        self._links.extend(links)
        self._w.extend(weights)
        self._bytes.extend(nbytes)
        self._cap.extend(cap_Bps)
        self._cb.extend(on_done)
        self._added.extend([now] * n)
        self._started.extend([math.nan] * n)
        pending, push = self._pending, heapq.heappush
        for i, lat in enumerate(latency_s, fid):
            push(pending, (now + lat, i))
        return fid

    @property
    def num_flows(self) -> int:
        return len(self._links)

    @property
    def num_active(self) -> int:
        return int(self._sc[fc.C_NACT])

    def idle(self) -> bool:
        return not self._pending and self._sc[fc.C_NACT] == 0

    # ---------------------------------------------------------------- rates
    def _recompute(self) -> None:
        self._dirty = False
        self.recomputes += 1
        budget = self._budget      # None once compiled (or chosen explicitly): nothing left to time
        t0 = time.perf_counter() if budget is not None else 0.0
        while True:    # the kernel declines (changing nothing) when the heap needs room first
            nc, nl, top = self._k_resolve(self.now_s, not self.incremental, self._si, self._sf, self._ei,
                                          self._ew, self._li, self._lf, self.capacity_Bps, self._hk, self._hs,
                                          self._sc, self._seedl, self._seeds, self._comp_slots, self._comp_links,
                                          self._out_load)
            if nc >= 0:
                break
            self._ensure_heap()
        if budget is not None:
            budget.spend(time.perf_counter() - t0)
            self._budget_check()
        self.resolved_flows += int(nc)
        self._fin_min = float(top)   # numpy's or numba's float: one type
        if self.check_invariants:
            links, load = self._comp_links[:nl], self._out_load[:nl]
            over = load > self.capacity_Bps[links] * (1 + 1e-9) + 1e-6
            if over.any():
                j = int(np.flatnonzero(over)[0])
                raise AssertionError(f"link {int(links[j])} above capacity: {load[j]} > "
                                     f"{self.capacity_Bps[links[j]]} B/s at t={self.now_s}")
            act = self._si[:, fc.S_FID] >= 0
            stuck = act & (self._sf[:, fc.F_RATE] <= 0) & (self._sf[:, fc.F_REM] > 0)
            if stuck.any():
                raise AssertionError(f"flow {int(self._si[np.flatnonzero(stuck)[0], fc.S_FID])} has rate 0")
        if self.record_link_timeline:
            self.link_timeline.append((self.now_s, self._lf[:, fc.G_LOAD].copy()))
        if self.record_link_changes and self.link_changes_stopped_s != self.link_changes_stopped_s:
            self._record_changes(self._comp_links[:nl], self._out_load[:nl])

    def _record_changes(self, links: np.ndarray, load: np.ndarray) -> None:
        # only the links whose load changed (the others keep theirs): a step function stored as its steps
        order = np.argsort(links)
        links, load = links[order], load[order]
        changed = load != self._recorded_load[links]
        n = int(changed.sum())
        if self._n_change_entries + n > self.link_changes_limit:
            self.link_changes_stopped_s = self.now_s      # bounded memory on huge traced runs
            return
        self._n_change_entries += n
        if n:
            ids, vals = links[changed], load[changed]
            self._recorded_load[ids] = vals
            self.link_changes.append((self.now_s, ids, vals))

    def next_event_time(self) -> float:
        if self._dirty:
            self._recompute()
        pending = self._pending
        t = pending[0][0] if pending else math.inf
        fin = self._fin_min
        return t if t <= fin else fin

    # ---------------------------------------------------------------- time
    def advance(self, until_s: float) -> None:
        """Process every event with time <= until_s (callbacks included), then move the clock there."""
        next_time, step = self.next_event_time, self._step_events
        while True:
            t = next_time()
            if t > until_s:
                break
            if t > self.now_s:
                self.now_s = t
            step(t)
        if until_s > self.now_s:
            self.now_s = until_s

    def run(self) -> float:
        """Run until idle; returns the time of the last event."""
        while True:
            t = self.next_event_time()
            if t == math.inf:
                if self._sc[fc.C_NACT]:
                    raise NetsimError(f"{int(self._sc[fc.C_NACT])} flows can never finish (zero-capacity path)")
                return self.now_s
            self.advance(t)

    def _step_events(self, t: float) -> None:
        done: list[int] = []
        changed = False
        # flows due within a relative 1e-9 of now finish together (one rate recomputation for
        # symmetric flows whose float finish times differ in the last bits)
        tol = t + max(abs(t), 1e-6) * 1e-9
        if self._fin_min <= tol:
            n, top = self._k_pop(t, tol, self._hk, self._hs, self._si, self._sf, self._free, self._ei, self._li,
                                 self._sc, self._seedl, self._out_fid, self._out_left, self._out_rate)
            if n:
                changed = True
                done = self._out_fid[:n].tolist()
                if self.check_invariants:
                    for f, left, rate in zip(done, self._out_left[:n].tolist(), self._out_rate[:n].tolist()):
                        if left > rate * (tol - t) * (1 + 1e-6) + 1e-6:
                            raise AssertionError(f"flow {f} completed with {left} B undelivered")
                        if left < -(1e-6 * self._bytes[f] + 1e-3):
                            raise AssertionError(f"flow {f}: delivered {self._bytes[f] - left} B of {self._bytes[f]} B")
            self._fin_min = float(top)   # numpy's or numba's float: one type
        pending = self._pending
        if pending and pending[0][0] <= t:
            new: list[int] = []
            started, nbytes, links, caps = self._started, self._bytes, self._links, self._cap
            pop = heapq.heappop
            while pending and pending[0][0] <= t:
                _, f = pop(pending)
                started[f] = t
                if nbytes[f] <= 0 or (len(links[f]) == 0 and caps[f] == math.inf):
                    done.append(f)
                    links[f] = self._w[f] = None
                else:
                    new.append(f)
            if new:
                self._activate(new, t)
                changed = True
        if changed:
            self._dirty = True
        if not done:
            return
        cbs = self._cb
        for f in sorted(done) if len(done) > 1 else done:
            self._n_done += 1
            if self.record_flows:
                self.flow_records.append(FlowRecord(f, self._bytes[f], self._added[f], self._started[f], t))
            cb = cbs[f]
            cbs[f] = None     # a finished flow's callback (and what it holds) is not needed again
            if cb is not None:
                cb(f, t)

    def _activate(self, new: list[int], t: float) -> None:
        links_of, w_of = self._links, self._w
        sc = self._sc
        if len(new) == 1:
            # one flow (most activations of a pipeline send): its scalars go in through 1-element arrays
            # kept by the engine, not four new arrays per event
            f = new[0]
            fl, fw = links_of[f], w_of[f]
            fid, lens, nbytes, caps = self._one
            fid[0] = f
            lens[0] = len(fl)
            nbytes[0] = self._bytes[f]
            caps[0] = self._cap[f]
            links_of[f] = w_of[f] = None
        else:
            links = [links_of[f] for f in new]
            lens = [len(x) for x in links]
            fl = np.concatenate(links)
            fw = np.concatenate([w_of[f] for f in new])
            b, c = self._bytes, self._cap
            fid, lens = np.array(new, dtype=_I), np.array(lens, dtype=_I)
            nbytes = np.array([b[f] for f in new], dtype=np.float64)
            caps = np.array([c[f] for f in new], dtype=np.float64)
            for f in new:      # the engine holds its own copy from now on
                links_of[f] = w_of[f] = None
        # the kernel declines (changing nothing) when slots or entries are short: grow, then again
        while not self._k_add(t, fid, lens, fl, fw, nbytes, caps, self._si, self._sf, self._free, self._ei,
                              self._ew, self._li, sc, self._seedl, self._seeds):
            if sc[fc.C_NFREE] < len(fid):
                self._grow_slots(len(fid))
            if sc[fc.C_ETOP] + len(fl) > self._ei.shape[0]:
                self._grow_entries(len(fl))

    # ---------------------------------------------------------------- stats
    @property
    def link_bytes(self) -> np.ndarray:
        """Bytes carried per link (weighted) up to now (a fresh array)."""
        lf = self._lf
        return lf[:, fc.G_BYTES] + lf[:, fc.G_LOAD] * (self.now_s - lf[:, fc.G_TLOAD])

    def link_utilization(self, elapsed_s: float | None = None) -> np.ndarray:
        """Mean utilization per link over [0, elapsed_s] (default: up to now)."""
        el = self.now_s if elapsed_s is None else elapsed_s
        if el <= 0:
            return np.zeros(len(self.capacity_Bps))
        with np.errstate(divide="ignore", invalid="ignore"):
            u = self.link_bytes / (self.capacity_Bps * el)
        return np.nan_to_num(u)

    def check_all_done(self) -> None:
        if not self.idle() or self._n_done != len(self._links):
            raise AssertionError(f"{len(self._links) - self._n_done} flows did not complete")
