"""Validation of a ServingPlan's own fields (one-line SimError naming the field).

Model-dependent rules (TP dividing the attention heads, ep with a dense model, ...) are checked where the
model meets the plan: workload_gen.inference.inference_spec (WorkloadError) and the memory planner.
"""

from __future__ import annotations

import math

from sim.errors import SimError
from sim.serve.plan import KV_DTYPES, ROUTERS, SCHEDULERS, WEIGHT_DTYPES, ServingPlan

_POSITIVE_INTS = ("tp", "pp", "ep", "replicas", "max_batch_size", "max_tokens_per_iteration", "chunk_size",
                  "block_size")


def _int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def validate_serving_plan(plan: ServingPlan) -> None:
    for name in _POSITIVE_INTS:
        v = getattr(plan, name)
        if not _int(v) or v < 1:
            raise SimError(f"serving plan.{name}: must be a positive integer (got {v!r})")
    if not _int(plan.max_waiting_iterations) or plan.max_waiting_iterations < 0:
        raise SimError(f"serving plan.max_waiting_iterations: must be an integer >= 0 "
                       f"(got {plan.max_waiting_iterations!r})")
    for name in ("num_blocks", "max_model_len"):
        v = getattr(plan, name)
        if v is not None and (not _int(v) or v < 1):
            raise SimError(f"serving plan.{name}: must be a positive integer (got {v!r})")
    if plan.scheduler not in SCHEDULERS:
        raise SimError(f"serving plan.scheduler: unknown scheduler '{plan.scheduler}' (known: {', '.join(SCHEDULERS)})")
    if plan.router not in ROUTERS:
        raise SimError(f"serving plan.router: unknown router '{plan.router}' (known: {', '.join(ROUTERS)})")
    if plan.weight_dtype not in WEIGHT_DTYPES:
        raise SimError(f"serving plan.weight_dtype: '{plan.weight_dtype}' (expected one of {', '.join(WEIGHT_DTYPES)})")
    if plan.kv_dtype is not None and plan.kv_dtype not in KV_DTYPES:
        raise SimError(f"serving plan.kv_dtype: '{plan.kv_dtype}' (expected one of {', '.join(KV_DTYPES)})")
    if plan.ep not in (1, plan.tp):
        raise SimError(f"serving plan.ep: expert parallelism spans a stage's tp ranks: ep must be 1 or tp "
                       f"(got ep={plan.ep}, tp={plan.tp})")
    v = plan.expert_skew
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        raise SimError(f"serving plan.expert_skew: must be a finite number >= 0 (got {v!r})")
    for name, lo, hi in (("watermark_fraction", 0.0, 1.0), ("memory_margin_fraction", 0.0, 1.0)):
        v = getattr(plan, name)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v < hi:
            raise SimError(f"serving plan.{name}: must be in [{lo:g}, {hi:g}) (got {v!r})")
