"""Edge cases of `clustersim run/compare/sweep` found by auditing: bad flags and output paths give one
line and exit 2, and a user's directory is never deleted."""

from __future__ import annotations

import pytest

from sim.cli import main

SMALL = ["-m", "aicb-7", "--tp", "4", "--pp", "2", "--dp", "2", "--global-batch", "4", "--seq-length", "1024",
         "--sp", "-q", "-n", "analytical", "--no-charts", "--no-trace"]


def _err(capsys) -> str:
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("clustersim")]
    assert err and err[-1].startswith("clustersim: error: ")
    return err[-1]


def test_bad_gpus_per_server_is_one_line(tmp_path, capsys):
    assert main(["run", *SMALL, "-t", "spectrum-x:gpus_per_server=abc", "-o", "-"]) == 2
    assert "gpus_per_server must be a positive integer (got 'abc')" in _err(capsys)


def test_user_directory_with_other_files_is_not_replaced(tmp_path, capsys):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_text("precious")
    assert main(["run", *SMALL, "-o", str(out)]) == 2
    assert "holds files clustersim did not write (notes.txt)" in _err(capsys)
    assert (out / "notes.txt").read_text() == "precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine"]


def test_previous_results_directory_is_replaced(tmp_path):
    out = tmp_path / "res"
    assert main(["run", *SMALL, "-o", str(out)]) == 0
    assert main(["run", *SMALL, "-o", str(out)]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["EndToEnd.csv", "report.html", "summary.json", "summary.txt"]
    # compare does not replace a run's results (nor run a compare's)
    assert main(["compare", *SMALL[:-2], "-t", "spectrum-x", "-o", str(out)]) == 2
    assert (out / "summary.json").exists()


def test_output_below_a_file_or_cwd_is_one_line(tmp_path, capsys, monkeypatch):
    (tmp_path / "afile").write_text("x")
    assert main(["run", *SMALL, "-o", str(tmp_path / "afile" / "sub")]) == 2
    assert "afile is not a directory" in _err(capsys)
    monkeypatch.chdir(tmp_path)
    assert main(["run", *SMALL, "-o", "."]) == 2
    assert "cannot replace this directory" in _err(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_simai_file_metrics_are_unknown_not_zero(shared_dir, tmp_path, capsys):
    """A SimAI file carries kernel times only: MFU, TFLOP/s and tokens/s are n/a / null, never 0 or 0.5."""
    import csv
    import json
    f = shared_dir / "data" / "simai_examples" / "microAllReduce.txt"
    out = tmp_path / "cmp"
    assert main(["compare", "-w", str(f), "-t", "spectrum-x", "-t", "dcn+", "-q", "-o", str(out)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[2].split()[-2:] == ["n/a", "1.000x"]
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert {(r["mfu"], r["tflops_per_gpu"], r["tokens_per_s_per_gpu"]) for r in rows} == {("n/a", "n/a", "n/a")}
    run = tmp_path / "run"
    assert main(["run", "-w", str(f), "-q", "--no-charts", "--no-trace", "-o", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert (summary["mfu"], summary["tflops_per_gpu"], summary["tokens_per_s_per_gpu"]) == (None, None, None)


def test_sweep_usage_errors_before_running(tmp_path, capsys):
    base = ["sweep", "-m", "aicb-7", "-n", "analytical", "-j", "1"]
    assert main([*base, "--grid", "foo=1,2", "-o", str(tmp_path / "a.csv")]) == 2
    assert "plan field 'foo' unknown" in _err(capsys)
    assert main([*base, "--grid", "tp=x", "-o", str(tmp_path / "a.csv")]) == 2
    assert "plan field 'tp': expected an integer, got 'x'" in _err(capsys)
    assert main([*base, "--grid", "tp=2", "-o", str(tmp_path)]) == 2
    assert f"{tmp_path}: is a directory" in _err(capsys)
    (tmp_path / "afile").write_text("x")
    assert main([*base, "--grid", "tp=2", "-o", str(tmp_path / "afile" / "s.csv")]) == 2
    assert "afile is not a directory" in _err(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def _script(name: str, *args: str, cwd=None):
    import shutil
    import subprocess
    from pathlib import Path

    import pytest
    if shutil.which("clustersim") is None:
        pytest.skip("clustersim console script not installed")
    script = Path(__file__).resolve().parents[2] / "scripts" / name
    return subprocess.run(["bash", str(script), *args], capture_output=True, text=True, cwd=cwd, timeout=120)


def test_scripts_missing_flag_value_and_help():
    for name, flag in (("run.sh", "-w"), ("run.sh", "-g_p_s"), ("compare.sh", "-o")):
        r = _script(name, flag)
        err = r.stderr.strip()
        assert r.returncode == 2 and err.startswith(f"{name}: error:") and flag in err and "\n" not in err
    r = _script("run.sh", "--help")
    assert r.returncode == 0 and "SimAI flags translated" in r.stdout


def test_run_sh_documented_simai_moe_example(shared_dir, tmp_path):
    """docs: `scripts/run.sh -w workload_analytical.txt -g 9216 -g_p_s 8 -r test- --analytical` needs
    more GPUs than one Spectrum-X pod, so -g_p_s must not force the single-pod template."""
    f = shared_dir / "data" / "simai_examples" / "workload_analytical.txt"
    r = _script("run.sh", "-w", str(f), "-g", "9216", "-g_p_s", "8", "-r", "test-", "--analytical", "-q",
                "--no-charts", "--no-trace", "-o", "res", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert (tmp_path / "res" / "EndToEnd.csv").read_text().splitlines()[1].startswith("test-, ")


def test_built_in_example_honours_gpu_type(capsys):
    assert main(["run", "--gpu-type", "A100", "-n", "analytical", "-q", "-o", "-"]) == 0
    cap = capsys.readouterr()
    assert "| 32 x A100-80GB |" in cap.out and "32 x H100" not in cap.err


def test_dp_and_world_size_must_agree(capsys):
    assert main(["run", "-m", "llama3-8b", "--world-size", "8", "--tp", "2", "--dp", "2", "-o", "-"]) == 2
    assert "dp=2 x tp*pp*cp=2 != world_size=8" in _err(capsys)


def test_trace_slices_of_one_thread_never_overlap(tmp_path):
    """Back-to-back kernels used to overlap by a rounding nanosecond (ts and dur rounded separately),
    which Perfetto reports as mis-nested slices."""
    import json
    from collections import defaultdict
    out = tmp_path / "r"
    args = [a for a in SMALL if a not in ("--no-trace",)]
    assert main(["run", *args, "-o", str(out)]) == 0
    trace = json.loads((out / "trace.json").read_text())
    threads = defaultdict(list)
    for e in trace["traceEvents"]:
        assert e["ph"] in ("X", "M", "s", "f")   # slices, metadata, send -> receive flow arrows
        if e["ph"] == "X":
            assert e["dur"] >= 0 and e["ts"] >= 0
            threads[(e["pid"], e["tid"])].append((round(e["ts"] * 1000), round((e["ts"] + e["dur"]) * 1000)))
    assert len(threads) >= 4
    for evs in threads.values():
        evs.sort()
        assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(evs, evs[1:]))


def test_compare_labels_gpu_when_fabrics_differ_in_gpu(shared_dir, capsys):
    topo_dir = shared_dir / "data" / "simai_topologies"
    a100, h100 = topo_dir / "Spectrum-X_128g_8gps_100Gbps_A100", topo_dir / "Spectrum-X_128g_8gps_400Gbps_H100"
    assert main(["compare", *SMALL[:-2], "-t", str(a100), "-t", str(h100), "-o", "-"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2].startswith(f"{a100.name} | A100-80GB ") and lines[3].startswith(f"{h100.name} | H100 ")


@pytest.mark.parametrize("argv, needle", [
    (["run", "--network", "quantum"], "invalid choice: 'quantum'"),
    (["topo", "-g", "x"], "invalid int value: 'x'"),
    (["workload", "--tp"], "expected one argument"),
    (["compute-db", "lookup", "--kind"], "expected one argument"),
    (["bogus"], "invalid choice: 'bogus'"),
])
def test_argparse_usage_errors_are_one_line(argv, needle, capsys):
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and needle in err and err.startswith("clustersim")


def test_atomic_write_gives_the_usual_file_mode(tmp_path):
    import os

    from sim.outpath import atomic_write
    mask = os.umask(0o022)
    try:
        atomic_write(tmp_path / "a.csv", b"x\n")
    finally:
        os.umask(mask)
    assert (tmp_path / "a.csv").read_bytes() == b"x\n"
    assert (tmp_path / "a.csv").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["a.csv"]      # no temporary left behind
