"""Plan fields for what published runs did: gradient dtype, DP overlap, p2p overlap, uneven stages with
VPP; and the optimizer-side kernels every Megatron iteration pays."""

from __future__ import annotations

import pytest

from workload_gen import ModelSpec, ParallelPlan, generate
from workload_gen.dp_comm import grad_reduce_bytes, grad_reduce_dtype
from workload_gen.errors import PlanError
from workload_gen.layout import layer_assignment, stage_layer_counts
from workload_gen.params import stage_params
from workload_gen.plan_validation import validate_plan

GPT = ModelSpec(name="gpt-small", num_layers=8, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                vocab_size=8192, seq_length=1024)
LLAMA = ModelSpec(name="llama-small", num_layers=12, hidden_size=512, num_attention_heads=8, num_kv_heads=2,
                  ffn_hidden_size=1408, vocab_size=8192, seq_length=1024, activation="swiglu", norm="rmsnorm",
                  position_embedding="rope", tie_embeddings=False, add_bias_linear=False)


def _plan(**kw):
    base = dict(world_size=8, tp=2, pp=2, sequence_parallel=True, global_batch_size=16, seq_length=1024)
    base.update(kw)
    return ParallelPlan(**base)


def _dp_bytes(w, where="backward"):
    out = 0
    for st in w.stages:
        if where == "backward":
            out += sum(op.size_bytes for ch in st.chunks for op in ch.backward if op.is_comm and op.group == "dp")
        else:
            out += sum(op.size_bytes for op in st.iteration_end if op.is_comm and op.group == "dp"
                       and op.name.startswith("dp_grad"))
    return out


@pytest.mark.parametrize("dtype,field,expect", [("bf16", "auto", "fp32"), ("fp8", "auto", "fp32"),
                                                ("fp16", "auto", "fp16"), ("fp16", "fp32", "fp32"),
                                                ("bf16", "bf16", "bf16")])
def test_grad_reduce_dtype_rule(dtype, field, expect):
    # Megatron-LM: bf16 forces fp32 accumulate + all-reduce; fp16 keeps 16-bit grads unless asked
    plan = _plan(dtype=dtype, grad_reduce_dtype=field)
    assert grad_reduce_dtype(plan) == expect
    w = generate(GPT, plan)
    per = {"fp32": 4, "bf16": 2, "fp16": 2}[expect]
    want = sum(per * stage_params(GPT, plan, s).dense for s in range(plan.pp))
    assert _dp_bytes(w) == want
    assert w.meta["grad_dtype_bytes"] == per


def test_deepspeed_auto_reduces_in_the_training_dtype():
    plan = ParallelPlan(world_size=8, tp=2, framework="deepspeed", zero_stage=1, global_batch_size=16)
    assert grad_reduce_bytes(plan) == 2
    assert grad_reduce_bytes(ParallelPlan(world_size=8, tp=2, framework="deepspeed", zero_stage=1,
                                          global_batch_size=16, grad_reduce_dtype="fp32")) == 4


def test_no_overlap_grad_reduce_reduces_once_per_buffer_at_the_end():
    plan = _plan(overlap_grad_reduce=False, overlap_param_gather=False, distributed_optimizer=True)
    w = generate(GPT, plan)
    assert _dp_bytes(w) == 0                                   # nothing during the backward
    for st in w.stages:
        assert not [op for ch in st.chunks for op in ch.forward if op.is_comm and op.group == "dp"]
        end = st.iteration_end
        red = [op for op in end if op.is_comm and op.name.startswith("dp_grad")]
        # megatron-core makes the bucket infinite without overlap: one blocking reduce-scatter per buffer
        assert len(red) == 1 and red[0].blocking and red[0].collective == "reduce_scatter"
        assert red[0].size_bytes == 4 * stage_params(GPT, plan, st.stage).dense
        names = [op.name for op in end]
        gathers = [op for op in end if op.is_comm and op.name.startswith("dp_param_gather")]
        assert len(gathers) == 1 and gathers[0].size_bytes == 2 * stage_params(GPT, plan, st.stage).dense
        assert names.index(red[0].name) < names.index("optimizer_step") < names.index(gathers[0].name)


def test_no_overlap_with_vpp_reduces_per_model_chunk():
    plan = ParallelPlan(world_size=2, pp=2, vpp=2, global_batch_size=8, overlap_grad_reduce=False,
                        overlap_param_gather=False)
    w = generate(GPT, plan)
    for st in w.stages:
        red = [op for op in st.iteration_end if op.is_comm and op.name.startswith("dp_grad")]
        assert not red           # dp = 1: nothing to reduce
    plan = ParallelPlan(world_size=8, pp=2, vpp=2, global_batch_size=8, overlap_grad_reduce=False,
                        overlap_param_gather=False)
    w = generate(GPT, plan)
    for st in w.stages:
        red = [op for op in st.iteration_end if op.is_comm and op.name.startswith("dp_grad")]
        assert len(red) == 2 and sum(op.size_bytes for op in red) == 4 * stage_params(GPT, plan, st.stage).dense


def test_param_gather_after_the_step_when_not_overlapped():
    plan = _plan(distributed_optimizer=True, overlap_param_gather=False, grad_bucket_elements=1_000_000)
    w = generate(GPT, plan)
    for st in w.stages:
        assert not [op for ch in st.chunks for op in ch.forward if op.is_comm and op.group == "dp"]
        gathers = [op for op in st.iteration_end if op.is_comm and op.name.startswith("dp_param_gather")]
        rs = [op for ch in st.chunks for op in ch.backward if op.is_comm and op.group == "dp"]
        # one blocking gather per gradient bucket, same elements (2-byte params vs 4-byte grads)
        assert sorted(2 * op.size_bytes for op in gathers) == sorted(op.size_bytes for op in rs)
        assert all(op.blocking for op in gathers)


def test_optimizer_side_kernels_at_their_size():
    plan = _plan(dtype="fp16", distributed_optimizer=True)
    w = generate(GPT, plan)
    for st in w.stages:
        sp_ = stage_params(GPT, plan, st.stage)
        n_local = sp_.dense + sp_.expert
        shard = -(-sp_.dense // plan.dp)
        start = {op.name: op for op in st.iteration_start}
        # zero_grad_buffer writes the whole 16-bit grad buffer: a copy of half of it moves the same bytes
        assert start["zero_grad_buffer"].bytes == pytest.approx(2 * n_local, abs=2)
        end = {op.name: op for op in st.iteration_end}
        assert end["main_grad_copy"].bytes == pytest.approx(6 * shard, abs=2)     # read 2 B, write 4 B
        assert end["grad_unscale"].bytes == pytest.approx(8 * shard, abs=2)       # read + write fp32
        assert end["grad_norm_l2"].bytes == pytest.approx(4 * shard, abs=2)
        names = [op.name for op in st.iteration_end]
        assert names.index("grad_unscale") < names.index("found_inf_ar") < names.index("grad_norm_l2") \
            < names.index("optimizer_step")
    bf16 = generate(GPT, _plan())
    assert "main_grad_copy" not in {op.name for op in bf16.stages[0].iteration_end}
    assert "grad_unscale" not in {op.name for op in bf16.stages[0].iteration_end}


def test_embedding_main_grad_accumulation_every_microbatch():
    plan = _plan()
    w = generate(GPT, plan)
    bwd = w.stages[0].chunks[0].backward
    add = [op for op in bwd if op.name == "embedding_main_grad_add"]
    assert len(add) == 1 and add[0].microbatch == "all"
    vocab_rank = w.meta["padded_vocab_size"] // plan.tp
    # the whole [vocab/tp, h] table plus the learned positions, fp32 main grads
    assert dict(add[0].shape)["numel"] == vocab_rank * GPT.hidden_size + GPT.seq_length * GPT.hidden_size
    assert add[0].dtype == "fp32"
    names = [op.name for op in bwd]
    assert names.index("embedding_wgrad") < names.index("embedding_main_grad_add")


@pytest.mark.parametrize("kw,field,rule", [
    (dict(dtype="bf16", grad_reduce_dtype="fp16"), "plan.grad_reduce_dtype", "parameter dtype"),
    (dict(dtype="fp16", grad_reduce_dtype="bf16"), "plan.grad_reduce_dtype", "parameter dtype"),
    (dict(grad_reduce_dtype="fp64"), "plan.grad_reduce_dtype", "one of"),
    (dict(overlap_p2p_comm=True), "plan.overlap_p2p_comm", "vpp > 1"),
    (dict(distributed_optimizer=True, overlap_grad_reduce=False), "plan.overlap_param_gather",
     "overlap_grad_reduce"),
    (dict(overlap_grad_reduce="no"), "plan.overlap_grad_reduce", "true or false"),
    (dict(framework="deepspeed", zero_stage=1, overlap_grad_reduce=False), "plan.overlap_grad_reduce",
     "a Megatron option"),
])
def test_invalid_field_combinations(kw, field, rule):
    with pytest.raises(PlanError) as e:
        validate_plan(GPT, _plan(**kw))
    msg = str(e.value)
    assert msg.startswith(field + ":") and rule in msg and "\n" not in msg


def test_valid_field_combinations():
    validate_plan(GPT, _plan(overlap_grad_reduce=False, distributed_optimizer=False))   # param gather n/a
    validate_plan(GPT, _plan(overlap_grad_reduce=False, overlap_param_gather=False, distributed_optimizer=True))
    validate_plan(GPT, ParallelPlan(world_size=8, tp=2, pp=2, vpp=2, sequence_parallel=True, global_batch_size=16,
                                    overlap_p2p_comm=True))
    validate_plan(GPT, _plan(dtype="fp16", grad_reduce_dtype="fp16"))


# ------------------------------------------------------------------ uneven first/last stages with VPP
def test_uneven_with_vpp_layout_megatron_rounds():
    # 12 layers, pp 3, vpp 2, first 2, last 2 -> stages [2, 8, 2]; chunks [1, 4, 1] per round
    plan = ParallelPlan(world_size=3, pp=3, vpp=2, num_layers_first_stage=2, num_layers_last_stage=2,
                        global_batch_size=6)
    validate_plan(LLAMA, plan)
    assert stage_layer_counts(LLAMA, plan) == [2, 8, 2]
    assert layer_assignment(LLAMA, plan) == [[(0,), (6,)], [(1, 2, 3, 4), (7, 8, 9, 10)], [(5,), (11,)]]
    w = generate(LLAMA, plan)
    assert [[len(c.layers) for c in st.chunks] for st in w.stages] == [[1, 1], [4, 4], [1, 1]]


@pytest.mark.parametrize("layers,kw,field", [
    (12, dict(num_layers_first_stage=3, num_layers_last_stage=1), "plan.num_layers_first_stage"),
    (11, dict(num_layers_first_stage=2, num_layers_last_stage=1), "plan.num_layers_last_stage"),
    (12, dict(num_layers_first_stage=1, num_layers_last_stage=1), "plan.num_layers_first_stage"),
    (12, dict(num_layers_first_stage=2, num_layers_last_stage=3), "plan.vpp"),        # middle stage: 7
])
def test_uneven_with_vpp_invalid_names_the_field(layers, kw, field):
    import dataclasses
    model = dataclasses.replace(LLAMA, num_layers=layers)
    plan = ParallelPlan(world_size=3, pp=3, vpp=2, global_batch_size=6, **kw)
    with pytest.raises(PlanError) as e:
        validate_plan(model, plan)
    assert str(e.value).startswith(field + ":") and "vpp" in str(e.value)
