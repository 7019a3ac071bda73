"""ModelSpec: the single source of truth for a model's architecture.

Everything else (parameter counts, kernel shapes, FLOPs, memory) derives from these fields.
Covers dense GPT (GELU, LayerNorm, learned positions, tied embeddings), Llama-style (RMSNorm,
SwiGLU, RoPE, GQA, untied), MoE (routed + shared experts, dense first layers) and DeepSeek MLA.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelSpec:
    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    ffn_hidden_size: int                     # dense-layer MLP width (per layer, unsharded)
    vocab_size: int                          # tokenizer vocabulary (unpadded)
    num_kv_heads: int | None = None          # None = num_attention_heads (MHA)
    head_dim: int | None = None              # None = hidden_size // num_attention_heads
    seq_length: int = 2048                   # default training sequence length
    activation: str = "gelu"                 # "gelu" | "swiglu"
    norm: str = "layernorm"                  # "layernorm" | "rmsnorm"
    position_embedding: str = "learned"      # "learned" | "rope"
    tie_embeddings: bool = True
    add_bias_linear: bool = True             # biases on QKV/proj/MLP GEMMs (GPT yes, Llama no)
    add_qkv_bias: bool = False               # QKV bias only (Qwen2)
    qk_layernorm: bool = False               # per-head q/k norm (Qwen3)
    # --- mixture of experts (num_experts == 0: dense) ---
    num_experts: int = 0
    moe_top_k: int = 0
    moe_ffn_hidden_size: int | None = None   # routed-expert MLP width
    num_shared_experts: int = 0
    shared_expert_ffn_hidden_size: int | None = None  # per shared expert; None = moe_ffn_hidden_size
    num_dense_layers: int = 0                # first k layers use a dense MLP of ffn_hidden_size
    moe_layer_freq: int = 1                  # every n-th (non-dense) layer is MoE
    # --- DeepSeek multi-head latent attention (attention == "mla") ---
    attention: str = "mha"                   # "mha" (covers GQA) | "mla"
    q_lora_rank: int | None = None
    kv_lora_rank: int | None = None
    qk_nope_head_dim: int | None = None
    qk_rope_head_dim: int | None = None
    v_head_dim: int | None = None
    # --- bookkeeping ---
    make_vocab_size_divisible_by: int = 128  # Megatron pads vocab to a multiple of this x TP
    extra: dict = field(default_factory=dict, compare=False, hash=False)
