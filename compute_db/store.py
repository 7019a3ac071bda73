"""SQLite store of kernel timings (standard-library sqlite3), many GPUs per file.

Table `kernels`: one row per (gpu, kernel key, source) with time statistics in seconds and provenance
("measured": device, driver, torch, CUDA versions, date; "imported": the source it came from).
Table `series` (schema 2): a sweep of one kernel shape along one field (e.g. a Vidur GEMM at every token
count) stored compactly: the key with the swept field written `field=*`, the field's values and the time
statistics as zlib-compressed little-endian arrays (int64 values, float64 medians, float32 mean/min/std,
int32 samples). A series holds exactly the rows it expands to (`KernelSeries.rows`); a plain row with the
same (gpu, key, source) wins over the series point. Writes replace per point, as INSERT OR REPLACE does for
rows: a series written for a (gpu, key, source) that already has one is merged with it point by point (the new
points win, old points at other values stay; the merged series carries the new series' provenance fields), and
plain rows of the same (gpu, source) at the series' points are deleted (the new data must answer them).
Table `figures` (schema 2): measured per-family efficiency figures that are not kernel rows (e.g. SimuMax's
HBM efficiency of memory-bound kernels on a GPU): (gpu, family, variant, name, value, source, note).
Table `collectives` (added to schema 2 files when written; absent = none): measured collective times over
message size, one row per (gpu, collective, num_workers, devices_per_node, size_bytes, source) — e.g. Vidur's
network profiles (all_reduce.csv / send_recv.csv); collective names are netsim's (all_reduce, send, ...).
Table `meta`: `format` = clustersim-compute-db and `schema_version`, so a foreign or corrupt SQLite file
is refused with a clear error; schema 1 files (kernels only) are read as they are and upgraded in place
(tables added) when written. Readers open the file read-only (URI mode=ro) and load a GPU's data once,
so any number of concurrent readers is safe; writers use one transaction per batch.
"""

from __future__ import annotations

import csv
import math
import os
import sqlite3
import tempfile
import zlib
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import numpy as np

from compute_db.errors import ComputeDBError
from compute_db.keys import KernelKey, parse_key_text

FORMAT_NAME = "clustersim-compute-db"
SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
PROVENANCES = ("measured", "imported")
# The field a series sweeps, per kind (the token-like dimension); other kinds sweep their first field.
SERIES_FIELD = {"gemm": "m", "grouped_gemm": "m", "attn_bmm": "m", "flash_attn": "seq_q", "attn_decode": "kv_tokens",
                "elementwise": "numel", "dropout": "numel", "memcpy": "bytes", "softmax": "rows",
                "optimizer": "params"}
MIN_SERIES_POINTS = 8     # shorter sweeps stay plain rows

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS kernels (
    gpu TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    variant TEXT NOT NULL,
    dtype TEXT NOT NULL,
    mean_s REAL NOT NULL,
    median_s REAL NOT NULL,
    min_s REAL NOT NULL,
    std_s REAL NOT NULL,
    samples INTEGER NOT NULL,
    provenance TEXT NOT NULL,
    source TEXT NOT NULL,
    device TEXT NOT NULL DEFAULT '',
    driver TEXT NOT NULL DEFAULT '',
    torch TEXT NOT NULL DEFAULT '',
    cuda TEXT NOT NULL DEFAULT '',
    date TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (gpu, key, source)
);
CREATE INDEX IF NOT EXISTS kernels_gpu ON kernels (gpu, kind);
CREATE TABLE IF NOT EXISTS series (
    gpu TEXT NOT NULL,
    key TEXT NOT NULL,
    kind TEXT NOT NULL,
    variant TEXT NOT NULL,
    dtype TEXT NOT NULL,
    field TEXT NOT NULL,
    count INTEGER NOT NULL,
    field_values BLOB NOT NULL,
    median_s BLOB NOT NULL,
    mean_s BLOB NOT NULL,
    min_s BLOB NOT NULL,
    std_s BLOB NOT NULL,
    samples BLOB NOT NULL,
    provenance TEXT NOT NULL,
    source TEXT NOT NULL,
    device TEXT NOT NULL DEFAULT '',
    driver TEXT NOT NULL DEFAULT '',
    torch TEXT NOT NULL DEFAULT '',
    cuda TEXT NOT NULL DEFAULT '',
    date TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (gpu, key, source)
);
CREATE TABLE IF NOT EXISTS figures (
    gpu TEXT NOT NULL,
    family TEXT NOT NULL,
    variant TEXT NOT NULL,
    name TEXT NOT NULL,
    value REAL NOT NULL,
    source TEXT NOT NULL,
    note TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (gpu, family, variant, name, source)
);
CREATE TABLE IF NOT EXISTS collectives (
    gpu TEXT NOT NULL,
    collective TEXT NOT NULL,
    num_workers INTEGER NOT NULL,
    devices_per_node INTEGER NOT NULL,
    size_bytes INTEGER NOT NULL,
    mean_s REAL NOT NULL,
    median_s REAL NOT NULL,
    min_s REAL NOT NULL,
    std_s REAL NOT NULL,
    samples INTEGER NOT NULL,
    provenance TEXT NOT NULL,
    source TEXT NOT NULL,
    device TEXT NOT NULL DEFAULT '',
    date TEXT NOT NULL DEFAULT '',
    PRIMARY KEY (gpu, collective, num_workers, devices_per_node, size_bytes, source)
);
"""
FIGURE_NAMES = ("hbm_efficiency",)   # dimensionless, of the GPU table's HBM bandwidth


@dataclass(frozen=True)
class KernelRow:
    gpu: str
    key: KernelKey
    mean_s: float
    median_s: float
    min_s: float
    std_s: float
    samples: int                 # 0 when the source does not say
    provenance: str              # "measured" | "imported"
    source: str                  # importer/file or "aiob-runner"; rows are unique per (gpu, key, source)
    device: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str = ""
    date: str = ""

    @property
    def time_s(self) -> float:
        """The representative time: the median (robust to outliers)."""
        return self.median_s


@dataclass(frozen=True, eq=False)
class KernelSeries:
    """Rows of one kernel shape swept along one field (`key` holds 1 in that field; `values` ascending)."""
    gpu: str
    key: KernelKey
    field: str
    values: np.ndarray           # int64, strictly increasing
    median_s: np.ndarray         # float64
    mean_s: np.ndarray
    min_s: np.ndarray
    std_s: np.ndarray
    samples: np.ndarray          # int
    provenance: str
    source: str
    device: str = ""
    driver: str = ""
    torch: str = ""
    cuda: str = ""
    date: str = ""

    @property
    def axis(self) -> int:
        return self.key.fields.index(self.field)

    def key_at(self, value: int) -> KernelKey:
        d = list(self.key.dims)
        d[self.axis] = int(value)
        return KernelKey(self.key.kind, self.key.variant, tuple(d), self.key.dtype, self.key.causal)

    def key_text(self) -> str:
        """The series' stored key: KernelKey.text() with the swept field written `field=*`."""
        return self.text_at("*")

    def text_at(self, value: int | str) -> str:
        """KernelKey.text() of the key with the swept field set to `value` (`key_at(value).text()` for an int)."""
        text, dims = self.key.text(), self.key.dims_text()
        parts = dims.split(",")
        parts[self.axis] = f"{self.field}={value}"
        return text[:len(text) - len(dims)] + ",".join(parts)

    def rows(self) -> list[KernelRow]:
        meta = (self.provenance, self.source, self.device, self.driver, self.torch, self.cuda, self.date)
        return [KernelRow(self.gpu, self.key_at(v), float(a), float(b), float(c), float(d), int(n), *meta)
                for v, a, b, c, d, n in zip(self.values.tolist(), self.mean_s.tolist(), self.median_s.tolist(),
                                            self.min_s.tolist(), self.std_s.tolist(), self.samples.tolist())]


@dataclass(frozen=True)
class Figure:
    """A measured efficiency figure of a kernel family on a GPU (not a kernel row), e.g. HBM efficiency."""
    gpu: str
    family: str                  # op family (keys.FAMILY values) or "default" (every memory-bound family)
    variant: str                 # "" = any variant, else fwd | bwd
    name: str                    # FIGURE_NAMES
    value: float
    source: str
    note: str = ""


@dataclass(frozen=True)
class CollectiveRow:
    """Measured time of one collective at one message size on a group of `num_workers` GPUs spread
    `devices_per_node` per server (num_workers == devices_per_node: inside one server)."""
    gpu: str
    collective: str              # netsim name: all_reduce, send, all_gather, reduce_scatter, all_to_all
    num_workers: int
    devices_per_node: int
    size_bytes: int              # message size as netsim's CollectiveRequest counts it (bytes per rank)
    mean_s: float
    median_s: float
    min_s: float
    std_s: float
    samples: int                 # 0 when the source does not say
    provenance: str              # "measured" | "imported"
    source: str
    device: str = ""
    date: str = ""

    @property
    def time_s(self) -> float:
        return self.median_s


def pack_series(rows: Iterable[KernelRow], min_points: int = MIN_SERIES_POINTS
                ) -> tuple[list[KernelRow], list[KernelSeries]]:
    """Split rows into plain rows and series: rows equal in everything but the swept field (SERIES_FIELD)."""
    groups: dict[tuple, list[KernelRow]] = defaultdict(list)
    for r in rows:
        k = r.key
        field = SERIES_FIELD.get(k.kind, k.fields[0])
        i = k.fields.index(field)
        base = KernelKey(k.kind, k.variant, k.dims[:i] + (1,) + k.dims[i + 1:], k.dtype, k.causal)
        groups[(r.gpu, base, field, r.provenance, r.source, r.device, r.driver, r.torch, r.cuda, r.date)].append(r)
    plain: list[KernelRow] = []
    series: list[KernelSeries] = []
    for (gpu, base, field, prov, source, device, driver, torch, cuda, date), rs in groups.items():
        if len(rs) < min_points:
            plain.extend(rs)
            continue
        i = base.fields.index(field)
        rs = sorted(rs, key=lambda r: r.key.dims[i])
        series.append(KernelSeries(
            gpu, base, field, np.array([r.key.dims[i] for r in rs], dtype=np.int64),
            np.array([r.median_s for r in rs]), np.array([r.mean_s for r in rs]),
            np.array([r.min_s for r in rs]), np.array([r.std_s for r in rs]),
            np.array([r.samples for r in rs], dtype=np.int64), prov, source, device, driver, torch, cuda, date))
    return plain, series


def _blob(arr: np.ndarray, dtype: str) -> bytes:
    return zlib.compress(np.ascontiguousarray(arr, dtype=dtype).tobytes(), 9)


def _unblob(data: bytes, dtype: str, count: int, where: str) -> np.ndarray:
    try:
        arr = np.frombuffer(zlib.decompress(data), dtype=dtype)
    except (zlib.error, TypeError, ValueError) as exc:
        raise ComputeDBError(f"{where}: corrupt series data ({exc})") from None
    if arr.size != count:
        raise ComputeDBError(f"{where}: corrupt series data ({arr.size} values, expected {count})")
    return arr


def _parse_series_key(text: str, field: str, where: str) -> KernelKey:
    if f"{field}=*" not in text.split("/")[-1].split(","):
        raise ComputeDBError(f"{where}: series key '{text}' does not mark field '{field}' with '*'")
    return parse_key_text(text.replace(f"{field}=*", f"{field}=1"))


CSV_COLUMNS = ("gpu", "key", "mean_s", "median_s", "min_s", "std_s", "samples", "provenance", "source",
               "device", "driver", "torch", "cuda", "date")


def _check_row(row: KernelRow, where: str) -> None:
    for name in ("mean_s", "median_s", "min_s", "std_s"):
        v = getattr(row, name)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (name != "std_s" and v <= 0):
            raise ComputeDBError(f"{where}: {name} must be a finite positive number of seconds, got {v!r}")
    if row.provenance not in PROVENANCES:
        raise ComputeDBError(f"{where}: provenance must be one of {', '.join(PROVENANCES)}, got {row.provenance!r}")
    if not row.gpu or not row.source:
        raise ComputeDBError(f"{where}: gpu and source must be non-empty")


def _ro_uri(path: Path) -> str:
    return path.resolve().as_uri() + "?mode=ro"


def _check_meta(conn: sqlite3.Connection, path: Path) -> None:
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    except sqlite3.DatabaseError as exc:
        raise ComputeDBError(f"{path}: corrupt or not a clustersim compute DB (SQLite error: {exc})") from None
    if "meta" not in tables or "kernels" not in tables:
        raise ComputeDBError(f"{path}: not a clustersim compute DB (SQLite file without the meta/kernels tables)")
    meta = dict(conn.execute("SELECT name, value FROM meta"))
    if meta.get("format") != FORMAT_NAME:
        raise ComputeDBError(f"{path}: not a clustersim compute DB (meta.format is {meta.get('format')!r})")
    try:
        version = int(meta.get("schema_version", ""))
    except ValueError:
        raise ComputeDBError(f"{path}: compute DB without a valid schema_version") from None
    if version not in READABLE_VERSIONS:
        raise ComputeDBError(f"{path}: compute DB schema version {version}; this clustersim reads versions "
                             f"{', '.join(map(str, READABLE_VERSIONS))}")


def connect_ro(path: str | Path) -> sqlite3.Connection:
    """Read-only connection to an existing compute DB (validated)."""
    path = Path(path)
    if path.is_dir():
        raise ComputeDBError(f"{path}: is a directory, not a compute DB file")
    if not path.is_file():
        raise ComputeDBError(f"{path}: compute DB file not found")
    try:
        conn = sqlite3.connect(_ro_uri(path), uri=True)
    except sqlite3.Error as exc:
        raise ComputeDBError(f"{path}: cannot open compute DB ({exc})") from None
    try:
        _check_meta(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


def check_output_path(path: str | Path) -> Path:
    """An output file path: not a directory, in an existing folder (nothing is created outside it)."""
    path = Path(path)
    if path.is_dir():
        raise ComputeDBError(f"{path}: is a directory; give a file name")
    parent = path.parent
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise ComputeDBError(f"{path}: cannot write (folder {parent} {what})")
    return path


def create(path: str | Path) -> None:
    """Create an empty compute DB (or validate an existing one)."""
    path = Path(path)
    if path.exists():
        connect_ro(path).close()
        return
    check_output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        conn = sqlite3.connect(tmp)
        with conn:
            conn.executescript(_SCHEMA)
            conn.executemany("INSERT OR REPLACE INTO meta VALUES (?, ?)",
                             [("format", FORMAT_NAME), ("schema_version", str(SCHEMA_VERSION))])
        conn.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _check_series(s: KernelSeries, where: str) -> None:
    n = s.values.size
    if n == 0 or any(a.size != n for a in (s.median_s, s.mean_s, s.min_s, s.std_s, s.samples)):
        raise ComputeDBError(f"{where}: series arrays must be non-empty and of equal length")
    if np.any(np.diff(s.values) <= 0) or s.values[0] <= 0:
        raise ComputeDBError(f"{where}: series values of '{s.field}' must be positive and strictly increasing")
    for name in ("mean_s", "median_s", "min_s", "std_s"):
        v = getattr(s, name)
        if not np.all(np.isfinite(v)) or np.any(v < 0) or (name != "std_s" and np.any(v <= 0)):
            raise ComputeDBError(f"{where}: {name} must be finite positive numbers of seconds")
    if s.provenance not in PROVENANCES:
        raise ComputeDBError(f"{where}: provenance must be one of {', '.join(PROVENANCES)}, got {s.provenance!r}")
    if not s.gpu or not s.source:
        raise ComputeDBError(f"{where}: gpu and source must be non-empty")


def _check_figure(f: Figure, where: str) -> None:
    if f.name not in FIGURE_NAMES:
        raise ComputeDBError(f"{where}: figure name must be one of {', '.join(FIGURE_NAMES)}, got {f.name!r}")
    if not (isinstance(f.value, (int, float)) and math.isfinite(f.value) and 0 < f.value <= 1.5):
        raise ComputeDBError(f"{where}: figure {f.name} must be a positive efficiency, got {f.value!r}")
    if not f.gpu or not f.source or not f.family:
        raise ComputeDBError(f"{where}: gpu, family and source must be non-empty")


def _check_collective(c: CollectiveRow, where: str) -> None:
    for name in ("num_workers", "devices_per_node", "size_bytes"):
        v = getattr(c, name)
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ComputeDBError(f"{where}: {name} must be a positive integer, got {v!r}")
    if c.devices_per_node > c.num_workers or c.num_workers % c.devices_per_node:
        raise ComputeDBError(f"{where}: devices_per_node {c.devices_per_node} must divide num_workers {c.num_workers}")
    for name in ("mean_s", "median_s", "min_s", "std_s"):
        v = getattr(c, name)
        if not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0 or (name != "std_s" and v <= 0):
            raise ComputeDBError(f"{where}: {name} must be a finite positive number of seconds, got {v!r}")
    if c.provenance not in PROVENANCES:
        raise ComputeDBError(f"{where}: provenance must be one of {', '.join(PROVENANCES)}, got {c.provenance!r}")
    if not c.gpu or not c.source or not c.collective:
        raise ComputeDBError(f"{where}: gpu, collective and source must be non-empty")


def _series_record(s: KernelSeries) -> tuple:
    return (s.gpu, s.key_text(), s.key.kind, s.key.variant, s.key.dtype, s.field, int(s.values.size),
            _blob(s.values, "<i8"), _blob(s.median_s, "<f8"), _blob(s.mean_s, "<f4"), _blob(s.min_s, "<f4"),
            _blob(s.std_s, "<f4"), _blob(s.samples, "<i4"), s.provenance, s.source, s.device, s.driver, s.torch,
            s.cuda, s.date)


def _merge_stored(conn: sqlite3.Connection, path: Path, s: KernelSeries) -> KernelSeries:
    """`s` merged with the stored series of the same (gpu, key, source), if any: the union of their points,
    `s`'s where both have one (module docstring)."""
    rec = conn.execute(_SELECT_SERIES + " WHERE gpu = ? AND key = ? AND source = ?",
                       (s.gpu, s.key_text(), s.source)).fetchone()
    if rec is None:
        return s
    old = _series_from_record(rec, f"{path}")
    keep = ~np.isin(old.values, s.values)
    if not keep.any():
        return s
    values = np.concatenate((old.values[keep], s.values))
    order = np.argsort(values, kind="stable")
    merged = {name: np.concatenate((getattr(old, name)[keep], getattr(s, name)))[order]
              for name in ("median_s", "mean_s", "min_s", "std_s", "samples")}
    return replace(s, values=values[order], **merged)


def _write(path: Path, rows: Iterable[KernelRow] = (), series: Iterable[KernelSeries] = (),
           figures: Iterable[Figure] = (), collectives: Iterable[CollectiveRow] = ()) -> int:
    items = []
    for i, row in enumerate(rows):
        _check_row(row, f"row {i + 1}")
        items.append((row.gpu, row.key.text(), row.key.kind, row.key.variant, row.key.dtype, row.mean_s,
                      row.median_s, row.min_s, row.std_s, int(row.samples), row.provenance, row.source,
                      row.device, row.driver, row.torch, row.cuda, row.date))
    series = list(series)
    for i, s in enumerate(series):
        _check_series(s, f"series {i + 1}")
    n_points = sum(s.values.size for s in series)
    fitems = []
    for i, f in enumerate(figures):
        _check_figure(f, f"figure {i + 1}")
        fitems.append((f.gpu, f.family, f.variant, f.name, float(f.value), f.source, f.note))
    citems = []
    for i, c in enumerate(collectives):
        _check_collective(c, f"collective row {i + 1}")
        citems.append((c.gpu, c.collective, c.num_workers, c.devices_per_node, c.size_bytes, float(c.mean_s),
                       float(c.median_s), float(c.min_s), float(c.std_s), int(c.samples), c.provenance, c.source,
                       c.device, c.date))
    try:
        conn = sqlite3.connect(str(path), timeout=30)
        if not {"series", "figures", "collectives"} <= _tables(conn):
            conn.executescript(_SCHEMA)     # an older file gains the newer tables (IF NOT EXISTS)
        with conn:
            conn.execute("INSERT OR REPLACE INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            sitems = []
            for s in series:
                s = _merge_stored(conn, path, s)
                conn.executemany("DELETE FROM kernels WHERE gpu = ? AND key = ? AND source = ?",
                                 [(s.gpu, s.text_at(v), s.source) for v in s.values.tolist()])
                sitems.append(_series_record(s))
            conn.executemany("INSERT OR REPLACE INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", items)
            conn.executemany("INSERT OR REPLACE INTO series VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                             sitems)
            conn.executemany("INSERT OR REPLACE INTO figures VALUES (?,?,?,?,?,?,?)", fitems)
            conn.executemany("INSERT OR REPLACE INTO collectives VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)", citems)
        conn.close()
    except sqlite3.Error as exc:
        raise ComputeDBError(f"{path}: cannot write compute DB ({exc})") from None
    return len(items) + n_points + len(fitems) + len(citems)


def write_rows(path: str | Path, rows: Iterable[KernelRow], create_missing: bool = True) -> int:
    """Insert or replace rows (one transaction). Returns the number written."""
    path = Path(path)
    if create_missing and not path.exists():
        create(path)
    connect_ro(path).close()  # validates format before writing
    return _write(path, rows)


def write_data(path: str | Path, rows: Iterable[KernelRow] = (), series: Iterable[KernelSeries] = (),
               figures: Iterable[Figure] = (), create_missing: bool = True,
               collectives: Iterable[CollectiveRow] = ()) -> int:
    """Insert or replace rows, series, figures and collective rows (one transaction). Returns rows + series
    points + figures + collective rows."""
    path = Path(path)
    if create_missing and not path.exists():
        create(path)
    connect_ro(path).close()
    return _write(path, rows, series, figures, collectives)


def write_fresh(path: str | Path, rows: Iterable[KernelRow], figures: Iterable[Figure] = (),
                pack: bool = False, series: Iterable[KernelSeries] = (),
                collectives: Iterable[CollectiveRow] = ()) -> int:
    """Write a new DB holding exactly `rows`, `series` (and `figures`), replacing `path` atomically (temp file +
    rename). Returns rows + series points + figures.

    pack: store sweeps of `rows` along a kind's token-like field as series (pack_series; compact, same rows)."""
    path = check_output_path(path)
    rows = list(rows)
    plain, packed = pack_series(rows) if pack else (rows, [])
    series = packed + list(series)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".new", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)
    try:
        create(tmp)
        n = write_data(tmp, plain, series, figures, create_missing=False, collectives=collectives)
        conn = sqlite3.connect(tmp)
        conn.execute("VACUUM")
        conn.close()
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


def _row_from_record(rec: tuple, where: str) -> KernelRow:
    (gpu, key, mean_s, median_s, min_s, std_s, samples, prov, source, device, driver, torch, cuda, date) = rec
    w = f"{where}: row {key} ({source})"
    try:   # SQLite keeps text in a REAL column as text: a hand-edited DB must fail here, in one line
        row = KernelRow(gpu, parse_key_text(key), float(mean_s), float(median_s), float(min_s), float(std_s),
                        int(samples), prov, source, device or "", driver or "", torch or "", cuda or "", date or "")
    except ComputeDBError as exc:
        raise ComputeDBError(f"{w}: {exc}") from None
    except (TypeError, ValueError, OverflowError) as exc:
        raise ComputeDBError(f"{w}: {exc}") from None
    _check_row(row, w)
    return row


_SELECT = ("SELECT gpu, key, mean_s, median_s, min_s, std_s, samples, provenance, source, device, driver, "
           "torch, cuda, date FROM kernels")


def _tables(conn: sqlite3.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}


_SELECT_SERIES = ("SELECT gpu, key, field, count, field_values, median_s, mean_s, min_s, std_s, samples, provenance, "
                  "source, device, driver, torch, cuda, date FROM series")


def _series_from_record(rec: tuple, where: str) -> KernelSeries:
    (gpu, key, field, count, vals, med, mean, mn, std, samples, prov, source, device, driver, torch, cuda,
     date) = rec
    w = f"{where}: series {key} ({source})"
    return KernelSeries(gpu, _parse_series_key(key, field, w), field, _unblob(vals, "<i8", count, w),
                        _unblob(med, "<f8", count, w), _unblob(mean, "<f4", count, w).astype(float),
                        _unblob(mn, "<f4", count, w).astype(float), _unblob(std, "<f4", count, w).astype(float),
                        _unblob(samples, "<i4", count, w).astype(np.int64), prov, source, device or "",
                        driver or "", torch or "", cuda or "", date or "")


def read_data(path: str | Path, gpu: str | None = None
              ) -> tuple[list[KernelRow], list[KernelSeries], list[Figure]]:
    """(plain rows, series, figures) of one GPU (or all), validated; the compact form lookups load."""
    conn = connect_ro(path)
    try:
        tables = _tables(conn)
        where, args = ("", ()) if gpu is None else (" WHERE gpu = ?", (gpu,))
        rows = [_row_from_record(r, f"{path}") for r in conn.execute(_SELECT + where + " ORDER BY gpu, key, source",
                                                                      args)]
        series = []
        if "series" in tables:
            series = [_series_from_record(r, f"{path}")
                      for r in conn.execute(_SELECT_SERIES + where + " ORDER BY gpu, key, source", args)]
        figures = []
        if "figures" in tables:
            figures = [Figure(*r) for r in conn.execute(
                "SELECT gpu, family, variant, name, value, source, note FROM figures" + where
                + " ORDER BY gpu, family, variant, name, source", args)]
        return rows, series, figures
    except sqlite3.DatabaseError as exc:
        raise ComputeDBError(f"{path}: corrupt compute DB ({exc})") from None
    finally:
        conn.close()


def read_rows(path: str | Path, gpu: str | None = None) -> list[KernelRow]:
    """All rows (of one GPU when given), series expanded, validated; ordered by gpu, key, source."""
    rows, series, _ = read_data(path, gpu)
    if not series:
        return rows
    have = {(r.gpu, r.key, r.source) for r in rows}
    out = list(rows)
    for s in series:
        out.extend(r for r in s.rows() if (r.gpu, r.key, r.source) not in have)
    out.sort(key=lambda r: (r.gpu, r.key.text(), r.source))
    return out


def read_figures(path: str | Path, gpu: str | None = None) -> list[Figure]:
    return read_data(path, gpu)[2]


def read_collectives(path: str | Path, gpu: str | None = None) -> list[CollectiveRow]:
    """Collective rows of one GPU (or all), ordered by gpu, collective, setting, size, source (none in a file
    without the table)."""
    conn = connect_ro(path)
    try:
        if "collectives" not in _tables(conn):
            return []
        where, args = ("", ()) if gpu is None else (" WHERE gpu = ?", (gpu,))
        out = []
        for rec in conn.execute(
                "SELECT gpu, collective, num_workers, devices_per_node, size_bytes, mean_s, median_s, min_s, std_s, "
                "samples, provenance, source, device, date FROM collectives" + where
                + " ORDER BY gpu, collective, num_workers, devices_per_node, size_bytes, source", args):
            (g, coll, nw, dpn, size, mean, med, mn, std, samples, prov, source, device, date) = rec
            c = CollectiveRow(g, coll, int(nw), int(dpn), int(size), float(mean), float(med), float(mn), float(std),
                              int(samples), prov, source, device or "", date or "")
            _check_collective(c, f"{path}: collective {coll} ({source})")
            out.append(c)
        return out
    except sqlite3.DatabaseError as exc:
        raise ComputeDBError(f"{path}: corrupt compute DB ({exc})") from None
    finally:
        conn.close()


def gpus_in(path: str | Path) -> list[str]:
    """GPUs with rows, series or figures in the file."""
    conn = connect_ro(path)
    try:
        tables = _tables(conn)
        names = {r[0] for r in conn.execute("SELECT DISTINCT gpu FROM kernels")}
        for t in ("series", "figures", "collectives"):
            if t in tables:
                names.update(r[0] for r in conn.execute(f"SELECT DISTINCT gpu FROM {t}"))
        return sorted(names)
    except sqlite3.DatabaseError as exc:
        raise ComputeDBError(f"{path}: corrupt compute DB ({exc})") from None
    finally:
        conn.close()


def summary(path: str | Path) -> list[tuple[str, str, str, int]]:
    """(gpu, kind, provenance, rows) counts; series count their points; figures appear as kind 'figure:<name>',
    collective rows as 'collective:<name>'."""
    conn = connect_ro(path)
    try:
        tables = _tables(conn)
        counts: dict[tuple[str, str, str], int] = defaultdict(int)
        for g, k, p, n in conn.execute("SELECT gpu, kind, provenance, COUNT(*) FROM kernels "
                                       "GROUP BY gpu, kind, provenance"):
            counts[(g, k, p)] += n
        if "series" in tables:
            for g, k, p, n in conn.execute("SELECT gpu, kind, provenance, SUM(count) FROM series "
                                           "GROUP BY gpu, kind, provenance"):
                counts[(g, k, p)] += n
        if "figures" in tables:
            for g, name, n in conn.execute("SELECT gpu, name, COUNT(*) FROM figures GROUP BY gpu, name"):
                counts[(g, f"figure:{name}", "imported")] += n
        if "collectives" in tables:
            for g, name, p, n in conn.execute("SELECT gpu, collective, provenance, COUNT(*) FROM collectives "
                                              "GROUP BY gpu, collective, provenance"):
                counts[(g, f"collective:{name}", p)] += n
        return [(g, k, p, n) for (g, k, p), n in sorted(counts.items())]
    except sqlite3.DatabaseError as exc:
        raise ComputeDBError(f"{path}: corrupt compute DB ({exc})") from None
    finally:
        conn.close()


def _write_csv_rows(fh, rows: list[KernelRow]) -> None:
    w = csv.writer(fh)
    w.writerow(CSV_COLUMNS)
    for r in rows:
        d = asdict(r)
        d["key"] = r.key.text()
        w.writerow([repr(d[c]) if isinstance(d[c], float) else d[c] for c in CSV_COLUMNS])


def export_csv(db_path: str | Path, csv_path: str | Path, gpu: str | None = None) -> int:
    """Write rows as CSV (columns CSV_COLUMNS, seconds), atomically; `csv_path` "-" = stdout.

    Returns the row count."""
    to_stdout = str(csv_path) == "-"
    if not to_stdout:
        csv_path = check_output_path(csv_path)
    rows = read_rows(db_path, gpu)
    if gpu is not None and not rows:
        known = gpus_in(db_path)
        raise ComputeDBError(f"--gpu: no rows for GPU {gpu!r} in {db_path} (GPUs in it: {', '.join(known) or 'none'})")
    if to_stdout:
        import sys
        _write_csv_rows(sys.stdout, rows)
        return len(rows)
    fd, tmp = tempfile.mkstemp(prefix=csv_path.name + ".", suffix=".tmp", dir=csv_path.parent or ".")
    try:
        with os.fdopen(fd, "w", newline="") as fh:
            _write_csv_rows(fh, rows)
        os.chmod(tmp, 0o644)
        os.replace(tmp, csv_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return len(rows)


def iter_csv(csv_path: str | Path) -> Iterator[KernelRow]:
    """Rows of a CSV written by export_csv (validated; errors name file:line)."""
    csv_path = Path(csv_path)
    try:
        yield from _iter_csv(csv_path)
    except UnicodeDecodeError:   # the text reader decodes in blocks: find the line from the bytes
        data = csv_path.read_bytes()
        try:
            data.decode("utf-8")
            line = 1
        except UnicodeDecodeError as exc:
            line = data.count(b"\n", 0, exc.start) + 1
        raise ComputeDBError(f"{csv_path}:{line}: not UTF-8 text") from None
    except csv.Error as exc:
        raise ComputeDBError(f"{csv_path}: malformed CSV ({exc})") from None


def _iter_csv(csv_path: Path) -> Iterator[KernelRow]:
    with open(csv_path, newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in ("gpu", "key", "median_s") if c not in (reader.fieldnames or [])]
        if missing:
            raise ComputeDBError(f"{csv_path}:1: missing column(s) {', '.join(missing)}")
        for i, rec in enumerate(reader, start=2):
            where = f"{csv_path}:{i}"
            try:
                median = float(rec["median_s"])
                row = KernelRow(
                    gpu=rec["gpu"], key=parse_key_text(rec["key"]),
                    mean_s=float(rec.get("mean_s") or median), median_s=median,
                    min_s=float(rec.get("min_s") or median), std_s=float(rec.get("std_s") or 0.0),
                    samples=int(float(rec.get("samples") or 0)), provenance=rec.get("provenance") or "imported",
                    source=rec.get("source") or f"csv:{csv_path.name}",
                    **{f.name: rec.get(f.name) or "" for f in fields(KernelRow)
                       if f.name in ("device", "driver", "torch", "cuda", "date")})
            except ComputeDBError as exc:
                raise ComputeDBError(f"{where}: {exc}") from None
            except (TypeError, ValueError, OverflowError) as exc:   # OverflowError: int(float("1e400"))
                raise ComputeDBError(f"{where}: {exc}") from None
            _check_row(row, where)
            yield row
