"""Built-in model zoo: every model of reference/models.md plus AICB's `-m` sizes.

AICB sizes (`aicb-7`, `aicb-13`, `aicb-22`, `aicb-175`, `aicb-405`, `aicb-moe`, `aicb-deepseek671`,
`aicb-deepseek236`, `aicb-deepseek16`) reproduce AICB's mocked models, not the published checkpoints:
AICB's default vocabulary of 50257 (padded as Megatron does), no GQA (AICB's mocked attention has one
KV head per query head) except `aicb-moe`, which AICB describes as Mixtral-8x7B (8 KV heads).
`aicb-7/13/22/175` use SwiGLU with AICB's FFN rule int(4h*2/3/64)*64 (AICB's scripts pass --swiglu),
RMSNorm, RoPE and untied embeddings without linear biases (Llama-style, as AICB's mocked Megatron model);
`aicb-405` uses the listed FFN 53248. DeepSeek sizes use the MLA dims of the matching DeepSeek model.
"""

from __future__ import annotations

from dataclasses import replace

from workload_gen.errors import WorkloadError
from workload_gen.model import ModelSpec

AICB_VOCAB = 50257


def _gpt(name: str, layers: int, hidden: int, heads: int) -> ModelSpec:
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     ffn_hidden_size=4 * hidden, vocab_size=51200, seq_length=2048)


def _llama(name: str, layers: int, hidden: int, heads: int, kv: int, ffn: int, vocab: int, seq: int,
           **kw) -> ModelSpec:
    return ModelSpec(name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                     num_kv_heads=kv, ffn_hidden_size=ffn, vocab_size=vocab, seq_length=seq,
                     activation="swiglu", norm="rmsnorm", position_embedding="rope",
                     tie_embeddings=False, add_bias_linear=False, **kw)


def _deepseek(name: str, layers: int, hidden: int, heads: int, dense_ffn: int, expert_ffn: int,
              experts: int, topk: int, shared: int, dense_layers: int, q_lora: int | None,
              vocab: int, seq: int = 4096) -> ModelSpec:
    return _llama(name, layers, hidden, heads, heads, dense_ffn, vocab, seq, attention="mla",
                  q_lora_rank=q_lora, kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64,
                  v_head_dim=128, num_experts=experts, moe_top_k=topk, moe_ffn_hidden_size=expert_ffn,
                  num_shared_experts=shared, num_dense_layers=dense_layers)


def _aicb_ffn(hidden: int) -> int:
    return int(4 * hidden * 2 / 3 / 64) * 64


def _aicb(size: str, layers: int, hidden: int, heads: int, ffn: int | None = None) -> ModelSpec:
    return _llama(f"aicb-{size}", layers, hidden, heads, heads, ffn or _aicb_ffn(hidden), AICB_VOCAB, 4096)


_MODELS: tuple[ModelSpec, ...] = (
    # ---- dense GPT (GELU 4h, LayerNorm, learned positions, tied, biases) ----
    _gpt("gpt3-175b", 96, 12288, 96),
    _gpt("gpt-1.7b", 24, 2304, 24),
    _gpt("gpt-7.5b", 36, 4096, 32),
    _gpt("gpt-22b", 48, 6144, 64),
    _gpt("mt-nlg-530b", 105, 20480, 128),
    _gpt("gpt-1t", 128, 25600, 160),
    # ---- Llama-style dense ----
    _llama("llama2-7b", 32, 4096, 32, 32, 11008, 32000, 4096),
    _llama("llama2-13b", 40, 5120, 40, 40, 13824, 32000, 4096),
    _llama("llama2-70b", 80, 8192, 64, 8, 28672, 32000, 4096),
    _llama("llama3-8b", 32, 4096, 32, 8, 14336, 128256, 8192),
    _llama("llama3-70b", 80, 8192, 64, 8, 28672, 128256, 8192),
    _llama("llama3.1-405b", 126, 16384, 128, 8, 53248, 128256, 8192),
    _llama("qwen2.5-72b", 80, 8192, 64, 8, 29568, 152064, 8192, add_qkv_bias=True),
    # 01-ai/Yi-34B (Llama architecture; serving calibration case 2 uses its 200K-context variant, same dims)
    _llama("yi-34b", 60, 7168, 56, 8, 20480, 64000, 4096),
    # ---- MoE ----
    _llama("mixtral-8x7b", 32, 4096, 32, 8, 14336, 32000, 4096,
           num_experts=8, moe_top_k=2, moe_ffn_hidden_size=14336),
    _llama("mixtral-8x22b", 56, 6144, 48, 8, 16384, 32768, 4096,
           num_experts=8, moe_top_k=2, moe_ffn_hidden_size=16384),
    _deepseek("deepseek-v2-lite", 27, 2048, 16, 10944, 1408, 64, 6, 2, 1, None, 102400),
    _deepseek("deepseek-v2", 60, 5120, 128, 12288, 1536, 160, 6, 2, 1, 1536, 102400),
    _deepseek("deepseek-v3", 61, 7168, 128, 18432, 2048, 256, 8, 1, 3, 1536, 129280),
    _llama("qwen3-235b-a22b", 94, 4096, 64, 4, 12288, 151936, 4096, head_dim=128, qk_layernorm=True,
           num_experts=128, moe_top_k=8, moe_ffn_hidden_size=1536),
    # Qwen/Qwen3-30B-A3B config.json: 48 layers, hidden 2048, 32 heads / 4 KV (head dim 128), 128 experts
    # top-8 of width 768, intermediate_size 6144 (no dense layer uses it), vocab 151936, untied
    _llama("qwen3-30b-a3b", 48, 2048, 32, 4, 6144, 151936, 4096, head_dim=128, qk_layernorm=True,
           num_experts=128, moe_top_k=8, moe_ffn_hidden_size=768),
    # ---- AICB -m sizes ----
    _aicb("7", 36, 4096, 32),
    _aicb("13", 40, 5120, 40),
    _aicb("22", 48, 6144, 64),
    _aicb("175", 96, 12288, 96),
    _aicb("405", 128, 16384, 128, 53248),
    replace(_llama("aicb-moe", 32, 4096, 32, 8, 14336, AICB_VOCAB, 4096,
                   num_experts=8, moe_top_k=2, moe_ffn_hidden_size=14336)),
    _deepseek("aicb-deepseek671", 61, 7168, 128, 18432, 2048, 256, 8, 1, 3, 1536, AICB_VOCAB),
    _deepseek("aicb-deepseek236", 60, 5120, 128, 12288, 1536, 160, 6, 2, 1, 1536, AICB_VOCAB),
    _deepseek("aicb-deepseek16", 27, 2048, 16, 10944, 1408, 64, 6, 2, 1, None, AICB_VOCAB),
)

ZOO: dict[str, ModelSpec] = {m.name: m for m in _MODELS}

ALIASES: dict[str, str] = {
    "gpt3": "gpt3-175b", "gpt-3": "gpt3-175b", "gpt-3-175b": "gpt3-175b", "gpt-175b": "gpt3-175b",
    "gpt175b": "gpt3-175b", "gpt3-1.7b": "gpt-1.7b", "gpt-7b": "gpt-7.5b", "gpt3-7.5b": "gpt-7.5b",
    "gpt3-22b": "gpt-22b", "mt-nlg": "mt-nlg-530b", "mtnlg-530b": "mt-nlg-530b", "megatron-turing-530b":
    "mt-nlg-530b", "gpt-1000b": "gpt-1t", "gpt3-1t": "gpt-1t",
    "llama-2-7b": "llama2-7b", "llama-2-13b": "llama2-13b", "llama-2-70b": "llama2-70b",
    "llama-3-8b": "llama3-8b", "llama-3-70b": "llama3-70b", "llama3.1-8b": "llama3-8b",
    "llama3.1-70b": "llama3-70b", "llama-3.1-8b": "llama3-8b", "llama-3.1-70b": "llama3-70b",
    "llama-3.1-405b": "llama3.1-405b", "llama3-405b": "llama3.1-405b", "llama-405b": "llama3.1-405b",
    "qwen2.5-72b-instruct": "qwen2.5-72b", "qwen-2.5-72b": "qwen2.5-72b",
    "yi-34b-200k": "yi-34b", "01-ai/yi-34b": "yi-34b", "01-ai/yi-34b-200k": "yi-34b",
    "mixtral-8x7b-v0.1": "mixtral-8x7b", "mixtral": "mixtral-8x7b", "mixtral-8x22b-v0.1": "mixtral-8x22b",
    "deepseek-v2-lite-chat": "deepseek-v2-lite", "deepseek-v3-671b": "deepseek-v3",
    "deepseek-v2-236b": "deepseek-v2", "qwen3-235b": "qwen3-235b-a22b", "qwen3-moe-235b": "qwen3-235b-a22b",
    "qwen3-30b": "qwen3-30b-a3b", "qwen/qwen3-30b-a3b": "qwen3-30b-a3b",
    "aicb-mixtral": "aicb-moe", "aicb-deepseek": "aicb-deepseek671",
}


def _key(name: str) -> str:
    return name.strip().lower().replace("_", "-").replace(" ", "-")


def list_models() -> list[str]:
    """Canonical zoo names, in table order."""
    return list(ZOO)


def get_model(name: str) -> ModelSpec:
    """Zoo model by canonical name or alias (case-insensitive, '_' == '-'); AICB sizes as 'aicb-<m>'."""
    key = _key(name)
    key = ALIASES.get(key, key)
    if key in ZOO:
        return ZOO[key]
    raise WorkloadError(f"unknown model {name!r}; known: {', '.join(ZOO)}")
