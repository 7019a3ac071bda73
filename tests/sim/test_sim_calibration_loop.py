"""The calibration loop from the CLI: your kernel DB (--db), GPU file (--gpu-file) and network
calibration (--net-calibration) reach the simulation; --explain says what the answer rests on."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.commands import build_inputs, run_job

SINGLE = {"model": "llama3-8b", "plan": {"tp": 1, "dp": 1, "global_batch_size": 2, "micro_batch_size": 1,
                                         "seq_length": 1024}, "fabric": "spectrum-x", "gpu": "H100"}
TP8 = {"model": "aicb-7", "plan": {"tp": 8, "dp": 1, "global_batch_size": 1, "micro_batch_size": 1,
                                   "seq_length": 2048, "sequence_parallel": True}, "fabric": "spectrum-x"}


def _user_db(tmp_path, name: str, op, time_s: float):
    from compute_db.keys import key_of
    from compute_db.store import KernelRow, write_fresh
    path = tmp_path / name
    write_fresh(path, [KernelRow("H100", key_of(op), time_s, time_s, time_s, 0.0, 20, "measured", "test-bench")])
    return path


def test_slower_measured_gemm_in_a_user_db_gives_a_longer_iteration(tmp_path):
    from compute_db import open_db
    w, _, _ = build_inputs(SINGLE)
    fc1 = next(op for op in w.stages[0].chunks[0].forward if op.name == "mlp_fc1")
    shipped = open_db().lookup(fc1, "H100").time_s
    same = _user_db(tmp_path, "same.sqlite", fc1, shipped)
    slow = _user_db(tmp_path, "slow.sqlite", fc1, 10 * shipped)
    kt = open_db(slow).lookup(fc1, "H100")
    assert kt.source == "measured" and kt.time_s == pytest.approx(10 * shipped)
    base = run_job({**SINGLE, "db": str(same)})
    longer = run_job({**SINGLE, "db": str(slow)})
    # one forward per layer and micro-batch, full recompute off: 32 layers x 2 micro-batches
    n = 32 * 2
    assert longer.iteration_time_s > base.iteration_time_s + 0.99 * n * 9 * shipped
    assert longer.compute_sources.get("measured", 0) > base.compute_sources.get("measured", 0)
    assert longer.meta["compute_db"] == str(slow)


def test_db_flag_reaches_run_compare_and_sweep(tmp_path, capsys):
    w, _, _ = build_inputs(SINGLE)
    fc1 = next(op for op in w.stages[0].chunks[0].forward if op.name == "mlp_fc1")
    slow = _user_db(tmp_path, "slow.sqlite", fc1, 1.0)          # one second per fc1: unmistakable
    args = ["-m", "llama3-8b", "--tp", "1", "--dp", "1", "--global-batch", "2", "--seq-length", "1024", "-q"]
    assert main(["run", *args, "--db", str(slow), "--json", "-o", "-"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["iteration_time_s"] > 64.0 and data["meta"]["compute_db"] == str(slow)
    assert main(["compare", *args, "--db", str(slow), "--fabric", "spectrum-x", "-o", "-"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("spectrum-x"))
    assert float(row.split()[1]) > 64.0                      # the iteration column: the user's slow fc1
    out = tmp_path / "sweep.csv"
    assert main(["sweep", *args[:-1], "--db", str(slow), "--grid", "micro_batch_size=1", "-j", "1",
                 "-o", str(out)]) == 0
    import csv
    row = next(csv.DictReader(out.open()))
    assert float(row["iteration_time_s"]) > 64.0 and not row["error"]


def test_gpu_file_adds_a_gpu(tmp_path, capsys):
    gpu_file = tmp_path / "gpus.yaml"
    gpu_file.write_text("gpus:\n  MYGPU:\n    peak_tflops: {bf16: 500}\n    hbm_GiB: 96\n    hbm_GBps: 2000\n"
                        "    nvlink_GBps: 300\n    nic_Gbps: 400\n    similar_to: [H100]\n")
    args = ["run", "-m", "llama3-8b", "--tp", "1", "--dp", "1", "--global-batch", "1", "--seq-length", "1024",
            "--gpu", "MYGPU", "-q", "-o", "-"]
    assert main(args + ["--gpu-file", str(gpu_file), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["meta"]["gpu"] == "MYGPU" and data["memory"]["gpu_hbm_bytes"] == 96 * 2**30
    assert main(args) == 2                                                   # unknown without the file
    assert "MYGPU" in capsys.readouterr().err


def test_slower_fitted_network_gives_more_exposed_communication(tmp_path, capsys):
    path = tmp_path / "net.yaml"      # the file `clustersim collective calibrate` writes
    path.write_text("format: clustersim-net-calibration/1\nname: slow-nvlink\nconstants:\n"
                    "  nvlink_efficiency: 0.2\n  nvls_efficiency: 0.2\n")
    base = run_job(TP8)
    slow = run_job({**TP8, "net_calibration": str(path)})
    assert slow.exposed_comm_s["TP"] > 2 * base.exposed_comm_s["TP"] > 0
    assert slow.compute_s == pytest.approx(base.compute_s, rel=0.05)
    assert slow.meta["net_calibration"] and base.meta["net_calibration"] is None
    args = ["run", "-m", "aicb-7", "--tp", "8", "--dp", "1", "--global-batch", "1", "--seq-length", "2048", "--sp",
            "-q", "-o", "-", "--explain"]
    assert main(args + ["--net-calibration", str(path)]) == 0
    out = capsys.readouterr().out
    assert "user calibration" in out and ("slow-nvlink" in out or str(path) in out)


def test_bad_net_calibration_is_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.yaml"
    bad.write_text("format: nonsense\n")
    assert main(["run", "-m", "aicb-7", "--tp", "8", "--dp", "1", "--global-batch", "1", "--seq-length", "1024",
                 "--sp", "-q", "-o", "-", "--net-calibration", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clustersim: error:") and "bad.yaml" in err[0]


def test_explain_shares_sum_to_one(capsys):
    assert main(["run", "-m", "aicb-7", "--tp", "4", "--pp", "2", "--dp", "1", "--global-batch", "4",
                 "--seq-length", "1024", "--sp", "-q", "-o", "-", "--explain", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    ex = data["explain"]
    total = (ex["kernels"]["share"] + ex["overlap_slowdown"]["share"] + ex["exposed_communication"]["share"]
             + ex["overhead"]["share"] + ex["bubble"]["share"])
    assert total == pytest.approx(1.0, rel=1e-9)
    fams = ex["kernels"]["families"]
    assert "gemm" in fams and sum(f["share"] for f in fams.values()) == pytest.approx(ex["kernels"]["share"])
    for f in fams.values():
        assert sum(f["provenance"].values()) == pytest.approx(f["share"])
    assert "netsim built-in constants" in ex["exposed_communication"]["basis"]
    assert "sim.overheads" in ex["overhead"]["basis"] and "sim.contention" in ex["overlap_slowdown"]["basis"]
    assert main(["run", "-m", "aicb-7", "--tp", "4", "--pp", "2", "--dp", "1", "--global-batch", "4",
                 "--seq-length", "1024", "--sp", "-q", "-o", "-", "--explain"]) == 0
    text = capsys.readouterr().out
    assert "what this answer rests on" in text and "launch/host overhead" in text
