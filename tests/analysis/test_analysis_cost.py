"""Cost analysis: FLOP formulas (models.md), MFU/HFU definitions, step-time estimate invariants."""

from __future__ import annotations

import dataclasses

import pytest

from sim.analysis.cost import count_flops, model_flops_per_token, utilisation, walk_kernel_flops
from sim.analysis.steptime import HardwareSpec, estimate_step, group_ranks
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.zoo import get_model


def gpt(layers, h, a, V=51200, s=2048) -> ModelSpec:
    return ModelSpec(name="gpt", num_layers=layers, hidden_size=h, num_attention_heads=a, ffn_hidden_size=4 * h,
                     vocab_size=V, seq_length=s)


@pytest.mark.parametrize("L,h,a,s", [(96, 12288, 96, 2048), (36, 4096, 32, 2048), (48, 6144, 64, 4096)])
def test_gpt_model_flops_equal_megatron_formula(L, h, a, s):
    V, B = 51200, 512
    m = gpt(L, h, a, V, s)
    plan = ParallelPlan(world_size=8, tp=8, global_batch_size=B, seq_length=s)
    expected = 72 * B * s * L * h * h * (1 + s / (6 * h) + V / (12 * L * h))
    assert count_flops(m, plan).model_flops == pytest.approx(expected, rel=1e-12)
    # full recompute of every layer = Megatron's 4-pass hardware count
    full = dataclasses.replace(plan, recompute="full")
    expected_hw = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))
    assert count_flops(m, full).hardware_flops == pytest.approx(expected_hw, rel=1e-12)


def test_llama_model_flops_per_sequence_formula():
    m = get_model("llama3-70b")
    s, L, h, A, G, F, V = 8192, 80, 8192, 64, 8, 28672, 128256
    expected = s * (12 * L * h * h * (1 + G / A + s / h) + 18 * L * F * h + 6 * V * h)
    assert model_flops_per_token(m, s) * s == pytest.approx(expected, rel=1e-12)


def test_mfu_hfu_definitions():
    m = gpt(36, 4096, 32)
    plan = ParallelPlan(world_size=128, tp=4, global_batch_size=512, recompute="full")
    fc = count_flops(m, plan)
    u = utilisation(fc, 3.7, 128, 312e12)
    assert u["mfu_6nd_with_attn"] == pytest.approx(fc.model_flops / (3.7 * 128 * 312e12))
    assert u["hfu"] == pytest.approx(fc.hardware_flops / (3.7 * 128 * 312e12))
    assert u["hfu"] > u["mfu_6nd_with_attn"]
    assert u["tokens_per_s_per_gpu"] == pytest.approx(512 * 2048 / 3.7 / 128)


def test_kernel_flops_close_to_model_flops():
    m = get_model("llama3-8b")
    plan = ParallelPlan(world_size=16, tp=2, pp=2, global_batch_size=16, seq_length=8192)
    kf = walk_kernel_flops(m, plan)
    mf = count_flops(m, plan).model_flops
    assert kf["kernel_flops"] == kf["kernel_flops_with_recompute"]
    # on top: flash-attention backward re-forms P (2.5x forward), elementwise kernels, padded vocabulary
    assert 1.0 <= kf["kernel_flops"] / mf < 1.06


def _hw() -> HardwareSpec:
    return HardwareSpec("H100", 989.4e12, 3.35e12, 80e9, 450e9, 50e9)


def test_step_estimate_invariants():
    m = get_model("llama3-8b")
    hw = _hw()
    base = ParallelPlan(world_size=64, tp=4, pp=2, sequence_parallel=True, global_batch_size=256, seq_length=8192,
                        distributed_optimizer=True)
    e = estimate_step(m, base, hw)
    assert e.iteration_time_s > e.compute_s > 0
    assert set(e.exposed_comm_s) == {"TP", "CP", "EP", "DP", "PP"}
    assert e.bubble_s == pytest.approx((2 - 1) * e.chunk_time_s)
    # recompute costs time, interleaving shrinks the bubble
    full = estimate_step(m, dataclasses.replace(base, recompute="full"), hw)
    assert full.iteration_time_s > e.iteration_time_s and full.recompute_s > 0
    vpp = estimate_step(m, dataclasses.replace(base, vpp=2), hw)
    assert vpp.bubble_s < e.bubble_s
    # compute lower bound: model FLOPs over the whole cluster at peak
    fc = count_flops(m, base)
    assert e.iteration_time_s > fc.model_flops / (64 * hw.peak_flops)


def test_group_ranks_follow_megatron_order():
    p = ParallelPlan(world_size=64, tp=2, cp=2, pp=2)   # dp = 8
    assert group_ranks(p, "tp") == (0, 1)
    assert group_ranks(p, "cp") == (0, 2)
    assert group_ranks(p, "dp") == tuple(range(0, 32, 4))
    assert group_ranks(p, "pp") == (0, 32)


@pytest.mark.parametrize("case", ["gpt7.5b_128xA100", "llama3.1-8b_8xH100"])
def test_screen_estimate_within_15pct_of_calibration_cases(case):
    """reference/calibration.md end-to-end cases (gross-error check, nothing fitted to them)."""
    from sim.analysis.search import _open_db
    from sim.analysis.steptime import hardware_from_gpu
    db = _open_db()
    if case.startswith("gpt"):
        m, hw, measured = get_model("gpt-7.5b"), hardware_from_gpu("A100-80GB", "fp16"), 3.7
        # the 2021 run: no DP overlap, fp16 gradients, unfused attention (docs/fidelity.md); mbs 1 assumed
        plan = ParallelPlan(world_size=128, tp=4, micro_batch_size=1, global_batch_size=512, seq_length=2048,
                            recompute="full", dtype="fp16", flash_attention=False, overlap_grad_reduce=False,
                            overlap_param_gather=False)
    else:
        m, hw, measured = get_model("llama3-8b"), hardware_from_gpu("H100"), 12.91
        plan = ParallelPlan(world_size=8, cp=2, micro_batch_size=1, global_batch_size=128, seq_length=8192)
    t = estimate_step(m, plan, hw, db=db).iteration_time_s
    assert abs(t / measured - 1) < 0.15, (case, t, measured)


def test_layer_matmul_flops_per_rank_match_megatron():
    from sim.analysis.stagefacts import KernelCatalog
    s, b, h, a, t = 2048, 2, 4096, 32, 4
    m = gpt(4, h, a, s=s)
    plan = ParallelPlan(world_size=t, tp=t, micro_batch_size=b, global_batch_size=b, seq_length=s,
                        flash_attention=False)
    lk = KernelCatalog(m, plan).layer(0)
    mm = sum(o.flops for o in lk.fwd if o.kind in ("gemm", "attn_bmm"))
    assert mm == (24 * b * s * h * h + 4 * b * s * s * h) // t     # forward, per rank


def test_pass_costs_consistent_with_iteration_kernel_flops():
    from sim.analysis.cost import pass_costs
    m = get_model("llama3-8b")
    plan = ParallelPlan(world_size=32, tp=2, pp=4, vpp=2, global_batch_size=64, seq_length=4096, recompute="full",
                        recompute_num_layers=2)
    per = pass_costs(m, plan)
    kf = walk_kernel_flops(m, plan)
    ranks = plan.world_size // plan.pp
    total = sum(p["fwd_flops"] + p["bwd_flops"] for p in per) * plan.num_microbatches * ranks
    total_rec = total + sum(p["recompute_flops"] for p in per) * plan.num_microbatches * ranks
    assert total == pytest.approx(kf["kernel_flops"], rel=1e-9)
    assert total_rec == pytest.approx(kf["kernel_flops_with_recompute"], rel=1e-9)
    assert all(p["recompute_flops"] > 0 and p["comm_bytes"] > 0 for p in per)


def test_screen_follows_the_dp_overlap_and_gradient_dtype_fields():
    """Without DP overlap the whole reduction is exposed; fp16 gradients halve its bytes."""
    from sim.analysis.steptime import hardware_from_gpu
    m, hw = get_model("llama3-8b"), hardware_from_gpu("H100")
    base = dict(world_size=64, tp=1, micro_batch_size=1, global_batch_size=64, seq_length=2048)
    on = estimate_step(m, ParallelPlan(**base), hw).exposed_comm_s["DP"]
    off = estimate_step(m, ParallelPlan(**base, overlap_grad_reduce=False), hw).exposed_comm_s["DP"]
    half = estimate_step(m, ParallelPlan(**base, overlap_grad_reduce=False, dtype="fp16"), hw).exposed_comm_s["DP"]
    assert off > on and half < off
    assert half == pytest.approx(off / 2, rel=0.25)      # bytes halve; latency terms do not
