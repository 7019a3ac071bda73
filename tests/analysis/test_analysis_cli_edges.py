"""`clustersim memory` / `search` output paths that cannot be written: one line, exit 2, before any work."""

from __future__ import annotations

from sim.cli import main

MEM = ["memory", "--model", "llama3-8b", "--world-size", "8", "--tp", "2", "--gbs", "8", "--seq", "2048"]
SEARCH = ["search", "--model", "llama3-8b", "--world-size", "8", "--gbs", "8", "--seq", "2048", "--tp", "2",
          "--pp", "1", "--cp", "1", "--mbs", "1", "--no-confirm"]


def _err(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clustersim: error: ")
    return err[0]


def test_memory_json_below_a_file_or_into_a_directory(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main([*MEM, "--json", str(tmp_path / "afile" / "m.json")]) == 2
    assert "afile is not a directory" in _err(capsys)
    assert main([*MEM, "--json", str(tmp_path)]) == 2
    assert "is a directory; give a file name" in _err(capsys)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_search_out_is_a_file(tmp_path, capsys):
    (tmp_path / "afile").write_text("x")
    assert main([*SEARCH, "--out", str(tmp_path / "afile")]) == 2
    assert "afile: exists and is not a directory" in _err(capsys)
    assert main([*SEARCH, "--out", str(tmp_path / "afile" / "sub")]) == 2
    assert "afile is not a directory" in _err(capsys)
    assert (tmp_path / "afile").read_text() == "x"
