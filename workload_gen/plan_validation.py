"""Model and plan validation: every invalid combination raises ONE line naming the field and the rule.

Messages read "plan.<field>: <rule> (got ...)" or "model.<field>: <rule> (got ...)". Rules follow
Megatron-LM / megatron-core and DeepSpeed argument checks. Decisions where those tools silently
change the user's setting (we refuse instead, so a plan means what it says):
- sequence_parallel with tp == 1 is rejected (Megatron quietly turns it off);
- MoE with tp > 1 and ep > 1 requires sequence_parallel (megatron-core asserts it).
"""

from __future__ import annotations

from workload_gen.errors import PlanError, WorkloadError
from workload_gen.layout import stage_layer_counts
from workload_gen.limits import (
    ALLOW_HUGE_ENV,
    MAX_DIM,
    MAX_LAYERS,
    MAX_MICROBATCHES,
    MAX_PP,
    MAX_WORLD_SIZE,
    allow_huge,
    check_max,
    show_int,
)
from workload_gen.model import ModelSpec
from workload_gen.plan import DTYPES, FRAMEWORKS, GRAD_REDUCE_DTYPES, RECOMPUTE, ParallelPlan

ACTIVATIONS = ("gelu", "swiglu")
NORMS = ("layernorm", "rmsnorm")
POSITION_EMBEDDINGS = ("learned", "rope")
ATTENTIONS = ("mha", "mla")
CP_COMM_TYPES = ("p2p", "a2a")
RANK_DIMS = ("tp", "cp", "ep", "dp", "pp")


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _positive(prefix: str, name: str, v, *, optional: bool = False, exc=PlanError, bound: int = MAX_DIM) -> None:
    if optional and v is None:
        return
    if not _is_int(v) or v <= 0:
        raise exc(f"{prefix}.{name}: must be a positive integer (got {_show(v)})")
    check_max(f"{prefix}.{name}", v, bound, exc)


def _show(v) -> str:
    return show_int(v) if _is_int(v) else repr(v)


def _choice(prefix: str, name: str, v, allowed, exc=PlanError) -> None:
    if v not in allowed:
        raise exc(f"{prefix}.{name}: must be one of {', '.join(map(str, allowed))} (got {v!r})")


def _bool(name: str, v) -> None:
    if not isinstance(v, bool):
        raise PlanError(f"plan.{name}: must be true or false (got {v!r})")


def validate_model(model: ModelSpec) -> None:
    """Raise WorkloadError naming the first inconsistent ModelSpec field."""
    E = WorkloadError
    _positive("model", "num_layers", model.num_layers, exc=E, bound=MAX_LAYERS)
    for f in ("hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size",
              "seq_length", "make_vocab_size_divisible_by", "moe_layer_freq"):
        _positive("model", f, getattr(model, f), exc=E)
    for f in ("num_kv_heads", "head_dim", "moe_ffn_hidden_size", "shared_expert_ffn_hidden_size",
              "q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
        _positive("model", f, getattr(model, f), optional=True, exc=E)
    for f in ("num_experts", "moe_top_k", "num_shared_experts", "num_dense_layers"):
        v = getattr(model, f)
        if not _is_int(v) or v < 0:
            raise E(f"model.{f}: must be a non-negative integer (got {_show(v)})")
        check_max(f"model.{f}", v, MAX_DIM, E)
    _choice("model", "activation", model.activation, ACTIVATIONS, E)
    _choice("model", "norm", model.norm, NORMS, E)
    _choice("model", "position_embedding", model.position_embedding, POSITION_EMBEDDINGS, E)
    _choice("model", "attention", model.attention, ATTENTIONS, E)
    for f in ("tie_embeddings", "add_bias_linear", "add_qkv_bias", "qk_layernorm"):
        if not isinstance(getattr(model, f), bool):
            raise E(f"model.{f}: must be true or false (got {getattr(model, f)!r})")
    if model.is_mla:
        for f in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            if getattr(model, f) is None:
                raise E(f"model.{f}: required when attention is 'mla' (got None)")
    else:
        if model.head_dim is None and model.hidden_size % model.num_attention_heads:
            raise E(f"model.num_attention_heads: must divide hidden_size when head_dim is not set "
                    f"(got {model.num_attention_heads} heads, hidden_size={model.hidden_size})")
        if model.num_attention_heads % model.kv_heads:
            raise E(f"model.num_kv_heads: must divide num_attention_heads "
                    f"(got {model.kv_heads} KV heads, {model.num_attention_heads} heads)")
    pattern = model.moe_layer_pattern
    if pattern is not None and (not isinstance(pattern, tuple) or len(pattern) != model.num_layers
                                or any(not _is_int(v) or v not in (0, 1) for v in pattern)):
        raise E(f"model.moe_layer_pattern: must hold one 0/1 per layer (num_layers={model.num_layers}) "
                f"(got {pattern!r})")
    if model.num_experts:
        if not 1 <= model.moe_top_k <= model.num_experts:
            raise E(f"model.moe_top_k: must be in 1..num_experts={model.num_experts} (got {model.moe_top_k})")
        if model.num_dense_layers >= model.num_layers:
            raise E(f"model.num_dense_layers: must be below num_layers={model.num_layers} "
                    f"(got {model.num_dense_layers})")
    elif model.moe_top_k or model.num_shared_experts:
        raise E(f"model.num_experts: moe_top_k / num_shared_experts need num_experts > 0 "
                f"(got num_experts=0, moe_top_k={model.moe_top_k}, "
                f"num_shared_experts={model.num_shared_experts})")


_BUCKET_BOUND = 1 << 40   # elements; buckets only split a size, they allocate nothing


def _check_types(plan: ParallelPlan) -> None:
    # degrees first: a world size derived from a bad --tp/--pp would otherwise take the blame
    _positive("plan", "pp", plan.pp, bound=MAX_PP)
    for f in ("tp", "cp", "ep", "vpp"):
        _positive("plan", f, getattr(plan, f), bound=MAX_WORLD_SIZE)
    _positive("plan", "world_size", plan.world_size, bound=MAX_WORLD_SIZE)
    for f in ("micro_batch_size", "global_batch_size", "seq_length"):
        _positive("plan", f, getattr(plan, f))
    for f in ("reduce_bucket_elements", "allgather_bucket_elements", "grad_bucket_elements"):
        _positive("plan", f, getattr(plan, f), bound=_BUCKET_BOUND)
    for f in ("etp", "num_layers_first_stage", "num_layers_last_stage", "recompute_num_layers"):
        _positive("plan", f, getattr(plan, f), optional=True)
    for f in ("sequence_parallel", "distributed_optimizer", "flash_attention", "tp_comm_overlap",
              "moe_grouped_gemm", "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p_comm"):
        _bool(f, getattr(plan, f))
    _choice("plan", "framework", plan.framework, FRAMEWORKS)
    _choice("plan", "dtype", plan.dtype, DTYPES)
    _choice("plan", "recompute", plan.recompute, RECOMPUTE)
    _choice("plan", "cp_comm_type", plan.cp_comm_type, CP_COMM_TYPES)
    _choice("plan", "grad_reduce_dtype", plan.grad_reduce_dtype, GRAD_REDUCE_DTYPES)
    if not _is_int(plan.zero_stage) or not 0 <= plan.zero_stage <= 3:
        raise PlanError(f"plan.zero_stage: must be 0, 1, 2 or 3 (got {plan.zero_stage!r})")
    order = plan.rank_order.split("-") if isinstance(plan.rank_order, str) else None
    if order is None or sorted(order) != sorted(RANK_DIMS):
        raise PlanError(f"plan.rank_order: must be a '-'-joined permutation of tp, cp, ep, dp, pp "
                        f"(got {plan.rank_order!r})")


def validate_grad_reduce_dtype(dtype: str, grad_reduce_dtype: str) -> None:
    """16-bit gradients live in the parameter dtype (fp8 training keeps bf16 parameters); fp32 always works.
    Separate so that a plan search can reject a fixed --grad-reduce-dtype before enumerating plans."""
    _choice("plan", "grad_reduce_dtype", grad_reduce_dtype, GRAD_REDUCE_DTYPES)
    if grad_reduce_dtype in ("bf16", "fp16"):
        params16 = "fp16" if dtype == "fp16" else "bf16"
        if grad_reduce_dtype != params16:
            raise PlanError(f"plan.grad_reduce_dtype: 16-bit gradients are in the parameter dtype "
                            f"({params16} for dtype {dtype}); use {params16} or fp32 (got {grad_reduce_dtype})")


def validate_plan(model: ModelSpec, plan: ParallelPlan) -> None:
    """Raise PlanError (one line naming the field and the rule) if `plan` cannot train `model`."""
    validate_model(model)
    _check_types(plan)
    tp, pp, cp, ep, etp, vpp = plan.tp, plan.pp, plan.cp, plan.ep, plan.expert_tp, plan.vpp
    mp = tp * cp * pp
    if plan.world_size % mp:
        raise PlanError(f"plan.world_size: must be divisible by tp*cp*pp = {mp} "
                        f"(got world_size={plan.world_size}, tp={tp}, cp={cp}, pp={pp})")
    dp = plan.dp

    # ---- tensor parallel ----
    heads = model.num_attention_heads
    if heads % tp:
        raise PlanError(f"plan.tp: must divide num_attention_heads (got tp={tp}, heads={heads})")
    if not model.is_mla and model.kv_heads % tp:
        raise PlanError(f"plan.tp: must divide the KV heads (got tp={tp}, num_kv_heads={model.kv_heads})")
    if (not model.is_moe or len(model.moe_layer_ids) < model.num_layers) and model.ffn_hidden_size % tp:
        raise PlanError(f"plan.tp: must divide ffn_hidden_size (got tp={tp}, "
                        f"ffn_hidden_size={model.ffn_hidden_size})")
    if model.num_shared_experts and model.shared_expert_total_ffn % tp:
        raise PlanError(f"plan.tp: must divide the shared-expert FFN width "
                        f"(got tp={tp}, width={model.shared_expert_total_ffn})")
    if plan.sequence_parallel:
        if tp == 1:
            raise PlanError("plan.sequence_parallel: needs tp > 1 (Megatron ignores it at tp=1; set it "
                            "to false) (got tp=1)")
        if (plan.seq_length // cp) % tp or plan.seq_length % cp:
            raise PlanError(f"plan.seq_length: with sequence_parallel the per-CP-rank sequence must be "
                            f"divisible by tp (got seq_length={plan.seq_length}, cp={cp}, tp={tp})")
    if plan.tp_comm_overlap and not plan.sequence_parallel:
        raise PlanError(f"plan.tp_comm_overlap: needs sequence_parallel and tp > 1 "
                        f"(got sequence_parallel={plan.sequence_parallel}, tp={tp})")

    # ---- pipeline ----
    if pp > model.num_layers:
        raise PlanError(f"plan.pp: must not exceed num_layers (got pp={pp}, num_layers={model.num_layers})")
    if vpp > 1 and pp == 1:
        raise PlanError(f"plan.vpp: virtual pipeline chunks need pp > 1 (got vpp={vpp}, pp=1)")
    counts = stage_layer_counts(model, plan)
    for s, c in enumerate(counts):
        if c % vpp:
            # uneven pipeline with VPP (megatron-core): the first/last stage counts and the even
            # split of the rest are each cut into vpp chunks
            if s == 0 and plan.num_layers_first_stage is not None:
                raise PlanError(f"plan.num_layers_first_stage: must be divisible by vpp (each stage's "
                                f"layers are split over vpp chunks) (got {c}, vpp={vpp})")
            if s == pp - 1 and plan.num_layers_last_stage is not None:
                raise PlanError(f"plan.num_layers_last_stage: must be divisible by vpp (each stage's "
                                f"layers are split over vpp chunks) (got {c}, vpp={vpp})")
            raise PlanError(f"plan.vpp: layers per stage must be divisible by vpp "
                            f"(got stage {s} with {c} layers, vpp={vpp})")

    # ---- context parallel ----
    if cp > 1:
        if plan.cp_comm_type == "p2p" and plan.seq_length % (2 * cp):
            raise PlanError(f"plan.seq_length: must be divisible by 2*cp = {2 * cp} for load-balanced "
                            f"causal context parallelism (got {plan.seq_length})")
        if plan.cp_comm_type == "a2a":
            if plan.seq_length % cp:
                raise PlanError(f"plan.seq_length: must be divisible by cp={cp} (got {plan.seq_length})")
            if (heads // tp) % cp or (not model.is_mla and model.kv_heads % (tp * cp)):
                raise PlanError(f"plan.cp: all-to-all context parallelism needs heads and KV heads per "
                                f"TP rank divisible by cp (got cp={cp}, heads={heads}, "
                                f"kv_heads={model.kv_heads}, tp={tp})")
        if not plan.flash_attention:
            raise PlanError(f"plan.flash_attention: context parallelism needs flash attention (got cp={cp})")

    # ---- experts ----
    if not model.is_moe:
        if ep > 1:
            raise PlanError(f"plan.ep: expert parallelism needs an MoE model ({model.name} is dense) "
                            f"(got ep={ep})")
    else:
        if model.num_experts % ep:
            raise PlanError(f"plan.ep: must divide num_experts (got ep={ep}, "
                            f"num_experts={model.num_experts})")
        stage_ranks = tp * cp * dp
        if stage_ranks % (ep * etp):
            raise PlanError(f"plan.ep: ep*etp = {ep * etp} must divide tp*cp*dp = {stage_ranks} "
                            f"(got ep={ep}, etp={etp}, tp={tp}, cp={cp}, dp={dp})")
        if model.expert_ffn_hidden_size % etp:
            raise PlanError(f"plan.etp: must divide the expert FFN width (got etp={etp}, "
                            f"moe_ffn_hidden_size={model.expert_ffn_hidden_size})")
        if tp > 1 and ep > 1 and not plan.sequence_parallel:
            raise PlanError(f"plan.sequence_parallel: megatron-core requires it for MoE with tp > 1 and "
                            f"ep > 1 (got tp={tp}, ep={ep})")

    # ---- batch ----
    if plan.global_batch_size % (plan.micro_batch_size * dp):
        raise PlanError(f"plan.global_batch_size: must be divisible by micro_batch_size*dp = "
                        f"{plan.micro_batch_size * dp} (got {plan.global_batch_size}, "
                        f"micro_batch_size={plan.micro_batch_size}, dp={dp})")

    n_micro = plan.global_batch_size // (plan.micro_batch_size * dp)
    if n_micro > MAX_MICROBATCHES and not allow_huge():
        raise PlanError(f"plan.global_batch_size: {n_micro} micro-batches per iteration "
                        f"(global_batch_size / (micro_batch_size*dp)) exceeds the limit of {MAX_MICROBATCHES:,} "
                        f"(set {ALLOW_HUGE_ENV}=1 to run it anyway)")

    # ---- recompute ----
    if plan.recompute_num_layers is not None:
        if plan.recompute != "full":
            raise PlanError(f"plan.recompute_num_layers: only valid with recompute 'full' "
                            f"(got recompute={plan.recompute!r})")
        per_chunk = max(counts) // vpp
        if plan.recompute_num_layers > per_chunk:
            raise PlanError(f"plan.recompute_num_layers: must be in 1..{per_chunk} (layers per "
                            f"stage chunk) (got {plan.recompute_num_layers})")

    # ---- gradient reduction and overlap ----
    validate_grad_reduce_dtype(plan.dtype, plan.grad_reduce_dtype)
    if plan.overlap_p2p_comm and vpp == 1:
        raise PlanError("plan.overlap_p2p_comm: only the interleaved schedule overlaps pipeline p2p "
                        f"(Megatron-LM turns it off without vpp); needs vpp > 1 (got vpp={vpp})")
    if plan.framework == "megatron" and plan.distributed_optimizer and plan.overlap_param_gather \
            and not plan.overlap_grad_reduce:
        raise PlanError("plan.overlap_param_gather: needs overlap_grad_reduce (megatron-core asserts it); "
                        "set both to false for a run without DP overlap (got overlap_grad_reduce=false)")

    # ---- frameworks ----
    if plan.framework == "megatron":
        if plan.zero_stage:
            raise PlanError(f"plan.zero_stage: ZeRO stages are DeepSpeed's; with framework megatron use "
                            f"distributed_optimizer (got zero_stage={plan.zero_stage})")
    else:
        if plan.distributed_optimizer:
            raise PlanError("plan.distributed_optimizer: a Megatron option; with framework deepspeed use "
                            "zero_stage (got true)")
        for f in ("overlap_grad_reduce", "overlap_param_gather"):
            if not getattr(plan, f):
                raise PlanError(f"plan.{f}: a Megatron option; DeepSpeed's reduction schedule follows its "
                                f"ZeRO stage (got false with framework deepspeed)")
        if pp > 1 and plan.zero_stage >= 2:
            raise PlanError(f"plan.zero_stage: DeepSpeed's pipeline engine supports ZeRO 0/1 only "
                            f"(got zero_stage={plan.zero_stage}, pp={pp})")
        if vpp > 1:
            raise PlanError(f"plan.vpp: DeepSpeed's pipeline engine has no interleaved schedule (got vpp={vpp})")
        if cp > 1 and plan.cp_comm_type != "a2a":
            raise PlanError("plan.cp_comm_type: DeepSpeed supports only all-to-all (Ulysses) sequence "
                            f"parallelism (got cp={cp}, cp_comm_type={plan.cp_comm_type!r})")
        if plan.dtype == "fp8":
            raise PlanError("plan.dtype: fp8 needs Transformer Engine (framework megatron) "
                            "(got fp8 with deepspeed)")

    # ---- fp8 ----
    if plan.dtype == "fp8":
        dims = {"hidden_size": model.hidden_size,
                "ffn_hidden_size/tp": model.ffn_hidden_size // tp,
                "attention heads*head_dim/tp": heads * model.qk_head_dim // tp}
        if model.is_moe:
            dims["moe_ffn_hidden_size/etp"] = model.expert_ffn_hidden_size // etp
        for name, v in dims.items():
            if v % 16:
                raise PlanError(f"plan.dtype: fp8 GEMMs need dims divisible by 16 (got {name} = {v})")
        tokens = plan.micro_batch_size * plan.seq_length // cp
        if tokens % 16:
            raise PlanError(f"plan.dtype: fp8 GEMMs need micro_batch_size*seq_length/cp divisible by 16 "
                            f"(got {tokens})")
