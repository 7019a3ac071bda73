"""`clustersim run` reports the per-GPU memory peak against the GPU's HBM and warns when it does not fit."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from sim.analysis.memory import analyze_memory
from sim.cli import main
from sim.commands import build_inputs
from sim.memory_fit import SIMAI_NOTE, memory_fit

GiB = 2 ** 30
H100_HBM = 80 * GiB
WARNING = "warning: the plan does not fit in GPU memory: peak "

BIG = ["-m", "gpt3-175b", "--tp", "1", "--pp", "1", "--dp", "8", "--global-batch", "8", "-n", "analytical", "-q"]
SMALL = ["-m", "aicb-7", "--tp", "4", "--pp", "2", "--dp", "2", "--global-batch", "4", "--seq-length", "1024",
         "--sp", "-q"]


def _expected(job_plan: dict, model: str):
    """analyze_memory (tested by its own formula tests) on the same model/plan the run builds."""
    workload, _, _ = build_inputs({"model": model, "plan": job_plan, "fabric": None})
    return analyze_memory(workload.model, workload.plan, workload)


def _run(tmp_path, argv, capsys):
    out = tmp_path / "res"
    assert main(["run", *argv, "-o", str(out), "--no-charts", "--no-trace"]) == 0
    cap = capsys.readouterr()
    summary = json.loads((out / "summary.json").read_text())
    return summary, (out / "summary.txt").read_text(), cap


def test_gpt3_175b_without_model_parallelism_does_not_fit(tmp_path, capsys):
    summary, text, cap = _run(tmp_path, BIG, capsys)
    mem = summary["memory"]
    assert mem["fits"] is False
    assert mem["gpu"] == "H100" and mem["gpu_hbm_bytes"] == H100_HBM
    # unsharded mixed-precision Adam states alone: 18 B per parameter of ~175e9 parameters
    assert mem["peak_reserved_bytes"] > 170e9 * 18
    assert mem["peak_allocated_bytes"] <= mem["peak_reserved_bytes"]
    ref = _expected({"tp": 1, "pp": 1, "dp": 8, "global_batch_size": 8}, "gpt3-175b")
    assert mem["peak_reserved_bytes"] == ref.peak_reserved_bytes
    assert mem["peak_allocated_bytes"] == ref.peak.peak_allocated_bytes
    assert mem["peak_path"] == str(ref.peak.peak_path) and mem["peak_stage"] == 0
    warn = [ln for ln in cap.err.splitlines() if ln.startswith(WARNING)]
    assert len(warn) == 1
    assert f"{(ref.peak_reserved_bytes + ref.cuda_context_bytes) / GiB:.2f} GiB per GPU" in warn[0]
    assert "> 80.00 GiB on H100" in warn[0]
    assert "H100 has 80.00 GiB -> DOES NOT FIT" in text
    assert summary["iteration_time_s"] > 0          # warned, not failed


def test_small_plan_fits_and_reports_the_peak_stage(tmp_path, capsys):
    summary, text, cap = _run(tmp_path, SMALL, capsys)
    mem = summary["memory"]
    assert mem["fits"] is True
    assert WARNING not in cap.err
    ref = _expected({"tp": 4, "pp": 2, "dp": 2, "global_batch_size": 4, "seq_length": 1024,
                     "sequence_parallel": True}, "aicb-7")
    assert mem["peak_reserved_bytes"] == ref.peak_reserved_bytes
    assert mem["peak_allocated_bytes"] == ref.peak.peak_allocated_bytes
    assert mem["cuda_context_bytes"] == ref.cuda_context_bytes
    # 1F1B: stage 0 holds the most in-flight micro-batches, so it is the stage with the peak
    assert mem["peak_stage"] == 0 == ref.peak.stage
    assert mem["peak_path"].startswith("stage 0 ")
    assert 1 * GiB < mem["peak_reserved_bytes"] < H100_HBM
    line = next(ln for ln in text.splitlines() if ln.startswith("memory per GPU (peak)"))
    assert f"{ref.peak_reserved_bytes / GiB:.2f} GiB reserved" in line and line.endswith("H100 has 80.00 GiB -> fits")
    assert f"  peak at                   {mem['peak_path']}" in text.splitlines()


def test_simai_workload_memory_is_not_applicable(shared_dir, tmp_path, capsys):
    f = shared_dir / "data" / "simai_examples" / "microAllReduce.txt"
    summary, text, cap = _run(tmp_path, ["-w", str(f), "-q"], capsys)
    mem = summary["memory"]
    assert mem["fits"] is None and mem["peak_reserved_bytes"] is None and mem["peak_path"] is None
    assert mem["note"] == SIMAI_NOTE == "n/a: imported SimAI workload has no model dimensions"
    assert "memory per GPU                         n/a     (imported SimAI workload has no model dimensions)" in text
    assert WARNING not in cap.err


@pytest.mark.parametrize("spare_bytes, fits", [(0, True), (-1, False)])
def test_fit_counts_reserved_plus_cuda_context(spare_bytes, fits):
    workload, _, _ = build_inputs({"model": "aicb-7", "plan": {"tp": 4, "dp": 1, "global_batch_size": 1,
                                                               "seq_length": 1024}, "fabric": None})
    ref = analyze_memory(workload.model, workload.plan, workload)
    cap = ref.peak_reserved_bytes + ref.cuda_context_bytes + spare_bytes
    mem = memory_fit(workload, SimpleNamespace(name="X", hbm_bytes=cap))
    assert mem["fits"] is fits and mem["gpu_hbm_bytes"] == cap
