"""SQLite store: schema guard, corrupt/foreign files, CSV round trip, read-only lookups."""

from __future__ import annotations

import sqlite3

import pytest

from compute_db import open_db, store
from compute_db.errors import ComputeDBError
from compute_db.keys import make_key


def _row(m=64, t=1e-5, gpu="H100", source="test"):
    return store.KernelRow(gpu, make_key("gemm", "fwd", {"m": m, "n": 128, "k": 256}, "bf16"),
                           t, t, t * 0.9, t * 0.01, 10, "measured", source, "dev", "drv", "2.x", "12.x",
                           "2026-01-01T00:00:00Z")


def test_write_read_round_trip(tmp_path):
    db = tmp_path / "k.sqlite"
    assert store.write_rows(db, [_row(64), _row(128, 2e-5), _row(64, 3e-5, "A100-80GB")]) == 3
    rows = store.read_rows(db, "H100")
    assert [r.key.dims for r in rows] == [(128, 128, 256), (64, 128, 256)] or \
        sorted(r.key.dims for r in rows) == [(64, 128, 256), (128, 128, 256)]
    r = next(r for r in rows if r.key.dims[0] == 64)
    assert (r.median_s, r.min_s, r.samples, r.provenance, r.device, r.torch) == (1e-5, 0.9e-5, 10, "measured",
                                                                                 "dev", "2.x")
    assert store.gpus_in(db) == ["A100-80GB", "H100"]
    # same (gpu, key, source) replaces
    store.write_rows(db, [_row(64, 5e-5)])
    assert len(store.read_rows(db, "H100")) == 2


def test_corrupt_file_clear_error(tmp_path):
    bad = tmp_path / "bad.sqlite"
    bad.write_bytes(b"this is not a database at all" * 100)
    with pytest.raises(ComputeDBError, match="not a clustersim compute DB"):
        open_db(bad)


def test_foreign_sqlite_clear_error(tmp_path):
    other = tmp_path / "other.sqlite"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE users (id INTEGER)")
    conn.commit()
    conn.close()
    with pytest.raises(ComputeDBError, match="not a clustersim compute DB"):
        open_db(other)
    with pytest.raises(ComputeDBError, match="not a clustersim compute DB"):
        store.write_rows(other, [_row()])


def test_schema_version_checked(tmp_path):
    db = tmp_path / "k.sqlite"
    store.create(db)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE meta SET value='99' WHERE name='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(ComputeDBError, match="schema version 99"):
        open_db(db)


def test_missing_db_file(tmp_path):
    with pytest.raises(ComputeDBError, match="not found"):
        open_db(tmp_path / "nope.sqlite")


def test_invalid_rows_rejected(tmp_path):
    bad = store.KernelRow("H100", make_key("gemm", "fwd", {"m": 1, "n": 1, "k": 1}, "bf16"),
                          -1.0, 1.0, 1.0, 0.0, 1, "measured", "x")
    with pytest.raises(ComputeDBError, match="mean_s"):
        store.write_rows(tmp_path / "k.sqlite", [bad])


def test_csv_round_trip(tmp_path):
    db = tmp_path / "k.sqlite"
    store.write_rows(db, [_row(64), _row(128, 2e-5)])
    csv_path = tmp_path / "k.csv"
    assert store.export_csv(db, csv_path) == 2
    header = csv_path.read_text().splitlines()[0]
    assert header == ",".join(store.CSV_COLUMNS)
    db2 = tmp_path / "k2.sqlite"
    store.write_rows(db2, list(store.iter_csv(csv_path)))
    assert store.read_rows(db2) == store.read_rows(db)


def test_csv_errors_name_line(tmp_path):
    csv_path = tmp_path / "bad.csv"
    csv_path.write_text("gpu,key,median_s\nH100,gemm/fwd/bf16/m=1,n=1,k=1,0.001\n")
    # the comma-containing key must be quoted; unquoted it shifts columns -> error on line 2
    with pytest.raises(ComputeDBError, match=r"bad.csv:2:"):
        list(store.iter_csv(csv_path))


def test_lookups_open_read_only_and_concurrent(tmp_path):
    db = tmp_path / "k.sqlite"
    store.write_rows(db, [_row(64), _row(128, 2e-5)])
    db.chmod(0o444)    # readers never need write access
    before = db.stat().st_mtime_ns
    a, b = open_db(db), open_db(db)
    key = make_key("gemm", "fwd", {"m": 64, "n": 128, "k": 256}, "bf16")
    assert a.lookup_key(key, "H100").time_s == b.lookup_key(key, "H100").time_s == 1e-5
    assert db.stat().st_mtime_ns == before


def test_truncated_db_clear_error(tmp_path):
    from compute_db.db import SHIPPED_DB
    bad = tmp_path / "trunc.sqlite"
    bad.write_bytes(SHIPPED_DB.read_bytes()[: SHIPPED_DB.stat().st_size // 2])
    with pytest.raises(ComputeDBError, match="corrupt or not a clustersim compute DB"):
        open_db(bad).lookup_key(make_key("gemm", "fwd", {"m": 64, "n": 64, "k": 64}, "bf16"), "H100")


def test_readers_while_a_writer_writes(tmp_path):
    import threading
    db = tmp_path / "k.sqlite"
    store.write_rows(db, [_row(64)])
    key = make_key("gemm", "fwd", {"m": 64, "n": 128, "k": 256}, "bf16")
    errors = []

    def writer():
        for i in range(20):
            store.write_rows(db, [_row(64 + i + 1, 1e-5 * (i + 2), source=f"w{i}")])

    def reader():
        try:
            for _ in range(20):
                assert open_db(db, layer_shipped=False).lookup_key(key, "H100").time_s == 1e-5
        except Exception as exc:  # noqa: BLE001 - collected for the assertion below
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.read_rows(db, "H100")) == 21


def _sweep(n=20, gpu="H100", source="sweep"):
    key = lambda m: make_key("gemm", "fwd", {"m": m, "n": 4096, "k": 4096}, "fp16")   # noqa: E731
    return [store.KernelRow(gpu, key(8 * (i + 1)), 1e-5 + i * 1e-6, 1e-5 + i * 1.1e-6, 9e-6 + i * 1e-6,
                            1e-7 * i, 5, "imported", source) for i in range(n)]


def test_series_pack_round_trip(tmp_path):
    rows = _sweep(20) + [_row(64)]          # a 20-point m sweep packs; a single row stays plain
    plain, series = store.pack_series(rows)
    assert len(series) == 1 and len(plain) == 1 and series[0].field == "m" and series[0].values.tolist()[:3] == [8, 16, 24]
    db = tmp_path / "s.sqlite"
    store.write_fresh(db, rows, pack=True)
    back = {(r.key, r.source): r for r in store.read_rows(db)}
    assert len(back) == 21
    for r in rows:
        b = back[(r.key, r.source)]
        assert b.median_s == r.median_s                          # medians are stored exactly (float64)
        assert b.mean_s == pytest.approx(r.mean_s, rel=1e-6)     # mean/min/std as float32
        assert (b.samples, b.provenance, b.gpu) == (r.samples, r.provenance, r.gpu)
    assert store.summary(db) == [("H100", "gemm", "imported", 20), ("H100", "gemm", "measured", 1)]
    # a plain row written later replaces that point of the series (same gpu, key, source)
    store.write_rows(db, [store.KernelRow("H100", rows[3].key, 7e-3, 7e-3, 7e-3, 0.0, 1, "imported", "sweep")])
    assert open_db(db, layer_shipped=False).lookup_key(rows[3].key, "H100").time_s == 7e-3
    assert len(store.read_rows(db)) == 21


def _as_series(rows):
    plain, series = store.pack_series(rows)
    assert plain == [] and len(series) == 1
    return series[0]


def test_series_written_over_plain_rows_answers_their_keys(tmp_path):
    db = tmp_path / "s.sqlite"
    old = [store.KernelRow(r.gpu, r.key, 1e-3, 1e-3, 1e-3, 0.0, 1, "imported", r.source) for r in _sweep(3)]
    store.write_rows(db, old)
    sweep = [store.KernelRow(r.gpu, r.key, 2e-5, 2e-5, 2e-5, 0.0, 1, "imported", r.source) for r in _sweep(10)]
    assert store.write_data(db, series=[_as_series(sweep)]) == 10
    lookup = open_db(db, layer_shipped=False)
    for r in old:       # the series replaced the plain rows of its (gpu, source) at its points
        assert lookup.lookup_key(r.key, "H100").time_s == 2e-5
    rows = store.read_rows(db)
    assert len(rows) == 10 and {r.median_s for r in rows} == {2e-5}
    assert store.summary(db) == [("H100", "gemm", "imported", 10)]
    # another source's plain row of the same key is not touched
    store.write_rows(db, [store.KernelRow("H100", old[0].key, 5e-5, 5e-5, 5e-5, 0.0, 1, "imported", "other")])
    store.write_data(db, series=[_as_series(sweep)])
    assert sorted(r.median_s for r in store.read_rows(db) if r.key == old[0].key) == [2e-5, 5e-5]


def test_series_rewrite_merges_point_by_point(tmp_path):
    db = tmp_path / "s.sqlite"
    store.write_data(db, series=[_as_series(_sweep(20))])         # m = 8, 16, ..., 160
    shorter = [store.KernelRow(r.gpu, r.key, 3e-5, 3e-5, 3e-5, 0.0, 2, "imported", r.source)
               for r in _sweep(20)[5:15]]                           # m = 48 .. 120 re-measured
    store.write_data(db, series=[_as_series(shorter)])
    rows, series, _ = store.read_data(db)
    assert rows == [] and len(series) == 1 and series[0].values.tolist() == [8 * (i + 1) for i in range(20)]
    got = {r.key.dims[0]: r.median_s for r in store.read_rows(db)}
    expected = {r.key.dims[0]: r.median_s for r in _sweep(20)} | {8 * (i + 1): 3e-5 for i in range(5, 15)}
    assert got == expected
    assert [r.samples for r in series[0].rows()] == [5] * 5 + [2] * 10 + [5] * 5


def test_series_key_text_is_the_key_text_with_a_star():
    s = _as_series(_sweep(10))
    assert s.key_text() == "gemm/fwd/fp16/m=*,n=4096,k=4096"
    assert s.text_at(24) == s.key_at(24).text() == "gemm/fwd/fp16/m=24,n=4096,k=4096"
    fa = [store.KernelRow("H100", make_key("flash_attn", "fwd", {"batch": 1, "seq_q": q, "seq_kv": 4096, "heads": 8,
                                                                  "kv_heads": 8, "head_dim_qk": 128, "head_dim_v": 128},
                                           "bf16", causal=True), 1e-4, 1e-4, 1e-4, 0.0, 1, "imported", "t")
          for q in range(64, 64 * 9, 64)]
    assert _as_series(fa).key_text() == ("flash_attn/fwd/bf16/causal/batch=1,seq_q=*,seq_kv=4096,heads=8,kv_heads=8,"
                                         "head_dim_qk=128,head_dim_v=128")


def test_schema_1_file_is_read_and_upgraded_on_write(tmp_path):
    db = tmp_path / "v1.sqlite"
    conn = sqlite3.connect(db)
    conn.executescript("""CREATE TABLE meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
        CREATE TABLE kernels (gpu TEXT NOT NULL, key TEXT NOT NULL, kind TEXT NOT NULL, variant TEXT NOT NULL,
        dtype TEXT NOT NULL, mean_s REAL NOT NULL, median_s REAL NOT NULL, min_s REAL NOT NULL, std_s REAL NOT NULL,
        samples INTEGER NOT NULL, provenance TEXT NOT NULL, source TEXT NOT NULL, device TEXT NOT NULL DEFAULT '',
        driver TEXT NOT NULL DEFAULT '', torch TEXT NOT NULL DEFAULT '', cuda TEXT NOT NULL DEFAULT '',
        date TEXT NOT NULL DEFAULT '', PRIMARY KEY (gpu, key, source));
        INSERT INTO meta VALUES ('format', 'clustersim-compute-db'), ('schema_version', '1');
        INSERT INTO kernels VALUES ('H100', 'gemm/fwd/bf16/m=64,n=128,k=256', 'gemm', 'fwd', 'bf16', 1e-5, 1e-5,
        1e-5, 0, 1, 'measured', 'old', '', '', '', '', '');""")
    conn.commit()
    conn.close()
    assert [r.median_s for r in store.read_rows(db)] == [1e-5]
    assert store.gpus_in(db) == ["H100"]
    store.write_data(db, figures=[store.Figure("H100", "default", "", "hbm_efficiency", 0.8, "test")])
    conn = sqlite3.connect(db)
    assert conn.execute("SELECT value FROM meta WHERE name='schema_version'").fetchone() == ("2",)
    conn.close()
    assert store.read_figures(db)[0].value == 0.8 and len(store.read_rows(db)) == 1


def test_corrupt_series_blob_clear_error(tmp_path):
    db = tmp_path / "s.sqlite"
    store.write_fresh(db, _sweep(10), pack=True)
    conn = sqlite3.connect(db)
    conn.execute("UPDATE series SET median_s = X'00010203'")
    conn.commit()
    conn.close()
    with pytest.raises(ComputeDBError, match=r"s.sqlite: series gemm/fwd/fp16/m=\*,n=4096,k=4096 \(sweep\): corrupt"):
        store.read_rows(db)


def test_bad_figures_rejected(tmp_path):
    with pytest.raises(ComputeDBError, match="figure 1: figure hbm_efficiency must be a positive efficiency"):
        store.write_data(tmp_path / "f.sqlite", figures=[store.Figure("H100", "default", "", "hbm_efficiency", -1,
                                                                      "x")])
    with pytest.raises(ComputeDBError, match="figure name must be one of hbm_efficiency"):
        store.write_data(tmp_path / "f.sqlite", figures=[store.Figure("H100", "default", "", "tflops", 0.5, "x")])
