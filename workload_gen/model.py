"""ModelSpec: the single source of truth for a model's architecture.

Everything else (parameter counts, kernel shapes, FLOPs, memory) derives from these fields.
Covers dense GPT (GELU, LayerNorm, learned positions, tied embeddings), Llama-style (RMSNorm,
SwiGLU, RoPE, GQA, untied), MoE (routed + shared experts, dense first layers) and DeepSeek MLA.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class ModelSpec:
    """A model's architecture (see the module doc); sizes in elements, counts per layer unsharded."""
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
    moe_layer_pattern: tuple[int, ...] | None = None  # per layer 1 = MoE, 0 = dense; None = derive from
                                             # num_dense_layers / moe_layer_freq (HF loaders set it)
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

    def __post_init__(self) -> None:
        # JSON/YAML give lists; keep the spec hashable and comparable by storing a tuple
        if self.moe_layer_pattern is not None and not isinstance(self.moe_layer_pattern, tuple):
            try:
                object.__setattr__(self, "moe_layer_pattern", tuple(self.moe_layer_pattern))
            except TypeError:
                pass   # not iterable: validate_model names the field

    # ---- derived, read-only helpers (resolve the None defaults; no validation here) ----
    @property
    def kv_heads(self) -> int:
        """Number of key/value heads (query groups); equals the attention heads for MHA."""
        return self.num_attention_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def head_size(self) -> int:
        """Per-head width of q/k/v for MHA/GQA (resolved `head_dim`)."""
        return self.hidden_size // self.num_attention_heads if self.head_dim is None else self.head_dim

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    @property
    def is_mla(self) -> bool:
        return self.attention == "mla"

    @property
    def gated_mlp(self) -> bool:
        """SwiGLU MLPs have two input projections (gate and up) of the FFN width."""
        return self.activation == "swiglu"

    @property
    def qk_head_dim(self) -> int:
        """Per-head width of queries/keys (MLA: nope + rope part)."""
        if self.is_mla:
            return (self.qk_nope_head_dim or 0) + (self.qk_rope_head_dim or 0)
        return self.head_size

    @property
    def v_head_size(self) -> int:
        """Per-head width of values (MLA: v_head_dim)."""
        if self.is_mla:
            return self.v_head_dim or 0
        return self.head_size

    @property
    def expert_ffn_hidden_size(self) -> int:
        """Routed-expert MLP width (resolved `moe_ffn_hidden_size`; falls back to ffn_hidden_size)."""
        return self.ffn_hidden_size if self.moe_ffn_hidden_size is None else self.moe_ffn_hidden_size

    @property
    def shared_expert_total_ffn(self) -> int:
        """Width of the fused shared-expert MLP (all shared experts together, as Megatron builds it)."""
        per = (self.expert_ffn_hidden_size if self.shared_expert_ffn_hidden_size is None
               else self.shared_expert_ffn_hidden_size)
        return self.num_shared_experts * per

    def layer_is_moe(self, layer: int) -> bool:
        """Whether global layer `layer` (0-based) has an MoE MLP.

        Rule: the first `num_dense_layers` layers are dense; after them every `moe_layer_freq`-th layer
        is MoE, starting with the first one. `moe_layer_pattern` (one 0/1 per layer, set by HF loaders
        for irregular patterns) overrides the rule.
        """
        if self.num_experts <= 0:
            return False
        if self.moe_layer_pattern is not None:
            return bool(self.moe_layer_pattern[layer])
        if layer < self.num_dense_layers:
            return False
        return (layer - self.num_dense_layers) % max(1, self.moe_layer_freq) == 0

    @property
    def moe_layer_ids(self) -> tuple[int, ...]:
        return tuple(i for i in range(self.num_layers) if self.layer_is_moe(i))
