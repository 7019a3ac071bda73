"""Calibration reports: how well the DB predicts kernels it has not seen (honest hold-out).

leave_one_model_out (Vidur-style data, many models per GPU): for each model (row source) measured on a GPU,
the DB is used WITHOUT that model's rows (every layer; fits, lines, residual field and band are rebuilt from
the rest) to predict every kernel of the held-out model with at least `min_tokens` tokens (keys without a
token count: all sizes). Error = predicted / measured - 1, per op family and over all kernels.
Two predictors: the full lookup (other models' identical kernels count as measured, then interpolation,
then the corrected roofline) and the bare roofline.

leave_one_shape_out (few measurements of many shapes, e.g. SimuMax's B200 GEMMs): for each measured shape of
the chosen kinds on a GPU, every row of that shape (all layouts and dtypes of the same (m, n, k)) is removed,
the GPU's data are refitted without it, and the shape's rows are predicted.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import numpy as np

from compute_db import gpus as gpu_table
from compute_db.db import ComputeDB, class_of
from compute_db.errors import ComputeDBError
from compute_db.keys import KernelKey

ALL = "all"
# leave_one_shape_out refits the GPU's data once per held-out shape (~15 ms each on SimuMax's B200 with 438 shapes,
# ~0.3 s each on a Vidur GPU with >13,000): a run of more shapes than this is refused (use leave_one_model_out)
MAX_SHAPES = 1000


@dataclass(frozen=True)
class FamilyError:
    family: str                # op family, or "all"
    kernels: int
    models: int                # held-out groups (models, or shapes for leave-one-shape-out)
    median_abs_err: float      # full lookup, |pred/meas - 1|
    p90_abs_err: float
    roofline_median_abs_err: float
    roofline_p90_abs_err: float
    source_counts: dict        # source of the full lookup -> kernels
    no_token_count: int = 0    # kernels kept without a token filter (their key has no token dimension)
    signed_median_err: float = 0.0   # full lookup, median of pred/meas - 1 (bias)


def _tokens(key: KernelKey) -> int | None:
    d = dict(zip(key.fields, key.dims))
    if key.kind == "gemm":
        return d["m"]
    return d.get("tokens")


def _summarise(label: str, full: list[float], roof: list[float], srcs: dict, groups: int, untokened: int
               ) -> FamilyError:
    a = np.asarray(full)
    b = np.abs(np.asarray(roof))
    return FamilyError(label, int(a.size), groups, float(np.median(np.abs(a))), float(np.percentile(np.abs(a), 90)),
                       float(np.median(b)), float(np.percentile(b, 90)), dict(srcs), untokened,
                       float(np.median(a)))


def leave_one_model_out(db: ComputeDB, gpu: str, min_tokens: int = 64,
                        families: tuple[str, ...] | None = None, with_total: bool = False) -> list[FamilyError]:
    """Per-family LOMO errors on `gpu` for kernels with >= min_tokens tokens (where the key has tokens);
    with_total: a last entry "all" over every evaluated kernel."""
    name = gpu_table.canonical_name(gpu, db.extra_gpus)
    rows = db.rows(name)
    if not rows:
        raise ComputeDBError(f"no kernel data for GPU {name} in this DB (GPUs with data: "
                             f"{', '.join(db.db_gpus()) or 'none'})")
    sources = sorted({r.source for r in rows})
    if len(sources) < 2:
        raise ComputeDBError(f"leave-one-model-out needs data from at least 2 models on {name}; found {len(sources)}")
    full: dict[str, list[float]] = defaultdict(list)
    roof: dict[str, list[float]] = defaultdict(list)
    srcs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    models: dict[str, set] = defaultdict(set)
    untokened: dict[str, int] = defaultdict(int)
    for held in sources:
        sub = db.without(lambda s, h=held: s == h)
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
    out = [_summarise(fam, full[fam], roof[fam], srcs[fam], len(models[fam]), untokened[fam]) for fam in sorted(full)]
    if with_total and full:
        tot_srcs: dict[str, int] = defaultdict(int)
        for fam in full:
            for k, v in srcs[fam].items():
                tot_srcs[k] += v
        out.append(_summarise(ALL, [x for f in sorted(full) for x in full[f]], [x for f in sorted(roof) for x in roof[f]],
                              tot_srcs, len(set().union(*models.values())), sum(untokened.values())))
    return out


def leave_one_shape_out(db: ComputeDB, gpu: str, kinds: tuple[str, ...] = ("gemm",),
                        max_shapes: int = MAX_SHAPES) -> list[FamilyError]:
    """Per-kind errors of predicting each measured shape of `kinds` on `gpu` from the GPU's other rows
    (ComputeDBError, before any work, when the GPU has more than `max_shapes` of them)."""
    name = gpu_table.canonical_name(gpu, db.extra_gpus)
    rows = db.rows(name)
    by_shape: dict[tuple, list] = defaultdict(list)
    for r in rows:
        if r.key.kind in kinds:
            by_shape[class_of(r.key)].append(r)
    if len(by_shape) < 2:
        raise ComputeDBError(f"leave-one-shape-out needs at least 2 measured shapes of {', '.join(kinds)} on {name}")
    if len(by_shape) > max_shapes:
        raise ComputeDBError(f"leave-one-shape-out: {name} has {len(by_shape)} measured shapes of {', '.join(kinds)}, "
                             f"more than the {max_shapes} one run evaluates (each refits the GPU's data); "
                             f"use --by model")
    full: dict[str, list[float]] = defaultdict(list)
    roof: dict[str, list[float]] = defaultdict(list)
    srcs: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    shapes: dict[str, int] = defaultdict(int)
    for shape in sorted(by_shape, key=repr):
        held = by_shape[shape]
        # the whole DB (other GPUs lend fits and held parameters as in real lookups) without this shape
        sub = db.without(exclude_row=lambda g, k, s=shape: g == name and k.kind in kinds and class_of(k) == s,
                         row_gpu=name)
        for r in held:
            kt = sub.lookup_key(r.key, name)
            t_roof, _ = sub.model_time(r.key, name)
            full[r.key.kind].append(kt.time_s / r.median_s - 1.0)
            roof[r.key.kind].append(t_roof / r.median_s - 1.0)
            srcs[r.key.kind][kt.source] += 1
        shapes[held[0].key.kind] += 1
    return [_summarise(k, full[k], roof[k], srcs[k], shapes[k], 0) for k in sorted(full)]


def format_table(gpu: str, errors: list[FamilyError], min_tokens: int, title: str | None = None,
                 group: str = "models") -> str:
    head = title or (f"Leave-one-model-out error on {gpu} (kernels with >= {min_tokens} tokens; "
                     "|predicted/measured - 1|)")
    lines = [head,
             f"| op family | kernels | {group} | lookup median | lookup p90 | lookup signed median | roofline-only median "
             "| roofline-only p90 | lookup sources |",
             "|---|---|---|---|---|---|---|---|---|"]
    for e in errors:
        src = ", ".join(f"{k} {v}" for k, v in sorted(e.source_counts.items()))
        mark = " *" if e.no_token_count and e.family != ALL else ""
        lines.append(f"| {e.family}{mark} | {e.kernels} | {e.models} | {e.median_abs_err:.1%} | {e.p90_abs_err:.1%} | "
                     f"{e.signed_median_err:+.1%} | {e.roofline_median_abs_err:.1%} | {e.roofline_p90_abs_err:.1%} "
                     f"| {src} |")
    if any(e.no_token_count and e.family != ALL for e in errors):
        lines.append("* all sizes: these kernels' keys have no token count (e.g. element-wise `numel`), "
                     "so the token filter does not apply")
    return "\n".join(lines)
