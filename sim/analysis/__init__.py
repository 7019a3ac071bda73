"""Memory and cost analysis, parallel-strategy search, PerfLLM-style API.

Public API (imported lazily so `clustersim` start-up stays fast):
- memory.analyze_memory(model, plan, workload=None, *, options=MemoryOptions()) -> MemoryReport
- memory.model_state_bytes(dense_params, expert_params, plan) -> ModelStateMemory
- memory.layer_activation_bytes(model, plan, layer=0, options=MemoryOptions()) -> int
- cost.count_flops(model, plan) -> FlopCount; cost.utilisation(...); cost.pass_costs(model, plan)
- steptime.estimate_step(model, plan, hw, *, db=None, topology=None) -> StepEstimate
- search.search(model, world_size, global_batch_size, ...) -> SearchResult
- perfllm.PerfLLM
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "analyze_memory": "memory", "model_state_bytes": "memory", "layer_activation_bytes": "memory",
    "MemoryOptions": "memory", "MemoryReport": "memory",
    "count_flops": "cost", "utilisation": "cost", "pass_costs": "cost",
    "estimate_step": "steptime", "HardwareSpec": "steptime", "hardware_from_gpu": "steptime",
    "SearchSpace": "search", "SearchResult": "search",
    "PerfLLM": "perfllm",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"sim.analysis.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module 'sim.analysis' has no attribute {name!r}")
