"""clustersim run / compare / sweep end to end: outputs, SimAI files, errors, determinism."""

from __future__ import annotations

import csv
import json

import pytest

from sim.cli import main

SIMAI_HEADER = ("File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm, Expose_PP_comm, "
                "bubble time, total comp, total exposed comm, Total time")
LAYER_HEADER_TAIL = ("fwd compute,wg compute,ig compute,fwd exposed comm,wg exposed comm,ig exposed comm,"
                     "fwd total comm,algbw,busbw,wg total comm,algbw,busbw,ig total comm,algbw,busbw")
SMALL = ["-m", "aicb-7", "--tp", "4", "--pp", "2", "--dp", "2", "--global-batch", "4", "--seq-length", "1024",
         "--sp", "-q"]


def test_run_small_writes_all_outputs(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["run", *SMALL, "-o", str(out), "--name", "t"]) == 0
    names = sorted(p.name for p in out.iterdir())
    assert names == ["EndToEnd.csv", "breakdown.svg", "report.html", "summary.json", "summary.txt", "timeline.svg",
                     "trace.json"]
    summary = json.loads((out / "summary.json").read_text())
    T = summary["iteration_time_s"]
    parts = (summary["compute_s"] + summary["bubble_s"] + sum(summary["exposed_comm_s"].values())
             + summary["overhead_s"])
    assert summary["overhead_s"] > 0 and 0 <= summary["overlap_slowdown_s"] < summary["compute_s"]
    assert parts == pytest.approx(T, rel=1e-9)
    assert set(summary["exposed_comm_s"]) == {"TP", "CP", "EP", "DP", "PP"}
    assert 0 < summary["mfu"] < 1
    lines = (out / "EndToEnd.csv").read_text().splitlines()
    assert lines[0] == SIMAI_HEADER
    assert lines[1].startswith("t-, ") and lines[1].endswith(str(round(T * 1e6)))
    assert lines[2] == "layer_name,t," + LAYER_HEADER_TAIL
    trace = json.loads((out / "trace.json").read_text())
    procs = [e for e in trace["traceEvents"] if e.get("name") == "process_name"]
    assert [p["pid"] for p in procs] == [0, 8, 16]      # one representative rank per stage, then the links
    assert trace["otherData"]["link_counters"]["pid"] == 16
    assert any(e.get("ph") == "X" and e["cat"] == "comm" for e in trace["traceEvents"])
    assert (out / "breakdown.svg").read_text().startswith("<?xml version='1.0' encoding='UTF-8'?>\n<svg ")
    assert "iteration time" in capsys.readouterr().out
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]   # no temp leftovers


def test_run_deterministic(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    assert main(["run", *SMALL, "-o", str(a), "--no-charts"]) == 0
    assert main(["run", *SMALL, "-o", str(b), "--no-charts"]) == 0
    assert (a / "EndToEnd.csv").read_text() == (b / "EndToEnd.csv").read_text()
    assert (a / "trace.json").read_text() == (b / "trace.json").read_text()
    ja, jb = (json.loads((d / "summary.json").read_text()) for d in (a, b))
    ja["meta"].pop("wall_time_s")
    jb["meta"].pop("wall_time_s")
    assert ja == jb


def test_simai_micro_file(shared_dir, tmp_path):
    f = shared_dir / "data" / "simai_examples" / "microAllReduce.txt"
    out = tmp_path / "m"
    assert main(["run", "-w", str(f), "-o", str(out), "-q", "--no-charts"]) == 0
    lines = (out / "EndToEnd.csv").read_text().splitlines()
    assert lines[0] == SIMAI_HEADER
    row = lines[3].split(",")
    assert row[0] == "embedding_layer"
    # two forward computes of 556,000 ns each
    assert int(row[2]) == 1112
    assert int(row[8]) > 0                          # fwd total comm (the two TP all-reduces)


def test_simai_aicb_file(shared_dir, tmp_path):
    f = shared_dir / "data" / "simai_examples" / "aicb_gpt7b_128gpu_tp4_ga8.txt"
    out = tmp_path / "g"
    assert main(["run", "-w", str(f), "-o", str(out), "-q", "--no-charts", "--no-trace"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["world_size"] == 128 and summary["meta"]["num_microbatches"] == 8
    assert summary["compute_sources"] == {"given": 1.0}
    rows = {r[0]: r for r in (line.split(",") for line in (out / "EndToEnd.csv").read_text().splitlines()[3:])}
    assert {"embedding_layer", "attention_layer", "mlp_layer"} <= set(rows)
    # 36 attention layers x 8 micro-batches x 1,820,000 ns forward
    assert int(rows["attention_layer"][2]) == 36 * 8 * 1820


@pytest.mark.slow
def test_simai_moe_file_analytical(shared_dir, tmp_path):
    f = shared_dir / "data" / "simai_examples" / "workload_analytical.txt"
    out = tmp_path / "moe"
    assert main(["run", "-w", str(f), "-n", "analytical", "-o", str(out), "-q", "--no-charts"]) == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["meta"]["world_size"] == 9216 and summary["meta"]["pp"] == 12
    assert summary["exposed_comm_s"]["EP"] > 0 and summary["bubble_s"] > 0
    assert (out / "EndToEnd.csv").read_text().splitlines()[0] == SIMAI_HEADER


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clustersim: error: ")
    return err[0]


def test_error_workload_larger_than_topology(tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["run", *SMALL, "--gpus", "8", "-o", str(out)]) == 2
    assert "needs 16 GPUs but the topology has only 8" in _err(capsys)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_error_gpu_missing_from_db(tmp_path, capsys):
    out = tmp_path / "x"
    assert main(["run", *SMALL, "--gpu", "NoSuchGPU-9000", "-o", str(out)]) == 2
    assert "NoSuchGPU-9000" in _err(capsys)
    assert list(tmp_path.iterdir()) == []


def test_error_simai_inconsistent_header(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 3 vpp: 8 ga: 1 "
                   "all_gpus: 16 checkpoints: 0 checkpoint_initiates: 0 pp_comm 1024\n1\n"
                   "embedding_layer -1 556000 ALLREDUCE 16777216 1 NONE 0 1 NONE 0 1\n")
    out = tmp_path / "x"
    assert main(["run", "-w", str(bad), "-o", str(out)]) == 2
    assert "bad.txt:1" in _err(capsys)
    assert not out.exists()


def test_error_existing_results_kept_on_failure(tmp_path, capsys):
    out = tmp_path / "keep"
    out.mkdir()
    (out / "old.txt").write_text("old")
    assert main(["run", *SMALL, "--gpus", "8", "-o", str(out)]) == 2
    _err(capsys)
    assert (out / "old.txt").read_text() == "old"


def test_sweep_local_processes(tmp_path, capsys):
    out = tmp_path / "sweep.csv"
    assert main(["sweep", "-m", "aicb-7", "--dp", "2", "--global-batch", "4", "--seq-length", "1024", "--sp",
                 "-n", "analytical", "--grid", "tp=2,4", "--grid", "pp=1,2,5", "-j", "2", "-o", str(out)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert [(r["tp"], r["pp"]) for r in rows] == [(t, p) for t in ("2", "4") for p in ("1", "2", "5")]
    ok = [r for r in rows if not r["error"]]
    bad = [r for r in rows if r["error"]]
    assert len(ok) == 4 and all(float(r["iteration_time_s"]) > 0 for r in ok)
    # 36 layers do not split over 5 stages: those grid points fail in their own row, the sweep goes on
    assert len(bad) == 2 and all(r["pp"] == "5" and "PlanError" in r["error"] for r in bad)
    assert "6 runs" in capsys.readouterr().out
