"""Interpolation between measured kernels of one class on one GPU (all in log space).

A class pools kernels that compute the same thing: bf16 with fp16 and, for GEMMs, the forward, dgrad and
wgrad layouts through their (m, n, k) GEMM equivalents (compute_db.db.class_of). Tools:

1. Lines (`ClassPoints.line_predict`): measured points that differ from the query in exactly one dimension
   (same shape, another token count; or the same m and k with another n) form a line. Between the two
   bracketing points of a line the time is interpolated linearly in (log size, log time); when several
   dimensions have a bracketing line the tightest bracket (smallest size ratio) wins. Lines are made
   monotone first (isotonic regression of log time along the line, pool-adjacent-violators), so that
   measurement noise (a 2 % dip between neighbouring token counts) never makes a larger kernel faster;
   a staircase from wave quantization is monotone and kept.
2. The data band (`ClassIndex.bounds`): a kernel at least as large in every dimension is not faster, and
   growing one dimension by f multiplies the time by at most f^GROWTH_EXPONENT (physics says 1; library
   kernel selection breaks that in real data, e.g. doubling n of an H100 GEMM can triple its time):
       L(q) = max_p t_p · Π_i min(1, q_i/p_i)^GROWTH_EXPONENT,  U(q) = min_p t_p · Π_i max(1, q_i/p_i)^GROWTH_EXPONENT.
   Model answers are clamped to [L, U]; L, U are continuous and non-decreasing in every dimension.
3. The residual field (`ResidualField`): the calibrated roofline g is a smooth global fit; what it misses
   locally (wave quantization, kernel selection, the held-out shape's neighbours) is read off the measured
   residuals r_p = log(t_p / g(p)) near the query by a Gaussian kernel in log size, shrunk towards 0 (the
   bare roofline) where data are sparse:  r(q) = Σ w_p r_p / (RESIDUAL_PRIOR_WEIGHT + Σ w_p),
   w_p = exp(-|log q - log p|² / (2 RESIDUAL_LENGTH²)) - exp(-4.5), cut at 0 (three widths). Far from data
   r -> 0; near a dense measured line r -> the local residual.
4. Two-step interpolation across token counts (`cross_predict`) and the edges of a line or of the class's
   token range (`line_anchor`, `edge_anchor`), which compute_db.db extends with the roofline.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from itertools import product

import numpy as np

INTERPOLATED_BAND = 1.5
GROWTH_EXPONENT = 2.0
RESIDUAL_LENGTH = 0.35          # log-size kernel width per dimension (a factor 1.4; chosen by leave-one-model-out)
RESIDUAL_PRIOR_WEIGHT = 0.1     # weight of the bare roofline (r = 0) in the residual average
_CUTOFF = 3.0                   # kernel cut at 3 widths (weight 0.011)
_BRUTE_FORCE_MAX = 2000         # classes with at most this many (binned) points skip the cell index
_BIN = 0.25                     # residual points are pooled in bins of a quarter kernel width


def isotonic_increasing(y: np.ndarray) -> np.ndarray:
    """Least-squares non-decreasing fit to y (pool adjacent violators), same length."""
    vals: list[float] = []
    counts: list[int] = []
    for v in y.tolist():
        vals.append(v)
        counts.append(1)
        while len(vals) > 1 and vals[-2] > vals[-1]:
            c = counts[-2] + counts[-1]
            vals[-2] = (vals[-2] * counts[-2] + vals[-1] * counts[-1]) / c
            counts[-2] = c
            vals.pop()
            counts.pop()
    return np.repeat(np.asarray(vals), counts)


class ClassIndex:
    """Data band of measured kernels of one class: points {dims: time_s}."""

    def __init__(self, points: dict[tuple[int, ...], float]):
        self.points = points
        n = len(next(iter(points))) if points else 0
        self._log_p = np.log(np.asarray(list(points), dtype=float)).reshape(len(points), n)
        self._log_t = np.log(np.asarray(list(points.values()), dtype=float))
        self._log_pt = np.ascontiguousarray(self._log_p.T)     # D x N: one row per dimension

    def bounds(self, dims: tuple[int, ...]) -> tuple[float, float]:
        """(L, U) in seconds: L = 0 / U = inf when no measured kernel bounds q from that side."""
        if not self.points:
            return 0.0, math.inf
        d = np.log(np.asarray(dims, dtype=float)) - self._log_p    # log(q_i / p_i)
        lo = self._log_t + GROWTH_EXPONENT * np.minimum(d, 0.0).sum(axis=1)
        hi = self._log_t + GROWTH_EXPONENT * np.maximum(d, 0.0).sum(axis=1)
        return float(np.exp(lo.max())), float(np.exp(hi.min()))

    def bounds_many(self, dims: np.ndarray, chunk: int = 256) -> tuple[np.ndarray, np.ndarray]:
        """bounds() of many shapes (n x D float array) -> (L, U) arrays."""
        n = len(dims)
        if not self.points:
            return np.zeros(n), np.full(n, math.inf)
        lq = np.log(np.asarray(dims, dtype=float))
        lo, hi = np.empty(n), np.empty(n)
        for s in range(0, n, chunk):
            # Σ_i min(d_i, 0) and Σ_i max(d_i, 0), d_i = log(q_i / p_i), summed over the dimensions in order
            below = above = None
            for i in range(lq.shape[1]):
                d = lq[s:s + chunk, i, None] - self._log_pt[i]
                below = np.minimum(d, 0.0) if below is None else below + np.minimum(d, 0.0)
                above = np.maximum(d, 0.0) if above is None else above + np.maximum(d, 0.0)
            lo[s:s + chunk] = (self._log_t + GROWTH_EXPONENT * below).max(axis=1)
            hi[s:s + chunk] = (self._log_t + GROWTH_EXPONENT * above).min(axis=1)
        return np.exp(lo), np.exp(hi)


class ClassPoints:
    """Measured kernels of one class on one GPU: integer dims (N x D) and times (s), one entry per shape.

    `token_axis` (the swept, token-like dimension) is smoothed first: along every token line the log times
    are replaced by their isotonic (non-decreasing) fit. Interpolated answers use these smoothed values;
    exact hits of a key are answered from the raw rows by the caller.
    """

    def __init__(self, dims: np.ndarray, times_s: np.ndarray, token_axis: int = 0):
        self.dims = np.asarray(dims, dtype=np.int64).reshape(len(times_s), -1)
        self.times_s = np.asarray(times_s, dtype=float)
        self.token_axis = token_axis
        self.index: dict[tuple[int, ...], int] = dict(zip(map(tuple, self.dims.tolist()), range(len(times_s))))
        self._smoothed_all: np.ndarray | None = None
        self._lines: dict[int, dict[tuple, tuple[np.ndarray, np.ndarray]]] = {}
        self._smoothed: dict[tuple, np.ndarray] = {}
        self._token_values: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.times_s)

    def _groups(self, axis: int) -> tuple[np.ndarray, list[tuple[int, int]], np.ndarray]:
        """(order sorting by (other dims, axis value), [(start, end)] of each line, other dims sorted)."""
        d = self.dims
        other = np.delete(d, axis, axis=1)
        order = np.lexsort((d[:, axis],) + tuple(other[:, j] for j in range(other.shape[1] - 1, -1, -1)))
        so = other[order]
        cut = np.flatnonzero(np.any(so[1:] != so[:-1], axis=1)) + 1 if len(order) > 1 else np.array([], int)
        starts = np.concatenate(([0], cut)).tolist()
        ends = np.concatenate((cut, [len(order)])).tolist()
        return order, list(zip(starts, ends)), so

    def smoothed(self) -> np.ndarray:
        """Log times, isotonic along every token line (computed once)."""
        if self._smoothed_all is None:
            log_t = np.log(self.times_s)
            out = log_t.copy()
            order, spans, _ = self._groups(self.token_axis)
            for s, e in spans:
                if e - s >= 2:
                    idx = order[s:e]
                    out[idx] = isotonic_increasing(log_t[idx])
            self._smoothed_all = out
        return self._smoothed_all

    def value(self, q: tuple[int, ...]) -> float | None:
        """Smoothed time (s) of a measured shape of this class, or None."""
        i = self.index.get(q)
        return None if i is None else math.exp(self.smoothed()[i])

    def _axis_lines(self, axis: int) -> dict[tuple, tuple[np.ndarray, np.ndarray]]:
        lines = self._lines.get(axis)
        if lines is not None:
            return lines
        order, spans, so = self._groups(axis)
        vals, log_t = self.dims[order, axis], self.smoothed()[order]
        lines = {tuple(so[s].tolist()): (vals[s:e], log_t[s:e]) for s, e in spans if e - s >= 2}
        self._lines[axis] = lines
        return lines

    def _smooth(self, axis: int, other: tuple, log_t: np.ndarray) -> np.ndarray:
        if axis == self.token_axis:
            return log_t
        ck = (axis, other)
        out = self._smoothed.get(ck)
        if out is None:
            out = isotonic_increasing(log_t)
            self._smoothed[ck] = out
        return out

    def line_predict(self, q: tuple[int, ...], skip_axis: int | None = None) -> tuple[float, int, int, int] | None:
        """(time_s, axis, lower, upper) from the tightest bracketing line through q, or None."""
        best = None
        for axis in range(len(q)):
            if axis == skip_axis:
                continue
            other = q[:axis] + q[axis + 1:]
            line = self._axis_lines(axis).get(other)
            if line is None:
                continue
            vals, log_t = line
            x = q[axis]
            if not vals[0] < x < vals[-1]:
                continue
            j = int(np.searchsorted(vals, x))
            x0, x1 = int(vals[j - 1]), int(vals[j])
            span = math.log(x1 / x0)
            if best is not None and span >= best[0]:
                continue
            lt = self._smooth(axis, other, log_t)
            w = math.log(x / x0) / span
            best = (span, math.exp(lt[j - 1] + w * (lt[j] - lt[j - 1])), axis, x0, x1)
        return None if best is None else best[1:]

    def edge_anchor(self, q: tuple[int, ...]) -> tuple[float, int, int] | None:
        """(time_s, token axis, edge value) when q lies beyond the class's measured token values and the shape
        is resolved at the nearest edge value by a measured point or a bracketing line along another
        dimension; else None. Lets a sweep of an unmeasured shape leave the data continuously."""
        a, tv = self.token_axis, self._tokens()
        x = q[a]
        if tv.size == 0 or tv[0] <= x <= tv[-1]:
            return None
        xe = int(tv[0] if x < tv[0] else tv[-1])
        t = self._at_token(q, xe)
        return None if t is None else (t, a, xe)

    def _tokens(self) -> np.ndarray:
        """The class's measured token values, ascending (computed once)."""
        if self._token_values is None:
            self._token_values = np.unique(self.dims[:, self.token_axis])
        return self._token_values

    def _at_token(self, q: tuple[int, ...], xe: int) -> float | None:
        """Time (s) of shape q with its token value set to xe: measured, or from a bracketing line along another
        dimension; else None."""
        a = self.token_axis
        qe = q[:a] + (xe,) + q[a + 1:]
        t = self.value(qe)
        if t is None:
            got = self.line_predict(qe, skip_axis=a)
            t = None if got is None else got[0]
        return t

    def cross_predict(self, q: tuple[int, ...]) -> tuple[float, int, int, int] | None:
        """Two-step interpolation for a shape off the measured token values: at the neighbouring measured token
        values x0 < q_t < x1 the shape is resolved by a measured point or a bracketing line along another
        dimension, and the two answers are interpolated log-log along the token axis.
        Returns (time_s, token axis, x0, x1) or None."""
        a, tv = self.token_axis, self._tokens()
        x = q[a]
        if tv.size < 2 or not tv[0] < x < tv[-1]:
            return None
        j = int(np.searchsorted(tv, x))
        x0, x1 = int(tv[j - 1]), int(tv[j])
        ends = []
        for xe in (x0, x1):
            t = self._at_token(q, xe)
            if t is None:
                return None
            ends.append(t)
        w = math.log(x / x0) / math.log(x1 / x0)
        return math.exp(math.log(ends[0]) + w * math.log(ends[1] / ends[0])), a, x0, x1

    def line_anchor(self, q: tuple[int, ...], axes: Iterable[int] | None = None) -> tuple[float, int, int] | None:
        """(smoothed time_s, axis, end value) of the nearest end of a line through q (along one of `axes`,
        default all) that does not bracket q (q beyond its last or before its first measurement), or None.
        Used to extrapolate along the line with the roofline's ratio, continuous with the interpolation inside
        the line."""
        best = None
        for axis in (range(len(q)) if axes is None else axes):
            other = q[:axis] + q[axis + 1:]
            line = self._axis_lines(axis).get(other)
            if line is None:
                continue
            vals, log_t = line
            x = q[axis]
            if vals[0] < x < vals[-1]:
                continue
            j = 0 if x <= vals[0] else len(vals) - 1
            dist = abs(math.log(x / int(vals[j])))
            if best is None or dist < best[0]:
                best = (dist, math.exp(self._smooth(axis, other, log_t)[j]), axis, int(vals[j]))
        return None if best is None else best[1:]


class ResidualField:
    """Smoothed log residuals of measured kernels against a roofline (module docstring, item 3)."""

    def __init__(self, dims: np.ndarray, residuals: np.ndarray):
        log_p = np.log(np.asarray(dims, dtype=float))
        n, d = log_p.shape
        self._scale = np.full(d, 1.0 / RESIDUAL_LENGTH)
        p = log_p * self._scale            # positions in units of kernel widths
        r = np.asarray(residuals, dtype=float)
        # dense sweeps (a Vidur line has a point every 8-64 tokens) are pooled into bins of _BIN widths:
        # mean position and residual, weighted by the point count; same field to within the bin size
        binned = np.floor(p / _BIN).astype(np.int64)
        uniq, inverse, counts = np.unique(binned, axis=0, return_inverse=True, return_counts=True)
        inverse = inverse.ravel()
        if len(uniq) < n:
            self.p = np.stack([np.bincount(inverse, p[:, j]) / counts for j in range(d)], axis=1)
            self.r = np.bincount(inverse, r) / counts
            self.count = counts.astype(float)
        else:
            self.p, self.r, self.count = p, r, np.ones(n)
        n = len(self.r)
        self.prior_weight = RESIDUAL_PRIOR_WEIGHT
        self._cells: dict[tuple, np.ndarray] | None = None
        if n > _BRUTE_FORCE_MAX and d <= 4:
            cell = np.floor(self.p / _CUTOFF).astype(np.int64)
            uniq, inverse = np.unique(cell, axis=0, return_inverse=True)
            order = np.argsort(inverse.ravel(), kind="stable")
            bounds = np.searchsorted(inverse.ravel()[order], np.arange(len(uniq) + 1))
            self._cells = {tuple(u): order[bounds[i]:bounds[i + 1]] for i, u in enumerate(uniq.tolist())}
            self._offsets = list(product((-1, 0, 1), repeat=d))

    def __call__(self, dims: tuple[int, ...]) -> float:
        if self.r.size == 0:
            return 0.0
        q = np.log(np.asarray(dims, dtype=float)) * self._scale
        if self._cells is None:
            p, r, c = self.p, self.r, self.count
        else:
            cell = np.floor(q / _CUTOFF).astype(np.int64).tolist()
            idx = [self._cells.get(tuple(a + b for a, b in zip(cell, off))) for off in self._offsets]
            idx = [i for i in idx if i is not None]
            if not idx:
                return 0.0
            sel = np.concatenate(idx)
            p, r, c = self.p[sel], self.r[sel], self.count[sel]
        d2 = ((p - q) ** 2).sum(axis=1)
        # Gaussian cut to zero at _CUTOFF widths: continuous, and the cell index finds every point it weighs
        w = c * np.maximum(np.exp(-0.5 * d2) - math.exp(-0.5 * _CUTOFF ** 2), 0.0)
        return float(w @ r / (self.prior_weight + w.sum()))

    def line(self, dims: tuple[int, ...] | np.ndarray, axis: int) -> LineField:
        """The field along one line: the shapes equal to `dims` except along `axis` (e.g. one GEMM at every
        token count). The points within reach of the line are picked once."""
        q = np.log(np.asarray(dims, dtype=float)) * self._scale
        fixed = np.arange(q.size) != axis
        near = np.all(np.abs(self.p[:, fixed] - q[fixed]) <= _CUTOFF, axis=1)
        return LineField(self.p[near], self.r[near], self.count[near], self._scale)


class LineField:
    """The residual field's points within reach of one line (ResidualField.line)."""

    def __init__(self, p: np.ndarray, r: np.ndarray, count: np.ndarray, scale: np.ndarray):
        self.r, self.count, self._scale = r, count, scale
        self._pt = np.ascontiguousarray(p.T)      # D x P: one row per dimension
        # the field r(q) = Σ w r / (prior + Σ w) is a shrunk weighted mean: it never exceeds this along the line
        self.r_max = max(0.0, float(r.max())) if r.size else 0.0
        self.r_abs = float(np.abs(r).max()) if r.size else 0.0

    def sums(self, dims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(Σ w_p r_p, Σ w_p) at shapes of the line (n x D float array); the field is
        sum_wr / (RESIDUAL_PRIOR_WEIGHT + sum_w)."""
        n = len(dims)
        num, den = np.zeros(n), np.zeros(n)
        if self.r.size == 0:
            return num, den
        q = np.log(np.asarray(dims, dtype=float)) * self._scale
        r, c = self.r, self.count
        for s in range(0, n, 256):
            w = c * np.maximum(np.exp(-0.5 * _sq_dist(q[s:s + 256], self._pt)) - math.exp(-0.5 * _CUTOFF ** 2), 0.0)
            num[s:s + 256] = w @ r
            den[s:s + 256] = w.sum(axis=1)
        return num, den


def _sq_dist(q: np.ndarray, pt: np.ndarray) -> np.ndarray:
    """Squared distances (n x P) of query rows q (n x D) to points given by columns pt (D x P), summed over the
    dimensions in order (the same numbers as ((q - p)²).sum(axis) without its n x P x D temporary)."""
    out = (q[:, 0, None] - pt[0]) ** 2
    for i in range(1, q.shape[1]):
        out += (q[:, i, None] - pt[i]) ** 2
    return out
