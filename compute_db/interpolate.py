"""Interpolation across measured shapes in log space, blended smoothly into the calibrated roofline.

Measured kernels of one class (kind, dtype class, variant class) are grouped into "lines": kernels that
agree in every shape dimension but one, the line dimension (the dimension with the longest runs of
measurements, e.g. the token count m of a GEMM). Along a line, times are made non-decreasing (running
maximum from the small end: measurement noise must not make a bigger kernel faster) and log(time) is
interpolated linearly in log(dimension); beyond a line's ends its measured/model ratio at the end point is
carried on (anchored roofline).

Off the lines the answer is the roofline times a correction exp(r): r blends the log residuals
log(line / roofline) of the lines within RADIUS_OCTAVES (Euclidean distance in log2 of the other
dimensions), with Shepard weights phi(d)/d^2, phi(d) = (1 - d/RADIUS)^2, scaled by the largest phi.
So the answer equals the line interpolation on a line, fades continuously into the plain roofline one
radius away from every line, and has no cliffs. Monotonicity: exact along a line and for the plain
roofline; in the blend zone it holds as long as neighbouring residuals vary slowly (property-tested).
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

RADIUS_OCTAVES = 1.0


@dataclass
class Line:
    xs: list[int]          # sorted distinct values of the line dimension
    log_t: list[float]     # non-decreasing log times

    def at(self, x: int) -> tuple[float, int | None]:
        """(log time, None) inside the line's range, else (log time at the nearest end, that end's x)."""
        i = bisect.bisect_left(self.xs, x)
        if i < len(self.xs) and self.xs[i] == x:
            return self.log_t[i], None
        if i == 0:
            return self.log_t[0], self.xs[0]
        if i == len(self.xs):
            return self.log_t[-1], self.xs[-1]
        x_lo, x_hi = self.xs[i - 1], self.xs[i]
        w = math.log(x / x_lo) / math.log(x_hi / x_lo)
        return self.log_t[i - 1] + w * (self.log_t[i] - self.log_t[i - 1]), None


class ClassIndex:
    """Measured kernels of one class: points {dims: time_s}; lines along every dimension."""

    def __init__(self, points: dict[tuple[int, ...], float], radius_octaves: float = RADIUS_OCTAVES):
        self.radius = radius_octaves
        self.points = points
        n = len(next(iter(points))) if points else 0
        self.n = n
        # per line dimension d: (rest tuples, log2 rest array, lines)
        self.by_dim: list[tuple[list[tuple[int, ...]], np.ndarray, list[Line]]] = []
        for d in range(n):
            buckets: dict[tuple[int, ...], dict[int, float]] = defaultdict(dict)
            for dims, t in points.items():
                buckets[dims[:d] + dims[d + 1:]][dims[d]] = t
            rests, lines = [], []
            for rest, xt in buckets.items():
                if len(xt) < 2 and n > 1:
                    continue   # a single point is a line along each of its dims; keep it on dim 0 only
                xs = sorted(xt)
                logs, run = [], -math.inf
                for x in xs:
                    run = max(run, math.log(xt[x]))
                    logs.append(run)
                rests.append(rest)
                lines.append(Line(xs, logs))
            arr = np.log2(np.asarray(rests, dtype=float)).reshape(len(rests), max(n - 1, 0)) if rests else \
                np.zeros((0, max(n - 1, 0)))
            self.by_dim.append((rests, arr, lines))
        if n > 1:  # isolated points (on no line of >= 2 points) become one-point lines along dim 0
            on_line = {(r[:d] + (x,) + r[d:]) for d, (rs, _, ls) in enumerate(self.by_dim)
                       for r, ln in zip(rs, ls) for x in ln.xs}
            lone = [dims for dims in points if dims not in on_line]
            if lone:
                rests, arr, lines = self.by_dim[0]
                rests = rests + [dims[1:] for dims in lone]
                lines = lines + [Line([dims[0]], [math.log(points[dims])]) for dims in lone]
                arr = np.log2(np.asarray(rests, dtype=float)).reshape(len(rests), n - 1)
                self.by_dim[0] = (rests, arr, lines)

    def predict(self, dims: tuple[int, ...], model: Callable[[tuple[int, ...]], float]
                ) -> tuple[float, str, int] | None:
        """(time_s, "interpolated" | "modeled", lines used) or None when no line is within the radius."""
        exact_in, exact_out, near = [], [], []
        for d, (rests, arr, lines) in enumerate(self.by_dim):
            if not lines:
                continue
            rest = dims[:d] + dims[d + 1:]
            if self.n > 1:
                dist = np.sqrt(((arr - np.log2(np.asarray(rest, dtype=float))) ** 2).sum(axis=1))
            else:
                dist = np.zeros(len(lines))
            for i in np.nonzero(dist < self.radius)[0]:
                log_t, end = lines[i].at(dims[d])
                proj = rests[i][:d] + ((dims[d] if end is None else end),) + rests[i][d:]
                item = (float(dist[i]), d, log_t, end, proj)
                if dist[i] == 0.0:
                    (exact_in if end is None else exact_out).append(item)
                else:
                    near.append(item)
        if exact_in:
            return math.exp(sum(it[2] for it in exact_in) / len(exact_in)), "interpolated", len(exact_in)
        if not (exact_out or near):
            return None
        t_model = model(dims)
        if exact_out:  # on a line, beyond its measured range: anchored roofline
            r = sum(it[2] - math.log(model(it[4])) for it in exact_out) / len(exact_out)
            return t_model * math.exp(r), "modeled", len(exact_out)
        num = den = phi_max = 0.0
        for dist, _, log_t, _, proj in near:
            phi = (1.0 - dist / self.radius) ** 2
            w = phi / dist ** 2
            num += w * (log_t - math.log(model(proj)))
            den += w
            phi_max = max(phi_max, phi)
        return t_model * math.exp(phi_max * num / den), "modeled", len(near)
