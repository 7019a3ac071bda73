"""Max-min allocation (pure Python and numba) and the event-driven flow engine."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netsim.engine import FlowEngine
from netsim.errors import NetsimError
from netsim.maxmin import maxmin_rates_numba, maxmin_rates_python, numba_available


def csr(paths, weights=None):
    ptr = np.zeros(len(paths) + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(p) for p in paths])
    links = np.array([lk for p in paths for lk in p], dtype=np.int64)
    w = np.ones(len(links)) if weights is None else np.array([x for ws in weights for x in ws], dtype=float)
    return ptr, links, w


def random_instance(seed, n_flows, n_links):
    rng = np.random.default_rng(seed)
    paths = [rng.choice(n_links, size=rng.integers(1, 6), replace=False).tolist() for _ in range(n_flows)]
    weights = [rng.choice([1.0, 1.0, 2.0, 0.5], size=len(p)).tolist() for p in paths]
    cap = rng.uniform(1.0, 100.0, n_links)
    fcap = np.where(rng.random(n_flows) < 0.1, rng.uniform(0.5, 20.0, n_flows), np.inf)
    return cap, paths, weights, fcap


IMPLS = [maxmin_rates_python]
if numba_available():
    IMPLS.append(maxmin_rates_numba)


@pytest.mark.parametrize("impl", IMPLS)
def test_textbook_cases(impl):
    # A crosses links 0 and 1; B only link 0; C only link 1. Link 1 (cap 4) is the bottleneck of A and C.
    ptr, links, w = csr([[0, 1], [0], [1]])
    r = impl(np.array([10.0, 4.0]), ptr, links, w)
    assert r.tolist() == pytest.approx([2.0, 8.0, 2.0])
    # weight 2 (a lock-step flow crossing the link twice) against weight 1: equal rates, 2/3 and 1/3 of capacity
    ptr, links, w = csr([[0], [0]], [[2.0], [1.0]])
    assert impl(np.array([9.0]), ptr, links, w).tolist() == pytest.approx([3.0, 3.0])
    # a per-flow cap frees capacity for the other flow
    ptr, links, w = csr([[0], [0]])
    r = impl(np.array([10.0]), ptr, links, w, np.array([1.0, np.inf]))
    assert r.tolist() == pytest.approx([1.0, 9.0])


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_maxmin_property(impl, seed):
    """Feasible, and every flow is either at its cap or has a saturated link on which it is among
    the fastest (the definition of max-min fairness)."""
    cap, paths, weights, fcap = random_instance(seed, 300, 80)
    ptr, links, w = csr(paths, weights)
    r = impl(cap, ptr, links, w, fcap)
    load = np.zeros(len(cap))
    for f, p in enumerate(paths):
        for lk, wt in zip(p, weights[f]):
            load[lk] += r[f] * wt
    assert (load <= cap * (1 + 1e-9)).all()
    for f, p in enumerate(paths):
        if r[f] >= fcap[f] * (1 - 1e-9):
            continue
        ok = False
        for lk in p:
            if load[lk] >= cap[lk] * (1 - 1e-9):
                rates_here = [r[g] for g, q in enumerate(paths) if lk in q]
                if r[f] >= max(rates_here) * (1 - 1e-9):
                    ok = True
                    break
        assert ok, f"flow {f} has no bottleneck"


@pytest.mark.skipif(not numba_available(), reason="numba not installed")
def test_numba_matches_python():
    for seed in range(4):
        cap, paths, weights, fcap = random_instance(seed, 2000, 500)
        ptr, links, w = csr(paths, weights)
        a = maxmin_rates_python(cap, ptr, links, w, fcap)
        b = maxmin_rates_numba(cap, ptr, links, w, fcap)
        np.testing.assert_allclose(a, b, rtol=1e-9)


def test_engine_two_flows_share_a_link():
    eng = FlowEngine(np.array([10.0]), check_invariants=True)
    done = {}
    eng.add_flow([0], 10.0, on_done=lambda f, t: done.setdefault(f, t))
    eng.add_flow([0], 30.0, on_done=lambda f, t: done.setdefault(f, t))
    eng.run()
    # 5 B/s each until the first finishes at t=2 (10 B), then 20 B left at 10 B/s -> t=4
    assert done[0] == pytest.approx(2.0)
    assert done[1] == pytest.approx(4.0)
    eng.check_all_done()
    assert eng.link_bytes[0] == pytest.approx(40.0)
    assert eng.link_utilization()[0] == pytest.approx(1.0)


def test_engine_latency_and_advance():
    eng = FlowEngine(np.array([10.0, 10.0]), check_invariants=True, record_flows=True)
    done = []
    eng.add_flow([0, 1], 20.0, latency_s=1.0, on_done=lambda f, t: done.append(t))
    assert eng.next_event_time() == pytest.approx(1.0)
    eng.advance(2.0)
    assert not done and eng.now_s == 2.0
    assert eng.next_event_time() == pytest.approx(3.0)
    eng.advance(10.0)
    assert done == [pytest.approx(3.0)]
    rec = eng.flow_records[0]
    assert (rec.added_s, rec.start_s, rec.end_s) == (0.0, pytest.approx(1.0), pytest.approx(3.0))
    assert eng.next_event_time() == math.inf


def test_engine_callback_adds_flow():
    eng = FlowEngine(np.array([4.0]), check_invariants=True)
    ends = []

    def chain(_f, t):
        ends.append(t)
        if len(ends) < 3:
            eng.add_flow([0], 8.0, on_done=chain)

    eng.add_flow([0], 8.0, on_done=chain)
    eng.run()
    assert ends == [pytest.approx(2.0), pytest.approx(4.0), pytest.approx(6.0)]


def test_engine_zero_capacity_never_finishes():
    eng = FlowEngine(np.array([0.0]))
    eng.add_flow([0], 1.0)
    with pytest.raises(NetsimError, match="never finish"):
        eng.run()


def _random_run(seed):
    rng = np.random.default_rng(seed)
    cap = rng.uniform(5, 50, 30)
    eng = FlowEngine(cap, check_invariants=True, record_flows=True)
    for _ in range(200):
        path = rng.choice(30, size=rng.integers(1, 5), replace=False)
        eng.add_flow(path, float(rng.uniform(1, 100)), latency_s=float(rng.uniform(0, 2)),
                     cap_Bps=float(rng.choice([np.inf, 7.0])))
        eng.advance(eng.now_s + float(rng.exponential(0.05)))
    eng.run()
    eng.check_all_done()
    return [(r.flow_id, r.end_s) for r in eng.flow_records]


def test_engine_invariants_and_determinism():
    a = _random_run(5)
    b = _random_run(5)
    assert len(a) == 200
    assert a == b


def test_small_and_large_python_paths_agree():
    from netsim.maxmin import _maxmin_small

    for seed in range(3):
        cap, paths, weights, fcap = random_instance(seed, 400, 60)
        ptr, links, w = csr(paths, weights)
        assert len(links) >= 512     # maxmin_rates_python takes its numpy set-up path
        np.testing.assert_allclose(_maxmin_small(cap, ptr, links, w, fcap),
                                   maxmin_rates_python(cap, ptr, links, w, fcap), rtol=1e-12)


def test_backend_without_numba(monkeypatch):
    """The pure-Python path gives the same collective times as the default path."""
    topo = pytest.importorskip("topo")
    import netsim
    import netsim.maxmin as mm

    t = topo.build("spectrum-x", gpus=16)
    req = netsim.CollectiveRequest("all_to_all", tuple(range(16)), 64 << 20)
    default = netsim.make_backend("flow", t).estimate(req)
    monkeypatch.setattr(mm, "_NUMBA_TRIED", True)
    monkeypatch.setattr(mm, "_NUMBA_IMPL", None)
    assert not mm.numba_available()
    assert netsim.make_backend("flow", t).estimate(req) == pytest.approx(default, rel=1e-9)


@pytest.mark.slow
@pytest.mark.skipif(not numba_available(), reason="numba not installed")
def test_builtin_example_identical_with_and_without_numba(monkeypatch):
    """A simulation must not depend on whether numba is installed (`pip install .` has none, the test extra
    has it): `clustersim run`'s contended TP/DP/PP traffic gives many links equal fair shares, and the
    implementations must take them in the same (share, link id) order to agree bit for bit."""
    import netsim.maxmin as mm
    from sim.commands import EXAMPLE_JOB, run_job
    with_numba = run_job(dict(EXAMPLE_JOB)).iteration_time_s
    monkeypatch.setattr(mm, "_NUMBA_TRIED", True)
    monkeypatch.setattr(mm, "_NUMBA_IMPL", None)
    assert not mm.numba_available()
    assert run_job(dict(EXAMPLE_JOB)).iteration_time_s == with_numba
