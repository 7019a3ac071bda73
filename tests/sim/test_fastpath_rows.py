"""StepReport.collectives of a fast run (sim.fastpath.CollectiveRows, built when first read): it must be
the list sim.simulation._collective_rows makes of the communication log, row for row and field for
field, with the pipeline sends' and cross-stage collectives' rows at their log positions; it reads as
a plain list everywhere (type, equality, pickling before and after the first read, dataclasses, the
DataFrame)."""

from __future__ import annotations

import dataclasses
import math
import pickle

import pytest

import sim.fastpath as fastpath
from sim.commands import _row_key_for, build_inputs, open_job_db
from sim.simulation import StepReport, _collective_rows, simulate

# interleaved 1F1B with pipeline sends and cross-stage (embedding) collectives among the fast records
JOB = {"model": "aicb-7", "fabric": "spectrum-x", "network": "analytical",
       "plan": {"micro_batch_size": 1, "seq_length": 1024, "tp": 2, "pp": 4, "vpp": 2, "dp": 2,
                "global_batch_size": 20, "num_layers_first_stage": 8, "num_layers_last_stage": 8}}


def _fast_run():
    got = {}
    run_fast = fastpath.run_fast

    def spy(eng):
        got["res"], got["eng"] = run_fast(eng), eng
        return got["res"]
    fastpath.run_fast = spy
    try:
        workload, topology, gpu = build_inputs(JOB)
        rep = simulate(workload, topology, gpu=gpu, network="analytical", db=open_job_db(JOB),
                       row_key=_row_key_for(workload))
    finally:
        fastpath.run_fast = run_fast
    assert rep.meta["engine"] == "arithmetic (sim.fastpath)"
    return rep, got["res"], got["eng"]


@pytest.fixture(scope="module")
def fast_run():
    return _fast_run()


def _plain(rows) -> list:
    return [list(r.items()) for r in rows]


def test_rows_are_built_on_first_read_and_equal_the_logs_rows(fast_run):
    rep, res, eng = fast_run
    log = res.comm_log
    assert {type(h) is tuple or h.fast for h in log} == {True, False}   # fast and event-timed entries
    # made independently of CollectiveRows: sim.simulation's rows of the whole log
    want = _collective_rows(log, res.rep_ranks, eng.row_key)
    rows = rep.collectives
    assert type(rows) is list and rows is rep.collectives           # built once, then kept
    assert len(rows) == len(log) == len(want) > 0
    assert _plain(rows) == _plain(want)
    # every fast row is a dict of its own: two executions of one op do not share one
    i = next(k for k, h in enumerate(log) if type(h) is tuple)
    j = next(k for k, h in enumerate(log) if type(h) is tuple and h[0] is log[i][0] and k != i)
    assert rows[i] is not rows[j] and rows[i]["name"] == rows[j]["name"]


def test_a_report_pickled_or_copied_before_the_first_read_holds_the_rows():
    rep, res, eng = _fast_run()
    assert isinstance(rep.__dict__["_collectives"], fastpath.CollectiveRows)    # not read yet
    back = pickle.loads(pickle.dumps(rep))
    assert type(back.__dict__["_collectives"]) is list
    copied = dataclasses.replace(rep)
    assert back.collectives == rep.collectives == copied.collectives
    assert _plain(back.collectives) == _plain(_collective_rows(res.comm_log, res.rep_ranks, eng.row_key))
    assert [f.name for f in dataclasses.fields(StepReport)].count("collectives") == 1
    assert len(dataclasses.asdict(rep)["collectives"]) == len(rep.collectives)


def test_rows_feed_the_dataframe(fast_run):
    rep = fast_run[0]
    df = rep.to_dataframe("collectives")
    assert len(df) == len(rep.collectives)
    assert math.isclose(float(df["exposed_s"].sum()), sum(r["exposed_s"] for r in rep.collectives),
                        rel_tol=1e-12)


def test_given_rows_are_kept_as_given():
    rows = [{"name": "x"}]
    rep = StepReport(1.0, 0.5, {}, 0.0, math.nan, math.nan, math.nan, {}, collectives=rows)
    assert rep.collectives is rows
    rep.collectives = []
    assert rep.collectives == [] and StepReport(1.0, 0.5, {}, 0.0, 0, 0, 0, {}).collectives == []


def test_a_blocking_records_row_is_its_ops_columns_with_its_times():
    info = type("Info", (), {"row": {"name": "x", "start_s": math.nan, "end_s": math.nan,
                                     "duration_s": math.nan, "exposed_s": math.nan}})()
    rows = fastpath.CollectiveRows([(info, 1.0, 3.5, 0.25)], [])
    assert len(rows) == 1
    assert rows.build() == [{"name": "x", "start_s": 1.0, "end_s": 3.5, "duration_s": 2.5, "exposed_s": 0.25}]
    assert list(rows.build()[0]) == ["name", "start_s", "end_s", "duration_s", "exposed_s"]


def test_rank_stage_is_each_ranks_stage(fast_run):
    rep = fast_run[0]
    pl = rep.placement
    want = [pl.stage_of(r) for r in range(pl.world_size)]
    assert rep.rank_stage == want and all(type(s) is int for s in rep.rank_stage)
    assert sorted(set(want)) == list(range(pl.pp))
    assert pl.stage_of_ranks() == want
