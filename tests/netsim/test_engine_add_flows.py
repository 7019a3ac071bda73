"""FlowEngine.add_flows (several flows in one call: FlowNetwork.submit_many's sends) and the kernels
that decline, changing nothing, when the engine must make room first (add_flows: slots / entries;
resolve: heap), and pop_done's earliest finish time left (heap_top's answer)."""

import math

import numpy as np
import pytest

from netsim import _flowcore as fc
from netsim.engine import FlowEngine
from netsim.errors import NetsimError
from netsim.maxmin import numba_available

CAP_BPS = np.array([1e9, 2e9, 5e8, 1e9, 3e9])


def _flows(seed: int, n: int):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        k = int(rng.integers(1, 4))
        links = np.sort(rng.choice(len(CAP_BPS), size=k, replace=False)).astype(np.int64)
        w = rng.choice([1.0, 2.0], size=k)
        out.append((links, w, float(rng.integers(1, 50)) * 1e6, float(rng.integers(0, 3)) * 1e-4,
                    math.inf if rng.random() < 0.7 else 4e8))
    return out


def _run(batched: bool, waves, use_numba: bool = False) -> list:
    """Waves of flows added at 0, 1 ms, 2 ms...: one add_flows per wave or one add_flow per flow;
    returns (flow id, completion time) in callback order."""
    eng = FlowEngine(CAP_BPS, use_numba=use_numba)
    ends: list = []

    def cb(f, t):
        ends.append((f, t))

    for i, wave in enumerate(waves):
        eng.advance(i * 1e-3)
        if batched:
            first = eng.add_flows([f[0] for f in wave], [f[1] for f in wave], [f[2] for f in wave],
                                  [f[3] for f in wave], [f[4] for f in wave], [cb] * len(wave))
            assert first == eng.num_flows - len(wave)
        else:
            for links, w, nbytes, lat, cap in wave:
                eng.add_flow(links, nbytes, weights=w, latency_s=lat, cap_Bps=cap, on_done=cb)
    eng.run()
    eng.check_all_done()
    return ends


def test_add_flows_is_add_flow_per_flow_bit_for_bit():
    # 300 flows: the engine grows its slots (64 at first), entries and heap on the way
    waves = [_flows(seed, 30) for seed in range(10)]
    one_by_one = _run(False, waves)
    assert len(one_by_one) == 300
    assert sorted(f for f, _ in one_by_one) == list(range(300))
    assert _run(True, waves) == one_by_one
    if numba_available():     # the compiled kernels: the same results bit for bit
        assert _run(True, waves, use_numba=True) == one_by_one


def test_add_flows_with_a_bad_flow_adds_none():
    eng = FlowEngine(CAP_BPS, use_numba=False)
    links = [np.array([0], dtype=np.int64), np.array([1], dtype=np.int64)]
    ws = [np.ones(1), np.ones(1)]
    with pytest.raises(NetsimError, match=r"negative size or latency \(5.0 B, -1.0 s\)"):
        eng.add_flows(links, ws, [1.0, 5.0], [0.0, -1.0], [math.inf, math.inf], [None, None])
    assert eng.num_flows == 0 and eng.idle()


def _state(eng):
    return [a.copy() for a in (eng._sc, eng._si, eng._sf, eng._ei, eng._ew, eng._li, eng._hk, eng._hs)]


def test_add_kernel_declines_without_room():
    eng = FlowEngine(CAP_BPS, use_numba=False)
    free = int(eng._sc[fc.C_NFREE])
    before = _state(eng)
    n = free + 1     # one flow more than the free slots
    ok = fc.add_flows(0.0, np.arange(n, dtype=np.int64), np.ones(n, dtype=np.int64), np.zeros(n, dtype=np.int64),
                      np.ones(n), np.ones(n), np.full(n, math.inf), eng._si, eng._sf, eng._free, eng._ei, eng._ew,
                      eng._li, eng._sc, eng._seedl, eng._seeds)
    assert ok is False
    assert all(np.array_equal(a, b) for a, b in zip(before, _state(eng)))
    # entries: one flow crossing more links than the pool holds
    m = eng._ei.shape[0] + 1
    ok = fc.add_flows(0.0, np.zeros(1, dtype=np.int64), np.array([m], dtype=np.int64), np.zeros(m, dtype=np.int64),
                      np.ones(m), np.ones(1), np.full(1, math.inf), eng._si, eng._sf, eng._free, eng._ei, eng._ew,
                      eng._li, eng._sc, eng._seedl, eng._seeds)
    assert ok is False
    assert all(np.array_equal(a, b) for a, b in zip(before, _state(eng)))


def test_resolve_declines_without_heap_room_and_returns_the_top():
    eng = FlowEngine(CAP_BPS, use_numba=False)
    eng.add_flow([0], 1e9)          # shares link 0 (1e9 B/s): 5e8 B/s each, done at 2 s
    eng.add_flow([0, 1], 3e9)       # 5e8 B/s until 2 s, then 1e9 B/s: done at 4 s
    eng._step_events(0.0)           # activates both, not re-solved yet: the heap has no room (size 0)
    assert len(eng._hk) == 0
    before = _state(eng)
    got = fc.resolve(0.0, False, eng._si, eng._sf, eng._ei, eng._ew, eng._li, eng._lf, eng.capacity_Bps, eng._hk,
                     eng._hs, eng._sc, eng._seedl, eng._seeds, eng._comp_slots, eng._comp_links, eng._out_load)
    assert got == (-1, 0, math.inf)
    assert all(np.array_equal(a, b) for a, b in zip(before, _state(eng)))
    assert eng.next_event_time() == 2.0     # the engine makes room, re-solves and reads the top
    assert eng.recomputes == 1


def test_pop_done_returns_the_next_finish_time():
    eng = FlowEngine(CAP_BPS, use_numba=False)
    # each flow alone on its link: 1e9 B at 2e9 B/s (0.5 s), 2e9 B at 5e8 B/s (4 s), 4e9 B at 3e9 B/s (4/3 s)
    for link, nbytes in ((1, 1e9), (2, 2e9), (4, 4e9)):
        eng.add_flow([link], nbytes)
    eng.advance(0.0)     # activates and re-solves them
    assert eng.next_event_time() == 0.5
    sc = eng._sc
    n, top = fc.pop_done(1.0, 1.0, eng._hk, eng._hs, eng._si, eng._sf, eng._free, eng._ei, eng._li, sc,
                         eng._seedl, eng._out_fid, eng._out_left, eng._out_rate)
    assert n == 1 and eng._out_fid[0] == 0      # only the first is due by 1 s
    assert top == 4e9 / 3e9
    assert top == fc.heap_top(eng._hk, eng._hs, eng._si, sc)
    n, top = fc.pop_done(5.0, 5.0, eng._hk, eng._hs, eng._si, eng._sf, eng._free, eng._ei, eng._li, sc,
                         eng._seedl, eng._out_fid, eng._out_left, eng._out_rate)
    assert n == 2 and eng._out_fid[:2].tolist() == [2, 1] and top == math.inf
