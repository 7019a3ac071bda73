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


def test_perfllm_dump_path_is_a_file(tmp_path):
    import pytest

    from sim.analysis.perfllm import PerfLLM
    from sim.errors import SimError
    (tmp_path / "afile").write_text("x")
    pm = PerfLLM()
    pm.configure(model_config="llama3-8b", system_config="H100")
    with pytest.raises(SimError, match="afile: exists and is not a directory"):
        pm.search_best_parallel_strategy_with_recompute(world_size=8, global_batch_size=8, tp_search_list=[2],
                                                        pp_search_list=[1], cp_search_list=[1],
                                                        dump_path=str(tmp_path / "afile"))


def test_perfllm_example_bad_config(tmp_path):
    """The example script: a bad config file is one line naming file and key (exit 2), no traceback."""
    import json
    import subprocess
    import sys
    from pathlib import Path
    repo = Path(__file__).resolve().parents[2]
    cfg = json.loads((repo / "examples" / "perfllm_configs" / "model_llama3_70b.json").read_text())
    cfg.pop("hidden_size")
    bad = tmp_path / "model.json"
    bad.write_text(json.dumps(cfg))
    r = subprocess.run([sys.executable, str(repo / "examples" / "perfllm_example.py"), "--quick", "--model", str(bad),
                        "--dump", str(tmp_path / "d")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2
    assert r.stderr.strip() == f"perfllm_example: error: {bad}: key 'hidden_size': missing"


def test_search_rejects_negative_headroom_and_bad_counts(tmp_path, capsys):
    """--gmi-error -5 used to raise the budget above the device memory and call too-large plans feasible."""
    import pytest

    from sim.analysis.search import search
    from sim.errors import SimError
    from workload_gen.zoo import get_model
    out = ["--out", str(tmp_path / "s")]
    assert main([*SEARCH, "--gmi-error", "-5", *out]) == 2
    assert "--gmi-error: expected GiB >= 0 (got -5)" in _err(capsys)
    assert main([*SEARCH, "--top-k", "-1", *out]) == 2
    assert "--top-k must be >= 0" in _err(capsys)
    assert main([*SEARCH, "--workers", "0", *out]) == 2
    assert "--workers >= 1" in _err(capsys)
    with pytest.raises(SimError, match="gmi_error"):
        search(get_model("llama3-8b"), 8, 8, gmi_error_GiB=-1.0, confirm=False)
    assert not (tmp_path / "s").exists()
