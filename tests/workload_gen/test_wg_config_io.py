"""Loading models (HF config.json, YAML, PerfLLM JSON) and plans; malformed files name file and key."""

from __future__ import annotations

import json

import pytest

from workload_gen.config_io import load_model, load_plan
from workload_gen.errors import ConfigFileError
from workload_gen.params import count_params
from workload_gen.plan import ParallelPlan

# Key subsets of the published HF config.json files.
LLAMA3_8B = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
             "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
             "num_key_value_heads": 8, "vocab_size": 128256, "max_position_embeddings": 8192,
             "hidden_act": "silu", "tie_word_embeddings": False, "attention_bias": False,
             "rms_norm_eps": 1e-05, "rope_theta": 500000.0}
MISTRAL_7B = {"architectures": ["MistralForCausalLM"], "model_type": "mistral", "hidden_size": 4096,
              "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
              "num_key_value_heads": 8, "vocab_size": 32000, "max_position_embeddings": 32768,
              "hidden_act": "silu", "tie_word_embeddings": False, "sliding_window": 4096}
MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "hidden_size": 4096,
           "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
           "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2, "vocab_size": 32000,
           "max_position_embeddings": 32768, "hidden_act": "silu", "tie_word_embeddings": False}
QWEN25_72B = {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 8192,
              "intermediate_size": 29568, "num_hidden_layers": 80, "num_attention_heads": 64,
              "num_key_value_heads": 8, "vocab_size": 152064, "max_position_embeddings": 32768,
              "hidden_act": "silu", "tie_word_embeddings": False}
QWEN3_235B = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
              "intermediate_size": 12288, "moe_intermediate_size": 1536, "num_hidden_layers": 94,
              "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128, "num_experts": 128,
              "num_experts_per_tok": 8, "decoder_sparse_step": 1, "mlp_only_layers": [],
              "vocab_size": 151936, "max_position_embeddings": 40960, "hidden_act": "silu",
              "tie_word_embeddings": False, "attention_bias": False}
DSV2_LITE = {"architectures": ["DeepseekV2ForCausalLM"], "model_type": "deepseek_v2", "hidden_size": 2048,
             "intermediate_size": 10944, "moe_intermediate_size": 1408, "num_hidden_layers": 27,
             "num_attention_heads": 16, "num_key_value_heads": 16, "n_shared_experts": 2,
             "n_routed_experts": 64, "num_experts_per_tok": 6, "first_k_dense_replace": 1,
             "moe_layer_freq": 1, "q_lora_rank": None, "kv_lora_rank": 512, "qk_nope_head_dim": 128,
             "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 102400,
             "max_position_embeddings": 163840, "hidden_act": "silu", "tie_word_embeddings": False}
DSV3 = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 7168,
        "intermediate_size": 18432, "moe_intermediate_size": 2048, "num_hidden_layers": 61,
        "num_attention_heads": 128, "num_key_value_heads": 128, "n_shared_experts": 1, "n_routed_experts": 256,
        "num_experts_per_tok": 8, "first_k_dense_replace": 3, "moe_layer_freq": 1, "q_lora_rank": 1536,
        "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
        "vocab_size": 129280, "max_position_embeddings": 163840, "hidden_act": "silu",
        "tie_word_embeddings": False, "num_nextn_predict_layers": 1}


def _write(tmp_path, name, data):
    p = tmp_path / name
    p.write_text(json.dumps(data) if name.endswith(".json") else data)
    return p


@pytest.mark.parametrize("cfg,total_b,active_b", [
    (LLAMA3_8B, 8.03, None), (QWEN25_72B, 72.7, None), (MIXTRAL, 46.70, 12.88),
    (QWEN3_235B, 235.1, 22.19), (DSV2_LITE, 15.71, 2.66), (DSV3, 671.0, 37.55),
])
def test_hf_configs_match_models_md(tmp_path, cfg, total_b, active_b):
    m = load_model(_write(tmp_path, "config.json", cfg))
    c = count_params(m)
    assert abs(c.total / 1e9 - total_b) / total_b < 0.005
    if active_b:
        assert abs(c.active / 1e9 - active_b) / active_b < 0.005


def test_hf_mapping_details(tmp_path):
    d = tmp_path / "Mistral-7B"
    d.mkdir()
    m = load_model(_write(d, "config.json", MISTRAL_7B))
    assert m.name == "Mistral-7B" and m.kv_heads == 8 and m.activation == "swiglu" and m.norm == "rmsnorm"
    assert not m.tie_embeddings and m.position_embedding == "rope" and m.seq_length == 8192
    q = load_model(_write(tmp_path, "q.json", QWEN25_72B))
    assert q.add_qkv_bias and not q.add_bias_linear
    ds = load_model(_write(tmp_path, "ds.json", DSV2_LITE))
    assert ds.is_mla and ds.q_lora_rank is None and ds.num_dense_layers == 1 and ds.num_shared_experts == 2
    q3 = load_model(_write(tmp_path, "q3.json", QWEN3_235B))
    assert q3.qk_layernorm and q3.head_size == 128 and q3.moe_layer_ids == tuple(range(94))


def test_hf_irregular_moe_layers(tmp_path):
    cfg = {**QWEN3_235B, "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    m = load_model(_write(tmp_path, "c.json", cfg))
    assert m.moe_layer_ids == (1, 5)          # (i+1) % 2 == 0 and i not in mlp_only_layers
    assert m.moe_layer_pattern == (0, 1, 0, 0, 0, 1) and "moe_layer_pattern" not in m.extra
    cfg = {**DSV3, "num_hidden_layers": 8, "moe_layer_freq": 2, "first_k_dense_replace": 3}
    d = load_model(_write(tmp_path, "d.json", cfg))
    assert d.moe_layer_ids == (4, 6) and d.moe_layer_pattern == (0, 0, 0, 0, 1, 0, 1, 0)
    # regular layouts keep the derived rule
    assert load_model(_write(tmp_path, "e.json", {**DSV3, "num_hidden_layers": 8})).moe_layer_pattern is None


def test_yaml_moe_layer_pattern(tmp_path):
    y = tmp_path / "m.yaml"
    y.write_text("base: mixtral-8x7b\nnum_layers: 4\nmoe_layer_pattern: [1, 0, 1, 0]\n")
    m = load_model(y)
    assert m.moe_layer_pattern == (1, 0, 1, 0) and m.moe_layer_ids == (0, 2)
    y.write_text("base: mixtral-8x7b\nnum_layers: 4\nmoe_layer_pattern: [1, 0]\n")
    with pytest.raises(ConfigFileError, match=r"key 'moe_layer_pattern': must hold one 0/1 per layer"):
        load_model(y)
    y.write_text("base: mixtral-8x7b\nmoe_layer_pattern: yes\n")
    with pytest.raises(ConfigFileError, match=r"key 'moe_layer_pattern': expected a list of integers"):
        load_model(y)


def test_hf_architectures_only(tmp_path):
    cfg = {k: v for k, v in LLAMA3_8B.items() if k != "model_type"}
    assert load_model(_write(tmp_path, "c.json", cfg)).hidden_size == 4096


def test_hf_bad_value_names_file_and_key(tmp_path):
    p = _write(tmp_path, "cfg.json", {**LLAMA3_8B, "hidden_size": "abc"})
    with pytest.raises(ConfigFileError) as e:
        load_model(p)
    assert str(e.value) == f"{p}: key 'hidden_size': expected a positive integer, got 'abc'"


@pytest.mark.parametrize("change,key", [
    ({"num_hidden_layers": None}, "num_hidden_layers"),
    ({"num_attention_heads": 0}, "num_attention_heads"),
    ({"num_key_value_heads": 2.5}, "num_key_value_heads"),
    ({"tie_word_embeddings": "no"}, "tie_word_embeddings"),
    ({"hidden_act": "gelu"}, "hidden_act"),
    # a rule broken across keys names the key written in the file, not clustersim's field name
    ({"num_key_value_heads": 5}, "num_key_value_heads"),
])
def test_hf_malformed_keys(tmp_path, change, key):
    cfg = {**LLAMA3_8B, **change}
    cfg = {k: v for k, v in cfg.items() if v is not None}
    p = _write(tmp_path, "cfg.json", cfg)
    with pytest.raises(ConfigFileError) as e:
        load_model(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: key '{key}'") and "\n" not in msg


def test_unknown_architecture_lists_supported(tmp_path):
    p = _write(tmp_path, "cfg.json", {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]})
    with pytest.raises(ConfigFileError) as e:
        load_model(p)
    msg = str(e.value)
    assert "\n" not in msg and "'gpt2'" in msg
    for arch in ("llama", "mistral", "mixtral", "qwen2", "qwen3_moe", "deepseek_v2", "deepseek_v3"):
        assert arch in msg


def test_invalid_json_and_yaml_syntax(tmp_path):
    p = tmp_path / "c.json"
    p.write_text('{"hidden_size": 4096,\n "x": }')
    with pytest.raises(ConfigFileError, match=r"c\.json:2: invalid JSON"):
        load_model(p)
    y = _write(tmp_path, "m.yaml", "name: x\nnum_layers: [1,\n")
    with pytest.raises(ConfigFileError, match=r"m\.yaml:\d+: invalid YAML"):
        load_model(y)
    with pytest.raises(ConfigFileError, match="top level"):
        load_model(_write(tmp_path, "l.yaml", "- 1\n- 2\n"))
    with pytest.raises(ConfigFileError, match="cannot read"):
        load_model(tmp_path / "missing.yaml")


def test_yaml_model_fields(tmp_path):
    y = _write(tmp_path, "mine.yaml", "num_layers: 4\nhidden_size: 64\nnum_attention_heads: 4\n"
               "ffn_hidden_size: 256\nvocab_size: 1000\nactivation: swiglu\ntie_embeddings: false\n")
    m = load_model(y)
    assert m.name == "mine" and m.num_layers == 4 and m.activation == "swiglu" and not m.tie_embeddings


def test_yaml_model_base_override(tmp_path):
    m = load_model(_write(tmp_path, "m.yaml", "base: llama3-8b\nname: llama3-8b-16l\nnum_layers: 16\n"))
    assert m.num_layers == 16 and m.hidden_size == 4096 and m.kv_heads == 8 and m.name == "llama3-8b-16l"


@pytest.mark.parametrize("text,key", [
    ("base: llama3-8b\nfoo: 1\n", "foo"),
    ("base: llama3-8b\nnum_layers: abc\n", "num_layers"),
    ("base: llama3-8b\ntie_embeddings: 3\n", "tie_embeddings"),
    ("base: llama3-8b\nactivation: relu\n", "activation"),
    ("base: nope\n", "base"),
    ("hidden_size: 64\n", "num_layers"),
])
def test_yaml_model_malformed(tmp_path, text, key):
    p = _write(tmp_path, "m.yaml", text)
    with pytest.raises(ConfigFileError) as e:
        load_model(p)
    assert str(e.value).startswith(f"{p}: key '{key}'"), str(e.value)


@pytest.mark.parametrize("cfg,key", [
    ({**MIXTRAL, "num_local_experts": 4, "num_experts_per_tok": 6}, "num_experts_per_tok"),
    ({**DSV3, "first_k_dense_replace": 70, "num_hidden_layers": 61}, "first_k_dense_replace"),
    ({**QWEN3_235B, "num_key_value_heads": 3}, "num_key_value_heads"),
])
def test_hf_rule_violations_name_the_files_key(tmp_path, cfg, key):
    p = _write(tmp_path, "config.json", cfg)
    with pytest.raises(ConfigFileError) as e:
        load_model(p)
    assert str(e.value).startswith(f"{p}: key '{key}': "), str(e.value)


def test_perfllm_rule_violation_names_the_files_key(tmp_path):
    cfg = {"model_type": "dense", "hidden_size": 4096, "head_num": 32, "kv_head_num": 5,
           "intermediate_size": 11008, "layer_num": 32, "vocab_size": 32000}
    p = _write(tmp_path, "model.json", cfg)
    with pytest.raises(ConfigFileError) as e:
        load_model(p)
    assert str(e.value).startswith(f"{p}: key 'kv_head_num': "), str(e.value)


def test_perfllm_model_json(tmp_path):
    cfg = {"model_type": "moe", "model_name": "dsv3", "hidden_size": 7168, "head_num": 128,
           "kv_head_num": 128, "intermediate_size": 18432, "layer_num": 61, "vocab_size": 129280,
           "use_swiglu": True, "attention_type": "mla", "moe_ffn_hidden_size": 2048,
           "moe_shared_expert_intermediate_size": 2048, "dense_layers": 3, "expert_num": 256, "topk": 8,
           "q_lora_rank": 1536, "kv_lora_rank": 512, "qk_head_dim": 128, "qk_pos_emb_head_dim": 64,
           "v_head_dim": 128}
    m = load_model(_write(tmp_path, "model.json", cfg))
    c = count_params(m)
    assert m.name == "dsv3" and abs(c.total / 1e9 - 671.0) / 671.0 < 0.005
    assert abs(c.active / 1e9 - 37.55) / 37.55 < 0.005


def test_plan_yaml_and_json(tmp_path):
    y = _write(tmp_path, "p.yaml", "world_size: 1024\ntp: 8\npp: 8\nsequence_parallel: true\n"
               "global_batch_size: 1536\nrecompute: selective\n")
    assert load_plan(y) == ParallelPlan(world_size=1024, tp=8, pp=8, sequence_parallel=True,
                                        global_batch_size=1536, recompute="selective")
    j = _write(tmp_path, "p.json", {"plan": {"dp": 4, "tp": 2, "pp": 2, "etp": None}})
    assert load_plan(j) == ParallelPlan(world_size=16, tp=2, pp=2)


def test_plan_without_seq_length_takes_the_models(tmp_path):
    from workload_gen.zoo import get_model
    y = _write(tmp_path, "p.yaml", "world_size: 8\ntp: 8\n")
    assert load_plan(y).seq_length == 2048                                  # no model: plan default
    assert load_plan(y, model=get_model("llama3-8b")).seq_length == 8192
    y2 = _write(tmp_path, "p2.yaml", "world_size: 8\ntp: 8\nseq_length: 1024\n")
    assert load_plan(y2, model=get_model("llama3-8b")).seq_length == 1024    # the file's value wins


@pytest.mark.parametrize("text,key,what", [
    ("world_size: 8\ntp: x\n", "tp", "expected a positive integer, got 'x'"),
    ("world_size: 8\nsequence_parallel: 1\n", "sequence_parallel", "true or false"),
    ("world_size: 8\nfoo: 1\n", "foo", "unknown ParallelPlan field"),
    ("tp: 8\n", "world_size", "missing"),
    ("world_size: 8\ndp: 2\ntp: 2\n", "dp", "disagrees"),
    ("world_size: 8\nframework: 3\n", "framework", "expected a string"),
    ("world_size: 8\nzero_stage: -1\n", "zero_stage", "integer >= 0"),
])
def test_plan_malformed(tmp_path, text, key, what):
    p = _write(tmp_path, "plan.yaml", text)
    with pytest.raises(ConfigFileError) as e:
        load_plan(p)
    assert str(e.value).startswith(f"{p}: key '{key}': ") and what in str(e.value), str(e.value)


def test_perfllm_strategy_json(tmp_path):
    s = {"seq_len": 4096, "micro_batch_size": 1, "micro_batch_num": 32, "dtype": "bf16", "world_size": 256,
         "tp_size": 4, "pp_size": 4, "ep_size": 8, "etp_size": 1, "cp_size": 1,
         "enable_sequence_parallel": True, "interleaving_size": 2, "zero_state": 1, "use_flash_sdp": True,
         "enable_recompute": True, "recompute_granularity": "full_block", "recompute_layer_num": 2,
         "num_layers_in_first_pipeline_stage": 14, "num_layers_in_last_pipeline_stage": 16}
    p = load_plan(_write(tmp_path, "strategy.json", s))
    assert (p.tp, p.pp, p.ep, p.etp, p.vpp, p.dp) == (4, 4, 8, 1, 2, 16)
    assert p.global_batch_size == 32 * 16 and p.recompute == "full" and p.recompute_num_layers == 2
    assert p.distributed_optimizer and p.sequence_parallel and p.num_layers_first_stage == 14
