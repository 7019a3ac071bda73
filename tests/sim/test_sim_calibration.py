"""End-to-end calibration cases (reference/calibration.md) and the fabric comparison ordering.

Physical parameters only: compute from the shipped compute DB, network from the topology templates;
the measured values below are the published ones, not outputs of this code.
"""

from __future__ import annotations

import pytest

from sim.commands import run_job

CASE1 = {"model": "gpt-7.5b",
         "plan": {"tp": 4, "dp": 32, "global_batch_size": 512, "micro_batch_size": 1, "seq_length": 2048,
                  "recompute": "full", "dtype": "fp16",
                  # what the 2021 run did: Megatron-LM of SC21 had no DP overlap (gradients all-reduced
                  # after the backward pass, fp16 gradients: Megatron-LM's default for fp16) and no fused
                  # (flash) attention, which appeared in 2022
                  "overlap_grad_reduce": False, "overlap_param_gather": False, "flash_attention": False},
         # DGX A100 nodes, 8 x HDR 200 Gb/s per node, rail-connected (Selene's rail-optimized fat tree)
         "fabric": "rail-optimized:gpu_type=A100,nic_bandwidth_Bps=200Gbps", "gpu": "A100-80GB"}
CASE2 = {"model": "llama3-8b", "plan": {"tp": 1, "cp": 2, "dp": 4, "global_batch_size": 128, "micro_batch_size": 1,
                                        "seq_length": 8192, "distributed_optimizer": True},
         "fabric": "spectrum-x", "gpu": "H100"}


@pytest.mark.slow
def test_case1_gpt75b_128_a100():
    # Megatron-LM SC21: 36 layers, h 4096, 32 heads, V 51,200, seq 2048, fp16, TP4 PP1 DP32, GBS 512,
    # full recompute, micro-batch 1 (assumed).
    rep = run_job(CASE1)
    B, s, L, h, V = 512, 2048, 36, 4096, 51200
    flops = 96 * B * s * L * h * h * (1 + s / (6 * h) + V / (16 * L * h))     # 4-pass formula
    tflops = flops / (128 * rep.iteration_time_s) / 1e12
    assert tflops == pytest.approx(142, rel=0.10)
    assert rep.iteration_time_s == pytest.approx(3.7, rel=0.10)


def test_case2_llama31_8b_8_h100():
    # NeMo DGX Cloud recipe: seq 8192, TP1 PP1 CP2 DP4, MBS 1, GA 32 (GBS 128), BF16, one DGX H100
    # (NeMo defaults: distributed optimizer, overlapped fp32 gradient reduction, flash attention).
    rep = run_job(CASE2)
    assert rep.iteration_time_s == pytest.approx(12.91, rel=0.10)


@pytest.mark.slow
def test_compare_fabrics_dp_heavy(tmp_path, capsys):
    """Spectrum-X (rail-optimized 1:1) <= DCN+ 1:1 (16-GPU ToRs) < DCN+ 4:1: the gap is exposed DP time
    (a ring all-reduce sends one flow per ring out of each ToR, so only a tight uplink count slows it)."""
    from sim.cli import main
    fabrics = ["spectrum-x", "dcn+:nics_per_asw=16,psw_count=16", "dcn+:nics_per_asw=16,psw_count=4"]
    args = ["compare", "-m", "llama2-13b", "--tp", "1", "--dp", "128", "--global-batch", "128", "--micro-batch", "1",
            "--seq-length", "1024", "-q", "-o", str(tmp_path / "cmp")]
    for f in fabrics:
        args += ["--fabric", f]
    assert main(args) == 0
    import json
    runs = json.loads((tmp_path / "cmp" / "compare.json").read_text())
    times = [r["iteration_time_s"] for r in runs]
    dp = [r["exposed_comm_s"]["DP"] for r in runs]
    comp = [r["compute_s"] for r in runs]
    ovh = [r["overhead_s"] for r in runs]
    assert times[0] <= times[1] * (1 + 1e-9) and times[1] < times[2]
    assert dp[0] <= dp[1] * (1 + 1e-9) and dp[1] < dp[2]
    assert ovh[0] == pytest.approx(ovh[1]) == pytest.approx(ovh[2])
    for t, d, c, o in zip(times, dp, comp, ovh):
        assert t == pytest.approx(c + d + o, rel=1e-6)   # no bubble, no other communication
    assert (tmp_path / "cmp" / "compare.png").exists()
    out = capsys.readouterr().out
    assert "dcn+:nics_per_asw=16,psw_count=4" in out and "DP" in out
