"""Reference flow engine for tests (vectorised numpy over all flows in flight): the previous netsim.engine.

Kept as the independent oracle of tests/netsim/test_engine_lazy.py: it advances every active flow at
every event and recomputes every finish time, where netsim.engine.FlowEngine works lazily.

Modelled: each flow crosses a fixed set of links (weights > 1 when a lock-step flow crosses a link more
than once); it waits `latency_s` after being added (per-flow start overhead + propagation), then
transfers `nbytes` at its max-min fair rate; rates are recomputed whenever a flow starts or finishes.
Incremental (default): max-min rates decompose over the connected components of the flow-link graph,
so an event re-solves only the flows connected (through shared links) to the flows that started or
finished; the others keep their rates. The result is the full re-solve's, bit for bit (same
bottleneck order and arithmetic within a component; tests/netsim/test_netsim_incremental.py).
Ignored: packets, queues, congestion control dynamics, head-of-line blocking.

Invariants (checked when `check_invariants=True`): no link carries more than its capacity at any
instant; the bytes delivered to a flow (integral of its rate) equal its size; at idle every flow has
completed. Runs are deterministic: flows are ordered by id, ties by insertion order.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

import numpy as np

from netsim.errors import NetsimError
from netsim.flowrecord import FlowRecord
from netsim.maxmin import compact_links, component_mask, maxmin_rates

# record_link_changes keeps at most this many (link, load) entries (16 bytes each, about 320 MB)
LINK_CHANGES_LIMIT = 20_000_000
# at most this many (flow, link) entries in flight: a full re-solve with the dict-based solver is
# cheaper than finding the connected component first
_SMALL_ENTRIES = 64
_EMPTY_I = np.zeros(0, dtype=np.int64)
_EMPTY_F = np.zeros(0, dtype=np.float64)


class ReferenceFlowEngine:
    """Flows over links with fixed capacities (bytes/s).

    add_flow(...) -> id; next_event_time(); advance(until_s). Callbacks `on_done(flow_id, t_s)` fire in
    advance() and may add flows.
    """

    def __init__(self, capacity_Bps, *, use_numba: bool | None = None, check_invariants: bool = False,
                 record_flows: bool = False, record_link_timeline: bool = False,
                 record_link_changes: bool = False, incremental: bool = True):
        self.capacity_Bps = np.asarray(capacity_Bps, dtype=np.float64)
        self.use_numba = use_numba
        self.check_invariants = check_invariants
        self.record_flows = record_flows
        self.record_link_timeline = record_link_timeline
        self.record_link_changes = record_link_changes
        self.now_s = 0.0
        self._links: list[np.ndarray] = []
        self._w: list[np.ndarray] = []
        self._bytes: list[float] = []
        self._cap: list[float] = []
        self._cb: list[Callable[[int, float], None] | None] = []
        self._added: list[float] = []
        self._started: list[float] = []
        self._delivered: list[float] = []
        self._pending: list[tuple[float, int]] = []   # (activation time, flow id)
        self._act_ids = _EMPTY_I
        self._act_rem = _EMPTY_F
        self._act_rate = _EMPTY_F
        # CSR of the active flows, maintained incrementally (vectorised filtering on departures)
        self._act_lens = _EMPTY_I
        self._act_fl = _EMPTY_I
        self._act_fw = _EMPTY_F
        self._act_caps = _EMPTY_F
        self._link_load = np.zeros(len(self.capacity_Bps))
        self._used = _EMPTY_I          # links carrying active flows, and their loads (B/s)
        self._used_load = _EMPTY_F
        self._fin = _EMPTY_F
        self._fin_min = math.inf
        self._dirty = False
        self._n_done = 0
        self.link_bytes = np.zeros(len(self.capacity_Bps))   # bytes carried per link (weighted)
        self.flow_records: list[FlowRecord] = []
        self.link_timeline: list[tuple[float, np.ndarray]] = []  # (t_s, load_Bps from t_s on)
        # sparse form (record_link_changes): (t_s, link ids whose load changed, their load_Bps from t_s on)
        self.link_changes: list[tuple[float, np.ndarray, np.ndarray]] = []
        self._recorded_load = np.zeros(len(self.capacity_Bps)) if record_link_changes else None
        self.link_changes_limit = LINK_CHANGES_LIMIT
        self.link_changes_stopped_s = math.nan   # set when the limit stopped the recording
        self._n_change_entries = 0
        self.recomputes = 0
        self.incremental = incremental
        self.resolved_flows = 0      # flows re-solved, summed over recomputations (statistics)
        self._seed_links: list[np.ndarray] = []   # links of the flows that left since the last solve
        self._seed_new = 0           # the last `_seed_new` active flows arrived since the last solve
        self._full_next = True       # the next solve covers every flow

    # ---------------------------------------------------------------- flows
    def add_flow(self, links, nbytes: float, *, weights=None, latency_s: float = 0.0,
                 cap_Bps: float = math.inf, on_done: Callable[[int, float], None] | None = None) -> int:
        links = np.asarray(links, dtype=np.int64)
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
        self._delivered.append(0.0)
        heapq.heappush(self._pending, (self.now_s + latency_s, fid))
        return fid

    @property
    def num_flows(self) -> int:
        return len(self._links)

    @property
    def num_active(self) -> int:
        return len(self._act_ids)

    def idle(self) -> bool:
        return not self._pending and len(self._act_ids) == 0

    # ---------------------------------------------------------------- rates
    def _recompute(self) -> None:
        self._dirty = False
        self.recomputes += 1
        ids = self._act_ids
        if len(ids) == 0:
            self._seed_links, self._seed_new = [], 0
            self._act_rate = _EMPTY_F
            self._fin = _EMPTY_F
            self._fin_min = math.inf
            self._link_load[self._used] = 0.0
            self._used, self._used_load = _EMPTY_I, _EMPTY_F
            self._record_loads()
            return
        lens, fl_global, fw, caps = self._act_lens, self._act_fl, self._act_fw, self._act_caps
        ptr = np.zeros(len(ids) + 1, dtype=np.int64)
        np.cumsum(lens, out=ptr[1:])
        # the solvers work on the links in use, renumbered in increasing id order: every per-event
        # cost is O(active entries), not O(links of the fabric); equal shares are still taken in
        # link-id order, so the rates are the same bit for bit
        small = len(fl_global) <= _SMALL_ENTRIES
        if small:     # the dict-based solver touches only the links in use; nothing to renumber
            used, fl, cap_used = None, fl_global, self.capacity_Bps
        else:
            used, fl = compact_links(fl_global, len(self.capacity_Bps), use_numba=self.use_numba)
            cap_used = self.capacity_Bps[used]
        sub = None
        if self.incremental and not self._full_next and not small:
            seed_links = np.concatenate(self._seed_links) if self._seed_links else _EMPTY_I
            pos = np.searchsorted(used, seed_links)     # seeds no active flow uses drop out
            ok = pos < len(used)
            ok[ok] = used[pos[ok]] == seed_links[ok]
            seed_links = pos[ok]
            seed_flows = np.arange(len(ids) - self._seed_new, len(ids), dtype=np.int64)
            sub = component_mask(len(used), ptr, fl, seed_links, seed_flows, use_numba=self.use_numba)
            if sub.all():
                sub = None
        self._seed_links, self._seed_new, self._full_next = [], 0, False
        if sub is None:
            has_cap = bool(np.isfinite(caps).any())
            rates = maxmin_rates(cap_used, ptr, fl, fw, caps if has_cap else None,
                                 use_numba=self.use_numba)
            self.resolved_flows += len(ids)
        else:
            # re-solve the connected component only; the flows outside keep their rates
            rates = self._act_rate.copy()
            idx = np.flatnonzero(sub)
            if len(idx):
                s_lens = lens[idx]
                s_ptr = np.zeros(len(idx) + 1, dtype=np.int64)
                np.cumsum(s_lens, out=s_ptr[1:])
                entry = np.repeat(sub, lens)
                s_caps = caps[idx]
                has_cap = bool(np.isfinite(s_caps).any())
                # renumbered again over the component's own links (O(its entries), same tie order)
                s_used, s_fl = compact_links(fl[entry], len(used), use_numba=self.use_numba)
                rates[idx] = maxmin_rates(cap_used[s_used], s_ptr, s_fl, fw[entry],
                                          s_caps if has_cap else None, use_numba=self.use_numba)
                self.resolved_flows += len(idx)
        self._act_rate = rates
        # finish times stay valid until the next recomputation (rates are constant in between)
        self._fin = self._finish_times()
        self._fin_min = float(self._fin.min())
        per_entry = np.repeat(np.where(np.isfinite(rates), rates, 0.0), lens) * fw
        if small:
            used, fl = np.unique(fl_global, return_inverse=True)
            fl = fl.reshape(-1)
        used_load = np.bincount(fl, weights=per_entry, minlength=len(used))
        self._link_load[self._used] = 0.0
        self._link_load[used] = used_load
        self._used, self._used_load = used, used_load
        if self.check_invariants:
            over = self._link_load > self.capacity_Bps * (1 + 1e-9) + 1e-6
            if over.any():
                lk = int(np.nonzero(over)[0][0])
                raise AssertionError(f"link {lk} above capacity: {self._link_load[lk]} > "
                                     f"{self.capacity_Bps[lk]} B/s at t={self.now_s}")
            stuck = (rates <= 0) & (self._act_rem > 0)
            if stuck.any():
                raise AssertionError(f"flow {int(ids[np.nonzero(stuck)[0][0]])} has rate 0")
        self._record_loads()

    def _record_loads(self) -> None:
        if self.record_link_timeline:
            self.link_timeline.append((self.now_s, self._link_load.copy()))
        if self.record_link_changes and self.link_changes_stopped_s != self.link_changes_stopped_s:
            # only the links whose load changed: a step function stored as its steps
            changed = np.nonzero(self._link_load != self._recorded_load)[0]
            if self._n_change_entries + len(changed) > self.link_changes_limit:
                self.link_changes_stopped_s = self.now_s      # bounded memory on huge traced runs
                return
            self._n_change_entries += len(changed)
            if len(changed):
                vals = self._link_load[changed]
                self._recorded_load[changed] = vals
                self.link_changes.append((self.now_s, changed, vals.copy()))

    def _finish_times(self) -> np.ndarray:
        with np.errstate(divide="ignore", invalid="ignore"):
            t = self._act_rem / self._act_rate
        t = np.where(self._act_rem <= 0, 0.0, t)
        return self.now_s + np.where(np.isnan(t), math.inf, t)

    def next_event_time(self) -> float:
        if self._dirty:
            self._recompute()
        t = self._pending[0][0] if self._pending else math.inf
        return min(t, self._fin_min)

    # ---------------------------------------------------------------- time
    def _progress(self, t_s: float) -> None:
        dt = t_s - self.now_s
        if dt > 0 and len(self._act_ids):
            moved = np.where(np.isfinite(self._act_rate), self._act_rate, 0.0) * dt
            self._act_rem = self._act_rem - moved
            self.link_bytes[self._used] += self._used_load * dt   # other links carry nothing
            if self.check_invariants:
                for f, m in zip(self._act_ids.tolist(), moved.tolist()):
                    self._delivered[f] += m
        self.now_s = max(self.now_s, t_s)

    def advance(self, until_s: float) -> None:
        """Process every event with time <= until_s (callbacks included), then move the clock there."""
        while True:
            t = self.next_event_time()
            if t > until_s:
                break
            self._progress(t)
            self._step_events(t)
        self._progress(until_s)

    def run(self) -> float:
        """Run until idle; returns the time of the last event."""
        while True:
            t = self.next_event_time()
            if t == math.inf:
                if len(self._act_ids):
                    raise NetsimError(f"{len(self._act_ids)} flows can never finish (zero-capacity path)")
                return self.now_s
            self.advance(t)

    def _step_events(self, t: float) -> None:
        done: list[int] = []
        keep_mask = None
        if len(self._act_ids):
            fin = self._fin
            # flows due within a relative 1e-9 of now finish together (one rate recomputation for
            # symmetric flows whose float finish times differ in the last bits)
            tol = t + max(abs(t), 1e-6) * 1e-9
            dmask = fin <= tol
            if dmask.any():
                done = self._act_ids[dmask].tolist()
                keep_mask = ~dmask
                if self.check_invariants:
                    for f, rem, rate in zip(done, self._act_rem[dmask].tolist(), self._act_rate[dmask].tolist()):
                        if rem > rate * (tol - t) * (1 + 1e-6) + 1e-6:
                            raise AssertionError(f"flow {f} completed with {rem} B undelivered")
                        self._delivered[f] += max(rem, 0.0)
        new: list[int] = []
        while self._pending and self._pending[0][0] <= t:
            _, f = heapq.heappop(self._pending)
            self._started[f] = t
            if self._bytes[f] <= 0 or (len(self._links[f]) == 0 and self._cap[f] == math.inf):
                if self.check_invariants:
                    self._delivered[f] = self._bytes[f]
                done.append(f)
            else:
                new.append(f)
        if keep_mask is not None or new:
            ids, rem = self._act_ids, self._act_rem
            lens, fl, fw, caps = self._act_lens, self._act_fl, self._act_fw, self._act_caps
            rate = self._act_rate
            if keep_mask is not None:
                entry_keep = np.repeat(keep_mask, lens)
                self._seed_links.append(fl[~entry_keep])
                # arrivals since the last solve stay the trailing flows (a departure needs a solve
                # first: its finish time comes from solved rates)
                self._seed_new -= int((~keep_mask[len(ids) - self._seed_new:]).sum())
                ids, rem, lens, caps = ids[keep_mask], rem[keep_mask], lens[keep_mask], caps[keep_mask]
                rate = rate[keep_mask]
                fl, fw = fl[entry_keep], fw[entry_keep]
            if new:
                self._seed_new += len(new)
                rate = np.concatenate([rate, np.zeros(len(new))])
                ids = np.concatenate([ids, np.asarray(new, dtype=np.int64)])
                rem = np.concatenate([rem, np.asarray([self._bytes[f] for f in new])])
                lens = np.concatenate([lens, np.asarray([len(self._links[f]) for f in new], dtype=np.int64)])
                caps = np.concatenate([caps, np.asarray([self._cap[f] for f in new], dtype=np.float64)])
                fl = np.concatenate([fl] + [self._links[f] for f in new])
                fw = np.concatenate([fw] + [self._w[f] for f in new])
            self._act_ids, self._act_rem = ids, rem
            self._act_lens, self._act_fl, self._act_fw, self._act_caps = lens, fl, fw, caps
            self._act_rate = rate   # new flows: placeholder 0 until the recompute below
            self._dirty = True
        for f in sorted(done):
            self._n_done += 1
            if self.check_invariants:
                err = abs(self._delivered[f] - self._bytes[f])
                if err > 1e-6 * self._bytes[f] + 1e-3:
                    raise AssertionError(f"flow {f}: delivered {self._delivered[f]} B of {self._bytes[f]} B")
            if self.record_flows:
                self.flow_records.append(FlowRecord(f, self._bytes[f], self._added[f], self._started[f], t))
            cb = self._cb[f]
            self._cb[f] = None     # a finished flow's callback (and what it holds) is not needed again
            if cb is not None:
                cb(f, t)

    # ---------------------------------------------------------------- stats
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
