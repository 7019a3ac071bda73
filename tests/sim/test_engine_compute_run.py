"""The per-op shortcuts of sim.engine (_compute_run, the quiet window of _contended, blocking
arithmetically timed ops left untracked) must give exactly the per-op path's results: the same
report, bit for bit, with host overheads, contention and a straggler on."""

import json

import pytest

from sim import engine
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


def _report(job):
    rep = run_job(dict(job))
    return json.dumps(_strip(rep.to_dict()), sort_keys=True, default=repr), rep.iteration_time_s


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


@pytest.mark.parametrize("name", sorted(JOBS))
def test_shortcuts_exact(name, monkeypatch):
    calls = []
    orig = engine._StageRun._compute_run
    monkeypatch.setattr(engine._StageRun, "_compute_run",
                        lambda self, seg_no: (calls.append(self.idx), orig(self, seg_no))[1])
    fast, t_fast = _report(JOBS[name])
    assert calls, "the compute-run shortcut was not exercised"
    monkeypatch.undo()
    _per_op_path(monkeypatch)
    ref, t_ref = _report(JOBS[name])
    assert t_fast == t_ref
    assert fast == ref
