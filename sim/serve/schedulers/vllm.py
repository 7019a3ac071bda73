"""vLLM (v0, Vidur's model): FCFS, prefill-prioritising, paged KV blocks, preemption by recompute.

Rule, each time a pipeline slot frees:
1. Prefill batch: take requests from the head of the waiting queue while (a) the whole prompt's blocks
   ceil(prompt / block_size) fit leaving the watermark free, (b) the padded token budget
   len(batch) x max(prompt tokens in batch) <= max_tokens_per_iteration holds, (c) the batch has fewer
   than max_batch_size requests and the replica fewer than max_batch_size x pp admitted requests. The first
   request that does not fit stops admission (FCFS: no skipping). If any prompt was admitted, the
   iteration is that prefill batch alone: iterations with new prefills carry no decodes (vLLM's default
   at that version).
2. Otherwise, decode batch: every admitted request not in flight, in arrival order, up to max_batch_size.
   A request whose last block is full takes one more; when no block is free, the most recently arrived
   request not yet in this batch and not in flight is preempted (blocks freed, restarted later from scratch
   at the head of the queue: its prompt + the tokens it generated are recomputed as one prefill), and when
   there is none the request itself is preempted.
The running list is kept in arrival order (vLLM's FCFS priority), which is the admission order except for
restarted requests: they keep their original priority, so the same request is not the victim forever.
"""

from __future__ import annotations

from sim.serve.entities import Batch
from sim.serve.schedulers.base import ReplicaScheduler


class VLLMScheduler(ReplicaScheduler):
    name = "vllm"

    def next_batch(self, now_s: float) -> Batch | None:
        if self.landed:
            self._admit_landed(now_s)
        return self._prefill_batch(now_s) or self._decode_batch(now_s)

    def _prefill_batch(self, now_s: float) -> Batch | None:
        waiting = self.waiting
        if not waiting:
            return None
        kv = self.kv
        bs = self.block_size
        budget = self.plan.max_tokens_per_iteration
        prefills: list = []
        chunks: list = []
        longest = 0
        while waiting and len(prefills) < self.max_batch_size and len(self.running) < self.max_running:
            r = waiting[0]
            n = r.prefill_target
            m = n if n > longest else longest
            if (len(prefills) + 1) * m > budget:
                break
            need = -(-n // bs)
            if not kv.can_allocate(need):
                break
            waiting.popleft()
            self._admit(r, need)
            prefills.append(r)
            chunks.append(n)
            longest = m
        if not prefills:
            return None
        return self._batch(prefills, chunks, [], now_s)

    def _decode_batch(self, now_s: float) -> Batch | None:
        decodes, _ = self._decodes(self.max_batch_size)    # prompts are admitted whole: nothing partial
        if not decodes:
            return None
        return self._batch([], [], decodes, now_s)
