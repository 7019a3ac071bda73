"""SQLite store of kernel timings (standard-library sqlite3), many GPUs per file.

Table `kernels`: one row per (gpu, kernel key, source) with time statistics in seconds and provenance
("measured": device, driver, torch, CUDA versions, date; "imported": the source it came from).
Table `meta`: `format` = clustersim-compute-db and `schema_version`, so a foreign or corrupt SQLite file
is refused with a clear error. Readers open the file read-only (URI mode=ro) and load a GPU's rows once,
so any number of concurrent readers is safe; writers use one transaction per batch.
"""

from __future__ import annotations

import csv
import math
import os
import sqlite3
import tempfile
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from compute_db.errors import ComputeDBError
from compute_db.keys import KernelKey, parse_key_text

FORMAT_NAME = "clustersim-compute-db"
SCHEMA_VERSION = 1
PROVENANCES = ("measured", "imported")

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
"""


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
    if version != SCHEMA_VERSION:
        raise ComputeDBError(f"{path}: compute DB schema version {version}; this clustersim reads version "
                             f"{SCHEMA_VERSION}")


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


def write_rows(path: str | Path, rows: Iterable[KernelRow], create_missing: bool = True) -> int:
    """Insert or replace rows (one transaction). Returns the number written."""
    path = Path(path)
    if create_missing and not path.exists():
        create(path)
    connect_ro(path).close()  # validates format before writing
    items = []
    for i, row in enumerate(rows):
        _check_row(row, f"row {i + 1}")
        items.append((row.gpu, row.key.text(), row.key.kind, row.key.variant, row.key.dtype, row.mean_s,
                      row.median_s, row.min_s, row.std_s, int(row.samples), row.provenance, row.source,
                      row.device, row.driver, row.torch, row.cuda, row.date))
    try:
        conn = sqlite3.connect(str(path), timeout=30)
        with conn:
            conn.executemany("INSERT OR REPLACE INTO kernels VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", items)
        conn.close()
    except sqlite3.Error as exc:
        raise ComputeDBError(f"{path}: cannot write compute DB ({exc})") from None
    return len(items)


def write_fresh(path: str | Path, rows: Iterable[KernelRow]) -> int:
    """Write a new DB holding exactly `rows`, replacing `path` atomically (temp file + rename)."""
    path = check_output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=path.name + ".", suffix=".new", dir=path.parent)
    os.close(fd)
    os.unlink(tmp)
    try:
        create(tmp)
        n = write_rows(tmp, rows, create_missing=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return n


def _row_from_record(rec: tuple, where: str) -> KernelRow:
    (gpu, key, mean_s, median_s, min_s, std_s, samples, prov, source, device, driver, torch, cuda, date) = rec
    return KernelRow(gpu, parse_key_text(key), float(mean_s), float(median_s), float(min_s), float(std_s),
                     int(samples), prov, source, device or "", driver or "", torch or "", cuda or "", date or "")


_SELECT = ("SELECT gpu, key, mean_s, median_s, min_s, std_s, samples, provenance, source, device, driver, "
           "torch, cuda, date FROM kernels")


def read_rows(path: str | Path, gpu: str | None = None) -> list[KernelRow]:
    """All rows (of one GPU when given), validated."""
    conn = connect_ro(path)
    try:
        if gpu is None:
            cur = conn.execute(_SELECT + " ORDER BY gpu, key, source")
        else:
            cur = conn.execute(_SELECT + " WHERE gpu = ? ORDER BY key, source", (gpu,))
        return [_row_from_record(r, f"{path}") for r in cur]
    except sqlite3.DatabaseError as exc:
        raise ComputeDBError(f"{path}: corrupt compute DB ({exc})") from None
    finally:
        conn.close()


def gpus_in(path: str | Path) -> list[str]:
    conn = connect_ro(path)
    try:
        return [r[0] for r in conn.execute("SELECT DISTINCT gpu FROM kernels ORDER BY gpu")]
    except sqlite3.DatabaseError as exc:
        raise ComputeDBError(f"{path}: corrupt compute DB ({exc})") from None
    finally:
        conn.close()


def summary(path: str | Path) -> list[tuple[str, str, str, int]]:
    """(gpu, kind, provenance, rows) counts."""
    conn = connect_ro(path)
    try:
        return list(conn.execute("SELECT gpu, kind, provenance, COUNT(*) FROM kernels "
                                 "GROUP BY gpu, kind, provenance ORDER BY gpu, kind, provenance"))
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
    with open(csv_path, newline="") as fh:
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
            except (TypeError, ValueError) as exc:
                raise ComputeDBError(f"{where}: {exc}") from None
            _check_row(row, where)
            yield row
