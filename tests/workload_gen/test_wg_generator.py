"""Generator invariants: FLOP totals vs the models.md formulas, Korthikanti saved bytes, comm sizes."""

from __future__ import annotations

import pytest

from workload_gen import ModelSpec, ParallelPlan, generate
from workload_gen.errors import PlanError
from workload_gen.params import stage_params

MATMUL = {"gemm", "grouped_gemm", "attn_bmm", "flash_attn"}

# Small GPT (GELU 4h, LayerNorm, learned positions, tied, biases, dropout); vocab a multiple of 128*8.
GPT = ModelSpec(name="gpt-small", num_layers=8, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                vocab_size=8192, seq_length=1024)
LLAMA = ModelSpec(name="llama-small", num_layers=8, hidden_size=512, num_attention_heads=8, num_kv_heads=2,
                  ffn_hidden_size=1408, vocab_size=8192, seq_length=1024, activation="swiglu", norm="rmsnorm",
                  position_embedding="rope", tie_embeddings=False, add_bias_linear=False)


def total_flops(w, kinds=MATMUL, phases=None) -> float:
    p = w.plan
    ranks_per_stage = p.tp * p.cp * p.dp
    tot = 0.0
    for st in w.stages:
        per_mb = 0.0
        for ch in st.chunks:
            for op in ch.forward + ch.backward:
                if not op.is_comm and op.kind in kinds and (phases is None or op.phase in phases):
                    per_mb += op.flops
        tot += per_mb * w.num_microbatches * ranks_per_stage
    return tot


def gpt_formula(B, s, n_layers, h, V, passes=3):
    if passes == 3:
        return 72 * B * s * n_layers * h * h * (1 + s / (6 * h) + V / (12 * n_layers * h))
    return 96 * B * s * n_layers * h * h * (1 + s / (6 * h) + V / (16 * n_layers * h))


@pytest.mark.parametrize("kw", [
    dict(world_size=8, tp=2, pp=2, sequence_parallel=True),
    dict(world_size=8, tp=1, pp=1),
    dict(world_size=16, tp=2, pp=2, vpp=2, sequence_parallel=True),
    dict(world_size=8, tp=2, cp=2, pp=1, sequence_parallel=True),
    dict(world_size=8, tp=2, cp=2, pp=1, sequence_parallel=True, cp_comm_type="a2a"),
    dict(world_size=8, tp=2, pp=2, flash_attention=False),
])
def test_dense_gpt_flops_match_72_formula(kw):
    plan = ParallelPlan(global_batch_size=16, micro_batch_size=2, seq_length=1024, **kw)
    w = generate(GPT, plan)
    expect = gpt_formula(16, 1024, 8, 512, 8192)
    assert total_flops(w) == pytest.approx(expect, rel=1e-12)


def test_full_recompute_flops_match_96_formula():
    plan = ParallelPlan(world_size=8, tp=2, pp=2, sequence_parallel=True, global_batch_size=16, seq_length=1024,
                        recompute="full")
    w = generate(GPT, plan)
    assert total_flops(w) == pytest.approx(gpt_formula(16, 1024, 8, 512, 8192, passes=4), rel=1e-12)


def test_llama_flops_match_formula():
    plan = ParallelPlan(world_size=8, tp=2, pp=2, sequence_parallel=True, global_batch_size=8, seq_length=1024)
    w = generate(LLAMA, plan)
    s, nl, h, G, A, F, V = 1024, 8, 512, 2, 8, 1408, 8192
    per_seq = s * (12 * nl * h * h * (1 + G / A + s / h) + 18 * nl * F * h + 6 * V * h)
    assert total_flops(w) == pytest.approx(8 * per_seq, rel=1e-12)


def _layer_saved(w, layer):
    return sum(op.saved_bytes for st in w.stages for ch in st.chunks for op in ch.forward
               if not op.is_comm and op.layer == layer)


@pytest.mark.parametrize("tp,sp,recompute,expect", [
    (1, False, "none", lambda s, b, h, a, t: s * b * h * (34 + 5 * a * s / h)),
    (4, False, "none", lambda s, b, h, a, t: s * b * h * (10 + 24 / t + 5 * a * s / (h * t))),
    (4, True, "none", lambda s, b, h, a, t: s * b * h * (34 / t + 5 * a * s / (h * t))),
    (4, False, "selective", lambda s, b, h, a, t: s * b * h * (10 + 24 / t)),
    (4, True, "selective", lambda s, b, h, a, t: s * b * h * 34 / t),
    (1, False, "selective", lambda s, b, h, a, t: s * b * h * 34),
    (4, False, "full", lambda s, b, h, a, t: 2 * s * b * h),
])
def test_saved_bytes_follow_korthikanti(tp, sp, recompute, expect):
    s, b, h, a = 1024, 2, 512, 8
    plan = ParallelPlan(world_size=tp, tp=tp, sequence_parallel=sp, global_batch_size=2, micro_batch_size=b,
                        seq_length=s, flash_attention=False, recompute=recompute)
    w = generate(GPT, plan)
    for layer in (0, 7):
        assert _layer_saved(w, layer) == expect(s, b, h, a, tp)


def test_flash_attention_saves_like_selective_plus_softmax_stats():
    # flash attention keeps Q, K, V (no s x s tensors) plus the fp32 log-sum-exp: 4 * b * s * a / t bytes
    s, b, h, a, t = 1024, 2, 512, 8, 4
    plan = ParallelPlan(world_size=4, tp=4, sequence_parallel=True, global_batch_size=2, micro_batch_size=2,
                        seq_length=1024)
    w = generate(GPT, plan)
    assert _layer_saved(w, 3) == s * b * h * 34 // t + 4 * b * s * a // t
    # selective recompute re-runs the attention core: the statistics are not kept either
    w = generate(GPT, ParallelPlan(**{**plan.__dict__, "recompute": "selective"}))
    assert _layer_saved(w, 3) == s * b * h * 34 // t


@pytest.mark.parametrize("cp_comm_type", ["p2p", "a2a"])
def test_flash_softmax_stats_with_context_parallel(cp_comm_type):
    # per rank: b * (s / cp) * (a / t) fp32 statistics, for ring and Ulysses attention alike
    s, b, h, a, t, cp = 1024, 1, 512, 8, 2, 2
    plan = ParallelPlan(world_size=4, tp=t, cp=cp, sequence_parallel=True, global_batch_size=1, seq_length=s,
                        cp_comm_type=cp_comm_type)
    w = generate(GPT, plan)
    core = [op for ch in w.stages[0].chunks for op in ch.forward
            if not op.is_comm and op.kind == "flash_attn" and op.layer == 0]
    assert len(core) == 1
    q_k_v = 3 * 2 * b * (s // cp) * h // t
    assert core[0].saved_bytes == q_k_v + 4 * b * (s // cp) * a // t
    assert _layer_saved(w, 0) == (s // cp) * b * h * 34 // t + 4 * b * (s // cp) * a // t


def test_shared_experts_do_not_save_their_input_twice():
    # MoE layer, swiglu, tp 2 + SP, no dropout: the shared expert adds only its activation input (2F wide)
    # and its fc2 input (F wide) per token; its fc1 input is the router's input, saved once.
    s, b, h, t, fs = 512, 1, 256, 2, 384
    base = dict(name="moe", num_layers=2, hidden_size=h, num_attention_heads=4, ffn_hidden_size=512,
                vocab_size=1024, activation="swiglu", norm="rmsnorm", position_embedding="rope",
                tie_embeddings=False, add_bias_linear=False, num_experts=4, moe_top_k=2, moe_ffn_hidden_size=256)
    plan = ParallelPlan(world_size=2, tp=t, sequence_parallel=True, global_batch_size=1, seq_length=s)
    plain = _layer_saved(generate(ModelSpec(**base), plan), 1)
    shared = _layer_saved(generate(ModelSpec(**base, num_shared_experts=1, shared_expert_ffn_hidden_size=fs),
                                   plan), 1)
    assert shared - plain == 2 * b * s * (2 * fs // t) + 2 * b * s * (fs // t)
    w = generate(ModelSpec(**base, num_shared_experts=1, shared_expert_ffn_hidden_size=fs), plan)
    fc1 = [op for ch in w.stages[0].chunks for op in ch.forward if op.name == "moe_shared_fc1" and op.layer == 1]
    assert len(fc1) == 1 and fc1[0].saved_bytes == 0


def test_gpt3_tp_collectives_sp():
    from workload_gen.zoo import get_model
    m = get_model("gpt3-175b")
    plan = ParallelPlan(world_size=1024, tp=8, pp=8, sequence_parallel=True, micro_batch_size=1, seq_length=2048,
                        global_batch_size=1024)
    w = generate(m, plan)
    tp_ops = [op for ch in w.stages[1].chunks for op in ch.forward if op.is_comm and op.group == "tp"]
    assert {op.collective for op in tp_ops} == {"all_gather", "reduce_scatter"}
    assert {op.size_bytes for op in tp_ops} == {2 * 1 * 2048 * 12288}
    assert len(tp_ops) == 4 * 12   # 12 layers per stage, 2 AG + 2 RS each
    assert w.stages[0].pp_send_bytes == 2 * 2048 * 12288 // 8
    assert w.num_microbatches == 1024 // (1 * 16) and w.schedule == "1f1b"


def test_no_sp_all_reduce_forward_and_backward():
    plan = ParallelPlan(world_size=4, tp=4, global_batch_size=4, seq_length=1024)
    w = generate(GPT, plan)
    ch = w.stages[0].chunks[0]
    fwd = [op for op in ch.forward if op.is_comm and op.layer == 2]
    bwd = [op for op in ch.backward if op.is_comm and op.layer == 2]
    assert [op.collective for op in fwd] == ["all_reduce", "all_reduce"]
    assert [op.collective for op in bwd] == ["all_reduce", "all_reduce"]
    assert all(op.size_bytes == 2 * 1024 * 512 for op in fwd + bwd)
    assert all(not op.blocking for op in bwd)     # overlapped with the wgrad GEMM


def test_backward_has_dgrad_and_wgrad_for_every_gemm():
    plan = ParallelPlan(world_size=8, tp=2, pp=2, sequence_parallel=True, global_batch_size=8, seq_length=1024)
    w = generate(LLAMA, plan)
    for st in w.stages:
        for ch in st.chunks:
            fwd = [op.name for op in ch.forward if not op.is_comm and op.kind == "gemm"]
            bwd = {(op.name, op.variant) for op in ch.backward if not op.is_comm and op.kind == "gemm"}
            for name in fwd:
                assert (f"{name}_dgrad", "dgrad") in bwd and (f"{name}_wgrad", "wgrad") in bwd
            assert all(op.phase in ("bwd", "recompute") for op in ch.backward)


def test_wait_ops_resolve_to_a_later_op():
    plan = ParallelPlan(world_size=64, tp=2, pp=2, cp=2, sequence_parallel=True, tp_comm_overlap=True,
                        distributed_optimizer=True, global_batch_size=32, seq_length=1024)
    w = generate(LLAMA, plan)
    n = 0
    for st in w.stages:
        for ch in st.chunks:
            for ops in (ch.forward, ch.backward):
                for i, op in enumerate(ops):
                    if op.is_comm and op.wait_op is not None:
                        assert not op.blocking
                        assert op.wait_op in [x.name for x in ops[i + 1:]], op
                        n += 1
    assert n > 0


def test_dp_buckets_cover_stage_params():
    plan = ParallelPlan(world_size=32, tp=2, pp=2, sequence_parallel=True, distributed_optimizer=True,
                        global_batch_size=32, seq_length=1024, grad_bucket_elements=1_000_000)
    w = generate(GPT, plan)
    for st in w.stages:
        rs = [op for ch in st.chunks for op in ch.backward if op.is_comm and op.group == "dp"]
        assert all(op.collective == "reduce_scatter" and op.microbatch == "last" and not op.blocking for op in rs)
        assert sum(op.size_bytes for op in rs) == 4 * stage_params(GPT, plan, st.stage).dense
        ag = [op for ch in st.chunks for op in ch.forward if op.is_comm and op.group == "dp"]
        assert sum(op.size_bytes for op in ag) == 2 * stage_params(GPT, plan, st.stage).dense
        assert all(op.microbatch == "first" for op in ag)


def test_size_independent_of_world_size():
    def count(ws):
        plan = ParallelPlan(world_size=ws, tp=2, pp=2, sequence_parallel=True, global_batch_size=ws * 4,
                            seq_length=1024)
        w = generate(GPT, plan)
        return sum(len(ch.forward) + len(ch.backward) for st in w.stages for ch in st.chunks)
    assert count(8) == count(4096)


def test_pp_send_recv_and_tied_embedding():
    plan = ParallelPlan(world_size=8, tp=2, pp=4, vpp=2, sequence_parallel=True, global_batch_size=8,
                        seq_length=1024)
    w = generate(GPT, plan)
    assert w.schedule == "interleaved"
    first, last = w.stages[0].chunks[0], w.stages[3].chunks[1]
    assert first.forward[0].name == "embedding" and first.forward[-1].collective == "send"
    assert last.forward[0].collective == "recv" and last.forward[0].peer == "prev"
    assert all(op.size_bytes == 2 * 1024 * 512 // 2 for op in first.forward + last.backward
               if op.is_comm and op.group == "pp")
    for s in (0, 3):
        emb = [op for op in w.stages[s].iteration_end if op.is_comm and op.group == "embedding"]
        assert len(emb) == 1 and emb[0].size_bytes == 4 * 8192 // 2 * 512
    assert not [op for op in w.stages[1].iteration_end if op.is_comm and op.group == "embedding"]


MIXTRAL_SMALL = ModelSpec(name="moe-small", num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=2,
                          ffn_hidden_size=1024, vocab_size=8192, seq_length=1024, activation="swiglu",
                          norm="rmsnorm", position_embedding="rope", tie_embeddings=False, add_bias_linear=False,
                          num_experts=8, moe_top_k=2)


@pytest.mark.parametrize("grouped", [True, False])
def test_moe_all_to_all_and_expert_flops(grouped):
    plan = ParallelPlan(world_size=16, tp=2, ep=4, etp=1, sequence_parallel=True, global_batch_size=16,
                        seq_length=1024, moe_grouped_gemm=grouped)
    w = generate(MIXTRAL_SMALL, plan)
    ch = w.stages[0].chunks[0]
    a2a = [op for op in ch.forward if op.is_comm and op.group == "ep"]
    assert [op.name for op in a2a[:2]] == ["moe_dispatch", "moe_combine"]
    tokens_local = 1024 // 2
    assert all(op.collective == "all_to_all" and op.size_bytes == tokens_local * 2 * 512 * 2 for op in a2a)
    # expert FLOPs over all ranks = tokens * topk * 3 GEMMs * 2 * h * F * 3 passes
    kinds = {"grouped_gemm"} if grouped else {"gemm"}
    expert = sum(op.flops for op in ch.forward + ch.backward
                 if not op.is_comm and op.kind in kinds and op.name.startswith("moe_") and "router" not in op.name)
    ranks = plan.tp * plan.dp
    assert expert * ranks * w.num_microbatches == pytest.approx(
        16 * 1024 * 2 * 3 * 2 * 512 * 1024 * 3 * 4, rel=1e-12)
    assert any(op.group == "edp" for op in ch.backward if op.is_comm)


def test_mla_and_deepseek_generate():
    from workload_gen.zoo import get_model
    m = get_model("deepseek-v3")
    plan = ParallelPlan(world_size=1024, tp=2, pp=8, ep=64, sequence_parallel=True, global_batch_size=1024,
                        seq_length=4096, num_layers_first_stage=7, num_layers_last_stage=6,
                        distributed_optimizer=True)
    w = generate(m, plan)
    names = {op.name for ch in w.stages[0].chunks for op in ch.forward}
    assert {"attn_q_down", "attn_kv_down", "attn_kv_up", "attn_core", "moe_dispatch", "moe_fc1"} <= names
    core = next(op for op in w.stages[0].chunks[0].forward if op.name == "attn_core")
    assert core.dims["head_dim_qk"] == 192 and core.dims["head_dim_v"] == 128 and core.dims["heads"] == 64


def test_deepspeed_zero_stages():
    for z, mb in ((1, "last"), (2, "all"), (3, "all")):
        plan = ParallelPlan(world_size=8, tp=2, framework="deepspeed", zero_stage=z, global_batch_size=8,
                            seq_length=1024, reduce_bucket_elements=2_000_000)
        w = generate(GPT, plan)
        ch = w.stages[0].chunks[0]
        rs = [op for op in ch.backward if op.is_comm and op.group == "dp" and op.collective == "reduce_scatter"]
        assert rs and all(op.microbatch == mb for op in rs)
        assert sum(op.size_bytes for op in rs) == 2 * stage_params(GPT, plan, 0).dense
        gathers = [op for op in ch.forward if op.is_comm and op.name.startswith("zero3_param_gather")]
        assert bool(gathers) == (z == 3)
        post = [op for op in w.stages[0].iteration_end if op.name.startswith("zero_param_gather")]
        assert bool(post) == (z in (1, 2))


def test_invalid_plan_raises_plan_error():
    with pytest.raises(PlanError, match="tp"):
        generate(GPT, ParallelPlan(world_size=8, tp=3))


def test_optimizer_step_shard():
    plan = ParallelPlan(world_size=16, tp=2, pp=2, distributed_optimizer=True, global_batch_size=16,
                        seq_length=1024, sequence_parallel=True)
    w = generate(GPT, plan)
    for st in w.stages:
        step = [op for op in st.iteration_end if not op.is_comm and op.kind == "optimizer"]
        assert len(step) == 1
        assert step[0].dims["params"] == -(-stage_params(GPT, plan, st.stage).dense // 4)


@pytest.mark.parametrize("name,kw", [
    ("qwen3-235b-a22b", dict(world_size=256, tp=4, pp=2, ep=16, sequence_parallel=True, seq_length=4096)),
    ("deepseek-v2", dict(world_size=640, tp=4, pp=4, ep=8, etp=2, sequence_parallel=True)),
    ("qwen2.5-72b", dict(world_size=64, tp=8, pp=2, sequence_parallel=True)),
    ("llama3-70b", dict(world_size=64, tp=8, pp=4, vpp=2, sequence_parallel=True)),
    ("deepseek-v2-lite", dict(world_size=64, tp=2, ep=8, sequence_parallel=True)),
    ("gpt3-175b", dict(world_size=64, tp=8, pp=2, sequence_parallel=True, seq_length=2048)),
])
def test_gradient_buckets_match_param_counts(name, kw):
    """Parameters attached to the emitted wgrad/norm kernels == params.stage_params (independent code)."""
    from workload_gen.zoo import get_model
    m = get_model(name)
    for bucket in (10**12, 5_000_000):
        plan = ParallelPlan(global_batch_size=kw["world_size"], grad_bucket_elements=bucket,
                            distributed_optimizer=True, **kw)
        w = generate(m, plan)
        for st in w.stages:
            sp = stage_params(m, plan, st.stage)
            ops = [op for ch in st.chunks for op in ch.backward if op.is_comm and op.name.startswith("dp_grad")]
            dense = sum(op.size_bytes for op in ops if "expert" not in op.name) // 4
            expert = sum(op.size_bytes for op in ops if "expert" in op.name) // 4
            assert dense == sp.dense
            assert expert == (sp.expert if plan.edp > 1 else 0)
            gathers = [op for ch in st.chunks for op in ch.forward if op.is_comm and op.name.startswith("dp_param")]
            assert sum(op.size_bytes for op in gathers if op.group != "edp") == 2 * sp.dense
            assert sum(op.size_bytes for op in gathers if op.group == "edp") == (2 * sp.expert if plan.edp > 1 else 0)


def _layer_ops(ops, layer):
    return [op for op in ops if op.layer == layer]


def test_selective_recompute_reissues_attention_core_first():
    plan = ParallelPlan(world_size=2, tp=2, sequence_parallel=True, global_batch_size=2, seq_length=1024,
                        flash_attention=False, recompute="selective")
    w = generate(GPT, plan)
    bwd = _layer_ops(w.stages[0].chunks[0].backward, 5)
    rec = [op for op in bwd if op.phase == "recompute"]
    assert [op.name for op in rec] == ["attn_scores", "attn_softmax", "attn_dropout", "attn_context"]
    assert bwd[:4] == rec                      # at the start of the layer's backward
    assert all(op.variant == "fwd" for op in rec)


def test_full_recompute_reissues_whole_layer_with_tp_comm():
    plan = ParallelPlan(world_size=2, tp=2, pp=1, sequence_parallel=True, global_batch_size=2, seq_length=1024,
                        recompute="full", recompute_num_layers=2)
    w = generate(GPT, plan)
    ch = w.stages[0].chunks[0]
    for layer in range(8):
        fwd = _layer_ops(ch.forward, layer)
        rec = [op for op in _layer_ops(ch.backward, layer) if op.phase == "recompute"]
        if layer < 2:
            assert [(op.name, getattr(op, "collective", None)) for op in rec] == \
                   [(op.name, getattr(op, "collective", None)) for op in fwd]
            assert any(op.is_comm and op.group == "tp" for op in rec)
            assert _layer_saved(w, layer) == 2 * 1024 * 512 // 2
        else:
            assert not rec


def test_tp_comm_overlap_is_non_blocking_around_gemms():
    plan = ParallelPlan(world_size=2, tp=2, sequence_parallel=True, tp_comm_overlap=True, global_batch_size=2,
                        seq_length=1024)
    fwd = _layer_ops(generate(GPT, plan).stages[0].chunks[0].forward, 1)
    names = [op.name for op in fwd]
    ag = fwd[names.index("attn_ag")]
    assert not ag.blocking and names[names.index("attn_ag") + 1] == "attn_qkv" and ag.wait_op == "attn_core"
    rs = fwd[names.index("attn_rs")]
    assert not rs.blocking and names[names.index("attn_rs") + 1] == "attn_proj" and rs.wait_op == "attn_dropout_add"


@pytest.mark.parametrize("cp_type,tp,cp", [("p2p", 2, 4), ("a2a", 1, 2)])
def test_context_parallel_comm(cp_type, tp, cp):
    plan = ParallelPlan(world_size=tp * cp, tp=tp, cp=cp, sequence_parallel=tp > 1, global_batch_size=2,
                        seq_length=4096, cp_comm_type=cp_type)
    w = generate(LLAMA, plan)
    ch = w.stages[0].chunks[0]
    fwd = [op for op in _layer_ops(ch.forward, 0) if op.is_comm and op.group == "cp"]
    core = next(op for op in ch.forward if op.name == "attn_core")
    tokens = 4096 // cp                          # per CP rank
    heads, kv = 8 // tp, 2 // tp
    if cp_type == "p2p":
        kv_local = 2 * tokens * kv * 64 * 2      # K and V: tokens x kv heads x head_dim x 2 B
        assert [(op.collective, op.size_bytes, op.blocking) for op in fwd] == [("all_gather", cp * kv_local, False)]
        assert (core.dims["seq_q"], core.dims["seq_kv"], core.dims["heads"]) == (tokens, 4096, heads)
        bwd = [op.collective for op in _layer_ops(ch.backward, 0) if op.is_comm and op.group == "cp"]
        assert bwd == ["all_gather", "reduce_scatter"]
    else:
        qkv = 2 * tokens * (heads + 2 * kv) * 64
        out = 2 * tokens * heads * 64
        assert [(op.collective, op.size_bytes) for op in fwd] == [("all_to_all", qkv), ("all_to_all", out)]
        assert (core.dims["seq_q"], core.dims["heads"], core.dims["kv_heads"]) == (4096, heads // cp, kv // cp)


def test_fp8_gemms_and_dtypes():
    plan = ParallelPlan(world_size=2, tp=2, sequence_parallel=True, global_batch_size=2, seq_length=1024, dtype="fp8")
    ch = generate(LLAMA, plan).stages[0].chunks[0]
    assert {op.dtype for op in ch.forward + ch.backward if not op.is_comm and op.kind == "gemm"} == {"fp8"}
    assert {op.dtype for op in ch.forward if not op.is_comm and op.kind == "flash_attn"} == {"bf16"}


def test_megatron_default_bucket_size_grows_with_dp():
    from workload_gen.dp_comm import megatron_bucket_elements
    # megatron-core DDP: bucket_size = max(40M, 1M x dp) when --ddp-bucket-size is not given
    assert megatron_bucket_elements(ParallelPlan(world_size=8)) == 40_000_000
    assert megatron_bucket_elements(ParallelPlan(world_size=1024, tp=8)) == 128_000_000
    assert megatron_bucket_elements(ParallelPlan(world_size=512, tp=2, cp=2)) == 128_000_000   # dp without cp
    assert megatron_bucket_elements(ParallelPlan(world_size=1024, tp=8, grad_bucket_elements=5_000_000)) == 5_000_000
    big = ModelSpec(name="gpt-4k", num_layers=8, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384,
                    vocab_size=8192, seq_length=1024)
    sizes = {}
    for bucket in (40_000_000, 40_000_001):
        w = generate(big, ParallelPlan(world_size=128, global_batch_size=128, seq_length=1024,
                                       grad_bucket_elements=bucket))
        ops = [op for ch in w.stages[0].chunks for op in ch.backward if op.is_comm and op.name.startswith("dp_grad")]
        sizes[bucket] = [op.size_bytes // 4 for op in ops]
        assert sum(sizes[bucket]) == stage_params(big, w.plan, 0).dense
    assert all(n >= 128_000_000 for n in sizes[40_000_000][:-1])            # default: 1M x dp = 128M
    assert all(n >= 40_000_001 for n in sizes[40_000_001][:-1])             # explicit value honoured
    assert min(sizes[40_000_001][:-1]) < 128_000_000 and len(sizes[40_000_001]) > len(sizes[40_000_000])


@pytest.mark.parametrize("model,sp,fwd_expect,bwd_expect", [
    # learned positions (GPT), SP: all-reduce, add positions, split; backward all-gathers the gradient
    (GPT, True, ["all_reduce"], ["all_gather"]),
    (GPT, False, ["all_reduce"], []),
    # RoPE (no learned positions), SP: reduce-scatter; backward all-gather
    (LLAMA, True, ["reduce_scatter"], ["all_gather"]),
    (LLAMA, False, ["all_reduce"], []),
])
def test_embedding_tp_comm_follows_megatron_core(model, sp, fwd_expect, bwd_expect):
    s, b, h, t = 1024, 2, 512, 2
    plan = ParallelPlan(world_size=t, tp=t, sequence_parallel=sp, global_batch_size=b, micro_batch_size=b,
                        seq_length=s)
    ch = generate(model, plan).stages[0].chunks[0]
    fwd = [op for op in ch.forward if op.is_comm and op.layer == -1 and op.name.startswith("embedding")]
    bwd = [op for op in ch.backward if op.is_comm and op.layer == -1 and op.name.startswith("embedding")]
    assert [op.collective for op in fwd] == fwd_expect and [op.collective for op in bwd] == bwd_expect
    assert all(op.size_bytes == 2 * b * s * h for op in fwd + bwd)
    names = [op.name for op in ch.backward if op.layer == -1]
    if model is GPT:   # the position gradient is computed on the gathered (full) sequence
        assert names.index("embedding_pos_add_bwd") < names.index("embedding_wgrad")
        if sp:
            assert names.index("embedding_ag_bwd") < names.index("embedding_pos_add_bwd")
