"""Vidur attention.csv and network profiles (all_reduce.csv / send_recv.csv) -> kernel rows and measured
collective curves; the serving grid of `measure --serving`; one-line errors for bad files and flags."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from compute_db import importers, serving, store
from compute_db.collectives import CollectiveCurves, group_setting
from compute_db.db import ComputeDB
from compute_db.errors import ComputeDBError
from compute_db.keys import make_key
from compute_db.store import CollectiveRow
from sim.cli import main
from sim.inputs import make_topology

STATS = ("min", "max", "mean", "median", "std")


def _stats(op: str, median_ms: float, mean_ms: float | None = None) -> dict:
    mean_ms = median_ms if mean_ms is None else mean_ms
    return {f"time_stats.{op}.min": 0.5 * median_ms, f"time_stats.{op}.max": 2 * median_ms,
            f"time_stats.{op}.mean": mean_ms, f"time_stats.{op}.median": median_ms, f"time_stats.{op}.std": 0.01}


def _attn_row(prefill: bool, batch: int, chunk: int, cached: int, ms: float, **over) -> dict:
    rec = {"n_embd": 4096, "n_q_head": 32, "n_kv_head": 8, "block_size": 16, "num_tensor_parallel_workers": 4,
           "max_model_len": 4096, "batch_size": batch, "prefill_chunk_size": chunk, "kv_cache_size": cached,
           "is_prefill": prefill, "attention_backend": "FLASHINFER"}
    rec.update(_stats("attn_prefill" if prefill else "attn_decode", ms))
    rec.update(_stats("attn_decode" if prefill else "attn_prefill", math.nan))
    rec.update(_stats("attn_kv_cache_save", ms / 10))
    rec.update(_stats("attn_input_reshape", 0.001))
    rec.update(over)
    return rec


def test_attention_rows_map_to_the_serving_kernels(tmp_path):
    f = tmp_path / "attention.csv"
    pd.DataFrame([_attn_row(True, 1, 512, 1024, 0.2), _attn_row(False, 8, 0, 1023, 0.05)]).to_csv(f, index=False)
    rows, parts, notes = importers.import_vidur_attention_csv(f, "H100", "vidur:m")
    by_key = {r.key: r for r in rows}
    # GQA 32 query / 8 KV heads over 4 ranks: 8 and 2 per rank; head_dim 4096 / 32 = 128
    pre = make_key("flash_attn", "fwd", {"batch": 1, "seq_q": 512, "seq_kv": 1536, "heads": 8, "kv_heads": 2,
                                         "head_dim_qk": 128, "head_dim_v": 128}, "fp16", causal=True)
    dec = make_key("attn_decode", "fwd", {"batch": 8, "kv_tokens": 8 * 1024, "heads": 8, "kv_heads": 2,
                                          "head_dim_qk": 128, "head_dim_v": 128}, "fp16")
    save_pre = make_key("memcpy", "fwd", {"bytes": 512 * 2 * 2 * 128 * 2}, "fp16")   # tokens x K,V x heads x dim x 2 B
    save_dec = make_key("memcpy", "fwd", {"bytes": 8 * 2 * 2 * 128 * 2}, "fp16")
    assert set(by_key) == {pre, dec, save_pre, save_dec}
    assert by_key[pre].median_s == pytest.approx(0.2e-3) and by_key[pre].min_s == pytest.approx(0.1e-3)
    assert by_key[dec].median_s == pytest.approx(0.05e-3) and by_key[save_dec].median_s == pytest.approx(0.005e-3)
    assert by_key[pre].source == "vidur:m:FLASHINFER" and by_key[pre].provenance == "imported"
    assert parts == {"prefill attention": 1, "decode attention": 1, "KV-cache save": 2}
    assert notes == ["attn_input_reshape: not used (clustersim's attention has no separate reshape kernel: the "
                     "reshapes are views or fused)"]


def test_attention_kv_heads_replicate_when_tp_exceeds_them(tmp_path):
    f = tmp_path / "attention.csv"
    pd.DataFrame([_attn_row(False, 2, 0, 99, 0.01, num_tensor_parallel_workers=16)]).to_csv(f, index=False)
    rows, _, _ = importers.import_vidur_attention_csv(f, "H100", "vidur:m")
    dec = [r.key for r in rows if r.key.kind == "attn_decode"]
    assert dec == [make_key("attn_decode", "fwd", {"batch": 2, "kv_tokens": 200, "heads": 2, "kv_heads": 1,
                                                   "head_dim_qk": 128, "head_dim_v": 128}, "fp16")]


def test_attention_backend_filter(tmp_path):
    f = tmp_path / "attention.csv"
    pd.DataFrame([_attn_row(True, 1, 64, 0, 0.1), _attn_row(True, 1, 64, 0, 0.3, attention_backend="NO_OP")]
                 ).to_csv(f, index=False)
    rows, _, _ = importers.import_vidur_attention_csv(f, "H100", "vidur:m", backend="flashinfer")
    assert {r.source for r in rows} == {"vidur:m:FLASHINFER"}
    with pytest.raises(ComputeDBError, match=r"no rows of attention backend 'xformers' \(the file has FLASHINFER, "
                                             r"NO_OP\)"):
        importers.import_vidur_attention_csv(f, "H100", "vidur:m", backend="xformers")


def _net_rows(coll: str, size: int, ms: float, rank: int = 0, workers: int = 2, per_node: int = 2) -> dict:
    return {"rank": rank, "num_workers": workers, "size": size, "collective": coll, "devices_per_node": per_node,
            "max_devices_per_node": 8, **_stats(coll, ms)}


def test_network_rows_slowest_rank_and_names(tmp_path):
    f = tmp_path / "all_reduce.csv"
    pd.DataFrame([_net_rows("all_reduce", 1024, 0.010, rank=0), _net_rows("all_reduce", 1024, 0.030, rank=0),
                  _net_rows("all_reduce", 1024, 0.012, rank=1), _net_rows("broadcast", 1024, 1.0),
                  _net_rows("all_reduce", 4096, 0.040, workers=8, per_node=4)]).to_csv(f, index=False)
    rows, notes = importers.import_vidur_network_csv(f, "H100", "vidur-net:h100_dgx")
    got = {(r.collective, r.num_workers, r.devices_per_node, r.size_bytes): r for r in rows}
    # rank 0: median of its two repeats (0.020 ms) is slower than rank 1 (0.012 ms)
    assert got[("all_reduce", 2, 2, 1024)].median_s == pytest.approx(0.020e-3)
    assert got[("all_reduce", 8, 4, 4096)].median_s == pytest.approx(0.040e-3)
    assert len(rows) == 2 and notes == ["collective(s) broadcast: not used (known: all_reduce, send_recv)"]
    g = tmp_path / "send_recv.csv"
    pd.DataFrame([_net_rows("send_recv", 2048, 0.02, per_node=1)]).to_csv(g, index=False)
    rows, _ = importers.import_vidur_network_csv(g, "H100", "x")
    assert [(r.collective, r.num_workers, r.devices_per_node) for r in rows] == [("send", 2, 1)]


def test_curves_interpolate_log_log_inside_the_measured_range():
    rows = [CollectiveRow("H100", "all_reduce", 4, 4, 1024, 1e-3, 1e-3, 1e-3, 0.0, 0, "imported", "a"),
            CollectiveRow("H100", "all_reduce", 4, 4, 4096, 4e-3, 4e-3, 4e-3, 0.0, 0, "imported", "a")]
    c = CollectiveCurves([rows])
    assert c.lookup("all_reduce", 4, 4, 1024).source == "measured"
    mid = c.lookup("all_reduce", 4, 4, 2048)          # t ~ size between the two points: 2 ms at 2048 B
    assert mid.source == "interpolated" and mid.time_s == pytest.approx(2e-3)
    assert c.lookup("all_reduce", 4, 4, 8192) is None and c.lookup("all_reduce", 4, 4, 512) is None
    assert c.lookup("all_reduce", 4, 2, 2048) is None and c.lookup("send", 4, 4, 2048) is None
    # a higher layer wins for its points; the lower layer's other points stay
    user = [CollectiveRow("H100", "all_reduce", 4, 4, 1024, 3e-3, 3e-3, 3e-3, 0.0, 0, "measured", "u")]
    c2 = CollectiveCurves([user, rows])
    assert c2.lookup("all_reduce", 4, 4, 1024).time_s == pytest.approx(3e-3)
    assert c2.lookup("all_reduce", 4, 4, 4096).time_s == pytest.approx(4e-3)


def test_group_setting_counts_gpus_per_server():
    topo = make_topology("spectrum-x", gpus=16, gpu_type="H100")       # 8 GPUs per server
    assert group_setting(topo, (0, 1, 2, 3)) == (4, 4)
    assert group_setting(topo, (0, 8)) == (2, 1)
    assert group_setting(topo, (0, 1, 8, 9)) == (4, 2)
    assert group_setting(topo, (0, 1, 8)) is None


def test_collectives_round_trip_through_the_store_and_db(tmp_path):
    db = tmp_path / "c.sqlite"
    rows = [CollectiveRow("H100", "all_reduce", 2, 2, s, 1e-5 * s / 1024, 1e-5 * s / 1024, 1e-5, 0.0, 0, "imported",
                          "vidur-net:h100_dgx") for s in (1024, 2048)]
    assert store.write_data(db, collectives=rows) == 2
    assert store.read_collectives(db) == rows and store.gpus_in(db) == ["H100"]
    assert ("H100", "collective:all_reduce", "imported", 2) in store.summary(db)
    cdb = ComputeDB(db)
    assert cdb.collective_curves("h100").lookup("all_reduce", 2, 2, 2048).time_s == pytest.approx(2e-5)
    bad = CollectiveRow("H100", "all_reduce", 4, 3, 1024, 1e-5, 1e-5, 1e-5, 0.0, 0, "imported", "x")
    with pytest.raises(ComputeDBError, match="devices_per_node 3 must divide num_workers 4"):
        store.write_data(db, collectives=[bad])


def test_shipped_db_has_no_collective_curves():
    from compute_db import open_db
    assert not open_db().collective_curves("H100")


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing written

def _profile_dir(tmp_path, name: str, text: str, folder: str = "h100/org/model"):
    d = tmp_path / "v" / folder
    d.mkdir(parents=True)
    (d / name).write_text(text)
    return tmp_path / "v"


@pytest.mark.parametrize("name,text,folder,needle", [
    ("attention.csv", "n_embd,n_q_head\n4096,32\n", "h100/org/model",
     "attention.csv:1: not a Vidur attention profile (missing column(s) n_kv_head, num_tensor_parallel_workers, "
     "batch_size, prefill_chunk_size, kv_cache_size, is_prefill)"),
    ("all_reduce.csv", "rank,num_workers,size,collective,devices_per_node,time_stats.all_reduce.median\n", "h100_dgx",
     "all_reduce.csv: Vidur network profile without data rows"),
    ("send_recv.csv", "rank,num_workers,size,collective,devices_per_node,time_stats.send_recv.median\n"
                      "0,4,1024,send_recv,3,0.01\n", "h100_dgx", "send_recv.csv:2: devices_per_node 3 must divide "
                                                                 "num_workers 4"),
    ("all_reduce.csv", "num_workers,size\n2,1024\n", "h100_dgx",
     "all_reduce.csv:1: not a Vidur network profile (missing column(s) devices_per_node)"),
    ("attention.csv", "", "h100/org/model", "attention.csv: empty file (no header, no rows)"),
    ("mlp.csv", "a,b\n1,2\n", "h100/org/model", "not a Vidur profiling CSV (missing column(s) n_head"),
    ("mlp.csv", "x\n", "org/model", "no Vidur profile rows imported (org/model/mlp.csv: no GPU folder in its path"),
    ("README.md", "x\n", "h100", "no Vidur profile rows imported (h100/README.md: not a Vidur profile"),
])
def test_bad_vidur_files_are_one_line_errors(tmp_path, capsys, name, text, folder, needle):
    root = _profile_dir(tmp_path, name, text, folder)
    db = tmp_path / "out.sqlite"
    assert main(["compute-db", "import-vidur", str(root), "--db", str(db)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("clustersim: error: ") and err.count("\n") == 1 and needle in err
    assert not db.exists()


def test_empty_folder_is_an_error(tmp_path, capsys):
    (tmp_path / "v").mkdir()
    assert main(["compute-db", "import-vidur", str(tmp_path / "v"), "--db", str(tmp_path / "o.sqlite")]) == 2
    assert "no Vidur profile rows imported (the folder is empty)" in capsys.readouterr().err


# ---------------------------------------------------------------- the serving grid

def test_grid_values_and_defaults():
    assert serving.parse_values("1:64", "x") == (1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64)
    assert serving.parse_values("5:40:pow2", "x") == (5, 8, 16, 32, 40)
    assert serving.parse_values("7,3,3", "x") == (3, 7)
    g = serving.parse_grid(["batch=1,3"], max_len=1000)
    assert g.batch == (1, 3) and g.kv[-1] == 1000 and g.kv[:3] == (1, 2, 4) and g.tokens[-1] == 8192
    assert g.chunk == tuple(1 << k for k in range(14))


@pytest.mark.parametrize("argv,needle", [
    (["--grid", "tokens=0:8"], "--grid tokens: range '0:8' needs 1 <= lo <= hi"),
    (["--grid", "tokens=1:8:3"], "--grid tokens: range step must be 'pow2'"),
    (["--grid", "seq=1,2"], "--grid 'seq=1,2': expected AXIS=VALUES with AXIS one of tokens, chunk, kv, batch"),
    (["--grid", "kv=a"], "--grid kv: 'a' is not an integer, lo:hi or lo:hi:pow2"),
    (["--tp", "1,x"], "--tp: 'x' is not an integer"),
    (["--tp", "3"], "serving plan.tp: must divide the attention heads"),
    (["--plan", "p.yaml"], "--plan: not used with --serving"),
])
def test_measure_serving_flag_errors(tmp_path, monkeypatch, capsys, argv, needle):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    assert main(["measure", "--serving", "-m", "llama3-8b", "--db", "m.sqlite", "--device", "cpu"] + argv) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1
    assert not (tmp_path / "m.sqlite").exists()


def test_serving_flags_need_serving(tmp_path, monkeypatch, capsys):
    pytest.importorskip("torch")
    monkeypatch.chdir(tmp_path)
    assert main(["measure", "--model", "llama3-8b", "--plan", "p.yaml", "--tp", "2", "--db", "m.sqlite"]) == 2
    assert "--tp: applies to --serving only" in capsys.readouterr().err
