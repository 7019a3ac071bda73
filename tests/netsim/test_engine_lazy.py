"""The lazy, incremental flow engine (netsim.engine.FlowEngine over netsim._flowcore) against the
previous engine's full re-solve (tests/netsim/reference_engine.py, incremental=False),
which advances every flow at every event and re-solves all of them: every completion time agrees
to 1e-9 relative, and the engine's own modes (incremental / full, compiled / plain Python) agree
bit for bit."""

from __future__ import annotations

import math

import numpy as np
import pytest
from reference_engine import ReferenceFlowEngine

from netsim.engine import FlowEngine
from netsim.errors import NetsimError
from netsim.maxmin import numba_available

BOTH = [False, True] if numba_available() else [False]


def _replay(make, seed: int, *, n_links=1000, n_start=150, n_chained=250, long_flows=True):
    """Seeded random flow set: short and long (lock-step-like, tens of links, weights 1-3) flows,
    some rate-capped, arriving in waves and from completion callbacks. Returns the engine and
    {flow id: (start, end)}."""
    rng = np.random.default_rng(seed)
    eng = make(rng.uniform(10.0, 100.0, n_links))
    ends: dict[int, float] = {}
    left = {"n": n_chained}

    def add():
        k = int(rng.integers(10, 40)) if long_flows and rng.random() < 0.2 else int(rng.integers(1, 5))
        links = rng.choice(n_links, size=k, replace=False)
        cap = float(rng.uniform(1.0, 30.0)) if rng.random() < 0.1 else math.inf
        eng.add_flow(links, float(rng.uniform(1.0, 500.0)), weights=rng.choice([1.0, 2.0, 3.0], size=k),
                     latency_s=float(rng.choice([0.0, rng.uniform(0.0, 2.0)])), cap_Bps=cap, on_done=done)

    def done(f, t):
        ends[f] = t
        if left["n"] > 0:
            left["n"] -= 1
            add()

    for wave in range(5):
        for _ in range(n_start // 5):
            add()
        eng.advance(wave * 4.0)
    eng.run()
    eng.check_all_done()
    return eng, ends


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_lazy_incremental_matches_reference_full_resolve(seed):
    new, got = _replay(lambda cap: FlowEngine(cap, check_invariants=True), seed)
    ref, want = _replay(lambda cap: ReferenceFlowEngine(cap, check_invariants=True, incremental=False), seed)
    assert len(got) == len(want) == new.num_flows == 400
    assert sorted(got) == sorted(want)
    t_new = np.array([got[f] for f in sorted(want)])
    t_ref = np.array([want[f] for f in sorted(want)])
    np.testing.assert_allclose(t_new, t_ref, rtol=1e-9, atol=0)
    np.testing.assert_allclose(new.link_bytes, ref.link_bytes, rtol=1e-9, atol=1e-6)
    assert new.recomputes == ref.recomputes
    # the instance exercises the storage growth (slots, entry pool compaction, heap) and the
    # incremental path (fewer flows re-solved than a full solve would)
    assert new.resolved_flows < ref.resolved_flows
    assert new._si.shape[0] > 64 and new._ei.shape[0] > 1024


@pytest.mark.parametrize("use_numba", BOTH)
@pytest.mark.parametrize("seed", [4, 5])
def test_modes_identical_bit_for_bit(seed, use_numba):
    """Incremental and full re-solve of the new engine, compiled or plain Python: same completion
    times to the last bit (the component is solved in the full solve's order)."""
    _, inc = _replay(lambda cap: FlowEngine(cap, use_numba=use_numba), seed, n_start=60, n_chained=60)
    _, full = _replay(lambda cap: FlowEngine(cap, use_numba=use_numba, incremental=False), seed,
                      n_start=60, n_chained=60)
    assert inc == full
    if use_numba:
        _, plain = _replay(lambda cap: FlowEngine(cap, use_numba=False), seed, n_start=60, n_chained=60)
        assert plain == inc


def test_hand_computed_lazy_progress():
    """Link 0 (10 B/s) shared by A (30 B) and B (10 B), C alone on link 1 (4 B/s, 8 B, starts at 1 s):
    A and B get 5 B/s; B ends at 2 s; A then has 20 B left at 10 B/s and ends at 4 s; C ends at 3 s.
    Bytes carried: link 0 = 40 B, link 1 = 8 B (weights 1)."""
    eng = FlowEngine(np.array([10.0, 4.0]), check_invariants=True, record_flows=True)
    a = eng.add_flow([0], 30.0)
    b = eng.add_flow([0], 10.0)
    c = eng.add_flow([1], 8.0, latency_s=1.0)
    eng.run()
    end = {r.flow_id: r.end_s for r in eng.flow_records}
    assert end == {b: 2.0, c: 3.0, a: 4.0}
    assert eng.link_bytes.tolist() == [40.0, 8.0]
    assert eng.num_active == 0 and eng.idle()


def test_weight_two_and_private_cap():
    """A flow crossing link 0 twice (weight 2) beside a flow capped at 2 B/s: 12 B/s of capacity,
    the capped flow takes 2, the other (12 - 2) / 2 = 5 B/s. Sizes 10 B and 4 B: both end at 2 s."""
    eng = FlowEngine(np.array([12.0]), check_invariants=True, record_flows=True)
    eng.add_flow([0], 10.0, weights=[2.0])
    eng.add_flow([0], 4.0, cap_Bps=2.0)
    eng.run()
    assert [r.end_s for r in eng.flow_records] == [2.0, 2.0]
    assert eng.link_bytes[0] == pytest.approx(24.0, rel=1e-12)


def test_use_numba_true_without_numba(monkeypatch):
    import netsim.maxmin as mm

    monkeypatch.setattr(mm, "_NUMBA_TRIED", True)
    monkeypatch.setattr(mm, "_NUMBA_IMPL", None)
    with pytest.raises(NetsimError, match="numba is not installed"):
        FlowEngine(np.array([1.0]), use_numba=True)


@pytest.mark.skipif(not numba_available(), reason="numba not installed")
def test_automatic_kernels_switch_to_compiled_mid_run_bit_for_bit():
    # use_numba=None starts with the plain kernels and switches once they have cost the budget: with a
    # tiny budget the switch falls after the first re-solve, mid-run, and changes no result
    import netsim.engine as ne
    budget = ne.KernelBudget(plain_s=1e-9)
    auto, got = _replay(lambda cap: FlowEngine(cap, budget=budget), 5)
    assert budget.compiled is not None and auto._k_resolve is budget.compiled["resolve"]
    assert auto._k_resolve is ne.fc.kernels(True)["resolve"]
    plain, want = _replay(lambda cap: FlowEngine(cap, use_numba=False), 5)
    assert plain._k_resolve is ne.fc.kernels(False)["resolve"]
    assert got == want
    later = FlowEngine(np.ones(3), budget=budget)     # engines sharing a spent budget start compiled
    assert later._k_resolve is budget.compiled["resolve"]


def test_automatic_kernels_stay_plain_on_a_small_run():
    # a small run never pays for loading numba: the plain kernels do all of it
    import netsim.engine as ne
    budget = ne.KernelBudget()
    eng, _ = _replay(lambda cap: FlowEngine(cap, budget=budget), 6, n_start=20, n_chained=10)
    assert eng._k_resolve is ne.fc.kernels(False)["resolve"]
    assert 0 < budget.left_s < ne.COMPILE_AFTER_S or not numba_available()


def test_engines_share_the_process_budget_by_default():
    import netsim.engine as ne
    b = ne.process_budget()
    assert ne.process_budget() is b
    eng = FlowEngine(np.ones(2))
    assert eng._budget is b or (b.compiled is not None and eng._k_resolve is b.compiled["resolve"])
    assert FlowEngine(np.ones(2), use_numba=False)._budget is None
