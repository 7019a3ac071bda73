"""Which transformer layers each pipeline stage and virtual chunk holds (Megatron's layout).

Stage layer counts: even split, or `num_layers_first_stage` / `num_layers_last_stage` fixed and the
remaining layers split evenly over the other stages (Megatron's uneven pipeline). With `vpp` virtual
chunks every stage's layers are cut into `vpp` equal chunks and the model is laid out in `vpp` rounds:
round c holds chunk c of stage 0, then chunk c of stage 1, ... (so for an even split stage s chunk c
holds the (c*pp + s)-th block of layers, as in Megatron's interleaved schedule).
"""

from __future__ import annotations

from workload_gen.errors import PlanError
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan


def stage_layer_counts(model: ModelSpec, plan: ParallelPlan) -> list[int]:
    """Number of transformer layers on each pipeline stage (raises PlanError if they do not fit)."""
    n, pp = model.num_layers, plan.pp
    first, last = plan.num_layers_first_stage, plan.num_layers_last_stage
    if pp < 1:
        raise PlanError(f"plan.pp: must be a positive integer (got {pp})")
    if pp == 1:
        if first not in (None, n) or last not in (None, n):
            raise PlanError("plan.num_layers_first_stage: uneven stage layer counts need pp > 1 "
                            f"(got first={first}, last={last}, pp=1)")
        return [n]
    fixed = {}
    if first is not None:
        fixed[0] = first
    if last is not None:
        fixed[pp - 1] = last
    rest_layers = n - sum(fixed.values())
    rest_stages = pp - len(fixed)
    field = "num_layers_first_stage" if first is not None else "num_layers_last_stage"
    if rest_stages == 0:
        if rest_layers != 0:
            raise PlanError(f"plan.{field}: with pp=2 first + last stage layers must equal num_layers "
                            f"(got first={first}, last={last}, num_layers={n})")
        return [fixed[0], fixed[pp - 1]]
    if not fixed and n % pp:
        raise PlanError(f"plan.pp: must divide num_layers, or set num_layers_first_stage / "
                        f"num_layers_last_stage (got pp={pp}, num_layers={n})")
    if rest_layers < rest_stages or rest_layers % rest_stages:
        raise PlanError(f"plan.{field}: the layers left after the first/last stage must split evenly "
                        f"over the other {rest_stages} stages with >= 1 layer each "
                        f"(got {rest_layers} layers left, num_layers={n}, pp={pp}, first={first}, last={last})")
    per = rest_layers // rest_stages
    return [fixed.get(s, per) for s in range(pp)]


def layer_assignment(model: ModelSpec, plan: ParallelPlan) -> list[list[tuple[int, ...]]]:
    """[stage][chunk] -> global layer ids (0-based, ascending) held by that stage's virtual chunk."""
    counts = stage_layer_counts(model, plan)
    vpp = plan.vpp
    for s, c in enumerate(counts):
        if vpp < 1 or c % vpp:
            raise PlanError(f"plan.vpp: layers per stage must be divisible by vpp "
                            f"(got stage {s} with {c} layers, vpp={vpp})")
    chunk_sizes = [c // vpp for c in counts]
    out: list[list[tuple[int, ...]]] = [[() for _ in range(vpp)] for _ in counts]
    nxt = 0
    for chunk in range(vpp):
        for s, size in enumerate(chunk_sizes):
            out[s][chunk] = tuple(range(nxt, nxt + size))
            nxt += size
    return out


def stage_layers(model: ModelSpec, plan: ParallelPlan, stage: int) -> tuple[int, ...]:
    """All global layer ids of one pipeline stage (every chunk), ascending."""
    return tuple(sorted(i for chunk in layer_assignment(model, plan)[stage] for i in chunk))
