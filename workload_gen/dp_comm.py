"""Data-parallel gradient and parameter communication of Megatron's DDP / distributed optimizer,
and the optimizer-side kernels of one iteration.

Modelled (Megatron-core `DistributedDataParallel`, `DistributedOptimizer`, `clip_grads`):
- Gradient dtype (`grad_reduce_dtype`): the main-grad buffer and its DP reduction are fp32 or the
  16-bit parameter dtype. "auto" is Megatron-LM's rule: bf16 (and fp8, whose parameters are bf16)
  forces fp32 accumulation and reduction (arguments.py: "accumulate and all-reduce gradients in fp32
  for bfloat16 data type"); fp16 keeps fp16 gradients unless --accumulate-allreduce-grads-in-fp32
  (grad_reduce_dtype fp32). DeepSpeed's "auto" is its communication dtype, the 16-bit training dtype.
- Parameters are assigned to buckets in reverse forward order (the order backward produces their
  gradients); a bucket closes once it holds >= `megatron_bucket_elements(plan)` elements (a parameter
  is never split). That is `plan.grad_bucket_elements` when set, else Megatron's own default
  max(40,000,000, 1,000,000 x dp) elements (megatron-core DDP's rule for an unset --ddp-bucket-size:
  dp is the data-parallel group without context parallelism; the same size serves dense and expert
  buffers). ParallelPlan cannot tell "unset" from its default, so a value equal to the default
  40,000,000 means "unset" (an explicit 40M still grows with dp > 40).
  Dense and expert parameters have separate buffers: dense buckets reduce over the data x
  context-parallel group ("dp", or "dp_cp" when cp > 1), expert buckets over "edp".
- overlap_grad_reduce (default): each bucket's reduction starts, non-blocking, right after the
  backward kernel that produced its last gradient, only in the last micro-batch (earlier micro-batches
  accumulate locally). Without it megatron-core sets the bucket size to infinity: one blocking
  reduction per buffer (dense, expert) and model chunk in finalize_model_grads, before the optimizer.
  Distributed optimizer: reduce-scatter (nccl-tests size = the whole bucket); otherwise all-reduce.
- Distributed optimizer parameter all-gather (bf16 params, 2 bytes) per bucket. With
  overlap_param_gather (default) in the forward pass of the first micro-batch, waited on by the first
  kernel that uses one of the bucket's parameters, dispatched along megatron-core's chain (one bucket
  ahead): the first bucket of each buffer (dense, expert) when the iteration starts, bucket i+1 when
  the forward pass reaches the first user of bucket i — so the gather of the next layer overlaps this
  layer's forward. (megatron-core without --align-param-gather dispatches the very first bucket at its
  first use; we dispatch it at the start, as the aligned / overlap-with-optimizer-step variants do.)
  Without it: blocking gathers of every bucket right after the optimizer step.
- Optimizer-side kernels at their real size (memory-bound, timed by compute_db as copies of the same
  HBM traffic): zeroing the main-grad buffer at the start of the iteration (zero_grad_buffer); with
  16-bit gradients, the copy into fp32 main grads (.float(): read 2 B, write 4 B per parameter); fp16:
  the unscale + inf check (torch._amp_foreach_non_finite_check_and_unscale_: read + write 4 B); the
  gradient-norm multi_tensor_l2norm (read 4 B); Adam (read 16 B, write 12 B + the 16-bit copy 2 B).
  The host waits for the found-inf and gradient-norm all-reduces (`.item()`), see sim.overheads.
Ignored: bucket padding to multiples of the DP size; gradient clipping's multi_tensor_scale (it runs
only when the norm exceeds the threshold, a data-dependent event).
"""

from __future__ import annotations

from workload_gen.layers import DTYPE_BYTES, Ctx, comm
from workload_gen.plan import ParallelPlan
from workload_gen.workload import CommOp, ComputeOp, Op

PARAM_BYTES = 2
# blocking comm ops whose result the host reads with .item() (a host-device synchronisation)
HOST_SYNC_OPS = ("found_inf_ar", "grad_norm_ar")
_PLAN_DEFAULT_BUCKET = ParallelPlan.__dataclass_fields__["grad_bucket_elements"].default   # 40,000,000


def megatron_bucket_elements(plan: ParallelPlan) -> int:
    """DDP bucket size in elements: the plan's value, or (at the plan default, meaning "not given")
    megatron-core's max(40,000,000, 1,000,000 x dp), dp = the data-parallel group size without CP."""
    if plan.grad_bucket_elements == _PLAN_DEFAULT_BUCKET:
        return max(_PLAN_DEFAULT_BUCKET, 1_000_000 * plan.dp)
    return plan.grad_bucket_elements


def grad_reduce_dtype(plan: ParallelPlan) -> str:
    """dtype of the gradient buffer and of its DP reduction (module docstring: the "auto" rule)."""
    g = plan.grad_reduce_dtype
    if g != "auto":
        return g
    if plan.framework == "deepspeed" or plan.dtype == "fp16":
        return "fp16" if plan.dtype == "fp16" else "bf16"
    return "fp32"


def grad_reduce_bytes(plan: ParallelPlan) -> int:
    return DTYPE_BYTES[grad_reduce_dtype(plan)]


def dense_group(c: Ctx) -> tuple[str, int]:
    return ("dp_cp" if c.cp > 1 else "dp"), c.plan.dp * c.cp


def grad_buckets(c: Ctx, bwd: list[tuple[Op, int, int]], *, collective: str | None = None,
                 bucket_elems: int | None = None,
                 microbatch: str = "last", prefix: str = "dp_grad") -> tuple[list[Op], list[list[int]]]:
    """Insert bucketed gradient reductions into a backward op list.

    `bwd` holds (op, dense_params_ready, expert_params_ready). Returns the op list and, per bucket
    kind, the bucket sizes in elements ([dense, expert]) in the order they were issued.
    """
    p = c.plan
    gdtype = grad_reduce_dtype(p)
    grad_bytes = DTYPE_BYTES[gdtype]
    if collective is None:
        collective = "reduce_scatter" if p.distributed_optimizer else "all_reduce"
    limit = bucket_elems or megatron_bucket_elements(p)
    dgroup, dsize = dense_group(c)
    groups = {0: (dgroup, dsize, f"{prefix}_bucket"), 1: ("edp", p.edp, f"{prefix}_expert_bucket")}
    acc = [0, 0]
    sizes: list[list[int]] = [[], []]
    out: list[Op] = []

    def flush(kind: int, layer: int = -1) -> None:
        group, gsize, name = groups[kind]
        if acc[kind] and gsize > 1:
            out.append(comm(f"{name}{len(sizes[kind])}", collective, group, acc[kind] * grad_bytes, layer, "bwd",
                            blocking=False, microbatch=microbatch, dtype=gdtype))
        if acc[kind]:
            sizes[kind].append(acc[kind])
        acc[kind] = 0

    for op, dense, expert in bwd:
        out.append(op)
        for kind, n in ((0, dense), (1, expert)):
            if n:
                acc[kind] += n
                if acc[kind] >= limit:
                    flush(kind, op.layer)
    flush(0)
    flush(1)
    return out, sizes


def param_gathers(c: Ctx, fwd: list[Op], bwd: list[tuple[Op, int, int]], bucket_elems: int | None = None,
                  prefix: str = "dp_param") -> list[Op]:
    """Distributed-optimizer parameter all-gathers inserted into a forward list (micro-batch "first").

    Buckets are rebuilt from the backward gradient order; each bucket is attributed to the forward
    kernel that first uses one of its parameters (the forward op of the earliest layer in the bucket),
    which waits for it. Dispatch points follow the one-bucket-ahead chain of the module docstring.
    """
    p = c.plan
    limit = bucket_elems or megatron_bucket_elements(p)
    dgroup, dsize = dense_group(c)
    # forward op of each wgrad-carrying backward op: names "<fwd>_wgrad" / "<fwd>_bwd"
    buckets: list[tuple[int, int, tuple[str, int]]] = []   # (kind, elems, (fwd op name, layer))
    acc = [0, 0]
    last_key: list[tuple[str, int] | None] = [None, None]
    for op, dense, expert in bwd:
        for kind, n in ((0, dense), (1, expert)):
            if not n:
                continue
            acc[kind] += n
            last_key[kind] = (_fwd_name(op.name), op.layer)
            if acc[kind] >= limit:
                buckets.append((kind, acc[kind], last_key[kind]))
                acc[kind] = 0
    for kind in (0, 1):
        if acc[kind]:
            buckets.append((kind, acc[kind], last_key[kind]))
    groups = {0: (dgroup, dsize), 1: ("edp", p.edp)}
    index: dict[tuple[str, int], int] = {}
    for i, op in enumerate(fwd):
        index.setdefault((op.name, op.layer), i)
    inserts: dict[int, list[Op]] = {}
    for kind in (0, 1):
        group, gsize = groups[kind]
        if gsize <= 1:
            continue
        chain = sorted(((key, elems, n) for n, (k, elems, key) in enumerate(buckets) if k == kind and key in index),
                       key=lambda b: index[b[0]])
        for j, (key, elems, n) in enumerate(chain):
            # dispatched when the previous bucket of the chain is waited on; the first at the start
            at, target = (0 if j == 0 else index[chain[j - 1][0]]), index[key]
            # wait_op names the first LATER op of that name: issue after any earlier namesake
            for k in range(at, target):
                if fwd[k].name == key[0]:
                    at = k + 1
            inserts.setdefault(at, []).append(
                comm(f"{prefix}_gather{n}", "all_gather", group, elems * PARAM_BYTES, key[1], "fwd",
                     blocking=False, wait_op=key[0], microbatch="first"))
    out: list[Op] = []
    for i, op in enumerate(fwd):
        # buckets were found in backward order; issue the earliest-needed first
        out += sorted(inserts.get(i, []), key=lambda x: index[(x.wait_op, x.layer)])
        out.append(op)
    return out


def _fwd_name(name: str) -> str:
    for suf in ("_wgrad", "_bwd", "_main_grad_add"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def _end_bucket_ops(c: Ctx, buckets: list[list[list[int]]], collective: str, elem_bytes: int, names: tuple[str, str],
                    dtype: str) -> list[Op]:
    """One blocking collective per bucket of each model chunk (`buckets[chunk] = [dense sizes, expert sizes]`,
    elements) at the end of the iteration, over the dense DP group and the expert-DP group."""
    dgroup, dsize = dense_group(c)
    out: list[Op] = []
    for ci, (dense, expert) in enumerate(buckets):
        for sizes, group, gsize, name in ((dense, dgroup, dsize, names[0]), (expert, "edp", c.plan.edp, names[1])):
            if gsize <= 1:
                continue
            for i, n in enumerate(sizes):
                out.append(comm(f"{name}{i}_c{ci}", collective, group, n * elem_bytes, -1, "iteration_end",
                                dtype=dtype))
    return out


def end_grad_reductions(c: Ctx, buckets: list[list[list[int]]]) -> list[Op]:
    """Without overlap_grad_reduce: blocking reductions in finalize_model_grads, one per bucket of each
    model chunk (megatron-core makes the bucket infinite then, so one per buffer)."""
    p = c.plan
    gdtype = grad_reduce_dtype(p)
    return _end_bucket_ops(c, buckets, "reduce_scatter" if p.distributed_optimizer else "all_reduce",
                           DTYPE_BYTES[gdtype], ("dp_grad_bucket", "dp_grad_expert_bucket"), gdtype)


def end_param_gathers(c: Ctx, buckets: list[list[list[int]]]) -> list[Op]:
    """Distributed optimizer without overlap_param_gather: blocking all-gathers of the updated 16-bit
    parameters of every bucket right after the step (megatron-core start_param_sync, synchronous)."""
    return _end_bucket_ops(c, buckets, "all_gather", PARAM_BYTES, ("dp_param_gather", "dp_param_expert_gather"),
                           "bf16")


def _traffic_op(name: str, hbm_bytes: float, phase: str) -> ComputeOp:
    """A memory-bound kernel moving `hbm_bytes` through HBM, keyed as a device copy of half of it
    (compute_db times a copy of B bytes as 2B of HBM traffic)."""
    half = max(1, int(hbm_bytes // 2))
    return ComputeOp(name=name, kind="memcpy", shape=(("bytes", half),), dtype="fp32", flops=0.0,
                     bytes=float(2 * half), variant="fwd", layer=-1, phase=phase)


def iteration_start_ops(c: Ctx, local_params: int) -> list[Op]:
    """zero_grad_buffer: the rank's whole main-grad buffer (every local parameter) is zeroed."""
    if local_params <= 0:
        return []
    return [_traffic_op("zero_grad_buffer", grad_reduce_bytes(c.plan) * local_params, "iteration_start")]


ADAM_BYTES_PER_PARAM = 30   # read fp32 master, m, v, grad (16 B); write master, m, v (12 B) + the 16-bit param (2 B)


def shard_kernel_bytes(plan: ParallelPlan) -> list[tuple[str, int]]:
    """(kernel, HBM bytes per parameter of the rank's optimizer shard) of the once-per-iteration tail, in
    order: 16-bit grads -> fp32 main grads, fp16 unscale, gradient L2 norm, Adam step."""
    gbytes = grad_reduce_bytes(plan)
    out = [("main_grad_copy", gbytes + 4)] if gbytes < 4 else []
    if plan.dtype == "fp16":
        out.append(("grad_unscale", 8))
    return out + [("grad_norm_l2", 4), ("optimizer_step", ADAM_BYTES_PER_PARAM)]


def optimizer_ops(c: Ctx, dense_params: int, expert_params: int, tp_replicated: int, embedding_grad: int,
                  *, shard_dense: int, shard_expert: int, norm_groups: tuple[str, ...] = ("mp",)) -> list[Op]:
    """Once-per-iteration tail in Megatron's order: SP/duplicated-param TP all-reduce and tied-embedding
    all-reduce (finalize_model_grads); 16-bit grads -> fp32 main grads; fp16 unscale + found-inf
    all-reduce; gradient-norm kernel + all-reduce(s); Adam step over this rank's shard."""
    out: list[Op] = []
    gdtype = grad_reduce_dtype(c.plan)
    gbytes = DTYPE_BYTES[gdtype]
    if c.sp and tp_replicated:
        out.append(comm("tp_replicated_grad_ar", "all_reduce", "tp", tp_replicated * gbytes, -1,
                        "iteration_end", dtype=gdtype))
    if embedding_grad:
        out.append(comm("embedding_grad_ar", "all_reduce", "embedding", embedding_grad * gbytes, -1,
                        "iteration_end", dtype=gdtype))
    n = -(-dense_params // shard_dense) + -(-expert_params // shard_expert)
    for name, per_param in shard_kernel_bytes(c.plan):
        if name == "optimizer_step":
            out.append(ComputeOp(name=name, kind="optimizer", shape=(("params", max(1, n)),), dtype="fp32",
                                 flops=12.0 * n, bytes=float(per_param * n), variant="step", layer=-1,
                                 phase="iteration_end"))
            continue
        out.append(_traffic_op(name, per_param * n, "iteration_end"))
        if name == "grad_unscale":
            out.append(comm("found_inf_ar", "all_reduce", "mp", 4, -1, "iteration_end", dtype="fp32"))
        elif name == "grad_norm_l2":
            for g in norm_groups:
                out.append(comm(f"grad_norm_ar_{g}", "all_reduce", g, 4, -1, "iteration_end", dtype="fp32"))
    return out


def is_comm(op: Op) -> bool:
    return isinstance(op, CommOp)
