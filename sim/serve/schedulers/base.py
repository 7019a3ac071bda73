"""The replica-scheduler interface and the mechanics every policy shares.

A replica scheduler owns the requests routed to its replica: `waiting` (FCFS queue of requests holding
no KV blocks; restarted requests go to its head) and `running` (requests holding KV blocks, in request-id
order = arrival order). The engine calls
  add_request(r, now)     a request was routed here;
  next_batch(now)         a pipeline slot is free: form the next batch (None: nothing can run now);
  on_batch_end(b, now)    the batch left the last stage: tokens are emitted, finished requests leave and
                          free their blocks; returns the finished requests;
  add_prefilled(r, now)   a request prefilled elsewhere whose KV has landed here (disaggregated decode
                          pool): it waits in `landed` (FIFO) until `_admit_landed` gives it the blocks of
                          its KV (policies call it when forming a batch; restarted requests in `waiting`
                          go first); admitted, it decodes like any running request.
A request is never in two in-flight batches (Request.in_flight, used on PP replicas).

Shared knobs (ServingPlan): max_batch_size caps the requests of one batch (a micro-batch on a PP replica);
a replica admits at most max_batch_size x pp requests (vLLM's max_num_seqs per virtual engine);
block_size; watermark_fraction (paged policies' admission only).

Shared mechanics here: admission into `running`, one-block growth of a decoding request whose last block
is full, preemption by recompute (vLLM's rule, used by vllm and sarathi), token emission and bookkeeping.
Time-between-tokens gaps go to a shared TokenGaps log; per-request aggregates stay on the requests.
"""

from __future__ import annotations

from bisect import insort
from collections import deque
from operator import attrgetter

from sim.serve.entities import Batch, ReplicaStats, Request, TokenGaps
from sim.serve.kv_cache import BlockManager
from sim.serve.plan import ServingPlan

_by_id = attrgetter("id")


class ReplicaScheduler:
    """Base class: subclasses implement `next_batch` (and `_on_finished`/`_after_batch` when they keep state)."""

    name = ""
    supports_pp = True

    def __init__(self, replica: int, plan: ServingPlan, kv: BlockManager, max_model_len: int,
                 gaps: TokenGaps, stats: ReplicaStats, keep_token_times: bool = False) -> None:
        self.replica = replica
        self.plan = plan
        self.kv = kv
        self.max_model_len = max_model_len
        self.gaps = gaps
        self.stats = stats
        self.keep_token_times = keep_token_times
        self.pp = plan.pp
        self.max_batch_size = plan.max_batch_size
        self.max_running = plan.max_batch_size * plan.pp
        self.block_size = kv.block_size
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.landed: deque[Request] = deque()

    # ------------------------------------------------------------------------------------ interface
    def add_request(self, r: Request, now_s: float) -> None:
        self.waiting.append(r)

    def add_prefilled(self, r: Request, now_s: float) -> None:
        self.landed.append(r)

    def next_batch(self, now_s: float) -> Batch | None:
        raise NotImplementedError

    @property
    def num_unfinished(self) -> int:
        return len(self.waiting) + len(self.running) + len(self.landed)

    # ------------------------------------------------------------------------------------ mechanics
    def _admit_landed(self, now_s: float, cap: int | None = None) -> list[Request]:
        """Admit landed requests (FIFO, no skipping) while no restarted request waits, the replica cap
        allows and `_landed_blocks` grants their blocks; at most `cap`. Returns them."""
        q = self.landed
        out: list[Request] = []
        while q and not self.waiting and len(self.running) < self.max_running and (cap is None or len(out) < cap):
            r = q[0]
            need = self._landed_blocks(r)
            if need is None:
                break
            q.popleft()
            self._admit(r, need)
            r.decode_admitted_s = now_s
            out.append(r)
        return out

    def _landed_blocks(self, r: Request) -> int | None:
        """Blocks a landed request takes at admission (None: not now). Paged policies: those of its KV,
        keeping the watermark free."""
        need = -(-r.kv_tokens // self.block_size)
        return need if self.kv.can_allocate(need) else None

    def _admit(self, r: Request, blocks: int) -> None:
        """Move the head of `waiting` (r) into `running`, holding `blocks` KV blocks."""
        self.kv.allocate(blocks)
        r.blocks = blocks
        r.kv_cap = blocks * self.block_size
        running = self.running
        if not running or running[-1].id < r.id:
            running.append(r)
        else:                                   # a restarted request re-enters at its arrival position
            insort(running, r, key=_by_id)

    def _grow_or_preempt(self, r: Request) -> bool:
        """Give decoding request r one more block, preempting (vLLM rule) until one is free: the victim
        is the last request of `running` after r that is not in flight (the most recently arrived one
        not yet considered for this batch); when there is none, r itself is preempted. False when r was
        preempted. Callers scan `running` in order, so requests after r are not in the batch yet."""
        kv = self.kv
        while kv.used >= kv.num_blocks:
            running = self.running
            j = len(running) - 1
            while running[j] is not r and running[j].in_flight:
                j -= 1
            if running[j] is r:
                self._preempt(r)
                return False
            self._preempt(running[j])
        kv.allocate(1)
        r.blocks += 1
        r.kv_cap += self.block_size
        return True

    def _decodes(self, cap: int) -> tuple[list[Request], list[Request]]:
        """(decodes, partial prefills) among the admitted requests not in flight, in arrival order: a request
        whose prefill is complete decodes one token (growing its blocks, or preempting, as vLLM does) until
        `cap` decodes; one whose prefill is unfinished (chunked prefill) is returned apart."""
        decodes: list[Request] = []
        partial: list[Request] = []
        for r in list(self.running):        # a copy: preemption removes requests from `running`
            if r.in_flight or r.blocks == 0:    # in an in-flight batch, or preempted during this pass
                continue
            if r.prefilled < r.prefill_target:
                partial.append(r)
                continue
            if r.kv_tokens >= r.kv_cap and not self._grow_or_preempt(r):
                continue
            decodes.append(r)
            if len(decodes) == cap:
                break
        return decodes, partial

    def _preempt(self, r: Request) -> None:
        """Free r's blocks and queue it (head of `waiting`) to recompute its prompt + generated tokens."""
        self.kv.release(r.blocks)
        r.blocks = 0
        r.kv_cap = 0
        r.kv_tokens = 0
        r.prefilled = 0
        r.prefill_target = r.num_prefill + r.generated
        r.restarts += 1
        self.stats.preemptions += 1
        self.running.remove(r)
        self.waiting.appendleft(r)

    def _batch(self, prefills: list[Request], chunks: list[int], decodes: list[Request], now_s: float) -> Batch:
        b = Batch(prefills, chunks, decodes)
        for r in prefills:
            if r.first_scheduled_s < 0.0:
                r.first_scheduled_s = now_s
            r.in_flight = True
        if self.pp > 1:
            for r in decodes:
                r.in_flight = True
        return b

    def on_batch_end(self, b: Batch, now_s: float) -> list[Request]:
        """Emit the batch's tokens (one per decode, one per completed prefill), update aggregates, free
        finished requests. Returns them (in batch order: decodes, then prefills)."""
        finished: list[Request] = []
        dt = now_s - b.formed_s
        mt = b.model_time_s
        gaps = self.gaps
        vals, cnts = gaps.values, gaps.counts
        cur, cnt = gaps.cur, gaps.cur_count
        keep = self.keep_token_times
        # the hot loop: every decoding request of every iteration passes here (TokenGaps.add inlined)
        for r in b.decodes:
            r.kv_tokens += 1
            g = now_s - r.last_token_s
            r.last_token_s = now_s
            if g == cur:
                cnt += 1
            else:
                if cnt:
                    vals.append(cur)
                    cnts.append(cnt)
                cur = g
                cnt = 1
            if g > r.max_gap_s:
                r.max_gap_s = g
            r.exec_s += dt
            r.model_exec_s += mt
            n = r.generated + 1
            r.generated = n
            if n == r.num_decode:
                finished.append(r)
        gaps.cur, gaps.cur_count = cur, cnt
        if self.pp > 1 or keep:
            for r in b.decodes:
                r.in_flight = False
                if keep:
                    r.token_times.append(now_s)
        for r, c in zip(b.prefills, b.chunks):     # few per batch: no inlining needed
            r.exec_s += dt
            r.model_exec_s += mt
            r.in_flight = False
            r.kv_tokens += c
            p = r.prefilled + c
            r.prefilled = p
            if p == r.prefill_target:
                if r.generated == 0:
                    r.first_token_s = now_s
                else:                       # a restarted request's recompute emits its next token
                    g = now_s - r.last_token_s
                    if g > r.max_gap_s:
                        r.max_gap_s = g
                    gaps.add(g)
                r.last_token_s = now_s
                r.generated += 1
                if keep:
                    r.token_times.append(now_s)
                if r.generated == r.num_decode:
                    finished.append(r)
        if finished:
            kv = self.kv
            for r in finished:
                r.completed_s = now_s
                kv.release(r.blocks)
                r.blocks = 0
                r.kv_cap = 0
            self._on_finished(finished)
            self.running = [r for r in self.running if r.completed_s < 0.0]
        self._after_batch(b)
        return finished

    def _on_finished(self, finished: list[Request]) -> None:
        """Hook: requests left (blocks already freed, `running` not yet pruned)."""

    def _after_batch(self, b: Batch) -> None:
        """Hook: a batch of this replica ended (after token emission)."""
