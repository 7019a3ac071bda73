"""workload_gen.inference: serving-batch kernels derived from layers.py (shapes, FLOPs, collectives)."""

from __future__ import annotations

import math

import pytest

from workload_gen.errors import WorkloadError
from workload_gen.inference import (
    decode_attention_op,
    head_ops,
    inference_spec,
    layer_token_ops,
    prefill_attention_ops,
    stage_ops,
)
from workload_gen.zoo import get_model

LLAMA70 = get_model("llama3-70b")          # h 8192, 64 heads, 8 KV heads, ffn 28672, vocab 128256
MIXTRAL = get_model("mixtral-8x7b")        # h 4096, 32 heads, 8 KV, 8 experts top-2, ffn 14336
DSV2L = get_model("deepseek-v2-lite")      # MLA kv_lora 512, rope 64, 2 shared experts, 64 experts top-6


def _gemm_flops(ops):
    return sum(op.flops for op in ops if not op.is_comm and op.kind in ("gemm", "grouped_gemm"))


def _comms(ops):
    return [(op.collective, op.group, op.size_bytes) for op in ops if op.is_comm]


def test_dense_layer_gemm_flops_are_two_per_weight_per_token():
    T, tp, h = 37, 4, 8192
    ops = layer_token_ops(inference_spec(LLAMA70, tp=tp), T, moe=False)
    weights = (h * (64 + 2 * 8) * 128 + 64 * 128 * h + 3 * h * 28672) // tp   # QKV, out, gate+up+down
    assert _gemm_flops(ops) == 2 * T * weights


def test_dense_layer_has_two_tp_all_reduces_of_the_hidden_states():
    T = 100
    ops = layer_token_ops(inference_spec(LLAMA70, tp=4), T, moe=False)
    assert _comms(ops) == [("all_reduce", "tp", 2 * T * 8192)] * 2
    assert not _comms(layer_token_ops(inference_spec(LLAMA70, tp=1), T, moe=False))


def test_no_dropout_and_no_attention_core_in_token_part():
    # GPT models train with dropout; inference has none; the attention core is replaced
    ops = layer_token_ops(inference_spec(get_model("gpt-7.5b"), tp=2), 64, moe=False)
    names = [op.name for op in ops]
    assert not any("dropout" in n for n in names)
    assert not any(getattr(op, "kind", "") == "flash_attn" for op in ops)
    assert names.count("attn_residual") == 1 and names.count("mlp_residual") == 1


def test_kv_cache_write_bytes():
    T = 10
    spec = inference_spec(LLAMA70, tp=4)
    (op,) = [o for o in layer_token_ops(spec, T, moe=False) if o.name == "kv_cache_write"]
    assert dict(op.shape)["bytes"] == T * 2 * 2 * 128 * 2     # K and V, 2 KV heads per rank, bf16


def test_prefill_attention_is_causal_flash_with_offset():
    (op,) = prefill_attention_ops(inference_spec(LLAMA70, tp=4), chunk=512, offset=1024)
    assert op.kind == "flash_attn" and op.causal and op.variant == "fwd"
    assert dict(op.shape) == {"batch": 1, "seq_q": 512, "seq_kv": 1536, "heads": 16, "kv_heads": 2,
                              "head_dim_qk": 128, "head_dim_v": 128}
    # unmasked score entries: 512 x 1024 context + the causal triangle 512 * 513 / 2
    assert op.flops == 2.0 * 16 * (512 * 1024 + 512 * 513 / 2) * 256


def test_decode_attention_one_kernel_per_batch():
    op = decode_attention_op(inference_spec(LLAMA70, tp=4), batch=64, kv_tokens=64 * 1001)
    assert op.kind == "attn_decode"
    assert dict(op.shape) == {"batch": 64, "kv_tokens": 64 * 1001, "heads": 16, "kv_heads": 2,
                              "head_dim_qk": 128, "head_dim_v": 128}
    # the cached K and V are read once per KV head (shared by the query heads of a group)
    assert op.bytes == 2 * 64 * 1001 * 2 * 256 + 2 * 64 * 16 * 256


def test_fp8_kv_halves_decode_attention_bytes():
    b16 = decode_attention_op(inference_spec(LLAMA70, tp=4), 8, 8 * 4096)
    b8 = decode_attention_op(inference_spec(LLAMA70, tp=4, kv_dtype="fp8"), 8, 8 * 4096)
    assert b8.dtype == "fp8"
    cache16, cache8 = 2 * 8 * 4096 * 2 * 256, 1 * 8 * 4096 * 2 * 256
    assert b16.bytes - cache16 == b8.bytes - cache8      # the same query/output traffic (16-bit)


def test_fp8_weights_run_fp8_gemms_with_16bit_activations():
    ops = layer_token_ops(inference_spec(LLAMA70, tp=4, weight_dtype="fp8"), 64, moe=False)
    assert {op.dtype for op in ops if not op.is_comm and op.kind == "gemm"} == {"fp8"}
    assert {op.dtype for op in ops if not op.is_comm and op.kind == "rmsnorm"} == {"bf16"}


def test_kv_heads_replicated_when_tp_exceeds_them():
    spec = inference_spec(LLAMA70, tp=16)          # 8 KV heads over 16 ranks: one per rank
    (qkv,) = [o for o in layer_token_ops(spec, 5, moe=False) if o.name == "attn_qkv"]
    assert dict(qkv.shape)["n"] == (64 // 16 + 2) * 128
    assert dict(decode_attention_op(spec, 2, 20).shape)["kv_heads"] == 1


def test_mla_decode_is_absorbed_latent():
    spec = inference_spec(DSV2L, tp=2)
    op = decode_attention_op(spec, 4, 4000)
    d = dict(op.shape)
    assert (d["heads"], d["kv_heads"], d["head_dim_qk"], d["head_dim_v"]) == (8, 1, 64, 512)
    assert op.bytes == 2 * 4000 * (64 + 512) + 2 * 4 * 8 * (64 + 512)
    (w,) = [o for o in layer_token_ops(spec, 3, moe=True) if o.name == "kv_cache_write"]
    assert dict(w.shape)["bytes"] == 3 * (512 + 64) * 2


def test_mla_prefill_with_context_up_projects_the_cached_latent():
    spec = inference_spec(DSV2L, tp=2)
    assert len(prefill_attention_ops(spec, 128, 0)) == 1
    ops = prefill_attention_ops(spec, 128, 256)
    up = [o for o in ops if o.name == "attn_kv_up_context"]
    assert len(up) == 1 and dict(up[0].shape) == {"m": 256, "n": 8 * (128 + 128), "k": 512}


def test_moe_tp_sharded_experts_balanced_and_one_all_reduce():
    T, tp = 64, 2                                   # 64 tokens x top-2 / 8 experts = 16 per expert
    ops = layer_token_ops(inference_spec(MIXTRAL, tp=tp), T, moe=True)
    experts = [o for o in ops if not o.is_comm and o.kind == "grouped_gemm"]
    assert {dict(o.shape)["groups"] for o in experts} == {8} and {dict(o.shape)["m"] for o in experts} == {16}
    assert sum(o.flops for o in experts) == 2 * (T * 2) * 3 * 4096 * 14336 // tp
    assert _comms(ops) == [("all_reduce", "tp", 2 * T * 4096)] * 2       # attention + MoE block


def test_moe_expert_parallel_all_to_all():
    T, tp = 64, 2
    ops = layer_token_ops(inference_spec(MIXTRAL, tp=tp, ep=2), T, moe=True)
    routed = T // tp * 2                            # this rank's tokens x top-2
    a2a = [c for c in _comms(ops) if c[0] == "all_to_all"]
    assert a2a == [("all_to_all", "ep", 2 * routed * 4096)] * 2           # dispatch + combine
    assert ("all_gather", "tp", 2 * T * 4096) in _comms(ops)
    experts = [o for o in ops if not o.is_comm and o.kind == "grouped_gemm"]
    assert {dict(o.shape)["groups"] for o in experts} == {4}              # 8 experts / ep 2
    assert sum(o.flops for o in experts) == 2 * routed * 3 * 4096 * 14336


def test_shared_experts_fuse_into_one_all_reduce():
    ops = layer_token_ops(inference_spec(DSV2L, tp=2), 32, moe=True)
    ars = [c for c in _comms(ops) if c[0] == "all_reduce"]
    assert len(ars) == 2                            # attention + (shared + routed) MoE block


def test_stage_ops_pipeline_split():
    spec = inference_spec(get_model("gpt-7.5b"), tp=2, pp=2)
    s0 = stage_ops(spec, 0, prefill=((100, 0),), decode=(10, 20))
    s1 = stage_ops(spec, 1, prefill=((100, 0),), decode=(10, 20))
    names0 = {op.name for op, _ in s0}
    names1 = {op.name for op, _ in s1}
    assert "embedding" in names0 and "embedding" not in names1
    assert "lm_head" in names1 and "lm_head" not in names0
    qkv = sum(n for op, n in s0 + s1 if op.name == "attn_qkv")
    assert qkv == 36
    (dec,) = [(op, n) for op, n in s1 if op.name == "attn_decode"]
    assert dec[1] == 18 and dict(dec[0].shape)["kv_tokens"] == 10 + 20 + 2
    (lm,) = [op for op, _ in s1 if op.name == "lm_head"]
    assert dict(lm.shape)["m"] == 3                 # one row per decode + one per prefilling request


def test_head_gathers_logits_of_output_rows_only():
    spec = inference_spec(LLAMA70, tp=4)
    ops = head_ops(spec, 5)
    vocab = 128256 + (-128256 % (128 * 4))
    assert ("all_gather", "tp", 2 * 5 * vocab) in _comms(ops)
    (lm,) = [o for o in ops if o.name == "lm_head"]
    assert dict(lm.shape) == {"m": 5, "n": vocab // 4, "k": 8192}
    assert head_ops(spec, 0) == []


@pytest.mark.parametrize("kw,prefix", [
    (dict(tp=3), "serving plan.tp:"),
    (dict(tp=4, ep=2), "serving plan.ep:"),
    (dict(tp=2, weight_dtype="int4"), "serving plan.weight_dtype:"),
    (dict(tp=2, kv_dtype="fp4"), "serving plan.kv_dtype:"),
    (dict(tp=0), "serving plan.tp:"),
])
def test_bad_sharding_is_one_line_error(kw, prefix):
    model = MIXTRAL if "ep" in kw else LLAMA70
    with pytest.raises(WorkloadError) as e:
        inference_spec(model, **kw)
    assert str(e.value).startswith(prefix) and "\n" not in str(e.value)


def test_ep_needs_moe_model():
    with pytest.raises(WorkloadError, match=r"^serving plan\.ep: expert parallelism needs a MoE model"):
        inference_spec(LLAMA70, tp=2, ep=2)


def test_pp_must_fit_the_layers():
    with pytest.raises(WorkloadError, match=r"plan\.pp"):
        inference_spec(LLAMA70, tp=1, pp=3)


def test_kv_bytes_per_token_layer():
    assert inference_spec(LLAMA70, tp=4).kv_bytes_per_token_layer() == 2 * 2 * 128 * 2
    assert inference_spec(DSV2L, tp=2, kv_dtype="fp8").kv_bytes_per_token_layer() == 576
    assert math.isclose(inference_spec(LLAMA70, tp=8).kv_bytes_per_token_layer(), 2 * 1 * 256)
