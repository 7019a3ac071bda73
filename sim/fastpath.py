"""Iteration on a contention-free backend without the event loop (sim.engine's arithmetic twin).

On the analytical backend every collective takes its idle-network time (backend.estimate), so every
time in an iteration is a max/plus expression of kernel durations and collective times: a stage's
clock only waits for pipeline data, its own collectives and the rendezvous of cross-stage ones. This
module replays each stage's program (sim.schedule tasks, the same op lists as sim.engine) as plain
arithmetic: stages run one after the other until they need data another stage has not produced yet,
then resume when it has. No heap, no per-op events, no closures. Collective times come from the
engine's own group selection and estimate cache (one estimate per (kind, stage, collective, size)).

Modelled exactly as sim.engine (identical results, tests/sim/test_fastpath.py): compute stream,
one FIFO stream per group kind, blocking / non-blocking ops and their wait points, deferred
gradient reductions, pipeline sends on the pp_next / pp_prev streams, cross-stage rendezvous (mp,
embedding), the host model of sim.overheads (launch gaps, host issue, .item() and batched-p2p
synchronisations), the per-stage split (compute, exposed per group, overhead, bubble), the stage-0
per-layer rows, the communication log, the overlap-contention model (sim.contention: a kernel's end
is computed piecewise between the starts and ends of its rank's communication, as the engine does for
arithmetically timed communication) and the trace entries. Differences: the log and the trace list
operations stage by stage instead of by event time (same entries), and a trace entry's last field is
its argument dict (shared, filled by sim.trace_args.annotate) instead of the op or handle.
Not handled (applies() says why; sim.simulation then runs the event engine): a backend with
contention (flow), stragglers. A kernel that runs while a cross-stage collective of its rank waits
for a rendezvous that depends on later pipeline progress cannot be ordered arithmetically: run_fast
then returns None and the event engine runs the iteration.
"""

from __future__ import annotations

import gc
import math
from contextlib import contextmanager

from netsim.api import CollectiveRequest
from sim.engine import (
    _CROSS_STAGE,
    EngineResult,
    Handle,
    StageStats,
    awaited_transfer,
    column_of,
    report_group,
    segment_list,
    send_target,
    transfer_handle,
)
from sim.errors import SimError
from sim.lazy_rows import LazyRows, timed_row
from sim.schedule import stage_tasks
from sim.trace_args import args_key
from workload_gen.workload import CommOp


def applies(eng) -> str | None:
    """None when the fast path reproduces `eng.run()`; else why the event engine is needed."""
    if not getattr(eng, "contention_free", False):
        return "the network backend has contention (events decide who shares a link)"
    if any(f != 1.0 for f in getattr(eng, "stage_factors", ())):
        return "stragglers slow some stages"
    return None


# instruction codes of a compiled segment (FastRun._program): intra-stage collectives first (code <=
# _FAST_AFTER), a blocking one, then non-blocking ones by what follows their issue: waited by their
# wait_op / at the iteration end (deferred) / after the segment; then kernels and the other ops
_FAST_BLOCK, _FAST_PENDING, _FAST_DEFER, _FAST_AFTER, _KERNEL, _OTHER = 0, 1, 2, 3, 4, 5


class _NeedsEvents(Exception):
    """The arithmetic order cannot resolve this workload; the event engine must run it."""


class _OpInfo:
    """What every execution of one intra-stage collective op of one stage shares: its idle-network
    time, group, contention footprint, the fixed columns of its StepReport.collectives row, and the
    argument slots of its executions' trace entries (FastRun.slot: one for the collective, one for a
    wait on it; sim.trace_args reads the sim.engine.Handle fields this has: kind, name, stage,
    collective, size_bytes, group_size, fast, peer_stage)."""

    fast = True
    peer_stage = -1
    __slots__ = ("est", "group_size", "fp", "kind", "name", "collective", "size_bytes", "op", "stage",
                 "report_group", "layer_row", "column", "_row", "_rank", "_row_key", "host_sync", "thread", "wait_name",
                 "comm_args", "wait_args")

    def __init__(self, eng, stage: int, op, est: float, groups, fp, record: bool, slot=None) -> None:
        self.est = est
        self.group_size = len(groups[0]) if groups else 1
        self.fp = fp
        self.kind = op.group
        self.name = op.name
        self.collective = op.collective
        self.size_bytes = int(op.size_bytes)
        self.op = op
        self.stage = stage
        self.report_group = report_group(op.group)
        self.thread, self.wait_name = f"comm:{op.group}", f"wait {op.name}"     # its trace entries' texts
        self.comm_args = slot(self, "comm") if slot is not None else None
        self.wait_args = slot(self, "wait") if slot is not None else None
        # a blocking op whose result the host reads (sim.overheads: .item() after it)
        self.host_sync = eng.host is not None and op.name.startswith(eng.host.host_sync_ops)
        # stage 0's per-layer row and column (exposed time is charged there)
        self.layer_row = eng.row_key(op) if record else None
        self.column = column_of(op) if record else None
        self._rank, self._row_key = eng.rep_ranks[stage], eng.row_key     # (not eng: no reference cycle)
        self._row = None

    @property
    def row(self) -> dict:
        """The op's StepReport.collectives row fields in sim.simulation._collective_rows's order, the
        times (set per execution) last; made on first read (a report whose rows are never read
        makes none)."""
        row = self._row
        if row is None:
            op = self.op
            layer = self.layer_row if self.layer_row is not None else self._row_key(op)
            row = self._row = {
                "stage": self.stage, "rank": self._rank, "group": op.group,
                "report_group": self.report_group, "name": op.name, "collective": op.collective,
                "size_bytes": self.size_bytes, "group_size": self.group_size, "peer_stage": None,
                "layer": layer, "phase": getattr(op, "phase", "pipeline"),
                "blocking": bool(op.blocking), "timing": "estimate",
                "start_s": math.nan, "end_s": math.nan, "duration_s": math.nan, "exposed_s": math.nan}
        return row


class _Rec:
    """An arithmetically timed collective of a stage representative (an entry of the communication
    log): its times and its op's _OpInfo, whose fields it shows as those of a sim.engine.Handle."""

    __slots__ = ("info", "start_s", "done_s", "exposed_s", "fp")
    fast = True
    done = True
    peer_stage = -1
    rdv_s = math.nan

    def __init__(self, info: _OpInfo, start_s: float, done_s: float) -> None:
        self.info = info
        self.start_s = start_s
        self.done_s = done_s
        self.exposed_s = 0.0
        self.fp = None

    op = property(lambda self: self.info.op)
    kind = property(lambda self: self.info.kind)
    name = property(lambda self: self.info.name)
    stage = property(lambda self: self.info.stage)
    collective = property(lambda self: self.info.collective)
    size_bytes = property(lambda self: self.info.size_bytes)
    group_size = property(lambda self: self.info.group_size)


class _Stage:
    """Arithmetic state of one stage's representative rank."""

    __slots__ = ("stage", "prog", "segments", "stats", "clock", "host", "fast_free", "stream_free",
                 "deferred", "sent", "sent_handles", "rdv_counts", "record", "seg_cache", "gen", "xqueue",
                 "xbusy", "live", "opinfo", "instrs")

    def __init__(self, stage: int, prog, tasks) -> None:
        self.stage = stage
        self.prog = prog
        self.segments = [("start", -1, -1)] + [(d, c, mb) for c, mb, d in tasks] + [("end", -1, -1)]
        self.stats = StageStats()
        self.clock = 0.0
        self.host = 0.0
        self.fast_free: dict[str, float] = {}      # intra-stage kind -> end of its last collective
        self.stream_free: dict[str, float] = {}    # pp_next / pp_prev -> the stream is free at
        self.deferred: list = []
        self.sent = False
        self.sent_handles: list = []
        self.rdv_counts: dict = {}
        self.record = stage == 0
        self.seg_cache: dict = {}
        self.gen = None
        self.xqueue: dict = {}     # cross-stage kind -> [(handle, rendezvous key, issue time)] not yet started
        self.xbusy: dict = {}      # cross-stage kind -> handle its stream runs (or ran last)
        self.live: list = []       # contention model: handles with a footprint, maybe still in flight
        self.opinfo: dict = {}     # CommOp (by value; other op types by id) -> its _OpInfo (FastRun._op_info)
        self.instrs: tuple = ({}, {})     # [in_pipeline: 0 start/end, 1 fwd/bwd] id(op) -> its instruction (FastRun._program)


class FastRun:
    """Runs one iteration of `eng` (a sim.engine.Engine, not started) arithmetically."""

    def __init__(self, eng) -> None:
        self.eng = eng
        self.avail: dict = {}        # ("act"|"grad", virtual stage, mb) -> Handle (done_s known when .done)
        self.rdv: dict = {}          # (kind, name, n) -> [arrived handles]
        self.prefetched: set = set()  # (group kind, collective) whose groups' quick keys were made at once (_est)
        self.waiting: dict = {}      # id(handle) -> stages parked until its done time is known
        self.ready: list = []
        self.send_fp: dict = {}      # (stage, bytes) -> footprint of its pipeline sends (Engine.footprint's key)
        self.parked_on_comm = 0      # stages waiting for a cross-stage collective's start (contention)
        self.trace: list | None = [] if eng.tracing else None   # engine trace entries (sim.engine format)
        self.log: list = []          # every communication operation, stage by stage (eng.comm_log)
        self.slow: list = []         # the log's entries that are not fast records (sends, cross-stage), in order
        self.rows_of: dict = {}      # id(cross-stage handle of stage 0) -> its per-layer (row, column)
        # trace arguments, filled later (sim.trace_args.annotate): each entry's last field is an empty
        # dict, shared by every execution of one op, listed here with the reference and category that
        # sim.trace_args makes the arguments of (a few thousand slots for 10^5 entries: the trace's
        # entries are made once, in their final form)
        self.slots: list = []
        self.slot_of: dict = {}         # sim.trace_args.args_key -> its slot
        self.kernel_slots: dict = {}    # id(a segment's cached op list) -> the slot of each op (None: comm)
        self.op_slots: dict = {}        # id(kernel op) -> its slot
        self.host_args = self.slot(None, "overhead") if self.trace is not None else None

    def slot(self, ref, cat: str) -> dict:
        """The argument dict of trace entries of `ref` in category `cat`: empty until annotate fills it,
        one for all the entries whose arguments are equal (sim.trace_args.args_key)."""
        key = args_key(ref, cat)
        args = self.slot_of.get(key)
        if args is None:
            args = self.slot_of[key] = {}
            self.slots.append((args, ref, cat))
        return args

    def _kernel_slots(self, ops: list) -> list:
        """The argument slot of each kernel of a segment's op list (one per op, shared by segments)."""
        got = self.kernel_slots.get(id(ops))
        if got is None:
            got = self.kernel_slots[id(ops)] = []
            for op in ops:
                args = None
                if not op.is_comm:
                    args = self.op_slots.get(id(op))
                    if args is None:
                        args = self.op_slots[id(op)] = self.slot(op, op.phase)
                got.append(args)
        return got

    # ---------------- helpers shared with the engine's rules ----------------
    def _est(self, key, groups, op) -> float:
        eng = self.eng
        est = eng._est_cache.get(key)
        if est is None:
            if (op.group, op.collective) not in self.prefetched:
                self._prefetch(op)
            est = max((float(eng.net.estimate(CollectiveRequest(op.collective, g, int(op.size_bytes),
                                                                tag=f"{op.group}:{op.name}")))
                       for g in groups if len(g) > 1), default=0.0)
            eng._est_cache[key] = est
        return est

    def _prefetch(self, op) -> None:
        """Let the planner make the quick keys of `op`'s collective on every stage's groups of its
        kind at once (netsim.backend.Planner.prefetch_quick: one batch instead of one call per stage);
        the estimates are unchanged."""
        self.prefetched.add((op.group, op.collective))
        prefetch = getattr(getattr(self.eng.net, "planner", None), "prefetch_quick", None)
        if prefetch is None or op.group in _CROSS_STAGE:
            return
        eng, groups = self.eng, {}
        for stage in range(eng.p):
            try:
                groups.update(dict.fromkeys(eng._groups_for(op.group, stage)))
            except SimError:          # no group of this kind on that stage: its own call says so
                continue
        prefetch(op.collective, [g for g in groups if len(g) > 1])

    def _known(self, h: Handle) -> None:
        """h's done time is now known: wake the stages waiting for it."""
        h.done = True
        for st in self.waiting.pop(id(h), ()):
            self.ready.append(st)

    def _segment_ops(self, st: _Stage, seg):
        return segment_list(self.eng, st.prog, st.seg_cache, seg)

    def _needs(self, st: _Stage, seg) -> Handle | None:
        if seg[0] not in ("fwd", "bwd"):
            return None
        return awaited_transfer(self.eng, self.avail, seg, seg[1] * self.eng.p + st.stage)

    def _sends_allowed(self, st: _Stage, seg) -> bool:
        d, c, _ = seg
        vs = c * self.eng.p + st.stage
        return (d == "fwd" and vs < self.eng.p * self.eng.v - 1) or (d == "bwd" and vs > 0)

    # ---------------- waits ----------------
    def _fast_wait(self, st: _Stage, h: _Rec) -> None:
        dt = h.done_s - st.clock
        if dt <= 0:
            return
        info = h.info
        stats = st.stats
        stats.exposed_s[info.report_group] += dt
        kinds = stats.exposed_kind_s
        kinds[info.kind] = kinds.get(info.kind, 0.0) + dt
        h.exposed_s += dt
        if st.record:
            self.eng.layers[info.layer_row].exposed_s[info.column] += dt
        if self.trace is not None:
            self.trace.append((st.stage, "compute", info.wait_name, st.clock, dt, "wait", info.wait_args))
        st.clock = h.done_s

    def _event_wait(self, st: _Stage, h: Handle, what):
        """Wait for an event-timed handle (pipeline data, pipeline send, cross-stage collective);
        a generator: parks the stage until h's done time is known."""
        while not h.done:
            self.waiting.setdefault(id(h), []).append(st)
            yield
        t0 = st.clock
        if h.done_s <= t0:
            return
        dt = h.done_s - t0
        stats = st.stats
        kind, _h, op = what
        if kind == "PP":
            inflight = max(0.0, h.done_s - max(t0, h.start_s)) if h.start_s == h.start_s else 0.0
            inflight = min(inflight, dt)
            stats.exposed_s["PP"] += inflight
            h.exposed_s += inflight
            stats.exposed_kind_s["pp"] = stats.exposed_kind_s.get("pp", 0.0) + inflight
            stats.bubble_s += dt - inflight
            if hasattr(stats, "pp_wait_s"):
                stats.pp_wait_s += dt
            if self.trace is not None:
                self.trace.append((st.stage, "compute", "wait pipeline", t0, dt, "wait", self.slot(h, "wait")))
        else:
            early = min(max(0.0, h.rdv_s - t0), dt) if h.rdv_s == h.rdv_s else 0.0
            stats.bubble_s += early
            dt -= early
            stats.exposed_s[kind] += dt
            stats.exposed_kind_s[h.kind] = stats.exposed_kind_s.get(h.kind, 0.0) + dt
            h.exposed_s += dt
            op = h.op if h.op is not None else op
            if op is not None and st.record:
                self.eng.layers[self.eng.row_key(op)].exposed_s[column_of(op)] += dt
            if self.trace is not None and dt > 0:
                self.trace.append((st.stage, "compute", f"wait {h.name}", t0, dt, "wait", self.slot(h, "wait")))
        st.clock = h.done_s

    def _wait(self, st: _Stage, h: Handle, what):
        if h.fast:
            self._fast_wait(st, h)
            return
        yield from self._event_wait(st, h, what)

    # ---------------- communication ----------------
    def _op_info(self, st: _Stage, op) -> _OpInfo:
        """The _OpInfo of an intra-stage collective of this stage (made once: a stage issues the same
        op once per micro-batch). Equal CommOps (frozen dataclasses: every field equal, e.g. the
        repeated layer lines of a SimAI import; a native workload's layers differ in `layer`) share
        it: everything it holds is read from the op's fields (row_key too: a function of the op's
        fields, as sim.simulation's rows assume)."""
        key = op if type(op) is CommOp else id(op)
        info = st.opinfo.get(key)
        if info is None:
            eng = self.eng
            groups = eng._groups_for(op.group, st.stage)
            est = self._est((op.group, st.stage, op.collective, int(op.size_bytes)), groups, op)
            fp = eng.footprint(st.stage, op, groups, est) if eng.contention is not None else None
            info = st.opinfo[key] = _OpInfo(eng, st.stage, op, est, groups, fp, st.record,
                                            self.slot if self.trace is not None else None)
        return info

    def _issue_cross(self, st: _Stage, op, rc) -> Handle:
        """A cross-stage collective: queued on its kind's stream of the stage; it starts when every
        participant's stream has reached it (the rendezvous)."""
        eng = self.eng
        my_groups = eng._groups_for(op.group, st.stage)
        h = Handle(kind=op.group, name=op.name, op=op, stage=st.stage, collective=op.collective,
                   size_bytes=int(op.size_bytes), group_size=len(my_groups[0]) if my_groups else 1)
        self.log.append(h)
        self.slow.append(h)
        h.owner = st
        if eng.contention is not None:
            h.fp = eng.footprint(st.stage, op, my_groups)
            st.live.append(h)
        if st.record:
            self.rows_of[id(h)] = rc
        ck = (op.group, op.name)
        n = st.rdv_counts.get(ck, 0)
        st.rdv_counts[ck] = n + 1
        st.xqueue.setdefault(op.group, []).append((h, (op.group, op.name, n), st.clock))
        self._x_advance(st, op.group)
        return h

    def _x_advance(self, st: _Stage, group: str) -> None:
        """Move the head of a cross-stage stream's queue to its rendezvous once the stream is free."""
        queue = st.xqueue.get(group)
        while queue:
            busy = st.xbusy.get(group)
            if busy is not None and not busy.done:
                return
            h, rkey, t_issue = queue.pop(0)
            st.xbusy[group] = h
            arrival = max(t_issue, busy.done_s) if busy is not None else t_issue
            arrived = self.rdv.setdefault(rkey, [])
            arrived.append((h, arrival))
            eng = self.eng
            need = eng.p if group == "mp" else len({0, eng.p - 1})
            if len(arrived) < need:
                return
            t = max(a for _, a in arrived)
            op = h.op
            est = self._est(("x", group, op.collective, int(op.size_bytes)), eng._groups_for(group, st.stage), op)
            eng.bypassed += 1
            for x, _ in arrived:
                x.start_s = x.rdv_s = t
                x.done_s = t + est
                rc = self.rows_of.pop(id(x), None)
                if rc is not None:
                    row, col = rc
                    ls = eng.layers[row]
                    ls.comm_s[col] += x.done_s - x.start_s
                    ls.comm_bytes[col] += x.op.size_bytes
                    ls.comm_kind[col] = (x.op.collective, len(eng._groups_for(group, x.owner.stage)[0]))
                if self.trace is not None:
                    self.trace.append((x.stage, f"comm:{group}", x.name, x.start_s, x.done_s - x.start_s, "comm",
                                       self.slot(x, "comm")))
                self._known(x)
            for x, _ in arrived:
                owner, x.owner = x.owner, None
                if owner is not st:
                    self._x_advance(owner, group)

    def _send(self, st: _Stage, direction: str, c: int, mb: int, size: int | None = None) -> None:
        eng = self.eng
        p = eng.p
        dst_vs, size, key, stream = send_target(eng, st.prog, c * p + st.stage, direction, mb, size)
        dst_stage = dst_vs % p
        h = transfer_handle(self.avail, key)
        now = st.clock
        if size <= 0 or dst_stage == st.stage:
            h.start_s = h.done_s = now
            self._known(h)
            return
        pairs = eng._pp_pairs(st.stage, dst_stage)
        st.sent = True
        h.stage, h.peer_stage, h.collective = st.stage, dst_stage, "send"
        h.size_bytes, h.group_size = size, 2
        self.log.append(h)
        self.slow.append(h)
        if eng.host is not None and eng.host.sync_on_pipeline_p2p:
            st.sent_handles.append(h)
        key = ("pp", st.stage, dst_stage, size)
        est = eng._est_cache.get(key)
        if est is None:
            est = max((float(eng.net.estimate(CollectiveRequest("send", pair, size, tag=f"pp:{h.name}")))
                       for pair in pairs), default=0.0)
            eng._est_cache[key] = est
        if eng.contention is not None:
            # Engine.footprint keys these sends on (stage, size) and constants ("pp", "send", blocking,
            # no wait_op): the footprint of a (stage, size) is the one its first send got. Its duration
            # is the estimate of pairs[0] (the tag is not read): est itself when that is the only pair
            fk = (st.stage, size)
            fp = self.send_fp.get(fk)
            if fp is None:
                fp = self.send_fp[fk] = eng.footprint(st.stage, CommOp(h.name, "send", "pp", size), pairs,
                                                      est if len(pairs) == 1 else None)
            h.fp = fp
            st.live.append(h)
        eng.bypassed += 1
        h.start_s = max(now, st.stream_free.get(stream, 0.0))
        h.done_s = h.start_s + est
        st.stream_free[stream] = h.done_s
        if self.trace is not None:
            self.trace.append((st.stage, f"comm:{stream}", h.name, h.start_s, est, "comm", self.slot(h, "comm")))
        self._known(h)

    def _kernel_end(self, st: _Stage, op, t0: float, work: float) -> float:
        """End of a kernel of `work` seconds (alone) started at t0 beside this rank's communication:
        piecewise constant slowdown (sim.contention) between the starts and ends of its collectives."""
        cm = self.eng.contention
        live = [h for h in st.live if not h.done_s <= t0]
        st.live = live
        t = t0
        while True:
            fps = []
            nxt = math.inf
            for h in live:
                if h.start_s <= t < h.done_s:
                    fps.append(h.fp)
                    if h.done_s < nxt:
                        nxt = h.done_s
                elif h.start_s > t and h.start_s < nxt:
                    nxt = h.start_s
            if fps:
                sh, hb = cm.shares(fps)
                f = cm.factor(op, sh, hb)
            else:
                f = 1.0
            if t + work * f <= nxt:
                return t + work * f
            work -= (nxt - t) / f
            t = nxt

    # ---------------- one stage ----------------
    def _program(self, st: _Stage, seg, ops: list) -> list:
        """A segment's op list compiled once per stage: one instruction (code, name, a, rc, b, c, op) per
        op with everything that is the same at every execution resolved (duration, trace texts and
        argument slot, the collective's _OpInfo and what happens after its issue), so the run loop does
        no per-op lookups. _KERNEL: a = duration (s), b = phase, c = trace argument slot; an
        intra-stage collective (_FAST_BLOCK: blocking; _FAST_PENDING / _FAST_DEFER / _FAST_AFTER: not,
        by what follows its issue): a = its _OpInfo, b = its group kind (a key of st.fast_free, set
        here), c = its idle-network time (s); _OTHER: a pipeline send / receive or a cross-stage
        collective (_other_op). rc: stage 0's (layer row, column), else None."""
        kargs = self._kernel_slots(ops) if self.trace is not None else None
        in_pipeline = seg[0] in ("fwd", "bwd")
        # an op's instruction depends on the op (its duration, layer row and trace slot are the op's)
        # and, for a non-blocking collective, on in_pipeline: made once per stage, shared by the
        # segments listing the op (the first, middle and last micro-batches' lists share most ops)
        made = st.instrs[in_pipeline]
        prog = []
        append = prog.append
        for i, op in enumerate(ops):
            ins = made.get(id(op))
            if ins is None:
                ins = made[id(op)] = self._instruction(st, op, kargs[i] if kargs is not None else None,
                                                       in_pipeline)
            append(ins)
        return prog

    def _instruction(self, st: _Stage, op, karg, in_pipeline: bool) -> tuple:
        """The instruction of one op of the stage (_program); its duration and layer row as
        sim.engine.segment_list gives them (no stage factor: applies())."""
        eng = self.eng
        rc = (eng.row_key(op), column_of(op)) if st.record else None
        if not op.is_comm:
            return (_KERNEL, op.name, float(eng.op_time_s(op)), rc, op.phase, karg, op)
        if op.group == "pp" or op.group in _CROSS_STAGE:
            return (_OTHER, op.name, None, rc, None, None, op)
        info = self._op_info(st, op)
        st.fast_free.setdefault(info.kind, 0.0)     # (the stream is free from the start)
        if op.blocking:
            code = _FAST_BLOCK
        elif op.wait_op:
            code = _FAST_PENDING
        else:
            code = _FAST_DEFER if op.microbatch == "last" and in_pipeline else _FAST_AFTER
        return (code, op.name, info, rc, info.kind, info.est, op)

    def _stage_run(self, st: _Stage):
        """The stage's program, segment by segment (a generator: it yields when it must wait for
        another stage). The clock, the host's issue time and the compute / overhead / slowdown sums
        are locals of the loop (st's fields are set before anything that reads them: waits on events,
        sends, cross-stage collectives, the contention model); every sum is made in the same order as
        sim.engine's, so the results are the same to the last bit."""
        eng = self.eng
        hm = eng.host
        cm = eng.contention
        stats = st.stats
        exposed = stats.exposed_s
        kinds = stats.exposed_kind_s
        layers = eng.layers
        fast_free = st.fast_free       # intra-stage kind -> end of its last collective
        log_append = self.log.append
        trace = self.trace
        tr = trace.append if trace is not None else None
        stage = st.stage
        host_args = self.host_args
        has_host = hm is not None
        per_kernel, gap = (hm.host_per_kernel_s, hm.kernel_gap_s) if has_host else (0.0, 0.0)
        progs: dict = {}      # id(a segment's cached op list) -> its program
        # a blocking collective with a contention footprint is over when the next kernel starts: the
        # engine lists it in flight until that kernel's _kernel_end drops it, so it only makes that
        # kernel take the contention model's branch (dt = end - start); `ghost` stands for it
        ghost = False
        for seg in st.segments:
            ops, explicit = self._segment_ops(st, seg)
            prog = progs.get(id(ops))
            if prog is None:
                prog = progs[id(ops)] = self._program(st, seg, ops)
            if seg[0] == "end":
                while st.deferred:       # gradient reductions deferred to finish_grad_sync
                    h, op = st.deferred[0]
                    yield from self._wait(st, h, (report_group(h.kind), h, op))
                    st.deferred.pop(0)
            needs = self._needs(st, seg)
            need = None if explicit else needs
            if need is not None:
                yield from self._event_wait(st, need, ("PP", need, None))
            if (has_host and hm.sync_on_pipeline_p2p and seg[0] in ("fwd", "bwd")
                    and (st.sent or needs is not None)):
                # batched p2p + torch.cuda.synchronize: wait for everything in flight, the host too
                seen = set()
                for h in st.live + [h for h, _ in st.deferred] + st.sent_handles:
                    if id(h) in seen:
                        continue
                    seen.add(id(h))
                    if h.fast:
                        self._fast_wait(st, h)
                    else:
                        what = ("PP", h, None) if h.kind == "pp" else (report_group(h.kind), h, h.op)
                        yield from self._event_wait(st, h, what)
                st.host = max(st.host, st.clock)
                st.sent_handles.clear()
            st.sent = False
            pending: dict = {}
            outstanding: list = []
            host_sync = False
            check = False      # host_sync or pending (one test per op for both)
            clock, host = st.clock, st.host
            compute, overhead, slowdown = stats.compute_s, stats.overhead_s, stats.slowdown_s
            for code, name, a, rc, b, c, op in prog:
                if check:
                    if host_sync:
                        if clock > host:          # the host read a result (.item())
                            host = clock
                        host_sync = False
                    if pending:
                        waits = pending.pop(name, None)
                        if waits:
                            st.clock = clock
                            for h in waits:
                                if h.fast:
                                    self._fast_wait(st, h)
                                else:
                                    yield from self._event_wait(st, h, (report_group(h.kind), h, op))
                            clock = st.clock
                    check = bool(pending)
                if has_host:
                    host += per_kernel
                    # a kernel starts a launch gap after the later of the stream and the host; another op
                    # when the host issues it (t > clock exactly when the host is behind)
                    t = ((clock if clock >= host else host) + gap) if code == _KERNEL else host
                    if t > clock:
                        if tr is not None and t - clock > gap * 1.5:
                            tr((stage, "compute", "host issue", clock, t - clock, "overhead", host_args))
                        overhead += t - clock
                        clock = t
                if code <= _FAST_AFTER:
                    # an intra-stage collective (b: its kind): FIFO on its kind's stream, c (its
                    # idle-network time) long
                    start = fast_free[b]
                    if start < clock:
                        start = clock
                    done = start + c
                    if rc is not None:
                        ls = layers[rc[0]]
                        col = rc[1]
                        ls.comm_s[col] += c
                        ls.comm_bytes[col] += op.size_bytes
                        ls.comm_kind[col] = (a.collective, a.group_size)
                    if tr is not None:
                        tr((stage, a.thread, name, start, c, "comm", a.comm_args))
                    if code == _FAST_BLOCK:
                        # blocking: waited at once; logged as sim.engine's arithmetically timed records:
                        # (info, start, done, exposed)
                        if done > clock:
                            dt = done - clock
                            exposed[a.report_group] += dt
                            try:
                                kinds[b] += dt
                            except KeyError:      # (0.0 + dt is dt: dt > 0)
                                kinds[b] = dt
                            if rc is not None:
                                layers[rc[0]].exposed_s[rc[1]] += dt
                            if tr is not None:
                                tr((stage, "compute", a.wait_name, clock, dt, "wait", a.wait_args))
                            clock = done
                            log_append((a, start, done, dt))
                        else:
                            log_append((a, start, done, 0.0))
                        if a.fp is not None:
                            ghost = True
                        if a.host_sync:
                            host_sync = check = True
                        # (fast_free[b] is not moved: the clock, which never goes back, is now >= done,
                        # so a later op of this kind starts at the clock either way)
                        continue
                    fast_free[b] = done
                    h = _Rec(a, start, done)
                    log_append(h)
                    if a.fp is not None:
                        h.fp = a.fp
                        st.live.append(h)
                    if code == _FAST_PENDING:
                        pending.setdefault(op.wait_op, []).append(h)
                        check = True
                    elif code == _FAST_DEFER:
                        st.deferred.append((h, op))
                    else:
                        outstanding.append((h, op))
                    continue
                if code == _KERNEL:
                    if cm is not None and (ghost or st.live):
                        if st.live:
                            st.clock, st.host = clock, host
                            while True:    # every start and end of this rank's communication must be known
                                h = next((h for h in st.live if h.start_s != h.start_s), None)
                                if h is None:
                                    break
                                self.waiting.setdefault(id(h), []).append(st)
                                self.parked_on_comm += 1
                                yield
                                self.parked_on_comm -= 1
                            t1 = self._kernel_end(st, op, clock, a)
                        else:
                            t1 = clock + a     # _kernel_end with nothing in flight
                        ghost = False
                        dt = t1 - clock
                        if tr is not None:
                            tr((stage, "compute", name, clock, dt, b, c))
                        if rc is not None:
                            layers[rc[0]].compute_s[rc[1]] += dt
                        clock = t1
                        compute += dt
                        if dt - a > 0.0:
                            slowdown += dt - a
                        continue
                    if tr is not None:
                        tr((stage, "compute", name, clock, a, b, c))
                    if rc is not None:
                        layers[rc[0]].compute_s[rc[1]] += a
                    clock += a
                    compute += a
                    continue
                # _OTHER
                st.clock, st.host = clock, host
                if (yield from self._other_op(st, seg, op, rc, pending, outstanding)):
                    host_sync = True
                check = host_sync or bool(pending)
                clock, host = st.clock, st.host
            st.clock, st.host = clock, host
            stats.compute_s, stats.overhead_s, stats.slowdown_s = compute, overhead, slowdown
            # non-blocking ops whose wait_op did not follow them in this list: waited here
            for hs in pending.values():
                outstanding.extend((h, None) for h in hs)
            for h, op in outstanding:
                if h.fast:
                    self._fast_wait(st, h)
                else:
                    yield from self._event_wait(st, h, (report_group(h.kind), h, op))
            if not explicit and self._sends_allowed(st, seg):
                self._send(st, seg[0], seg[1], seg[2])
        stats.end_s = st.clock

    def _other_op(self, st: _Stage, seg, op, rc, pending: dict, outstanding: list):
        """A pipeline send / receive or a cross-stage collective of a stage's program, from st.clock (a
        generator: it may wait for events); returns whether the host reads its result (host sync)."""
        eng = self.eng
        hm = eng.host
        group = op.group
        if group == "pp":
            if op.collective == "recv":
                need = self._needs(st, seg)
                if need is not None:
                    yield from self._event_wait(st, need, ("PP", need, None))
                    return hm is not None and hm.sync_on_pipeline_p2p
            elif op.collective == "send" and self._sends_allowed(st, seg):
                self._send(st, seg[0], seg[1], seg[2], int(op.size_bytes))
            return False
        h = self._issue_cross(st, op, rc)
        if op.blocking:
            # the engine always blocks here (the op ends by an event), so its kind is listed even
            # when nothing is exposed
            st.stats.exposed_kind_s.setdefault(group, 0.0)
            yield from self._event_wait(st, h, (report_group(group), h, op))
            return hm is not None and op.name.startswith(hm.host_sync_ops)
        if op.wait_op:
            pending.setdefault(op.wait_op, []).append(h)
        elif op.microbatch == "last" and seg[0] in ("fwd", "bwd"):
            st.deferred.append((h, op))
        else:
            outstanding.append((h, op))
        return False

    # ---------------- driver ----------------
    def run(self) -> EngineResult:
        eng = self.eng
        p = eng.p
        eng.t0_s = 0.0
        eng._now = 0.0
        eng.rep_ranks = [int(eng.pl.stage_ranks(s)[0]) for s in range(p)]
        eng.isolated = eng._find_isolated()
        kind = eng.w.schedule if p > 1 or eng.v > 1 else "1f1b"
        if kind == "none":
            kind = "1f1b"
        stages = [_Stage(s, eng.w.stages[s], stage_tasks(kind, s, p, eng.m, eng.v)) for s in range(p)]
        for st in stages:
            st.gen = self._stage_run(st)
        self.ready = list(reversed(stages))
        finished = 0
        while self.ready:
            st = self.ready.pop()
            try:
                next(st.gen)
            except StopIteration:
                finished += 1
        if finished != p and self.parked_on_comm:
            raise _NeedsEvents("a kernel ran beside a cross-stage collective whose start depends on "
                               "later pipeline progress")
        if finished != p:
            stuck = [st.stage for st in stages if st.gen.gi_frame is not None]
            raise SimError(f"simulation deadlocked: stage(s) {stuck} never finished (inconsistent workload)")
        eng.comm_log = self.log
        if self.trace is not None:
            eng.trace_slots = (self.trace, self.slots)     # sim.trace_args.annotate fills them
        rows, n_fast = self._rows()
        eng.bypassed += n_fast
        T = max(st.stats.end_s for st in stages)
        for st in stages:
            st.stats.bubble_s += T - st.stats.end_s
            st.gen = None          # the generator's frame holds st: no cycle left behind
        res = EngineResult(iteration_time_s=T, stages=[st.stats for st in stages], layers=dict(eng.layers),
                           trace=self.trace if self.trace is not None else [], comm_count=0, rep_ranks=eng.rep_ranks, bypassed=eng.bypassed,
                           isolated=tuple(sorted(eng.isolated)), comm_log=eng.comm_log)
        res.collective_rows = rows     # sim.simulation uses them instead of _collective_rows(comm_log)
        return res

    def _rows(self) -> tuple[CollectiveRows, int]:
        """(StepReport.collectives rows of the log, number of fast records): the rows of the operations
        that are not fast records (pipeline sends, cross-stage collectives: sim.simulation._collective_rows)
        are made now, the fast records' rows when the report first reads them (CollectiveRows)."""
        from sim.simulation import _collective_rows
        eng = self.eng
        log = self.log
        slow = self.slow      # (Handles: not fast)
        return CollectiveRows(log, _collective_rows(slow, eng.rep_ranks, eng.row_key)), len(log) - len(slow)


class CollectiveRows(LazyRows):
    """StepReport.collectives of a fast run, to be built (build()) when the report is first asked for
    them (sim.simulation.StepReport): a run of SimAI's 9,216-GPU example logs 4 * 10^4 operations, and a
    report that is never asked does not build 4 * 10^4 dicts. The rows are those sim.simulation.
    _collective_rows makes of the log: a fast record's row (a blocking one's (_OpInfo, start_s, done_s,
    exposed_s) tuple, a non-blocking one's _Rec) is a copy of its op's fixed columns (_OpInfo.row) with
    its times; the other operations' rows are given (`slow`, in log order)."""

    __slots__ = ("_slow",)

    def __init__(self, log: list, slow: list) -> None:
        super().__init__(log)
        self._slow = slow

    def _entries(self):
        """Per log entry (its _OpInfo, start_s, done_s, exposed_s), or (None, its given row, 0.0, 0.0)
        for the operations that are not fast records (`slow`, in log order)."""
        others = iter(self._slow)
        for h in self._log:
            if type(h) is tuple:
                yield h
            elif h.fast:
                yield h.info, h.start_s, h.done_s, h.exposed_s
            else:
                yield None, next(others), 0.0, 0.0

    def build(self) -> list[dict]:
        rows: list[dict] = []
        append = rows.append
        with no_cyclic_gc():     # as when simulate made them: 10^4 dicts at once
            for info, s, d, e in self._entries():
                if info is None:
                    append(s)
                    continue
                append(timed_row(info.row, s, d, e))
        return rows

    def group_totals(self, key_of) -> dict:
        """{key_of(row): [rows, sum of duration_s, sum of exposed_s]} of the rows build() makes, keys in
        order of first appearance, sums in row order, without building the rows (report.html's
        collectives table, sim.html.run_report.collective_totals): key_of (e.g. an itemgetter) must
        read only fields other than the four times, so a fast record's key is its op's fixed columns'."""
        agg: dict = {}

        def totals_of(row: dict) -> list:
            key = key_of(row)
            a = agg.get(key)
            if a is None:
                a = agg[key] = [0, 0.0, 0.0]
            return a

        of_info: dict[int, list] = {}    # id(an _OpInfo) -> its row's key's totals (infos live as long as the log)
        for info, s, d, e in self._entries():
            if info is None:
                a = totals_of(s)
                a[0] += 1
                a[1] += s["duration_s"]
                a[2] += s["exposed_s"]
                continue
            a = of_info.get(id(info))
            if a is None:
                a = of_info[id(info)] = totals_of(info.row)
            a[0] += 1
            a[1] += d - s
            a[2] += e
        return agg


@contextmanager
def no_cyclic_gc():
    """Pause Python's cyclic garbage collector: building 10^5 log / trace records otherwise triggers
    collections that re-scan the whole workload each time (half of a traced run's time on SimAI's
    9,216-GPU example). Reference counting still frees everything that is not in a cycle."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


@contextmanager
def fewer_gc_passes(threshold0: int = 50_000):
    """Run the cyclic garbage collector less often (its first-generation threshold raised from
    Python's 700): a flow run keeps ~10^6 routes, plans and handles alive, and every full collection
    walks them all (about 2 s of GPT-3 175B on 16,384 GPUs, which leaves ~10^4 cyclic garbage
    objects in all). Collections still run, so a long run's cyclic garbage is still freed."""
    was = gc.get_threshold()
    gc.set_threshold(threshold0, *was[1:])
    try:
        yield
    finally:
        gc.set_threshold(*was)


def run_fast(eng) -> EngineResult | None:
    """eng.run() for a contention-free backend (see applies()); None when, midway, the iteration
    turned out to need the event engine (eng is then used up: run a fresh Engine)."""
    try:
        with no_cyclic_gc():
            return FastRun(eng).run()
    except _NeedsEvents:
        return None
