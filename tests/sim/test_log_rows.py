"""StepReport.collectives of an event-engine run are built when first read (sim.simulation._LogRows),
as the fast path's: the same rows whether read at once, after pickling, or twice."""

import pickle

import pytest

from sim.commands import run_job
from sim.simulation import _LogRows

PLAN = dict(micro_batch_size=1, sequence_parallel=True, distributed_optimizer=True)
JOB = {"model": "gpt3-175b", "network": "flow", "fabric": None,
       "plan": {"tp": 8, "pp": 4, "dp": 1, "global_batch_size": 8, "seq_length": 2048, **PLAN}}


@pytest.fixture(scope="module")
def reports():
    return run_job(dict(JOB)), run_job(dict(JOB))


def test_rows_are_built_on_first_read(reports):
    rep, _ = reports
    lazy = rep.__dict__["_collectives"]
    assert type(lazy) is _LogRows                # the event engine ran (a flow network, PP 4)
    n = len(lazy)
    rows = rep.collectives
    assert type(rows) is list and len(rows) == n
    assert rep.collectives is rows               # built once, then kept
    # 1F1B with 8 micro-batches over 4 stages: each of the 3 stage boundaries carries 8 activations
    # forward and 8 gradients back, one row per send of the sending stage's representative
    pp = [r for r in rows if r["group"] == "pp"]
    assert len(pp) == 2 * 8 * 3
    assert list(rows[0]) == ["stage", "rank", "group", "report_group", "name", "collective", "size_bytes",
                             "group_size", "peer_stage", "layer", "phase", "blocking", "timing", "start_s",
                             "end_s", "duration_s", "exposed_s"]
    assert all(r["end_s"] >= r["start_s"] for r in rows)


def test_rows_built_later_are_those_built_at_the_end_of_the_run(reports, monkeypatch):
    """The log's entries do not change after simulate returns: rows built on first read equal rows
    built from the log the moment the run ended."""
    from sim import simulation
    monkeypatch.setattr(simulation, "_LogRows", simulation._collective_rows)
    eager = run_job(dict(JOB))
    assert type(eager.__dict__["_collectives"]) is list
    assert eager.collectives == reports[0].collectives


def test_pickled_before_reading_holds_the_same_rows(reports):
    rep, twin = reports
    assert type(twin.__dict__["_collectives"]) is _LogRows
    back = pickle.loads(pickle.dumps(twin))      # pickled while its rows are not built
    assert type(back.__dict__["_collectives"]) is list
    assert back.collectives == rep.collectives
    assert back.iteration_time_s == twin.iteration_time_s and twin.collectives == rep.collectives
