"""HF config.json MoE aliases across DeepSeek / Qwen / Mixtral variants, dense qwen3 and qwen3_next, and
configs with MoE keys that can never become dense models silently."""

from __future__ import annotations

import json

import pytest

from workload_gen.config_io import CompatibilityWarning, load_model
from workload_gen.errors import ConfigFileError
from workload_gen.params import count_params

# DeepSeek-V3's published config.json (key subset) with the experts named `num_routed_experts`, as SimAI's
# copy of it has them (that file is not under ../shared/data; this is the same config built by hand).
DSV3_SIMAI = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
              "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
              "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1,
              "num_routed_experts": 256, "num_experts_per_tok": 8, "first_k_dense_replace": 3,
              "moe_layer_freq": 1, "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
              "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
              "max_position_embeddings": 163840, "hidden_act": "silu", "tie_word_embeddings": False,
              "num_nextn_predict_layers": 1, "topk_method": "noaux_tc", "n_group": 8, "topk_group": 4}
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
           "max_position_embeddings": 32768, "hidden_act": "silu", "tie_word_embeddings": False}
QWEN3_MOE = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
             "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 94,
             "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
             "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [], "vocab_size": 151936,
             "max_position_embeddings": 40960, "hidden_act": "silu", "tie_word_embeddings": False}
# Qwen3-8B and Qwen3-0.6B (published config.json subsets)
QWEN3_8B = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": 4096,
            "intermediate_size": 12288, "num_hidden_layers": 36, "num_attention_heads": 32,
            "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "max_position_embeddings": 40960,
            "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False}
QWEN3_06B = {**QWEN3_8B, "hidden_size": 1024, "intermediate_size": 3072, "num_hidden_layers": 28,
             "num_attention_heads": 16, "num_key_value_heads": 8, "tie_word_embeddings": True}
# Qwen3-Next-80B-A3B (published config.json subset)
QWEN3_NEXT = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2048,
              "intermediate_size": 5120, "num_hidden_layers": 48, "num_attention_heads": 16,
              "num_key_value_heads": 2, "head_dim": 256, "vocab_size": 151936, "max_position_embeddings": 262144,
              "hidden_act": "silu", "tie_word_embeddings": False, "num_experts": 512, "num_experts_per_tok": 10,
              "moe_intermediate_size": 512, "shared_expert_intermediate_size": 512, "decoder_sparse_step": 1,
              "mlp_only_layers": [], "full_attention_interval": 4, "linear_num_value_heads": 32,
              "linear_num_key_heads": 16, "linear_key_head_dim": 128, "linear_value_head_dim": 128,
              "linear_conv_kernel_dim": 4, "partial_rotary_factor": 0.25, "attn_output_gate": True}
# Qwen1.5-MoE-A2.7B (qwen2_moe) and deepseek-moe-16b (deepseek): published 14.3 B / 2.7 B and 16.4 B / 2.8 B
QWEN2_MOE = {"architectures": ["Qwen2MoeForCausalLM"], "model_type": "qwen2_moe", "hidden_size": 2048,
             "intermediate_size": 5632, "moe_intermediate_size": 1408, "shared_expert_intermediate_size": 5632,
             "num_experts": 60, "num_experts_per_tok": 4, "num_hidden_layers": 24, "num_attention_heads": 16,
             "num_key_value_heads": 16, "vocab_size": 151936, "max_position_embeddings": 8192,
             "decoder_sparse_step": 1, "mlp_only_layers": [], "hidden_act": "silu", "tie_word_embeddings": False}
DEEPSEEK_MOE = {"architectures": ["DeepseekForCausalLM"], "model_type": "deepseek", "hidden_size": 2048,
                "intermediate_size": 10944, "moe_intermediate_size": 1408, "n_routed_experts": 64,
                "n_shared_experts": 2, "num_experts_per_tok": 6, "first_k_dense_replace": 1, "moe_layer_freq": 1,
                "num_hidden_layers": 28, "num_attention_heads": 16, "num_key_value_heads": 16,
                "vocab_size": 102400, "max_position_embeddings": 4096, "hidden_act": "silu",
                "tie_word_embeddings": False}


def _load(tmp_path, cfg, name="model"):
    """Loaded from <name>/config.json, so that the model is called <name> whatever the directory holds."""
    p = tmp_path / name / "config.json"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(json.dumps(cfg))
    return load_model(p)


def _error(tmp_path, cfg) -> str:
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    with pytest.raises(ConfigFileError) as e:
        load_model(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: key '") and "\n" not in msg
    return msg.removeprefix(f"{p}: ")


def test_simai_deepseek_v3_with_num_routed_experts_is_the_671b_moe(tmp_path):
    m = _load(tmp_path, DSV3_SIMAI)
    assert (m.num_experts, m.moe_top_k, m.num_shared_experts, m.num_dense_layers) == (256, 8, 1, 3)
    assert m.expert_ffn_hidden_size == 2048 and m.is_mla and m.moe_layer_ids == tuple(range(3, 61))
    c = count_params(m)                       # reference/models.md: 671.0 B total, 37.55 B active
    assert c.total / 1e9 == pytest.approx(671.0, rel=0.005)
    assert c.active / 1e9 == pytest.approx(37.55, rel=0.005)


@pytest.mark.parametrize("alias", ["n_routed_experts", "num_routed_experts", "num_local_experts", "num_experts",
                                   "moe_num_experts"])
def test_every_expert_count_alias_reads_the_same(tmp_path, alias):
    cfg = {k: v for k, v in DSV3_SIMAI.items() if k != "num_routed_experts"}
    assert _load(tmp_path, {**cfg, alias: 256}) == _load(tmp_path / "ref", DSV3_SIMAI)


@pytest.mark.parametrize("field,aliases", [
    ("num_experts_per_tok", ["moe_top_k", "moe_router_topk", "moe_topk"]),
    ("moe_intermediate_size", ["moe_ffn_hidden_size", "expert_intermediate_size"]),
    ("n_shared_experts", ["num_shared_experts"]),
])
def test_moe_field_aliases(tmp_path, field, aliases):
    ref = _load(tmp_path / "ref", DSV3_SIMAI)
    for alias in aliases:
        cfg = {k: v for k, v in DSV3_SIMAI.items() if k != field}
        assert _load(tmp_path, {**cfg, alias: DSV3_SIMAI[field]}) == ref, alias


def test_disagreeing_aliases_name_both_keys(tmp_path):
    msg = _error(tmp_path, {**DSV3_SIMAI, "n_routed_experts": 128})
    assert msg == "key 'num_routed_experts': disagrees with 'n_routed_experts' (256 vs 128)"


@pytest.mark.parametrize("cfg,count_key,named", [
    (DSV3_SIMAI, "num_routed_experts", ["num_experts_per_tok", "moe_intermediate_size", "n_shared_experts"]),
    (MIXTRAL, "num_local_experts", ["num_experts_per_tok"]),
    (QWEN3_MOE, "num_experts", ["num_experts_per_tok", "moe_intermediate_size"]),
    (QWEN3_NEXT, "num_experts", ["num_experts_per_tok", "moe_intermediate_size",
                                 "shared_expert_intermediate_size"]),
])
def test_moe_keys_without_expert_count_never_become_dense(tmp_path, cfg, count_key, named):
    msg = _error(tmp_path, {k: v for k, v in cfg.items() if k != count_key})
    assert msg.startswith(f"key '{named[0]}': MoE keys ({', '.join(repr(n) for n in named)}) given but no "
                          f"expert count (one of n_routed_experts, num_routed_experts, num_local_experts, "
                          f"num_experts, moe_num_experts); refusing to read it as a dense model")


def test_missing_top_k_or_expert_width_is_named(tmp_path):
    cfg = {k: v for k, v in QWEN3_MOE.items() if k != "num_experts_per_tok"}
    assert _error(tmp_path, cfg).startswith("key 'num_experts_per_tok': missing (the experts per token")
    cfg = {k: v for k, v in QWEN3_MOE.items() if k != "moe_intermediate_size"}
    assert _error(tmp_path, cfg) == "key 'moe_intermediate_size': missing (the expert width of qwen3_moe)"
    # Mixtral: intermediate_size is each expert's width
    m = _load(tmp_path, MIXTRAL)
    assert (m.num_experts, m.moe_top_k, m.expert_ffn_hidden_size) == (8, 2, 14336)


def test_layer_structure_keys(tmp_path):
    m = _load(tmp_path, {**DSV3_SIMAI, "num_hidden_layers": 6, "first_k_dense_replace": 1,
                         "moe_layer_freq": [0, 1, 0, 1, 1, 1]})
    assert m.moe_layer_ids == (1, 3, 4, 5)
    msg = _error(tmp_path, {**QWEN3_MOE, "num_hidden_layers": 2, "mlp_only_layers": [0, 1]})
    assert msg == "key 'mlp_only_layers': leaves no MoE layer for the 128 experts of 'num_experts'"
    msg = _error(tmp_path, {**DSV3_SIMAI, "moe_layer_freq": [1, 0]})
    assert msg.startswith("key 'moe_layer_freq': expected an integer or one 0/1 per layer (61)")


def _gqa_dense_params(h, layers, heads, kv, d, ffn, vocab, tied) -> int:
    """Qwen3 dense: untied (or tied) embedding, per layer q/k/v/o without biases, q/k RMSNorm (d each),
    two RMSNorms (h each), SwiGLU (3 h x ffn); final RMSNorm."""
    per_layer = h * heads * d + 2 * h * kv * d + heads * d * h + 2 * d + 2 * h + 3 * h * ffn
    return vocab * h * (1 if tied else 2) + h + layers * per_layer


@pytest.mark.parametrize("cfg,published_b", [(QWEN3_8B, 8.2), (QWEN3_06B, 0.6)])
def test_dense_qwen3(tmp_path, cfg, published_b):
    m = _load(tmp_path, cfg, "Qwen3")
    assert m.name == "Qwen3" and not m.is_moe and m.qk_layernorm and m.head_size == 128
    assert not m.add_qkv_bias and m.tie_embeddings == cfg["tie_word_embeddings"]
    total = count_params(m).total
    assert total == _gqa_dense_params(cfg["hidden_size"], cfg["num_hidden_layers"], cfg["num_attention_heads"],
                                      cfg["num_key_value_heads"], 128, cfg["intermediate_size"], 151936,
                                      cfg["tie_word_embeddings"])
    assert round(total / 1e9, 1) == published_b


def test_qwen3_next_loads_as_moe_and_says_what_of_its_attention_is_modelled(tmp_path):
    with pytest.warns(CompatibilityWarning, match=r"qwen3_next: all 48 layers are modelled as full GQA attention"
                                                  r".*its 36 Gated DeltaNet linear-attention layers"):
        m = _load(tmp_path, QWEN3_NEXT)
    assert (m.num_experts, m.moe_top_k, m.expert_ffn_hidden_size) == (512, 10, 512)
    assert (m.num_shared_experts, m.shared_expert_total_ffn, m.moe_layer_ids) == (1, 512, tuple(range(48)))
    assert m.head_size == 256 and m.kv_heads == 2 and m.qk_layernorm
    assert m.extra["attention_layers"] == {"full_attention": 12, "linear_attention": 36}
    assert "not modelled" in m.extra["approximations"][0]
    # layer_types, when given, decides which layers are full attention
    types = ["linear_attention", "full_attention"] * 24
    with pytest.warns(CompatibilityWarning, match="its 24 Gated DeltaNet"):
        m = _load(tmp_path, {**QWEN3_NEXT, "layer_types": types})
    assert m.extra["attention_layers"] == {"full_attention": 24, "linear_attention": 24}
    # 512 experts x 3 x 2048 x 512 per layer dominate: about 80 B (published), attention approximated
    assert count_params(m).total / 1e9 == pytest.approx(80, rel=0.02)


@pytest.mark.parametrize("cfg,total_b,active_b,shared", [(QWEN2_MOE, 14.3, 2.7, (1, 5632)),
                                                          (DEEPSEEK_MOE, 16.4, 2.8, (2, 2816))])
def test_qwen2_moe_and_deepseek_moe(tmp_path, cfg, total_b, active_b, shared):
    m = _load(tmp_path, cfg)
    assert m.is_moe and not m.is_mla and (m.num_shared_experts, m.shared_expert_total_ffn) == shared
    c = count_params(m)
    assert round(c.total / 1e9, 1) == total_b and round(c.active / 1e9, 1) == active_b
    assert m.add_qkv_bias == (cfg["model_type"] == "qwen2_moe")     # HF Qwen2 always has q/k/v biases


def test_unknown_architecture_lists_the_new_ones(tmp_path):
    p = tmp_path / "config.json"
    p.write_text(json.dumps({"model_type": "gpt2"}))
    with pytest.raises(ConfigFileError) as e:
        load_model(p)
    msg = str(e.value)
    for arch in ("qwen2_moe", "qwen3", "qwen3_next", "deepseek", "deepseek_v3"):
        assert f"{arch}," in msg or msg.endswith(arch)
