"""`clustersim topo` CLI and scripts/gen_topo.sh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cli import main

REPO = Path(__file__).resolve().parents[2]


def test_simai_flags_write_simai_file_names(tmp_path, shared_dir, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["topo", "-topo", "AlibabaHPN", "--dp", "-g", "128"]) == 0
    assert main(["topo", "DCN+", "--dt", "-g", "128"]) == 0
    assert main(["topo", "--ro", "-g", "16", "-gt", "H20", "-bw", "200Gbps", "-nvbw", "2400Gbps"]) == 0
    golden = shared_dir / "data" / "simai_topologies"
    for name in ("AlibabaHPN_128g_8gps_DualToR_DualPlane_200Gbps_H100", "DCN+DualToR_128g_8gps_200Gbps_H100",
                 "Rail_Opti_SingleToR_16g_8gps_200Gbps_H20"):
        assert (tmp_path / name).read_bytes() == (golden / name).read_bytes()
    err = capsys.readouterr().err
    assert "warning: ASW count corrected from 240 to 16" in err


def test_info_and_draw(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert main(["topo", "multi-pod", "-g", "4096", "-npa", "16", "-psn", "16", "-app", "32",
                 "--core-oversubscription", "2", "-o", "mp.txt"]) == 0
    capsys.readouterr()
    assert main(["topo", "info", "mp.txt"]) == 0
    out = capsys.readouterr().out
    assert "psw 2:1" in out and "= 0.50" in out and "valid        yes" in out
    assert main(["topo", "draw", "spectrum-x", "-g", "16", "-o", "x.png"]) == 0
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("argv,needle", [
    (["topo", "nosuch"], "template: unknown template 'nosuch'"),
    (["topo", "Spectrum-X", "-g", "100"], "-g: 100 GPUs is not a multiple of -gps 8"),
    (["topo", "Spectrum-X", "-g", "16", "-bw", "400Gbs"], "-bw: bad rate '400Gbs'"),
    (["topo", "Spectrum-X", "-g", "8192"], "pod capacity exceeded"),
    (["topo", "info", "missing.txt"], "missing.txt: no such file"),
])
def test_bad_input_one_line_exit_2(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1


def test_malformed_file_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "t.txt").write_text("4 2 1 1 1 H100\n2 3\n0 2 400Gbps\n")
    assert main(["topo", "info", "t.txt"]) == 2
    assert "t.txt:3:" in capsys.readouterr().err


def test_gen_topo_script(tmp_path):
    script = REPO / "scripts" / "gen_topo.sh"
    env = dict(os.environ, PYTHON=sys.executable)
    res = subprocess.run(["bash", str(script), "-topo", "Spectrum-X", "-g", "8", "-psn", "1"], cwd=tmp_path,
                         capture_output=True, text=True, env=env, timeout=60)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "Spectrum-X_8g_8gps_400Gbps_H100").read_text().startswith("18 8 1 9 24 H100\n")


@pytest.mark.parametrize("argv,needle", [
    # regressions found in the CLI audit
    (["topo", "Spectrum-X", "-g", "16", "-er", "2"], "-er: error rate must be between 0 and 1"),
    (["topo", "Spectrum-X", "-g", "16", "-o", "missing_dir/"], "does not exist"),
    (["topo", "Spectrum-X", "-g", "16", "-o", "afile/x.txt"], "afile is not a directory"),
])
def test_bad_output_and_error_rate_exit_2(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert needle in err and len(err.splitlines()) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_draw_and_write_into_a_directory_with_the_users_file_mode(tmp_path, monkeypatch, capsys):
    # regression: `topo draw -o .` raised a traceback; files were created with mode 0600
    monkeypatch.chdir(tmp_path)
    old = os.umask(0o022)
    try:
        assert main(["topo", "draw", "spectrum-x", "-g", "16", "-o", "."]) == 0
        assert main(["topo", "spectrum-x", "-g", "16", "-o", "."]) == 0
    finally:
        os.umask(old)
    png, txt = tmp_path / "topology.png", tmp_path / "Spectrum-X_16g_8gps_400Gbps_H100"
    assert png.read_bytes()[:4] == b"\x89PNG" and txt.read_text().startswith("90 8 2 ")
    assert (png.stat().st_mode & 0o777) == 0o644 and (txt.stat().st_mode & 0o777) == 0o644


def test_file_or_template_may_follow_flags(tmp_path, monkeypatch, capsys):
    # regression: `topo info --json FILE` / `topo draw -o x.png TEMPLATE` failed with "unrecognized arguments"
    monkeypatch.chdir(tmp_path)
    assert main(["topo", "spectrum-x", "-g", "16", "-o", "t.txt"]) == 0
    capsys.readouterr()
    assert main(["topo", "info", "--json", "t.txt"]) == 0
    assert '"gpus": 16' in capsys.readouterr().out
    assert main(["topo", "draw", "-o", "x.png", "spectrum-x", "-g", "16"]) == 0
    assert (tmp_path / "x.png").read_bytes()[:4] == b"\x89PNG"
    with pytest.raises(SystemExit) as exc:   # unknown options are still rejected by argparse
        main(["topo", "info", "--bogus", "t.txt"])
    assert exc.value.code == 2


@pytest.mark.parametrize("argv,needle", [
    # regressions: a ZeroDivisionError traceback, misleading flags, zero values silently accepted
    (["topo", "multi-pod", "-g", "1024", "--core-radix", "0"], "--core-radix: must be >= 1, got 0"),
    (["topo", "multi-pod", "-g", "1024", "--pods", "0"], "--pods: must be >= 1, got 0"),
    (["topo", "multi-pod", "-g", "1024", "--segments-per-pod", "0"], "--segments-per-pod: must be >= 1, got 0"),
    (["topo", "fat-tree", "-k", "3"], "-k: a k-ary fat-tree needs an even k >= 2, got 3"),
    (["topo", "spectrum-x", "-g", "16", "--nvswitch-chips", "0"], "--nvswitch-chips: must be >= 1, got 0"),
    (["topo", "spectrum-x", "-g", "16", "-bw", "0Gbps"], "-bw: bandwidth must be > 0, got '0Gbps'"),
    (["topo", "spectrum-x", "-g", "16", "-nvbw", "0Gbps"], "-nvbw: bandwidth must be > 0"),
    (["topo", "spectrum-x", "-g", "16", "--nics", "--pcie-bw", "abc"], "--pcie-bw: bad rate 'abc'"),
    (["topo", "spectrum-x", "-g", "16", "--nics", "--gpus-per-nic", "3"], "--gpus-per-nic: 3 must divide"),
    (["topo", "spectrum-x", "-g", "16", "--nvlink-domain", "3"], "--nvlink-domain: 3 is not a multiple of -gps 8"),
])
def test_bad_template_parameters_name_the_cli_flag(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err == f"clustersim: error: {err.split('error: ', 1)[1]}" and needle in err and len(err.splitlines()) == 1
    assert list(tmp_path.iterdir()) == []
