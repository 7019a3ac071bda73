"""Metric definitions on a hand-computed two-request run, weighted percentiles, summary contents.

The run (vllm, stage time 0.01 s per token, 1e9 FLOPs and 1e6 HBM bytes per token, 20 blocks of 16):
A arrives 0 with 100+3 tokens, B arrives 0.5 with 50+2.
  [A prefill 100] 0 - 1.00   [B prefill 50] 1.00 - 1.50   [A, B decode] 1.50 - 1.52   [A decode] 1.52 - 1.53
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from helpers_serve import LinearTimer, run

from sim.serve.metrics import (
    FORMULAS,
    SLO,
    VIDUR_COLUMNS,
    batch_frame,
    format_summary,
    replica_frame,
    request_frame,
    summarize,
    weighted_percentiles,
)

approx = pytest.approx


@pytest.fixture(scope="module")
def two():
    t = LinearTimer(b=0.01, flops_per_token=1e9, bytes_per_token=1e6)
    return run([(0.0, 100, 3), (0.5, 50, 2)], t, num_blocks=20, scheduler="vllm")


def test_vidur_columns_hand_computed(two):
    df = request_frame(two)
    assert list(df.columns[:21]) == ["Request Id", *VIDUR_COLUMNS]
    a, b = df.iloc[0], df.iloc[1]
    expect_a = {
        "request_e2e_time": 1.53, "request_e2e_time_normalized": 1.53 / 3,
        "request_execution_time": 1.03, "request_execution_time_normalized": 1.03 / 3,
        "request_model_execution_time": 1.03, "request_model_execution_time_normalized": 1.03 / 3,
        "request_preemption_time": 0.5, "request_scheduling_delay": 0.0,
        "request_execution_plus_preemption_time": 1.53, "request_execution_plus_preemption_time_normalized": 0.51,
        "prefill_e2e_time": 1.0, "prefill_time_execution_plus_preemption": 1.0,
        "prefill_time_execution_plus_preemption_normalized": 0.01,
        "decode_time_execution_plus_preemption_normalized": 0.53 / 3,
        "request_num_tokens": 103, "request_num_prefill_tokens": 100, "request_num_decode_tokens": 3,
        "request_pd_ratio": 100 / 3, "request_num_restarts": 0, "request_inter_arrival_delay": 0.0,
        "ttft": 1.0, "tpot": 0.265, "max_tbt": 0.52, "replica": 0,
    }
    expect_b = {
        "request_e2e_time": 1.02, "request_e2e_time_normalized": 0.51,
        "request_execution_time": 0.52, "request_execution_time_normalized": 0.26,
        "request_model_execution_time": 0.52, "request_preemption_time": 0.0, "request_scheduling_delay": 0.5,
        "request_execution_plus_preemption_time": 0.52, "prefill_e2e_time": 1.0,
        "prefill_time_execution_plus_preemption": 0.5, "prefill_time_execution_plus_preemption_normalized": 0.01,
        "decode_time_execution_plus_preemption_normalized": 0.01, "request_num_tokens": 52,
        "request_pd_ratio": 25.0, "request_inter_arrival_delay": 0.5, "tpot": 0.02, "max_tbt": 0.02,
        "arrived_at": 0.5, "first_scheduled_at": 1.0, "first_token_at": 1.5, "completed_at": 1.52,
    }
    for row, exp in ((a, expect_a), (b, expect_b)):
        for k, v in exp.items():
            assert row[k] == approx(v, abs=1e-12), k


def test_tpot_nan_for_single_token_requests():
    res = run([(0.0, 10, 1), (0.0, 10, 3)], LinearTimer(b=0.01), scheduler="vllm")
    df = request_frame(res)
    assert math.isnan(df["tpot"][0]) and df["max_tbt"][0] == 0.0 and df["tpot"][1] > 0


def test_summary_hand_computed(two):
    s = summarize(two, peak_flops_per_s=1e12, hbm_Bps=1e9, slo=SLO(ttft_s=1.0001, tbt_s=0.1))
    m = s["metrics"]
    assert m["ttft_s"]["p50"] == approx(1.0) and m["ttft_s"]["count"] == 2
    # all gaps: A 0.52, 0.01; B 0.02 -> P50 0.02, P90 at position 1.8: 0.02 + 0.8 x 0.50
    assert m["tbt_s"]["count"] == 3 and m["tbt_s"]["p50"] == approx(0.02) and m["tbt_s"]["p90"] == approx(0.42)
    assert m["tbt_s"]["mean"] == approx(0.55 / 3)
    assert m["e2e_s"]["mean"] == approx((1.53 + 1.02) / 2)
    assert m["scheduling_delay_s"]["max"] == approx(0.5)
    T = 1.53
    assert s["duration_s"] == approx(T)
    assert s["throughput"]["requests_per_s"]["value"] == approx(2 / T)
    assert s["throughput"]["output_tokens_per_s"]["value"] == approx(5 / T)
    assert s["throughput"]["prefill_tokens_per_s"]["value"] == approx(150 / T)
    assert s["throughput"]["mean_requests_in_system"]["value"] == approx((1.53 + 1.02) / T)
    # goodput: A fails TBT (0.52 > 0.1), B meets both
    g = s["goodput"]
    assert g["requests_meeting_slo"] == 1 and g["fraction"] == 0.5 and g["requests_per_s"] == approx(1 / T)
    r = s["replicas"][0]
    # 153 tokens processed: 1.53e11 FLOPs / (1.53 s x 1e12) = 10 %; bytes likewise
    assert r["mfu_pct"] == approx(10.0) and r["mbu_pct"] == approx(10.0)
    assert r["busy_pct"] == approx(100.0)
    # KV: A holds 7 blocks (100 tokens) all along, B 4 blocks from 1.0 to 1.52
    assert r["kv_use_mean_pct"] == approx(100 * (7 * 1.0 + 11 * 0.52 + 7 * 0.01) / 1.53 / 20)
    assert r["kv_use_peak_pct"] == approx(55.0)
    assert r["mean_batch_size"] == approx(5 / 4) and r["mean_tokens_per_batch"] == approx(153 / 4)
    json.dumps(s, allow_nan=False)            # JSON-able, no NaN


def test_every_metric_says_how_it_was_obtained(two):
    s = summarize(two)
    for k, v in s["metrics"].items():
        assert v["formula"] == FORMULAS[k]
    for v in s["throughput"].values():
        assert v["formula"]
    assert set(s["cluster"]["formulas"]) >= {"mfu_pct", "kv_use_mean_pct", "busy_pct"}
    assert s["replicas"][0]["mfu_pct"] is None            # no peak given: not made up
    text = format_summary(s)
    assert "TTFT (ms)" in text and "n/a" in text


def test_batch_and_replica_frames(two):
    bf = batch_frame(two)
    assert bf["num_requests"].tolist() == [1, 1, 2, 1]
    assert bf["num_tokens"].tolist() == [100, 50, 2, 1]
    assert bf["end_at"].tolist() == [approx(1.0), approx(1.5), approx(1.52), approx(1.53)]
    rf = replica_frame(two)
    assert rf["batches"].tolist() == [4] and rf["requests"].tolist() == [2]


def test_weighted_percentiles_equal_expanded_numpy():
    rng = np.random.default_rng(0)
    v = rng.random(50)
    c = rng.integers(1, 20, 50)
    expanded = np.repeat(v, c)
    qs = (0, 1, 37.5, 50, 90, 99, 100)
    assert weighted_percentiles(v, c, qs) == approx(np.percentile(expanded, qs).tolist(), rel=1e-12)
    assert all(math.isnan(x) for x in weighted_percentiles([], [], (50,)))


def test_tbt_log_matches_per_request_token_times():
    """The run-length TBT log holds exactly the multiset of gaps of every request's token times."""
    from sim.serve.engine import simulate
    from sim.serve.plan import ServingPlan
    from workload_gen.requests import RequestConfig, make_requests
    reqs = make_requests(RequestConfig(num_requests=150, qps=20, lengths="chat", max_model_len=2048, seed=4))
    res = simulate(reqs, ServingPlan(scheduler="sarathi", chunk_size=256), LinearTimer(a=0.003, b=2e-5), 400, 2048,
                   keep_token_times=True, check_invariants=True)
    direct = np.sort(np.concatenate([np.diff(r.token_times) for r in res.requests]))
    logged = np.sort(np.repeat(np.asarray(res.gaps.values), np.asarray(res.gaps.counts)))
    assert np.array_equal(direct, logged)
    assert len(res.gaps.values) < len(direct) / 5        # compact: runs, not one float per token
