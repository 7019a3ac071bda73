"""Discrete-event serving engine: arrivals -> router -> replica schedulers -> pipeline stages -> tokens.

Events live in a heap ordered by (time, priority, sequence number), so a run is deterministic:
  priority 0  a stage ends;  priority 1  a batch reaches the next stage (send_s after the previous ends);
  priority 2  the KV hand-off (disaggregated decode pool) has network events due: requests whose KV
              landed join their replica;
  priority 3  a request arrives (routed at once, queued at its replica);
  priority 4  a replica forms batches (after every same-time end and arrival, so a request arriving at
              the instant a batch ends can join the next batch).
A replica has pp stages and keeps up to pp batches in flight; each stage runs one batch at a time from a
FIFO queue. Stage s of a batch starts when the stage is free and costs `timer.stage_cost(...)` (called
once per batch and stage, at its start, in non-decreasing time across the cluster); the batch reaches
stage s+1 send_s after stage s ends; after the last stage the batch ends: tokens are emitted, KV blocks
freed, the scheduler notified, and the freed slot triggers the next batch.

Modelled: iteration-level batching, KV-block capacity, preemption, pipeline bubbles, routing. Ignored:
CPU scheduling overhead, detokenisation, network time between the client and the replica.

Decode pool of a disaggregated deployment (sim.serve.disagg): the input is a PrefilledRequests (requests
whose prompt another pool prefilled, first token emitted). Each is routed at its ready time; a KVHandoff
(sim.serve.kv_transfer) moves its KV to the chosen replica on the fabric and reports when it has landed;
the replica then admits it as soon as blocks for its prompt's KV are free (FIFO; restarted requests of
the replica go first) and decodes it from token 2 on, with no prefill compute. The hand-off's events
run on the engine's clock (priority 2), so routing sees the replicas' state at the routing time.

Cost per iteration: O(requests in the batch) attribute updates, a few heap operations and one cost-model
call per stage; no per-iteration structure grows with history except compact typed-array logs.
"""

from __future__ import annotations

import heapq
import math
import sys
import time
from array import array
from collections import deque
from dataclasses import dataclass, field
from typing import Protocol

import numpy as np

from sim.errors import SimError
from sim.serve.costs import BatchTimer
from sim.serve.entities import Batch, BatchLog, ChunkLog, PrefilledRequests, ReplicaStats, Request, TokenGaps
from sim.serve.kv_cache import BlockManager
from sim.serve.plan import ServingPlan
from sim.serve.schedulers import make_router, scheduler_class

DEFAULT_TRACE_CAP = 20_000
_END, _ARRIVE_STAGE, _NET, _ARRIVAL, _SCHEDULE = 0, 1, 2, 3, 4


class KVHandoff(Protocol):
    """Moves the KV cache of requests prefilled elsewhere to their decode replica (a network clock).

    start(r, replica, now_s): r was routed to `replica` at now_s: begin moving its KV (flows may start
    later than now_s, e.g. layer-wise streaming of prefill chunks still to run);
    next_event_time(): earliest pending network event (math.inf when idle);
    advance(until_s): process network events up to until_s; returns the requests whose KV has fully
    landed by then (each exactly once)."""

    def start(self, request: Request, replica: int, now_s: float) -> None: ...

    def next_event_time(self) -> float: ...

    def advance(self, until_s: float) -> list[Request]: ...


@dataclass
class ServeResult:
    """Everything a run produced. Times in seconds from t = 0 (the simulation start).

    requests: all requests, by id (= arrival order); batches: one row per batch; gaps: every TBT gap;
    trace: Chrome-trace slices (replica, stage, start_s, dur_s, batch id, request ids, chunk tokens,
    decodes) of the first `trace_cap` batch stages; trace_total: how many there were in all;
    duration_s: time of the last completion; in_system_s: integral of the number of requests in the
    system (arrived, not finished) over [0, duration_s], accumulated by the event loop.
    """
    plan: ServingPlan
    requests: list[Request]
    replicas: list[ReplicaStats]
    batches: BatchLog
    gaps: TokenGaps
    trace: list[tuple]
    trace_total: int
    trace_cap: int
    duration_s: float
    in_system_s: float
    max_model_len: int
    seed: int
    source: str = ""
    wall_s: float = 0.0
    meta: dict = field(default_factory=dict)
    chunks: ChunkLog | None = None          # prefill chunk stage runs (simulate(record_chunks=True))


class _Replica:
    __slots__ = ("idx", "sched", "stats", "kv", "stage_free", "queues", "in_flight", "pending")

    def __init__(self, idx, sched, stats, kv, pp) -> None:
        self.idx = idx
        self.sched = sched
        self.stats = stats
        self.kv = kv
        self.stage_free = [True] * pp
        self.queues = [deque() for _ in range(pp)]
        self.in_flight = 0
        self.pending = False


def _request_arrays(requests) -> tuple[np.ndarray | None, np.ndarray, np.ndarray, int | None, str]:
    """(arrivals or None, prefill, decode, closed-loop concurrency or None, source description)."""
    source = str(getattr(requests, "source", "") or "")
    if isinstance(requests, PrefilledRequests):
        reqs = requests.requests
        if len(requests.ready_at_s) != len(reqs):
            raise SimError("prefilled requests: ready_at_s and requests differ in length")
        bad = next((r for r in reqs if r.num_decode < 2 or r.generated != 1 or r.kv_tokens != r.num_prefill), None)
        if bad is not None:
            raise SimError(f"prefilled request {bad.id}: needs >= 2 output tokens, token 1 emitted and its "
                           "prompt's KV present (Request.prefilled_elsewhere)")
        return (np.asarray(requests.ready_at_s, dtype=np.float64), np.asarray([r.num_prefill for r in reqs]),
                np.asarray([r.num_decode for r in reqs]), None, source)
    if hasattr(requests, "concurrency"):
        c = requests.concurrency
        if int(c) != c or c < 1:
            raise SimError(f"closed-loop concurrency must be a positive integer (got {c!r})")
        return (None, np.asarray(requests.num_prefill_tokens), np.asarray(requests.num_decode_tokens),
                int(c), source)
    if hasattr(requests, "arrived_at_s"):
        return (np.asarray(requests.arrived_at_s, dtype=np.float64), np.asarray(requests.num_prefill_tokens),
                np.asarray(requests.num_decode_tokens), None, source)
    rows = list(requests)
    if any(len(r) != 3 for r in rows):
        raise SimError("requests must be (arrived_at_s, num_prefill_tokens, num_decode_tokens) triples")
    a = np.asarray([r[0] for r in rows], dtype=np.float64)
    return a, np.asarray([r[1] for r in rows]), np.asarray([r[2] for r in rows]), None, source


def _validate(plan: ServingPlan, timer, arr, pre, dec, num_blocks: list[int], max_model_len: int) -> None:
    cls = scheduler_class(plan.scheduler)
    make_router(plan.router, 1)
    for name in ("tp", "pp", "replicas", "max_batch_size", "block_size", "chunk_size", "max_tokens_per_iteration"):
        v = getattr(plan, name)
        if not isinstance(v, (int, np.integer)) or v < 1:
            raise SimError(f"{name} must be a positive integer (got {v!r})")
    if not isinstance(plan.max_waiting_iterations, (int, np.integer)) or plan.max_waiting_iterations < 0:
        raise SimError(f"max_waiting_iterations must be an integer >= 0 (got {plan.max_waiting_iterations!r})")
    if not cls.supports_pp and plan.pp > 1:
        raise SimError(f"scheduler {plan.scheduler} does not support pipeline parallelism (pp {plan.pp}); use pp 1")
    stages = getattr(timer, "num_stages", None)
    if stages != plan.pp:
        raise SimError(f"the cost model has {stages} pipeline stages but the plan has pp {plan.pp}")
    if int(max_model_len) != max_model_len or max_model_len < 2:
        raise SimError(f"max_model_len must be an integer >= 2 (got {max_model_len!r})")
    if plan.scheduler in ("vllm", "lightllm") and plan.max_tokens_per_iteration < max_model_len:
        raise SimError(f"max_tokens_per_iteration {plan.max_tokens_per_iteration} < max_model_len {max_model_len}: "
                       f"{plan.scheduler} admits whole prompts, so long requests could never be scheduled")
    if len(pre) != len(dec) or (arr is not None and len(arr) != len(pre)):
        raise SimError("requests: arrival, prefill and decode arrays differ in length")
    if len(pre) == 0:
        raise SimError("no requests to simulate")
    for name, x in (("num_prefill_tokens", pre), ("num_decode_tokens", dec)):
        if not np.issubdtype(x.dtype, np.integer):
            raise SimError(f"requests: {name} must be integers")
        bad = np.nonzero(x < 1)[0]
        if len(bad):
            raise SimError(f"request {bad[0]}: {name} must be >= 1 (got {x[bad[0]]})")
    if arr is not None:
        if not np.all(np.isfinite(arr)) or np.any(arr < 0):
            raise SimError("requests: arrival times must be finite and >= 0")
        down = np.nonzero(np.diff(arr) < 0)[0]
        if len(down):
            raise SimError(f"request {down[0] + 1}: arrives before request {down[0]} (sort by arrival time)")
    total = pre.astype(np.int64) + dec
    i = int(np.argmax(total))
    if total[i] > max_model_len:
        raise SimError(f"request {i}: {pre[i]} prefill + {dec[i]} decode tokens exceed max_model_len {max_model_len} "
                       "(trim requests to the max model length)")
    bs = plan.block_size
    for r, nb in enumerate(num_blocks):
        if int(nb) != nb or nb < 1:
            raise SimError(f"num_blocks must be a positive integer (got {nb!r} for replica {r})")
        if plan.scheduler in ("orca", "faster_transformer"):
            need, wm, what = -(-max_model_len // bs), 0, f"max_model_len {max_model_len}"
        else:
            need = -(-(int(total[i]) - 1) // bs)
            wm = int(plan.watermark_fraction * nb) if plan.scheduler != "lightllm" else 0
            what = f"request {i} ({pre[i]}+{dec[i]} tokens)"
        if need + wm > nb:
            raise SimError(f"num_blocks {nb} (block_size {bs}) cannot hold {what}: needs {need} blocks"
                           + (f" + watermark {wm}" if wm else "") + (f" on replica {r}" if len(num_blocks) > 1 else ""))


def simulate(requests, plan: ServingPlan, timer: BatchTimer, num_blocks: int | list[int] | None = None,
             max_model_len: int | None = None, seed: int = 0, progress: bool = False, keep_token_times: bool = False,
             trace_cap: int = DEFAULT_TRACE_CAP, check_invariants: bool = False, handoff: KVHandoff | None = None,
             record_chunks: bool = False) -> ServeResult:
    """Run the serving simulation to completion of every request.

    requests: a workload_gen RequestSet (or any object with arrived_at_s / num_prefill_tokens /
              num_decode_tokens arrays, or a list of (arrival_s, prefill, decode) triples) for open-loop
              arrivals, a ClosedLoop (concurrency + length arrays) for a closed loop, or a
              PrefilledRequests (a disaggregated decode pool: the Request objects are used and updated);
    num_blocks: KV blocks per replica (one int for all, or one per replica; None: plan.num_blocks);
    max_model_len: longest request in tokens (None: plan.max_model_len); block size from the plan;
    seed: seeds the random router; keep_token_times: store every token's time on its request (memory!);
    progress: a tqdm bar when stderr is a terminal; check_invariants: verify the KV accounting of the
    replica (BlockManager.check against its admitted requests) after every batch end and scheduling step
    (tests; costs O(admitted requests) per iteration); handoff: moves the KV of PrefilledRequests to their
    replica (None: it is there at the ready time); record_chunks: log every prefill chunk's stage runs
    (ServeResult.chunks; a prefill pool's layer-wise KV streaming reads it).
    Raises SimError (one line) for invalid input.
    """
    wall0 = time.perf_counter()
    arr, pre, dec, concurrency, source = _request_arrays(requests)
    R, pp = plan.replicas, plan.pp
    num_blocks = plan.num_blocks if num_blocks is None else num_blocks
    max_model_len = plan.max_model_len if max_model_len is None else max_model_len
    if num_blocks is None or max_model_len is None:
        raise SimError("num_blocks and max_model_len are needed (from the memory planner or the plan)")
    if isinstance(num_blocks, (list, tuple)):
        if len(num_blocks) != R:
            raise SimError(f"num_blocks lists {len(num_blocks)} replicas, the plan has {R}")
        nbs = list(num_blocks)
    else:
        nbs = [num_blocks] * R
    _validate(plan, timer, arr, pre, dec, nbs, max_model_len)
    n_total = len(pre)
    pre_l, dec_l = pre.tolist(), dec.tolist()
    arr_l = arr.tolist() if arr is not None else None
    pre_reqs = requests.requests if isinstance(requests, PrefilledRequests) else None
    if handoff is not None and pre_reqs is None:
        raise SimError("a KV hand-off needs PrefilledRequests (requests prefilled elsewhere)")
    chunk_log = ChunkLog() if record_chunks else None

    gaps = TokenGaps()
    log = BatchLog()
    cls = scheduler_class(plan.scheduler)
    router = make_router(plan.router, R, seed)
    reps: list[_Replica] = []
    for r in range(R):
        kv = BlockManager(nbs[r], plan.block_size, plan.watermark_fraction)
        st = ReplicaStats(r, pp, kv.num_blocks, kv.block_size)
        reps.append(_Replica(r, cls(r, plan, kv, int(max_model_len), gaps, st, keep_token_times), st, kv, pp))

    heap: list = []
    push, pop = heapq.heappush, heapq.heappop
    seq = 0
    stage_cost = timer.stage_cost
    last_stage = pp - 1
    done: list[Request] = []
    trace: list[tuple] = []
    trace_total = 0
    in_sys = 0
    in_sys_area = 0.0
    t_area = 0.0
    next_id = 0
    batch_id = 0
    now = 0.0

    bar = None
    if progress and sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=n_total, desc="serving", unit="req")

    def issue(t: float) -> None:
        nonlocal seq, next_id
        push(heap, (t, _ARRIVAL, seq, next_id))
        seq += 1
        next_id += 1

    if concurrency is None:
        issue(arr_l[0])
    else:
        for _ in range(min(concurrency, n_total)):
            issue(0.0)

    def start_stage(rep: _Replica, s: int, b: Batch, t: float) -> None:
        nonlocal seq, trace_total
        c = stage_cost(rep.idx, s, b.shape, t)
        d = c.time_s
        if not d >= 0.0 or d == math.inf:
            raise SimError(f"cost model returned stage time {d!r} for replica {rep.idx} stage {s}")
        rep.stage_free[s] = False
        st = rep.stats
        st.busy_s[s] += d
        st.compute_s[s] += c.compute_s
        st.comm_s[s] += c.comm_s
        st.send_s[s] += c.send_s
        st.flops[s] += c.flops
        st.hbm_bytes[s] += c.hbm_bytes
        b.model_time_s += d
        if s == 0:
            b.start_s = t
        if chunk_log is not None:
            for r, tokens in zip(b.prefills, b.chunks):
                chunk_log.add(r.id, rep.idx, s, t, d, tokens)
        trace_total += 1
        if len(trace) < trace_cap:
            trace.append((rep.idx, s, t, d, b.id, [r.id for r in b.prefills], list(b.chunks),
                          [r.id for r in b.decodes]))
        push(heap, (t + d, _END, seq, rep, s, b, c.send_s))
        seq += 1

    def schedule(rep: _Replica, t: float) -> None:
        nonlocal batch_id
        rep.pending = False
        sched = rep.sched
        while rep.in_flight < pp:
            b = sched.next_batch(t)
            if b is None:
                break
            b.id = batch_id
            batch_id += 1
            b.replica = rep.idx
            b.formed_s = t
            rep.in_flight += 1
            rep.stats.num_batches += 1
            if rep.stage_free[0]:
                start_stage(rep, 0, b, t)
            else:
                rep.queues[0].append(b)
        rep.stats.sample_kv(t, rep.kv.used)
        if check_invariants:
            rep.kv.check(rep.sched.running)
            if any(r.blocks for r in rep.sched.waiting):
                raise AssertionError(f"replica {rep.idx}: a waiting request holds KV blocks")

    net_due = math.inf

    def net_kick() -> None:
        nonlocal seq, net_due
        t = handoff.next_event_time()
        if t < net_due:
            net_due = t
            push(heap, (t, _NET, seq))
            seq += 1

    def want_schedule(rep: _Replica, t: float) -> None:
        nonlocal seq
        if not rep.pending and rep.in_flight < pp:
            rep.pending = True
            push(heap, (t, _SCHEDULE, seq, rep))
            seq += 1

    while heap:
        ev = pop(heap)
        now = ev[0]
        kind = ev[1]
        if kind == _END:
            _, _, _, rep, s, b, send = ev
            rep.stage_free[s] = True
            q = rep.queues[s]
            if q:
                start_stage(rep, s, q.popleft(), now)
            if s < last_stage:
                if send > 0.0:
                    push(heap, (now + send, _ARRIVE_STAGE, seq, rep, s + 1, b))
                    seq += 1
                elif rep.stage_free[s + 1]:
                    start_stage(rep, s + 1, b, now)
                else:
                    rep.queues[s + 1].append(b)
                continue
            # the batch left the last stage
            b.end_s = now
            rep.in_flight -= 1
            finished = rep.sched.on_batch_end(b, now)
            log.add(b)
            if check_invariants:
                rep.kv.check(rep.sched.running)
            if finished:
                in_sys_area += in_sys * (now - t_area)
                t_area = now
                in_sys -= len(finished)
                idx = rep.idx
                for r in finished:
                    router.on_complete(idx)
                    done.append(r)
                    if concurrency is not None and next_id < n_total:
                        issue(now)
                if bar is not None:
                    bar.update(len(finished))
            if heap and heap[0][0] == now:
                want_schedule(rep, now)       # same-time arrivals first
            else:
                schedule(rep, now)
        elif kind == _ARRIVE_STAGE:
            _, _, _, rep, s, b = ev
            if rep.stage_free[s]:
                start_stage(rep, s, b, now)
            else:
                rep.queues[s].append(b)
        elif kind == _ARRIVAL:
            i = ev[3]
            if pre_reqs is None:
                r = Request(i, now, pre_l[i], dec_l[i])
                if keep_token_times:
                    r.token_times = array("d")
            else:
                r = pre_reqs[i]
            in_sys_area += in_sys * (now - t_area)
            t_area = now
            in_sys += 1
            k = router.route()
            r.replica = k
            rep = reps[k]
            rep.stats.num_requests += 1
            if concurrency is None and i + 1 < n_total:
                issue(arr_l[i + 1])
            if pre_reqs is None:
                rep.sched.add_request(r, now)
                want_schedule(rep, now)
            elif handoff is None:
                r.kv_landed_s = now
                rep.sched.add_prefilled(r, now)
                want_schedule(rep, now)
            else:
                handoff.start(r, k, now)
                net_kick()
        elif kind == _NET:
            if now != net_due:
                continue                      # superseded by an earlier network event
            net_due = math.inf
            for r in handoff.advance(now):
                r.kv_landed_s = now
                rep = reps[r.replica]
                rep.sched.add_prefilled(r, now)
                want_schedule(rep, now)
            net_kick()
        else:
            schedule(ev[3], now)

    if bar is not None:
        bar.close()
    gaps.flush()
    if len(done) != n_total:
        stuck = [(rep.idx, rep.sched.num_unfinished) for rep in reps if rep.sched.num_unfinished]
        raise SimError(f"{n_total - len(done)} request(s) could never be scheduled (replica, count: {stuck}); "
                       "the KV cache or the batch limits are too small for them")
    for rep in reps:
        rep.kv.check_empty()
        rep.stats.sample_kv(now, 0)
    done.sort(key=lambda r: r.id)
    return ServeResult(plan=plan, requests=done, replicas=[rep.stats for rep in reps], batches=log, gaps=gaps,
                       trace=trace, trace_total=trace_total, trace_cap=trace_cap, duration_s=now,
                       in_system_s=in_sys_area, max_model_len=int(max_model_len), seed=seed, source=source,
                       wall_s=time.perf_counter() - wall0, chunks=chunk_log)
