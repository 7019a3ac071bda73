"""Plan validation: each invalid plan is rejected with one line naming the field (and the rule)."""

from __future__ import annotations

import pytest

from workload_gen.errors import PlanError, WorkloadError
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.plan_validation import validate_model, validate_plan
from workload_gen.zoo import get_model

GPT = get_model("gpt3-175b")            # 96 layers, 96 heads, tied, dense
LLAMA = get_model("llama3-70b")         # 80 layers, 64 heads, 8 KV heads
MIXTRAL = get_model("mixtral-8x7b")     # 8 experts
DSV3 = get_model("deepseek-v3")         # 61 layers, 256 experts, MLA

VALID = [
    (GPT, dict(world_size=1024, tp=8, pp=8, sequence_parallel=True, global_batch_size=1536)),
    (GPT, dict(world_size=64, tp=8, pp=8, vpp=3, global_batch_size=64)),
    (LLAMA, dict(world_size=128, tp=8, pp=4, cp=2, seq_length=8192, sequence_parallel=True,
                 distributed_optimizer=True, global_batch_size=128, dtype="fp8")),
    (LLAMA, dict(world_size=64, tp=4, pp=4, framework="deepspeed", zero_stage=1, global_batch_size=64)),
    (LLAMA, dict(world_size=64, tp=8, framework="deepspeed", zero_stage=3, global_batch_size=64)),
    (MIXTRAL, dict(world_size=64, tp=2, pp=2, ep=8, sequence_parallel=True, global_batch_size=64)),
    (MIXTRAL, dict(world_size=16, tp=4, ep=4, etp=1, sequence_parallel=True, global_batch_size=64)),
    (DSV3, dict(world_size=2048, tp=2, pp=16, ep=64, sequence_parallel=True, num_layers_last_stage=1,
                global_batch_size=4096, recompute="full", recompute_num_layers=2)),
    (LLAMA, dict(world_size=16, pp=4, num_layers_first_stage=17, num_layers_last_stage=21,
                 recompute="selective", global_batch_size=16)),
    (LLAMA, dict(world_size=8, tp=8, sequence_parallel=True, tp_comm_overlap=True, global_batch_size=8)),
]


@pytest.mark.parametrize("model,kw", VALID)
def test_valid_plans_pass(model, kw):
    validate_plan(model, ParallelPlan(**kw))


TINY = ModelSpec("tiny", num_layers=4, hidden_size=60, num_attention_heads=6, ffn_hidden_size=200,
                 vocab_size=1000)

INVALID = [
    # (model, plan kwargs, field named in the message, a word of the rule)
    (GPT, dict(world_size=1029, tp=7, global_batch_size=147), "plan.tp", "heads"),
    (LLAMA, dict(world_size=256, tp=16, global_batch_size=16), "plan.tp", "KV heads"),
    (GPT, dict(world_size=1000, tp=8, pp=8), "plan.world_size", "divisible"),
    (GPT, dict(world_size=64, tp=8, cp=4, pp=4), "plan.world_size", "tp*cp*pp"),
    (MIXTRAL, dict(world_size=16, tp=1, ep=3, global_batch_size=16), "plan.ep", "num_experts"),
    (MIXTRAL, dict(world_size=16, tp=4, ep=8, sequence_parallel=True, global_batch_size=16), "plan.ep",
     "ep*etp"),
    (MIXTRAL, dict(world_size=8, tp=2, ep=4, etp=4, sequence_parallel=True), "plan.ep", "divide"),
    (GPT, dict(world_size=64, tp=8, ep=2), "plan.ep", "MoE"),
    (GPT, dict(world_size=64, tp=8, global_batch_size=100), "plan.global_batch_size", "micro_batch_size*dp"),
    (GPT, dict(world_size=64, tp=8, micro_batch_size=3, global_batch_size=64), "plan.global_batch_size", "dp"),
    (TINY, dict(world_size=6, pp=6, global_batch_size=6), "plan.pp", "num_layers"),
    (GPT, dict(world_size=64, tp=8, pp=8, vpp=5), "plan.vpp", "divisible by vpp"),
    (GPT, dict(world_size=64, tp=8, vpp=2), "plan.vpp", "pp > 1"),
    (GPT, dict(world_size=64, tp=8, pp=8, num_layers_first_stage=90), "plan.num_layers_first_stage", "split"),
    (GPT, dict(world_size=16, tp=8, pp=2, num_layers_first_stage=40, num_layers_last_stage=40),
     "plan.num_layers_first_stage", "equal num_layers"),
    (GPT, dict(world_size=64, tp=8, pp=8, num_layers_last_stage=10), "plan.num_layers_last_stage", "evenly"),
    (GPT, dict(world_size=8, tp=8, num_layers_first_stage=10), "plan.num_layers_first_stage", "pp > 1"),
    (LLAMA, dict(world_size=64, tp=8, cp=2, seq_length=4098), "plan.seq_length", "2*cp"),
    (LLAMA, dict(world_size=64, tp=8, cp=2, flash_attention=False), "plan.flash_attention", "context"),
    (GPT, dict(world_size=64, tp=1, sequence_parallel=True), "plan.sequence_parallel", "tp > 1"),
    (GPT, dict(world_size=64, tp=8, sequence_parallel=True, seq_length=2044), "plan.seq_length", "tp"),
    (GPT, dict(world_size=64, tp=8, tp_comm_overlap=True), "plan.tp_comm_overlap", "sequence_parallel"),
    (GPT, dict(world_size=64, tp=8, zero_stage=1), "plan.zero_stage", "megatron"),
    (GPT, dict(world_size=64, tp=8, framework="deepspeed", distributed_optimizer=True),
     "plan.distributed_optimizer", "deepspeed"),
    (GPT, dict(world_size=64, tp=8, framework="deepspeed", zero_stage=4), "plan.zero_stage", "0, 1, 2 or 3"),
    (GPT, dict(world_size=64, tp=8, pp=2, framework="deepspeed", zero_stage=2), "plan.zero_stage", "pipeline"),
    (GPT, dict(world_size=64, tp=8, pp=2, vpp=2, framework="deepspeed"), "plan.vpp", "interleaved"),
    (GPT, dict(world_size=64, tp=8, dtype="fp32"), "plan.dtype", "bf16"),
    (GPT, dict(world_size=64, tp=8, framework="jax"), "plan.framework", "megatron"),
    (GPT, dict(world_size=64, tp=8, recompute="some"), "plan.recompute", "selective"),
    (GPT, dict(world_size=64, tp=8, rank_order="tp-dp-pp"), "plan.rank_order", "permutation"),
    (GPT, dict(world_size=64, tp=8, rank_order="tp-tp-ep-dp-pp"), "plan.rank_order", "permutation"),
    (GPT, dict(world_size=64, tp=8, recompute_num_layers=2), "plan.recompute_num_layers", "full"),
    (GPT, dict(world_size=64, tp=8, pp=8, recompute="full", recompute_num_layers=13),
     "plan.recompute_num_layers", "1..12"),
    (GPT, dict(world_size=0), "plan.world_size", "positive"),
    (GPT, dict(world_size=64, tp=0), "plan.tp", "positive"),
    (GPT, dict(world_size=64, micro_batch_size=-1), "plan.micro_batch_size", "positive"),
    (GPT, dict(world_size=64, seq_length=0), "plan.seq_length", "positive"),
    (GPT, dict(world_size=64, tp="8"), "plan.tp", "positive integer"),
    (GPT, dict(world_size=64, sequence_parallel="yes"), "plan.sequence_parallel", "true or false"),
    (TINY, dict(world_size=2, tp=2, dtype="fp8", global_batch_size=2), "plan.dtype", "16"),
    (GPT, dict(world_size=64, tp=8, dtype="fp8", framework="deepspeed"), "plan.dtype", "Transformer Engine"),
    (MIXTRAL, dict(world_size=16, tp=2, ep=2, global_batch_size=16), "plan.sequence_parallel", "ep > 1"),
    (LLAMA, dict(world_size=64, tp=8, cp=2, cp_comm_type="ring"), "plan.cp_comm_type", "p2p"),
    (LLAMA, dict(world_size=64, tp=8, cp=2, framework="deepspeed"), "plan.cp_comm_type", "Ulysses"),
    (LLAMA, dict(world_size=64, tp=8, cp=4, cp_comm_type="a2a", global_batch_size=64), "plan.cp", "divisible by cp"),
    (TINY, dict(world_size=6, tp=3, global_batch_size=6), "plan.tp", "ffn_hidden_size"),
    (MIXTRAL, dict(world_size=16, ep=1, etp=0, global_batch_size=16), "plan.etp", "positive"),
    (MIXTRAL, dict(world_size=16, ep=2, etp=3, global_batch_size=16), "plan.ep", "ep*etp"),
    (GPT, dict(world_size=64, grad_bucket_elements=0), "plan.grad_bucket_elements", "positive"),
]


@pytest.mark.parametrize("model,kw,field,rule", INVALID,
                         ids=[f"{i}-{f}" for i, (_, _, f, _) in enumerate(INVALID)])
def test_invalid_plans_rejected_with_field(model, kw, field, rule):
    with pytest.raises(PlanError) as e:
        validate_plan(model, ParallelPlan(**kw))
    msg = str(e.value)
    assert "\n" not in msg
    assert msg.startswith(field + ":"), msg
    assert rule in msg, msg
    assert "(got" in msg, msg


def test_at_least_30_invalid_plans():
    assert len(INVALID) >= 30


@pytest.mark.parametrize("kw,field", [
    (dict(num_layers=0), "model.num_layers"),
    (dict(num_attention_heads=7), "model.num_attention_heads"),
    (dict(num_kv_heads=4), "model.num_kv_heads"),
    (dict(activation="relu"), "model.activation"),
    (dict(norm="batchnorm"), "model.norm"),
    (dict(num_experts=4, moe_top_k=5), "model.moe_top_k"),
    (dict(num_experts=4, moe_top_k=1, num_dense_layers=4), "model.num_dense_layers"),
    (dict(moe_top_k=2), "model.num_experts"),
    (dict(attention="mla"), "model.kv_lora_rank"),
    (dict(attention="gqa"), "model.attention"),
    (dict(num_experts=4, moe_top_k=1, moe_layer_pattern=(0, 1)), "model.moe_layer_pattern"),
    (dict(num_experts=4, moe_top_k=1, moe_layer_pattern=(0, 2, 1, 1)), "model.moe_layer_pattern"),
])
def test_invalid_models(kw, field):
    with pytest.raises(WorkloadError) as e:
        validate_model(ModelSpec(**{**TINY.__dict__, **kw}))
    assert str(e.value).startswith(field + ":") and "\n" not in str(e.value)


def test_every_zoo_model_accepts_a_simple_plan():
    from workload_gen.zoo import list_models
    for name in list_models():
        validate_plan(get_model(name), ParallelPlan(world_size=8, global_batch_size=8))


def test_pp_not_dividing_layers_names_pp():
    with pytest.raises(PlanError, match=r"^plan\.pp: must divide num_layers"):
        validate_plan(DSV3, ParallelPlan(world_size=2048, tp=2, pp=16, ep=64, sequence_parallel=True))
