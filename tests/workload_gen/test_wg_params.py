"""Parameter counting: hand-computed per-layer and per-rank values (Megatron layout)."""

from __future__ import annotations

import pytest

from workload_gen.model import ModelSpec
from workload_gen.params import count_params, layer_params, stage_params
from workload_gen.plan import ParallelPlan
from workload_gen.zoo import get_model

# GPT-style: LayerNorm (w+b), GELU 4h, biases, learned positions, tied embedding.
GPT = ModelSpec("tiny-gpt", num_layers=4, hidden_size=64, num_attention_heads=4, ffn_hidden_size=256,
                vocab_size=1000, seq_length=128)
# per layer: qkv 64*192+192=12480, proj 4096+64=4160, fc1 16384+256=16640, fc2 16384+64=16448, norms 256
GPT_LAYER = 49984
# Mixtral-style: RMSNorm, SwiGLU, GQA (4 heads / 2 KV, head 16), 8 experts top-2, untied, no bias.
MOE = ModelSpec("tiny-moe", num_layers=2, hidden_size=64, num_attention_heads=4, num_kv_heads=2,
                ffn_hidden_size=96, vocab_size=1000, seq_length=128, activation="swiglu", norm="rmsnorm",
                position_embedding="rope", tie_embeddings=False, add_bias_linear=False,
                num_experts=8, moe_top_k=2, moe_ffn_hidden_size=96)


def test_gpt_layer_and_total():
    lp = layer_params(GPT, 0)
    assert (lp.attention, lp.mlp, lp.norms) == (12480 + 4160, 16640 + 16448, 256)
    assert lp.total == GPT_LAYER
    c = count_params(GPT)
    assert c.total == 4 * GPT_LAYER + 1000 * 64 + 128 * 64 + 128 == 272256
    assert (c.embedding, c.position_embedding, c.lm_head, c.final_norm) == (64000, 8192, 0, 128)
    assert c.active == c.total and c.expert == 0


def test_gpt_stage_params_tp2_pp2_tied_copy():
    plan = ParallelPlan(world_size=4, tp=2, pp=2)
    # tp=2 per layer: qkv 6144+96, proj 2048+64, fc1 8192+128, fc2 8192+64, norms 256 = 25184
    # vocab padded to a multiple of 256 -> 1024, 512 rows per rank -> 32768
    s0, s1 = stage_params(GPT, plan, 0), stage_params(GPT, plan, 1)
    assert s0.layers == (0, 1) and s1.layers == (2, 3)
    assert s0.dense == 2 * 25184 + 32768 + 8192 == 91328
    assert s1.dense == 2 * 25184 + 128 + 32768 == 83264      # final norm + tied embedding copy
    assert (s0.embedding, s0.position_embedding, s1.embedding, s1.lm_head) == (32768, 8192, 32768, 0)
    assert s0.expert == s1.expert == 0 and s0.total == s0.dense
    # replicated over TP: proj bias + fc2 bias + 2 layernorms per layer, position embedding
    assert s0.tp_replicated == 2 * (64 + 64 + 256) + 8192


def test_gpt_single_stage_holds_one_embedding():
    s = stage_params(GPT, ParallelPlan(world_size=1), 0)
    assert s.dense == 4 * GPT_LAYER + 1024 * 64 + 8192 + 128   # padded vocab 1024, one tied matrix
    assert s.lm_head == 0


def test_moe_counts():
    lp = layer_params(MOE, 0)
    # attention: qkv 64*(4+2*2)*16 = 8192, proj 4096; router 8*64; expert 3*64*96 = 18432
    assert (lp.attention, lp.router, lp.expert_each, lp.experts) == (12288, 512, 18432, 147456)
    assert lp.active == 12288 + 128 + 512 + 2 * 18432
    c = count_params(MOE)
    assert c.total == 2 * (12288 + 128 + 512 + 147456) + 2 * 64000 + 64 == 448832
    assert c.active == 2 * (12288 + 128 + 512 + 36864) + 128064 == 227648
    assert c.expert == 2 * 147456 and c.non_expert == c.total - c.expert


@pytest.mark.parametrize("ep,etp,expert_per_layer", [(4, 1, 2 * 18432), (4, 2, 2 * 9216), (2, 2, 4 * 9216),
                                                     (8, 1, 18432)])
def test_moe_stage_params_ep_etp(ep, etp, expert_per_layer):
    plan = ParallelPlan(world_size=8, tp=2, ep=ep, etp=etp, sequence_parallel=True)
    s = stage_params(MOE, plan, 0)
    # dense per layer: attention/2 + norms + router (replicated); embedding + LM head 512 rows each + final norm
    assert s.dense == 2 * (6144 + 128 + 512) + 2 * 512 * 64 + 64
    assert s.expert == 2 * expert_per_layer
    assert s.lm_head == 32768 and s.embedding == 32768


def test_mla_attention_deepseek_v3():
    m = get_model("deepseek-v3")
    lp = layer_params(m, 0)
    # q_down 7168*1536 + q_norm 1536 + q_up 1536*128*192 + kv_down 7168*576 + kv_norm 512
    # + kv_up 512*128*256 + proj 128*128*7168
    assert lp.attention == 11010048 + 1536 + 37748736 + 4128768 + 512 + 16777216 + 117440512
    assert not lp.is_moe and lp.mlp == 3 * 7168 * 18432
    moe = layer_params(m, 3)
    assert moe.is_moe and moe.router == 256 * 7168 and moe.expert_each == 3 * 7168 * 2048
    assert moe.shared_expert == 3 * 7168 * 2048


def test_mla_tp_sharding_keeps_down_projections_replicated():
    m = get_model("deepseek-v3")
    plan = ParallelPlan(world_size=64, tp=8, pp=1, ep=8, sequence_parallel=True, global_batch_size=64)
    from workload_gen.params import layer_rank_params
    dense, expert, rep = layer_rank_params(m, plan, 0)
    replicated = 11010048 + 1536 + 4128768 + 512
    sharded = (37748736 + 16777216 + 117440512) // 8
    assert dense == replicated + sharded + 2 * 7168 + 3 * 7168 * 18432 // 8
    assert rep == replicated + 2 * 7168 and expert == 0
    d3, e3, _ = layer_rank_params(m, plan, 3)
    assert e3 == 32 * 3 * 7168 * 2048 // 8          # 256/8 experts, each sharded by etp = tp = 8


@pytest.mark.parametrize("name,pp", [("llama3-70b", 8), ("llama2-7b", 4), ("mixtral-8x7b", 4),
                                     ("deepseek-v2-lite", 3)])
def test_stages_sum_to_total_when_unsharded(name, pp):
    m = get_model(name)   # untied, vocab already a multiple of 128: no padding, no copies
    plan = ParallelPlan(world_size=pp, pp=pp)
    assert sum(stage_params(m, plan, s).total for s in range(pp)) == count_params(m).total


def test_tied_stages_sum_to_total_plus_copy():
    plan = ParallelPlan(world_size=8, pp=8)
    m = get_model("gpt3-175b")
    total = sum(stage_params(m, plan, s).total for s in range(8))
    assert total == count_params(m).total + 51200 * 12288


def test_gpt3_175b_tp8_pp8_first_stage():
    m = get_model("gpt3-175b")
    s0 = stage_params(m, ParallelPlan(world_size=1024, tp=8, pp=8, sequence_parallel=True), 0)
    h = 12288
    per_layer = (3 * h * h + 3 * h) // 8 + h * h // 8 + h + (4 * h * h + 4 * h) // 8 + 4 * h * h // 8 + h + 4 * h
    assert s0.dense == 12 * per_layer + 51200 // 8 * h + 2048 * h


def test_stage_out_of_range():
    with pytest.raises(ValueError):
        stage_params(GPT, ParallelPlan(world_size=2, pp=2), 2)
