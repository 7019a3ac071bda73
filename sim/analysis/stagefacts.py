"""Layer placement and per-rank parameter counts of a pipeline stage.

Uses workload_gen.layout / workload_gen.params when they are importable (the single source of truth);
the closed-form fallbacks below follow the same Megatron conventions so analysis keeps working
(and stays fast) without them: even layer split with optional first/last-stage override, interleaved
chunk j of stage i = virtual stage j*pp + i; TP shards GEMM weights and the vocabulary, norms and
row-parallel biases are replicated; experts shard over EP then expert-TP.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.analysis.opwalk import is_moe_layer, padded_vocab


@dataclass(frozen=True)
class RankParams:
    """Parameters held by one rank of a stage (unsharded by DP/ZeRO)."""
    dense: int
    expert: int

    @property
    def total(self) -> int:
        return self.dense + self.expert


def layer_assignment(model, plan) -> list[list[tuple[int, ...]]]:
    """[stage][chunk] -> global layer ids."""
    try:
        from workload_gen.layout import layer_assignment as wl_assign
        return [[tuple(c) for c in st] for st in wl_assign(model, plan)]
    except ImportError:
        return own_layer_assignment(model, plan)


def own_layer_assignment(model, plan) -> list[list[tuple[int, ...]]]:
    L, p, v = model.num_layers, plan.pp, max(1, plan.vpp)
    first, last = plan.num_layers_first_stage, plan.num_layers_last_stage
    counts = [0] * p
    if p == 1:
        counts = [L]
    else:
        rest, mid = L, p
        if first is not None:
            counts[0] = first
            rest -= first
            mid -= 1
        if last is not None:
            counts[-1] = last
            rest -= last
            mid -= 1
        idx = [i for i in range(p) if not ((i == 0 and first is not None) or (i == p - 1 and last is not None))]
        for i in idx:
            counts[i] = rest // max(1, mid)
    if v == 1:
        out, start = [], 0
        for c in counts:
            out.append([tuple(range(start, start + c))])
            start += c
        return out
    per_chunk = L // (p * v)
    return [[tuple(range((j * p + i) * per_chunk, (j * p + i + 1) * per_chunk)) for j in range(v)]
            for i in range(p)]


def rank_params(model, plan, stage: int, layers: tuple[int, ...] | None = None) -> RankParams:
    """Dense and expert parameters one rank of `stage` holds."""
    try:
        from workload_gen.params import stage_params
        sp = stage_params(model, plan, stage)
        return RankParams(int(sp.dense), int(sp.expert))
    except ImportError:
        pass
    if layers is None:
        layers = tuple(x for chunk in layer_assignment(model, plan)[stage] for x in chunk)
    return own_rank_params(model, plan, stage, layers)


def own_rank_params(model, plan, stage: int, layers: tuple[int, ...]) -> RankParams:
    t = plan.tp
    h, a = model.hidden_size, model.num_attention_heads
    d = model.head_dim or h // a
    kv = model.num_kv_heads or a
    norm = 2 * h if model.norm == "layernorm" else h
    bias = model.add_bias_linear
    dense = expert = 0
    cache: dict[bool, tuple[int, int]] = {}
    for layer in layers:
        moe = is_moe_layer(model, layer)
        if moe not in cache:
            cache[moe] = _layer_params(model, plan, moe, t, h, a, d, kv, norm, bias)
        dl, el = cache[moe]
        dense += dl
        expert += el
    vp = padded_vocab(model, t)
    if stage == 0:
        dense += vp * h // t
        if model.position_embedding == "learned":
            dense += model.seq_length * h
    if stage == plan.pp - 1:
        dense += norm
        if not (model.tie_embeddings and plan.pp == 1):
            dense += vp * h // t
    return RankParams(dense, expert)


def _layer_params(model, plan, moe, t, h, a, d, kv, norm, bias) -> tuple[int, int]:
    dense = 2 * norm
    if model.attention == "mla":
        nope = model.qk_nope_head_dim or d
        rope = model.qk_rope_head_dim or 0
        dv = model.v_head_dim or d
        ql, kvl = model.q_lora_rank, model.kv_lora_rank
        if ql:
            dense += h * ql + ql + ql * a * (nope + rope) // t
        else:
            dense += h * a * (nope + rope) // t
        dense += h * (kvl + rope) + kvl + kvl * a * (nope + dv) // t
        dense += a * dv * h // t
    else:
        dense += h * (a + 2 * kv) * d // t + a * d * h // t
        if bias or model.add_qkv_bias:
            dense += (a + 2 * kv) * d // t
        if bias:
            dense += h
        if model.qk_layernorm:
            dense += 2 * d
    gated = model.activation == "swiglu"
    nmat = 3 if gated else 2
    expert = 0
    if moe:
        E = model.num_experts
        dense += h * E
        Fe = model.moe_ffn_hidden_size or model.ffn_hidden_size
        expert += (E // plan.ep) * nmat * h * Fe // plan.expert_tp
        if model.num_shared_experts:
            Fs = model.shared_expert_ffn_hidden_size or Fe
            dense += model.num_shared_experts * nmat * h * Fs // t
    else:
        F = model.ffn_hidden_size
        dense += nmat * h * F // t
        if bias:
            dense += F // t + h
    return dense, expert
