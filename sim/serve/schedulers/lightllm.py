"""LightLLM: admission on projected KV use, prefill and decode in separate iterations, no PP.

Rule, each time the replica is free:
- projected use = sum over admitted requests of the blocks of their maximum future KV,
  ceil((prompt + output - 1) / block_size). A waiting request (FCFS, no skipping) is admitted while the
  projected use plus its own fits num_blocks (so running requests never run out of blocks: no preemption;
  no watermark), the prompt-token sum of the prefill batch stays <= max_tokens_per_iteration (LightLLM's
  batch_max_tokens), and the batch / replica caps allow. Blocks are taken as the cache fills (paged); use
  block_size 1 for LightLLM's token granularity. (LightLLM proper computes the exact future peak over
  requests sorted by remaining output; the sum used here is its conservative upper bound.)
- when no request is running: a prefill batch of the admissible waiting requests;
- otherwise a decode batch of all running requests, except that after max_waiting_iterations decode
  iterations since the last prefill batch, a prefill batch runs instead if a waiting request is admissible.
  Iterations never mix prefill and decode.
"""

from __future__ import annotations

from sim.errors import SimError
from sim.serve.entities import Batch
from sim.serve.schedulers.base import ReplicaScheduler


class LightLLMScheduler(ReplicaScheduler):
    name = "lightllm"
    supports_pp = False

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if self.pp != 1:
            raise SimError(f"scheduler lightllm does not support pipeline parallelism (pp {self.pp}); use pp 1")
        self.projected = 0
        self.decodes_since_prefill = 0

    def _landed_blocks(self, r) -> int | None:
        final = self.kv.blocks_for(r.max_kv_tokens)
        if self.projected + final > self.kv.num_blocks:
            return None
        self.projected += final
        return self.kv.blocks_for(r.kv_tokens)

    def next_batch(self, now_s: float) -> Batch | None:
        if self.landed:
            self._admit_landed(now_s)
        if not self.running or self.decodes_since_prefill >= self.plan.max_waiting_iterations:
            b = self._prefill_batch(now_s)
            if b is not None:
                self.decodes_since_prefill = 0
                return b
        if not self.running:
            return None
        self.decodes_since_prefill += 1
        decodes = self.running[:self.max_batch_size]
        for r in decodes:
            if r.kv_tokens >= r.kv_cap:
                self.kv.allocate(1)         # cannot fail: the projection reserved it
                r.blocks += 1
                r.kv_cap += self.block_size
        return self._batch([], [], list(decodes), now_s)

    def _prefill_batch(self, now_s: float) -> Batch | None:
        waiting = self.waiting
        kv = self.kv
        prefills: list = []
        chunks: list = []
        tokens = 0
        while waiting and len(prefills) < self.max_batch_size and len(self.running) < self.max_running:
            r = waiting[0]
            final = kv.blocks_for(r.max_kv_tokens)
            if self.projected + final > kv.num_blocks or tokens + r.prefill_target > self.plan.max_tokens_per_iteration:
                break
            waiting.popleft()
            self.projected += final
            self._admit(r, kv.blocks_for(r.prefill_target))
            prefills.append(r)
            chunks.append(r.prefill_target)
            tokens += r.prefill_target
        if not prefills:
            return None
        return self._batch(prefills, chunks, [], now_s)

    def _on_finished(self, finished: list) -> None:
        for r in finished:
            self.projected -= self.kv.blocks_for(r.max_kv_tokens)
