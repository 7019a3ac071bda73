"""Leave-one-model-out calibration report: how well interpolation + roofline predict unseen kernels.

For each model (row source) measured on a GPU, the DB is rebuilt without that model's rows, the fits are
redone, and every kernel of the held-out model is predicted. Error = predicted / measured - 1.
Two predictors are reported per op family: the full lookup (other models' identical kernels count as
measured, interpolation, then roofline) and the roofline alone.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from compute_db import gpus as gpu_table
from compute_db.db import ComputeDB
from compute_db.errors import ComputeDBError
from compute_db.keys import KernelKey


@dataclass(frozen=True)
class FamilyError:
    family: str
    kernels: int
    models: int
    median_abs_err: float      # full lookup, |pred/meas - 1|
    p90_abs_err: float
    roofline_median_abs_err: float
    roofline_p90_abs_err: float
    source_counts: dict        # source of the full lookup -> kernels
    no_token_count: int = 0    # kernels kept without a token filter (their key has no token dimension)


def _tokens(key: KernelKey) -> int | None:
    d = dict(zip(key.fields, key.dims))
    if key.kind == "gemm":
        return d["m"]
    return d.get("tokens")


def leave_one_model_out(db: ComputeDB, gpu: str, min_tokens: int = 64,
                        families: tuple[str, ...] | None = None) -> list[FamilyError]:
    """Per-family LOMO errors on `gpu` for kernels with >= min_tokens tokens (where the key has tokens)."""
    name = gpu_table.canonical_name(gpu, db.extra_gpus)
    rows = db.rows(name)
    if not rows:
        raise ComputeDBError(f"no kernel data for GPU {name} in this DB (GPUs with data: "
                             f"{', '.join(db.db_gpus()) or 'none'})")
    all_rows = [r for g in db.db_gpus() for r in db.rows(g)]
    sources = sorted({r.source for r in rows})
    if len(sources) < 2:
        raise ComputeDBError(f"leave-one-model-out needs data from at least 2 models on {name}; found {len(sources)}")
    full = defaultdict(list)
    roof = defaultdict(list)
    srcs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    models: dict[str, set] = defaultdict(set)
    untokened: dict[str, int] = defaultdict(int)
    for held in sources:
        sub = ComputeDB(rows=all_rows, extra_gpus=db.extra_gpus, exclude_source=lambda s, h=held: s == h)
        for r in rows:
            if r.source != held:
                continue
            fam = r.key.family
            if families and fam not in families:
                continue
            tok = _tokens(r.key)
            if tok is not None and tok < min_tokens:
                continue
            untokened[fam] += tok is None
            kt = sub.lookup_key(r.key, name)
            t_roof, _ = sub.model_time(r.key, name)
            full[fam].append(kt.time_s / r.median_s - 1.0)
            roof[fam].append(t_roof / r.median_s - 1.0)
            srcs[fam][kt.source] += 1
            models[fam].add(held)
    out = []
    for fam in sorted(full):
        a = np.abs(np.asarray(full[fam]))
        b = np.abs(np.asarray(roof[fam]))
        out.append(FamilyError(fam, int(a.size), len(models[fam]), float(np.median(a)), float(np.percentile(a, 90)),
                               float(np.median(b)), float(np.percentile(b, 90)), dict(srcs[fam]),
                               untokened[fam]))
    return out


def format_table(gpu: str, errors: list[FamilyError], min_tokens: int) -> str:
    lines = [f"Leave-one-model-out error on {gpu} (kernels with >= {min_tokens} tokens; |predicted/measured - 1|)",
             "| op family | kernels | models | lookup median | lookup p90 | roofline-only median | roofline-only p90 "
             "| lookup sources |",
             "|---|---|---|---|---|---|---|---|"]
    for e in errors:
        src = ", ".join(f"{k} {v}" for k, v in sorted(e.source_counts.items()))
        mark = " *" if e.no_token_count else ""
        lines.append(f"| {e.family}{mark} | {e.kernels} | {e.models} | {e.median_abs_err:.1%} | {e.p90_abs_err:.1%} | "
                     f"{e.roofline_median_abs_err:.1%} | {e.roofline_p90_abs_err:.1%} | {src} |")
    if any(e.no_token_count for e in errors):
        lines.append("* all sizes: these kernels' keys have no token count (e.g. element-wise `numel`), "
                     "so the token filter does not apply")
    return "\n".join(lines)
