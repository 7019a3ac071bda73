"""Data-parallel gradient and parameter communication of Megatron's DDP / distributed optimizer.

Modelled (Megatron-core `DistributedDataParallel` with overlap_grad_reduce / overlap_param_gather):
- Gradients live in fp32 main-grad buffers (Megatron forces fp32 accumulation for bf16 and its
  gradient-accumulation fusion keeps fp32 for fp16 too): 4 bytes per element.
- Parameters are assigned to buckets in reverse forward order (the order backward produces their
  gradients); a bucket closes once it holds >= `megatron_bucket_elements(plan)` elements (a parameter
  is never split). That is `plan.grad_bucket_elements` when set, else Megatron's own default
  max(40,000,000, 1,000,000 x dp) elements (megatron-core DDP's rule for an unset --ddp-bucket-size:
  dp is the data-parallel group without context parallelism; the same size serves dense and expert
  buffers). ParallelPlan cannot tell "unset" from its default, so a value equal to the default
  40,000,000 means "unset" (an explicit 40M still grows with dp > 40).
  Dense and expert parameters have separate buffers: dense buckets reduce over the data x
  context-parallel group ("dp", or "dp_cp" when cp > 1), expert buckets over "edp".
- Each bucket's reduction starts, non-blocking, right after the backward kernel that produced its last
  gradient, only in the last micro-batch (earlier micro-batches accumulate locally). Distributed
  optimizer: reduce-scatter (nccl-tests size = the whole bucket); otherwise all-reduce.
- Distributed optimizer parameter all-gather (bf16 params, 2 bytes) per bucket in the forward pass of
  the first micro-batch, waited on by the first kernel that uses one of the bucket's parameters.
  Dispatch follows megatron-core's overlap_param_gather chain (one bucket ahead): the first bucket of
  each buffer (dense, expert) is dispatched when the iteration starts, bucket i+1 when the forward pass
  reaches the first user of bucket i — so the gather of the next layer overlaps this layer's forward.
  (megatron-core without --align-param-gather dispatches the very first bucket at its first use; we
  dispatch it at the start, as the aligned / overlap-with-optimizer-step variants do.)
Ignored: bucket padding to multiples of the DP size.
"""

from __future__ import annotations

from workload_gen.layers import Ctx, comm
from workload_gen.plan import ParallelPlan
from workload_gen.workload import CommOp, ComputeOp, Op

GRAD_BYTES = 4
PARAM_BYTES = 2
_PLAN_DEFAULT_BUCKET = ParallelPlan.__dataclass_fields__["grad_bucket_elements"].default   # 40,000,000


def megatron_bucket_elements(plan: ParallelPlan) -> int:
    """DDP bucket size in elements: the plan's value, or (at the plan default, meaning "not given")
    megatron-core's max(40,000,000, 1,000,000 x dp), dp = the data-parallel group size without CP."""
    if plan.grad_bucket_elements == _PLAN_DEFAULT_BUCKET:
        return max(_PLAN_DEFAULT_BUCKET, 1_000_000 * plan.dp)
    return plan.grad_bucket_elements


def dense_group(c: Ctx) -> tuple[str, int]:
    return ("dp_cp" if c.cp > 1 else "dp"), c.plan.dp * c.cp


def grad_buckets(c: Ctx, bwd: list[tuple[Op, int, int]], *, collective: str | None = None,
                 bucket_elems: int | None = None, grad_bytes: int = GRAD_BYTES,
                 microbatch: str = "last", prefix: str = "dp_grad") -> tuple[list[Op], list[list[int]]]:
    """Insert bucketed gradient reductions into a backward op list.

    `bwd` holds (op, dense_params_ready, expert_params_ready). Returns the op list and, per bucket
    kind, the bucket sizes in elements ([dense, expert]) in the order they were issued.
    """
    p = c.plan
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
                            blocking=False, microbatch=microbatch, dtype="fp32" if grad_bytes == 4 else c.act))
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
    for suf in ("_wgrad", "_bwd"):
        if name.endswith(suf):
            return name[: -len(suf)]
    return name


def optimizer_ops(c: Ctx, dense_params: int, expert_params: int, tp_replicated: int, embedding_grad: int,
                  *, shard_dense: int, shard_expert: int, norm_groups: tuple[str, ...] = ("mp",)) -> list[Op]:
    """Once-per-iteration tail: SP/duplicated-param TP all-reduce, tied-embedding all-reduce,
    gradient-norm all-reduce(s), Adam step over this rank's shard."""
    out: list[Op] = []
    if c.sp and tp_replicated:
        out.append(comm("tp_replicated_grad_ar", "all_reduce", "tp", tp_replicated * GRAD_BYTES, -1,
                        "iteration_end", dtype="fp32"))
    if embedding_grad:
        out.append(comm("embedding_grad_ar", "all_reduce", "embedding", embedding_grad * GRAD_BYTES, -1,
                        "iteration_end", dtype="fp32"))
    for g in norm_groups:
        out.append(comm(f"grad_norm_ar_{g}", "all_reduce", g, 4, -1, "iteration_end", dtype="fp32"))
    if c.plan.dtype == "fp16":
        out.append(comm("found_inf_ar", "all_reduce", "mp", 4, -1, "iteration_end", dtype="fp32"))
    n = -(-dense_params // shard_dense) + -(-expert_params // shard_expert)
    # Adam: read fp32 master, m, v, grad (16 B); write master, m, v (12 B) and the 16-bit param (2 B)
    out.append(ComputeOp(name="optimizer_step", kind="optimizer", shape=(("params", max(1, n)),), dtype="fp32",
                         flops=12.0 * n, bytes=30.0 * n, variant="step", layer=-1, phase="iteration_end"))
    return out


def is_comm(op: Op) -> bool:
    return isinstance(op, CommOp)
