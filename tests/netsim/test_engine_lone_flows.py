"""Flows that start alone (FlowEngine._activate's one-flow path: its scalars through the engine's
1-element buffers) and components without a shared link (netsim._flowcore.resolve: each flow at its
private cap, without the bottleneck solver): completion times against closed forms computed here,
with both kernel sets, and bit-identical between them."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netsim.engine import FlowEngine
from netsim.maxmin import numba_available

BOTH = [False, True] if numba_available() else [False]


def _ends(eng: FlowEngine) -> dict[int, float]:
    eng.run()
    eng.check_all_done()
    return {r.flow_id: r.end_s for r in eng.flow_records}


@pytest.mark.parametrize("use_numba", BOTH)
def test_lone_flows_one_at_a_time(use_numba):
    """Links 0..3 at 10, 20, 40, 8 B/s. Each flow starts alone (distinct latencies) on links no other
    flow uses: rate = min(cap, capacity / weight over its links).
    a: links 0, 1, 30 B, latency 1      -> min(10, 20) = 10 B/s, ends 1 + 3 = 4
    b: link 2 weight 2, 40 B, latency 2 -> 40 / 2 = 20 B/s, ends 2 + 2 = 4
    c: link 3, cap 2 B/s, 6 B, latency 3 -> 2 B/s, ends 3 + 3 = 6
    d: no link, cap 5 B/s, 10 B, latency 0.5 -> ends 0.5 + 2 = 2.5
    Each activation reuses the one-flow buffers: a stale byte count or cap would change an end."""
    eng = FlowEngine(np.array([10.0, 20.0, 40.0, 8.0]), use_numba=use_numba, check_invariants=True,
                     record_flows=True)
    a = eng.add_flow([0, 1], 30.0, latency_s=1.0)
    b = eng.add_flow([2], 40.0, weights=[2.0], latency_s=2.0)
    c = eng.add_flow([3], 6.0, latency_s=3.0, cap_Bps=2.0)
    d = eng.add_flow([], 10.0, latency_s=0.5, cap_Bps=5.0)
    assert _ends(eng) == {a: 4.0, b: 4.0, c: 6.0, d: 2.5}
    assert eng.link_bytes.tolist() == [30.0, 30.0, 80.0, 6.0]


@pytest.mark.parametrize("use_numba", BOTH)
def test_flows_starting_together_share_and_stay_apart(use_numba):
    """Three flows start together (one activation of several flows): a and b share link 0 (12 B/s,
    6 B/s each), c is alone on link 1 (5 B/s). a: 12 B ends 2; b: 24 B has 12 B left at 2 s, then
    12 B/s: ends 3; c: 10 B ends 2."""
    eng = FlowEngine(np.array([12.0, 5.0]), use_numba=use_numba, check_invariants=True, record_flows=True)
    a = eng.add_flow([0], 12.0, latency_s=0.25)
    b = eng.add_flow([0], 24.0, latency_s=0.25)
    c = eng.add_flow([1], 10.0, latency_s=0.25)
    assert _ends(eng) == {a: 2.25, b: 3.25, c: 2.25}


def test_chained_lone_flows_bit_identical_with_either_kernel_set():
    """A pipeline-like chain: every completion starts the next flow alone (after a latency) on one of
    a few links, sizes and caps varying; both kernel sets give the same ends bit for bit, and each end
    is its start plus size over its private rate."""
    rng = np.random.default_rng(7)
    caps = rng.uniform(5.0, 50.0, 6)
    plan = [(int(rng.integers(0, 6)), float(rng.uniform(1.0, 100.0)), float(rng.uniform(0.0, 1e-3)),
             float(rng.choice([math.inf, 3.0, 17.0])), float(rng.choice([1.0, 2.0]))) for _ in range(200)]

    def run(use_numba):
        eng = FlowEngine(caps, use_numba=use_numba, record_flows=True)
        it = iter(plan)

        def nxt(_f=None, _t=None):
            step = next(it, None)
            if step is not None:
                link, size, lat, cap, w = step
                eng.add_flow([link], size, weights=[w], latency_s=lat, cap_Bps=cap, on_done=nxt)

        nxt()
        eng.run()
        return [(r.start_s, r.end_s) for r in eng.flow_records]

    got = run(False)
    assert len(got) == len(plan)
    for (start, end), (link, size, _lat, cap, w) in zip(got, plan):
        assert end == pytest.approx(start + size / min(cap, caps[link] / w), rel=1e-12)
    if numba_available():
        assert run(True) == got
