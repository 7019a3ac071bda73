"""workload_gen: model specs, parallel plans and mocked Megatron/DeepSpeed models -> Workload."""

from workload_gen.errors import ConfigFileError, PlanError, WorkloadError
from workload_gen.generator import generate
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.workload import ChunkProgram, CommOp, ComputeOp, StageProgram, Workload

__all__ = ["ModelSpec", "ParallelPlan", "Workload", "StageProgram", "ChunkProgram", "ComputeOp", "CommOp",
           "WorkloadError", "PlanError", "ConfigFileError", "generate"]
