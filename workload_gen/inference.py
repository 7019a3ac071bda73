"""Forward kernels of one pipeline stage of a serving replica for one batch, built from layers.py.

A serving batch is a set of prefill chunks (tokens, KV offset) and decode tokens. Every token-level
kernel of a layer (norms, QKV / MLA projections, rotary, output projection, MLP or MoE experts with the
router, residual adds) runs once over the batch's T tokens, so it is taken from layers.py's forward
pass with sequence length T, micro-batch 1, no sequence parallelism, no dropout, no recompute, flash
attention (`layers.attention_units` / `layers.mlp_units` / `embedding_units` / `head_units` on an
inference `Ctx`). TP collectives are layers.py's `tp_enter` / `tp_exit` (all-reduce of T x hidden after
the attention and after the MLP). Only the attention core differs from training:
- prefill: one causal flash-attention forward per prefilling request (seq_q = chunk, seq_kv = offset +
  chunk) — varlen kernels launch once per batch (see `prefill_attention_ops`);
- decode: ONE `attn_decode` kernel for all decoding requests (kv_tokens = sum of contexts + 1 each);
  MLA decodes in the absorbed latent form (kv_heads 1, dims rope / kv_lora_rank); the absorbed q and
  output up-projections do the FLOPs of layers.py's kv up-projection on the T new tokens, which stands
  in for them;
- a KV-cache write per layer (the new tokens' K and V, or MLA latent, copied into the paged cache).
First stage: embedding (+ TP all-reduce). Last stage: final norm over T rows, the LM head on the rows
that produce a token, the TP all-gather of their logits and sampling (fp32 softmax + top-1 selection
over the gathered vocabulary, greedy decoding).

MoE: the whole block is layers.py's `moe_units` (router, top-k, permutes, shared experts, EP
collectives and the routed experts' grouped GEMMs and activation), given the routed experts' load
(`expert_rows`, a `layers.ExpertRows`): they run at the hottest EP rank's load from
workload_gen.expert_load (balanced by default; `expert_skew` = Zipf exponent of expert popularity): G
active experts (those receiving a token; an idle expert's weights are not read) of ⌈R / G⌉ rows, R = the
token copies the rank receives. Their dims (hence their time) are the hottest rank's; their flops and
bytes the mean rank's (model FLOPs, for MFU). Default: experts TP-sharded (each rank runs every expert at
ffn/tp width on all T tokens, which stay replicated over TP) and one TP all-reduce closes the block
(shared experts' partial sums included, as vLLM fuses them). ep == tp (the TP group may span servers):
each rank routes ⌈T/tp⌉ of the tokens, all-to-all dispatch to the rank owning the expert and combine
back, then a TP all-gather restores the replicated rows; shared experts stay TP-sharded on all T tokens.
All-to-all size (netsim's nccl-tests buffer S: each rank sends S/ep to every rank, its own share stays
local) = R x hidden x activation bytes with R the hottest rank's copies: each top-k copy travels (no
per-rank deduplication); the hottest rank's ingress, the link that finishes last, carries its
R·(ep−1)/ep remote copies exactly as in the real, non-uniform exchange.

The pieces are keyed for memoisation: `token_ops` by T alone (one layer of each kind: dense / MoE),
`prefill_attention_ops` by (chunk, offset), `decode_attention_op` by (#decodes, kv tokens), `head_ops`
by the number of output rows. `stage_ops` assembles a whole stage for a batch (reports, tests).
Weights fp8 -> fp8 GEMM kernels (activations bf16); KV cache fp8 -> decode attention reads 1 B/element.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from workload_gen import layers
from workload_gen.errors import WorkloadError
from workload_gen.expert_load import ExpertLoad, expert_load
from workload_gen.layout import stage_layers
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.workload import ComputeOp, Op

GEMM_DTYPES = ("bf16", "fp16", "fp8")
KV_DTYPES = ("bf16", "fp16", "fp8")
TOPK_SAMPLING = 1          # greedy decoding: top-1 (argmax) selection per output row


@dataclass(frozen=True)
class InferenceSpec:
    """Static facts of one deployment (every replica and batch): model, sharding, dtypes.

    `kernel_model` is the model as the kernels see it: KV heads replicated up to tp when tp exceeds
    them (each rank keeps one), routed experts at their per-rank width when TP-sharded (ep == 1)."""

    model: ModelSpec
    kernel_model: ModelSpec
    tp: int
    pp: int
    ep: int
    weight_dtype: str
    kv_dtype: str
    act: str                              # activation dtype: fp16 with fp16 weights, else bf16
    stage_layer_ids: tuple[tuple[int, ...], ...]
    expert_load: ExpertLoad | None = None  # MoE: routing over experts and EP ranks (None: dense model)

    @property
    def kv_heads_per_rank(self) -> int:
        return math.ceil(self.model.kv_heads / self.tp)

    @property
    def heads_per_rank(self) -> int:
        return self.model.num_attention_heads // self.tp

    @property
    def act_bytes(self) -> int:
        return layers.DTYPE_BYTES[self.act]

    @property
    def kv_element_bytes(self) -> int:
        return layers.DTYPE_BYTES[self.kv_dtype]

    def kv_bytes_per_token_layer(self) -> int:
        """KV-cache bytes one token occupies in one layer on one rank (MLA: the latent, replicated)."""
        return kv_bytes_per_token_layer(self.model, self.tp, self.kv_dtype)

    def stage_layer_kinds(self, stage: int) -> tuple[int, int]:
        """(dense layers, MoE layers) on `stage`."""
        ids = self.stage_layer_ids[stage]
        moe = sum(1 for i in ids if self.model.layer_is_moe(i))
        return len(ids) - moe, moe


def kv_bytes_per_token_layer(model: ModelSpec, tp: int, kv_dtype: str) -> int:
    """KV-cache bytes of one token in one layer on one GPU of a tp-way stage.

    MHA/GQA: K and V of this rank's ceil(kv_heads / tp) heads. MLA (DeepSeek-V2/V3): the compressed
    latent (kv_lora_rank) and the shared rope key (qk_rope_head_dim) — one vector per token, not split by
    heads, so every TP rank holds all of it (replicated over TP)."""
    e = layers.DTYPE_BYTES[kv_dtype]
    if model.is_mla:
        return e * ((model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0))
    return e * math.ceil(model.kv_heads / tp) * (model.qk_head_dim + model.v_head_size)


def inference_spec(model: ModelSpec, tp: int = 1, pp: int = 1, ep: int = 1, weight_dtype: str = "bf16",
                   kv_dtype: str | None = None, expert_skew: float = 0.0) -> InferenceSpec:
    """Validate a serving sharding of `model` and build its InferenceSpec (WorkloadError on bad input).

    expert_skew: Zipf exponent of expert popularity (workload_gen.expert_load; 0 = balanced routing)."""
    for name, v in (("tp", tp), ("pp", pp), ("ep", ep)):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise WorkloadError(f"serving plan.{name}: must be a positive integer (got {v!r})")
    if weight_dtype not in GEMM_DTYPES:
        raise WorkloadError(f"serving plan.weight_dtype: expected one of {', '.join(GEMM_DTYPES)} (got {weight_dtype!r})")
    act = "fp16" if weight_dtype == "fp16" else "bf16"
    kv_dtype = kv_dtype or act
    if kv_dtype not in KV_DTYPES:
        raise WorkloadError(f"serving plan.kv_dtype: expected one of {', '.join(KV_DTYPES)} (got {kv_dtype!r})")
    heads, kv = model.num_attention_heads, model.kv_heads
    if heads % tp:
        raise WorkloadError(f"serving plan.tp: must divide the attention heads of {model.name} "
                            f"(got tp={tp}, heads={heads})")
    if not model.is_mla and kv % tp and tp % kv:
        raise WorkloadError(f"serving plan.tp: KV heads must divide tp or be a multiple of it "
                            f"(got tp={tp}, kv heads={kv})")
    if ep != 1:
        if not model.is_moe:
            raise WorkloadError(f"serving plan.ep: expert parallelism needs a MoE model ({model.name} is dense)")
        if ep != tp:
            raise WorkloadError(f"serving plan.ep: must be 1 or equal to tp (got ep={ep}, tp={tp})")
        if model.num_experts % ep:
            raise WorkloadError(f"serving plan.ep: must divide the {model.num_experts} experts of {model.name} "
                                f"(got ep={ep})")
    if model.is_moe and ep == 1 and model.expert_ffn_hidden_size % tp:
        raise WorkloadError(f"serving plan.tp: must divide the expert FFN width {model.expert_ffn_hidden_size} "
                            f"when experts are TP-sharded (got tp={tp})")
    if model.ffn_hidden_size % tp:
        raise WorkloadError(f"serving plan.tp: must divide the FFN width {model.ffn_hidden_size} (got tp={tp})")
    if expert_skew and not model.is_moe:
        raise WorkloadError(f"serving plan.expert_skew: needs a MoE model ({model.name} is dense)")
    load = expert_load(model.num_experts, model.moe_top_k, ep, expert_skew) if model.is_moe else None
    layout_plan = ParallelPlan(world_size=tp * pp, tp=tp, pp=pp)
    ids = tuple(stage_layers(model, layout_plan, s) for s in range(pp))   # PlanError if pp does not fit
    km = model
    if not model.is_mla and kv < tp:
        km = replace(km, num_kv_heads=tp)          # replicated KV heads: one per rank
    if model.is_moe and ep == 1 and tp > 1:
        # each rank holds every expert at 1/tp of its width: the kernels of ep = etp = 1 on that width
        km = replace(km, moe_ffn_hidden_size=model.expert_ffn_hidden_size // tp,
                     shared_expert_ffn_hidden_size=(model.shared_expert_ffn_hidden_size
                                                    or model.expert_ffn_hidden_size))
    return InferenceSpec(model=model, kernel_model=km, tp=tp, pp=pp, ep=ep, weight_dtype=weight_dtype,
                         kv_dtype=kv_dtype, act=act, stage_layer_ids=ids, expert_load=load)


def _ctx(spec: InferenceSpec, tokens: int) -> layers.Ctx:
    """layers.Ctx of one rank for a forward pass over `tokens` rows (inference: no SP, no dropout)."""
    ep = spec.ep if spec.kernel_model.is_moe else 1
    plan = ParallelPlan(world_size=spec.tp, tp=spec.tp, pp=1, ep=ep, etp=1 if spec.kernel_model.is_moe else None,
                        micro_batch_size=1, seq_length=tokens,
                        dtype="fp8" if spec.weight_dtype == "fp8" else spec.act,
                        flash_attention=True, sequence_parallel=False, moe_grouped_gemm=True)
    return replace(layers.make_ctx(spec.kernel_model, plan), dropout=False)


def _fwd(units: list[layers.Unit]) -> list[Op]:
    return [op for u in units for op in u.fwd]


# ---------------------------------------------------------------- token-level part (keyed by T)

def expert_rows(spec: InferenceSpec, c: layers.Ctx) -> layers.ExpertRows:
    """Routed-expert work for the batch's c.tokens tokens (layers.moe_units' `load`).

    Dims: G active experts x ⌈R / G⌉ rows of the hottest EP rank (expert_load.hot), so the kernel time is
    the hottest rank's; the all-to-all carries its R copies. FLOPs / bytes: the mean rank's (C copies over A
    active experts): 2·C·n·k and e·(C·(k + n) + A·k·n) per GEMM, as layers.linear counts a balanced
    grouped GEMM."""
    load = spec.expert_load
    hot, mean = load.hot(c.tokens), load.mean(c.tokens)
    return layers.ExpertRows(groups=hot.active_experts, rows=hot.rows_per_expert, act_rows=hot.copies,
                             work_rows=mean.copies, work_sets=mean.active_experts, a2a_copies=hot.copies)


def _moe_ops(spec: InferenceSpec, c: layers.Ctx, layer: int) -> list[Op]:
    """MoE block after the pre-MLP norm (see the module docstring for the two modes)."""
    T, t = c.tokens, c.t
    if spec.ep > 1:
        cm = replace(c, tokens_sp=max(1, -(-T // t)))        # each rank routes its share of the tokens
        ops = _fwd(layers.moe_units(cm, layer, expert_rows(spec, c)))
        ops.append(layers.comm("moe_ep_ag", "all_gather", "tp", c.ab * T * c.h, layer, "fwd"))
        return ops
    ops = _fwd(layers.moe_units(c, layer, expert_rows(spec, c)))
    if t > 1 and not spec.kernel_model.num_shared_experts:
        # routed experts' partial sums over the TP-sharded width; with shared experts the one all-reduce
        # of their row-parallel exit (already in the ops) carries both
        ops += layers.tp_exit(c, "moe", layer, "moe_fc2")[0]
    return ops


def kv_write_op(spec: InferenceSpec, tokens: int, layer: int) -> ComputeOp:
    """Copy of the batch's new K/V (or MLA latent) into the paged cache of one layer."""
    n = tokens * spec.kv_bytes_per_token_layer()
    return layers.compute("kv_cache_write", "memcpy", {"bytes": n}, spec.kv_dtype, 0.0, 2.0 * n, "fwd", layer)


def layer_token_ops(spec: InferenceSpec, tokens: int, moe: bool) -> list[Op]:
    """One transformer layer's forward at `tokens` rows, without the attention core (compute + TP comm).

    `moe`: an MoE layer of the model (else a dense one). Ops carry the layer index of a representative
    layer of that kind; callers multiply by the number of such layers."""
    m = spec.model
    layer = next((i for i in range(m.num_layers) if m.layer_is_moe(i) == moe), 0)
    c = _ctx(spec, tokens)
    att = [u for u in layers.attention_units(c, layer, selective=False) if not u.core]
    ops = _fwd(att)
    ops.append(kv_write_op(spec, tokens, layer))
    if moe:
        mlp = layers.mlp_units(c, layer)                     # [pre-MLP norm, ..., residual add]
        ops += mlp[0].fwd + _moe_ops(spec, c, layer) + mlp[-1].fwd
    else:
        ops += _fwd(layers.mlp_units(c, layer))
    return ops


def embedding_ops(spec: InferenceSpec, tokens: int) -> list[Op]:
    """First stage: word embedding (+ learned positions) and its TP all-reduce."""
    return _fwd(layers.embedding_units(_ctx(spec, tokens)))


def final_norm_ops(spec: InferenceSpec, tokens: int) -> list[Op]:
    """Last stage: the final norm over all rows of the batch."""
    return [op for op in _fwd(layers.head_units(_ctx(spec, tokens))) if op.name == "final_norm"]


def head_ops(spec: InferenceSpec, rows: int) -> list[Op]:
    """Last stage: LM head on the `rows` that produce a token, TP all-gather of their logits, sampling."""
    if rows <= 0:
        return []
    c = _ctx(spec, rows)
    ops = [op for op in _fwd(layers.head_units(c)) if op.name == "lm_head"]
    vocab = c.vocab_rank * c.t
    if c.t > 1:
        ops.append(layers.comm("logits_ag", "all_gather", "tp", c.ab * rows * vocab, -1, "fwd", dtype=c.act))
    n = rows * vocab
    ops.append(layers.compute("sampling_softmax", "softmax", {"rows": rows, "cols": vocab}, "fp32", 5.0 * n,
                              c.ab * n + 4 * n, "fwd", -1))
    ops.append(layers.compute("sampling_topk", "router_topk", {"tokens": rows, "experts": vocab,
                                                                "topk": TOPK_SAMPLING},
                              "fp32", 2.0 * n, 4 * n + 8 * rows, "fwd", -1))
    return ops


def pp_send_bytes(spec: InferenceSpec, tokens: int) -> int:
    """Activation bytes one TP rank sends to its peer of the next stage (hidden states of the batch)."""
    return spec.act_bytes * tokens * spec.model.hidden_size


# ---------------------------------------------------------------- attention parts

def prefill_attention_ops(spec: InferenceSpec, chunk: int, offset: int, layer: int = 0) -> list[ComputeOp]:
    """Causal flash-attention forward of one prefilling request in one layer (bottom-right aligned mask:
    the chunk's queries see the `offset` cached tokens and the causal part of the chunk). MLA also
    up-projects the cached latent of the `offset` context tokens to per-head K/V (the new tokens' are in
    the token-level part)."""
    m, ab, act = spec.model, spec.act_bytes, spec.act
    heads = spec.heads_per_rank
    if m.is_mla:
        kvh, dqk, dv = heads, m.qk_head_dim, m.v_head_size
    else:
        kvh, dqk, dv = spec.kv_heads_per_rank, m.head_size, m.head_size
    skv = offset + chunk
    dims = {"batch": 1, "seq_q": chunk, "seq_kv": skv, "heads": heads, "kv_heads": kvh,
            "head_dim_qk": dqk, "head_dim_v": dv}
    a = min(chunk, skv)
    flops = 2.0 * heads * (a * skv - a * (a - 1) / 2) * (dqk + dv)      # unmasked entries only
    io = ab * (chunk * heads * (dqk + 2 * dv) + skv * kvh * (dqk + dv))
    ops = [layers.compute("attn_prefill", "flash_attn", dims, act, flops, io, "fwd", layer, causal=True)]
    if m.is_mla and offset > 0:
        kv_lora, nope = m.kv_lora_rank or 0, m.qk_nope_head_dim or 0
        n = heads * (nope + dv)
        gemm = "fp8" if spec.weight_dtype == "fp8" else act
        es = layers.DTYPE_BYTES[gemm]
        ops.append(layers.compute("attn_kv_up_context", "gemm", {"m": offset, "n": n, "k": kv_lora}, gemm,
                                  2.0 * offset * n * kv_lora, es * (offset * kv_lora + kv_lora * n + offset * n),
                                  "fwd", layer))
    return ops


def decode_attention_op(spec: InferenceSpec, batch: int, kv_tokens: int, layer: int = 0) -> ComputeOp:
    """One paged decode-attention kernel of `batch` requests reading `kv_tokens` cached tokens in all.

    GQA/MHA: this rank's query and KV heads; MLA (absorbed): one latent "KV head" of kv_lora_rank
    (values) + rope dims (keys), every query head scoring it."""
    m = spec.model
    heads = spec.heads_per_rank
    if m.is_mla:
        kvh, dqk, dv = 1, (m.qk_rope_head_dim or 0) or 1, m.kv_lora_rank or 1
    else:
        kvh, dqk, dv = spec.kv_heads_per_rank, m.head_size, m.head_size
    e = spec.kv_element_bytes
    e_out = 2 if spec.kv_dtype == "fp8" else e
    dims = {"batch": batch, "kv_tokens": kv_tokens, "heads": heads, "kv_heads": kvh, "head_dim_qk": dqk,
            "head_dim_v": dv}
    flops = 2.0 * heads * kv_tokens * (dqk + dv)
    nbytes = e * kv_tokens * kvh * (dqk + dv) + e_out * batch * heads * (dqk + dv)
    return layers.compute("attn_decode", "attn_decode", dims, spec.kv_dtype, flops, nbytes, "fwd", layer)


# ---------------------------------------------------------------- a whole stage

def stage_ops(spec: InferenceSpec, stage: int, prefill: tuple[tuple[int, int], ...] = (),
              decode: tuple[int, ...] = ()) -> list[tuple[Op, int]]:
    """(op, count) of everything one rank of `stage` runs for a batch: embedding (first stage), every
    layer's token-level kernels, attention (per prefilling request; one decode kernel), final norm, LM
    head, logits gather and sampling (last stage). Counts multiply identical layers. No memoisation:
    the cost model (sim.serve.batch_time) memoises the same pieces by their keys."""
    if not 0 <= stage < spec.pp:
        raise WorkloadError(f"stage must be in 0..{spec.pp - 1} (got {stage})")
    T = sum(c for c, _ in prefill) + len(decode)
    if T <= 0:
        return []
    dense, moe = spec.stage_layer_kinds(stage)
    n_layers = dense + moe
    out: list[tuple[Op, int]] = []
    if stage == 0:
        out += [(op, 1) for op in embedding_ops(spec, T)]
    for is_moe, count in ((False, dense), (True, moe)):
        if count:
            out += [(op, count) for op in layer_token_ops(spec, T, is_moe)]
    for chunk, offset in prefill:
        out += [(op, n_layers) for op in prefill_attention_ops(spec, chunk, offset)]
    if decode:
        out.append((decode_attention_op(spec, len(decode), sum(decode) + len(decode)), n_layers))
    if stage == spec.pp - 1:
        out += [(op, 1) for op in final_norm_ops(spec, T)]
        out += [(op, 1) for op in head_ops(spec, len(decode) + len(prefill))]
    return out
