"""Memory analysis: Korthikanti activation formulas, measured ratios, model-state sharding, schedules."""

from __future__ import annotations

import dataclasses

import pytest

from sim.analysis.memory import (
    MemoryOptions,
    analyze_memory,
    inflight_microbatches,
    layer_activation_bytes,
    model_state_bytes,
)
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan

# (s, b, h, a, t): several shapes where every formula term is an integer
SHAPES = [
    (2048, 1, 6144, 64, 8),      # GPT-22B, Korthikanti
    (2048, 1, 12288, 96, 8),     # GPT-3 175B
    (1024, 2, 4096, 32, 4),
    (4096, 1, 2048, 16, 2),
    (512, 4, 1024, 16, 1),
    (2048, 2, 8192, 64, 8),
]


def gpt_layer_model(h: int, a: int, s: int) -> ModelSpec:
    # GPT layer: GELU MLP 4h, LayerNorm, learned positions, dropout (GPT default)
    return ModelSpec(name=f"gpt-h{h}", num_layers=4, hidden_size=h, num_attention_heads=a, ffn_hidden_size=4 * h,
                     vocab_size=51200, seq_length=s, activation="gelu", norm="layernorm",
                     position_embedding="learned")


def plan_for(s, b, t, *, sp=False, recompute="none", **kw) -> ParallelPlan:
    return ParallelPlan(world_size=t, tp=t, sequence_parallel=sp and t > 1, micro_batch_size=b, global_batch_size=b,
                        seq_length=s, recompute=recompute, flash_attention=False, **kw)


@pytest.mark.parametrize("s,b,h,a,t", SHAPES)
def test_activation_per_layer_matches_korthikanti_exactly(s, b, h, a, t):
    model = gpt_layer_model(h, a, s)
    # formulas typed from the paper (bytes per layer), integer arithmetic
    tp_only = s * b * h * 10 + 24 * s * b * h // t + 5 * a * s * s * b // t
    tp_sp = 34 * s * b * h // t + 5 * a * s * s * b // t
    tp_sel = s * b * h * 10 + 24 * s * b * h // t
    tp_sp_sel = 34 * s * b * h // t
    full = 2 * s * b * h
    assert layer_activation_bytes(model, plan_for(s, b, t)) == tp_only
    assert layer_activation_bytes(model, plan_for(s, b, t, recompute="selective")) == tp_sel
    assert layer_activation_bytes(model, plan_for(s, b, t, recompute="full")) == full
    if t > 1:
        assert layer_activation_bytes(model, plan_for(s, b, t, sp=True)) == tp_sp
        assert layer_activation_bytes(model, plan_for(s, b, t, sp=True, recompute="selective")) == tp_sp_sel
    else:
        assert tp_only == s * b * h * 34 + 5 * a * s * s * b  # "no parallelism" row
        assert layer_activation_bytes(model, plan_for(s, b, 1)) == s * b * h * (34 + 5 * a * s // h)


@pytest.mark.parametrize("name,h,a,measured", [
    ("22B", 6144, 64, {"sp": 0.668, "sel": 0.494, "sp_sel": 0.162, "full": 0.076}),
    ("175B", 12288, 96, {"sp": 0.620, "sel": 0.565, "sp_sel": 0.185, "full": 0.087}),
])
def test_ratios_within_two_points_of_measured(name, h, a, measured):
    s, b, t = 2048, 1, 8
    model = gpt_layer_model(h, a, s)
    base = layer_activation_bytes(model, plan_for(s, b, t))
    got = {
        "sp": layer_activation_bytes(model, plan_for(s, b, t, sp=True)) / base,
        "sel": layer_activation_bytes(model, plan_for(s, b, t, recompute="selective")) / base,
        "sp_sel": layer_activation_bytes(model, plan_for(s, b, t, sp=True, recompute="selective")) / base,
        "full": layer_activation_bytes(model, plan_for(s, b, t, recompute="full")) / base,
    }
    for k, v in measured.items():
        assert abs(got[k] - v) <= 0.02, (name, k, got[k], v)


def test_flash_attention_drops_the_score_term():
    s, b, h, a, t = 2048, 1, 4096, 32, 4
    model = gpt_layer_model(h, a, s)
    flash = dataclasses.replace(plan_for(s, b, t), flash_attention=True)
    # flash keeps Q, K, V (as the selective case does) plus fp32 log-sum-exp per (query, head)
    expected = s * b * h * 10 + 24 * s * b * h // t + 4 * b * (a // t) * s
    assert layer_activation_bytes(model, flash) == expected


def test_selective_components_mlp_and_norm():
    s, b, h, a, t = 1024, 1, 2048, 16, 2
    model = gpt_layer_model(h, a, s)
    p = plan_for(s, b, t, recompute="selective")
    attn_only = layer_activation_bytes(model, p)
    # MLP recompute additionally drops the GELU input and fc2 input: 2 x 2*s*b*4h/t
    mlp = layer_activation_bytes(model, p, options=MemoryOptions(selective=("attn", "mlp")))
    assert attn_only - mlp == 2 * (2 * s * b * 4 * h // t)
    # norm recompute drops the two GEMM inputs that are norm outputs (QKV input, fc1 input): 2 x 2sbh
    norm = layer_activation_bytes(model, p, options=MemoryOptions(selective=("attn", "norm")))
    assert attn_only - norm == 2 * (2 * s * b * h)


# ---------------------------------------------------------------------------------- model states
def test_model_states_no_sharding():
    p = ParallelPlan(world_size=16, tp=1, pp=1, cp=2)  # dp 8, cp 2
    ms = model_state_bytes(1_000_000, 0, p)
    assert (ms.weight_bytes, ms.grad_bytes, ms.optimizer_bytes) == (2_000_000, 4_000_000, 12_000_000)


def test_model_states_distributed_optimizer_shards_over_dp_times_cp():
    p = ParallelPlan(world_size=16, cp=2, distributed_optimizer=True)  # dp 8 x cp 2 = 16
    ms = model_state_bytes(1_600_000, 0, p)
    assert ms.weight_bytes == 3_200_000
    assert ms.grad_bytes == 6_400_000
    assert ms.optimizer_bytes == 12 * 100_000
    assert ms.total_bytes == 3_200_000 + 6_400_000 + 1_200_000


@pytest.mark.parametrize("stage,w,g,o", [
    (1, 2 * 800_000, 4 * 800_000, 12 * 100_000),
    (2, 2 * 800_000, 4 * 100_000, 12 * 100_000),
    (3, 2 * 100_000, 4 * 100_000, 12 * 100_000),
])
def test_model_states_zero_stages(stage, w, g, o):
    p = ParallelPlan(world_size=8, framework="deepspeed", zero_stage=stage)  # dp 8
    ms = model_state_bytes(800_000, 0, p)
    assert (ms.weight_bytes, ms.grad_bytes, ms.optimizer_bytes) == (w, g, o)


def test_model_states_experts_shard_over_expert_dp():
    # tp 2, dp 8 -> 16 ranks per stage; ep 4, etp 1 -> edp 4
    p = ParallelPlan(world_size=16, tp=2, ep=4, etp=1, distributed_optimizer=True)
    assert p.edp == 4
    ms = model_state_bytes(1_600_000, 400_000, p)
    assert ms.weight_bytes == 2 * 2_000_000
    assert ms.grad_bytes == 4 * 2_000_000
    assert ms.optimizer_bytes == 12 * (1_600_000 // 8 + 400_000 // 4)


# Llama-3-8B parameters one rank holds at tp 2, counted by hand: h 4096, 32 heads of 128, 8 KV heads,
# SwiGLU ffn 14336, RMSNorm (h weights), vocabulary 128256 (= 501 x 256: no padding at tp 2), untied head
_L8_LAYER_TP2 = (4096 * (32 + 2 * 8) * 128 // 2 + 32 * 128 * 4096 // 2   # QKV, output projection
                 + 3 * 4096 * 14336 // 2 + 2 * 4096)                       # gate/up/down, two norms
_L8_EMB_TP2 = 128256 * 4096 // 2


def test_stage_model_states_by_hand_distributed_optimizer():
    from workload_gen.zoo import get_model
    m = get_model("llama3-8b")
    # tp 2, pp 4 (8 layers per stage), cp 2, dp 4: the optimizer shards over dp x cp = 8
    p = ParallelPlan(world_size=64, tp=2, pp=4, cp=2, seq_length=4096, global_batch_size=64,
                     distributed_optimizer=True)
    params = [8 * _L8_LAYER_TP2 + _L8_EMB_TP2, 8 * _L8_LAYER_TP2, 8 * _L8_LAYER_TP2,
              8 * _L8_LAYER_TP2 + 4096 + _L8_EMB_TP2]          # + embedding / + final norm and LM head
    for st, n in zip(analyze_memory(m, p).stages, params):
        ms = st.model_states
        assert (ms.dense_params, ms.expert_params) == (n, 0)
        assert (ms.weight_bytes, ms.grad_bytes, ms.optimizer_bytes) == (2 * n, 4 * n, 12 * (-(-n // 8)))


@pytest.mark.parametrize("zero", [1, 2, 3])
def test_stage_model_states_by_hand_zero(zero):
    from workload_gen.zoo import get_model
    m = get_model("llama3-8b")
    p = ParallelPlan(world_size=64, tp=2, framework="deepspeed", zero_stage=zero, seq_length=4096,
                     global_batch_size=64)                       # dp 32
    n = 32 * _L8_LAYER_TP2 + 2 * _L8_EMB_TP2 + 4096
    shard = -(-n // 32)
    ms = analyze_memory(m, p).stages[0].model_states
    assert ms.weight_bytes == 2 * (shard if zero >= 3 else n)
    assert ms.grad_bytes == 4 * (shard if zero >= 2 else n)
    assert ms.optimizer_bytes == 12 * shard


def test_moe_stage_model_states_by_hand():
    from workload_gen.zoo import get_model
    m = get_model("mixtral-8x7b")
    # tp 2, pp 2 (16 layers per stage), ep 4, etp 1: dp 16, expert-dp = 2 * 16 / 4 = 8
    p = ParallelPlan(world_size=64, tp=2, pp=2, ep=4, etp=1, sequence_parallel=True, seq_length=4096,
                     global_batch_size=64, distributed_optimizer=True)
    dense_layer = 4096 * 48 * 128 // 2 + 4096 * 4096 // 2 + 2 * 4096 + 4096 * 8   # attention, norms, router
    expert_layer = (8 // 4) * 3 * 4096 * 14336                                    # 2 local experts, etp 1
    emb = 32000 * 4096 // 2                                                        # 32000 = 125 x 256
    for st in analyze_memory(m, p).stages:
        d = 16 * dense_layer + emb + (4096 if st.stage == 1 else 0)
        e = 16 * expert_layer
        ms = st.model_states
        assert (ms.dense_params, ms.expert_params) == (d, e)
        assert ms.optimizer_bytes == 12 * (-(-d // 16) + -(-e // 8))


# ---------------------------------------------------------------------------------- schedules / peaks
def test_inflight_1f1b_and_interleaved():
    assert [inflight_microbatches(i, 4, 1, 64) for i in range(4)] == [4, 3, 2, 1]
    assert inflight_microbatches(0, 4, 1, 2) == 2          # fewer micro-batches than stages
    # interleaved first stage: p * (1 + (p - 1) / (p * v))
    for p, v in ((4, 2), (8, 4), (4, 5)):
        assert inflight_microbatches(0, p, v, 64) == pytest.approx(p * (1 + (p - 1) / (p * v)))
    assert inflight_microbatches(0, 1, 1, 64) == 1


def test_peak_report_path_and_terms():
    from workload_gen.zoo import get_model
    m = get_model("llama3-70b")
    p = ParallelPlan(world_size=256, tp=8, pp=4, sequence_parallel=True, global_batch_size=64, seq_length=8192,
                     distributed_optimizer=True)
    rep = analyze_memory(m, p)
    s0 = rep.stages[0]
    assert s0.inflight_microbatches == 4 and rep.stages[-1].inflight_microbatches == 1
    assert s0.peak_activation_bytes == 4 * s0.activation_per_microbatch_bytes
    for s in rep.stages:
        assert s.reserved_bytes >= s.peak_allocated_bytes == max(s.fwd_peak_allocated_bytes,
                                                                 s.bwd_peak_allocated_bytes)
        assert s.peak_allocated_bytes > s.model_states.total_bytes + s.peak_activation_bytes
        assert s.comm_buffer_bytes["nccl_buffers"] > 0 and s.comm_buffer_bytes["pp_recv_buffers"] > 0
        assert s.peak_path.stage == s.stage and s.peak_path.phase in ("fwd", "bwd")
    assert rep.peak.stage == 0
    # the last stage's peak involves the vocabulary-wide cross-entropy
    assert rep.stages[-1].activation_per_chunk_bytes[0] > rep.stages[1].activation_per_chunk_bytes[0]
    d = rep.to_dict()
    assert d["peak_reserved_bytes"] == rep.peak_reserved_bytes and "stage 0" in d["peak_path"]


def test_mem_factor_overrides_reserved_ratio():
    from workload_gen.zoo import get_model
    m = get_model("llama3-8b")
    p = ParallelPlan(world_size=8, tp=8, sequence_parallel=True, global_batch_size=1, seq_length=8192)
    rep = analyze_memory(m, p, options=MemoryOptions(mem_factor=0.94))   # SimuMax: allocated/reserved
    s = rep.stages[0]
    assert s.reserved_bytes == int(s.peak_allocated_bytes / 0.94)


@pytest.mark.parametrize("s,b,h,a,t", SHAPES)
def test_workload_saved_bytes_match_formula_when_generator_present(s, b, h, a, t):
    """The generator's ComputeOp.saved_bytes summed per layer equal the paper's formulas."""
    import workload_gen as wg
    from sim.analysis.memory import activations_from_workload
    model = gpt_layer_model(h, a, s)
    cases = [(False, "none", s * b * h * 10 + 24 * s * b * h // t + 5 * a * s * s * b // t),
             (False, "selective", s * b * h * 10 + 24 * s * b * h // t),
             (False, "full", 2 * s * b * h)]
    if t > 1:
        cases += [(True, "none", 34 * s * b * h // t + 5 * a * s * s * b // t),
                  (True, "selective", 34 * s * b * h // t)]
    for sp, rc, expected in cases:
        plan = plan_for(s, b, t, sp=sp, recompute=rc)
        per_layer = activations_from_workload(wg.generate(model, plan))[(0, 0)]
        assert per_layer[1] == expected, (sp, rc, per_layer[1], expected)


def test_workload_and_layer_units_agree_on_selective_component_choices():
    import workload_gen as wg
    s, b, h, a, t = 1024, 1, 2048, 16, 2
    model = gpt_layer_model(h, a, s)
    plan = plan_for(s, b, t, sp=True, recompute="selective")
    w = wg.generate(model, plan)
    for sel in (("attn",), ("mlp",), ("attn", "mlp", "norm"), ("norm",)):
        opts = MemoryOptions(selective=sel)
        from_wl = analyze_memory(model, plan, w, options=opts).stages[0].activation_per_layer_bytes[1]
        from_walk = analyze_memory(model, plan, options=opts).stages[0].activation_per_layer_bytes[1]
        assert from_wl == from_walk == layer_activation_bytes(model, plan, 1, opts), sel


@pytest.mark.parametrize("name,kw", [
    # Qwen3: per-head Q/K norms keep Q and K; MoE unpermute keeps the fp32 routing probabilities
    ("qwen3-235b-a22b", dict(world_size=128, tp=2, pp=2, ep=32, etp=1, sequence_parallel=True)),
    ("mixtral-8x7b", dict(world_size=64, tp=2, pp=4, ep=8, etp=1, sequence_parallel=True,
                          num_layers_first_stage=7, num_layers_last_stage=7)),
    ("mixtral-8x7b", dict(world_size=64, tp=2, pp=2, ep=4, etp=2, sequence_parallel=True)),
    ("deepseek-v3", dict(world_size=256, tp=2, pp=8, ep=16, etp=1, sequence_parallel=True,
                         num_layers_first_stage=5, num_layers_last_stage=8)),       # MLA, shared expert
    ("llama3-8b", dict(world_size=32, tp=2, pp=4, vpp=2, sequence_parallel=True, recompute="full",
                       recompute_num_layers=2)),
])
def test_search_op_walk_keeps_what_the_workload_keeps(name, kw):
    """The search prunes with workload_gen.layers' units; `clustersim memory` uses the workload: same bytes."""
    from workload_gen import generate
    from workload_gen.zoo import get_model
    m = get_model(name)
    p = ParallelPlan(global_batch_size=64, seq_length=4096, **kw)
    from_wl = analyze_memory(m, p, generate(m, p))
    from_walk = analyze_memory(m, p)
    for a, b in zip(from_wl.stages, from_walk.stages):
        assert a.activation_per_layer_bytes == b.activation_per_layer_bytes, (name, a.stage)
        assert a.activation_per_chunk_bytes == b.activation_per_chunk_bytes, (name, a.stage)


def test_loss_transients_follow_megatron_cross_entropy():
    """Vocab-parallel cross-entropy: the fp32 upcast of the logits becomes the saved softmax in place.

    Forward peak at the loss = saved set + the 16-bit logits (2 B/logit); backward: the fp32 gradient
    is formed in place in the softmax and cast to a 16-bit gradient (2 B/logit). A tiny model with a
    large vocabulary makes the loss the peak of the last stage."""
    s, V, h = 2048, 256000, 512
    m = ModelSpec(name="bigvocab", num_layers=2, hidden_size=h, num_attention_heads=8, ffn_hidden_size=4 * h,
                  vocab_size=V, seq_length=s)
    p = ParallelPlan(world_size=2, pp=2, global_batch_size=8, seq_length=s)
    last = analyze_memory(m, p).stages[-1]
    logits = s * V                                  # 256000 is a multiple of 128: no padding
    base = last.model_states.total_bytes + sum(last.comm_buffer_bytes.values())
    # saved on the last stage: its layer, then final-norm input, LM-head input (2 B x s x h each), softmax
    assert last.activation_per_microbatch_bytes == last.activation_per_layer_bytes[1] + 2 * 2 * s * h + 4 * logits
    assert last.inflight_microbatches == 1
    assert last.fwd_peak_allocated_bytes == base + last.peak_activation_bytes + 2 * logits
    assert last.bwd_peak_allocated_bytes == base + last.peak_activation_bytes + 2 * logits
    assert last.peak_path.op == "cross_entropy"
