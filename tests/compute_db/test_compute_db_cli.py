"""CLI: compute-db subcommands print what they claim; bad input -> one line, exit 2."""

from __future__ import annotations

import pytest

from sim.cli import main


def test_lookup(capsys):
    assert main(["compute-db", "lookup", "--gpu", "H100", "--kind", "gemm", "--shape", "m=4096,n=4096,k=4096"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("gemm/fwd/bf16/m=4096,n=4096,k=4096 on H100: ")
    # fp16 measured at this shape (Vidur); a bf16 query is answered by that measurement (monotone-smoothed)
    assert "(interpolated; the same kernel measured on H100 in an equivalent layout/dtype (monotone along m))" in out
    assert "TFLOP/s" in out


def test_bad_shape_and_gpu(capsys):
    assert main(["compute-db", "lookup", "--gpu", "H100", "--kind", "gemm", "--shape", "m=0,n=1,k=1"]) == 2
    err = capsys.readouterr().err
    assert err.strip() == "clustersim: error: kernel gemm: shape field 'm' must be positive, got 0"
    assert main(["compute-db", "lookup", "--gpu", "P100", "--kind", "gemm", "--shape", "m=1,n=1,k=1"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "unknown GPU 'P100'; known GPUs: A100-40GB" in err


def test_info_and_gpus(capsys):
    assert main(["compute-db", "info"]) == 0
    out = capsys.readouterr().out
    assert "H100" in out and "A100-80GB" in out and "imported" in out
    assert main(["compute-db", "gpus"]) == 0
    out = capsys.readouterr().out
    assert "GB200" in out and "2500.0" in out


def test_export_import_csv(tmp_path, capsys):
    csv_path = tmp_path / "h100.csv"
    assert main(["compute-db", "export-csv", "--gpu", "H100", "--out", str(csv_path)]) == 0
    n = int(capsys.readouterr().out.split()[1])
    assert n > 1000 and len(csv_path.read_text().splitlines()) == n + 1
    db = tmp_path / "x.sqlite"
    assert main(["compute-db", "import-csv", str(csv_path), "--db", str(db)]) == 0
    assert f"imported {n} rows" in capsys.readouterr().out


def test_corrupt_db_one_line(tmp_path, capsys):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"\x00garbage" * 64)
    assert main(["compute-db", "info", "--db", str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "not a clustersim compute DB" in err


def test_gpu_file_option(tmp_path, capsys):
    f = tmp_path / "g.yaml"
    f.write_text("gpus:\n  Z1:\n    peak_tflops: {bf16: 500}\n    hbm_GiB: 64\n    hbm_GBps: 2000\n"
                 "    similar_to: [H100]\n")
    assert main(["compute-db", "lookup", "--gpu", "Z1", "--gpu-file", str(f), "--kind", "rmsnorm",
                 "--shape", "tokens=8192,hidden=8192"]) == 0
    assert "fit:H100 rmsnorm" in capsys.readouterr().out


@pytest.mark.slow
def test_calibrate_table(capsys):
    assert main(["compute-db", "calibrate", "--gpu", "H100", "--family", "gemm"]) == 0
    out = capsys.readouterr().out
    assert "| gemm |" in out and "Leave-one-model-out error on H100" in out


def test_import_aiob_and_vidur(tmp_path, capsys, shared_dir):
    aiob = tmp_path / "aiob.txt"
    aiob.write_text("train_iter:5\natten_qkv:\n    time_gpu_max: 900\n    time_gpu_min: 800\n    time_gpu_avg: 850\n"
                    "moe_grouped_gemm:\n    time_gpu_avg: 3\n")
    db = tmp_path / "a.sqlite"
    assert main(["compute-db", "import-aiob", str(aiob), "--db", str(db), "--gpu", "h100", "--model", "llama2-7b",
                 "--tp", "2"]) == 0
    out = capsys.readouterr().out
    assert "imported 1 AIOB kernel rows for H100" in out and "moe_grouped_gemm" in out
    assert main(["compute-db", "lookup", "--db", str(db), "--gpu", "H100", "--kind", "gemm",
                 "--shape", "m=4096,n=6144,k=4096"]) == 0
    assert "850.00 us (measured; aiob:aiob.txt)" in capsys.readouterr().out   # QKV of llama2-7b at TP 2
    vdir = tmp_path / "v" / "h100" / "microsoft" / "phi-2"
    vdir.mkdir(parents=True)
    src = shared_dir / "data/vidur_profiling/h100/microsoft/phi-2/mlp.csv"
    (vdir / "mlp.csv").write_text(src.read_text())
    assert main(["compute-db", "import-vidur", str(tmp_path / "v"), "--db", str(db)]) == 0
    assert "Vidur kernel rows (H100)" in capsys.readouterr().out


def test_compute_db_without_action(capsys):
    assert main(["compute-db"]) == 2


@pytest.mark.parametrize("argv,needle", [
    # regressions from the CLI audit: a traceback, a silently created folder, a silent 0-row export
    (["compute-db", "export-csv", "--out", "."], ".: is a directory"),
    (["compute-db", "export-csv", "--out", "nodir/x.csv"], "folder nodir does not exist"),
    (["compute-db", "export-csv", "--out", "x.csv", "--gpu", "V100"], "--gpu: no rows for GPU 'V100'"),
    (["compute-db", "import-csv", "in.csv", "--db", "nodir/x.sqlite"], "folder nodir does not exist"),
    (["compute-db", "import-csv", "in.csv", "--db", "."], "is a directory"),
])
def test_bad_output_paths_exit_2_and_create_nothing(tmp_path, monkeypatch, capsys, argv, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.csv").write_text("gpu,key,median_s\nH100,elementwise/fwd/fp16/numel=1024,1e-06\n")
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and ".tmp" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]


def test_export_csv_accepts_a_gpu_alias(tmp_path, capsys):
    out = tmp_path / "a.csv"
    assert main(["compute-db", "export-csv", "--gpu", "a100", "--out", str(out)]) == 0
    lines = out.read_text().splitlines()
    assert len(lines) > 1000 and all(line.startswith("A100-80GB,") for line in lines[1:])


@pytest.mark.parametrize("flag", ["--db", "-m", "--model_name"])
def test_measure_script_flag_without_value_exits_2(tmp_path, flag):
    # regression: `scripts/measure.sh --db` died with bash's "unbound variable" and exit 1
    import shutil
    import subprocess
    from pathlib import Path
    if shutil.which("bash") is None:
        pytest.skip("bash not available")
    script = Path(__file__).resolve().parents[2] / "scripts" / "measure.sh"
    r = subprocess.run(["bash", str(script), flag], cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and f"{flag}: expected a value" in r.stderr and list(tmp_path.iterdir()) == []


def test_out_flag_spellings_match_other_subcommands(tmp_path, capsys):
    # `-o` / `--out` work for every command that writes one file (sim run/compare/sweep use both)
    assert main(["compute-db", "export-csv", "-o", str(tmp_path / "a.csv"), "--gpu", "H100"]) == 0
    assert main(["topo", "spectrum-x", "-g", "16", "--out", str(tmp_path / "t.txt")]) == 0
    assert main(["workload", "gpt-1.7b", "--world-size", "8", "--gbs", "16", "-o", str(tmp_path / "w.json")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.csv", "t.txt", "w.json"]


_AIOB = "train_iter:10\nEmb:\n    time_gpu_max: 857\n    time_gpu_min: 782\n    time_gpu_avg: 799\n"


@pytest.mark.parametrize("extra,needle", [
    # regressions: --tp 0 raised ZeroDivisionError; --tp 3 silently wrote shapes no workload emits
    (["--tp", "0"], "--tp: must be a positive integer, got 0"),
    (["--tp", "3"], "--tp: must divide the model's num_attention_heads (got tp=3, num_attention_heads=32)"),
    (["--micro-batch", "0"], "--micro-batch: must be a positive integer, got 0"),
])
def test_import_aiob_rejects_bad_parallel_shape(tmp_path, capsys, extra, needle):
    f = tmp_path / "aiob.txt"
    f.write_text(_AIOB)
    db = tmp_path / "a.sqlite"
    assert main(["compute-db", "import-aiob", str(f), "--db", str(db), "--gpu", "H100", "--model", "llama3-8b",
                 *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and not db.exists()


def test_import_aiob_embedding_uses_megatrons_padded_vocab(tmp_path, capsys):
    # GPT-3 vocab 51200 at TP 8 pads to 51200 -> 6400 rows per rank; llama2-7b 32000 at TP 8 -> 32768/8 = 4096
    f = tmp_path / "aiob.txt"
    f.write_text(_AIOB)
    db = tmp_path / "a.sqlite"
    assert main(["compute-db", "import-aiob", str(f), "--db", str(db), "--gpu", "H100", "--model", "llama2-7b",
                 "--tp", "8"]) == 0
    capsys.readouterr()
    assert main(["compute-db", "export-csv", "--db", str(db), "-o", "-"]) == 0
    out = capsys.readouterr().out
    assert "embedding/fwd/bf16/tokens=4096,hidden=4096,vocab=4096" in out and out.startswith("gpu,key,")


@pytest.mark.parametrize("extra,needle", [
    # regressions: an unknown family printed an empty table with exit 0; negative token floors were taken
    (["--family", "nosuch"], "--family: unknown op family nosuch (known: attn_decode, cross_entropy, elementwise"),
    (["--by", "shape", "--family", "rmsnorm2"], "--family: unknown kernel kind rmsnorm2 (known: attn_bmm, attn_decode"),
    (["--min-tokens", "-5"], "--min-tokens: must be >= 0, got -5"),
    # --by shape ignored the token floor silently
    (["--by", "shape", "--min-tokens", "128"], "--min-tokens: applies to --by model only"),
    # --by shape on a Vidur GPU would refit 13,468 times (~70 minutes) without a word
    (["--by", "shape"], "leave-one-shape-out: H100 has 13468 measured shapes of gemm, grouped_gemm, more than the "
                        "1000 one run evaluates (each refits the GPU's data); use --by model"),
])
def test_calibrate_rejects_bad_options(capsys, extra, needle):
    assert main(["compute-db", "calibrate", "--gpu", "H100", *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1


def test_calibrate_marks_families_the_token_filter_cannot_apply_to(capsys):
    # element-wise keys carry numel, not tokens: they were silently reported as ">= 64 tokens"
    assert main(["compute-db", "calibrate", "--gpu", "H100", "--family", "elementwise", "--family", "rmsnorm"]) == 0
    out = capsys.readouterr().out
    assert "| elementwise * |" in out and "| rmsnorm |" in out and out.rstrip().splitlines()[-1].startswith("* all sizes")
    # the "all" row pools both families: its kernel count is the sum of theirs
    rows = {line.split("|")[1].strip(): int(line.split("|")[2]) for line in out.splitlines()
            if line.startswith("| ") and line.split("|")[2].strip().isdigit()}
    assert rows["all"] == rows["elementwise *"] + rows["rmsnorm"]


def test_import_simumax_then_lookup(tmp_path, capsys, shared_dir):
    db = tmp_path / "smx.sqlite"
    assert main(["compute-db", "import-simumax", str(shared_dir / "data" / "simumax_efficiency"), "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "imported 749 SimuMax kernel rows and 8 HBM-efficiency figures (A100-80GB-PCIe, B200)" in out
    assert main(["compute-db", "lookup", "--db", str(db), "--gpu", "B200", "--kind", "gemm", "--variant", "wgrad",
                 "--shape", "m=8192,n=10240,k=4096"]) == 0
    out = capsys.readouterr().out
    # NT row m=10240 n=8192 k=4096 (our wgrad keys carry X^T.dY: n and m swapped)
    assert "gemm/wgrad/bf16/m=8192,n=10240,k=4096 on B200" in out and "(measured; simumax-v1.2)" in out


def test_build_shipped_bad_folder_one_line(tmp_path, capsys):
    out = tmp_path / "k.sqlite"
    assert main(["compute-db", "build-shipped", "--shared", str(tmp_path / "nope"), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "reference data folder not found" in err and not out.exists()


@pytest.mark.slow
def test_build_shipped_reproduces_the_shipped_db(tmp_path, capsys, shared_dir):
    from compute_db import store
    from compute_db.db import SHIPPED_DB
    out = tmp_path / "k.sqlite"
    assert main(["compute-db", "build-shipped", "--shared", str(shared_dir), "--out", str(out)]) == 0
    msg = capsys.readouterr().out
    assert "64525 kernel rows" in msg and "8 figures" in msg
    assert store.read_rows(out) == store.read_rows(SHIPPED_DB)
    assert store.read_figures(out) == store.read_figures(SHIPPED_DB)
    assert out.stat().st_size < 3_000_000
