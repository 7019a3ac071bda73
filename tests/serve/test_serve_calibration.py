"""Serving calibration cases (reference/calibration.md) against the real compute_db and netsim.

Case 2: Yi-34B, TP 2 on 2 x A100-80GB-PCIe with an NVLink bridge, fp16, decode-only iterations of B
requests at ~1,020 tokens of context, measured with the Sarathi-Serve research engine (a vLLM fork, no
CUDA graphs; microsoft/sarathi-serve, osdi-experiments/figure-2/decode.csv).
Case 1 (Llama-2-7B on one A100 80GB, LMDeploy closed loop) needs the engine; here only its timer.
"""

from __future__ import annotations

import pytest

from compute_db.gpus import get_gpu
from sim.serve.calibration_cases import calibration_setup
from sim.serve.costs import BatchShape
from sim.serve.memory import weight_bytes

CASE2_MEASURED_MS = {1: 46.8, 2: 47.5, 4: 48.9, 8: 69.7, 16: 77.3, 32: 87.9, 64: 127.8, 128: 189.3}
CASE2_CONTEXT = 1020


@pytest.fixture(scope="module")
def case2():
    return calibration_setup(2)


def _predicted_ms(setup) -> dict[int, float]:
    return {b: 1e3 * setup.timer.stage_cost(0, 0, BatchShape(decode=(CASE2_CONTEXT,) * b), 0.0).time_s
            for b in CASE2_MEASURED_MS}


def test_case2_setup(case2):
    assert case2.model.name == "yi-34b" and case2.plan.tp == 2 and case2.topology.num_gpus == 2
    assert case2.plan.weight_dtype == "fp16" and case2.gpu == "A100-80GB-PCIe"


def test_case2_predictions_are_physically_bounded(case2):
    pred = _predicted_ms(case2)
    spec = get_gpu(case2.gpu)
    floor_ms = 1e3 * weight_bytes(case2.model, case2.plan, 0) / spec.hbm_Bps   # read every weight once
    prev = 0.0
    for b, measured in CASE2_MEASURED_MS.items():
        # GPU kernels + collectives only: never slower than the real engine (which also spends CPU
        # time per iteration), never faster than streaming the weights at the datasheet bandwidth
        assert floor_ms < pred[b] < measured, (b, pred[b], measured)
        assert pred[b] >= prev
        prev = pred[b]


@pytest.mark.xfail(strict=True, reason="the measured iteration grows far faster with B (from B = 8 on) than "
                   "GPU kernels + collectives: the engine's decode-attention kernel and per-iteration CPU time "
                   "are not in the public kernel data (per-point errors in the serving cost-model report)")
def test_case2_within_15_percent(case2):
    pred = _predicted_ms(case2)
    errors = {b: pred[b] / m - 1 for b, m in CASE2_MEASURED_MS.items()}
    assert all(abs(e) <= 0.15 for e in errors.values()), errors


def test_case1_timer_decode_step():
    setup = calibration_setup(1)
    assert setup.model.name == "llama2-7b" and setup.topology.num_gpus == 1 and setup.plan.tp == 1
    # 64 requests half-way through 128 prompt + 128 generated tokens
    step = setup.timer.stage_cost(0, 0, BatchShape(decode=(192,) * 64), 0.0)
    floor = weight_bytes(setup.model, setup.plan, 0) / get_gpu(setup.gpu).hbm_Bps
    assert step.comm_s == 0.0 and step.send_s == 0.0
    # LMDeploy's measured TPOT P50 is 14 ms (prefills of other requests included)
    assert floor < step.time_s < 0.014 * 1.15


# ---------------------------------------------------------------------------------------------------
# Case 1 end to end: Llama-2-7B on one A100 80GB (LMDeploy TurboMind, fp16), closed loop of 64 clients,
# every request 128 prompt + 128 output tokens. Measured: 3,024 output tokens/s, mean TTFT 0.44 s, TPOT
# P50 14 ms (P99 158 ms: a tail our lock-step closed loop does not produce, see docs/serve.md).
CASE1_MEASURED = {"output_tokens_per_s": 3024.0, "ttft_mean_s": 0.44, "tpot_p50_s": 0.014}


@pytest.fixture(scope="module")
def case1_run():
    from sim.serve.engine import simulate
    from sim.serve.memory import plan_kv_cache_for_gpu
    from sim.serve.metrics import summarize
    from workload_gen.requests import RequestConfig, make_requests
    setup = calibration_setup(1)
    kv = plan_kv_cache_for_gpu(setup.model, setup.plan, setup.gpu)
    reqs = make_requests(RequestConfig(num_requests=1280, arrival="closed", concurrency=64, lengths="fixed",
                                       prefill_tokens=128, decode_tokens=128, seed=0))
    res = simulate(reqs, setup.plan, setup.timer, kv.num_blocks, setup.model.seq_length)
    s = summarize(res)
    return {"output_tokens_per_s": s["throughput"]["output_tokens_per_s"]["value"],
            "ttft_mean_s": s["metrics"]["ttft_s"]["mean"], "tpot_p50_s": s["metrics"]["tpot_s"]["p50"]}


@pytest.mark.parametrize("metric", ["ttft_mean_s", "tpot_p50_s"])
def test_case1_latencies_within_15_percent(case1_run, metric):
    assert case1_run[metric] == pytest.approx(CASE1_MEASURED[metric], rel=0.15), case1_run


@pytest.mark.xfail(strict=True, reason="simulated throughput is about 15.5% above the measured 3,024 tokens/s: the "
                   "decode step matches (TPOT P50) but LMDeploy's per-iteration host work and its desynchronised "
                   "clients are not modelled (no public figure); see docs/serve.md")
def test_case1_throughput_within_15_percent(case1_run):
    assert case1_run["output_tokens_per_s"] == pytest.approx(CASE1_MEASURED["output_tokens_per_s"], rel=0.15)


def test_case1_throughput_is_physically_bounded(case1_run):
    # faster than the measurement (no host time modelled) but not by more than a quarter
    assert 1.0 < case1_run["output_tokens_per_s"] / CASE1_MEASURED["output_tokens_per_s"] < 1.25
