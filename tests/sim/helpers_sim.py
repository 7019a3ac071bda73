"""Hand-built workloads and a fake topology for executor tests (no other clustersim package needed)."""

from __future__ import annotations

from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.workload import ChunkProgram, CommOp, ComputeOp, StageProgram, Workload


class FakeTopo:
    """GPUs only; NVLink domains of `domain` GPUs."""

    def __init__(self, num_gpus: int = 64, domain: int = 8) -> None:
        self.num_gpus = num_gpus
        self.gpus_per_server = domain
        self.domain = domain

    def nvlink_domain_of(self, gpu: int) -> int:
        return gpu // self.domain

    def server_of(self, gpu: int) -> int:
        return gpu // self.domain


def comp(name: str, t: float, phase: str = "fwd", layer: int = 0, variant: str = "fwd") -> ComputeOp:
    return ComputeOp(name, "elementwise", (("numel", 1),), "bf16", 1.0e12 * t, 0.0, variant=variant,
                     layer=layer, phase=phase, time_s=t)


def model() -> ModelSpec:
    return ModelSpec("toy", 4, 64, 4, 256, 1000)


def pipeline_workload(p: int, v: int, m: int, tf: float, tb: float, schedule: str, tp: int = 2,
                      send_bytes: int = 0) -> Workload:
    plan = ParallelPlan(world_size=p * tp, pp=p, vpp=v, tp=tp, global_batch_size=m, micro_batch_size=1)
    stages = []
    for s in range(p):
        chunks = [ChunkProgram(chunk=c, layers=(s,), forward=[comp("f", tf / v)],
                               backward=[comp("b", tb / v, phase="bwd", variant="dgrad")]) for c in range(v)]
        stages.append(StageProgram(stage=s, chunks=chunks, pp_send_bytes=send_bytes))
    return Workload(model=model(), plan=plan, stages=stages, schedule=schedule, num_microbatches=m)


def single_stage(forward, backward, end=(), start=(), dp: int = 4, tp: int = 1, m: int = 1) -> Workload:
    plan = ParallelPlan(world_size=dp * tp, tp=tp, global_batch_size=m * dp, micro_batch_size=1)
    st = StageProgram(stage=0, chunks=[ChunkProgram(0, (0,), list(forward), list(backward))],
                      iteration_start=list(start), iteration_end=list(end))
    return Workload(model=model(), plan=plan, stages=[st], schedule="none", num_microbatches=m)


def bucket(name: str, size: int, group: str = "dp") -> CommOp:
    return CommOp(name, "all_reduce", group, size, phase="bwd", blocking=False, microbatch="last")
