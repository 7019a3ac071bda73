"""KV-cache memory planner of a serving replica: how many KV blocks fit next to everything else.

Per GPU of pipeline stage s (bytes):
  free_s = GPU memory − margin − weights − activation workspace − CUDA context − NCCL buffers
- margin: ServingPlan.memory_margin_fraction × GPU memory (fragmentation, allocator slack);
- weights: EVERY parameter the rank holds (workload_gen.params.stage_params: layers, word embedding,
  LM head, position embedding, norms, router; TP/EP sharded) at the weight dtype — with fp8 weights the
  embedding, LM head and norms stay 16-bit (fp8 checkpoints quantise the linear layers only);
- activation workspace of the largest batch, R rows (Sarathi: chunk_size, other schedulers:
  max_tokens_per_iteration): the hidden state and residual (2·R·h) plus the larger of the attention
  block (QKV output + attention output, per rank) and the MLP block (fc1 output + activation output;
  MoE: permuted tokens R_e·k·h (R_e = ⌈R/tp⌉ tokens a rank routes with EP, else R) + expert
  intermediates H·(g+1)·ffn_e/etp, H = the token copies the hottest rank processes (expert_load; R·k
  without EP), + with EP its all-to-all receive buffer H·h + shared-expert intermediates + fp32
  router logits R_e·E), at the activation dtype; on the last stage also the logits
  of max_batch_size rows (this rank's vocab shard at the activation dtype, the gathered vocabulary at
  the activation dtype + fp32 probabilities). Layers run one after the other, so one layer's peak
  counts (no activations are kept across layers in inference);
- CUDA context: sim.analysis.memory.MemoryOptions.cuda_context_bytes (the training analysis' constant);
- NCCL buffers: MemoryOptions.nccl_buffer_bytes_per_comm per communicator (the TP group when tp > 1,
  each pipeline neighbour when pp > 1).
KV bytes per token on stage s (one GPU): layers_s × per layer: MHA/GQA 2 × ceil(kv_heads / tp) ×
head_dim × kv bytes; MLA (kv_lora_rank + qk_rope_head_dim) × kv bytes (the latent, replicated over TP).
blocks_s = ⌊free_s / (block_size × KV bytes per token of s)⌋; the replica's blocks = min over stages.
ServingPlan.num_blocks overrides the result (the check that the weights fit still runs).

`vidur_kv_plan` is Vidur's formula (reference/serving.md §3) for cross-checks: it ignores embeddings,
LM head, norms, activations and the CUDA context.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import SimError
from sim.serve.plan import ServingPlan
from workload_gen import inference as inf
from workload_gen.layers import DTYPE_BYTES
from workload_gen.model import ModelSpec
from workload_gen.params import layer_params, stage_params
from workload_gen.plan import ParallelPlan
from workload_gen.vocab import padded_vocab_size

GiB = 1024 ** 3


@dataclass(frozen=True)
class StageMemory:
    """Memory of one GPU of a pipeline stage (bytes)."""

    stage: int
    gpu_bytes: int
    margin_bytes: int
    weight_bytes: int
    activation_bytes: int
    cuda_context_bytes: int
    nccl_bytes: int
    kv_bytes_per_token: int          # this stage's layers on one GPU
    blocks: int

    @property
    def used_bytes(self) -> int:
        return (self.margin_bytes + self.weight_bytes + self.activation_bytes + self.cuda_context_bytes
                + self.nccl_bytes)

    @property
    def kv_capacity_bytes(self) -> int:
        return max(0, self.gpu_bytes - self.used_bytes)


@dataclass(frozen=True)
class KVCachePlan:
    """KV cache of one replica: `num_blocks` blocks of `block_size` tokens on every stage."""

    stages: tuple[StageMemory, ...]
    block_size: int
    num_blocks: int
    source: str                      # "planner" | "plan.num_blocks"
    max_model_len: int

    @property
    def kv_tokens(self) -> int:
        return self.num_blocks * self.block_size

    def describe(self) -> str:
        """One line per stage for reports (GiB)."""
        lines = []
        for s in self.stages:
            lines.append(f"stage {s.stage}: weights {s.weight_bytes / GiB:.2f} GiB + activations "
                         f"{s.activation_bytes / GiB:.2f} + CUDA context {s.cuda_context_bytes / GiB:.2f} + NCCL "
                         f"{s.nccl_bytes / GiB:.2f} + margin {s.margin_bytes / GiB:.2f} -> KV "
                         f"{s.kv_capacity_bytes / GiB:.2f} GiB of {s.gpu_bytes / GiB:.2f} GiB = {s.blocks} blocks "
                         f"x {self.block_size} tokens")
        return "\n".join(lines)


def kv_bytes_per_token(model: ModelSpec, tp: int, num_layers: int, kv_dtype: str) -> int:
    """KV-cache bytes of one token over `num_layers` layers on one GPU of a tp-way replica
    (workload_gen.inference.kv_bytes_per_token_layer: the same bytes the KV-cache write kernel copies)."""
    return inf.kv_bytes_per_token_layer(model, tp, kv_dtype) * num_layers


def _spec(model: ModelSpec, plan: ServingPlan) -> inf.InferenceSpec:
    return inf.inference_spec(model, tp=plan.tp, pp=plan.pp, ep=plan.ep, weight_dtype=plan.weight_dtype,
                              kv_dtype=plan.kv_cache_dtype, expert_skew=plan.expert_skew)


def _layout_plan(plan: ServingPlan) -> ParallelPlan:
    ep = plan.ep
    return ParallelPlan(world_size=plan.tp * plan.pp, tp=plan.tp, pp=plan.pp, ep=ep,
                        etp=1 if ep > 1 else None)


def weight_bytes(model: ModelSpec, plan: ServingPlan, stage: int) -> int:
    """Bytes of every parameter one GPU of `stage` holds (module docstring for the dtypes)."""
    sp = stage_params(model, _layout_plan(plan), stage)
    wb = DTYPE_BYTES[plan.weight_dtype]
    ab = DTYPE_BYTES[plan.activation_dtype]
    if wb == ab:
        return sp.total * wb
    h = model.hidden_size
    norm = 2 * h if model.norm == "layernorm" else h
    norms = sum(layer_params(model, i).norms for i in sp.layers) + (norm if stage == plan.pp - 1 else 0)
    sixteen = sp.embedding + sp.position_embedding + sp.lm_head + norms
    return (sp.total - sixteen) * wb + sixteen * ab


def activation_rows(plan: ServingPlan) -> int:
    """Rows of the largest batch: Sarathi's chunk budget, else the token budget of an iteration."""
    return plan.chunk_size if plan.scheduler == "sarathi" else plan.max_tokens_per_iteration


def activation_bytes(model: ModelSpec, plan: ServingPlan, stage: int) -> int:
    """Activation workspace of the largest batch on one GPU of `stage` (module docstring)."""
    spec = _spec(model, plan)
    R, t, h = activation_rows(plan), plan.tp, model.hidden_size
    ab = DTYPE_BYTES[plan.activation_dtype]
    g = 2 if model.gated_mlp else 1
    heads = model.num_attention_heads // t
    if model.is_mla:
        q = heads * model.qk_head_dim
        attn = (model.q_lora_rank or 0) + (model.kv_lora_rank or 0) + (model.qk_rope_head_dim or 0) \
            + q + heads * ((model.qk_nope_head_dim or 0) + model.v_head_size) + heads * model.v_head_size
    else:
        d = model.head_size
        attn = (heads + 2 * spec.kv_heads_per_rank) * d + heads * d
    widths = [attn]
    dense, moe = spec.stage_layer_kinds(stage)
    if dense:
        widths.append((g + 1) * model.ffn_hidden_size // t)
    peak = 0
    if moe:
        k, E = model.moe_top_k, model.num_experts
        etp = 1 if plan.ep > 1 else t
        rows_e = -(-R // t) if plan.ep > 1 else R           # tokens a rank routes
        recv = spec.expert_load.hot(R).copies                # copies the hottest rank's experts process
        routed = rows_e * k * h + recv * (g + 1) * model.expert_ffn_hidden_size // etp
        if plan.ep > 1:
            routed += recv * h                                # all-to-all receive buffer
        shared = R * (g + 1) * model.shared_expert_total_ffn // t if model.num_shared_experts else 0
        peak = ab * (routed + shared) + 4 * rows_e * E
    layer = ab * R * (2 * h + max(widths)) + peak
    if stage == plan.pp - 1:
        vocab = padded_vocab_size(model.vocab_size, t, model.make_vocab_size_divisible_by)
        rows = plan.max_batch_size
        layer = max(layer, ab * rows * (vocab // t) + rows * vocab * (ab + 4) + ab * R * h)
    return int(layer)


def nccl_bytes(plan: ServingPlan, stage: int) -> int:
    from sim.analysis.memory import MemoryOptions
    comms = (1 if plan.tp > 1 else 0) + (int(stage > 0) + int(stage < plan.pp - 1) if plan.pp > 1 else 0)
    return comms * MemoryOptions().nccl_buffer_bytes_per_comm


def plan_kv_cache(model: ModelSpec, plan: ServingPlan, gpu_bytes: float, gpu_name: str = "GPU") -> KVCachePlan:
    """Blocks of the KV cache of one replica (module docstring); SimError (one line) when the model does
    not fit or leaves no room for one request of max_model_len tokens."""
    from sim.analysis.memory import MemoryOptions

    if plan.block_size < 1:
        raise SimError(f"serving plan.block_size: must be >= 1 (got {plan.block_size})")
    if not 0 <= plan.memory_margin_fraction < 1:
        raise SimError(f"serving plan.memory_margin_fraction: must be in [0, 1) (got {plan.memory_margin_fraction})")
    spec = _spec(model, plan)
    gpu_bytes = int(gpu_bytes)
    ctx = MemoryOptions().cuda_context_bytes
    margin = int(plan.memory_margin_fraction * gpu_bytes)
    stages = []
    for s in range(plan.pp):
        w, a, nc = weight_bytes(model, plan, s), activation_bytes(model, plan, s), nccl_bytes(plan, s)
        per_tok = kv_bytes_per_token(model, plan.tp, len(spec.stage_layer_ids[s]), plan.kv_cache_dtype)
        mem = StageMemory(stage=s, gpu_bytes=gpu_bytes, margin_bytes=margin, weight_bytes=w, activation_bytes=a,
                          cuda_context_bytes=ctx, nccl_bytes=nc, kv_bytes_per_token=per_tok, blocks=0)
        free = gpu_bytes - mem.used_bytes
        if free <= 0:
            where = f" (stage {s})" if plan.pp > 1 else ""
            raise SimError(f"deployment does not fit{where}: weights {w / GiB:.2f} GiB + activations {a / GiB:.2f} "
                           f"GiB + CUDA context {ctx / GiB:.2f} GiB + NCCL {nc / GiB:.2f} GiB + margin "
                           f"{margin / GiB:.2f} GiB = {mem.used_bytes / GiB:.2f} GiB > {gpu_bytes / GiB:.2f} GiB "
                           f"on {gpu_name} (tp {plan.tp}, pp {plan.pp}, {plan.weight_dtype} weights)")
        blocks = free // (plan.block_size * per_tok) if per_tok else 0
        stages.append(StageMemory(**{**mem.__dict__, "blocks": int(blocks)}))
    max_len = plan.max_model_len or model.seq_length
    if plan.num_blocks is not None:
        if plan.num_blocks < 1:
            raise SimError(f"serving plan.num_blocks: must be >= 1 (got {plan.num_blocks})")
        return KVCachePlan(tuple(stages), plan.block_size, int(plan.num_blocks), "plan.num_blocks", max_len)
    blocks = min(s.blocks for s in stages)
    need = -(-max_len // plan.block_size)
    if blocks < need:
        worst = min(stages, key=lambda s: s.blocks)
        raise SimError(f"KV cache too small: {blocks} blocks x {plan.block_size} tokens = {blocks * plan.block_size} "
                       f"tokens < max_model_len {max_len} ({worst.kv_capacity_bytes / GiB:.2f} GiB free for KV on "
                       f"{gpu_name} stage {worst.stage}); lower max_model_len or use more GPUs per replica")
    return KVCachePlan(tuple(stages), plan.block_size, int(blocks), "planner", max_len)


def plan_kv_cache_for_gpu(model: ModelSpec, plan: ServingPlan, gpu: str, db=None) -> KVCachePlan:
    """plan_kv_cache with the GPU's memory from the compute_db GPU table (name or alias)."""
    from compute_db.gpus import get_gpu
    spec = db.gpu(gpu) if db is not None else get_gpu(gpu)
    return plan_kv_cache(model, plan, spec.hbm_bytes, spec.name)


@dataclass(frozen=True)
class VidurKV:
    weight_bytes: int
    kv_bytes_per_token: int
    max_batch_size: int
    num_blocks: int


def vidur_kv_plan(model: ModelSpec, tp: int, pp: int, gpu_bytes: float, max_tokens: int = 4096,
                  block_size: int = 16, margin_fraction: float = 0.1) -> VidurKV:
    """Vidur's memory planner (reference/serving.md §3): 2-byte attention + MLP weights of one stage
    (no embeddings, LM head, norms, activations, CUDA context), KV of 2 B elements."""
    per_stage = model.num_layers // pp
    mlp = 3 if model.gated_mlp else 2
    h, d = model.hidden_size, model.head_size
    attn = h * model.num_attention_heads * d * 2 + h * model.kv_heads * d * 2
    per_layer = attn + mlp * h * model.ffn_hidden_size
    weights = 2 * per_layer // tp * per_stage
    kv = 2 * 2 * d * math.ceil(model.kv_heads / tp) * per_stage
    available = gpu_bytes * (1 - margin_fraction)
    batch = int((available - weights) // (kv * max_tokens))
    return VidurKV(weights, kv, batch, (max_tokens // block_size) * batch * pp)
