"""Whole-simulator queueing sanity with the real cost model (compute_db kernels, netsim collectives):
at low load TTFT is one prefill; as the arrival rate approaches capacity the scheduling delay grows
without bound."""

from __future__ import annotations

import numpy as np
import pytest

from sim.serve.api import simulate_serving
from sim.serve.costs import BatchShape
from sim.serve.plan import ServingPlan
from workload_gen.requests import RequestConfig


def test_low_load_ttft_is_one_prefill():
    # 0.05 req/s: every request finds the replica idle (decodes of 64 tokens end long before the next arrival)
    run = simulate_serving("llama3-8b", ServingPlan(scheduler="vllm"),
                           RequestConfig(num_requests=20, qps=0.05, lengths="uniform", min_tokens=200,
                                         max_tokens=3000, pd_ratio=20.0, seed=3), gpu="H100")
    df = run.requests
    assert (df["request_scheduling_delay"] == 0).all()
    for _, r in df.iterrows():
        p = int(r["request_num_prefill_tokens"])
        alone = run.timer.stage_cost(0, 0, BatchShape(prefill=((p, 0),)), 0.0).time_s
        assert r["ttft"] == pytest.approx(alone, rel=1e-9)
    # and the prefill time is physical: longer prompts take longer
    order = np.argsort(df["request_num_prefill_tokens"].to_numpy())
    assert np.all(np.diff(df["ttft"].to_numpy()[order]) >= 0)


@pytest.mark.slow
def test_scheduling_delay_grows_without_bound_near_capacity():
    # Llama-3-8B on one H100, Sarathi, chat-like lengths: throughput saturates near 26 req/s (batch cap 128)
    delays, served = [], []
    for qps in (8.0, 20.0, 40.0):
        run = simulate_serving("llama3-8b", ServingPlan(scheduler="sarathi"),
                               RequestConfig(num_requests=1500, qps=qps, lengths="chat", seed=5), gpu="H100")
        delays.append(run.summary["metrics"]["scheduling_delay_s"]["p90"])
        served.append(run.summary["throughput"]["requests_per_s"]["value"])
    assert delays[0] < delays[1] < delays[2]
    assert delays[2] > 100 * delays[0] and delays[2] > 5.0          # overload: the queue keeps growing
    assert served[2] < 0.8 * 40.0                                     # the replica cannot keep up
    # overload: twice the requests, twice the delay (a queue growing linearly in time)
    longer = simulate_serving("llama3-8b", ServingPlan(scheduler="sarathi"),
                              RequestConfig(num_requests=3000, qps=40.0, lengths="chat", seed=5), gpu="H100")
    assert longer.summary["metrics"]["scheduling_delay_s"]["p90"] > 1.6 * delays[2]
