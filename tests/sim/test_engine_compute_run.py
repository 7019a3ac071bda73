"""The per-op shortcuts of sim.engine (_compute_run with arithmetically timed communication logged
without Handles and its inner loop over kernel runs (_kernel_runs), the quiet window of _contended,
blocking arithmetically timed ops left untracked, shared pipeline-send requests) must give exactly
the per-op path's results: the same report, every collective row and every per-layer row, bit for
bit, with host overheads, contention and a straggler on."""

import dataclasses
import json

import pytest

from netsim.api import CollectiveRequest
from sim import engine, simulation
from sim.commands import run_job

JOBS = {
    "gpt3_pp8_straggler": {
        "model": "gpt3-175b", "network": "flow", "fabric": None, "stragglers": {"fixed": ["9=1.3"]},
        "plan": {"tp": 8, "pp": 8, "dp": 1, "global_batch_size": 8, "micro_batch_size": 1, "seq_length": 2048,
                 "sequence_parallel": True, "distributed_optimizer": True}},
    "aicb7_pp2": {
        "model": "aicb-7", "network": "flow", "fabric": "spectrum-x:nic_bandwidth_Bps=400Gbps",
        "plan": {"tp": 4, "pp": 2, "dp": 4, "global_batch_size": 16, "micro_batch_size": 1, "seq_length": 4096,
                 "sequence_parallel": True, "distributed_optimizer": True}},
}


def _strip(o):
    if isinstance(o, dict):
        return {k: _strip(v) for k, v in o.items() if "wall" not in str(k).lower()}
    if isinstance(o, list):
        return [_strip(v) for v in o]
    return o


def assert_same(fast, ref) -> None:
    """_report tuples equal: every collective row, every per-layer row, the report."""
    # plain booleans: pytest's diff of two long texts would take minutes
    same_report, same_rows, same_layers = (fast[i] == ref[i] for i in range(3))
    assert same_rows, "StepReport.collectives differ"
    assert same_layers, "per-layer rows differ"
    assert same_report, "reports differ"


def _report(job):
    rep = run_job(dict(job))
    # rows keep their key order (CSV columns): compared as lists of items, floats by value (the flow
    # backend's times may be numpy floats in one run and Python floats in another)
    rows = json.dumps([[(k, repr(float(v)) if isinstance(v, float) else v) for k, v in row.items()]
                       for row in rep.collectives])
    layers = json.dumps({k: dataclasses.asdict(v) for k, v in rep.layers.items()}, sort_keys=True, default=repr)
    return (json.dumps(_strip(rep.to_dict()), sort_keys=True, default=repr), rows, layers), rep.iteration_time_s


def _per_op_path(monkeypatch):
    """The engine without the shortcuts: every kernel through step()'s loop and _live_state."""
    run = engine._StageRun

    def contended(self, t, dur):
        got = self._live_state(t)
        fps, nxt, pending_event = got
        return None if not fps and not pending_event and t + dur <= nxt else got

    orig_issue = run._issue_fast
    monkeypatch.setattr(run, "_compute_run", lambda self, seg_no: None)
    monkeypatch.setattr(run, "_contended", contended)
    monkeypatch.setattr(run, "_issue_fast", lambda self, op, rc=None, track=True: orig_issue(self, op, rc, True))

    def send_requests(self, h, key, pairs, size, rep_gpu):     # a fresh, tagged list per send
        return [CollectiveRequest("send", pair, size, tag=f"pp:{h.name}")
                for pair in self._submitted(key, pairs, "send", size, rep_gpu)]

    monkeypatch.setattr(engine.Engine, "_send_requests", send_requests)


@pytest.mark.parametrize("name", sorted(JOBS))
def test_shortcuts_exact(name, monkeypatch):
    calls = []
    orig = engine._StageRun._compute_run
    monkeypatch.setattr(engine._StageRun, "_compute_run",
                        lambda self, seg_no: (calls.append(self.idx), orig(self, seg_no))[1])
    runs = []       # kernel runs taken by _compute_run's inner loop (host model on, stages past 0)
    orig_runs = engine._StageRun._kernel_runs
    monkeypatch.setattr(engine._StageRun, "_kernel_runs", lambda self, ops: (runs.append(1), orig_runs(self, ops))[1])
    logged = []
    orig_rows = simulation._collective_rows
    monkeypatch.setattr(simulation, "_collective_rows", lambda log, *a: (logged.extend(log), orig_rows(log, *a))[1])
    fast, t_fast = _report(JOBS[name])
    assert calls, "the compute-run shortcut was not exercised"
    assert runs, "the kernel-run loop was not exercised"
    if name == "gpt3_pp8_straggler":      # TP inside NVLink domains: timed arithmetically
        assert any(type(h) is tuple for h in logged), "no op was logged without a Handle"
    monkeypatch.undo()
    _per_op_path(monkeypatch)
    ref, t_ref = _report(JOBS[name])
    assert t_fast == t_ref
    assert_same(fast, ref)
