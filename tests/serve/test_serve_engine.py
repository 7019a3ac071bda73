"""Event engine: invariants on every policy, determinism, Little's law, queueing behaviour, closed loop,
one-line errors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_serve import LinearTimer, check_invariants, fingerprint, run

from sim.errors import SimError
from sim.serve.engine import simulate
from sim.serve.plan import SCHEDULERS, ServingPlan
from sim.serve.schedulers import SCHEDULER_CLASSES
from workload_gen.requests import RequestConfig, make_requests


def chat(n=400, qps=4.0, seed=1, **kw):
    return make_requests(RequestConfig(num_requests=n, qps=qps, lengths="chat", max_model_len=2048, seed=seed, **kw))


def test_registry_matches_plan_names():
    assert set(SCHEDULER_CLASSES) == set(SCHEDULERS)


@pytest.mark.parametrize("scheduler", SCHEDULERS)
@pytest.mark.parametrize("blocks", [140, 4000])
def test_every_policy_completes_all_tokens_and_returns_blocks(scheduler, blocks):
    """Tight memory (preemption for paged policies) and ample memory; invariants checked by run()."""
    reqs = chat(200, qps=8.0)
    res = run(reqs, LinearTimer(a=0.005, b=2e-5, c=1e-7), num_blocks=blocks, max_model_len=2048,
              scheduler=scheduler, replicas=2, max_batch_size=32)
    assert len(res.requests) == len(reqs)
    assert [r.num_prefill for r in res.requests] == reqs.num_prefill_tokens.tolist()
    if blocks == 140 and scheduler in ("vllm", "sarathi"):
        assert sum(st.preemptions for st in res.replicas) > 0
    for st in res.replicas:
        assert st.peak_used_blocks <= blocks


@pytest.mark.parametrize("scheduler", ["vllm", "sarathi", "orca", "faster_transformer"])
def test_pipeline_parallel_invariants(scheduler):
    reqs = chat(120)
    t = LinearTimer(a=0.002, b=1e-5, num_stages=4, send_s=1e-4)
    res = run(reqs, t, num_blocks=600, max_model_len=2048, scheduler=scheduler, pp=4, max_batch_size=16)
    # a request is never in two in-flight batches: its batches' [start, end] intervals are disjoint
    spans: dict[int, list] = {}
    for _rep, s, _start, _dur, bid, pids, _chunks, dids in res.trace:
        if s == 0:
            for rid in pids + dids:
                spans.setdefault(rid, []).append(bid)
    ends = {bid: e for bid, e in zip(res.batches.id, res.batches.end_s)}
    forms = {bid: f for bid, f in zip(res.batches.id, res.batches.formed_s)}
    for bids in spans.values():
        iv = sorted((forms[b], ends[b]) for b in bids)
        assert all(b0[1] <= b1[0] for b0, b1 in zip(iv, iv[1:]))
    # stage calls are made in non-decreasing time across the cluster
    times = [c[3] for c in t.calls]
    assert times == sorted(times)


def test_run_is_bit_identical_for_a_seed():
    reqs = chat(300)
    kw = dict(num_blocks=300, max_model_len=2048, scheduler="sarathi", replicas=3, router="random")
    a = run(reqs, LinearTimer(a=0.005, b=2e-5), seed=7, **kw)
    b = run(reqs, LinearTimer(a=0.005, b=2e-5), seed=7, **kw)
    c = run(reqs, LinearTimer(a=0.005, b=2e-5), seed=8, **kw)
    assert fingerprint(a) == fingerprint(b)
    assert fingerprint(a) != fingerprint(c)


def test_littles_law_steady_state():
    """L = lambda W over a window excluding warm-up and drain: L from the step function of arrivals and
    completions (time average of requests in the system), lambda = arrivals in the window / its length,
    W = mean E2E of those arrivals. Short requests (W << window) make the edge error small."""
    reqs = make_requests(RequestConfig(num_requests=3000, qps=10.0, prefill_tokens=100, decode_tokens=20, seed=3))
    res = run(reqs, LinearTimer(a=0.004, b=1e-5), num_blocks=2000, scheduler="sarathi")
    arr = np.array([r.arrived_at_s for r in res.requests])
    comp = np.array([r.completed_s for r in res.requests])
    t0, t1 = arr[300], arr[2700]
    grid = np.linspace(t0, t1, 200_001)
    n_t = np.searchsorted(np.sort(arr), grid, side="right") - np.searchsorted(np.sort(comp), grid, side="right")
    L = float(n_t.mean())
    inside = (arr >= t0) & (arr < t1)
    lam = inside.sum() / (t1 - t0)
    W = float((comp - arr)[inside].mean())
    assert L > 0.5                                       # a loaded system, not an empty one
    assert L == pytest.approx(lam * W, rel=0.02)
    # the engine's own integral of requests in the system equals sum of E2E (exact identity over the run)
    assert res.in_system_s == pytest.approx(float((comp - arr).sum()), rel=1e-9)


def _md1_run(qps: float, n: int = 3000):
    """FasterTransformer with batch 1 and a constant 0.01 s iteration: a request of 10 + 10 tokens takes
    10 iterations = 0.1 s, an M/D/1 queue with capacity 10 req/s."""
    reqs = make_requests(RequestConfig(num_requests=n, qps=qps, prefill_tokens=10, decode_tokens=10, seed=5))
    res = run(reqs, LinearTimer(a=0.01), num_blocks=1000, scheduler="faster_transformer", max_batch_size=1)
    delay = np.array([r.first_scheduled_s - r.arrived_at_s for r in res.requests])
    ttft = np.array([r.first_token_s - r.arrived_at_s for r in res.requests])
    return delay, ttft


def test_queueing_low_load_ttft_is_one_prefill_and_delay_grows_toward_capacity():
    delay_lo, ttft_lo = _md1_run(1.0)
    assert np.median(ttft_lo) == pytest.approx(0.01)     # most requests find the replica idle
    means = []
    for rho in (0.5, 0.8, 0.95):
        d, _ = _md1_run(10.0 * rho)
        means.append(d.mean())
        if rho <= 0.8:                                   # Pollaczek-Khinchine: Wq = rho S / (2 (1 - rho))
            assert d.mean() == pytest.approx(rho * 0.1 / (2 * (1 - rho)), rel=0.2)
    assert means[0] < means[1] < means[2] and means[2] > 2.5 * means[1]   # PK ratio 4.75 in steady state


def test_queueing_overload_delay_grows_without_bound():
    """Above capacity (12 req/s > 10) the backlog grows linearly: the last request's delay doubles when
    the run is twice as long."""
    d1, _ = _md1_run(12.0, 1500)
    d2, _ = _md1_run(12.0, 3000)
    assert d2[-1] == pytest.approx(2 * d1[-1], rel=0.15)
    assert d2[-1] > 100 * 0.1


def test_vllm_scheduling_delay_increases_with_load():
    p99 = []
    for qps in (2.0, 6.0, 12.0):
        res = run(chat(600, qps=qps, seed=2), LinearTimer(a=0.01, b=5e-5), num_blocks=1500, max_model_len=2048,
                  scheduler="vllm")
        d = np.array([r.first_scheduled_s - r.arrived_at_s for r in res.requests])
        p99.append(np.percentile(d, 99))
    assert p99[0] < p99[1] < p99[2]


def test_closed_loop_keeps_concurrency():
    reqs = make_requests(RequestConfig(num_requests=200, arrival="closed", concurrency=8, lengths="chat",
                                       max_model_len=2048, seed=1))
    res = run(reqs, LinearTimer(a=0.005, b=2e-5), num_blocks=2000, max_model_len=2048, scheduler="sarathi")
    arr = np.array([r.arrived_at_s for r in res.requests])
    comp = np.array([r.completed_s for r in res.requests])
    assert (arr[:8] == 0).all() and (arr[8:] > 0).all()
    assert set(arr[8:].tolist()) <= set(comp.tolist())   # every later request arrives at a completion
    events = sorted([(a, 1) for a in arr] + [(c, -1) for c in comp], key=lambda e: (e[0], e[1]))
    level, levels = 0, []
    for _, d in events:
        level += d
        levels.append(level)
    assert max(levels) == 8


def test_static_arrivals_and_keep_token_times():
    reqs = make_requests(RequestConfig(num_requests=20, arrival="static", lengths="chat", max_model_len=2048, seed=2))
    plan = ServingPlan(scheduler="vllm")
    res = simulate(reqs, plan, LinearTimer(a=0.005, b=2e-5), 2000, 2048, keep_token_times=True,
                   check_invariants=True)
    check_invariants(res, 20)
    for r in res.requests:
        assert len(r.token_times) == r.num_decode and r.token_times[0] == r.first_token_s
        assert r.token_times[-1] == r.completed_s
        assert max(np.diff(r.token_times), default=0.0) == r.max_gap_s


# ------------------------------------------------------------------------------------------- bad input

def _err(reqs, plan=None, timer=None, blocks=1000, max_len=4096) -> str:
    with pytest.raises(SimError) as e:
        simulate(reqs, plan or ServingPlan(), timer or LinearTimer(a=0.01), blocks, max_len)
    msg = str(e.value)
    assert "\n" not in msg
    return msg


def test_unknown_scheduler_and_router_are_one_line_errors():
    assert "unknown scheduler 'foo'" in _err([(0.0, 10, 2)], ServingPlan(scheduler="foo"))
    assert "unknown router 'bar'" in _err([(0.0, 10, 2)], ServingPlan(router="bar"))


def test_engine_input_errors():
    assert "exceed max_model_len 4096" in _err([(0.0, 4000, 200)])
    assert "request 1" in _err([(0.0, 10, 2), (0.0, 0, 2)])
    assert "arrives before" in _err([(1.0, 10, 2), (0.5, 10, 2)])
    assert "cannot hold" in _err([(0.0, 1000, 10)], blocks=50)
    assert "2 pipeline stages" in _err([(0.0, 10, 2)], ServingPlan(pp=1), LinearTimer(num_stages=2))
    assert "does not support pipeline" in _err([(0.0, 10, 2)], ServingPlan(scheduler="lightllm", pp=2),
                                                LinearTimer(num_stages=2))
    assert "max_tokens_per_iteration" in _err([(0.0, 10, 2)], ServingPlan(scheduler="vllm"), max_len=8192)
    assert "no requests" in _err([])
    assert "stage time" in _err([(0.0, 10, 2)], timer=LinearTimer(a=float("nan")))
    with pytest.raises(SimError, match="num_blocks and max_model_len are needed"):
        simulate([(0.0, 10, 2)], ServingPlan(), LinearTimer())


def test_blocks_and_max_len_from_the_plan():
    plan = ServingPlan(scheduler="vllm", num_blocks=8, block_size=4, max_model_len=32, watermark_fraction=0.0)
    res = simulate([(0.0, 12, 9), (0.0, 12, 9)], plan, LinearTimer(a=0.01), check_invariants=True)
    check_invariants(res, 2)
    assert res.replicas[0].num_blocks == 8 and res.max_model_len == 32
    # 3 blocks each after the prefill, 4 at kv 12, both need a 5th at kv 16: the second is preempted
    assert res.replicas[0].peak_used_blocks == 8
    assert sum(r.restarts for r in res.requests) == 1
