"""Sarathi-Serve: chunked prefill under a per-iteration token budget (`chunk_size`), stall-free decodes.

Rule, each time a pipeline slot frees (budget = chunk_size tokens, at most max_batch_size requests):
1. every admitted request not in flight whose prefill is complete decodes one token (arrival order; block
   growth and preemption exactly as vllm: one more block when the last is full, else preempt the most
   recently arrived request not yet batched and not in flight, else the request itself). Decodes count
   against the budget but are never dropped for it (as Vidur);
2. admitted requests with an unfinished prefill (arrival order) take a chunk of
   min(remaining prompt, budget left) tokens;
3. waiting requests (FCFS, no skipping) are admitted while budget is left, the batch and replica caps allow,
   and their whole prompt's blocks fit leaving the watermark free (blocks are reserved for the whole prompt
   at admission, as Vidur); each takes a chunk of min(prompt, budget left).
A chunk of c tokens at KV offset k is passed to the cost model as (c, k).
"""

from __future__ import annotations

from sim.serve.entities import Batch
from sim.serve.schedulers.base import ReplicaScheduler


class SarathiScheduler(ReplicaScheduler):
    name = "sarathi"

    def next_batch(self, now_s: float) -> Batch | None:
        if self.landed:
            self._admit_landed(now_s)
        cap = self.max_batch_size
        decodes, partial = self._decodes(cap)
        left = self.plan.chunk_size - len(decodes)
        prefills: list = []
        chunks: list = []
        for r in partial:
            if left <= 0 or len(decodes) + len(prefills) >= cap:
                break
            c = min(r.prefill_target - r.prefilled, left)
            prefills.append(r)
            chunks.append(c)
            left -= c
        waiting = self.waiting
        kv = self.kv
        bs = self.block_size
        while (left > 0 and waiting and len(decodes) + len(prefills) < cap
               and len(self.running) < self.max_running):
            r = waiting[0]
            need = -(-r.prefill_target // bs)
            if not kv.can_allocate(need):
                break
            waiting.popleft()
            self._admit(r, need)
            c = min(r.prefill_target, left)
            prefills.append(r)
            chunks.append(c)
            left -= c
        if not decodes and not prefills:
            return None
        return self._batch(prefills, chunks, decodes, now_s)
