"""Mocked Megatron / DeepSpeed model -> Workload (kernel-level ops of one micro-batch per chunk).

For every pipeline stage and virtual chunk the generator emits the forward and the backward op list
of ONE micro-batch on one rank (all ranks of a stage run the same program; `sim` expands ranks,
groups and micro-batches). Layout (Megatron semantics):
- forward: [pp recv from prev] [embedding (first virtual stage)] layers [final norm, LM head,
  cross-entropy (last virtual stage)] [pp send to next]
- backward: [pp recv from next] per layer in reverse: recompute ops (phase "recompute"), then the
  layer's backward kernels (dgrad before wgrad) with TP comm; gradient buckets (micro-batch "last")
  interleaved where they fill; [pp send to prev].
- With vpp > 1 the pipeline is a ring of virtual stages: chunk c of the last stage sends "next" to
  chunk c+1 of stage 0 (peer names are relative on the pp ring).
- iteration_end: TP all-reduce of sequence-parallel-replicated grads (norms, row biases, router,
  MLA down-projections), tied-embedding grad all-reduce (pp > 1), gradient-norm all-reduce(s),
  Adam step over this rank's optimizer shard (and DeepSpeed ZeRO-1/2 parameter all-gathers).

Non-blocking comm ops name the op they must finish before in `wait_op`: the FIRST op with that name
after the comm op in the same list (names repeat across layers; targets are always within reach).
"""

from __future__ import annotations

from workload_gen import deepspeed as ds
from workload_gen import dp_comm
from workload_gen.layers import (
    AFTER,
    Ctx,
    Unit,
    comm,
    embedding_train_units,
    full_recompute_saved,
    head_units,
    layer_units,
    make_ctx,
    recompute_ops,
)
from workload_gen.layout import layer_assignment
from workload_gen.model import ModelSpec
from workload_gen.params import stage_params
from workload_gen.plan import ParallelPlan
from workload_gen.plan_validation import validate_plan
from workload_gen.workload import ChunkProgram, CommOp, Op, StageProgram, Workload

GENERATOR_VERSION = "1"


def generate(model: ModelSpec, plan: ParallelPlan) -> Workload:
    """Validate the plan and build the compact Workload (size independent of world size)."""
    validate_plan(model, plan)
    c = make_ctx(model, plan)
    assignment = layer_assignment(model, plan)
    pp, vpp = plan.pp, plan.vpp
    pp_bytes = c.ab * c.tokens_sp * c.h
    stages = []
    for s in range(pp):
        chunks = []
        buckets = []      # per chunk: [dense bucket sizes, expert bucket sizes] (elements)
        for ci, layers in enumerate(assignment[s]):
            v = ci * pp + s
            chunk, sizes = _chunk(c, ci, layers, first_v=(v == 0), last_v=(v == pp * vpp - 1),
                                  pp_bytes=pp_bytes)
            chunks.append(chunk)
            buckets.append(sizes)
        sp_ = stage_params(model, plan, s)
        stage = StageProgram(stage=s, chunks=chunks, pp_send_bytes=pp_bytes if s < pp - 1 else 0)
        stage.iteration_start = dp_comm.iteration_start_ops(c, sp_.dense + sp_.expert)
        stage.iteration_end = _iteration_end(c, sp_, s, buckets)
        stages.append(stage)
    schedule = "none" if pp == 1 else ("interleaved" if vpp > 1 else "1f1b")
    meta = {
        "generator": "clustersim.workload_gen", "generator_version": GENERATOR_VERSION,
        "padded_vocab_size": c.vocab_rank * c.t,
        "flops_convention": "model FLOPs: GEMM 2mnk; attention over the full s_q x s_kv matrix (causal "
                            "kernels flagged causal=True); flash backward = 2x forward",
        "grad_dtype_bytes": dp_comm.grad_reduce_bytes(plan),
        "wait_op_rule": "a non-blocking comm must finish before the first later op in the same list whose "
                        "name equals wait_op (None: before the end of that list)",
        "dropout": c.dropout,
    }
    return Workload(model=model, plan=plan, stages=stages, schedule=schedule,
                    num_microbatches=plan.num_microbatches, meta=meta)


def _chunk(c: Ctx, ci: int, layers: tuple[int, ...], first_v: bool, last_v: bool,
           pp_bytes: int) -> tuple[ChunkProgram, list[list[int]]]:
    p = c.plan
    sections: list[tuple[int, list[Unit], list[Op]]] = []   # (layer, units, recompute ops)
    if first_v:
        sections.append((-1, embedding_train_units(c), []))
    full = p.recompute == "full"
    n_full = len(layers) if p.recompute_num_layers is None else p.recompute_num_layers
    for i, layer in enumerate(layers):
        units = layer_units(c, layer)
        if full and i < n_full:
            rec = recompute_ops(units, full=True)
            units = full_recompute_saved(units, c)
        elif p.recompute == "selective":
            rec = recompute_ops(units, full=False)
        else:
            rec = []
        sections.append((layer, units, rec))
    if last_v:
        sections.append((-2, head_units(c), []))

    zero3 = p.framework == "deepspeed" and p.zero_stage == 3
    fwd: list[Op] = []
    if not first_v:
        fwd.append(comm("pp_recv_fwd", "recv", "pp", pp_bytes, -1, "fwd", peer="prev"))
    bwd: list[tuple[Op, int, int]] = []
    if not last_v:
        bwd.append((comm("pp_recv_bwd", "recv", "pp", pp_bytes, -1, "bwd", peer="next"), 0, 0))
    dense_total = expert_total = 0
    per_section_bwd = []
    for layer, units, rec in sections:
        sb = [e for u in reversed(units) for e in u.bwd]
        d = sum(e[1] for e in sb)
        x = sum(e[2] for e in sb)
        dense_total += d
        expert_total += x
        if zero3:
            fwd += ds.zero3_gather(c, layer if layer >= 0 else -1, d, x, "fwd")
        for u in units:
            fwd += u.fwd
        per_section_bwd.append((layer, rec, sb, d, x))
    if not last_v:
        fwd.append(comm("pp_send_fwd", "send", "pp", pp_bytes, -1, "fwd", peer="next"))
    for layer, rec, sb, d, x in reversed(per_section_bwd):
        if zero3:
            bwd += [(op, 0, 0) for op in ds.zero3_gather(c, layer if layer >= 0 else -1, d, x, "bwd")]
        bwd += [(op, 0, 0) for op in rec]
        bwd += sb
    if not first_v:
        bwd.append((comm("pp_send_bwd", "send", "pp", pp_bytes, -1, "bwd", peer="prev"), 0, 0))

    fwd = _resolve_waits(fwd)
    bwd_ops = _resolve_waits([e[0] for e in bwd])
    bwd = [(op, e[1], e[2]) for op, e in zip(bwd_ops, bwd)]
    sizes: list[list[int]] = [[], []]
    if p.framework == "deepspeed":
        backward = ds.ds_grad_buckets(c, bwd)
    elif p.overlap_grad_reduce:
        backward, sizes = dp_comm.grad_buckets(c, bwd)
        if p.distributed_optimizer and p.overlap_param_gather:
            fwd = dp_comm.param_gathers(c, fwd, bwd)
    else:
        # megatron-core: no overlap -> one infinite bucket per kind, reduced in finalize_model_grads
        backward = [op for op, _, _ in bwd]
        sizes = [[n] if n else [] for n in (dense_total, expert_total)]
    return ChunkProgram(chunk=ci, layers=tuple(layers), forward=fwd, backward=backward), sizes


def _resolve_waits(ops: list[Op]) -> list[Op]:
    """Replace AFTER placeholders: wait for the op that follows the first later op named X."""
    from dataclasses import replace
    out = list(ops)
    n = len(out)
    for i, op in enumerate(out):
        if isinstance(op, CommOp) and op.wait_op and op.wait_op.startswith(AFTER):
            target = op.wait_op[len(AFTER):]
            nxt = None
            for j in range(i + 1, n):
                if out[j].name == target:
                    nxt = out[j + 1].name if j + 1 < n else None
                    break
            out[i] = replace(op, wait_op=nxt)
    return out


def _iteration_end(c: Ctx, sp_, stage: int, buckets: list[list[list[int]]]) -> list[Op]:
    p = c.plan
    dgroup, dsize = dp_comm.dense_group(c)
    tied_copy = p.pp > 1 and c.model.tie_embeddings and stage in (0, p.pp - 1)
    emb = sp_.embedding if tied_copy else 0
    rep = sp_.tp_replicated - sp_.position_embedding
    if p.framework == "deepspeed":
        sharded = p.zero_stage >= 1
        groups = ("mp", dgroup) if sharded and dsize > 1 else ("mp",)
        ops = dp_comm.optimizer_ops(c, sp_.dense, sp_.expert, rep, emb,
                                    shard_dense=dsize if sharded else 1,
                                    shard_expert=p.edp if sharded else 1, norm_groups=groups)
        return ops + ds.post_step_gathers(c, sp_.dense, sp_.expert)
    dist = p.distributed_optimizer
    groups = ("mp", dgroup) if dist and dsize > 1 else ("mp",)
    ops = [] if p.overlap_grad_reduce else dp_comm.end_grad_reductions(c, buckets)
    ops += dp_comm.optimizer_ops(c, sp_.dense, sp_.expert, rep, emb, shard_dense=dsize if dist else 1,
                                 shard_expert=p.edp if dist else 1, norm_groups=groups)
    if dist and not p.overlap_param_gather:
        ops += dp_comm.end_param_gathers(c, buckets)
    return ops
