"""Results directory: file set, exact CSV header, Chrome trace structure and cap, atomic replacement."""

from __future__ import annotations

import csv
import json

import pytest
from helpers_serve import LinearTimer, run

from sim.errors import SimError
from sim.serve.engine import simulate
from sim.serve.metrics import SLO, VIDUR_COLUMNS
from sim.serve.outputs import SERVE_FILES, chrome_trace, write_results
from sim.serve.plan import ServingPlan

VIDUR_HEADER = ("Request Id,request_e2e_time,request_e2e_time_normalized,request_execution_time,"
                "request_execution_time_normalized,request_model_execution_time,"
                "request_model_execution_time_normalized,request_preemption_time,request_scheduling_delay,"
                "request_execution_plus_preemption_time,request_execution_plus_preemption_time_normalized,"
                "prefill_e2e_time,prefill_time_execution_plus_preemption,"
                "prefill_time_execution_plus_preemption_normalized,decode_time_execution_plus_preemption_normalized,"
                "request_num_tokens,request_num_prefill_tokens,request_num_decode_tokens,request_pd_ratio,"
                "request_num_restarts,request_inter_arrival_delay")


@pytest.fixture(scope="module")
def pp_run():
    reqs = [(0.01 * i, 20 + i, 3) for i in range(6)]
    return run(reqs, LinearTimer(a=0.01, b=1e-4, num_stages=2, flops_per_token=1e9), scheduler="sarathi", pp=2,
               replicas=2, max_batch_size=2)


def test_results_directory(tmp_path, pp_run):
    out = write_results(pp_run, tmp_path / "res", peak_flops_per_s=1e12, hbm_Bps=1e12, slo=SLO(ttft_s=1.0),
                        batches=True, extra={"model": "toy"})
    assert sorted(p.name for p in out.iterdir()) == sorted(SERVE_FILES)
    header = (out / "request_metrics.csv").read_text().splitlines()[0]
    assert header.startswith(VIDUR_HEADER + ",arrived_at,")
    assert len(VIDUR_HEADER.split(",")) == 1 + len(VIDUR_COLUMNS)
    rows = list(csv.DictReader(open(out / "request_metrics.csv")))
    assert [int(r["Request Id"]) for r in rows] == list(range(6))
    s = json.loads((out / "summary.json").read_text())
    assert s["inputs"] == {"model": "toy"} and s["goodput"]["slo"] == {"ttft_s": 1.0}
    assert "TTFT" in (out / "summary.txt").read_text()
    for png in ("cdf_ttft.png", "cdf_tbt.png", "cdf_e2e.png", "kv_usage.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(list(csv.reader(open(out / "batch_metrics.csv")))) == 1 + len(pp_run.batches)
    # no batch CSV unless asked; an earlier results directory is replaced
    out = write_results(pp_run, tmp_path / "res", charts=False)
    assert not (out / "batch_metrics.csv").exists() and not (out / "kv_usage.png").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".res")]


def test_refuses_to_replace_a_foreign_directory(tmp_path, pp_run):
    d = tmp_path / "mine"
    d.mkdir()
    (d / "notes.txt").write_text("keep me")
    with pytest.raises(SimError, match="holds files clustersim did not write"):
        write_results(pp_run, d)
    assert (d / "notes.txt").read_text() == "keep me"


def test_chrome_trace_slices(pp_run):
    tr = chrome_trace(pp_run)
    xs = [e for e in tr["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == 2 * len(pp_run.batches) == tr["otherData"]["slices_total"]
    assert {(e["pid"], e["tid"]) for e in xs} == {(r, s) for r in (0, 1) for s in (0, 1)}
    names = {(e["pid"], e.get("tid")): e["args"]["name"] for e in tr["traceEvents"] if e["ph"] == "M"
             and e["name"] in ("process_name", "thread_name")}
    assert names[(0, None)] == "replica 0" and names[(1, 1)] == "stage 1"
    first = min(xs, key=lambda e: (e["ts"], e["pid"]))
    assert first["args"]["request_ids"] == [0] and first["args"]["tokens"] == [20]
    assert first["ts"] == 0 and first["dur"] == pytest.approx((0.01 + 20e-4) * 1e6)
    for e in xs:
        a = e["args"]
        assert a["size"] == len(a["request_ids"]) == len(a["tokens"]) and a["num_tokens"] == sum(a["tokens"])
    # slices of one stage never overlap
    for key in {(e["pid"], e["tid"]) for e in xs}:
        iv = sorted((e["ts"], e["ts"] + e["dur"]) for e in xs if (e["pid"], e["tid"]) == key)
        assert all(a[1] <= b[0] + 1e-9 for a, b in zip(iv, iv[1:]))


def test_chrome_trace_cap_is_stated():
    reqs = [(0.0, 10, 5)] * 4
    res = simulate(reqs, ServingPlan(scheduler="vllm"), LinearTimer(a=0.01), 100, 4096, trace_cap=3,
                   check_invariants=True)
    tr = chrome_trace(res)
    assert len([e for e in tr["traceEvents"] if e["ph"] == "X"]) == 3
    od = tr["otherData"]
    assert od["slices_kept"] == 3 and od["slices_total"] == len(res.batches) > 3 and od["slice_cap"] == 3
    assert "only the first 3" in od["note"]
