"""Capacity search (sim.serve.capacity): SLO syntax, bracketing and bisection on stub probes with a known
capacity, and on the real engine (capacity ~linear in replicas, lower under tighter SLOs)."""

from __future__ import annotations

import math

import pytest

from sim.errors import SimError
from sim.serve.capacity import (
    CEILING_DOUBLINGS,
    DEFAULT_SLOS,
    SLOLimit,
    find_capacity,
    flat_metrics,
    parse_slo,
    parse_slos,
    violations,
)


# ------------------------------------------------------------------------------------------------ syntax
def test_parse_slo_forms():
    assert parse_slo("p99:scheduling_delay<=5") == SLOLimit("p99", "scheduling_delay", 5.0)
    assert parse_slo("P90:TTFT <= 2") == SLOLimit("p90", "ttft", 2.0)
    s = parse_slo("p99:tbt<=200ms")
    assert s.limit_s == pytest.approx(0.2) and s.text == "p99:tbt<=0.2"
    assert parse_slo("mean:e2e<=1.5s").limit_s == 1.5
    assert parse_slo("p50:tpot<=5e-2").limit_s == pytest.approx(0.05)
    assert DEFAULT_SLOS == (SLOLimit("p99", "scheduling_delay", 5.0),)     # Vidur-Search's criterion
    assert parse_slos(None) == DEFAULT_SLOS


@pytest.mark.parametrize("text, words", [
    ("p99:ttft", "expected STAT:METRIC<=LIMIT"),
    ("p99:ttft>=2", "expected STAT:METRIC<=LIMIT"),
    ("p95:ttft<=2", "statistic 'p95' unknown"),
    ("p99:latency<=2", "metric 'latency' unknown"),
    ("p99:ttft<=0", "must be a finite number > 0"),
    ("p99:ttft<=1e999", "must be a finite number > 0"),
    ("p99:ttft<=1.2.3", "is not a number"),
])
def test_parse_slo_errors_are_one_line(text, words):
    with pytest.raises(SimError) as e:
        parse_slo(text)
    assert words in str(e.value) and text in str(e.value) and "\n" not in str(e.value)


def test_duplicate_slo_rejected():
    with pytest.raises(SimError, match="p90:ttft given twice"):
        parse_slos(["p90:ttft<=2", "p90:ttft<=1"])


def test_violations_most_violated_first_and_missing_data_met():
    slos = parse_slos(["p90:ttft<=2", "p99:tbt<=0.1", "p99:tpot<=0.05"])
    m = {"p90:ttft": 3.0, "p99:tbt": 0.5, "p99:tpot": None}     # ratios 1.5 and 5; TPOT has no data
    assert [(s.key, v) for s, v in violations(slos, m)] == [("p99:tbt", 0.5), ("p90:ttft", 3.0)]
    assert violations(slos, {"p90:ttft": 2.0, "p99:tbt": 0.1}) == []      # at the limit: met


# ------------------------------------------------------------------------------------------------ stub probes
def stub(capacity: float, metric: str = "p99:scheduling_delay", limit: float = 5.0, calls=None):
    """A probe whose metric crosses `limit` exactly at `capacity` (linear in the rate)."""
    def probe(rate: float) -> dict:
        if calls is not None:
            calls.append(rate)
        return {metric: limit * rate / capacity}
    return probe


def test_bisection_hand_sequence():
    # capacity 10, first guess 4: 4 ok, 8 ok, 16 fails -> [8, 16]; ratio 2 -> arithmetic bisection
    # 12 fails, 10 ok (10 <= 10), 11 fails, 10.5 fails, 10.25 fails -> 0.25 <= 2.5% x 10: stop
    calls = []
    r = find_capacity(stub(10.0, calls=calls), DEFAULT_SLOS, 4.0, rel_tol=0.025)
    assert calls == [4.0, 8.0, 16.0, 12.0, 10.0, 11.0, 10.5, 10.25]
    assert r.capacity_qps == 10.0 and r.upper_qps == 10.25 and r.bounded
    assert r.binding_slo == "p99:scheduling_delay<=5" and r.binding_value == pytest.approx(5.125)
    assert r.metrics == {"p99:scheduling_delay": 5.0}
    assert [p.qps for p in r.probes] == calls
    assert [p.ok for p in r.probes] == [True, True, False, False, True, False, False, False]


@pytest.mark.parametrize("capacity", [0.37, 3.0, 9.99, 55.5, 250.0])   # within 2^-10 .. 2^8 x guess
@pytest.mark.parametrize("guess", [1.0, 40.0])
@pytest.mark.parametrize("tol", [0.025, 0.1])
def test_bracket_contains_capacity_within_tolerance(capacity, guess, tol):
    calls = []
    r = find_capacity(stub(capacity, calls=calls), DEFAULT_SLOS, guess, rel_tol=tol)
    assert r.bounded
    assert r.capacity_qps <= capacity < r.upper_qps
    assert (r.upper_qps - r.capacity_qps) <= tol * r.capacity_qps * (1 + 1e-9)
    # every probe is classified as the known capacity says (monotone stub)
    for p in r.probes:
        assert p.ok == (p.qps <= capacity)
    # probe count: bracketing log2(ratio) steps (+ floor), geometric + arithmetic bisection
    ratio = max(capacity / guess, guess / capacity)
    bound = 2 + math.ceil(math.log2(ratio)) + 1 + math.ceil(math.log2(max(math.log2(ratio), 1))) + 1 \
        + math.ceil(math.log2(1 / tol)) + 1
    assert len(r.probes) <= bound
    assert len(set(calls)) == len(calls)                 # no rate probed twice


def test_binding_slo_is_the_one_failing_at_the_upper_bracket():
    # TTFT crosses its limit at 7 req/s, scheduling delay at 20: TTFT binds
    def probe(rate):
        return {"p90:ttft": 2.0 * rate / 7.0, "p99:scheduling_delay": 5.0 * rate / 20.0}
    slos = parse_slos(["p99:scheduling_delay<=5", "p90:ttft<=2"])
    r = find_capacity(probe, slos, 3.0)
    assert r.capacity_qps <= 7.0 < r.upper_qps and r.binding_slo == "p90:ttft<=2"
    # both violated at the upper bracket: the one exceeded by the larger factor is named
    r2 = find_capacity(lambda q: {"p90:ttft": 2.0 * (q / 7.0) ** 2, "p99:scheduling_delay": 5.0 * q / 7.0},
                       slos, 3.0)
    assert r2.binding_slo == "p90:ttft<=2"
    (upper,) = [p for p in r2.probes if p.qps == r2.upper_qps]
    assert [s for s, _ in upper.violated] == ["p90:ttft<=2", "p99:scheduling_delay<=5"]


def test_tighter_slo_lowers_stub_capacity():
    probe = lambda q: {"p99:scheduling_delay": 0.5 * q}     # noqa: E731  (limit L met up to 2 L req/s)
    caps = [find_capacity(probe, parse_slos([f"p99:scheduling_delay<={lim}"]), 1.0).capacity_qps
            for lim in (8.0, 4.0, 1.0)]
    assert caps[0] > caps[1] > caps[2]
    for cap, lim in zip(caps, (8.0, 4.0, 1.0)):
        assert 2 * lim / 1.025 <= cap <= 2 * lim


def test_unmeetable_slo_gives_capacity_zero():
    calls = []
    r = find_capacity(lambda q: calls.append(q) or {"p90:ttft": 1.0}, parse_slos(["p90:ttft<=0.5"]), 8.0)
    assert r.capacity_qps == 0.0 and r.metrics == {}
    assert r.binding_slo == "p90:ttft<=0.5" and r.binding_value == 1.0
    assert calls == [8.0, 4.0, 2.0, 1.0, 8.0 / 1024]     # 3 halvings, then the floor (guess x 2^-10)
    assert "no rate down to" in r.note


def test_never_failing_slo_is_reported_unbounded():
    r = find_capacity(lambda q: {"p99:scheduling_delay": 0.0}, DEFAULT_SLOS, 2.0)
    assert not r.bounded and r.upper_qps is None and r.binding_slo is None
    assert r.capacity_qps == 2.0 * 2 ** CEILING_DOUBLINGS
    assert len(r.probes) == CEILING_DOUBLINGS + 1 and "too short" in r.note


def test_guess_above_capacity_halves_then_bisects():
    calls = []
    r = find_capacity(stub(3.0, calls=calls), DEFAULT_SLOS, 100.0)
    # 100 fails, 50, 25, 12.5 fail, floor 0.0977 passes, then geometric bisection on [0.0977, 12.5]
    assert calls[:5] == [100.0, 50.0, 25.0, 12.5, 0.0976562]
    assert r.capacity_qps <= 3.0 < r.upper_qps


@pytest.mark.parametrize("guess, tol, words", [(0.0, 0.025, "first guess"), (1.0, 0.0, "--tolerance"),
                                               (float("nan"), 0.025, "first guess")])
def test_bad_search_parameters(guess, tol, words):
    with pytest.raises(SimError, match=words):
        find_capacity(stub(1.0), DEFAULT_SLOS, guess, rel_tol=tol)


# ------------------------------------------------------------------------------------------------ real engine
def _capacity(model: str, replicas: int, slos, requests, tol: float = 0.05) -> float:
    from sim.inputs import resolve_model
    from sim.serve.search import ProbeSetup, ServeSearchSpace, serve_search
    setup = ProbeSetup(resolve_model(model), model, requests)
    out = serve_search(setup, ServeSearchSpace(gpus=("H100",), replicas=(replicas,)), parse_slos(slos),
                       rel_tol=tol)
    (r,) = out.ranked
    assert r.capacity.bounded and r.capacity.binding_slo is not None
    return r.capacity.capacity_qps


# Short fixed requests over a 10 s arrival window: each probe loads the deployment for the same time, so
# the queue of an overloaded probe grows for 10 s whatever the rate (a fixed request count would let two
# replicas clear the stream as one burst). Tolerance 5%.
_REQS = dict(duration_s=10.0, lengths="fixed", prefill_tokens=512, decode_tokens=128, seed=3)


def test_flat_metrics_of_a_real_summary():
    from sim.serve.api import simulate_serving
    from sim.serve.plan import ServingPlan
    from workload_gen.requests import RequestConfig
    run = simulate_serving("llama3-8b", ServingPlan(), RequestConfig(num_requests=30, qps=5.0, **{
        k: v for k, v in _REQS.items() if k != "duration_s"}), gpu="H100")
    m = flat_metrics(run.summary)
    df = run.requests
    import numpy as np
    assert m["p99:scheduling_delay"] == pytest.approx(np.percentile(df["request_scheduling_delay"], 99))
    assert m["p90:ttft"] == pytest.approx(np.percentile(df["ttft"], 90))
    assert m["mean:e2e"] == pytest.approx(df["request_e2e_time"].mean())
    assert m["requests"] == 30


@pytest.mark.slow
def test_real_capacity_about_linear_in_replicas():
    from workload_gen.requests import RequestConfig
    slos = ["p99:scheduling_delay<=0.5"]
    one = _capacity("llama3-8b", 1, slos, RequestConfig(**_REQS))
    two = _capacity("llama3-8b", 2, slos, RequestConfig(**_REQS))
    # replicas share no link and the router alternates: 2 replicas serve ~2x (band: +-15%, covering the
    # 5% tolerance of each search and round-robin imbalance of Poisson arrivals)
    assert 1.7 * one <= two <= 2.3 * one


def test_real_capacity_falls_as_slo_tightens():
    from workload_gen.requests import RequestConfig
    req = RequestConfig(**_REQS)
    loose = _capacity("llama3-8b", 1, ["p99:scheduling_delay<=2"], req)
    tight = _capacity("llama3-8b", 1, ["p99:scheduling_delay<=0.2"], req)
    tighter = _capacity("llama3-8b", 1, ["p99:scheduling_delay<=0.2", "p90:ttft<=0.1"], req)
    assert loose > tight >= tighter > 0
