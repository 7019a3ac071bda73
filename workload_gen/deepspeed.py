"""DeepSpeed (Megatron-DeepSpeed) differences from Megatron's DDP: ZeRO stages 0-3.

Modelled:
- Gradients are reduced in the 16-bit training dtype (DeepSpeed's default communication dtype;
  plan.grad_reduce_dtype "fp32" is its communication_data_type fp32).
- ZeRO-0: bucketed all-reduce (`reduce_bucket_elements`) in the last micro-batch's backward.
- ZeRO-1: bucketed reduce-scatter at the gradient-accumulation boundary (last micro-batch); after
  the optimizer step the updated 16-bit parameters are all-gathered in `allgather_bucket_elements`
  buckets (blocking, iteration end).
- ZeRO-2: as ZeRO-1 but gradients are partitioned, so the reduce-scatter runs in EVERY micro-batch.
- ZeRO-3: additionally parameters are partitioned: every layer's parameters are all-gathered
  (blocking, no prefetch modelled) before its forward and again before its backward, in every
  micro-batch; no all-gather after the step.
- Gradient norm: all-reduce over the model-parallel group and (ZeRO >= 1) over data parallel.
Ignored: DeepSpeed's prefetch/persistence thresholds, contiguous-gradient copies, CPU offload.
"""

from __future__ import annotations

from workload_gen.dp_comm import dense_group, grad_buckets
from workload_gen.layers import DTYPE_BYTES, Ctx, comm
from workload_gen.workload import Op


def ds_grad_buckets(c: Ctx, bwd: list[tuple[Op, int, int]]) -> list[Op]:
    z = c.plan.zero_stage
    ops, _ = grad_buckets(c, bwd, collective="all_reduce" if z == 0 else "reduce_scatter",
                          bucket_elems=c.plan.reduce_bucket_elements,
                          microbatch="all" if z >= 2 else "last", prefix="zero_grad")
    return ops


def zero3_gather(c: Ctx, layer: int, dense: int, expert: int, phase: str) -> list[Op]:
    """Per-layer parameter all-gather(s) of ZeRO-3 (blocking, every micro-batch)."""
    out: list[Op] = []
    dgroup, dsize = dense_group(c)
    ab = DTYPE_BYTES[c.act]
    if dense and dsize > 1:
        out.append(comm(f"zero3_param_gather{'_bwd' if phase != 'fwd' else ''}", "all_gather", dgroup,
                        dense * ab, layer, phase))
    if expert and c.plan.edp > 1:
        out.append(comm(f"zero3_expert_param_gather{'_bwd' if phase != 'fwd' else ''}", "all_gather", "edp",
                        expert * ab, layer, phase))
    return out


def post_step_gathers(c: Ctx, dense: int, expert: int) -> list[Op]:
    """ZeRO-1/2: all-gather of the updated 16-bit parameters in allgather buckets after the step."""
    if c.plan.zero_stage not in (1, 2):
        return []
    out: list[Op] = []
    dgroup, dsize = dense_group(c)
    ab = DTYPE_BYTES[c.act]
    limit = c.plan.allgather_bucket_elements
    for total, group, gsize, name in ((dense, dgroup, dsize, "zero_param_gather"),
                                      (expert, "edp", c.plan.edp, "zero_expert_param_gather")):
        if gsize <= 1:
            continue
        left, i = total, 0
        while left > 0:
            n = min(left, limit)
            out.append(comm(f"{name}{i}", "all_gather", group, n * ab, -1, "iteration_end"))
            left -= n
            i += 1
    return out
