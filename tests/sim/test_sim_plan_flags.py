"""Plan fields of published runs reach the plan from every command's flags and from plan files."""

from __future__ import annotations

import json

import pytest

from sim.cli import build_parser, main
from sim.commands import _job_from_args, build_inputs

BASE = ["-m", "llama3-8b", "--global-batch", "16", "--seq-length", "1024"]


def _plan(*flags):
    args = build_parser().parse_args(["run", *BASE, *flags])
    workload, _, _ = build_inputs(_job_from_args(args))
    return workload.plan


def test_run_flags_reach_the_plan():
    p = _plan("--pp", "4", "--vpp", "2", "--first-stage-layers", "6", "--last-stage-layers", "6",
              "--dp", "2", "--no-dp-overlap", "--grad-reduce-dtype", "bf16", "--no-flash-attn",
              "--use-distributed-optimizer")
    assert (p.pp, p.vpp, p.num_layers_first_stage, p.num_layers_last_stage) == (4, 2, 6, 6)
    assert (p.overlap_grad_reduce, p.overlap_param_gather, p.grad_reduce_dtype, p.flash_attention) == \
        (False, False, "bf16", False)
    p = _plan("--pp", "2", "--vpp", "2", "--overlap-p2p-comm", "--dtype", "fp16", "--no-overlap-param-gather")
    assert p.overlap_p2p_comm and p.dtype == "fp16" and p.overlap_grad_reduce and not p.overlap_param_gather
    assert _plan().flash_attention and _plan().overlap_grad_reduce and _plan().grad_reduce_dtype == "auto"


def test_uneven_vpp_run_end_to_end(capsys):
    assert main(["run", *BASE, "--pp", "4", "--vpp", "2", "--first-stage-layers", "6", "--last-stage-layers", "6",
                 "-n", "analytical", "-q", "-o", "-", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["meta"]["schedule"] == "interleaved" and data["iteration_time_s"] > 0


@pytest.mark.parametrize("flags,msg", [
    (["--pp", "4", "--vpp", "2", "--first-stage-layers", "5", "--last-stage-layers", "7"],
     "plan.num_layers_first_stage: must be divisible by vpp"),
    (["--overlap-p2p-comm"], "plan.overlap_p2p_comm: only the interleaved schedule"),
    (["--use-distributed-optimizer", "--no-overlap-grad-reduce"], "plan.overlap_param_gather: needs"),
    (["--grad-reduce-dtype", "fp16"], "plan.grad_reduce_dtype: 16-bit gradients"),
    (["--no-dp-overlap", "--overlap-grad-reduce"], "--no-dp-overlap contradicts"),
])
def test_invalid_combinations_are_one_line(flags, msg, capsys):
    assert main(["run", *BASE, *flags, "-q", "-o", "-"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and msg in err[0]


def test_plan_file_carries_the_fields(tmp_path):
    f = tmp_path / "plan.yaml"
    f.write_text("tp: 1\npp: 4\nvpp: 2\ndp: 2\nglobal_batch_size: 8\nseq_length: 1024\n"
                 "grad_reduce_dtype: fp32\noverlap_grad_reduce: false\noverlap_param_gather: false\n"
                 "overlap_p2p_comm: true\nflash_attention: false\nnum_layers_first_stage: 8\n"
                 "num_layers_last_stage: 8\n")
    args = build_parser().parse_args(["run", "-m", "llama3-8b", "--plan-file", str(f)])
    p = build_inputs(_job_from_args(args))[0].plan
    assert (p.grad_reduce_dtype, p.overlap_grad_reduce, p.overlap_p2p_comm, p.flash_attention,
            p.num_layers_first_stage) == ("fp32", False, True, False, 8)
    bad = tmp_path / "bad.json"
    bad.write_text('{"tp": 1, "overlap_grad_reduce": "no"}')
    from workload_gen.config_io import load_plan
    from workload_gen.errors import ConfigFileError
    with pytest.raises(ConfigFileError, match="key 'overlap_grad_reduce': expected true or false"):
        load_plan(bad)


def test_sweep_grid_over_the_new_fields(tmp_path):
    out = tmp_path / "s.csv"
    assert main(["sweep", *BASE, "--dp", "2", "--use-distributed-optimizer", "-n", "analytical",
                 "--grid", "overlap_grad_reduce=true,false", "--grid", "overlap_param_gather=false",
                 "-j", "1", "-o", str(out)]) == 0
    import csv
    rows = list(csv.DictReader(out.open()))
    assert [r["overlap_grad_reduce"] for r in rows] == ["true", "false"] and not any(r["error"] for r in rows)
    assert float(rows[1]["exposed_DP_s"]) > float(rows[0]["exposed_DP_s"])
    assert all(float(r["overhead_s"]) > 0 for r in rows)


def test_workload_memory_and_search_flags(tmp_path, capsys):
    assert main(["workload", "llama3-8b", "--world-size", "8", "--gbs", "8", "--dtype", "fp16",
                 "--no-dp-overlap", "--accumulate-allreduce-grads-in-fp32"]) == 0
    out = capsys.readouterr().out
    assert "grads fp32, no DP overlap" in out
    assert main(["memory", "--model", "llama3-8b", "--world-size", "8", "--gbs", "8", "--dtype", "fp16",
                 "--grad-reduce-dtype", "fp16"]) == 0
    fp16 = capsys.readouterr().out
    assert main(["memory", "--model", "llama3-8b", "--world-size", "8", "--gbs", "8", "--dtype", "fp16",
                 "--grad-reduce-dtype", "fp32"]) == 0
    fp32 = capsys.readouterr().out

    def grads(text):
        return float(text.splitlines()[2].split()[2])
    assert grads(fp32) == pytest.approx(2 * grads(fp16), rel=1e-2)     # 4 vs 2 bytes of main grad
    d = tmp_path / "s"
    assert main(["search", "--model", "llama3-8b", "--world-size", "8", "--gbs", "8", "--seq", "1024",
                 "--tp", "1", "--pp", "2", "--vpp", "1", "--cp", "1", "--mbs", "1", "--recompute", "none",
                 "--optimizer", "distributed", "--no-flash", "--no-dp-overlap", "--grad-reduce-dtype", "fp32",
                 "--topology", "none", "-o", str(d)]) == 0
    import csv
    rows = list(csv.DictReader((d / "ranked.csv").open()))
    assert rows and all(r["flash_attention"] == "False" and r["overlap_grad_reduce"] == "False"
                        and r["grad_reduce_dtype"] == "fp32" for r in rows)
