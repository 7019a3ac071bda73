"""Per-layer kernel emission of the mocked Megatron model (one rank, one micro-batch).

A layer is built as a list of `Unit`s in forward order. Each unit holds its forward ops and its
backward ops (reverse order is produced by the caller); backward compute ops carry the number of
parameters whose gradients become ready when they finish (dense and expert), which drives the
data-parallel gradient buckets. Shapes are the kernels' own GEMM dims on one rank:
`gemm` fwd (m=tokens, n=out, k=in), dgrad (m=tokens, n=in, k=out), wgrad (m=in, n=out, k=tokens).

FLOP convention: `flops` of matmul-like kernels are model FLOPs: 2*m*n*k per GEMM, attention counted
over the full (non-causal) s_q x s_kv score matrix as the models.md formulas do (`causal=True` tells
consumers the kernel does about half), flash-attention backward = 2x forward (its internal recompute of
the scores is not counted). Memory-bound kernels carry small nominal FLOP counts; their `bytes` matter.

saved_bytes follow Korthikanti et al. (16-bit activations, 1-byte dropout masks): per GPT layer
without flash attention sbh(34 + 5as/h); TP keeps LN inputs, dropout masks, QKV/fc1 inputs unsharded;
SP shards everything by t; selective recompute drops the 5as^2b term; full recompute keeps the
layer input only. Flash attention keeps Q, K, V and its fp32 softmax log-sum-exp statistics,
4*b*(s/cp)*(a/t) bytes (dropped, like the unfused scores, by selective recompute). An MoE layer's router,
routed experts and shared experts read one saved tensor (the pre-MLP norm output), counted once.

This module is the ONE description of a layer: the generator, memory analysis, plan search
(sim.analysis.stagefacts.LayerKernels) and the serving engine (inference.py) all consume these units.
Every saved tensor is tagged with the recompute *component* that can rematerialise it (`COMPONENTS`);
`apply_recompute` turns a set of dropped components into the forward ops' saved_bytes. Units also
name the selective-recompute choice that re-runs them (`Unit.recompute`) and the bytes each forward
kernel holds only while it runs (`Unit.temp`: gathered SP inputs, scores, partial row-parallel outputs,
16-bit logits), which memory analysis needs for transient peaks.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.vocab import padded_vocab_size
from workload_gen.workload import COMPUTE_KINDS, CommOp, ComputeOp, Op

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
AFTER = "@after:"   # wait_op placeholder: "the op following the first later op with this name"

# Recompute components of saved tensors (Korthikanti et al.; PerfLLM's attn/mlp/mlp_rms recompute):
COMPONENTS = (
    "norm_in",      # a norm's input (the residual stream): always kept
    "norm_out",     # a GEMM input that is a norm's output (QKV, fc1, router, MLA down-projections)
    "attn_core",    # scores / softmax / attention-dropout tensors, flash softmax statistics ("selective")
    "qkv",          # Q, K, V (attention-core inputs) and the inputs of per-head Q/K norms
    "attn_linear",  # attention output-projection input and MLA low-rank latents
    "mlp_act",      # activation input and fc2 input (dense, shared and routed experts)
    "moe",          # routed experts' input tokens, router probabilities
    "dropout",      # residual / embedding dropout masks
    "loss",         # fp32 softmax of the vocab-parallel cross-entropy
)
# what the generator's (Megatron's) "selective" recompute rematerialises
SELECTIVE_DROP = frozenset({"attn_core"})


@dataclass(frozen=True)
class Ctx:
    """Per-rank sizes shared by all layers of one workload."""

    model: ModelSpec
    plan: ParallelPlan
    b: int              # micro-batch size
    s: int              # full sequence length
    cp: int
    t: int              # tensor-parallel size
    sp: bool            # sequence parallel (only meaningful with t > 1)
    tokens: int         # b * s / cp: tokens of this rank inside TP regions
    tokens_sp: int      # tokens in the sequence-parallel regions (tokens / t with SP)
    h: int
    vocab_rank: int     # padded vocabulary rows on this rank
    act: str            # activation dtype ("bf16" | "fp16")
    gemm: str           # GEMM dtype ("fp8" with fp8 training, else act)
    dropout: bool       # GPT-style dropout kernels (attention probs + two hidden dropouts)
    flash: bool
    overlap: bool       # TP comm overlapped with GEMMs (TE userbuffers)

    @property
    def ab(self) -> int:
        return DTYPE_BYTES[self.act]


def make_ctx(model: ModelSpec, plan: ParallelPlan) -> Ctx:
    t, cp = plan.tp, plan.cp
    tokens = plan.micro_batch_size * plan.seq_length // cp
    sp = plan.sequence_parallel and t > 1
    act = "fp16" if plan.dtype == "fp16" else "bf16"
    # GPT-style models (GELU, LayerNorm) train with dropout 0.1 in Megatron's GPT recipes; Llama-style
    # recipes use none. model.extra["dropout"] overrides.
    dropout = bool((model.extra or {}).get("dropout", model.activation == "gelu"))
    vocab = padded_vocab_size(model.vocab_size, t, model.make_vocab_size_divisible_by)
    return Ctx(model=model, plan=plan, b=plan.micro_batch_size, s=plan.seq_length, cp=cp, t=t, sp=sp,
               tokens=tokens, tokens_sp=tokens // t if sp else tokens, h=model.hidden_size,
               vocab_rank=vocab // t, act=act, gemm="fp8" if plan.dtype == "fp8" else act,
               dropout=dropout, flash=plan.flash_attention, overlap=plan.tp_comm_overlap and sp)


@dataclass
class Unit:
    """Forward ops of one piece of a layer and its backward ops (with gradient-ready param counts).

    `saved`: forward op name -> ((component, bytes), ...) of the tensors it keeps for backward before any
    recompute policy (their sum is the op's saved_bytes as built). `temp`: forward op name -> bytes of
    its outputs/temporaries alive only while it runs. `recompute`: the selective-recompute choice that
    re-runs this unit's forward ("attn": attention core, Megatron's selective; "mlp"; "norm"; "")."""

    fwd: list[Op] = field(default_factory=list)
    bwd: list[tuple[Op, int, int]] = field(default_factory=list)
    recompute: str = ""
    saved: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    temp: dict[str, int] = field(default_factory=dict)

    @property
    def core(self) -> bool:
        """Attention core: re-run by Megatron's selective recompute."""
        return self.recompute == "attn"


def tag(u: Unit, component: str, recompute: str = "", temp: dict[str, int] | None = None) -> Unit:
    """Give every untagged saving forward kernel of `u` the component `component` (in place)."""
    for op in u.fwd:
        if isinstance(op, ComputeOp) and op.saved_bytes and op.name not in u.saved:
            u.saved[op.name] = ((component, int(op.saved_bytes)),)
    if recompute:
        u.recompute = recompute
    if temp:
        u.temp.update({k: int(v) for k, v in temp.items() if v})
    return u


def apply_recompute(units: list[Unit], drop: frozenset[str]) -> list[Unit]:
    """Units whose forward ops keep only the saved tensors of components not in `drop`."""
    if not drop:
        return units
    out = []
    for u in units:
        if not any(c in drop for parts in u.saved.values() for c, _ in parts):
            out.append(u)
            continue
        fwd = []
        for op in u.fwd:
            parts = u.saved.get(op.name)
            if parts is not None and isinstance(op, ComputeOp):
                op = replace(op, saved_bytes=sum(b for c, b in parts if c not in drop))
            fwd.append(op)
        out.append(Unit(fwd, u.bwd, u.recompute, u.saved, u.temp))
    return out


# ---------------------------------------------------------------- op constructors

def compute(name: str, kind: str, dims: dict[str, int], dtype: str, flops: float, nbytes: float,
            variant: str, layer: int, saved: int = 0, causal: bool = False) -> ComputeOp:
    shape = tuple((f, int(dims[f])) for f in COMPUTE_KINDS[kind])
    phase = "fwd" if variant == "fwd" else "bwd"
    return ComputeOp(name=name, kind=kind, shape=shape, dtype=dtype, flops=float(flops), bytes=float(nbytes),
                     variant=variant, layer=layer, phase=phase, saved_bytes=int(saved), causal=causal)


def comm(name: str, collective: str, group: str, size: int, layer: int, phase: str, *,
         blocking: bool = True, wait_op: str | None = None, peer: str | None = None,
         dtype: str = "bf16", microbatch: str = "all") -> CommOp:
    return CommOp(name=name, collective=collective, group=group, size_bytes=int(size), layer=layer,
                  phase=phase, blocking=blocking, wait_op=wait_op, peer=peer, microbatch=microbatch,
                  dtype=dtype)


def _gemm_bytes(m: int, n: int, k: int, es: int) -> int:
    return es * (m * k + k * n + m * n)


def linear(c: Ctx, name: str, m: int, n: int, k: int, layer: int, saved: int, params: int,
           expert: bool = False, groups: int = 0,
           work: tuple[float, float] | None = None) -> tuple[ComputeOp, ComputeOp, ComputeOp, int, int]:
    """Forward, dgrad and wgrad kernels of Y[m,n] = X[m,k] W[k,n] (grouped when groups > 0).

    `work` (grouped only): (rows, weight sets) the FLOPs and bytes count when they differ from the
    kernel's dims (groups x m rows): 2·rows·n·k FLOPs, e·(rows·(k + n) + sets·k·n) bytes.
    Returns (fwd, dgrad, wgrad, dense_params, expert_params) with the params attached to wgrad.
    """
    es = DTYPE_BYTES[c.gemm]
    shapes = ((m, n, k), (m, k, n), (k, n, m))
    ops = []
    for variant, (mm, nn, kk) in zip(("fwd", "dgrad", "wgrad"), shapes):
        nm = name if variant == "fwd" else f"{name}_{variant}"
        sv = saved if variant == "fwd" else 0
        if groups and work is not None:
            rows, sets = work
            ops.append(compute(nm, "grouped_gemm", {"groups": groups, "m": mm, "n": nn, "k": kk}, c.gemm,
                               2.0 * rows * n * k, es * (rows * (k + n) + sets * k * n), variant, layer, sv))
        elif groups:
            ops.append(compute(nm, "grouped_gemm", {"groups": groups, "m": mm, "n": nn, "k": kk}, c.gemm,
                               2.0 * groups * mm * nn * kk, groups * _gemm_bytes(mm, nn, kk, es), variant,
                               layer, sv))
        else:
            ops.append(compute(nm, "gemm", {"m": mm, "n": nn, "k": kk}, c.gemm, 2.0 * mm * nn * kk,
                               _gemm_bytes(mm, nn, kk, es), variant, layer, sv))
    return ops[0], ops[1], ops[2], (0 if expert else params), (params if expert else 0)


def norm(c: Ctx, name: str, tokens: int, width: int, layer: int, saved: int, kind: str | None = None,
         copies: int = 1, component: str = "norm_in", recompute: str = "") -> Unit:
    """Norm kernel over `tokens` rows of `width`; `copies` separate weight sets (q and k norms: 2)."""
    kind = kind or c.model.norm
    params = copies * (2 * width if kind == "layernorm" else width)
    nb = c.ab * tokens * width
    f = compute(name, kind, {"tokens": tokens, "hidden": width}, c.act, 5.0 * tokens * width, 2 * nb, "fwd",
                layer, saved)
    b = compute(f"{name}_bwd", kind, {"tokens": tokens, "hidden": width}, c.act, 10.0 * tokens * width,
                3 * nb, "bwd", layer)
    return tag(Unit([f], [(b, params, 0)]), component, recompute)


def elementwise(c: Ctx, name: str, numel: int, layer: int, saved: int = 0, bwd: bool = True) -> Unit:
    nb = c.ab * numel
    f = compute(name, "elementwise", {"numel": numel}, c.act, numel, 3 * nb, "fwd", layer, saved)
    u = Unit([f])
    if bwd:
        u.bwd.append((compute(f"{name}_bwd", "elementwise", {"numel": numel}, c.act, numel, 2 * nb, "bwd",
                              layer), 0, 0))
    return u


def dropout_add(c: Ctx, name: str, numel: int, layer: int) -> Unit:
    """Bias-dropout-residual-add after a row-parallel GEMM (dropout mask saved: 1 byte/element)."""
    if not c.dropout:
        return elementwise(c, f"{name}_residual", numel, layer, bwd=False)
    nb = c.ab * numel
    f = compute(f"{name}_dropout_add", "dropout", {"numel": numel}, c.act, 2.0 * numel, 3 * nb + numel, "fwd",
                layer, saved=numel)
    b = compute(f"{name}_dropout_add_bwd", "dropout", {"numel": numel}, c.act, numel, 2 * nb + numel, "bwd",
                layer)
    return tag(Unit([f], [(b, 0, 0)]), "dropout")


# ---------------------------------------------------------------- tensor-parallel communication

def tp_enter(c: Ctx, name: str, layer: int, gemm_name: str, tokens: int | None = None) -> tuple[list, list]:
    """Comm entering a column-parallel GEMM: (forward ops placed before the GEMM, backward plan).

    Forward: SP all-gather of the sequence-sharded input (none without SP: identity).
    Backward plan: list of (position, op) with position "before_dgrad" / "after_dgrad": with SP the
    input is re-gathered for wgrad (overlapping dgrad) and the input gradient is reduce-scattered
    (overlapping wgrad); without SP the input gradient is all-reduced (overlapping wgrad).
    """
    if c.t == 1:
        return [], []
    size = c.ab * (tokens or c.tokens) * c.h
    fwd = []
    bwd = []
    if c.sp:
        if c.overlap:
            fwd.append(comm(f"{name}_ag", "all_gather", "tp", size, layer, "fwd", blocking=False,
                            wait_op=AFTER + gemm_name))
        else:
            fwd.append(comm(f"{name}_ag", "all_gather", "tp", size, layer, "fwd"))
        bwd.append(("before_dgrad", comm(f"{name}_ag_bwd", "all_gather", "tp", size, layer, "bwd",
                                         blocking=False, wait_op=f"{gemm_name}_wgrad")))
        bwd.append(("after_dgrad", comm(f"{name}_rs_bwd", "reduce_scatter", "tp", size, layer, "bwd",
                                        blocking=False, wait_op=AFTER + f"{gemm_name}_wgrad")))
    else:
        bwd.append(("after_dgrad", comm(f"{name}_ar_bwd", "all_reduce", "tp", size, layer, "bwd",
                                        blocking=False, wait_op=AFTER + f"{gemm_name}_wgrad")))
    return fwd, bwd


def tp_exit(c: Ctx, name: str, layer: int, gemm_name: str, tokens: int | None = None) -> tuple[list, list]:
    """Comm leaving a row-parallel GEMM: (forward ops, backward ops placed before its dgrad).

    Forward: SP reduce-scatter, else all-reduce (with TP overlap the reduce-scatter is placed before the
    GEMM, non-blocking, so that it overlaps it). Backward: SP all-gather of the output gradient.
    """
    if c.t == 1:
        return [], []
    size = c.ab * (tokens or c.tokens) * c.h
    if not c.sp:
        return [comm(f"{name}_ar", "all_reduce", "tp", size, layer, "fwd")], []
    if c.overlap:
        f = comm(f"{name}_rs", "reduce_scatter", "tp", size, layer, "fwd", blocking=False,
                 wait_op=AFTER + gemm_name)
        b = comm(f"{name}_ag_bwd", "all_gather", "tp", size, layer, "bwd", blocking=False,
                 wait_op=AFTER + f"{gemm_name}_dgrad")
    else:
        f = comm(f"{name}_rs", "reduce_scatter", "tp", size, layer, "fwd")
        b = comm(f"{name}_ag_bwd", "all_gather", "tp", size, layer, "bwd")
    return [f], [b]


def column_unit(c: Ctx, prefix: str, gemm_name: str, m: int, n: int, k: int, layer: int, saved: int,
                params: int, tokens: int | None = None, expert: bool = False, component: str = "norm_out",
                recompute: str = "") -> Unit:
    """TP entry comm + column-parallel GEMM (with SP its gathered input is a temporary of the GEMM)."""
    f, dg, wg, pd, pe = linear(c, gemm_name, m, n, k, layer, saved, params, expert)
    cf, cb = tp_enter(c, prefix, layer, gemm_name, tokens)
    u = Unit(fwd=[*cf, f])
    before = [op for pos, op in cb if pos == "before_dgrad"]
    after = [op for pos, op in cb if pos == "after_dgrad"]
    u.bwd = [*((op, 0, 0) for op in before), (dg, 0, 0), *((op, 0, 0) for op in after), (wg, pd, pe)]
    gathered = c.ab * (tokens or c.tokens) * c.h if (c.sp and c.t > 1) else 0
    return tag(u, component, recompute, {gemm_name: gathered})


def row_unit(c: Ctx, prefix: str, gemm_name: str, m: int, n: int, k: int, layer: int, saved: int,
             params: int, tokens: int | None = None, component: str = "mlp_act") -> Unit:
    """Row-parallel GEMM + TP exit comm (its unreduced [m, n] output is a temporary with TP)."""
    f, dg, wg, pd, pe = linear(c, gemm_name, m, n, k, layer, saved, params)
    cf, cb = tp_exit(c, prefix, layer, gemm_name, tokens)
    if c.overlap and cf:
        fwd = [*cf, f]
    else:
        fwd = [f, *cf]
    u = Unit(fwd=fwd, bwd=[*((op, 0, 0) for op in cb), (dg, 0, 0), (wg, pd, pe)])
    return tag(u, component, temp={gemm_name: c.ab * m * n if c.t > 1 else 0})


# ---------------------------------------------------------------- attention

def _attention_core(c: Ctx, layer: int, heads: int, kv_heads: int, d_qk: int, d_v: int,
                    name: str = "attn") -> Unit:
    """Attention core on this rank (after QKV projection and rotary, before the output projection).

    Saved: Q, K, V ("qkv"); scores-derived tensors ("attn_core": softmax output, dropout mask and
    output; flash: the fp32 log-sum-exp), dropped by selective recompute (`apply_recompute`)."""
    b, cp = c.b, c.cp
    seq_q, seq_kv = c.s // cp, c.s
    ab = c.ab
    u = Unit(recompute="attn")
    q_bytes = ab * c.tokens * heads * d_qk
    k_bytes = ab * c.tokens * kv_heads * d_qk
    v_bytes = ab * c.tokens * kv_heads * d_v
    pre: list = []
    post_f: list = []
    pre_b: list = []
    post_b: list = []
    core_name = f"{name}_core" if c.flash else f"{name}_scores"
    if cp > 1 and c.plan.cp_comm_type == "a2a":
        # Ulysses: trade the sequence shard for a head shard; attention then sees the full sequence.
        seq_q = c.s
        qkv = q_bytes + k_bytes + v_bytes
        out = ab * c.tokens * heads * d_v
        pre.append(comm(f"{name}_cp_a2a_qkv", "all_to_all", "cp", qkv, layer, "fwd"))
        post_f.append(comm(f"{name}_cp_a2a_out", "all_to_all", "cp", out, layer, "fwd"))
        pre_b.append(comm(f"{name}_cp_a2a_out_bwd", "all_to_all", "cp", out, layer, "bwd"))
        post_b.append(comm(f"{name}_cp_a2a_qkv_bwd", "all_to_all", "cp", qkv, layer, "bwd"))
        heads, kv_heads = heads // cp, max(1, kv_heads // cp)
    elif cp > 1:
        # Ring (p2p) attention: the K/V blocks travel around the CP ring while the kernel runs;
        # represented as one all-gather of K/V overlapping the kernel (same bytes per rank as cp-1
        # ring steps); backward also returns the dK/dV partial sums (reduce-scatter).
        kv = cp * (k_bytes + v_bytes)
        last_f = f"{name}_core" if c.flash else f"{name}_context"
        last_b = f"{name}_core_bwd" if c.flash else f"{name}_scores_dgrad_k"
        pre.append(comm(f"{name}_cp_kv", "all_gather", "cp", kv, layer, "fwd", blocking=False,
                        wait_op=AFTER + last_f))
        pre_b.append(comm(f"{name}_cp_kv_bwd", "all_gather", "cp", kv, layer, "bwd", blocking=False,
                          wait_op=AFTER + last_b))
        pre_b.append(comm(f"{name}_cp_dkv_bwd", "reduce_scatter", "cp", kv, layer, "bwd", blocking=False,
                          wait_op=AFTER + last_b))
    fl_fwd = 2.0 * b * heads * seq_q * seq_kv * (d_qk + d_v)
    qkv_saved = q_bytes + k_bytes + v_bytes
    if c.flash:
        dims = {"batch": b, "seq_q": seq_q, "seq_kv": seq_kv, "heads": heads, "kv_heads": kv_heads,
                "head_dim_qk": d_qk, "head_dim_v": d_v}
        io = ab * b * (seq_q * heads * (d_qk + 2 * d_v) + seq_kv * kv_heads * (d_qk + d_v))
        # fp32 log-sum-exp per query row and head, kept for backward (b*(s/cp)*(a/t) values also with
        # Ulysses CP, where seq_q = s and heads = a/(t*cp)); selective recompute re-creates it
        lse_saved = 4 * b * seq_q * heads
        f = compute(core_name, "flash_attn", dims, c.act, fl_fwd, io, "fwd", layer, qkv_saved + lse_saved,
                    causal=True)
        u.saved[core_name] = (("qkv", qkv_saved), ("attn_core", lse_saved))
        bw = compute(f"{core_name}_bwd", "flash_attn", dims, c.act, 2 * fl_fwd, 2 * io, "bwd", layer,
                     causal=True)
        u.fwd = [*pre, f, *post_f]
        u.bwd = [(op, 0, 0) for op in (*pre_b, bw, *post_b)]
        return u
    # unfused: scores = Q K^T, softmax (scale+mask fused), dropout, context = P V
    batch = b * heads
    probs = batch * seq_q * seq_kv
    s_saved = q_bytes + k_bytes
    soft_saved = ab * probs
    drop_saved = probs                          # 1-byte mask
    drop_out = ab * probs if c.dropout else 0   # the dropout output: the context GEMM's input
    ctx_saved = v_bytes + drop_out
    u.saved.update({f"{name}_scores": (("qkv", s_saved),), f"{name}_softmax": (("attn_core", soft_saved),),
                    f"{name}_context": (("qkv", v_bytes), ("attn_core", drop_out))})
    if c.dropout:
        u.saved[f"{name}_dropout"] = (("attn_core", drop_saved),)
    # the scores, softmax output and dropout output are each a temporary of the kernel producing them
    u.temp.update({f"{name}_scores": ab * probs, f"{name}_softmax": ab * probs,
                   **({f"{name}_dropout": ab * probs} if c.dropout else {})})
    es = ab
    ops_f = [compute(f"{name}_scores", "attn_bmm", {"batch": batch, "m": seq_q, "n": seq_kv, "k": d_qk}, c.act,
                     2.0 * batch * seq_q * seq_kv * d_qk, es * batch * (seq_q * d_qk + seq_kv * d_qk + seq_q * seq_kv),
                     "fwd", layer, s_saved, causal=True),
             compute(f"{name}_softmax", "softmax", {"rows": batch * seq_q, "cols": seq_kv}, c.act, 5.0 * probs,
                     2 * es * probs, "fwd", layer, soft_saved, causal=True)]
    if c.dropout:
        ops_f.append(compute(f"{name}_dropout", "dropout", {"numel": probs}, c.act, 2.0 * probs,
                             2 * es * probs + probs, "fwd", layer, drop_saved))
    ops_f.append(compute(f"{name}_context", "attn_bmm", {"batch": batch, "m": seq_q, "n": d_v, "k": seq_kv},
                         c.act, 2.0 * batch * seq_q * seq_kv * d_v,
                         es * batch * (seq_q * seq_kv + seq_kv * d_v + seq_q * d_v), "fwd", layer, ctx_saved,
                         causal=True))
    # backward: dP = dO V^T, dV = P^T dO, dropout/softmax bwd, dQ = dS K, dK = dS^T Q
    ops_b = [compute(f"{name}_context_dgrad_p", "attn_bmm", {"batch": batch, "m": seq_q, "n": seq_kv, "k": d_v},
                     c.act, 2.0 * batch * seq_q * seq_kv * d_v, es * batch * (seq_q * d_v + d_v * seq_kv + seq_q * seq_kv),
                     "bwd", layer, causal=True),
             compute(f"{name}_context_dgrad_v", "attn_bmm", {"batch": batch, "m": seq_kv, "n": d_v, "k": seq_q},
                     c.act, 2.0 * batch * seq_q * seq_kv * d_v, es * batch * (seq_kv * seq_q + seq_q * d_v + seq_kv * d_v),
                     "bwd", layer, causal=True)]
    if c.dropout:
        ops_b.append(compute(f"{name}_dropout_bwd", "dropout", {"numel": probs}, c.act, probs,
                             2 * es * probs + probs, "bwd", layer))
    ops_b += [compute(f"{name}_softmax_bwd", "softmax", {"rows": batch * seq_q, "cols": seq_kv}, c.act,
                      3.0 * probs, 3 * es * probs, "bwd", layer, causal=True),
              compute(f"{name}_scores_dgrad_q", "attn_bmm", {"batch": batch, "m": seq_q, "n": d_qk, "k": seq_kv},
                      c.act, 2.0 * batch * seq_q * seq_kv * d_qk,
                      es * batch * (seq_q * seq_kv + seq_kv * d_qk + seq_q * d_qk), "bwd", layer, causal=True),
              compute(f"{name}_scores_dgrad_k", "attn_bmm", {"batch": batch, "m": seq_kv, "n": d_qk, "k": seq_q},
                      c.act, 2.0 * batch * seq_q * seq_kv * d_qk,
                      es * batch * (seq_kv * seq_q + seq_q * d_qk + seq_kv * d_qk), "bwd", layer, causal=True)]
    u.fwd = [*pre, *ops_f, *post_f]
    u.bwd = [(op, 0, 0) for op in (*pre_b, *ops_b, *post_b)]
    return u


def rotary(c: Ctx, layer: int, heads: int, head_dim: int) -> Unit:
    n = c.tokens * heads * head_dim
    dims = {"tokens": c.tokens, "heads": heads, "head_dim": head_dim}
    f = compute("attn_rotary", "rotary", dims, c.act, 3.0 * n, 2 * c.ab * n, "fwd", layer)
    b = compute("attn_rotary_bwd", "rotary", dims, c.act, 3.0 * n, 2 * c.ab * n, "bwd", layer)
    return Unit([f], [(b, 0, 0)])


def _latent_gather(c: Ctx, name: str, width: int, layer: int) -> Unit:
    """TP comm of a low-rank latent computed by a TP-replicated down-projection (Megatron MLA):
    SP: all-gather of the sequence-sharded latent (backward: reduce-scatter of its partial gradients);
    no SP: none forward, all-reduce of the up-projection's partial input gradient backward."""
    if c.t == 1:
        return Unit()
    size = c.ab * c.tokens * width
    if c.sp:
        return Unit([comm(f"{name}_ag", "all_gather", "tp", size, layer, "fwd")],
                    [(comm(f"{name}_rs_bwd", "reduce_scatter", "tp", size, layer, "bwd"), 0, 0)])
    return Unit([], [(comm(f"{name}_ar_bwd", "all_reduce", "tp", size, layer, "bwd"), 0, 0)])


def mla_projection_units(c: Ctx, layer: int, heads: int, in_saved: int) -> list[Unit]:
    """DeepSeek MLA projections as megatron-core builds them: the q/kv down-projections are replicated
    over TP and run on this rank's (sequence-parallel) tokens; their latents are gathered over TP and
    normalised; the up-projections are column-parallel over heads. Without q LoRA the query is a plain
    column-parallel projection of the (gathered) hidden states."""
    m, T, Tsp, h, ab = c.model, c.tokens, c.tokens_sp, c.h, c.ab
    qk, dv = m.qk_head_dim, m.v_head_size
    rope, nope = m.qk_rope_head_dim or 0, m.qk_nope_head_dim or 0
    kv_lora = m.kv_lora_rank or 0
    units: list[Unit] = []

    def lin(name, mm, n, k, saved, params, component):
        f, dg, wg, pd, _ = linear(c, name, mm, n, k, layer, saved, params)
        return tag(Unit([f], [(dg, 0, 0), (wg, pd, 0)]), component)

    ql = m.q_lora_rank
    # the down-projections share one saved input (the norm output on this rank's tokens)
    if ql:
        units.append(lin("attn_q_down", Tsp, ql, h, in_saved, h * ql, "norm_out"))
    units.append(lin("attn_kv_down", Tsp, kv_lora + rope, h, 0 if ql else in_saved, h * (kv_lora + rope),
                     "norm_out"))
    if ql:
        units.append(_latent_gather(c, "attn_q_latent", ql, layer))
    units.append(_latent_gather(c, "attn_kv_latent", kv_lora + rope, layer))
    if ql:
        units.append(norm(c, "attn_q_norm", T, ql, layer, saved=ab * T * ql, kind="rmsnorm",
                          component="attn_linear"))
        units.append(lin("attn_q_up", T, heads * qk, ql, ab * T * ql, ql * heads * qk, "attn_linear"))
    else:
        units.append(column_unit(c, "attn", "attn_q", T, heads * qk, h, layer, 0, h * heads * qk))
    units.append(norm(c, "attn_kv_norm", T, kv_lora, layer, saved=ab * T * kv_lora, kind="rmsnorm",
                      component="attn_linear"))
    units.append(lin("attn_kv_up", T, heads * (nope + dv), kv_lora, ab * T * kv_lora, kv_lora * heads * (nope + dv),
                     "attn_linear"))
    return units


def attention_units(c: Ctx, layer: int, selective: bool = False) -> list[Unit]:
    """Input norm, QKV (or MLA projections), rotary, core, output projection, dropout-add.

    `selective`: drop what Megatron's selective recompute rematerialises (SELECTIVE_DROP)."""
    m, T, Tsp, h, t, ab = c.model, c.tokens, c.tokens_sp, c.h, c.t, c.ab
    bias = m.add_bias_linear
    units = [norm(c, "input_norm", Tsp, h, layer, saved=ab * Tsp * h, recompute="norm")]
    heads = m.num_attention_heads // t
    # input of the first GEMM(s): saved sequence-sharded with SP (re-gathered in backward)
    in_saved = ab * Tsp * h
    if m.is_mla:
        units += mla_projection_units(c, layer, heads, in_saved)
        qk, dv, rope = m.qk_head_dim, m.v_head_size, m.qk_rope_head_dim or 0
        if rope:
            units.append(rotary(c, layer, heads + 1, rope))
        units.append(_attention_core(c, layer, heads, heads, qk, dv))
        units.append(row_unit(c, "attn", "attn_proj", T, h, heads * dv, layer, ab * T * heads * dv,
                              heads * dv * h + (h if bias else 0), component="attn_linear"))
    else:
        d, kv = m.head_size, m.kv_heads // t
        n_qkv = (heads + 2 * kv) * d
        qkv_params = h * n_qkv + (n_qkv if (bias or m.add_qkv_bias) else 0)
        units.append(column_unit(c, "attn", "attn_qkv", T, n_qkv, h, layer, in_saved, qkv_params))
        if m.qk_layernorm:
            units.append(norm(c, "attn_qk_norm", T * (heads + kv), d, layer, saved=ab * T * (heads + kv) * d,
                              copies=2, component="qkv"))
        if m.position_embedding == "rope":
            units.append(rotary(c, layer, heads + kv, d))
        units.append(_attention_core(c, layer, heads, kv, d, d))
        units.append(row_unit(c, "attn", "attn_proj", T, h, heads * d, layer, ab * T * heads * d,
                              heads * d * h + (h if bias else 0), component="attn_linear"))
    units.append(dropout_add(c, "attn", Tsp * h, layer))
    return apply_recompute(units, SELECTIVE_DROP) if selective else units


# ---------------------------------------------------------------- MLP / MoE

def _act_unit(c: Ctx, name: str, tokens: int, width: int, layer: int, saved: bool = True,
              work_tokens: float | None = None) -> Unit:
    """Activation over `tokens` rows (dims); FLOPs / bytes over `work_tokens` rows when given."""
    kind = "swiglu" if c.model.gated_mlp else "gelu"
    in_w = 2 * width if c.model.gated_mlp else width
    wt = tokens if work_tokens is None else work_tokens
    nb = c.ab * wt * (in_w + width)
    dims = {"tokens": tokens, "width": width}
    f = compute(name, kind, dims, c.act, 8.0 * wt * width, nb, "fwd", layer,
                c.ab * wt * in_w if saved else 0)
    b = compute(f"{name}_bwd", kind, dims, c.act, 16.0 * wt * width, nb + c.ab * wt * width, "bwd", layer)
    return tag(Unit([f], [(b, 0, 0)]), "mlp_act", "mlp")


def dense_mlp_units(c: Ctx, layer: int, ffn: int, prefix: str = "mlp", save_input: bool = True) -> list[Unit]:
    """Column-parallel fc1 (gate+up for SwiGLU), activation, row-parallel fc2, TP comm.

    `save_input=False`: fc1's input is a tensor another kernel already keeps (shared experts read the
    router's input), so it is not counted again."""
    m, T, Tsp, h, t, ab = c.model, c.tokens, c.tokens_sp, c.h, c.t, c.ab
    g = 2 if m.gated_mlp else 1
    f = ffn // t
    bias = m.add_bias_linear
    return [column_unit(c, prefix, f"{prefix}_fc1", T, g * f, h, layer, ab * Tsp * h if save_input else 0,
                        h * g * f + (g * f if bias else 0), recompute="mlp"),
            _act_unit(c, f"{prefix}_act", T, f, layer),
            row_unit(c, prefix, f"{prefix}_fc2", T, h, f, layer, ab * T * f, f * h + (h if bias else 0))]


@dataclass(frozen=True)
class ExpertRows:
    """Routed-expert work of one rank under unbalanced routing (serving: workload_gen.expert_load):
    kernel dims of the rank the step waits for and the work its FLOPs / bytes count."""

    groups: int          # grouped-GEMM members that run (experts receiving a token)
    rows: int            # rows per member
    act_rows: int        # rows of the activation kernel (token copies the rank processes)
    work_rows: float     # token copies counted in FLOPs / bytes
    work_sets: float     # expert weight sets read, counted in bytes
    a2a_copies: int      # token copies in one rank's EP all-to-all buffer


def moe_units(c: Ctx, layer: int, load: ExpertRows | None = None) -> list[Unit]:
    """Router + top-k, permute, EP all-to-all dispatch, (expert-TP gather), expert GEMMs, combine.

    Balanced routing by default: every expert receives the mean number of tokens; `load` replaces the
    routed experts' grouped GEMMs, activation and all-to-all sizes (serving's expert load). Shared
    experts run as a TP-sharded dense MLP on the full (gathered) sequence.
    """
    m, p, h, ab = c.model, c.plan, c.h, c.ab
    E, k, ep, etp = m.num_experts, m.moe_top_k, p.ep, p.expert_tp
    Tl = c.tokens_sp                      # tokens entering the MoE layer on this rank
    local = E // ep
    m_tok = max(1, ep * etp * Tl * k // E)  # tokens per local expert (mean)
    routed = local * m_tok
    units: list[Unit] = []
    # router (replicated weight; fp32 logits in Megatron, modelled in the activation dtype)
    f, dg, wg, pd, _ = linear(c, "moe_router", Tl, E, h, layer, ab * Tl * h, E * h)
    units.append(tag(Unit([f], [(dg, 0, 0), (wg, pd, 0)]), "norm_out"))
    dims = {"tokens": Tl, "experts": E, "topk": k}
    units.append(tag(Unit([compute("moe_topk", "router_topk", dims, "fp32", 5.0 * Tl * E, 4 * Tl * E * 2, "fwd",
                                   layer, 4 * Tl * E)],
                          [(compute("moe_topk_bwd", "router_topk", dims, "fp32", 5.0 * Tl * E, 4 * Tl * E * 3,
                                    "bwd", layer), 0, 0)]), "moe"))
    pdims = {"tokens": Tl, "hidden": h, "topk": k}
    units.append(tag(Unit([compute("moe_permute", "permute", pdims, c.act, 0.0, ab * Tl * h * (1 + k), "fwd",
                                   layer)],
                          [(compute("moe_permute_bwd", "permute", pdims, c.act, Tl * k * h, ab * Tl * h * (1 + k),
                                    "bwd", layer), 0, 0)]), "moe", temp={"moe_permute": ab * Tl * k * h}))
    a2a = ab * (load.a2a_copies if load is not None else Tl * k) * h
    if ep > 1:
        units.append(Unit([comm("moe_dispatch", "all_to_all", "ep", a2a, layer, "fwd")],
                          [(comm("moe_dispatch_bwd", "all_to_all", "ep", a2a, layer, "bwd"), 0, 0)]))
    if etp > 1:
        size = ab * routed * h
        units.append(Unit([comm("moe_etp_ag", "all_gather", "etp", size, layer, "fwd")],
                          [(comm("moe_etp_ag_bwd", "reduce_scatter", "etp", size, layer, "bwd"), 0, 0)]))
    g = 2 if m.gated_mlp else 1
    fe = m.expert_ffn_hidden_size // etp
    bias = m.add_bias_linear
    p1 = h * g * fe + (g * fe if bias else 0)
    p2 = fe * h + (h if bias else 0)
    if load is not None:
        work = (load.work_rows, load.work_sets)
        f1, d1, w1, _, e1 = linear(c, "moe_fc1", load.rows, g * fe, h, layer, ab * load.work_rows * h, local * p1,
                                   True, groups=load.groups, work=work)
        f2, d2, w2, _, e2 = linear(c, "moe_fc2", load.rows, h, fe, layer, ab * load.work_rows * fe, local * p2,
                                   True, groups=load.groups, work=work)
        units += [tag(Unit([f1], [(d1, 0, 0), (w1, 0, e1)]), "moe", "mlp"),
                  _act_unit(c, "moe_act", load.act_rows, fe, layer, work_tokens=load.work_rows),
                  tag(Unit([f2], [(d2, 0, 0), (w2, 0, e2)]), "mlp_act",
                      temp={"moe_fc2": ab * load.act_rows * h})]
    elif p.moe_grouped_gemm:
        f1, d1, w1, _, e1 = linear(c, "moe_fc1", m_tok, g * fe, h, layer, ab * routed * h, local * p1, True,
                                   groups=local)
        f2, d2, w2, _, e2 = linear(c, "moe_fc2", m_tok, h, fe, layer, ab * routed * fe, local * p2, True,
                                   groups=local)
        units += [tag(Unit([f1], [(d1, 0, 0), (w1, 0, e1)]), "moe", "mlp"),
                  _act_unit(c, "moe_act", routed, fe, layer),
                  tag(Unit([f2], [(d2, 0, 0), (w2, 0, e2)]), "mlp_act", temp={"moe_fc2": ab * routed * h})]
    else:
        # SequentialMLP: one fc1/act/fc2 per local expert
        for e in range(local):
            f1, d1, w1, _, e1 = linear(c, f"moe_e{e}_fc1", m_tok, g * fe, h, layer, ab * m_tok * h, p1, True)
            f2, d2, w2, _, e2 = linear(c, f"moe_e{e}_fc2", m_tok, h, fe, layer, ab * m_tok * fe, p2, True)
            units += [tag(Unit([f1], [(d1, 0, 0), (w1, 0, e1)]), "moe", "mlp"),
                      _act_unit(c, f"moe_e{e}_act", m_tok, fe, layer),
                      tag(Unit([f2], [(d2, 0, 0), (w2, 0, e2)]), "mlp_act", temp={f"moe_e{e}_fc2": ab * m_tok * h})]
    if etp > 1:
        size = ab * routed * h
        units.append(Unit([comm("moe_etp_rs", "reduce_scatter", "etp", size, layer, "fwd")],
                          [(comm("moe_etp_rs_bwd", "all_gather", "etp", size, layer, "bwd"), 0, 0)]))
    if ep > 1:
        units.append(Unit([comm("moe_combine", "all_to_all", "ep", a2a, layer, "fwd")],
                          [(comm("moe_combine_bwd", "all_to_all", "ep", a2a, layer, "bwd"), 0, 0)]))
    units.append(tag(Unit([compute("moe_unpermute", "unpermute", pdims, c.act, Tl * k * h, ab * Tl * h * (1 + k),
                                   "fwd", layer, 4 * Tl * k)],
                          [(compute("moe_unpermute_bwd", "unpermute", pdims, c.act, Tl * k * h, ab * Tl * h * (1 + k),
                                    "bwd", layer), 0, 0)]), "moe", temp={"moe_unpermute": ab * Tl * k * h}))
    if m.num_shared_experts:
        # same input tensor as the router (already saved there)
        units += dense_mlp_units(c, layer, m.shared_expert_total_ffn, prefix="moe_shared", save_input=False)
    return units


def mlp_units(c: Ctx, layer: int) -> list[Unit]:
    units = [norm(c, "pre_mlp_norm", c.tokens_sp, c.h, layer, saved=c.ab * c.tokens_sp * c.h, recompute="norm")]
    if c.model.layer_is_moe(layer):
        units += moe_units(c, layer)
    else:
        units += dense_mlp_units(c, layer, c.model.ffn_hidden_size)
    units.append(dropout_add(c, "mlp", c.tokens_sp * c.h, layer))
    return units


def layer_units(c: Ctx, layer: int, drop: frozenset[str] | None = None) -> list[Unit]:
    """All units of global layer `layer` on this rank. `drop`: saved components rematerialised by
    recompute (None: the plan's policy, SELECTIVE_DROP with selective recompute; empty: keep all)."""
    if drop is None:
        drop = SELECTIVE_DROP if c.plan.recompute == "selective" else frozenset()
    return apply_recompute(attention_units(c, layer) + mlp_units(c, layer), drop)


# ---------------------------------------------------------------- embedding and head

def embedding_units(c: Ctx) -> list[Unit]:
    """Vocab-parallel word embedding, TP reduction (+ learned positions), embedding dropout.

    megatron-core: with SP and RoPE the word embedding is reduce-scattered (backward all-gather);
    with SP and learned positions it is all-reduced, the positions added on the full sequence and the
    result split over TP (backward all-gather); without SP it is all-reduced (backward: nothing)."""
    m, T, Tsp, h, ab = c.model, c.tokens, c.tokens_sp, c.h, c.ab
    dims = {"tokens": T, "hidden": h, "vocab": c.vocab_rank}
    f = compute("embedding", "embedding", dims, c.act, 0.0, ab * T * h + 8 * T, "fwd", -1)
    b = compute("embedding_wgrad", "embedding", dims, c.act, T * h, 2 * ab * T * h + 8 * T, "wgrad", -1)
    pos = m.seq_length * h if m.position_embedding == "learned" else 0
    u = Unit([f], [(b, c.vocab_rank * h + pos, 0)], temp={"embedding": ab * T * h if c.t > 1 else 0})
    units = [u]
    size = ab * T * h
    if c.t > 1 and c.sp and not pos:
        units.append(Unit([comm("embedding_rs", "reduce_scatter", "tp", size, -1, "fwd")],
                          [(comm("embedding_rs_bwd", "all_gather", "tp", size, -1, "bwd"), 0, 0)]))
    elif c.t > 1:
        units.append(Unit([comm("embedding_ar", "all_reduce", "tp", size, -1, "fwd")]))
    if pos:
        pu = elementwise(c, "embedding_pos_add", T * h, -1)
        if c.sp:
            # the split to the sequence-parallel shard (no comm) follows the add; its backward
            # all-gathers the gradient, so the position-embedding grads are identical on all TP ranks
            pu.bwd.insert(0, (comm("embedding_ag_bwd", "all_gather", "tp", size, -1, "bwd"), 0, 0))
        units.append(pu)
    if c.dropout:
        n = Tsp * h
        units.append(tag(Unit([compute("embedding_dropout", "dropout", {"numel": n}, c.act, n, 2 * ab * n + n,
                                       "fwd", -1, saved=n)],
                              [(compute("embedding_dropout_bwd", "dropout", {"numel": n}, c.act, n, 2 * ab * n + n,
                                        "bwd", -1), 0, 0)]), "dropout"))
    return units


def embedding_train_units(c: Ctx) -> list[Unit]:
    """Embedding units plus the gradient accumulation Megatron's DDP backward hook performs for
    parameters without fused weight-gradient accumulation (the embedding tables): every micro-batch
    `main_grad.add_(grad)` over the whole [vocab/tp, hidden] (+ positions) table, since torch's
    embedding backward produces a dense gradient. The parameters' gradients are ready after it."""
    from workload_gen import dp_comm  # dp_comm imports this module
    units = embedding_units(c)
    first = units[0]
    (wgrad, dense, expert), rest = first.bwd[0], first.bwd[1:]
    numel = dense + expert
    gdtype = dp_comm.grad_reduce_dtype(c.plan)
    add = ComputeOp(name="embedding_main_grad_add", kind="elementwise", shape=(("numel", numel),), dtype=gdtype,
                    flops=float(numel), bytes=float(numel * (4 + 2 + 4)), variant="bwd", layer=-1, phase="bwd")
    units[0] = Unit(first.fwd, [(wgrad, 0, 0), (add, dense, expert), *rest], first.recompute, first.saved,
                    first.temp)
    return units


def head_units(c: Ctx) -> list[Unit]:
    """Final norm, vocab-parallel LM head (column-parallel) and vocab-parallel cross-entropy."""
    m, T, Tsp, h, ab, t = c.model, c.tokens, c.tokens_sp, c.h, c.ab, c.t
    units = [norm(c, "final_norm", Tsp, h, -1, saved=ab * Tsp * h)]
    # tied + pp == 1: the LM head reuses the embedding matrix; its grad accumulates into the same tensor
    head_params = c.vocab_rank * h if (not m.tie_embeddings or c.plan.pp > 1) else 0
    lm = column_unit(c, "lm_head", "lm_head", T, c.vocab_rank, h, -1, ab * Tsp * h, head_params)
    lm.temp["lm_head"] = lm.temp.get("lm_head", 0) + ab * T * c.vocab_rank     # its 16-bit logits
    units.append(lm)
    dims = {"tokens": T, "vocab": c.vocab_rank}
    n = T * c.vocab_rank
    ce = Unit([compute("cross_entropy", "cross_entropy", dims, "fp32", 6.0 * n, 4 * n + ab * n, "fwd", -1,
                       saved=4 * n)],
              [(compute("cross_entropy_bwd", "cross_entropy", dims, "fp32", 3.0 * n, 4 * n + ab * n, "bwd", -1),
                0, 0)])
    if t > 1:
        # vocab-parallel softmax: all-reduce of the max logit, the sum of exps and the target logit
        ops = []
        for i, nm in enumerate(("cross_entropy_max_ar", "cross_entropy_sum_ar", "cross_entropy_target_ar")):
            ops.append(compute(f"cross_entropy_{i + 1}", "cross_entropy", dims, "fp32", 2.0 * n, 4 * n, "fwd", -1,
                               saved=4 * n if i == 0 else 0))
            ops.append(comm(nm, "all_reduce", "tp", 4 * T, -1, "fwd", dtype="fp32"))
        ce.fwd = ops
    # the fp32 upcast of the logits becomes the saved softmax in place; the 16-bit logits are the temporary
    tag(ce, "loss", temp={ce.fwd[0].name: ab * n})
    units.append(ce)
    return units


def recompute_ops(units: list[Unit], full: bool) -> list[Op]:
    """Forward ops re-issued at the start of a layer's backward (phase "recompute")."""
    out: list[Op] = []
    for u in units:
        if full or u.core:
            out += [replace(op, phase="recompute") for op in u.fwd]
    return out


def full_recompute_saved(units: list[Unit], c: Ctx) -> list[Unit]:
    """Forward ops of a fully recomputed layer keep only the layer input (on the first op)."""
    first = True
    out = []
    for u in units:
        fwd = []
        for op in u.fwd:
            if isinstance(op, ComputeOp):
                op = replace(op, saved_bytes=c.ab * c.tokens_sp * c.h if first else 0)
                first = False
            fwd.append(op)
        out.append(Unit(fwd, u.bwd, u.recompute, u.saved, u.temp))
    return out
