"""FasterTransformer: request-level static batching.

Rule: a static batch (group) takes up to max_batch_size requests from the head of the waiting queue
(FCFS, no skipping) while ceil(max_model_len / block_size) free blocks exist for each (FT's buffers are
sized for the maximum length). Its first iteration prefills all their prompts together; then it runs
decode iterations of its unfinished members until ALL have finished: finished members stop consuming
compute (they leave the batch shape and free their blocks) but the group is never refilled. The next group
is formed only when one ends. On a PP replica up to pp groups run, each with one batch in flight, in turn.
Prompts are not padded to the longest (the cost model sees the real lengths). In a disaggregated decode
pool, a group is formed from landed requests (prefilled elsewhere) when no request waits: it decodes from
its first iteration.
"""

from __future__ import annotations

from sim.serve.entities import Batch
from sim.serve.schedulers.base import ReplicaScheduler


class _Group:
    __slots__ = ("members", "in_flight")

    def __init__(self, members: list) -> None:
        self.members = members
        self.in_flight = False


class FasterTransformerScheduler(ReplicaScheduler):
    name = "faster_transformer"

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.reserve = self.kv.blocks_for(self.max_model_len)
        self.groups: list[_Group] = []

    def next_batch(self, now_s: float) -> Batch | None:
        for g in self.groups:
            if not g.in_flight:
                g.in_flight = True
                b = self._batch([], [], list(g.members), now_s)
                b.tag = g
                return b
        if len(self.groups) >= self.pp:
            return None
        waiting = self.waiting
        kv = self.kv
        members: list = []
        while waiting and len(members) < self.max_batch_size and kv.can_allocate(self.reserve, watermark=False):
            r = waiting.popleft()
            self._admit(r, self.reserve)
            members.append(r)
        landed = False
        if not members and self.landed:      # a group of requests prefilled elsewhere: it starts decoding
            members = self._admit_landed(now_s, self.max_batch_size)
            landed = True
        if not members:
            return None
        g = _Group(members)
        g.in_flight = True
        self.groups.append(g)
        if landed:
            b = self._batch([], [], list(members), now_s)
        else:
            b = self._batch(members, [r.prefill_target for r in members], [], now_s)
        b.tag = g
        return b

    def _landed_blocks(self, r) -> int | None:
        return self.reserve if self.kv.can_allocate(self.reserve, watermark=False) else None

    def _after_batch(self, b: Batch) -> None:
        g = b.tag
        g.in_flight = False
        g.members = [r for r in g.members if r.completed_s < 0.0]
        if not g.members:
            self.groups.remove(g)
