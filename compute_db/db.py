"""ComputeDB: kernel time lookups with provenance.

Resolution order for (kernel key, GPU) (docs/compute_db.md, "Resolution order"):
1. "measured": rows with exactly this key on this GPU (median over sources of the row medians). A DB opened
   with a user file layers it over the shipped DB: the user's rows win for their keys, the shipped rows
   answer the rest (both feed interpolation and fits).
2. "interpolated": the same kernel measured in an equivalent form (bf16 for fp16; a GEMM's forward, dgrad
   or wgrad layout with the same (m, n, k)), or log-log interpolation between the two bracketing
   measurements of a line of the same shape (compute_db.interpolate: e.g. the same GEMM at the neighbouring
   token counts).
3. The calibrated roofline (compute_db.roofline) of this GPU's family fit (else a similar GPU's fit on this
   GPU's spec, else priors), corrected by the residual field of the measured kernels near the shape and
   clamped to the data band: "interpolated" when the band is narrow (the data decide), else "modeled".
ComputeOp.time_s set -> "given". A ComputeDB holds only caches of immutable data; no global state.
Measured collective curves (store table `collectives`) are served per GPU by `collective_curves`
(compute_db.collectives), with the same layer precedence.
"""

from __future__ import annotations

import math
from collections import OrderedDict, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from compute_db import gpus as gpu_table
from compute_db import interpolate, roofline
from compute_db.errors import ComputeDBError
from compute_db.interpolate import ClassIndex, ClassPoints, ResidualField
from compute_db.keys import COMPUTE_BOUND_FAMILIES, FAMILY, KernelKey, key_of

if TYPE_CHECKING:
    from compute_db import store

SHIPPED_DB = Path(__file__).resolve().parent / "data" / "kernels.sqlite"
SOURCES = ("measured", "interpolated", "modeled", "given")
MIN_FIT_POINTS = 8
# Classes larger than this are thinned for fits and the data band (every point still serves exact hits,
# lines and the residual field): only token-like values on the log grid 1, 2, 4, 8, 2^k, 3·2^k are kept.
THIN_ABOVE = 600
# A GPU whose measured kernels of a family all have at least this many tokens cannot tell its launch time,
# HBM efficiency or small-size waste (SimuMax's B200 / A100 PCIe GEMMs, >= 2048 tokens): a richer similar
# GPU's are held (Vidur's H100 / A100 start at 1 token).
LARGE_ONLY_TOKENS = 1024
# Modeled answers along a shape's token-like axis are computed once per shape on a log lattice of this step
# (2.5 %) from 1 to PROFILE_MAX and interpolated log-linearly (exact at the nodes; far below the model's error)
PROFILE_STEP = 0.025
PROFILE_MAX = 1 << 24
PROFILE_BLOCK = 16
PROFILE_CACHE = 4096      # shapes whose profile a ComputeDB keeps (least recently used dropped)
FIT_EXTRA_STRIDE = 7
_GRID = frozenset([1, 2, 4] + [x for k in range(3, 40) for x in (1 << k, 3 << k)])

TKey = tuple   # (kind, variant, dtype, causal, dims): a KernelKey as a plain tuple (cheap to build in bulk)


@dataclass(frozen=True, slots=True)
class KernelTime:
    time_s: float
    source: str          # "measured" | "interpolated" | "modeled" | "given"
    basis: str = ""      # detail: data source or fit used


def _class_of(kind: str, variant: str, dtype: str, causal: bool) -> tuple:
    dcls = roofline.dtype_class(dtype)
    if FAMILY[kind] == "gemm":
        return (kind, dcls)
    return (kind, variant, dcls, causal)


def class_of(key: KernelKey) -> tuple[tuple, tuple[int, ...]]:
    """(interpolation class, dims) of a key: GEMM-family keys pool layouts (their dims are already the
    (m, n, k) of the GEMM they compute, keys.backward_gemm_shapes) and bf16 with fp16."""
    return _class_of(key.kind, key.variant, key.dtype, key.causal), key.dims


def fit_class(key: KernelKey) -> tuple[str, str, str]:
    """(family, dtype class, variant class) sharing one roofline fit."""
    return _fit_class_of(key.kind, key.variant, key.dtype)


def _fit_class_of(kind: str, variant: str, dtype: str) -> tuple[str, str, str]:
    fam = FAMILY[kind]
    if fam in COMPUTE_BOUND_FAMILIES:
        return fam, roofline.dtype_class(dtype), ("bwd" if fam == "flash_attn" and variant == "bwd" else "")
    return fam, "any", ""


def _class_key(cls: tuple) -> tuple[str, str, str, bool]:
    """A representative (kind, variant, dtype, causal) of a class (GEMM classes: the forward layout)."""
    kind, variant, dcls, causal = (cls[0], "fwd", cls[1], False) if len(cls) == 2 else cls
    return kind, variant, ("bf16" if dcls == "16bit" else dcls), causal


def _store():
    """compute_db.store (sqlite3, csv), imported when a DB file is first read."""
    from compute_db import store
    return store


def _thin_axis(kind: str) -> int:
    from workload_gen.workload import COMPUTE_KINDS
    fields = COMPUTE_KINDS[kind]
    return fields.index(_store().SERIES_FIELD.get(kind, fields[0]))


def _thin(kind: str, dims: np.ndarray) -> np.ndarray:
    """Boolean mask of the points kept for fits / the band when a set is large (THIN_ABOVE)."""
    if len(dims) <= THIN_ABOVE:
        return np.ones(len(dims), dtype=bool)
    col = dims[:, _thin_axis(kind)]
    keep = np.isin(col, np.fromiter(_GRID, dtype=np.int64))
    return keep if keep.sum() >= MIN_FIT_POINTS else np.ones(len(dims), dtype=bool)


def _thin_fit(kind: str, dims: np.ndarray) -> np.ndarray:
    """The points a fit uses from a large set: the log grid of _thin, plus for GEMM kinds every
    FIT_EXTRA_STRIDE-th measured token value. The grid values (powers of two, 3·2^k) fill GEMM tiles exactly; the extra values fall on every
    residue of the tile sizes, so the GEMM wave term sees partly filled tiles and waves too."""
    keep = _thin(kind, dims)
    if keep.all() or FAMILY[kind] != "gemm":
        return keep
    col = dims[:, _thin_axis(kind)]
    values = np.unique(col)
    return keep | np.isin(col, values[FIT_EXTRA_STRIDE // 2::FIT_EXTRA_STRIDE])


def _token_axis_of(kind: str, variant: str) -> int:
    """Index of the token-like field of a kind: GEMM m, or k for a wgrad GEMM; else the series field."""
    if FAMILY[kind] == "gemm":
        from workload_gen.workload import COMPUTE_KINDS
        return COMPUTE_KINDS[kind].index("k" if variant == "wgrad" else "m")
    return _thin_axis(kind)


def _profile_axis(key: KernelKey) -> int:
    """The dimension a simulator sweeps for this key (token-like): GEMM m, or k for a wgrad GEMM (its
    reduction runs over the tokens); else the kind's series field."""
    return _token_axis_of(key.kind, key.variant)


class _Profile:
    """The corrected, clamped roofline of one shape along its token-like axis on a log lattice (node j at axis
    value exp(j · PROFILE_STEP)), filled lazily where queries need it: the bare roofline on a prefix of the
    nodes, the residual field in blocks of PROFILE_BLOCK nodes, the data band node by node. A node's values do
    not depend on which others exist: lookups stay deterministic whatever the query order."""

    def __init__(self, axis: int, log_g: Callable[[np.ndarray], np.ndarray],
                 field: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None, r_bound: float,
                 band: Callable[[np.ndarray], tuple[np.ndarray, np.ndarray]] | None, basis: str,
                 residual_gpu: str | None):
        self.axis = axis
        self.basis = basis
        self.residual_gpu = residual_gpu
        self.n = int(math.ceil(math.log(PROFILE_MAX) / PROFILE_STEP)) + 2
        self._log_g_of = log_g
        self._log_g = np.empty(0)                  # log g (bare roofline) at nodes 0 .. len - 1
        self._field_of = field                     # nodes -> (Σwr, Σw) of the residual field; None: no field
        self._r_bound = r_bound                    # upper bound of the log residual factor anywhere on the line
        self._blocks: dict[int, np.ndarray] = {}   # block -> rows log t, log r, Σwr, Σw at its nodes
        self._band_of = band                       # nodes -> (lo, hi) of the data band (s); None: no band
        self._band: dict[int, tuple[float, float]] = {}   # node -> (log lo, log hi)

    def log_g(self, upto: int) -> np.ndarray:
        """log g at nodes 0 .. upto at least (grown geometrically: one vectorized roofline call per doubling)."""
        have = len(self._log_g)
        if upto >= have:
            new = np.arange(have, min(self.n, max(upto + 1, 2 * have, 64)))
            self._log_g = np.concatenate((self._log_g, self._log_g_of(new)))
        return self._log_g

    def rows(self, nodes: np.ndarray) -> np.ndarray:
        """(4 x len(nodes)): log t (corrected roofline), log r (residual factor), Σwr, Σw at the nodes
        (ascending)."""
        first, last = int(nodes[0]) // PROFILE_BLOCK, int(nodes[-1]) // PROFILE_BLOCK     # nodes ascending
        if first == last and first in self._blocks:
            return self._blocks[first][:, nodes - first * PROFILE_BLOCK]
        blocks = np.unique(nodes // PROFILE_BLOCK).tolist()
        log_g = self.log_g(min(self.n, (blocks[-1] + 1) * PROFILE_BLOCK) - 1)
        for b in blocks:
            if b not in self._blocks:
                span = np.arange(b * PROFILE_BLOCK, min((b + 1) * PROFILE_BLOCK, self.n))
                k = len(span)
                sum_wr, sum_w = self._field_of(span) if self._field_of is not None else (np.zeros(k), np.zeros(k))
                log_r = sum_wr / (interpolate.RESIDUAL_PRIOR_WEIGHT + sum_w)
                self._blocks[b] = np.stack((log_g[span] + log_r, log_r, sum_wr, sum_w))
        # only the lattice's last block is short, and it sorts last: block b of `blocks` starts at rank · BLOCK
        stacked = np.concatenate([self._blocks[b] for b in blocks], axis=1)
        rank = np.searchsorted(np.asarray(blocks), nodes // PROFILE_BLOCK)
        return stacked[:, rank * PROFILE_BLOCK + nodes % PROFILE_BLOCK]

    def band(self, nodes: np.ndarray) -> np.ndarray:
        """(2 x len(nodes)): log lo, log hi of the data band at the nodes (-inf / inf: unbounded)."""
        missing = [nd for nd in nodes.tolist() if nd not in self._band]
        if missing:
            if self._band_of is None:
                lo, hi = np.full(len(missing), -math.inf), np.full(len(missing), math.inf)
            else:
                lo, hi = self._band_of(np.asarray(missing))
                with np.errstate(divide="ignore"):
                    lo, hi = np.log(lo), np.log(hi)
            self._band.update(zip(missing, zip(lo.tolist(), hi.tolist())))
        return np.array([self._band[nd] for nd in nodes.tolist()]).T

    def node(self, x: float) -> tuple[int, float]:
        u = math.log(x) / PROFILE_STEP
        j = min(int(u), self.n - 2)
        return j, u - j

    def at(self, x: float) -> tuple[float, float, float, float]:
        """(t, r, lo, hi) at axis value x (log-linear between lattice nodes)."""
        j, f = self.node(x)
        pair = np.array([j, j + 1])
        arr = np.concatenate((self.rows(pair)[:2], self.band(pair)))
        vals = []
        for row in range(4):
            a, b = arr[row, 0], arr[row, 1]
            vals.append(math.exp(a + f * (b - a)) if math.isfinite(a) and math.isfinite(b) else math.exp(a if f < 0.5
                                                                                                          else b))
        return vals[0], vals[1], vals[2], vals[3]

    def monotone_t_at(self, x: float) -> float:
        """The corrected roofline made non-decreasing along the axis: its running maximum from the lattice's
        first node (x = 1) up to x (s). The residual field follows measured kernels, which are not monotone
        at small sizes (launch-time noise); the running maximum keeps a token sweep from ever getting faster.
        Only nodes that can beat the value at x are evaluated: log t = log g + log r with log r at most the
        line's largest residual (r_bound), so a node whose bare roofline is that far below cannot."""
        j, f = self.node(x)
        t = self.rows(np.array([j, j + 1]))[0]
        best = max(t[0], t[0] + f * (t[1] - t[0]))
        if j > 0:
            cand = np.flatnonzero(self.log_g(j)[:j] + self._r_bound > best)
            if cand.size:
                best = max(best, float(self.rows(cand)[0].max()))
        return math.exp(best)

    def g_at(self, x: float) -> float:
        """The bare roofline (s) at axis value x."""
        j, f = self.node(x)
        arr = self.rows(np.array([j, j + 1]))
        a = arr[0, 0] - arr[1, 0]
        b = arr[0, 1] - arr[1, 1]
        return math.exp(a + f * (b - a))


def _median(values: list[float]) -> float:
    """np.median of a few floats, in Python: the middle one, or the two middle ones' sum halved (the
    same IEEE operations as numpy's mean of two); numpy for NaN (its NaN rule)."""
    n = len(values)
    if n == 1:
        return values[0]
    if any(v != v for v in values):
        return float(np.median(values))
    s = sorted(values)
    h = n >> 1
    return float(s[h]) if n & 1 else float((s[h - 1] + s[h]) / 2)


# ---------------------------------------------------------------------------------------------- layers

class _Layer:
    """One data source: a compute DB file or in-memory rows / series / figures."""

    def __init__(self, path: Path | None = None, rows: Iterable[store.KernelRow] = (),
                 series: Iterable[store.KernelSeries] = (), figures: Iterable[store.Figure] = (),
                 collectives: Iterable[store.CollectiveRow] = ()):
        self.path = path
        self._colls: list[store.CollectiveRow] | None = None
        if path is not None:
            # the shipped file is read on first use (a run whose kernels all carry their times - a SimAI
            # workload - never opens it); a user's file now: a clear error for a missing/foreign/corrupt one
            self._names = None if path == SHIPPED_DB else _store().gpus_in(path)
            self._mem = None
            self._read: dict[str, tuple[list, list, list]] = {}
        else:
            self._colls = list(collectives)
            mem: dict[str, tuple[list, list, list]] = defaultdict(lambda: ([], [], []))
            for r in rows:
                mem[r.gpu][0].append(r)
            for s in series:
                mem[s.gpu][1].append(s)
            for f in figures:
                mem[f.gpu][2].append(f)
            for c in self._colls:
                mem[c.gpu]       # a GPU with collective rows only is still a GPU of this layer
            self._mem = dict(mem)
            self._names = sorted(self._mem)

    def raw_gpus(self) -> list[str]:
        if self._names is None:
            self._names = _store().gpus_in(self.path)
        return list(self._names)

    def collectives(self) -> list[store.CollectiveRow]:
        """Every collective row of the layer (a file is read once)."""
        if self._colls is None:
            self._colls = _store().read_collectives(self.path)
        return self._colls

    def read(self, raw_gpu: str) -> tuple[list, list, list]:
        """(rows, series, figures) of one GPU name as stored; a file is read once per GPU (the lists are shared:
        callers do not modify them)."""
        if self._mem is not None:
            return self._mem.get(raw_gpu, ([], [], []))
        got = self._read.get(raw_gpu)
        if got is None:
            got = self._read[raw_gpu] = _store().read_data(self.path, raw_gpu)
        return got


@dataclass
class _GPUData:
    classes: dict          # class -> ClassPoints
    fit_groups: dict       # fit class -> list[(kind, variant, dtype, causal, dims ndarray, times ndarray)]
    figures: dict          # (family, variant) -> store.Figure


class ComputeDB:
    """Kernel timings of one SQLite file (or of given rows), optionally layered over a base DB (the shipped
    one), with lookups for any known GPU."""

    def __init__(self, path: str | Path | None = None, rows: Iterable[store.KernelRow] | None = None,
                 extra_gpus: Mapping[str, gpu_table.GPUSpec] | None = None,
                 exclude_source: Callable[[str], bool] | None = None, *,
                 series: Iterable[store.KernelSeries] | None = None,
                 figures: Iterable[store.Figure] | None = None, base: ComputeDB | None = None,
                 collectives: Iterable[store.CollectiveRow] | None = None):
        self.path = None if path is None else Path(path)
        self.extra_gpus = dict(extra_gpus or {})
        if base is not None:
            self.extra_gpus = {**base.extra_gpus, **self.extra_gpus}
        self._exclude = exclude_source
        if self.path is not None:
            own = [_Layer(self.path)]
        elif rows is not None or series is not None or figures is not None or collectives is not None:
            own = [_Layer(None, rows or (), series or (), figures or (), collectives or ())]
        else:
            own = []
        self._layers: list[_Layer] = own + (list(base._layers) if base is not None else [])
        self._by_layer: dict[tuple[str, int], tuple[dict, list]] = {}
        self._loaded: dict[str, _GPUData] = {}
        self._fits: dict[tuple, tuple[roofline.FamilyFit, str | None] | None] = {}
        self._fields: dict[tuple, ResidualField | None] = {}
        self._profiles: OrderedDict[tuple, _Profile] = OrderedDict()   # least recently used first
        self._bands: dict[tuple, ClassIndex] = {}
        self._cache: dict[tuple, KernelTime] = {}
        self._op_cache: dict = {}
        self._specs: dict[str, gpu_table.GPUSpec] = {}
        self._exclude_row: Callable[[str, KernelKey], bool] | None = None
        self._delegate: ComputeDB | None = None      # answers _data / _own_fit of GPUs other than ...
        self._delegate_except: str | None = None     # ... this one (see without)
        self._coll_curves: dict[str, object] = {}

    def without(self, exclude_source: Callable[[str], bool] | None = None,
                exclude_row: Callable[[str, KernelKey], bool] | None = None, row_gpu: str | None = None
                ) -> ComputeDB:
        """The same data without the rows / series points whose source matches (e.g. a held-out model) or
        whose (canonical GPU, key) matches (e.g. a held-out shape); every layer, for honest hold-out tests.
        row_gpu: exclude_row only ever matches this GPU, so the other GPUs' data and fits are shared with
        this DB (computed once)."""
        sub = ComputeDB(extra_gpus=self.extra_gpus, exclude_source=exclude_source)
        sub._layers = list(self._layers)
        sub._exclude_row = exclude_row
        if exclude_source is None and row_gpu is not None:
            sub._delegate, sub._delegate_except = self, row_gpu
        return sub

    def _canonical_or_raw(self, name: str) -> str:
        try:
            return gpu_table.canonical_name(name, self.extra_gpus)
        except ComputeDBError:
            return name   # e.g. "CPU" rows of a runner test: kept under their own name

    # ------------------------------------------------------------------ data access
    def add_gpus(self, specs: Mapping[str, gpu_table.GPUSpec]) -> None:
        """Make user GPUs (gpus.load_gpu_file) known to this DB."""
        self.extra_gpus.update(specs)
        self._coll_curves.clear()
        self._cache.clear()
        self._op_cache.clear()
        self._specs.clear()

    def gpu(self, name: str) -> gpu_table.GPUSpec:
        spec = self._specs.get(name)
        if spec is None:
            spec = self._specs[name] = gpu_table.get_gpu(name, self.extra_gpus)
        return spec

    def canonical(self, name: str) -> str:
        """Canonical GPU table name of `name` (aliases, user GPUs); ComputeDBError if unknown."""
        return self.gpu(name).name

    def db_gpus(self) -> list[str]:
        """GPUs with rows, series or figures in this DB (all layers; canonical names)."""
        return sorted({self._canonical_or_raw(raw) for layer in self._layers for raw in layer.raw_gpus()})

    def _records(self, gpu: str) -> list[tuple[list, list, list]]:
        """Per layer (highest precedence first): (rows, series, figures) of `gpu`, excluded sources dropped."""
        return [self._layer_records(gpu, layer) for layer in self._layers]

    def _layer_records(self, gpu: str, layer: _Layer) -> tuple[list, list, list]:
        ex = self._exclude
        rows, series, figures = [], [], []
        for raw in layer.raw_gpus():
            if self._canonical_or_raw(raw) != gpu:
                continue
            r, s, f = layer.read(raw)
            rows += [x for x in r if ex is None or not ex(x.source)]
            series += [x for x in s if ex is None or not ex(x.source)]
            figures += [x for x in f if ex is None or not ex(x.source)]
        if self._exclude_row is not None:
            rows = [x for x in rows if not self._exclude_row(gpu, x.key)]
            kept = []
            for x in series:
                drop = np.array([self._exclude_row(gpu, x.key_at(v)) for v in x.values.tolist()], dtype=bool)
                if not drop.any():
                    kept.append(x)
                elif not drop.all():
                    keep = ~drop
                    kept.append(replace(x, values=x.values[keep], median_s=x.median_s[keep], mean_s=x.mean_s[keep],
                                        min_s=x.min_s[keep], std_s=x.std_s[keep], samples=x.samples[keep]))
            series = kept
        return rows, series, figures

    def collective_curves(self, gpu: str):
        """compute_db.collectives.CollectiveCurves of `gpu` (name or alias) over every layer (empty: none)."""
        from compute_db.collectives import CollectiveCurves
        name = self.canonical(gpu)
        got = self._coll_curves.get(name)
        if got is None:
            got = self._coll_curves[name] = CollectiveCurves(
                [[c for c in layer.collectives() if self._canonical_or_raw(c.gpu) == name] for layer in self._layers])
        return got

    def rows(self, gpu: str) -> list[store.KernelRow]:
        """All rows of `gpu` (canonical name) in every layer, series expanded (a user row and a shipped row
        of the same key both appear)."""
        out = []
        for rows, series, _ in self._records(gpu):
            have = {(r.key, r.source) for r in rows}
            out += rows
            for s in series:
                out += [r for r in s.rows() if (r.key, r.source) not in have]
        return out

    def _layer_data(self, gpu: str, i: int) -> tuple[dict, list]:
        """(exact times {TKey: (time_s, sources text)}, figures) of `gpu` in layer i (0: highest precedence),
        built once. A key's measured time is its highest layer's: the per-source medians of that layer."""
        got = self._by_layer.get((gpu, i))
        if got is not None:
            return got
        if self._delegate is not None and gpu != self._delegate_except:
            return self._delegate._layer_data(gpu, i)
        rows, series, figs = self._layer_records(gpu, self._layers[i])
        per: dict[TKey, dict[str, float]] = defaultdict(dict)
        for s in series:
            k = s.key
            a = s.axis
            pre, post = k.dims[:a], k.dims[a + 1:]
            head = (k.kind, k.variant, k.dtype, k.causal)
            src = s.source
            for v, t in zip(s.values.tolist(), s.median_s.tolist()):
                per[(*head, (*pre, v, *post))][src] = t
        for r in rows:      # a plain row wins over a series point of the same (key, source)
            k = r.key
            per[(k.kind, k.variant, k.dtype, k.causal, k.dims)][r.source] = r.median_s
        exact: dict[TKey, tuple[float, str]] = {}
        for tk, by_src in per.items():
            if len(by_src) == 1:     # most keys (10^5 on the shipped DB): _median and the join of one source
                ((src, t),) = by_src.items()
                exact[tk] = (t, src)
            else:
                exact[tk] = (_median(list(by_src.values())), ", ".join(sorted(by_src)))
        got = (exact, figs)
        self._by_layer[(gpu, i)] = got
        return got

    def _exact(self, gpu: str, tk: TKey) -> tuple[float, str] | None:
        """(time_s, sources) of a measured key: the first layer that has it (no other layer is indexed)."""
        for i in range(len(self._layers)):
            hit = self._layer_data(gpu, i)[0].get(tk)
            if hit is not None:
                return hit
        return None

    def _data(self, gpu: str) -> _GPUData:
        """Per-GPU indexes built once: exact times, class points, fit groups, figures."""
        data = self._loaded.get(gpu)
        if data is not None:
            return data
        if self._delegate is not None and gpu != self._delegate_except:
            return self._delegate._data(gpu)
        merged: dict[TKey, tuple[float, str]] = {}
        figures: dict[tuple[str, str], store.Figure] = {}
        for i in reversed(range(len(self._layers))):     # lowest precedence first
            exact, figs = self._layer_data(gpu, i)
            merged.update(exact)
            by_fig: dict[tuple[str, str], list[store.Figure]] = defaultdict(list)
            for f in figs:
                by_fig[(f.family, f.variant)].append(f)
            for fk, fs in by_fig.items():
                fs.sort(key=lambda f: f.value)
                figures[fk] = fs[len(fs) // 2]
        class_pts: dict[tuple, dict[tuple, list[float]]] = defaultdict(lambda: defaultdict(list))
        fit_pts: dict[tuple, dict[tuple, tuple[list, list]]] = defaultdict(lambda: defaultdict(lambda: ([], [])))
        heads: dict[tuple, tuple] = {}      # (kind, variant, dtype, causal) -> (its class points, its fit lists)
        for (kind, variant, dtype, causal, dims), (t, _) in merged.items():
            head = (kind, variant, dtype, causal)
            got = heads.get(head)
            if got is None:
                got = heads[head] = (class_pts[_class_of(kind, variant, dtype, causal)],
                                     fit_pts[_fit_class_of(kind, variant, dtype)][head])
            got[0][dims].append(t)
            d, ts = got[1]
            d.append(dims)
            ts.append(t)
        classes = {}
        for cls, pts in class_pts.items():
            dims = np.array(list(pts), dtype=np.int64)
            classes[cls] = ClassPoints(dims, np.array([_median(v) for v in pts.values()]), _thin_axis(cls[0]))
        groups = {fc: [(kind, variant, dtype, causal, np.array(d, dtype=np.int64), np.array(t))
                       for (kind, variant, dtype, causal), (d, t) in g.items()] for fc, g in fit_pts.items()}
        data = _GPUData(classes, groups, figures)
        self._loaded[gpu] = data
        return data

    # ------------------------------------------------------------------ fits
    def _own_fit(self, gpu: str, fcls: tuple[str, str, str], anchored: bool = True) -> roofline.FamilyFit | None:
        """The fit of `gpu`'s own kernels of one fit class (None: fewer than MIN_FIT_POINTS). When all of them
        are large (token-like size >= LARGE_ONLY_TOKENS) and a similar GPU has more kernels of the class, that
        GPU's t0, em and x0 are held (roofline.fit_groups `hold`); anchored=False fits everything."""
        ck = ("own", gpu, fcls, anchored)
        if ck in self._fits:
            return self._fits[ck]
        if self._delegate is not None and gpu != self._delegate_except:
            return self._delegate._own_fit(gpu, fcls, anchored)
        groups = self._data(gpu).fit_groups.get(fcls, [])
        fit = None
        n = sum(len(t) for *_, t in groups)
        if n >= MIN_FIT_POINTS:
            spec = self.gpu(gpu)
            fam, dcls, vcls = fcls
            fgroups = []
            for kind, variant, dtype, causal, dims, times in groups:
                keep = _thin_fit(kind, dims) if n > THIN_ABOVE else np.ones(len(dims), dtype=bool)
                fgroups.append(roofline.FitGroup(kind, variant, dtype, causal, dims[keep].astype(float), times[keep],
                                                 spec.peak_flops[dtype], spec.sms))
            prior = roofline.prior_for(fam, vcls or "fwd")
            basis = f"fit:{gpu} {fam}{'/' + vcls if vcls else ''} {dcls} ({n} kernels)"
            hold = None
            smallest = min(int((dims[:, _token_axis_of(kind, variant)] * (dims[:, 0] if kind == "grouped_gemm" else 1))
                               .min()) for kind, variant, *_, dims, _t in groups)     # tokens (all groups)
            if anchored and smallest >= LARGE_ONLY_TOKENS:
                # only large kernels measured (SimuMax): launch time, HBM efficiency and saturation sizes
                # from the richest similar GPU with data of the family
                for other in self._candidates(gpu)[1:]:
                    hold = self._own_fit(other, fcls, anchored=False)
                    if hold is not None and hold.n_points > n:
                        held = "t0, em, x0, tile weights" if hold.wave and fam == "gemm" else "t0, em, x0"
                        basis += f" ({held} of fit:{other})"
                        break
                    hold = None
            fit = roofline.fit_groups(fam, fgroups, spec.hbm_Bps, basis, prior, hold)
        self._fits[ck] = fit
        return fit

    def _fit_on(self, gpu: str, fcls: tuple[str, str, str]) -> tuple[roofline.FamilyFit, str] | None:
        """(fit, GPU whose data it came from) of `gpu`'s own data; fp8 falls back to the 16-bit fit."""
        fam, dcls, vcls = fcls
        fit = self._own_fit(gpu, fcls)
        if fit is not None:
            return fit, gpu
        if fam in COMPUTE_BOUND_FAMILIES and dcls != "16bit":
            fit = self._own_fit(gpu, (fam, "16bit", vcls))
            if fit is not None and dcls == "fp8":
                f = roofline.FP8_EFFICIENCY_FACTOR
                fit = replace(fit, e=fit.e * f, basis=fit.basis + f" x fp8 factor {f:g}")
            if fit is not None:
                return fit, gpu
        return None

    def _candidates(self, gpu: str) -> list[str]:
        out = [gpu]
        for other in self.gpu(gpu).similar_to:     # names or aliases (validated when a GPU file is loaded)
            try:
                name = self.canonical(other)
            except ComputeDBError:
                continue
            if name not in out:
                out.append(name)
        return out

    def _same_silicon(self, gpu: str, other: str) -> bool:
        """Whether `other`'s residual field (its kernels' deviations from the fit: wave quantization, kernel
        selection) transfers to `gpu`: the same GPU or the same dense bf16 peak within 15 % (H200 / H100,
        GB200 / B200, A100 SXM / PCIe), not another architecture or SM count (H100 / B200, H100-PCIe / H100)."""
        if gpu == other:
            return True
        a, b = self.gpu(gpu).peak_flops["bf16"], self.gpu(other).peak_flops["bf16"]
        return max(a, b) <= 1.15 * min(a, b)

    def resolve_fit(self, gpu: str, key: KernelKey) -> tuple[roofline.FamilyFit, str | None]:
        """(roofline parameters used for `key` on `gpu` (canonical name), GPU whose residual field goes with
        them or None). Fallbacks: this GPU's fit, a similar GPU's (gpus.yaml similar_to, in order), the DB GPU
        with the most kernels of the family; memory-bound families then the element-wise kernels' bandwidth
        and launch time; then priors. A memory-bound fit borrowed from another GPU takes the HBM efficiency
        figure (e.g. SimuMax's) of this GPU, or of a GPU listed before the one that lent the fit."""
        gpu = self.canonical(gpu)
        fcls = fit_class(key)
        fam = fcls[0]
        memory = fam not in COMPUTE_BOUND_FAMILIES
        ck = ("resolved", gpu, fcls, key.variant if memory else "")
        hit = self._fits.get(ck)
        if hit is not None:
            return hit
        candidates = self._candidates(gpu)
        got = None
        for g in candidates:
            got = self._fit_on(g, fcls)
            if got is not None:
                break
        if got is None:  # no similar GPU has data: the DB GPU with the most kernels of this family
            counts = {g: sum(len(t) for *_, t in self._data(g).fit_groups.get(fcls, [])) for g in self.db_gpus()
                      if g not in candidates}
            for g in sorted(counts, key=lambda g: (-counts[g], g)):
                if counts[g]:
                    got = self._fit_on(g, fcls)
                    if got is not None:
                        break
        data_gpu = None if got is None else got[1]
        field_gpu = data_gpu if data_gpu is not None and self._same_silicon(gpu, data_gpu) else None
        if got is None and memory and fam != "elementwise":
            # memory-bound family without data: the streaming (element-wise) kernels of this or a similar GPU
            for g in candidates:
                sub = self._fit_on(g, ("elementwise", "any", ""))
                if sub is not None:
                    fit, data_gpu = sub
                    field_gpu = None
                    # its size saturation does not transfer to other dims: bandwidth and launch time only
                    got = (roofline.FamilyFit(fam, 0.0, (), fit.t0, fit.em, 1.0,
                                              fit.basis + f" (element-wise stands in for {fam})", fit.n_points), None)
                    break
        if got is None:
            got = (roofline.prior_fit(fam, fcls[2] or "fwd"), None)
        fit = got[0]
        if memory and data_gpu != gpu:
            upto = candidates.index(data_gpu) if data_gpu in candidates else len(candidates)
            for g in candidates[:upto]:
                figs = self._data(g).figures
                fig = figs.get((fam, key.variant)) or figs.get((fam, "")) or figs.get(("default", ""))
                if fig is not None:
                    fit = replace(fit, em=fig.value,
                                  basis=f"{fit.basis} with {g}'s measured HBM efficiency {fig.value:.3g} "
                                        f"({fig.source} {fig.family}{'/' + fig.variant if fig.variant else ''})")
                    field_gpu = None    # the figure replaces the lending GPU's bandwidth: its residuals do not apply
                    break
        out = (fit, field_gpu)
        self._fits[ck] = out
        return out

    def family_fit(self, gpu: str, key: KernelKey) -> roofline.FamilyFit:
        """The roofline parameters used for `key` on `gpu` (canonical name), with fallbacks."""
        return self.resolve_fit(gpu, key)[0]

    def model_time(self, key: KernelKey, gpu: str) -> tuple[float, str]:
        """The bare calibrated roofline (no residual correction, no data band)."""
        spec = self.gpu(gpu)
        fit = self.family_fit(spec.name, key)
        t = roofline.predict(fit, key, spec.peak_flops[key.dtype], spec.hbm_Bps, spec.sms)
        return t, f"roofline {fit.basis} on {spec.name} spec"

    def _field(self, fit_gpu: str | None, cls: tuple, fit: roofline.FamilyFit) -> ResidualField | None:
        """Residual field of class `cls` on the GPU whose data fitted `fit` (None: no such data)."""
        if fit_gpu is None:
            return None
        ck = (fit_gpu, cls, id(fit))
        if ck in self._fields:
            return self._fields[ck]
        cp = self._data(fit_gpu).classes.get(cls)
        field = None
        if cp is not None and len(cp):
            spec = self.gpu(fit_gpu)
            kind, variant, dtype, causal = _class_key(cls)
            g = roofline.predict_many(fit, kind, variant, dtype, causal, cp.dims, spec.peak_flops[dtype],
                                      spec.hbm_Bps, spec.sms)
            field = ResidualField(cp.dims, cp.smoothed() - np.log(g))
        self._fields[ck] = field
        return field

    def _band(self, gpu: str, cls: tuple, cp: ClassPoints) -> ClassIndex:
        ck = (gpu, cls)
        band = self._bands.get(ck)
        if band is None:
            keep = _thin(cls[0], cp.dims)
            band = ClassIndex(dict(zip(map(tuple, cp.dims[keep].tolist()), np.exp(cp.smoothed()[keep]).tolist())))
            self._bands[ck] = band
        return band

    def corrected_model_time(self, key: KernelKey, gpu: str) -> tuple[float, str]:
        """The roofline corrected by the residual field of the measured kernels near `key` (no band)."""
        spec = self.gpu(gpu)
        fit, src = self.resolve_fit(spec.name, key)
        t = roofline.predict(fit, key, spec.peak_flops[key.dtype], spec.hbm_Bps, spec.sms)
        basis = f"roofline {fit.basis} on {spec.name} spec"
        cls, dims = class_of(key)
        field = self._field(src, cls, fit)
        if field is not None:
            r = field(dims)
            if r != 0.0:
                t *= math.exp(r)
                basis += f", x{math.exp(r):.3f} residual of measured {src} kernels nearby"
        return t, basis

    # ------------------------------------------------------------------ lookups
    def lookup_key(self, key: KernelKey, gpu: str) -> KernelTime:
        name = self.canonical(gpu)
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
        result = self._resolve(key, name)
        if not (math.isfinite(result.time_s) and result.time_s > 0):
            raise ComputeDBError(f"internal: non-positive time for {key.text()} on {name}")
        self._cache[ck] = result
        return result

    def _resolve(self, key: KernelKey, name: str) -> KernelTime:
        exact = self._exact(name, (key.kind, key.variant, key.dtype, key.causal, key.dims))
        if exact is not None:
            return KernelTime(exact[0], "measured", exact[1])
        data = self._data(name)
        cls, dims = class_of(key)
        cp = data.classes.get(cls)
        if cp is None:
            return self._model(key, name, cls, None)
        t = cp.value(dims)
        if t is not None:
            return KernelTime(t, "interpolated", f"the same kernel measured on {name} in an equivalent layout/dtype "
                                                 f"(monotone along {key.fields[cp.token_axis]})")
        axis = _profile_axis(key)
        if max(dims) < PROFILE_MAX:
            anchor = cp.line_anchor(dims, (axis,))
            if anchor is None and axis == cp.token_axis:
                anchor = cp.edge_anchor(dims)
            if anchor is not None:
                return self._extend(key, name, cls, cp, anchor)
        line = cp.line_predict(dims)
        if line is not None:
            t, ax, x0, x1 = line
            f = key.fields[ax]
            return KernelTime(t, "interpolated", f"log-log interpolation between measured {f}={x0} and "
                                                 f"{f}={x1} of the same shape on {name}")
        cross = cp.cross_predict(dims)
        if cross is not None:
            t, ax, x0, x1 = cross
            f = key.fields[ax]
            return KernelTime(t, "interpolated", f"log-log interpolation between {f}={x0} and {f}={x1}, each "
                                                 f"measured or interpolated along another dimension on {name}")
        return self._model(key, name, cls, cp)

    def _extend(self, key: KernelKey, name: str, cls: tuple, cp: ClassPoints,
                anchor: tuple[float, int, int]) -> KernelTime:
        """A shape measured along its token-like axis, asked beyond its first or last measurement.

        log t = log g + w·r_end + (1 - w)·r_a: the end point's residual r_end = log(t_end / g(x_end)) with weight
        w = exp(-(log(x/x_end)/RESIDUAL_LENGTH)²/2) (continuous with the line at its end), else the residual
        field shrunk towards r_end instead of 0 (far from any data the end point scaled by the roofline's
        growth). Clamped to the data band and made monotone from the end point outwards (running maximum
        above the last measurement, running minimum below the first) on the profile lattice: a token sweep
        past the data never gets faster."""
        t_end, axis, x_end = anchor
        prof = self._profile(key, name, cls, cp)
        x = key.dims[axis]
        j, frac = prof.node(x)
        j_end = prof.node(x_end)[0]
        lo_j, hi_j = (j_end + 1, j + 1) if x > x_end else (j, j_end)
        nodes = np.arange(min(lo_j, j), max(hi_j, j + 1) + 1)
        log_t, log_r, sum_wr, sum_w = prof.rows(nodes)
        log_lo, log_hi = prof.band(nodes)
        log_g = log_t - log_r
        r_end = math.log(t_end) - math.log(prof.g_at(x_end))
        w = np.exp(-0.5 * ((nodes * PROFILE_STEP - math.log(x_end)) / interpolate.RESIDUAL_LENGTH) ** 2)
        w0 = interpolate.RESIDUAL_PRIOR_WEIGHT
        blend = log_g + w * r_end + (1.0 - w) * (w0 * r_end + sum_wr) / (w0 + sum_w)
        blend = np.minimum(np.maximum(blend, log_lo), log_hi)
        at = {int(n): v for n, v in zip(nodes.tolist(), blend.tolist())}
        here = at[j] + frac * (at[j + 1] - at[j])
        if x > x_end:     # running max over the nodes in (x_end, x], and the point itself
            log_t = max([math.log(t_end), here] + [at[n] for n in range(j_end + 1, j + 1)])
        else:             # running min over the nodes in [x, x_end)
            log_t = min([math.log(t_end), here] + [at[n] for n in range(j + 1, j_end + 1)])
        _, _, lo, hi = prof.at(x)
        w = math.exp(-0.5 * (math.log(x / x_end) / interpolate.RESIDUAL_LENGTH) ** 2)
        f = key.fields[axis]
        basis = (f"the same shape at {f}={x_end} (measured or interpolated) on {name} extended by the roofline "
                 f"(weight {w:.2f}); {prof.basis}")
        source = "interpolated" if lo > 0 and hi <= interpolate.INTERPOLATED_BAND * lo else "modeled"
        return KernelTime(math.exp(log_t), source, basis)

    def _profile(self, key: KernelKey, name: str, cls: tuple, cp: ClassPoints | None) -> _Profile:
        axis = _profile_axis(key)
        ck = (name, key.kind, key.variant, key.dtype, key.causal, key.dims[:axis] + key.dims[axis + 1:])
        prof = self._profiles.get(ck)
        if prof is not None:
            self._profiles.move_to_end(ck)
            return prof
        spec = self.gpu(name)
        fit, src = self.resolve_fit(name, key)
        field = self._field(src, cls, fit)
        band = self._band(name, cls, cp) if cp is not None else None
        base = np.asarray(key.dims, dtype=float)
        peak, bw, sms = spec.peak_flops[key.dtype], spec.hbm_Bps, spec.sms

        def dims_at(nodes: np.ndarray) -> np.ndarray:
            dims = np.tile(base, (len(nodes), 1))
            dims[:, axis] = np.exp(nodes * PROFILE_STEP)
            return dims

        def log_g(nodes: np.ndarray) -> np.ndarray:
            return np.log(roofline.predict_many(fit, key.kind, key.variant, key.dtype, key.causal, dims_at(nodes),
                                                peak, bw, sms))

        line = field.line(base, axis) if field is not None else None
        # a float margin over the largest residual (the sums are rounded; far below any real difference)
        r_bound = 0.0 if line is None else line.r_max + 1e-9 * (1.0 + line.r_abs)
        prof = _Profile(axis, log_g, None if line is None else (lambda nodes: line.sums(dims_at(nodes))), r_bound,
                        None if band is None else (lambda nodes: band.bounds_many(dims_at(nodes))),
                        f"roofline {fit.basis} on {spec.name} spec", src)
        self._profiles[ck] = prof
        if len(self._profiles) > PROFILE_CACHE:
            self._profiles.popitem(last=False)
        return prof

    def _model(self, key: KernelKey, name: str, cls: tuple, cp: ClassPoints | None) -> KernelTime:
        """The corrected roofline clamped to the data band (module docstring, step 3)."""
        if max(key.dims) < PROFILE_MAX:
            prof = self._profile(key, name, cls, cp)
            _, r, lo, hi = prof.at(key.dims[prof.axis])
            t = prof.monotone_t_at(key.dims[prof.axis])
            basis = prof.basis
            if abs(r - 1.0) > 5e-4:
                basis += f", x{r:.3f} residual of measured {prof.residual_gpu} kernels nearby"
        else:
            t, basis = self.corrected_model_time(key, name)
            lo, hi = (0.0, math.inf) if cp is None else self._band(name, cls, cp).bounds(key.dims)
        if cp is None:
            return KernelTime(t, "modeled", basis)
        clamped = max(min(t, hi), lo)
        if lo > 0 and hi <= interpolate.INTERPOLATED_BAND * lo:
            return KernelTime(clamped, "interpolated", f"data band {lo * 1e6:.4g}-{hi * 1e6:.4g} us of measured "
                                                       f"kernels on {name}; {basis}")
        if clamped != t:
            basis += ", clamped to the band of the measured kernels"
        return KernelTime(clamped, "modeled", basis)

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


def open_db(path: str | Path | None = None, gpu_file: str | Path | None = None, *,
            layer_shipped: bool = True) -> ComputeDB:
    """Open a compute DB read-only.

    path None: the DB shipped in compute_db/data/ (an empty DB when absent). With a path, the user's file is
    layered over the shipped DB: its rows answer their keys (and feed interpolation and fits of their GPUs
    together with the shipped rows), the shipped DB answers everything else; layer_shipped=False reads the
    file alone. gpu_file: a user GPU spec YAML (gpus.load_gpu_file) whose GPUs extend the table.
    """
    extra = gpu_table.load_gpu_file(gpu_file) if gpu_file else None
    if path is None:
        return ComputeDB(SHIPPED_DB, extra_gpus=extra) if SHIPPED_DB.is_file() else ComputeDB(rows=[], extra_gpus=extra)
    if not layer_shipped or not SHIPPED_DB.is_file() or Path(path).resolve() == SHIPPED_DB:
        return ComputeDB(path, extra_gpus=extra)
    return ComputeDB(path, extra_gpus=extra, base=ComputeDB(SHIPPED_DB, extra_gpus=extra))
