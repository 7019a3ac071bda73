"""ComputeDB: kernel time lookups with provenance.

Resolution order for (kernel key, GPU):
1. "measured": rows with exactly this key on this GPU (median over sources of the row medians).
2. "interpolated": the calibrated roofline clamped to the band that the measured kernels of the same
   class on this GPU allow (compute_db.interpolate), when that band is narrow (the data decide). A class
   pools equivalent kernels: bf16 and fp16 (same tensor-core rate), and for GEMMs the forward/dgrad/
   wgrad layouts through their (m, n, k) GEMM equivalents.
3. "modeled": calibrated roofline (compute_db.roofline) with the family fit of this GPU, else of a similar
   GPU (gpus.yaml similar_to) applied to this GPU's spec, else priors (clamped to the data band if any).
ComputeOp.time_s set -> "given". A ComputeDB holds only caches of immutable data; no global state.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from compute_db import gpus as gpu_table
from compute_db import roofline, store
from compute_db.errors import ComputeDBError
from compute_db.interpolate import ClassIndex
from compute_db.keys import COMPUTE_BOUND_FAMILIES, KernelKey, gemm_equivalent, key_of

SHIPPED_DB = Path(__file__).resolve().parent / "data" / "kernels.sqlite"
SOURCES = ("measured", "interpolated", "modeled", "given")
MIN_FIT_POINTS = 8


@dataclass(frozen=True, slots=True)
class KernelTime:
    time_s: float
    source: str          # "measured" | "interpolated" | "modeled" | "given"
    basis: str = ""      # detail: data source or fit used


def class_of(key: KernelKey) -> tuple[tuple, tuple[int, ...]]:
    """(interpolation class, canonical dims) of a key (see module docstring)."""
    dcls = roofline.dtype_class(key.dtype)
    if key.family == "gemm":
        count, m, n, k = gemm_equivalent(key)
        if key.kind == "gemm":
            return ("gemm", dcls), (m, n, k)
        return (key.kind, dcls), (count, m, n, k)
    return (key.kind, key.variant, dcls, key.causal), key.dims


def fit_class(key: KernelKey) -> tuple[str, str, str]:
    """(family, dtype class, variant class) sharing one roofline fit."""
    fam = key.family
    if fam in COMPUTE_BOUND_FAMILIES:
        vcls = "bwd" if (fam == "flash_attn" and key.variant == "bwd") else ""
        return fam, roofline.dtype_class(key.dtype), vcls
    return fam, "any", ""


def _median(values: list[float]) -> float:
    return values[0] if len(values) == 1 else float(np.median(values))


class ComputeDB:
    """Kernel timings of one SQLite file (or of given rows), with lookups for any known GPU."""

    def __init__(self, path: str | Path | None = None, rows: Iterable[store.KernelRow] | None = None,
                 extra_gpus: Mapping[str, gpu_table.GPUSpec] | None = None,
                 exclude_source=None):
        self.path = None if path is None else Path(path)
        self.extra_gpus = dict(extra_gpus or {})
        self._exclude = exclude_source
        self._rows_by_gpu: dict[str, list[store.KernelRow]] | None = None
        if rows is not None:
            self._rows_by_gpu = defaultdict(list)
            for r in rows:
                if exclude_source is None or not exclude_source(r.source):
                    self._rows_by_gpu[self._canonical_or_raw(r.gpu)].append(r)
        elif self.path is not None:
            store.connect_ro(self.path).close()   # clear error now for a missing/foreign/corrupt file
            # rows filed under an alias ("h100-sxm") count for the canonical GPU ("H100")
            self._raw_names: dict[str, list[str]] = defaultdict(list)
            for raw in store.gpus_in(self.path):
                self._raw_names[self._canonical_or_raw(raw)].append(raw)
            self._db_gpus = sorted(self._raw_names)
        self._loaded: dict[str, dict] = {}
        self._fits: dict[tuple, roofline.FamilyFit | None] = {}
        self._cache: dict[tuple, KernelTime] = {}
        self._op_cache: dict = {}

    def _canonical_or_raw(self, name: str) -> str:
        try:
            return gpu_table.canonical_name(name, self.extra_gpus)
        except ComputeDBError:
            return name   # e.g. "CPU" rows of a runner test: kept under their own name

    # ------------------------------------------------------------------ data access
    def add_gpus(self, specs: Mapping[str, gpu_table.GPUSpec]) -> None:
        """Make user GPUs (gpus.load_gpu_file) known to this DB."""
        self.extra_gpus.update(specs)
        self._cache.clear()
        self._op_cache.clear()

    def gpu(self, name: str) -> gpu_table.GPUSpec:
        return gpu_table.get_gpu(name, self.extra_gpus)

    def db_gpus(self) -> list[str]:
        """GPUs with rows in this DB."""
        if self._rows_by_gpu is not None:
            return sorted(g for g, rs in self._rows_by_gpu.items() if rs)
        return list(self._db_gpus)

    def rows(self, gpu: str) -> list[store.KernelRow]:
        if self._rows_by_gpu is not None:
            return self._rows_by_gpu.get(gpu, [])
        if gpu not in self._db_gpus:
            return []
        rows = [r for raw in self._raw_names[gpu] for r in store.read_rows(self.path, raw)]
        if self._exclude is not None:
            rows = [r for r in rows if not self._exclude(r.source)]
        return rows

    def _data(self, gpu: str) -> dict:
        """Per-GPU indexes: exact times, class points, rows per fit class (built once)."""
        data = self._loaded.get(gpu)
        if data is not None:
            return data
        per_key: dict[KernelKey, list[float]] = defaultdict(list)
        sources: dict[KernelKey, set] = defaultdict(set)
        for r in self.rows(gpu):
            per_key[r.key].append(r.median_s)
            sources[r.key].add(r.source)
        exact = {k: (_median(v), ", ".join(sorted(sources[k]))) for k, v in per_key.items()}
        class_pts: dict[tuple, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(list))
        fit_pts: dict[tuple, list[tuple[KernelKey, float]]] = defaultdict(list)
        for k, (t, _) in exact.items():
            cls, dims = class_of(k)
            class_pts[cls][dims].append(t)
            fit_pts[fit_class(k)].append((k, t))
        classes = {cls: ClassIndex({d: _median(ts) for d, ts in pts.items()})
                   for cls, pts in class_pts.items()}
        data = {"exact": exact, "classes": classes, "fit_pts": fit_pts}
        self._loaded[gpu] = data
        return data

    # ------------------------------------------------------------------ fits
    def _own_fit(self, gpu: str, fcls: tuple[str, str, str]) -> roofline.FamilyFit | None:
        ck = (gpu, fcls)
        if ck in self._fits:
            return self._fits[ck]
        pts = self._data(gpu)["fit_pts"].get(fcls, []) if gpu in self.db_gpus() else []
        fit = None
        if len(pts) >= MIN_FIT_POINTS:
            spec = self.gpu(gpu)
            keys = [k for k, _ in pts]
            times = np.array([t for _, t in pts])
            peaks = np.array([spec.peak_flops[k.dtype] for k in keys])
            fam, dcls, vcls = fcls
            prior = roofline.prior_for(fam, vcls or "fwd")
            basis = f"fit:{gpu} {fam}{'/' + vcls if vcls else ''} {dcls} ({len(pts)} kernels)"
            fit = roofline.fit_family(fam, keys, times, peaks, spec.hbm_Bps, basis, prior)
        self._fits[ck] = fit
        return fit

    def _fit_on(self, gpu: str, fcls: tuple[str, str, str]) -> roofline.FamilyFit | None:
        fam, dcls, vcls = fcls
        fit = self._own_fit(gpu, fcls)
        if fit is not None:
            return fit
        if fam in COMPUTE_BOUND_FAMILIES and dcls != "16bit":
            fit = self._own_fit(gpu, (fam, "16bit", vcls))
            if fit is not None and dcls == "fp8":
                fit = roofline.FamilyFit(fit.family, fit.e * roofline.FP8_EFFICIENCY_FACTOR, fit.x0, fit.t0,
                                         fit.em, fit.p, fit.basis + f" x fp8 factor {roofline.FP8_EFFICIENCY_FACTOR}",
                                         fit.n_points)
        return fit

    def family_fit(self, gpu: str, key: KernelKey) -> roofline.FamilyFit:
        """The roofline parameters used for `key` on `gpu` (canonical name), with fallbacks."""
        fcls = fit_class(key)
        ck = ("resolved", gpu, fcls)
        if ck in self._fits:
            return self._fits[ck]
        spec = self.gpu(gpu)
        candidates = [gpu]
        for other in spec.similar_to:       # names or aliases (validated when a GPU file is loaded)
            try:
                candidates.append(gpu_table.canonical_name(other, self.extra_gpus))
            except ComputeDBError:
                continue
        fit = None
        for g in candidates:
            fit = self._fit_on(g, fcls)
            if fit is not None:
                break
        if fit is None:  # no similar GPU has data: the DB GPU with the most kernels of this family
            rest = sorted(self.db_gpus(), key=lambda g: -len(self._data(g)["fit_pts"].get(fcls, [])))
            candidates += [g for g in rest if g not in candidates]
            for g in candidates:
                fit = self._fit_on(g, fcls)
                if fit is not None:
                    break
        fam = fcls[0]
        if fit is None and fam not in COMPUTE_BOUND_FAMILIES and fam != "elementwise":
            # memory-bound family without its own data: the GPU's streaming (element-wise) kernels
            for g in candidates:
                fit = self._fit_on(g, ("elementwise", "any", ""))
                if fit is not None:
                    # its size saturation does not transfer to other dims: bandwidth and launch time only
                    fit = roofline.FamilyFit(fam, 0.0, (), fit.t0, fit.em, 1.0,
                                             fit.basis + f" (element-wise stands in for {fam})", fit.n_points)
                    break
        if fit is None:
            fit = roofline.prior_fit(fam, fcls[2] or "fwd")
        self._fits[ck] = fit
        return fit

    def model_time(self, key: KernelKey, gpu: str) -> tuple[float, str]:
        spec = self.gpu(gpu)
        fit = self.family_fit(spec.name, key)
        t = roofline.predict(fit, key, spec.peak_flops[key.dtype], spec.hbm_Bps)
        return t, f"roofline {fit.basis} on {spec.name} spec"

    # ------------------------------------------------------------------ lookups
    def lookup_key(self, key: KernelKey, gpu: str) -> KernelTime:
        name = gpu_table.canonical_name(gpu, self.extra_gpus)
        ck = (key, name)
        hit = self._cache.get(ck)
        if hit is not None:
            return hit
        if key.dtype == "fp8" and not self.gpu(name).fp8_native:
            # no fp8 tensor cores: the kernel runs at the 16-bit rate (as listed in gpus.yaml)
            sub = self.lookup_key(KernelKey(key.kind, key.variant, key.dims, "bf16", key.causal), name)
            result = KernelTime(sub.time_s, sub.source if sub.source != "measured" else "interpolated",
                                sub.basis + " (fp8 runs as bf16 on this GPU)")
            self._cache[ck] = result
            return result
        data = self._data(name) if name in self.db_gpus() else None
        result = None
        if data is not None:
            exact = data["exact"].get(key)
            if exact is not None:
                result = KernelTime(exact[0], "measured", exact[1])
            else:
                cls, dims = class_of(key)
                index = data["classes"].get(cls)
                if index is not None:
                    t, source, lo, hi = index.predict(
                        dims, lambda d: self.model_time(_with_dims(key, cls, d), name)[0])
                    if source == "interpolated":
                        basis = (f"log-space interpolation between measured kernels on {name} "
                                 f"(data band {lo * 1e6:.4g}-{hi * 1e6:.4g} us)")
                    else:
                        basis = self.model_time(key, name)[1]
                        if t != self.model_time(key, name)[0]:
                            basis += ", clamped to the band of the measured kernels"
                    result = KernelTime(t, source, basis)
        if result is None:
            t, basis = self.model_time(key, name)
            result = KernelTime(t, "modeled", basis)
        if not (math.isfinite(result.time_s) and result.time_s > 0):
            raise ComputeDBError(f"internal: non-positive time for {key.text()} on {name}")
        self._cache[ck] = result
        return result

    def lookup(self, op, gpu: str) -> KernelTime:
        """Time of one workload_gen ComputeOp on `gpu` (name or alias)."""
        if op.time_s is not None:
            return KernelTime(float(op.time_s), "given", "time in the workload")
        return self.lookup_key(key_of(op), gpu)

    def lookup_many(self, ops: Iterable, gpu: str) -> list[KernelTime]:
        """Times of many ops, in order. Repeated op objects cost one dict lookup by id within the call;
        equal ops and equal keys are cached across calls."""
        cache = self._op_cache.setdefault(gpu, {})
        by_id: dict[int, KernelTime] = {}
        out = []
        append = out.append
        keep = []   # ops whose id is cached stay referenced for the duration of the call
        for op in ops:
            hit = by_id.get(id(op))
            if hit is None:
                try:
                    hit = cache.get(op)
                    hashable = True
                except TypeError:  # unhashable op: no cross-call cache
                    hashable = False
                if hit is None:
                    hit = self.lookup(op, gpu)
                    if hashable:
                        cache[op] = hit
                by_id[id(op)] = hit
                keep.append(op)
            append(hit)
        return out


def _with_dims(key: KernelKey, cls: tuple, dims: tuple[int, ...]) -> KernelKey:
    """A key of the same class with canonical dims `dims` (forward layout for GEMM classes)."""
    if key.family == "gemm":
        if key.kind == "gemm":
            return KernelKey("gemm", "fwd", dims, key.dtype, False)
        return KernelKey(key.kind, "fwd", dims, key.dtype, False)
    return KernelKey(key.kind, key.variant, dims, key.dtype, key.causal)


def open_db(path: str | Path | None = None, gpu_file: str | Path | None = None) -> ComputeDB:
    """Open a compute DB read-only (None: the DB shipped in compute_db/data/, or an empty DB when absent).

    gpu_file: a user GPU spec YAML (gpus.load_gpu_file) whose GPUs extend the table for this DB.
    """
    extra = gpu_table.load_gpu_file(gpu_file) if gpu_file else None
    if path is None:
        if SHIPPED_DB.is_file():
            return ComputeDB(SHIPPED_DB, extra_gpus=extra)
        return ComputeDB(rows=[], extra_gpus=extra)
    return ComputeDB(path, extra_gpus=extra)

