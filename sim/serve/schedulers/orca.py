"""Orca: iteration-level scheduling with KV memory reserved for the maximum model length up front.

Rule, each time a pipeline slot frees: every admitted request not in flight runs (its whole prompt if it
was just admitted, else one decode token), up to max_batch_size per batch; then waiting requests (FCFS, no
skipping) are admitted into the same batch while the caps allow and ceil(max_model_len / block_size) free
blocks exist for each (reserved for its whole life, no paging, so no growth and no preemption; no
watermark is needed). Prefills and decodes share an iteration (Orca's selective batching); there is no
token budget, so the batch size is bounded by memory: num_blocks / ceil(max_model_len / block_size).
"""

from __future__ import annotations

from sim.serve.entities import Batch
from sim.serve.schedulers.base import ReplicaScheduler


class OrcaScheduler(ReplicaScheduler):
    name = "orca"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reserve = self.kv.blocks_for(self.max_model_len)

    def _landed_blocks(self, r) -> int | None:
        return self.reserve if self.kv.can_allocate(self.reserve, watermark=False) else None

    def next_batch(self, now_s: float) -> Batch | None:
        if self.landed:
            self._admit_landed(now_s)
        cap = self.max_batch_size
        decodes = [r for r in self.running if not r.in_flight][:cap]
        prefills: list = []
        chunks: list = []
        waiting = self.waiting
        kv = self.kv
        while (waiting and len(decodes) + len(prefills) < cap and len(self.running) < self.max_running
               and kv.can_allocate(self.reserve, watermark=False)):
            r = waiting.popleft()
            self._admit(r, self.reserve)
            prefills.append(r)
            chunks.append(r.prefill_target)
        if not decodes and not prefills:
            return None
        return self._batch(prefills, chunks, decodes, now_s)
