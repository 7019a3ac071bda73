"""workload_gen: model specs, parallel plans and mocked Megatron/DeepSpeed models -> Workload."""

# Public names, imported on first use (PEP 562): reading a SimAI file needs the workload classes, not
# the generator and its layer library (~20 ms of a run's start).
_EXPORTS = {
    "ConfigFileError": "workload_gen.errors",
    "PlanError": "workload_gen.errors",
    "WorkloadError": "workload_gen.errors",
    "generate": "workload_gen.generator",
    "ModelSpec": "workload_gen.model",
    "ParallelPlan": "workload_gen.plan",
    "ChunkProgram": "workload_gen.workload",
    "CommOp": "workload_gen.workload",
    "ComputeOp": "workload_gen.workload",
    "StageProgram": "workload_gen.workload",
    "Workload": "workload_gen.workload",
}
__all__ = ["ModelSpec", "ParallelPlan", "Workload", "StageProgram", "ChunkProgram", "ComputeOp", "CommOp",
           "WorkloadError", "PlanError", "ConfigFileError", "generate"]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
