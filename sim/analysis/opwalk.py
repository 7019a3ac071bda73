"""Analytical op walk of one transformer layer on one rank: kernels, FLOPs, bytes, saved activations.

This is analysis's own closed-form view of the kernels `workload_gen` emits, used where building a full
Workload per candidate would be too slow (search screening) or is not available. Per rank, per
micro-batch, SI units. Activation accounting follows Korthikanti et al. ("Reducing Activation
Recomputation in Large Transformer Models"): each forward kernel keeps its input for backward;
dropout masks are 1 byte per element; softmax keeps its output; 16-bit activations.

Every saved tensor carries a *component* that recompute policies act on:
- "norm_in":    a norm's input (the residual stream); always kept.
- "norm_out":   a GEMM input that is a norm's output (QKV, MLP fc1, router input): dropped by norm recompute.
- "attn_core":  attention scores / softmax / attention dropout (non-flash), softmax stats (flash):
                dropped by selective attention recompute (Korthikanti's "selective").
- "qkv":        Q, K, V (inputs of the attention core) and the inputs of per-head Q/K norms: kept under
                selective recompute.
- "attn_linear": attention output-projection input and MLA low-rank tensors.
- "mlp_act":    activation-function input and fc2 input (dense, shared and routed experts): dropped by MLP recompute.
- "moe":        dispatched expert input tokens and router probabilities.
- "dropout":    residual dropout masks.
Modelled: GEMM/attention/norm (incl. per-head Q/K norms)/activation/dropout/MoE-dispatch tensors and
routing probabilities. Ignored: RoPE caches, bias gradients, fp32 aux-loss tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

BYTES_16 = 2
COMPONENTS = ("norm_in", "norm_out", "attn_core", "qkv", "attn_linear", "mlp_act", "moe", "dropout")


@dataclass(frozen=True)
class WalkOp:
    """One forward kernel of the walk (per rank, per micro-batch)."""
    name: str
    kind: str                              # workload_gen COMPUTE_KINDS key
    shape: tuple[tuple[str, int], ...]
    flops: float                           # forward FLOPs
    bytes: float                           # forward HBM bytes read + written
    saved_bytes: int = 0                   # bytes kept for backward
    component: str = ""                    # see module docstring
    transient_bytes: int = 0               # output/temporary alive only while this op runs (fwd)
    bwd_factor: float = 2.0                # backward FLOPs / forward FLOPs
    causal: bool = False


@dataclass(frozen=True)
class WalkComm:
    """A collective on the critical path of one layer's forward (backward mirrors it)."""
    name: str
    collective: str
    group: str                             # workload_gen GROUP_KINDS
    size_bytes: int                        # nccl-tests buffer size S
    overlappable_s_with: str = ""          # name of the op it may hide behind ("" = exposed)


@dataclass
class LayerWalk:
    layer: int
    ops: list[WalkOp] = field(default_factory=list)
    comms: list[WalkComm] = field(default_factory=list)

    def saved_bytes(self, drop: frozenset[str] = frozenset()) -> int:
        return int(sum(o.saved_bytes for o in self.ops if o.component not in drop))

    @property
    def fwd_flops(self) -> float:
        return sum(o.flops for o in self.ops)


@dataclass(frozen=True)
class Dims:
    """Per-rank sizes of one layer for a (model, plan)."""
    s: int        # full sequence length
    b: int        # micro-batch size
    T: int        # tokens per rank in the attention/MLP GEMMs (b*s/cp)
    t: int        # tensor parallel
    tsp: int      # divisor of "replicated" tensors: t with sequence parallel, else 1
    cp: int
    h: int
    a: int
    kv: int
    d: int
    dv: int
    vocab: int    # padded vocabulary
    dropout: bool
    flash: bool


_ATTN_CORE_OPS = ("attn_core", "attn_core_lse", "attn_qk", "attn_softmax", "attn_dropout", "attn_pv")


def recompute_group(op: WalkOp) -> str:
    """Which selective-recompute choice re-runs this forward op: "attn" | "mlp" | "norm" | ""."""
    if op.name in _ATTN_CORE_OPS:
        return "attn"
    if op.name.startswith(("mlp_", "moe_")) and op.name.endswith(("_fc1", "_act")):
        return "mlp"
    if op.name in ("attn_norm", "mlp_norm"):
        return "norm"
    return ""


def model_dims(model, plan) -> Dims:
    a = model.num_attention_heads
    d = model.head_dim or model.hidden_size // a
    t = plan.tp
    sp = bool(plan.sequence_parallel) and t > 1
    return Dims(s=plan.seq_length, b=plan.micro_batch_size, T=plan.micro_batch_size * plan.seq_length // plan.cp,
                t=t, tsp=t if sp else 1, cp=plan.cp, h=model.hidden_size, a=a,
                kv=model.num_kv_heads or a, d=d, dv=model.v_head_dim or d,
                vocab=padded_vocab(model, t), dropout=has_dropout(model), flash=bool(plan.flash_attention))


def has_dropout(model) -> bool:
    """GPT-style models train with attention/hidden dropout (Megatron default 0.1); Llama-style do not.

    Override with ModelSpec.extra["dropout"] (bool)."""
    if "dropout" in model.extra:
        return bool(model.extra["dropout"])
    return model.activation == "gelu" and model.norm == "layernorm"


def padded_vocab(model, tp: int) -> int:
    try:
        from workload_gen.vocab import padded_vocab_size
        return int(padded_vocab_size(model.vocab_size, tp, model.make_vocab_size_divisible_by))
    except ImportError:
        m = model.make_vocab_size_divisible_by * tp
        return -(-model.vocab_size // m) * m


def is_moe_layer(model, layer: int) -> bool:
    fn = getattr(model, "layer_is_moe", None)
    if fn is not None:
        return bool(fn(layer))
    if model.num_experts <= 0 or layer < model.num_dense_layers:
        return False
    return (layer - model.num_dense_layers) % max(1, model.moe_layer_freq) == 0


def _gemm(name, m, n, k, saved, component, transient=0) -> WalkOp:
    return WalkOp(name, "gemm", (("m", m), ("n", n), ("k", k)), 2.0 * m * n * k,
                  BYTES_16 * (m * k + k * n + m * n), int(saved), component, int(transient))


def _eltwise(name, kind, shape, numel, saved, component, reads=1, writes=1, flops_per=4.0) -> WalkOp:
    return WalkOp(name, kind, shape, flops_per * numel, BYTES_16 * numel * (reads + writes), int(saved),
                  component, 0, bwd_factor=1.5)


def layer_walk(model, plan, layer: int, dims: Dims | None = None) -> LayerWalk:
    """Forward kernels and critical-path collectives of global layer `layer` on one rank."""
    D = dims or model_dims(model, plan)
    T, t, tsp, h = D.T, D.t, D.tsp, D.h
    Tl = T // tsp                                  # tokens held by this rank between TP regions
    w = LayerWalk(layer)
    ops = w.ops
    norm_kind = "rmsnorm" if model.norm == "rmsnorm" else "layernorm"
    sp = tsp > 1

    # ---- attention block ----
    ops.append(_eltwise("attn_norm", norm_kind, (("tokens", Tl), ("hidden", h)), Tl * h,
                        BYTES_16 * Tl * h, "norm_in"))
    if t > 1:
        w.comms.append(WalkComm("attn_sp_ag" if sp else "attn_tp_fwd_noop", "all_gather" if sp else "none",
                                "tp", BYTES_16 * T * h))
    if model.attention == "mla":
        ql, kvl = model.q_lora_rank, model.kv_lora_rank
        dqk = (model.qk_nope_head_dim or D.d) + (model.qk_rope_head_dim or 0)
        nope = model.qk_nope_head_dim or D.d
        rope = model.qk_rope_head_dim or 0
        first = True
        if ql:
            ops.append(_gemm("attn_q_down", T, ql, h, BYTES_16 * Tl * h, "norm_out", BYTES_16 * T * h if sp else 0))
            first = False
            ops.append(_eltwise("attn_q_norm", "rmsnorm", (("tokens", T), ("hidden", ql)), T * ql,
                                BYTES_16 * T * ql, "attn_linear"))
            ops.append(_gemm("attn_q_up", T, D.a * dqk // t, ql, BYTES_16 * T * ql, "attn_linear"))
        else:
            ops.append(_gemm("attn_q", T, D.a * dqk // t, h, BYTES_16 * Tl * h, "norm_out",
                             BYTES_16 * T * h if sp else 0))
            first = False
        ops.append(_gemm("attn_kv_down", T, kvl + rope, h, 0 if not first else BYTES_16 * Tl * h, "norm_out"))
        ops.append(_eltwise("attn_kv_norm", "rmsnorm", (("tokens", T), ("hidden", kvl)), T * kvl,
                            BYTES_16 * T * kvl, "attn_linear"))
        ops.append(_gemm("attn_kv_up", T, D.a * (nope + D.dv) // t, kvl, BYTES_16 * T * kvl, "attn_linear"))
        q_el = T * D.a * dqk // t
        k_el = T * D.a * dqk // t
        v_el = T * D.a * D.dv // t
        heads_kv, dqk_core = D.a, dqk
    else:
        n_qkv = (D.a + 2 * D.kv) * D.d // t
        ops.append(_gemm("attn_qkv", T, n_qkv, h, BYTES_16 * Tl * h, "norm_out", BYTES_16 * T * h if sp else 0))
        q_el = T * D.a * D.d // t
        k_el = T * D.kv * D.d // t
        v_el = T * D.kv * D.dv // t
        if model.qk_layernorm:
            # per-head Q and K norms (Qwen3): each keeps its input (Q and K) for backward
            rows = T * (D.a + D.kv) // t
            ops.append(_eltwise("attn_qk_norm", norm_kind, (("tokens", rows), ("hidden", D.d)), rows * D.d,
                                BYTES_16 * (q_el + k_el), "qkv"))
        heads_kv, dqk_core = D.kv, D.d
    if model.position_embedding == "rope":
        ops.append(_eltwise("attn_rotary", "rotary", (("tokens", T), ("heads", D.a // t), ("head_dim", dqk_core)),
                            q_el + k_el, 0, "", flops_per=3.0))
    ah = D.a // t
    sq, skv = D.s // D.cp, D.s
    if D.cp > 1:
        # K/V of the other CP ranks arrive in a ring of (cp-1) steps, overlapped with attention compute.
        w.comms.append(WalkComm("attn_cp_kv", "send", "cp", BYTES_16 * (k_el + v_el) * (D.cp - 1),
                                "attn_core"))
    core_flops = 2.0 * D.b * ah * sq * skv * (dqk_core + D.dv)
    if D.flash:
        ops.append(WalkOp("attn_core", "flash_attn",
                          (("batch", D.b), ("seq_q", sq), ("seq_kv", skv), ("heads", ah),
                           ("kv_heads", max(1, heads_kv // t)), ("head_dim_qk", dqk_core), ("head_dim_v", D.dv)),
                          core_flops, BYTES_16 * (q_el + k_el + v_el + T * ah * D.dv),
                          BYTES_16 * (q_el + k_el + v_el), "qkv", 0, bwd_factor=2.5, causal=True))
        # softmax statistics (fp32 log-sum-exp per query row and head)
        ops.append(WalkOp("attn_core_lse", "elementwise", (("numel", D.b * ah * sq),), 0.0, 0.0,
                          4 * D.b * ah * sq, "attn_core"))
    else:
        score = D.b * ah * sq * skv
        ops.append(WalkOp("attn_qk", "attn_bmm", (("batch", D.b * ah), ("m", sq), ("n", skv), ("k", dqk_core)),
                          2.0 * score * dqk_core, BYTES_16 * (q_el + k_el + score),
                          BYTES_16 * (q_el + k_el), "qkv", BYTES_16 * score))
        ops.append(WalkOp("attn_softmax", "softmax", (("rows", D.b * ah * sq), ("cols", skv)), 5.0 * score,
                          2 * BYTES_16 * score, BYTES_16 * score, "attn_core", BYTES_16 * score, bwd_factor=1.5))
        if D.dropout:
            ops.append(WalkOp("attn_dropout", "dropout", (("numel", score),), 2.0 * score, 3 * BYTES_16 * score,
                              3 * score, "attn_core", BYTES_16 * score, bwd_factor=1.0))
        ops.append(WalkOp("attn_pv", "attn_bmm", (("batch", D.b * ah), ("m", sq), ("n", D.dv), ("k", skv)),
                          2.0 * score * D.dv, BYTES_16 * (score + v_el + T * ah * D.dv),
                          BYTES_16 * v_el, "qkv"))
    ops.append(_gemm("attn_proj", T, h, D.a * D.dv // t, BYTES_16 * T * D.a * D.dv // t, "attn_linear",
                     BYTES_16 * T * h if t > 1 else 0))
    if t > 1:
        w.comms.append(WalkComm("attn_sp_rs" if sp else "attn_tp_ar", "reduce_scatter" if sp else "all_reduce",
                                "tp", BYTES_16 * T * h))
    ops.append(_eltwise("attn_residual", "dropout" if D.dropout else "elementwise", (("numel", Tl * h),),
                        Tl * h, Tl * h if D.dropout else 0, "dropout", reads=2))

    # ---- MLP block ----
    ops.append(_eltwise("mlp_norm", norm_kind, (("tokens", Tl), ("hidden", h)), Tl * h,
                        BYTES_16 * Tl * h, "norm_in"))
    gated = model.activation == "swiglu"
    act_kind = "swiglu" if gated else "gelu"
    if is_moe_layer(model, layer):
        _moe_block(model, plan, D, w, gated, act_kind)
    else:
        if t > 1 and sp:
            w.comms.append(WalkComm("mlp_sp_ag", "all_gather", "tp", BYTES_16 * T * h))
        F = model.ffn_hidden_size // t
        _dense_mlp(ops, "mlp", T, h, F, gated, act_kind, BYTES_16 * Tl * h, sp)
        if t > 1:
            w.comms.append(WalkComm("mlp_sp_rs" if sp else "mlp_tp_ar", "reduce_scatter" if sp else "all_reduce",
                                    "tp", BYTES_16 * T * h))
    ops.append(_eltwise("mlp_residual", "dropout" if D.dropout else "elementwise", (("numel", Tl * h),),
                        Tl * h, Tl * h if D.dropout else 0, "dropout", reads=2))
    return w


def _dense_mlp(ops, prefix, T, h, F, gated, act_kind, fc1_saved, sp) -> None:
    width = 2 * F if gated else F
    ops.append(_gemm(f"{prefix}_fc1", T, width, h, fc1_saved, "norm_out", BYTES_16 * T * h if sp else 0))
    ops.append(WalkOp(f"{prefix}_act", act_kind, (("tokens", T), ("width", F)), 8.0 * T * F,
                      BYTES_16 * T * (width + F), BYTES_16 * T * width, "mlp_act", 0, bwd_factor=1.5))
    ops.append(_gemm(f"{prefix}_fc2", T, h, F, BYTES_16 * T * F, "mlp_act"))


def _moe_block(model, plan, D: Dims, w: LayerWalk, gated: bool, act_kind: str) -> None:
    ops = w.ops
    T, t, tsp, h = D.T, D.t, D.tsp, D.h
    Tl = T // tsp
    E, k = model.num_experts, max(1, model.moe_top_k)
    ep, etp = plan.ep, plan.expert_tp
    ops.append(_gemm("moe_router", Tl, E, h, BYTES_16 * Tl * h, "norm_out"))
    ops.append(WalkOp("moe_router_topk", "router_topk", (("tokens", Tl), ("experts", E), ("topk", k)),
                      6.0 * Tl * E, 4 * Tl * E * 2, 4 * Tl * E, "moe", 0, bwd_factor=1.0))
    routed = Tl * k
    ops.append(WalkOp("moe_permute", "permute", (("tokens", Tl), ("hidden", h), ("topk", k)), 0.0,
                      BYTES_16 * 2 * routed * h, 0, "moe", BYTES_16 * routed * h, bwd_factor=1.0))
    if ep > 1:
        w.comms.append(WalkComm("moe_dispatch_a2a", "all_to_all", "ep", BYTES_16 * routed * h))
    Te = routed * etp                               # tokens an expert-TP rank processes (gathered over etp)
    if etp > 1:
        w.comms.append(WalkComm("moe_etp_ag", "all_gather", "etp", BYTES_16 * Te * h))
    local = max(1, E // ep)
    Fe = (model.moe_ffn_hidden_size or model.ffn_hidden_size) // etp
    width = 2 * Fe if gated else Fe
    m = max(1, Te // local)
    ops.append(WalkOp("moe_fc1", "grouped_gemm", (("groups", local), ("m", m), ("n", width), ("k", h)),
                      2.0 * Te * width * h, BYTES_16 * (Te * h + local * h * width + Te * width),
                      BYTES_16 * Te * h, "moe"))
    ops.append(WalkOp("moe_act", act_kind, (("tokens", Te), ("width", Fe)), 8.0 * Te * Fe,
                      BYTES_16 * Te * (width + Fe), BYTES_16 * Te * width, "mlp_act", 0, bwd_factor=1.5))
    ops.append(WalkOp("moe_fc2", "grouped_gemm", (("groups", local), ("m", m), ("n", h), ("k", Fe)),
                      2.0 * Te * Fe * h, BYTES_16 * (Te * Fe + local * Fe * h + Te * h),
                      BYTES_16 * Te * Fe, "mlp_act", BYTES_16 * Te * h))
    if etp > 1:
        w.comms.append(WalkComm("moe_etp_rs", "reduce_scatter", "etp", BYTES_16 * Te * h))
    if ep > 1:
        w.comms.append(WalkComm("moe_combine_a2a", "all_to_all", "ep", BYTES_16 * routed * h))
    # unpermute weights each expert output by its fp32 routing probability (kept for backward: 4 B x k per token)
    ops.append(WalkOp("moe_unpermute", "unpermute", (("tokens", Tl), ("hidden", h), ("topk", k)), 2.0 * routed * h,
                      BYTES_16 * (routed * h + Tl * h), 4 * routed, "moe", BYTES_16 * routed * h, bwd_factor=1.0))
    if model.num_shared_experts > 0:
        Fs = (model.shared_expert_ffn_hidden_size or model.moe_ffn_hidden_size or model.ffn_hidden_size)
        Fs = Fs * model.num_shared_experts // t
        # the shared expert reads the same (already saved) norm output: no second copy
        _dense_mlp(ops, "moe_shared", T, h, Fs, gated, act_kind, 0, tsp > 1)


def embedding_walk(model, plan, dims: Dims | None = None) -> list[WalkOp]:
    """Ops before layer 0 on the first stage (embedding lookup, positions, dropout)."""
    D = dims or model_dims(model, plan)
    Tl = D.T // D.tsp
    ops = [WalkOp("embedding", "embedding", (("tokens", Tl), ("hidden", D.h), ("vocab", D.vocab // D.t)),
                  0.0, BYTES_16 * 2 * Tl * D.h, 0, "", BYTES_16 * D.T * D.h if D.t > 1 else 0, bwd_factor=1.0)]
    if D.dropout:
        ops.append(_eltwise("embedding_dropout", "dropout", (("numel", Tl * D.h),), Tl * D.h, Tl * D.h, "dropout"))
    return ops


def output_walk(model, plan, dims: Dims | None = None) -> list[WalkOp]:
    """Ops after the last layer on the last stage: final norm, LM head, vocab-parallel cross-entropy.

    The cross-entropy upcasts the 16-bit logits to fp32 and turns that copy into the softmax in place
    (Megatron's vocab-parallel cross-entropy): the fp32 softmax (4 B per logit) is kept for backward,
    the 16-bit logits (2 B per logit) are the transient. Backward forms the fp32 gradient in place in
    the saved softmax and casts it to a 16-bit gradient (2 B per logit)."""
    D = dims or model_dims(model, plan)
    T, Tl, h = D.T, D.T // D.tsp, D.h
    Vt = D.vocab // D.t
    norm_kind = "rmsnorm" if model.norm == "rmsnorm" else "layernorm"
    return [
        _eltwise("final_norm", norm_kind, (("tokens", Tl), ("hidden", h)), Tl * h, BYTES_16 * Tl * h, "norm_in"),
        _gemm("lm_head", T, Vt, h, BYTES_16 * Tl * h, "norm_out", BYTES_16 * T * Vt),
        WalkOp("cross_entropy", "cross_entropy", (("tokens", T), ("vocab", Vt)), 6.0 * T * Vt,
               (BYTES_16 + 4 + 4) * T * Vt, 4 * T * Vt, "", BYTES_16 * T * Vt, bwd_factor=1.0),
    ]
