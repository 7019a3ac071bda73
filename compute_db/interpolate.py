"""Interpolation across measured shapes in log space: the calibrated roofline clamped to the data band.

Two facts about one kernel class on one GPU bound the time t(q) of an unmeasured shape q from every
measured shape p (time t_p), dimension by dimension:
- monotone: a kernel that is at least as large in every dimension is not faster;
- bounded growth: growing a dimension by a factor f multiplies the time by at most f^GROWTH_EXPONENT
  (equivalently shrinking it by f divides the time by at most that). Physics says exponent 1 (the bigger
  kernel could run as f copies of the smaller one), but library kernel selection breaks it in real data:
  in the Vidur H100 GEMMs doubling n can triple the time, so the bound uses exponent 2.
Hence, in log space,
    L(q) = max_p  t_p · Π_i min(1, q_i / p_i)^GROWTH_EXPONENT      (lower bound)
    U(q) = min_p  t_p · Π_i max(1, q_i / p_i)^GROWTH_EXPONENT      (upper bound)
and the answer is the calibrated roofline g(q) clamped to [L, U]:  t(q) = max(min(g(q), U(q)), L(q)).
g, L and U are continuous and non-decreasing in every dimension, so t(q) is too: monotone along each
dimension, no cliffs, and equal to the measurement at a measured shape (for consistent data). Between
dense measurements the band is narrow and the data decide (e.g. along a token sweep, where L and U are
the neighbouring measurements); far from data the band is wide and the roofline decides. Measured
shapes themselves are answered from the rows (compute_db.db), not from this band.

The answer is labelled "interpolated" when both bounds exist and U <= INTERPOLATED_BAND · L (the data
alone pin the time to within that factor), otherwise "modeled".
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

INTERPOLATED_BAND = 1.5
GROWTH_EXPONENT = 2.0


class ClassIndex:
    """Measured kernels of one class (kind, dtype class, variant class): points {dims: time_s}."""

    def __init__(self, points: dict[tuple[int, ...], float]):
        self.points = points
        n = len(next(iter(points))) if points else 0
        self._log_p = np.log(np.asarray(list(points), dtype=float)).reshape(len(points), n)
        self._log_t = np.log(np.asarray(list(points.values()), dtype=float))

    def bounds(self, dims: tuple[int, ...]) -> tuple[float, float]:
        """(L, U) in seconds: L = 0 / U = inf when no measured kernel bounds q from that side."""
        if not self.points:
            return 0.0, math.inf
        d = np.log(np.asarray(dims, dtype=float)) - self._log_p    # log(q_i / p_i)
        lo = self._log_t + GROWTH_EXPONENT * np.minimum(d, 0.0).sum(axis=1)
        hi = self._log_t + GROWTH_EXPONENT * np.maximum(d, 0.0).sum(axis=1)
        return float(np.exp(lo.max())), float(np.exp(hi.min()))

    def predict(self, dims: tuple[int, ...], model: Callable[[tuple[int, ...]], float]
                ) -> tuple[float, str, float, float]:
        """(time_s, "interpolated" | "modeled", L, U) of the clamped roofline at `dims`."""
        lo, hi = self.bounds(dims)
        g = model(dims)
        t = max(min(g, hi), lo)
        source = "interpolated" if lo > 0 and hi <= INTERPOLATED_BAND * lo else "modeled"
        return t, source, lo, hi
