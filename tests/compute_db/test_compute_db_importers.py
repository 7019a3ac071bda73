"""Importers: Vidur profiling CSVs (ms -> s, shapes from model dims) and AICB AIOB text files (µs -> s)."""

from __future__ import annotations

import pytest

from compute_db import importers
from compute_db.errors import ComputeDBError
from compute_db.keys import make_key

AIOB_TEXT = """train_iter:10
Emb:
    time_gpu_max: 857
    time_gpu_min: 782
    time_gpu_avg: 799
atten_qkv:
    time_gpu_max: 1255
    time_gpu_min: 862
    time_gpu_avg: 889
param_time:
    time_gpu_max: 5
    time_gpu_min: 4
    time_gpu_avg: 4
"""


def test_vidur_llama2_shapes_and_units(shared_dir):
    csv = shared_dir / "data/vidur_profiling/h100/meta-llama/Llama-2-7b-hf/mlp.csv"
    rows = importers.import_vidur_csv(csv, "H100", "vidur:meta-llama/Llama-2-7b-hf")
    by_key = {r.key: r for r in rows}
    # Llama-2-7b: 32 heads (MHA), hidden 4096, ffn 11008, gated; row num_tokens=1024, tp=2 (values in ms)
    expect = {(1024, 6144, 4096): 0.09e-3,       # QKV: n = (32 + 2*32) * 128 / 2
              (1024, 11008, 4096): 0.134e-3,     # gate+up: n = 2 * 11008 / 2
              (1024, 4096, 2048): 0.029e-3,      # out proj: k = 4096 / 2
              (1024, 4096, 5504): 0.058e-3}      # down: k = 11008 / 2
    for (m, n, k), t in expect.items():
        row = by_key[make_key("gemm", "fwd", {"m": m, "n": n, "k": k}, "fp16")]
        assert row.median_s == pytest.approx(t)
        assert row.provenance == "imported" and row.source == "vidur:meta-llama/Llama-2-7b-hf"
    assert make_key("rmsnorm", "fwd", {"tokens": 1024, "hidden": 4096}, "fp16") in by_key
    assert make_key("rotary", "fwd", {"tokens": 1024, "heads": 32, "head_dim": 128}, "fp16") in by_key  # (32+32)/2
    assert make_key("swiglu", "fwd", {"tokens": 1024, "width": 5504}, "fp16") in by_key


def test_vidur_directory_and_shipped_grid(shared_dir):
    rows = importers.import_vidur(shared_dir / "data/vidur_profiling", importers.shipped_token_counts())
    assert {r.gpu for r in rows} == {"H100", "A100-80GB"}
    tokens = {r.key.dims[0] for r in rows if r.key.kind == "gemm"}
    assert tokens <= importers.shipped_token_counts() and {1, 64, 96, 4096} <= tokens


def test_vidur_errors(tmp_path):
    (tmp_path / "x.csv").write_text("a,b\n1,2\n")
    with pytest.raises(ComputeDBError, match="not a Vidur profiling CSV"):
        importers.import_vidur_csv(tmp_path / "x.csv", "H100", "s")
    with pytest.raises(ComputeDBError, match="no <gpu>/<org>/<model>/mlp.csv"):
        importers.import_vidur(tmp_path)


def test_aiob_parse_units(tmp_path):
    f = tmp_path / "aiob.txt"
    f.write_text(AIOB_TEXT)
    iters, stats = importers.parse_aiob_text(f)
    assert iters == 10
    assert stats["atten_qkv"] == {"max": pytest.approx(1255e-6), "min": pytest.approx(862e-6),
                                  "avg": pytest.approx(889e-6)}


def test_aiob_import_shapes(tmp_path):
    from workload_gen.model import ModelSpec
    f = tmp_path / "aiob.txt"
    f.write_text(AIOB_TEXT)
    model = ModelSpec("t", num_layers=2, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=11008,
                      vocab_size=32000, num_kv_heads=8, activation="swiglu", norm="rmsnorm", seq_length=4096)
    rows, skipped = importers.import_aiob(f, "H100", model, tp=2, micro_batch=1)
    assert skipped == ["param_time"]
    qkv = next(r for r in rows if r.key.kind == "gemm")
    assert qkv.key.dims == (4096, (32 + 16) * 128 // 2, 4096) and qkv.median_s == pytest.approx(889e-6)


def test_aiob_errors(tmp_path):
    f = tmp_path / "bad.txt"
    f.write_text("iters:3\n")
    with pytest.raises(ComputeDBError, match=r"bad.txt:1: AIOB file must start"):
        importers.parse_aiob_text(f)
    f.write_text("train_iter:1\nEmb:\n    time_gpu_avg: x1\n")
    with pytest.raises(ComputeDBError, match=r"bad.txt:3:"):
        importers.parse_aiob_text(f)


@pytest.mark.parametrize("value", ["0", "-3", "1e-"])
def test_aiob_bad_times_name_file_and_line(tmp_path, value):
    # regression: a zero time failed later as "row 1: mean_s must be ..." without naming the file;
    # "1e-" matched the number pattern and escaped as a ValueError
    f = tmp_path / "bad.txt"
    f.write_text(f"train_iter:1\nEmb:\n    time_gpu_max: 9\n    time_gpu_avg: {value}\n")
    with pytest.raises(ComputeDBError, match=r"bad.txt:4: "):
        importers.parse_aiob_text(f)
