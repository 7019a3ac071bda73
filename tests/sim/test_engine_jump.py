"""Engine._jump: a stage that owns the rest of the current event moves the engine clock to its own
clock instead of re-pushing its step, only when that step would have been the next event anyway
(nothing queued at or before that time, no network event at or before it). The results must be
exactly those of the re-pushing engine: the same report, every collective row and every per-layer
row, bit for bit."""

import math

import pytest
from test_engine_compute_run import JOBS as SHORTCUT_JOBS
from test_engine_compute_run import _report, assert_same

from sim import engine

JOBS = {
    **SHORTCUT_JOBS,
    "gpt3_pp4_dp2_flow": {
        "model": "gpt3-175b", "network": "flow", "fabric": None,
        "plan": {"tp": 8, "pp": 4, "dp": 2, "global_batch_size": 32, "micro_batch_size": 1, "seq_length": 2048,
                 "sequence_parallel": True, "distributed_optimizer": True}},
    "llama70_vpp_flow": {
        "model": "llama3-70b", "network": "flow", "fabric": None,
        "plan": {"tp": 8, "pp": 4, "vpp": 5, "dp": 1, "global_batch_size": 8, "micro_batch_size": 1,
                 "seq_length": 4096, "sequence_parallel": True, "distributed_optimizer": True}},
}


@pytest.mark.parametrize("name", sorted(JOBS))
def test_jump_exact(name, monkeypatch):
    jumps = []
    orig = engine.Engine._jump
    def spy(self, t):
        moved = orig(self, t)
        jumps.append(moved)
        return moved

    monkeypatch.setattr(engine.Engine, "_jump", spy)
    fast, t_fast = _report(JOBS[name])
    assert any(jumps), "no step moved the clock itself"
    monkeypatch.setattr(engine.Engine, "_jump", lambda self, t: False)
    ref, t_ref = _report(JOBS[name])
    assert t_fast == t_ref
    assert_same(fast, ref)


class _Net:
    def __init__(self, t):
        self.t = t

    def next_event_time(self):
        return self.t


def _bare(heap_times, t_net, solo=True):
    eng = engine.Engine.__new__(engine.Engine)
    eng._solo = solo
    eng._heap = [(t, i, None, ()) for i, t in enumerate(sorted(heap_times))]
    eng.net = _Net(t_net)
    eng._now = 0.0
    return eng


@pytest.mark.parametrize("heap_times, t_net, want", [
    ([], math.inf, True),
    ([2.0], 3.0, True),          # both strictly later than the target time 1.0
    ([1.0], math.inf, False),    # a queued event at the same time was pushed first: it runs first
    ([0.5], math.inf, False),
    ([], 1.0, False),            # the network wins ties with the engine's queue
    ([], 0.9, False),
])
def test_jump_rule(heap_times, t_net, want):
    eng = _bare(heap_times, t_net)
    assert eng._jump(1.0) is want
    assert eng._now == (1.0 if want else 0.0)


def test_no_jump_when_shared():
    """Engines sharing a backend (sim.cluster) interleave with other engines' queues: never jump."""
    eng = _bare([], math.inf, solo=False)
    assert eng._jump(1.0) is False and eng._now == 0.0
