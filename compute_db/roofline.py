"""Calibrated roofline: kernel time from FLOPs, bytes and per-family efficiency surfaces fitted to kernel data.

Compute-bound families (GEMM, flash attention):
    t = t0 + (tc^p + tm^p)^(1/p),  tc = FLOPs(x + x0) / (peak · e),  tm = bytes(x) / (HBM_Bps · em)
Memory-bound families:
    t = t0 + bytes(x + x0) / (HBM_Bps · em)
FLOPs(x + x0) is the kernel's work evaluated with its saturating dimensions padded by fitted sizes x0
(GEMM: m, n, k; attention: seq_q, seq_kv, head dims; norms: tokens, hidden; ...): small dimensions
waste tiles, warps and waves, so a kernel costs as if it were somewhat larger; large ones approach
efficiency e (em for bandwidth). For a GEMM this is 2(m+m0)(n+n0)(k+k0). p > 1 makes a smooth maximum
of the compute and memory bounds (no cliff at the ridge point); t0 is launch + tail overhead (seconds).
Work is non-decreasing in every dimension, so predictions are monotone along each dimension and in FLOPs.

GEMM wave quantization (GEMM family, GPUs with a known SM count): a GEMM runs as ceil(m/Tm)·ceil(n/Tn) output
tiles (× groups / batch, one launch) in waves of one tile per SM, so its output area costs as
A_c = ceil(tiles_c / SMs) · Tm·Tn·SMs / groups per GEMM instead of m·n: same-FLOP GEMMs differ by 20-30 % when
their last wave is nearly empty. cuBLAS picks among a few tile shapes per call (WAVE_TILES) and splits some
tiles (stream-K), so the modelled area is a geometric mixture of the smooth padded area and each candidate's
quantized area with fitted weights w_c (Σ w_c < 1; the rest is the smooth share):
    FLOPs_wave = FLOPs(x + x0) · Π_c (A_c / ((m + m0)(n + n0)))^w_c
Every factor is non-decreasing in m, n and the group count, so monotonicity holds. Ignored: split-K, the
exact kernel selection heuristic (not predictable from the shape alone), L2 effects of the tile order.

Fits minimise the squared log-error over the measured kernels of one GPU, family and dtype class, weighted
by where time is spent (weight ∝ measured time^FIT_TIME_WEIGHT_EXPONENT: an unweighted fit follows the many
small kernels and comes out 9-12 % too fast on the large GEMMs that dominate a step), by Levenberg-Marquardt
in numpy (no scipy at run time). Memory-bound families fix their large-size HBM efficiency em first, from
the largest measured kernels (median of bytes / (time · HBM_Bps) over the top LARGE_KERNEL_FRACTION by
bytes), and fit the launch time and saturation sizes with it. Parameters are dimensionless efficiencies,
sizes and a launch time, so a fit from one GPU applies to another GPU's peaks and bandwidth ("scaled by
spec") when that GPU has no data. Families with no data anywhere use the documented PRIORS.
Never fitted to end-to-end step times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compute_db.keys import COMPUTE_BOUND_FAMILIES, FAMILY, KernelKey, work, work_of
from workload_gen.workload import COMPUTE_KINDS

# Unfitted starting points / fallbacks (dimensionless efficiencies, element counts, seconds). Used only
# for a family with no kernel data on the GPU nor on any similar GPU.
PRIORS: dict[str, dict] = {
    # large-GEMM efficiency 0.75 (hardware.md: 70-75% A100, 70-85% H100)
    "gemm": {"e": 0.75, "x0": (128.0, 128.0, 64.0), "t0": 5e-6, "em": 0.85, "p": 4.0},
    # flash attention: no public kernel data shipped; FA2/FA3-class kernels reach ~0.6 of peak forward
    # and ~0.45 backward at long sequences. Saturation dims: seq_q, seq_kv, head_dim.
    "flash_attn:fwd": {"e": 0.6, "x0": (128.0, 128.0, 16.0, 16.0), "t0": 8e-6, "em": 0.8, "p": 4.0},
    "flash_attn:bwd": {"e": 0.45, "x0": (128.0, 128.0, 16.0, 16.0), "t0": 12e-6, "em": 0.8, "p": 4.0},
    # memory-bound kernels: 80% of HBM bandwidth, 4 us launch + tail, saturation sizes ~0 (unfitted)
    "memory": {"e": 0.0, "x0": None, "t0": 4e-6, "em": 0.8, "p": 1.0},
}
# fp8 GEMMs without fp8 measurements (none exist in the shipped data: SimuMax v1.2 lists its fp8 efficiencies
# as 0 = not measured): the GPU's measured 16-bit fit at the fp8 peak, times this factor. 1.0 = the same
# fraction of the (doubled) peak, the convention of SimuMax's own A100 defaults (fp8_matmul: 624 TFLOP/s at
# efficiency 0.75, matmul: 312 at 0.75) and consistent with DeepGEMM's published ~1550 fp8 TFLOP/s on H800
# (78 % of 1979) against ~72-75 % for large bf16 GEMMs on H100 in the Vidur data. An assumption, not a fit.
FP8_EFFICIENCY_FACTOR = 1.0
# Candidate output tiles (Tm, Tn) of the GEMM wave model: the CTA tiles cuBLAS/CUTLASS kernels use for large
# 16-bit GEMMs on Ampere, Hopper and Blackwell (128x128, 128x256, 256x128); their mixture weights are fitted.
WAVE_TILES: tuple[tuple[int, int], ...] = ((128, 128), (128, 256), (256, 128))
WAVE_PRIOR = -1.5                   # starting value of each log tile weight (w ≈ 0.16 each)
# A fit with the wave term stops when an iteration improves the cost by less than this fraction: its tile
# weights have flat directions (a weight -> 0) along which plain LM creeps for 200 iterations (0.5 s on H100).
WAVE_FIT_TOL = 1e-6
FIT_TIME_WEIGHT_EXPONENT = 1.0      # weight of a kernel in the fit ∝ its measured time^this
LARGE_KERNEL_FRACTION = 0.1         # memory-bound em from the largest 10 % of kernels (by bytes) ...
LARGE_KERNEL_MIN = 3                # ... but at least this many

# Saturating fields of each family (None: the kind's single size field).
SATURATION_FIELDS: dict[str, tuple[str, ...] | None] = {
    "gemm": ("m", "n", "k"), "flash_attn": ("seq_q", "seq_kv", "head_dim_qk", "head_dim_v"),
    "layernorm": ("tokens", "hidden"), "rmsnorm": ("tokens", "hidden"),
    "gelu": ("tokens", "width"), "swiglu": ("tokens", "width"), "rotary": ("tokens", "heads", "head_dim"),
    "elementwise": None, "softmax": ("rows", "cols"), "embedding": ("tokens", "hidden"),
    "cross_entropy": ("tokens", "vocab"), "router": ("tokens", "experts"), "permute": ("tokens", "hidden"),
    "optimizer": ("params",),
    "attn_decode": ("kv_tokens",),
}


@dataclass(frozen=True)
class FamilyFit:
    family: str
    e: float                    # compute efficiency at large sizes (compute families; 0 for memory-bound)
    x0: tuple[float, ...]       # saturation sizes per saturating dim
    t0: float                   # launch/tail overhead, s
    em: float                   # HBM bandwidth efficiency at large sizes
    p: float                    # smooth-max exponent (compute families)
    basis: str                  # where it came from: "fit:H100 gemm fp16 (13468 kernels)" | "prior"
    n_points: int = 0
    wave: tuple[float, ...] = ()  # GEMM family: log weights u_c of WAVE_TILES (w_c = e^u_c / (1 + Σ e^u)); () none

    @property
    def compute_bound(self) -> bool:
        return self.e > 0


def dtype_class(dtype: str) -> str:
    return "16bit" if dtype in ("bf16", "fp16") else dtype


def saturation_fields(key: KernelKey) -> tuple[str, ...]:
    names = SATURATION_FIELDS.get(key.family)
    return names if names is not None else (key.fields[0],)


def padded_dims(key: KernelKey, x0: tuple[float, ...]) -> dict[str, float]:
    d: dict[str, float] = dict(zip(key.fields, key.dims))
    for f, pad in zip(saturation_fields(key), x0):
        d[f] = d[f] + pad
    return d


def wave_weights(log_weights) -> np.ndarray:
    """Mixture weights w_c (each in (0, 1), sum < 1) of the tile candidates from their log weights u_c."""
    u = np.exp(np.clip(np.asarray(log_weights, dtype=float), -60.0, 60.0))
    return u / (1.0 + u.sum())


def wave_factor(m, n, m_pad, n_pad, count, sms: int, weights: np.ndarray):
    """Π_c (A_c / (m_pad · n_pad))^w_c (module docstring): the tile-and-wave quantized output area of candidate
    c relative to the smooth padded area, mixed geometrically. m, n, count: floats or arrays (count = groups or
    batch sharing one launch); sms > 0."""
    log_f = 0.0
    smooth = np.log(m_pad * n_pad)
    for (tm, tn), w in zip(WAVE_TILES, weights):
        tiles = count * np.ceil(m / tm) * np.ceil(n / tn)
        area = np.ceil(tiles / sms) * (tm * tn * sms) / count
        log_f = log_f + w * (np.log(area) - smooth)
    return np.exp(log_f)


def _gemm_count(kind: str, d) -> object:
    return d["groups"] if kind == "grouped_gemm" else (d["batch"] if kind == "attn_bmm" else 1.0)


def predict(fit: FamilyFit, key: KernelKey, peak: float, hbm_Bps: float, sms: int = 0) -> float:
    """Roofline time (s) of `key` with `fit` on a GPU of this peak (FLOP/s of the key's dtype) and HBM BW;
    sms: the GPU's SM count (GEMM wave term; 0: none)."""
    flops, byts = work(key)
    if fit.x0:
        padded = padded_dims(key, fit.x0)
        pflops, pbytes = work_of(key.kind, key.variant, key.dtype, key.causal, padded)
    else:
        padded = dict(zip(key.fields, key.dims))
        pflops, pbytes = flops, byts
    if fit.wave and sms > 0 and FAMILY[key.kind] == "gemm":
        d = dict(zip(key.fields, key.dims))
        pflops = float(pflops) * float(wave_factor(d["m"], d["n"], padded["m"], padded["n"], _gemm_count(key.kind, d),
                                                   sms, wave_weights(fit.wave)))
    if not fit.compute_bound:
        return fit.t0 + float(pbytes) / (hbm_Bps * fit.em)
    tm = byts / (hbm_Bps * fit.em)
    tc = float(pflops) / (peak * fit.e)
    hi = max(tc, tm)
    if hi <= 0:
        return fit.t0
    p = fit.p
    return fit.t0 + hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)


def _exp(v: float) -> float:
    return math.exp(min(max(float(v), -60.0), 60.0))


def _logistic(v: float) -> float:
    return 1.0 / (1.0 + _exp(-v))


def _logit(p: float) -> float:
    return math.log(p / (1.0 - p))


@dataclass(frozen=True, eq=False)
class FitGroup:
    """Measured kernels of one (kind, variant, dtype, causal) for a fit: dims (N x D), times (s), peak FLOP/s,
    SM count of the GPU (0: unknown, no GEMM wave term)."""
    kind: str
    variant: str
    dtype: str
    causal: bool
    dims: np.ndarray
    times_s: np.ndarray
    peak: float
    sms: int = 0


class _FitData:
    """Measured kernels of one family grouped by (kind, variant, dtype, causal) as field arrays."""

    def __init__(self, groups: list[FitGroup], hbm_Bps: float):
        self._bw = hbm_Bps
        self.groups = []
        start = 0
        peaks, times = [], []
        self.sms = [g.sms for g in groups]
        for g in groups:
            n = len(g.times_s)
            fields = COMPUTE_KINDS[g.kind]
            arrays = {f: g.dims[:, j].astype(float) for j, f in enumerate(fields)}
            sat = SATURATION_FIELDS.get(FAMILY[g.kind]) or (fields[0],)
            flops, byts = work_of(g.kind, g.variant, g.dtype, g.causal, arrays)
            self.groups.append((g.kind, g.variant, g.dtype, g.causal, np.arange(start, start + n), arrays, sat,
                                np.broadcast_to(np.asarray(byts, dtype=float), n)))
            peaks.append(np.full(n, g.peak))
            times.append(g.times_s)
            start += n
        self.n = start
        self.peaks = np.concatenate(peaks) if peaks else np.zeros(0)
        self.times_s = np.concatenate(times) if times else np.zeros(0)

    def bytes(self) -> np.ndarray:
        out = np.empty(self.n)
        for *_, idx, _arrays, _sat, byts in self.groups:
            out[idx] = byts
        return out

    def predict(self, theta: np.ndarray, n_dims: int, compute: bool, n_wave: int = 0) -> np.ndarray:
        # theta: [log t0, log em, (log e, log(p - 1) when compute), log x0 per saturating field,
        #         log tile weight u_c per WAVE_TILES candidate (GEMM wave term)]
        t0, em = _exp(theta[0]), _logistic(theta[1])
        off = 4 if compute else 2
        x0 = [_exp(v) for v in theta[off:off + n_dims]]
        weights = wave_weights(theta[off + n_dims:off + n_dims + n_wave]) if n_wave else None
        out = np.empty(self.n)
        for (kind, variant, dtype, causal, idx, arrays, sat, byts), sms in zip(self.groups, self.sms):
            padded = dict(arrays)
            for f, pad in zip(sat, x0):
                padded[f] = padded[f] + pad
            pflops, pbytes = work_of(kind, variant, dtype, causal, padded)
            if weights is not None and sms > 0:
                pflops = pflops * wave_factor(arrays["m"], arrays["n"], padded["m"], padded["n"],
                                              _gemm_count(kind, arrays), sms, weights)
            if not compute:
                out[idx] = t0 + np.asarray(pbytes, dtype=float) / (self._bw * em)
                continue
            e, p = _logistic(theta[2]), 1.0 + _exp(theta[3])
            tm = byts / (self._bw * em)
            tc = np.asarray(pflops, dtype=float) / (self.peaks[idx] * e)
            out[idx] = _smooth_max_time(t0, tc, tm, p)
        return out


def _levenberg_marquardt(residual, theta: np.ndarray, iters: int = 200, tol: float = 1e-10) -> np.ndarray:
    lam = 1e-2
    r = residual(theta)
    cost = float(r @ r)
    for _ in range(iters):
        jac = np.empty((r.size, theta.size))
        for i in range(theta.size):
            d = np.zeros_like(theta)
            d[i] = 1e-6
            jac[:, i] = (residual(theta + d) - r) / 1e-6
        a = jac.T @ jac
        g = jac.T @ r
        improved = False
        while lam < 1e10:
            step = np.linalg.solve(a + lam * np.diag(np.diag(a) + 1e-12), -g)
            r2 = residual(theta + step)
            c2 = float(r2 @ r2)
            if np.isfinite(c2) and c2 < cost:
                old = cost
                theta, r, cost = theta + step, r2, c2
                lam = max(lam / 3, 1e-12)
                improved = True
                break
            lam *= 4
        if not improved or old - cost < tol * max(cost, 1e-30):
            break
    return theta


def fit_groups(family: str, groups: list[FitGroup], hbm_Bps: float, basis: str, prior: dict,
               hold: FamilyFit | None = None) -> FamilyFit:
    """Fit one family's parameters to measured kernels (module docstring: time-weighted; memory-bound
    families then pin em so that the largest kernels are matched, and refit the rest).

    hold: a similar GPU's fit whose launch time t0, HBM efficiency em and saturation sizes x0 are kept, for
    kernels that cannot determine them (all large: compute-bound GEMMs say nothing about em or about how
    small kernels waste tiles); then only e and p (compute-bound) are fitted. GEMM families on GPUs with a known
    SM count (FitGroup.sms) also fit the tile-wave mixture weights (module docstring; held with `hold` too)."""
    compute = family in COMPUTE_BOUND_FAMILIES
    n_dims = len(SATURATION_FIELDS.get(family) or (1,))
    n_wave = len(WAVE_TILES) if family == "gemm" and groups and all(g.sms > 0 for g in groups) else 0
    data = _FitData(groups, hbm_Bps)
    y = np.log(data.times_s)
    w = data.times_s ** FIT_TIME_WEIGHT_EXPONENT
    sw = np.sqrt(w / w.mean())
    x0_prior = prior["x0"] if prior.get("x0") else (1.0,) * n_dims
    theta = [math.log(prior["t0"]), _logit(prior["em"])]
    if compute:
        theta += [_logit(prior["e"]), math.log(max(prior["p"] - 1.0, 1e-3))]
    theta += [math.log(x) for x in x0_prior]
    theta += [WAVE_PRIOR] * n_wave
    theta = np.asarray(theta, dtype=float)
    free = np.ones(theta.size, dtype=bool)
    off = 4 if compute else 2
    if hold is not None and len(hold.x0) == n_dims:
        theta[0] = math.log(max(hold.t0, 1e-12))
        theta[1] = _logit(min(max(hold.em, 1e-3), 0.999))
        theta[off:off + n_dims] = [math.log(max(x, 1e-12)) for x in hold.x0]
        free[[0, 1]] = False
        free[off:off + n_dims] = False
        if n_wave and len(hold.wave) == n_wave:
            theta[off + n_dims:] = hold.wave
            free[off + n_dims:] = False

    def solve(theta: np.ndarray, free: np.ndarray) -> np.ndarray:
        def residual(sub):
            full = theta.copy()
            full[free] = sub
            with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
                res = (np.log(data.predict(full, n_dims, compute, n_wave)) - y) * sw
            return np.where(np.isfinite(res), res, 1e3)
        out = theta.copy()
        if free.any():
            out[free] = _levenberg_marquardt(residual, theta[free], tol=WAVE_FIT_TOL if n_wave else 1e-10)
        return out

    theta = solve(theta, free)
    if not compute and data.n >= LARGE_KERNEL_MIN:
        # large-tensor asymptote: em = median over the largest kernels of bytes / ((time - t0) · HBM_Bps) with
        # the kernel's own (unpadded) bytes, so that the saturation sizes cannot trade against em; then the
        # launch time and saturation sizes are refitted with em fixed; twice (t0 moves a little)
        byts = data.bytes()
        n_large = max(LARGE_KERNEL_MIN, int(math.ceil(LARGE_KERNEL_FRACTION * data.n)))
        large = np.argsort(byts, kind="stable")[-n_large:]
        free[1] = False
        for _ in range(2):
            t0 = _exp(theta[0])
            busy = np.maximum(data.times_s[large] - t0, 0.5 * data.times_s[large])
            theta[1] = _logit(float(np.clip(np.median(byts[large] / (busy * hbm_Bps)), 1e-3, 0.999)))
            theta = solve(theta, free)
    off = 4 if compute else 2
    t0 = _exp(theta[0])
    em = _logistic(theta[1])          # efficiencies are fitted inside (0, 1) (physical range)
    e = _logistic(theta[2]) if compute else 0.0
    p = min(1.0 + _exp(theta[3]), 64.0) if compute else 1.0
    x0 = tuple(_exp(v) for v in theta[off:off + n_dims])
    wave = tuple(float(v) for v in theta[off + n_dims:off + n_dims + n_wave])
    return FamilyFit(family, e, x0, t0, em, p, basis, data.n, wave)


def predict_many(fit: FamilyFit, kind: str, variant: str, dtype: str, causal: bool, dims: np.ndarray,
                 peak: float, hbm_Bps: float, sms: int = 0) -> np.ndarray:
    """predict() for many shapes of one (kind, variant, dtype, causal): dims (N x D) -> times (s)."""
    fields = COMPUTE_KINDS[kind]
    arrays = {f: np.asarray(dims[:, j], dtype=float) for j, f in enumerate(fields)}
    flops, byts = work_of(kind, variant, dtype, causal, arrays)
    n = len(dims)
    flops, byts = np.broadcast_to(np.asarray(flops, float), n), np.broadcast_to(np.asarray(byts, float), n)
    padded = dict(arrays)
    if fit.x0:
        sat = SATURATION_FIELDS.get(FAMILY[kind]) or (fields[0],)
        for f, pad in zip(sat, fit.x0):
            padded[f] = padded[f] + pad
        pflops, pbytes = work_of(kind, variant, dtype, causal, padded)
        pflops, pbytes = np.broadcast_to(np.asarray(pflops, float), n), np.broadcast_to(np.asarray(pbytes, float), n)
    else:
        pflops, pbytes = flops, byts
    if fit.wave and sms > 0 and FAMILY[kind] == "gemm":
        pflops = pflops * wave_factor(arrays["m"], arrays["n"], padded["m"], padded["n"], _gemm_count(kind, arrays),
                                      sms, wave_weights(fit.wave))
    if not fit.compute_bound:
        return fit.t0 + pbytes / (hbm_Bps * fit.em)
    tm = byts / (hbm_Bps * fit.em)
    tc = pflops / (peak * fit.e)
    return _smooth_max_time(fit.t0, tc, tm, fit.p)


def _smooth_max_time(t0, tc, tm, p: float):
    """t0 + (tc^p + tm^p)^(1/p) (s; arrays): the compute-bound families' time, scaled by the larger bound."""
    hi = np.maximum(np.maximum(tc, tm), 1e-300)
    return t0 + hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)


def prior_fit(family: str, variant: str = "fwd") -> FamilyFit:
    """Unfitted parameters for a family (PRIORS)."""
    prior = prior_for(family, variant)
    return FamilyFit(family, prior["e"], tuple(prior["x0"] or ()), prior["t0"], prior["em"], prior["p"], "prior", 0)


def prior_for(family: str, variant: str) -> dict:
    if family == "flash_attn":
        return PRIORS["flash_attn:bwd" if variant == "bwd" else "flash_attn:fwd"]
    return PRIORS.get(family, PRIORS["memory"])
