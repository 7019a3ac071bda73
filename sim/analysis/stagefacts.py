"""Layer placement and per-rank parameter counts of a pipeline stage, from workload_gen.

workload_gen.layout / workload_gen.params are the single source of truth (Megatron conventions: even
layer split with optional first/last-stage override, interleaved chunk j of stage i = virtual stage
j*pp + i; TP shards GEMM weights and the vocabulary; experts shard over EP then expert-TP).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankParams:
    """Parameters held by one rank of a stage (unsharded by DP/ZeRO)."""
    dense: int
    expert: int

    @property
    def total(self) -> int:
        return self.dense + self.expert


def layer_assignment(model, plan) -> list[list[tuple[int, ...]]]:
    """[stage][chunk] -> global layer ids."""
    from workload_gen.layout import layer_assignment as wl_assign
    return [[tuple(c) for c in st] for st in wl_assign(model, plan)]


def rank_params(model, plan, stage: int) -> RankParams:
    """Dense and expert parameters one rank of `stage` holds (workload_gen.params.stage_params)."""
    from workload_gen.params import stage_params
    sp = stage_params(model, plan, stage)
    return RankParams(int(sp.dense), int(sp.expert))
