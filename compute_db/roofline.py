"""Calibrated roofline: kernel time from FLOPs, bytes and per-family efficiency surfaces fitted to kernel data.

Compute-bound families (GEMM, flash attention):
    t = t0 + (tc^p + tm^p)^(1/p)
    tc = count · FLOPs_per_unit / (peak · e) · Π_d (x_d + x0_d) / x_d      (saturating efficiency per dim)
    tm = bytes / (HBM_Bps · em)
i.e. the efficiency of dimension d is x_d / (x_d + x0_d): small tiles waste the tensor cores, large ones
approach e. p > 1 makes a smooth max of the compute and memory bounds (no cliff at the ridge point).
Each term grows with every dimension, so predictions are monotone along each dimension and in FLOPs.
Memory-bound families: t = t0 + bytes / (HBM_Bps · em).
t0 is the launch + tail overhead (seconds), fitted with the rest.

Fits minimise squared log-error over the measured kernels of one GPU, family and dtype class, by
Levenberg-Marquardt in numpy (no scipy at run time). The parameters are dimensionless efficiencies,
sizes and a launch time, so a fit from one GPU applies to another GPU's peaks and bandwidth ("scaled by
spec") when that GPU has no data. Families with no data anywhere use the documented PRIORS.
Never fitted to end-to-end step times.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from compute_db.keys import KernelKey, gemm_equivalent, work

# Saturating dimensions (x_d) of the compute-bound families.
COMPUTE_DIMS = {"gemm": 3, "flash_attn": 3}

# Unfitted starting points / fallbacks (dimensionless efficiencies, element counts, seconds). Used only
# for a family with no kernel data on the GPU nor on any similar GPU.
PRIORS: dict[str, dict] = {
    # large-GEMM efficiency 0.75 (hardware.md: 70-75% A100, 70-85% H100)
    "gemm": {"e": 0.75, "x0": (128.0, 128.0, 64.0), "t0": 5e-6, "em": 0.85, "p": 4.0},
    # flash attention: no public kernel data shipped; FA2/FA3-class kernels reach ~0.6 of peak forward
    # and ~0.45 backward at long sequences. Saturation dims: seq_q, seq_kv, head_dim.
    "flash_attn:fwd": {"e": 0.6, "x0": (128.0, 128.0, 16.0), "t0": 8e-6, "em": 0.8, "p": 4.0},
    "flash_attn:bwd": {"e": 0.45, "x0": (128.0, 128.0, 16.0), "t0": 12e-6, "em": 0.8, "p": 4.0},
    "memory": {"e": 0.0, "x0": (), "t0": 4e-6, "em": 0.8, "p": 1.0},
}
# fp8 GEMMs without fp8 measurements: the 16-bit fit at the fp8 peak, times this factor (assumption:
# published H100 fp8 GEMM throughput is a somewhat smaller fraction of its peak than bf16's).
FP8_EFFICIENCY_FACTOR = 0.9


@dataclass(frozen=True)
class FamilyFit:
    family: str
    e: float                    # compute efficiency at large sizes (compute families)
    x0: tuple[float, ...]       # saturation sizes per compute dim
    t0: float                   # launch/tail overhead, s
    em: float                   # HBM bandwidth efficiency
    p: float                    # smooth-max exponent
    basis: str                  # where it came from: "fit:H100 gemm fp16 (13468 kernels)" | "prior"
    n_points: int = 0


def dtype_class(dtype: str) -> str:
    return "16bit" if dtype in ("bf16", "fp16") else dtype


def compute_dims(key: KernelKey) -> tuple[int, ...]:
    """The saturating dimensions of a compute-bound key (GEMM: canonical m, n, k; attention: sq, skv, d)."""
    if key.family == "gemm":
        _, m, n, k = gemm_equivalent(key)
        return m, n, k
    b, sq, skv, h, kvh, dqk, dv = key.dims
    return sq, skv, max(dqk, dv)


def predict(fit: FamilyFit, flops: float, bytes_: float, dims: tuple[int, ...], peak: float, hbm_Bps: float) -> float:
    tm = bytes_ / (hbm_Bps * fit.em)
    if not fit.x0:
        return fit.t0 + tm
    scale = 1.0
    for x, x0 in zip(dims, fit.x0):
        scale *= (x + x0) / x
    tc = flops * scale / (peak * fit.e)
    p = fit.p
    hi = max(tc, tm)
    if hi <= 0:
        return fit.t0
    return fit.t0 + hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)


def _predict_arrays(theta: np.ndarray, flops, bytes_, dims, peak, bw, n_dims: int) -> np.ndarray:
    e = math.exp(theta[0])
    t0 = math.exp(theta[1])
    em = math.exp(theta[2])
    tm = bytes_ / (bw * em)
    if n_dims == 0:
        return t0 + tm
    p = 1.0 + math.exp(theta[3])
    scale = np.ones_like(flops)
    for d in range(n_dims):
        x0 = math.exp(theta[4 + d])
        scale = scale * (dims[:, d] + x0) / dims[:, d]
    tc = flops * scale / (peak * e)
    hi = np.maximum(tc, tm)
    return t0 + hi * ((tc / hi) ** p + (tm / hi) ** p) ** (1.0 / p)


def _levenberg_marquardt(residual, theta: np.ndarray, iters: int = 200) -> np.ndarray:
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
        if not improved or old - cost < 1e-10 * max(cost, 1e-30):
            break
    return theta


def fit_family(family: str, keys: list[KernelKey], times_s: np.ndarray, peaks: np.ndarray, hbm_Bps: float,
               basis: str, prior: dict) -> FamilyFit:
    """Fit one family's parameters to measured kernels (times in s; peaks: the FLOP/s of each key's dtype)."""
    n_dims = len(prior["x0"])
    flops = np.empty(len(keys))
    byts = np.empty(len(keys))
    dims = np.ones((len(keys), max(n_dims, 1)))
    for i, key in enumerate(keys):
        flops[i], byts[i] = work(key)
        if n_dims:
            dims[i, :] = compute_dims(key)
    y = np.log(np.asarray(times_s, dtype=float))
    theta0 = [math.log(prior["e"] or 1.0), math.log(prior["t0"]), math.log(prior["em"])]
    if n_dims:
        theta0.append(math.log(max(prior["p"] - 1.0, 1e-3)))
        theta0.extend(math.log(x) for x in prior["x0"])
    theta0 = np.asarray(theta0, dtype=float)
    if n_dims == 0:
        theta0 = theta0.copy()

    def residual(theta):
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            pred = _predict_arrays(theta, flops, byts, dims, peaks, hbm_Bps, n_dims)
            res = np.log(pred) - y
        return np.where(np.isfinite(res), res, 1e3)

    theta = _levenberg_marquardt(residual, theta0)
    # keep the physically meaningful range (efficiencies <= 1)
    e = min(math.exp(theta[0]), 1.0) if n_dims else 0.0
    em = min(math.exp(theta[2]), 1.0)
    t0 = math.exp(theta[1])
    p = 1.0 + math.exp(theta[3]) if n_dims else 1.0
    x0 = tuple(math.exp(v) for v in theta[4:4 + n_dims]) if n_dims else ()
    return FamilyFit(family, e, x0, t0, em, min(p, 64.0), basis, len(keys))


def prior_fit(family_key: str) -> FamilyFit:
    prior = PRIORS.get(family_key) or PRIORS["memory"]
    return FamilyFit(family_key, prior["e"], prior["x0"], prior["t0"], prior["em"], prior["p"], "prior", 0)


def prior_for(family: str, variant: str) -> dict:
    if family == "flash_attn":
        return PRIORS["flash_attn:bwd" if variant == "bwd" else "flash_attn:fwd"]
    return PRIORS.get(family, PRIORS["memory"])
