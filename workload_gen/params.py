"""Exact parameter counts: whole model (total / active) and per rank of a pipeline stage.

Megatron-core semantics (what `GPTModel` allocates):
- attention: fused QKV (column-parallel, bias when `add_bias_linear` or `add_qkv_bias`), output
  projection (row-parallel; its bias is replicated); optional per-head q/k norms (replicated).
- MLA (DeepSeek): q down-projection + q norm + q up-projection (or a plain q projection when
  `q_lora_rank` is None), kv down-projection (kv_lora_rank + rope dim) + kv norm + kv up-projection,
  output projection. The low-rank down-projections and their norms are replicated over TP (Megatron's
  Transformer-Engine layer spec builds them "duplicated"); up- and output projections are TP-sharded.
- MLP: fc1 (x2 for SwiGLU, column-parallel), fc2 (row-parallel, bias replicated).
- MoE: router (experts x hidden, replicated), routed experts sharded over EP (whole experts) and
  expert-TP (each expert's FFN width), shared experts as one TP-sharded MLP of the summed width.
- norms: LayerNorm weight+bias, RMSNorm weight; replicated over TP. Final norm on the last stage.
- word embedding (vocab padded to a multiple of make_vocab_size_divisible_by x TP) on the first stage;
  LM head on the last stage; tied embeddings: one matrix when pp == 1, a copy on both ends when pp > 1.
  Learned position embeddings (model.seq_length x hidden, replicated) on the first stage.
Whole-model counts (`count_params`) use the unpadded vocabulary, as published totals do.
Ignored: buffers (rotary tables, expert-bias load-balancing buffers), multi-token-prediction modules.
"""

from __future__ import annotations

from dataclasses import dataclass

from workload_gen.layout import layer_assignment
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.vocab import padded_vocab_size


@dataclass(frozen=True)
class LayerParams:
    """Parameters of one transformer layer (unsharded)."""

    layer: int
    is_moe: bool
    attention: int        # attention projections, their biases and q/k/MLA-internal norms
    norms: int            # input norm + pre-MLP norm
    mlp: int              # dense MLP (0 on MoE layers)
    router: int
    experts: int          # all routed experts of the layer
    expert_each: int      # one routed expert
    shared_expert: int
    active: int           # attention + norms + mlp + router + shared + top-k routed experts

    @property
    def total(self) -> int:
        return self.attention + self.norms + self.mlp + self.router + self.experts + self.shared_expert


@dataclass(frozen=True)
class ParamCounts:
    """Whole-model parameter counts (unpadded vocabulary). `active` follows models.md's convention:
    embedding, LM head, attention, norms, dense MLPs, router, shared experts and top-k routed experts."""

    total: int
    active: int
    embedding: int             # word embedding
    position_embedding: int    # learned positions (0 for RoPE)
    lm_head: int               # 0 when tied to the embedding
    final_norm: int
    attention: int             # sum over layers
    mlp: int                   # dense MLPs, sum over layers
    router: int
    expert: int                # all routed experts
    shared_expert: int
    norm: int                  # per-layer norms + final norm
    layers: tuple[LayerParams, ...]

    @property
    def non_expert(self) -> int:
        return self.total - self.expert


@dataclass(frozen=True)
class StageParams:
    """Parameters held by ONE rank of a pipeline stage (all its virtual chunks together)."""

    stage: int
    layers: tuple[int, ...]    # global layer ids on this stage
    dense: int                 # non-expert params on this rank (replicated over DP x CP)
    expert: int                # routed-expert params on this rank (replicated over expert-DP)
    embedding: int             # word-embedding shard (first stage, or tied copy on the last stage)
    position_embedding: int
    lm_head: int               # untied LM-head shard (last stage)
    tp_replicated: int         # of `dense`: params identical on every TP rank (norms, row biases,
                               # router, MLA down-projections) — their grads need a TP all-reduce with SP

    @property
    def total(self) -> int:
        return self.dense + self.expert


def _norm_size(model: ModelSpec, width: int) -> int:
    return 2 * width if model.norm == "layernorm" else width


def _attention_parts(model: ModelSpec, tp: int) -> tuple[int, int]:
    """(TP-sharded params per rank, TP-replicated params) of one attention block."""
    h, nq = model.hidden_size, model.num_attention_heads
    bias = model.add_bias_linear
    if model.is_mla:
        qk, v = model.qk_head_dim, model.v_head_size
        rope = model.qk_rope_head_dim or 0
        kv_lora = model.kv_lora_rank or 0
        sharded = replicated = 0
        if model.q_lora_rank:
            replicated += h * model.q_lora_rank + _norm_size(model, model.q_lora_rank)
            sharded += model.q_lora_rank * nq * qk // tp
        else:
            sharded += h * nq * qk // tp
        replicated += h * (kv_lora + rope) + _norm_size(model, kv_lora)
        sharded += kv_lora * nq * (model.qk_nope_head_dim or 0) // tp + kv_lora * nq * v // tp
        sharded += nq * v * h // tp
        if bias:
            replicated += h
        return sharded, replicated
    d, nkv = model.head_size, model.kv_heads
    qkv_out = (nq + 2 * nkv) * d
    sharded = h * qkv_out // tp + nq * d * h // tp
    replicated = 0
    if bias or model.add_qkv_bias:
        sharded += qkv_out // tp
    if bias:
        replicated += h
    if model.qk_layernorm:
        replicated += 2 * _norm_size(model, d)
    return sharded, replicated


def _mlp_parts(model: ModelSpec, ffn: int, tp: int) -> tuple[int, int]:
    """(TP-sharded params per rank, TP-replicated params) of one MLP of width `ffn`."""
    h = model.hidden_size
    g = 2 if model.gated_mlp else 1
    sharded = h * ffn * g // tp + ffn * h // tp
    replicated = 0
    if model.add_bias_linear:
        sharded += ffn * g // tp
        replicated += h
    return sharded, replicated


def layer_params(model: ModelSpec, layer: int) -> LayerParams:
    """Unsharded parameter breakdown of global layer `layer`."""
    att = sum(_attention_parts(model, 1))
    norms = 2 * _norm_size(model, model.hidden_size)
    if not model.layer_is_moe(layer):
        mlp = sum(_mlp_parts(model, model.ffn_hidden_size, 1))
        return LayerParams(layer, False, att, norms, mlp, 0, 0, 0, 0, att + norms + mlp)
    router = model.num_experts * model.hidden_size
    each = sum(_mlp_parts(model, model.expert_ffn_hidden_size, 1))
    shared = sum(_mlp_parts(model, model.shared_expert_total_ffn, 1)) if model.num_shared_experts else 0
    active = att + norms + router + shared + model.moe_top_k * each
    return LayerParams(layer, True, att, norms, 0, router, model.num_experts * each, each, shared, active)


def count_params(model: ModelSpec) -> ParamCounts:
    """Exact whole-model parameter counts (unpadded vocabulary)."""
    layers = tuple(layer_params(model, i) for i in range(model.num_layers))
    h = model.hidden_size
    emb = model.vocab_size * h
    pos = model.seq_length * h if model.position_embedding == "learned" else 0
    head = 0 if model.tie_embeddings else model.vocab_size * h
    final = _norm_size(model, h)
    outer = emb + pos + head + final
    total = outer + sum(lp.total for lp in layers)
    active = outer + sum(lp.active for lp in layers)
    return ParamCounts(
        total=total, active=active, embedding=emb, position_embedding=pos, lm_head=head, final_norm=final,
        attention=sum(lp.attention for lp in layers), mlp=sum(lp.mlp for lp in layers),
        router=sum(lp.router for lp in layers), expert=sum(lp.experts for lp in layers),
        shared_expert=sum(lp.shared_expert for lp in layers),
        norm=sum(lp.norms for lp in layers) + final, layers=layers)


def layer_rank_params(model: ModelSpec, plan: ParallelPlan, layer: int) -> tuple[int, int, int]:
    """(dense, expert, tp_replicated) params of global layer `layer` held by one rank."""
    tp = plan.tp
    a_sh, a_rep = _attention_parts(model, tp)
    dense = a_sh + a_rep + 2 * _norm_size(model, model.hidden_size)
    rep = a_rep + 2 * _norm_size(model, model.hidden_size)
    expert = 0
    if not model.layer_is_moe(layer):
        m_sh, m_rep = _mlp_parts(model, model.ffn_hidden_size, tp)
        dense += m_sh + m_rep
        rep += m_rep
    else:
        router = model.num_experts * model.hidden_size
        dense += router
        rep += router
        if model.num_shared_experts:
            s_sh, s_rep = _mlp_parts(model, model.shared_expert_total_ffn, tp)
            dense += s_sh + s_rep
            rep += s_rep
        e_sh, e_rep = _mlp_parts(model, model.expert_ffn_hidden_size, plan.expert_tp)
        expert = (model.num_experts // plan.ep) * (e_sh + e_rep)
    return dense, expert, rep


def stage_params(model: ModelSpec, plan: ParallelPlan, stage: int) -> StageParams:
    """Parameters held by one rank of pipeline stage `stage` (TP/ETP/EP sharded, Megatron layout).

    Assumes a valid plan (see plan_validation.validate_plan). ZeRO/distributed-optimizer sharding of
    weights, gradients or optimizer state is not applied here: these are the model's parameters.
    """
    if not 0 <= stage < plan.pp:
        raise ValueError(f"stage must be in 0..{plan.pp - 1} (got {stage})")
    layers = tuple(sorted(i for chunk in layer_assignment(model, plan)[stage] for i in chunk))
    dense = expert = rep = 0
    for i in layers:
        d, e, r = layer_rank_params(model, plan, i)
        dense += d
        expert += e
        rep += r
    h = model.hidden_size
    vocab_rows = padded_vocab_size(model.vocab_size, plan.tp, model.make_vocab_size_divisible_by) // plan.tp
    first, last = stage == 0, stage == plan.pp - 1
    emb = pos = head = 0
    if first:
        emb = vocab_rows * h
        if model.position_embedding == "learned":
            pos = model.seq_length * h
    if last:
        final = _norm_size(model, h)
        dense += final
        rep += final
        if not model.tie_embeddings:
            head = vocab_rows * h
        elif not first:
            emb = vocab_rows * h      # tied: the last stage keeps its own copy of the word embedding
    dense += emb + pos + head
    rep += pos
    return StageParams(stage=stage, layers=layers, dense=dense, expert=expert, embedding=emb,
                       position_embedding=pos, lm_head=head, tp_replicated=rep)
