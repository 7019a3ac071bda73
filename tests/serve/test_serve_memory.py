"""sim.serve.memory: KV-cache planner (every weight, activations, CUDA context) and Vidur's formula."""

from __future__ import annotations

import pytest

from sim.analysis.memory import MemoryOptions
from sim.errors import SimError
from sim.serve.memory import (
    GiB,
    activation_bytes,
    kv_bytes_per_token,
    plan_kv_cache,
    plan_kv_cache_for_gpu,
    vidur_kv_plan,
    weight_bytes,
)
from sim.serve.plan import ServingPlan
from workload_gen.params import count_params
from workload_gen.zoo import get_model

A100 = 80 * GiB


@pytest.mark.parametrize("name,tp,slots,blocks", [
    ("llama2-7b", 1, 29, 7424),
    ("llama3-8b", 1, 118, None),
    ("llama2-70b", 4, 128, None),
])
def test_vidur_worked_values(name, tp, slots, blocks):
    # reference/serving.md §3: A100 80GB, max tokens 4096, block 16, margin 0.1
    v = vidur_kv_plan(get_model(name), tp, 1, A100)
    assert v.max_batch_size == slots
    if blocks is not None:
        assert v.num_blocks == blocks


def test_llama2_7b_planner_counts_every_weight_and_shows_vidur_beside_it():
    model = get_model("llama2-7b")
    plan = ServingPlan(tp=1, scheduler="vllm", weight_dtype="fp16")
    kv = plan_kv_cache(model, plan, A100)
    (st,) = kv.stages
    # vocab 32000 is already a multiple of 128: the rank holds exactly the model's parameters
    assert st.weight_bytes == 2 * count_params(model).total
    vidur = vidur_kv_plan(model, 1, 1, A100)
    assert st.weight_bytes > vidur.weight_bytes                       # embeddings, LM head, norms
    assert st.kv_bytes_per_token == vidur.kv_bytes_per_token == 2 * 2 * 128 * 32 * 32
    # activation workspace of a 4096-token batch: 2 B x rows x (hidden + residual + the MLP block,
    # gate/up output 2 x 11008 + activation 11008, the largest block)
    assert st.activation_bytes == 2 * 4096 * (2 * 4096 + 3 * 11008)
    assert st.cuda_context_bytes == MemoryOptions().cuda_context_bytes
    free = A100 - int(0.1 * A100) - st.weight_bytes - st.activation_bytes - st.cuda_context_bytes
    assert kv.num_blocks == free // (16 * st.kv_bytes_per_token)
    assert kv.source == "planner" and kv.kv_tokens == kv.num_blocks * 16


def test_mla_kv_bytes_are_the_latent_replicated_over_tp():
    ds = get_model("deepseek-v3")
    per_layer = (512 + 64) * 2
    assert kv_bytes_per_token(ds, 1, 61, "bf16") == per_layer * 61
    assert kv_bytes_per_token(ds, 8, 61, "bf16") == per_layer * 61


def test_gqa_kv_heads_per_rank_round_up():
    m = get_model("llama3-70b")                       # 8 KV heads
    assert kv_bytes_per_token(m, 4, 80, "bf16") == 2 * 2 * 128 * 2 * 80
    assert kv_bytes_per_token(m, 16, 80, "bf16") == 2 * 1 * 128 * 2 * 80   # replicated, one per rank


def test_fp8_kv_halves_bytes_and_doubles_blocks():
    m = get_model("llama3-70b")
    b16 = plan_kv_cache_for_gpu(m, ServingPlan(tp=4), "H100")
    b8 = plan_kv_cache_for_gpu(m, ServingPlan(tp=4, kv_dtype="fp8"), "H100")
    assert b8.stages[0].kv_bytes_per_token * 2 == b16.stages[0].kv_bytes_per_token
    assert b8.num_blocks in (2 * b16.num_blocks, 2 * b16.num_blocks + 1)


def test_fp8_weights_keep_embeddings_and_norms_16bit():
    m = get_model("llama3-8b")
    c = count_params(m)
    w8 = weight_bytes(m, ServingPlan(tp=1, weight_dtype="fp8"), 0)
    sixteen = c.embedding + c.lm_head + c.norm
    assert w8 == (c.total - sixteen) * 1 + sixteen * 2


def test_pipeline_stages_split_weights_and_head():
    m = get_model("llama3-70b")
    plan = ServingPlan(tp=2, pp=2)
    w0, w1 = weight_bytes(m, plan, 0), weight_bytes(m, plan, 1)
    c = count_params(m)
    # vocab 128256 is a multiple of 128 x 2 (no padding); norms are replicated on both TP ranks
    assert w0 + w1 == 2 * ((c.total - c.norm) // 2 + c.norm)
    assert c.lm_head == c.embedding and w1 - w0 == 2 * c.final_norm     # embedding vs LM head shard
    # the last stage also holds the logits of max_batch_size rows
    assert activation_bytes(m, plan, 1) > activation_bytes(m, plan, 0)
    kv = plan_kv_cache_for_gpu(m, plan, "H100")
    assert kv.num_blocks == min(s.blocks for s in kv.stages)
    assert [s.nccl_bytes for s in kv.stages] == [2 * MemoryOptions().nccl_buffer_bytes_per_comm] * 2


def test_does_not_fit_is_one_line_with_numbers():
    with pytest.raises(SimError) as e:
        plan_kv_cache_for_gpu(get_model("llama3-70b"), ServingPlan(tp=1), "H100")
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith("deployment does not fit: weights 131.")
    assert "> 80.00 GiB on H100" in msg


def test_num_blocks_override_and_bounds():
    m = get_model("llama2-7b")
    kv = plan_kv_cache(m, ServingPlan(num_blocks=1234), A100)
    assert kv.num_blocks == 1234 and kv.source == "plan.num_blocks"
    with pytest.raises(SimError, match="num_blocks"):
        plan_kv_cache(m, ServingPlan(num_blocks=0), A100)


def test_kv_too_small_for_max_model_len():
    with pytest.raises(SimError, match=r"^KV cache too small: .* < max_model_len 10000000"):
        plan_kv_cache(get_model("llama2-7b"), ServingPlan(max_model_len=10_000_000), A100)


def test_describe_lists_stages():
    kv = plan_kv_cache_for_gpu(get_model("llama3-70b"), ServingPlan(tp=2, pp=2), "H100")
    lines = kv.describe().splitlines()
    assert len(lines) == 2 and lines[1].startswith("stage 1: weights ")
