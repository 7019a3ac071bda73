"""Whole-process costs of `clustersim run` that are not simulation (issue 16): the BLAS thread pool at
start-up, the interpreter's final collections at exit, and trace arguments made once per operation."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest

from sim import cli
from sim.trace_args import annotate


def test_simulator_commands_ask_for_one_blas_thread():
    env: dict = {}
    cli._single_thread_blas(["topo", "--help"], env)
    assert env == {}                                 # other commands keep the library's default
    cli._single_thread_blas(["run", "--help"], env)
    assert env == {"OPENBLAS_NUM_THREADS": "1"}
    env = {"OPENBLAS_NUM_THREADS": "3"}              # the user's choice wins
    cli._single_thread_blas(["sweep"], env)
    assert env == {"OPENBLAS_NUM_THREADS": "3"}


def test_in_process_main_leaves_the_process_settings_alone(monkeypatch, capsys):
    monkeypatch.delenv("OPENBLAS_NUM_THREADS", raising=False)
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    capsys.readouterr()
    assert "OPENBLAS_NUM_THREADS" not in os.environ


def test_process_main_sets_one_blas_thread():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    code = ("import os, sys\nfrom sim import cli\nsys.argv = ['clustersim', 'run', '--help']\n"
            "try:\n    cli.main()\nexcept SystemExit:\n    pass\n"
            "sys.stderr.write(os.environ.get('OPENBLAS_NUM_THREADS', 'unset'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stderr == "1", done.stderr


def test_exit_freeze_runs_once_at_exit():
    code = ("import gc, os\n"
            "gc.freeze = lambda: os.write(1, b'freeze\\n')\n"     # counts the handler's calls at exit
            "from sim import cli\n"
            "cli._cheap_exit()\n"
            "cli._cheap_exit()\n"
            "os.write(1, b'end of script\\n')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == "end of script\nfreeze\n"


def test_process_exit_keeps_outputs_and_status(tmp_path):
    # the frozen exit must not lose output: stdout through a pipe, result files, the exit status
    out = tmp_path / "res"
    done = subprocess.run([sys.executable, "-m", "sim.cli", "run", "-m", "aicb-7", "--tp", "4", "--dp", "2",
                           "--global-batch", "2", "--seq-length", "512", "-n", "analytical", "-o", str(out),
                           "-q", "--no-charts", "--no-trace"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1].startswith("simulated in ")
    assert sorted(p.name for p in out.iterdir()) == ["EndToEnd.csv", "report.html", "summary.json", "summary.txt"]
    assert (out / "report.html").read_text().rstrip().endswith("</html>")
    bad = subprocess.run([sys.executable, "-m", "sim.cli", "run", "--tp", "x"], capture_output=True, text=True)
    assert bad.returncode == 2 and "clustersim run: error:" in bad.stderr


_EXIT_SCRIPT = """
import atexit, os, sys, threading, time
from sim import cli
out = sys.argv[1]
atexit.register(lambda: open(os.path.join(out, "atexit.txt"), "w").write("ran"))
if sys.argv[2] == "thread":      # a non-daemon thread still running when main() returns
    threading.Thread(target=lambda: (time.sleep(0.3), open(os.path.join(out, "thread.txt"), "w").write("done"))).start()
print("x" * 300_000)             # more than a pipe holds: flushed before the process ends
sys.argv = ["clustersim"] + sys.argv[3:]
sys.exit(cli.main())
"""
TINY = ["run", "-m", "aicb-7", "--tp", "4", "--dp", "2", "--global-batch", "2", "--seq-length", "512",
        "-n", "analytical", "-q", "--no-charts", "--no-trace"]


@pytest.mark.parametrize("thread", ["none", "thread"])
def test_process_exit_flushes_output_runs_atexit_and_keeps_the_status(tmp_path, thread):
    """main() without argv ends the process itself (cli._exit_now): stdout through a pipe complete,
    atexit handlers run, results written, main()'s status; a running non-daemon thread is waited for
    (the interpreter's own exit)."""
    for argv, status in ((TINY + ["-o", str(tmp_path / "res")], 0), (["run", "--tp", "x"], 2)):
        for f in ("atexit.txt", "thread.txt"):
            (tmp_path / f).unlink(missing_ok=True)
        done = subprocess.run([sys.executable, "-c", _EXIT_SCRIPT, str(tmp_path), thread, *argv],
                              capture_output=True, text=True)
        assert done.returncode == status, done.stderr
        lines = done.stdout.splitlines()
        assert lines[0] == "x" * 300_000
        assert (tmp_path / "atexit.txt").read_text() == "ran"
        assert (tmp_path / "thread.txt").exists() == (thread == "thread")
        if status == 0:
            assert lines[-1].startswith("simulated in ")
            assert (tmp_path / "res" / "report.html").read_text().rstrip().endswith("</html>")
        else:
            assert "clustersim run: error:" in done.stderr


_GC_SCRIPT = """
import gc, os, sys
from sim import cli, commands
seen = []
run_job = commands.run_job
def spy(*a, **k):
    seen.append(gc.isenabled())
    return run_job(*a, **k)
commands.run_job = spy
import atexit
atexit.register(lambda: os.write(2, f"gc {seen} {gc.isenabled()}\\n".encode()))
sys.argv = ["clustersim"] + sys.argv[1:]
sys.exit(cli.main())
"""


@pytest.mark.parametrize("network, off", [("analytical", True), ("flow", False)])
def test_process_run_on_the_analytical_backend_keeps_the_collector_off(tmp_path, network, off):
    """A whole-process `run -n analytical` turns the cyclic collector off for good (cli._collector_off_for);
    flow runs keep it; in-process callers of main(argv) always keep it."""
    argv = TINY[:TINY.index("-n")] + ["-n", network, "-q", "--no-charts", "--no-trace", "-o", str(tmp_path / "r")]
    done = subprocess.run([sys.executable, "-c", _GC_SCRIPT, *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert f"gc [{not off}] {not off}" in done.stderr
    assert gc.isenabled()
    assert cli.main(argv[:-1] + [str(tmp_path / "in")]) == 0
    assert gc.isenabled()


def test_analytical_run_of_a_simai_file_does_not_import_pyyaml(tmp_path, shared_dir):
    """The shipped GPU table is read without PyYAML (compute_db.gpus._simple_yaml): ~20 ms of start-up."""
    code = ("import atexit, os, sys\n"
            "atexit.register(lambda: os.write(2, f\"yaml loaded: {'yaml' in sys.modules}\\n\".encode()))\n"
            "from sim import cli\nsys.argv = ['clustersim'] + sys.argv[1:]\nsys.exit(cli.main())\n")
    micro = shared_dir / "data" / "simai_examples" / "microAllReduce.txt"
    done = subprocess.run([sys.executable, "-c", code, "run", "-w", str(micro), "-n", "analytical", "-q",
                           "-o", str(tmp_path / "r")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "yaml loaded: False" in done.stderr


def test_exit_now_leaves_the_exit_to_the_interpreter_while_another_thread_runs(monkeypatch):
    import threading
    monkeypatch.setattr(threading, "active_count", lambda: 2)
    monkeypatch.setattr(os, "_exit", lambda status: pytest.fail("os._exit with another thread running"))
    cli._exit_now(0)      # returns


class _Info:
    pass


class _Rec:
    """A stand-in for an engine handle (`info` is ignored: records with equal fields share one dict)."""
    fast = True
    peer_stage = -1

    def __init__(self, info, name: str, kind: str = "tp", stage: int = 0) -> None:
        self.info, self.name, self.kind, self.stage = info, name, kind, stage
        self.collective, self.size_bytes, self.group_size = "all_reduce", 1024, 2


class _Engine:
    def _groups_for(self, kind, stage):
        return [(0, 1)]


class _Op:
    is_comm = False
    kind, shape, dtype, flops, bytes, layer, variant = "gemm", {"m": 2}, "bf16", 8.0, 4.0, 0, "fwd"


@pytest.mark.parametrize("width", [7, 6])
def test_annotate_makes_arguments_once_per_operation(width):
    info, other = _Info(), _Info()
    a, b, c = _Rec(info, "ar"), _Rec(info, "ar"), _Rec(other, "ag", kind="dp", stage=-1)
    op = _Op()
    trace = [(0, "comm:tp", "ar", 0.0, 1.0, "comm", a), (0, "compute", "wait ar", 0.0, 1.0, "wait", a),
             (0, "comm:tp", "ar", 2.0, 1.0, "comm", b), (0, "compute", "wait ar", 2.0, 1.0, "wait", b),
             (0, "comm:dp", "ag", 3.0, 1.0, "comm", c), (0, "compute", "k", 4.0, 1.0, "fwd", op),
             (0, "compute", "host issue", 5.0, 0.1, "overhead", None)]
    if width == 6:    # entries without a reference field (host issue) keep working
        trace[-1] = trace[-1][:6]
    out = annotate(trace, {id(op): 1.0}, {id(op): "given"}, _Engine(), backend=None)
    assert [ev[:6] for ev in out] == [tuple(ev[:6]) for ev in trace]
    comm = {"collective": "all_reduce", "group": "tp", "group_size": 2, "size_bytes": 1024, "algorithm": "n/a",
            "protocol": "n/a", "timing": "estimate", "stage": 0}
    assert out[0][6] == comm and out[2][6] is out[0][6]
    assert out[1][6] == {"waits_for": "ar", "group": "tp"} and out[3][6] is out[1][6]
    assert out[4][6] == {"group": "dp"}      # a cross-stage kind's record (stage -1)
    assert out[5][6] == {"kind": "gemm", "shape": {"m": 2}, "dtype": "bf16", "flops": 8.0, "bytes": 4.0,
                         "provenance": "given", "time_alone_s": 1.0, "layer": 0, "variant": "fwd"}
    assert out[6][6]["cause"].startswith("kernel launch gap")


@pytest.mark.parametrize("mpi, ends", [(False, True), (True, False)])
def test_process_owner_ends_an_analytical_run_itself_unless_mpi4py_is_loaded(tmp_path, monkeypatch, mpi, ends):
    """main() without argv ends an analytical `run` with cli._exit_now, but not once mpi4py is imported
    (MPI is finalised at the interpreter's own exit, which os._exit would skip: `serve-search` under
    mpiexec then ends as an abnormal termination)."""
    class Ended(Exception):
        pass

    def fake_exit(status):
        raise Ended(status)

    monkeypatch.setattr(sys, "argv", ["clustersim", *TINY, "-o", str(tmp_path / "r")])
    monkeypatch.setattr(cli, "_exit_now", fake_exit)
    monkeypatch.setattr(cli, "_single_thread_blas", lambda *a: None)
    monkeypatch.setattr(cli, "_cheap_exit", lambda: None)
    if mpi:
        monkeypatch.setitem(sys.modules, "mpi4py", object())
    else:
        monkeypatch.delitem(sys.modules, "mpi4py", raising=False)
    try:
        if ends:
            with pytest.raises(Ended):
                cli.main()
        else:
            assert cli.main() == 0
    finally:
        gc.enable()
