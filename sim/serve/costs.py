"""The contract between the serving engine (scheduling, entities) and the cost model (batch times).

The engine decides WHAT runs each iteration; a `BatchTimer` says HOW LONG each pipeline stage of a
replica takes for it. Tests drive the engine with stub timers; `sim.serve.batch_time` is the real one
(layer kernels from workload_gen's layer description timed by compute_db, TP/PP/EP collectives on the
fabric through netsim).

Units: seconds, FLOPs, bytes. A replica has `num_stages` pipeline stages (PP); stage s of replica r runs
its layers for the whole batch, then (s < last) sends the activations to stage s+1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True, slots=True)
class BatchShape:
    """What one iteration computes, independent of request identities.

    prefill: (chunk tokens, tokens already in the KV cache before this chunk) per request that is
             prefilling in this iteration (a whole prompt has offset 0; a restarted request re-prefills
             its prompt plus the tokens it had generated).
    decode:  tokens already in the KV cache per request decoding one token in this iteration (its
             context length before the new token).
    """
    prefill: tuple[tuple[int, int], ...] = ()
    decode: tuple[int, ...] = ()

    @property
    def num_tokens(self) -> int:
        """Rows of the token-level kernels (QKV, MLP, norms...): prefill chunk tokens + one per decode."""
        return sum(c for c, _ in self.prefill) + len(self.decode)

    @property
    def num_requests(self) -> int:
        return len(self.prefill) + len(self.decode)


@dataclass(frozen=True, slots=True)
class StageCost:
    """One pipeline stage of one replica running one batch.

    time_s:    wall time the stage is busy (compute kernels + the collectives it waits for: TP all-reduces,
               EP all-to-alls); the next batch cannot start on this stage before it ends.
    compute_s: kernel time part of time_s;  comm_s: exposed communication part (time_s = compute_s + comm_s).
    send_s:    activation transfer to the next stage (0 on the last stage); it delays the batch, not the stage.
    flops:     model FLOPs of the stage's kernels (per GPU of the stage);  hbm_bytes: HBM traffic per GPU.
    """
    time_s: float
    compute_s: float = 0.0
    comm_s: float = 0.0
    send_s: float = 0.0
    flops: float = 0.0
    hbm_bytes: float = 0.0


class BatchTimer(Protocol):
    """Cost model of the replicas of one deployment (all replicas identical in model and plan)."""

    num_stages: int

    def stage_cost(self, replica: int, stage: int, shape: BatchShape, now_s: float) -> StageCost:
        """Cost of `shape` on (replica, stage), starting at `now_s`.

        Called once per batch and stage, in non-decreasing `now_s` order across the whole cluster, when the
        stage actually starts the batch. `now_s` lets a fabric-aware timer account for replicas that
        communicate over shared links at the same time; timers that ignore contention ignore it.
        Deterministic: equal calls give equal answers.
        """
        ...
