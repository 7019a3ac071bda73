"""Zoo models: dims and published parameter totals (numbers typed from reference/models.md)."""

from __future__ import annotations

import pytest

from workload_gen.errors import WorkloadError
from workload_gen.layout import layer_assignment, stage_layer_counts
from workload_gen.model import ModelSpec
from workload_gen.params import count_params
from workload_gen.plan import ParallelPlan
from workload_gen.plan_validation import validate_model
from workload_gen.vocab import padded_vocab_size
from workload_gen.zoo import get_model, list_models

# name -> (total params, active params or None), from models.md (billions)
KNOWN = {
    "gpt3-175b": (174.6, None),
    "gpt-1.7b": (1.66, None),
    "gpt-7.5b": (7.47, None),
    "gpt-22b": (22.07, None),
    "mt-nlg-530b": (529.6, None),
    "gpt-1t": (1008.0, None),
    "llama2-7b": (6.74, None),
    "llama2-13b": (13.0, None),
    "llama2-70b": (68.98, None),
    "llama3-8b": (8.03, None),
    "llama3-70b": (70.55, None),
    "llama3.1-405b": (405.9, None),
    "qwen2.5-72b": (72.7, None),
    "mixtral-8x7b": (46.70, 12.88),
    "mixtral-8x22b": (140.6, 39.16),
    "deepseek-v2-lite": (15.71, 2.66),
    "deepseek-v2": (235.7, 21.38),
    "deepseek-v3": (671.0, 37.55),
    "qwen3-235b-a22b": (235.1, 22.19),
}


@pytest.mark.parametrize("name", sorted(KNOWN))
def test_zoo_totals_within_half_percent(name):
    total_b, active_b = KNOWN[name]
    c = count_params(get_model(name))
    assert abs(c.total / 1e9 - total_b) / total_b < 0.005, c.total
    if active_b is None:
        assert c.active == c.total
    else:
        assert abs(c.active / 1e9 - active_b) / active_b < 0.005, c.active


def test_every_models_md_model_is_in_the_zoo():
    assert set(KNOWN) <= set(list_models())
    for name in list_models():
        validate_model(get_model(name))


def test_gpt3_175b_exact_total():
    # 96 layers x (12h^2 + 13h) + V*h + s*h + 2h, h = 12288, V = 51200, s = 2048
    assert count_params(get_model("gpt3-175b")).total == 174_615_846_912


@pytest.mark.parametrize("alias,name", [
    ("GPT3-175B", "gpt3-175b"), ("llama3-70b", "llama3-70b"), ("Llama-3.1-405B", "llama3.1-405b"),
    ("llama3.1-405b", "llama3.1-405b"), ("mixtral-8x7b", "mixtral-8x7b"), ("DeepSeek-V3", "deepseek-v3"),
    ("aicb-7", "aicb-7"), ("AICB_175", "aicb-175"), ("aicb-moe", "aicb-moe"),
    ("aicb-deepseek671", "aicb-deepseek671"), ("aicb-405", "aicb-405"), ("gpt-175b", "gpt3-175b"),
])
def test_aliases(alias, name):
    assert get_model(alias).name == name


def test_unknown_model_is_one_line_listing_names():
    with pytest.raises(WorkloadError) as e:
        get_model("gpt-5")
    msg = str(e.value)
    assert "\n" not in msg and "gpt-5" in msg and "llama3-70b" in msg


def test_aicb_sizes_follow_simai_formats_section_7():
    m7 = get_model("aicb-7")
    assert (m7.num_layers, m7.hidden_size, m7.num_attention_heads) == (36, 4096, 32)
    assert m7.ffn_hidden_size == 10880           # int(4*4096*2/3/64)*64
    assert m7.activation == "swiglu" and m7.vocab_size == 50257
    assert get_model("aicb-13").ffn_hidden_size == 13632   # int(4*5120*2/3/64)*64 = 213*64
    m405 = get_model("aicb-405")
    assert (m405.num_layers, m405.hidden_size, m405.ffn_hidden_size) == (128, 16384, 53248)
    moe = get_model("aicb-moe")
    assert (moe.num_experts, moe.moe_top_k, moe.moe_ffn_hidden_size) == (8, 2, 14336)
    ds = get_model("aicb-deepseek671")
    assert (ds.num_experts, ds.moe_top_k, ds.num_shared_experts, ds.num_dense_layers) == (256, 8, 1, 3)
    assert (ds.q_lora_rank, ds.kv_lora_rank, ds.qk_nope_head_dim, ds.qk_rope_head_dim, ds.v_head_dim) == \
        (1536, 512, 128, 64, 128)
    assert get_model("aicb-deepseek16").q_lora_rank is None


def test_model_properties():
    ds = get_model("deepseek-v3")
    assert ds.is_moe and ds.is_mla and ds.qk_head_dim == 192 and ds.v_head_size == 128
    assert [ds.layer_is_moe(i) for i in range(5)] == [False, False, False, True, True]
    assert len(ds.moe_layer_ids) == 58 and ds.shared_expert_total_ffn == 2048
    q = get_model("qwen3-235b-a22b")
    assert q.kv_heads == 4 and q.head_size == 128 and q.qk_layernorm
    g = get_model("gpt3-175b")
    assert g.kv_heads == 96 and g.head_size == 128 and not g.is_moe and not g.gated_mlp
    lite = get_model("deepseek-v2-lite")
    assert lite.shared_expert_total_ffn == 2 * 1408
    m = ModelSpec("x", 6, 64, 4, 128, 100, num_experts=4, moe_top_k=1, num_dense_layers=1, moe_layer_freq=2)
    assert m.moe_layer_ids == (1, 3, 5)
    p = ModelSpec("x", 4, 64, 4, 128, 100, num_experts=4, moe_top_k=1, moe_layer_pattern=(0, 1, 1, 0))
    assert p.moe_layer_ids == (1, 2)
    # a list (JSON/YAML) is stored as a tuple: the spec stays hashable and equal to the tuple form
    q = ModelSpec("x", 4, 64, 4, 128, 100, num_experts=4, moe_top_k=1, moe_layer_pattern=[0, 1, 1, 0])
    assert q.moe_layer_pattern == (0, 1, 1, 0) and q == p and hash(q) == hash(p)


@pytest.mark.parametrize("vocab,tp,expected", [
    (50257, 1, 50304), (50257, 8, 51200), (51200, 8, 51200), (32000, 8, 32768), (128256, 8, 129024),
    (152064, 4, 152064), (129280, 16, 131072), (1, 1, 128),
])
def test_padded_vocab_size(vocab, tp, expected):
    assert padded_vocab_size(vocab, tp) == expected


def test_padded_vocab_custom_divisor():
    assert padded_vocab_size(1000, 2, divisible_by=64) == 1024


def _m(layers):
    return ModelSpec("x", layers, 64, 4, 256, 1000)


def test_layer_assignment_even_and_interleaved():
    assert layer_assignment(_m(8), ParallelPlan(world_size=2, pp=2)) == [[(0, 1, 2, 3)], [(4, 5, 6, 7)]]
    # Megatron interleaved: stage s chunk c holds block (c*pp + s)
    assert layer_assignment(_m(16), ParallelPlan(world_size=4, pp=4, vpp=2)) == [
        [(0, 1), (8, 9)], [(2, 3), (10, 11)], [(4, 5), (12, 13)], [(6, 7), (14, 15)]]
    assert layer_assignment(_m(4), ParallelPlan(world_size=1)) == [[(0, 1, 2, 3)]]


def test_uneven_stages_memory_doc_example():
    # memory_and_perfllm.md: 50 layers, pp 4, first 9, last 11 -> [9, 15, 15, 11]
    plan = ParallelPlan(world_size=4, pp=4, num_layers_first_stage=9, num_layers_last_stage=11)
    assert stage_layer_counts(_m(50), plan) == [9, 15, 15, 11]
    la = layer_assignment(_m(50), plan)
    assert la[0] == [tuple(range(9))] and la[3] == [tuple(range(39, 50))]
    assert stage_layer_counts(_m(10), ParallelPlan(world_size=4, pp=4, num_layers_first_stage=1)) == [1, 3, 3, 3]


def test_uneven_interleaved_rounds():
    plan = ParallelPlan(world_size=3, pp=3, vpp=2, num_layers_first_stage=2, num_layers_last_stage=2)
    la = layer_assignment(_m(8), plan)        # stage sizes [2, 4, 2] -> chunks of [1, 2, 1]
    assert la == [[(0,), (4,)], [(1, 2), (5, 6)], [(3,), (7,)]]
    assert sorted(i for st in la for ch in st for i in ch) == list(range(8))
