"""StepReport.to_dataframe / ServingRun.to_dataframe: the tables reproduce the summary's totals."""

import math

import pytest

from sim.commands import EXAMPLE_JOB, run_job
from sim.errors import SimError

KEYS = ("TP", "CP", "EP", "DP", "PP")


@pytest.fixture(scope="module")
def rep():
    return run_job(dict(EXAMPLE_JOB))      # built-in example: 32 H100, TP4 PP2 DP4, flow network


def _mean(values) -> float:
    # the summary is the plain sum over stages divided by their number, in stage order
    return sum(values) / len(values)


def test_stage_table_reproduces_the_summary_exactly(rep):
    df = rep.to_dataframe("stages")
    assert list(df["stage"]) == [0, 1]
    assert list(df["rank"]) == rep.rep_ranks
    assert _mean(df["compute_s"].tolist()) == rep.compute_s
    assert _mean(df["overlap_slowdown_s"].tolist()) == rep.overlap_slowdown_s
    assert _mean(df["overhead_s"].tolist()) == rep.overhead_s
    assert _mean(df["bubble_s"].tolist()) == rep.bubble_s
    for k in KEYS:
        assert _mean(df[f"exposed_{k}_s"].tolist()) == rep.exposed_comm_s[k]
    # every stage's split adds up to the iteration time
    parts = df[["compute_s", "overhead_s", "bubble_s"] + [f"exposed_{k}_s" for k in KEYS]].sum(axis=1)
    for total in parts:
        assert total == pytest.approx(rep.iteration_time_s, rel=1e-12)


def test_layer_table_matches_stage0_and_the_end_to_end_csv(rep):
    df = rep.to_dataframe("layers")
    assert df["layer"].tolist()[:1] and "layer_0" in df["layer"].tolist()
    st0 = rep.stages[0]
    # stage 0 holds the first half of the model's transformer layers (PP2, even split)
    from sim.inputs import resolve_model
    half = resolve_model("aicb-7").num_layers // 2
    assert sorted(x for x in df["layer"] if x.startswith("layer_")) == sorted(f"layer_{i}" for i in range(half))
    assert df["compute_s"].sum() == pytest.approx(st0["compute_s"], rel=1e-12)
    # exposed time of ops in layer rows: every kind but the pipeline (charged to no layer)
    non_pp = sum(v for k, v in st0["exposed_comm_s"].items() if k != "PP")
    assert df["exposed_s"].sum() == pytest.approx(non_pp, rel=1e-12)
    for c in ("fwd", "ig", "wg"):
        assert (df[f"compute_{c}_s"] >= 0).all()
    # same numbers as EndToEnd.csv (microseconds there)
    from sim.report import end_to_end_csv
    csv_rows = end_to_end_csv(rep).splitlines()[3:]
    row0 = next(r.split(",") for r in csv_rows if r.startswith("layer_0,"))
    got = df.set_index("layer").loc["layer_0"]
    assert int(row0[2]) == round(got["compute_fwd_s"] * 1e6)
    assert int(row0[8]) == round(got["comm_fwd_s"] * 1e6)


def test_collective_table_reproduces_exposed_time_per_group(rep):
    df = rep.to_dataframe("collectives")
    assert set(df["stage"]) == {0, 1}
    # exposed time charged to operations, per report group, = the summary's (mean over 2 stages)
    for k in KEYS:
        got = df.loc[df["report_group"] == k, "exposed_s"].sum() / 2
        assert got == pytest.approx(rep.exposed_comm_s[k], rel=1e-12, abs=1e-15)
    # pipeline: 8 micro-batches, one activation 0->1 and one gradient 1->0 each
    pp = df[df["group"] == "pp"]
    assert len(pp) == 16
    assert sorted(zip(pp["stage"], pp["peer_stage"])) == [(0, 1)] * 8 + [(1, 0)] * 8
    assert (pp["collective"] == "send").all() and (pp["group_size"] == 2).all()
    # TP collectives run on groups of 4, DP ones on groups of 4 (TP4 x PP2 x DP4)
    assert set(df.loc[df["group"] == "tp", "group_size"]) == {4}
    assert set(df.loc[df["group"] == "dp", "group_size"]) == {4}
    assert ((df["end_s"] - df["start_s"] - df["duration_s"]).abs() < 1e-15).all()
    assert (df["end_s"] <= rep.iteration_time_s * (1 + 1e-12)).all()
    # a wait may include time queued behind earlier operations of the stream, never time after the end
    assert (df["exposed_s"] >= 0).all() and (df["exposed_s"] <= df["end_s"] + 1e-12).all()


def test_unknown_table_is_one_line_error(rep):
    with pytest.raises(SimError, match="table 'kernels': expected one of stages, layers, collectives"):
        rep.to_dataframe("kernels")


def test_repr_html_has_headline_and_stages(rep):
    h = rep._repr_html_()
    assert h.startswith("<div") and h.endswith("</div>")
    assert f"{rep.iteration_time_s:.6f} s" in h
    assert f"{100 * rep.mfu:.2f} %" in h
    assert "<table" in h and "exposed_TP_s" in h


def test_serving_run_tables_reproduce_its_summary():
    from sim.serve.api import simulate_serving
    from sim.serve.plan import ServingPlan
    from workload_gen.requests import RequestConfig
    run = simulate_serving("llama3-8b", ServingPlan(tp=1), RequestConfig(num_requests=40, qps=4.0, lengths="chat",
                                                                          seed=3), gpu="H100")
    df = run.to_dataframe()
    assert len(df) == 40
    s = run.summary
    T = run.result.duration_s
    assert s["throughput"]["requests_per_s"]["value"] == len(df) / T
    assert s["throughput"]["output_tokens_per_s"]["value"] == float(df["request_num_decode_tokens"].sum()) / T
    assert run.to_dataframe("replicas").shape[0] == 1
    assert len(run.to_dataframe("batches")) == s["cluster"]["batches"]
    with pytest.raises(SimError, match="table 'x'"):
        run.to_dataframe("x")
    h = run._repr_html_()
    assert "<table" in h and "requests" in h
    assert math.isfinite(T)
