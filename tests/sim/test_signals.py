"""SIGTERM is handled like Ctrl-C: nothing half-written survives; a killed run's temp folders are removed
by the next run into the same output."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from sim.report import atomic_dir, remove_stale_temps


def test_sigterm_during_the_results_write_leaves_nothing(tmp_path):
    out = tmp_path / "res"
    code = textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from sim import cli
        from sim.report import atomic_dir
        signal.signal(signal.SIGTERM, cli._on_sigterm)
        def write(tmp):
            (tmp / "summary.json").write_text("{{partial")
            os.kill(os.getpid(), signal.SIGTERM)
            (tmp / "never.txt").write_text("x")
        try:
            atomic_dir(Path({str(out)!r}), write, owned=("summary.json",))
        except cli.Terminated:
            print("terminated")
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "terminated", r.stderr
    assert sorted(os.listdir(tmp_path)) == []


def test_main_turns_sigterm_into_exit_143_and_one_line(tmp_path):
    code = textwrap.dedent("""
        import os, signal, sys
        from sim import cli, commands
        def fake(args):
            os.kill(os.getpid(), signal.SIGTERM)
        commands.cmd_run = fake
        orig = commands.register
        def register(sub):
            orig(sub)
            sub.choices["run"].set_defaults(func=fake)
        commands.register = register
        sys.exit(cli.main(["run"]))
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 143
    assert r.stderr == "clustersim: terminated (nothing half-written was kept)\n"


def test_stale_temp_folders_of_a_dead_run_are_removed_live_ones_kept(tmp_path):
    out = tmp_path / "res"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = [tmp_path / f".res.tmp-{dead.pid}-abc", tmp_path / f".res.old-{dead.pid}-x", tmp_path / ".res.tmp-q1w2"]
    live = tmp_path / f".res.tmp-{os.getpid()}-zz"
    other = tmp_path / ".resx.tmp-1-a"   # another output's folder
    for d in [*stale, live, other]:
        d.mkdir()
        (d / "f").write_text("x")
    remove_stale_temps(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([live.name, other.name])


def test_atomic_dir_cleans_a_killed_runs_leftovers(tmp_path):
    out = tmp_path / "res"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    (tmp_path / f".res.tmp-{dead.pid}-abc").mkdir()
    atomic_dir(out, lambda t: (t / "summary.json").write_text("{}"), owned=("summary.json",))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["res"]
    assert (out / "summary.json").read_text() == "{}"
