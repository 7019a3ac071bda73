"""Rebuild the shipped compute DB (compute_db/data/kernels.sqlite) from the reference data in ../shared.

Contents: every Vidur profile (A100 80GB and H100, all models, every token count, forward fp16) and the
SimuMax v1.2 measured efficiencies (B200 and A100 PCIe GEMMs by layout, grouped GEMMs, flash attention
fwd/bwd as kernel rows; HBM efficiencies of memory-bound kernels as figures). Token sweeps are stored as
compact series (store.pack_series), which keeps ~66k kernel rows in about 1.5 MB. Deterministic: the same
inputs give the same rows (the SQLite file itself may differ in page layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from compute_db import importers, simumax, store
from compute_db.errors import ComputeDBError

VIDUR_SUBDIR = Path("data") / "vidur_profiling"
SIMUMAX_SUBDIR = Path("data") / "simumax_efficiency"


@dataclass(frozen=True)
class BuildSummary:
    path: Path
    rows: int               # kernel rows (series points included)
    series: int
    plain_rows: int
    figures: int
    size_bytes: int
    gpus: tuple[str, ...]


def shipped_data(shared_dir: str | Path) -> tuple[list[store.KernelRow], list[store.Figure]]:
    """All rows and figures of the shipped DB, read from the reference data folder (../shared)."""
    shared_dir = Path(shared_dir)
    vidur, smx = shared_dir / VIDUR_SUBDIR, shared_dir / SIMUMAX_SUBDIR
    for p in (vidur, smx):
        if not p.is_dir():
            raise ComputeDBError(f"{p}: reference data folder not found (--shared names the folder holding "
                                 f"data/vidur_profiling and data/simumax_efficiency)")
    rows = importers.import_vidur(vidur)
    srows, figures = simumax.import_simumax(smx)
    return rows + srows, figures


def build_shipped(shared_dir: str | Path, out: str | Path) -> BuildSummary:
    """Write the shipped DB to `out` (atomically) from `shared_dir`."""
    rows, figures = shipped_data(shared_dir)
    plain, series = store.pack_series(rows)
    n = store.write_fresh(out, plain, figures, series=series)
    out = Path(out)
    return BuildSummary(out, n - len(figures), len(series), len(plain), len(figures), out.stat().st_size,
                        tuple(sorted({r.gpu for r in rows} | {f.gpu for f in figures})))
