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

RADIUS_OCTAVES = 0.25


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
    """Measured kernels of one class: points {dims: time_s}; `model(dims) -> s` is the class roofline."""

    def __init__(self, points: dict[tuple[int, ...], float], radius_octaves: float = RADIUS_OCTAVES):
        self.radius = radius_octaves
        self.points = points
        n = len(next(iter(points))) if points else 0
        self.n = n
        self.line_dim = 0
        self.lines: dict[tuple[int, ...], Line] = {}
        self._rest_keys: list[tuple[int, ...]] = []
        self._rest_log2 = np.zeros((0, max(n - 1, 1)))
        if not points:
            return
        best = None
        for d in range(n):
            rests = {dims[:d] + dims[d + 1:] for dims in points}
            score = len(points) / len(rests)   # mean line length along d
            if best is None or score > best:
                best, self.line_dim = score, d
        d = self.line_dim
        buckets: dict[tuple[int, ...], dict[int, float]] = defaultdict(dict)
        for dims, t in points.items():
            buckets[dims[:d] + dims[d + 1:]][dims[d]] = t
        for rest, xt in buckets.items():
            xs = sorted(xt)
            logs, run = [], -math.inf
            for x in xs:
                run = max(run, math.log(xt[x]))
                logs.append(run)
            self.lines[rest] = Line(xs, logs)
        self._rest_keys = list(self.lines)
        if n > 1:
            self._rest_log2 = np.log2(np.asarray(self._rest_keys, dtype=float))

    def _with_rest(self, rest: tuple[int, ...], x: int) -> tuple[int, ...]:
        d = self.line_dim
        return rest[:d] + (x,) + rest[d:]

    def predict(self, dims: tuple[int, ...], model: Callable[[tuple[int, ...]], float]
                ) -> tuple[float, str, int] | None:
        """(time_s, "interpolated" | "modeled", lines used) or None when no line is within the radius."""
        if not self.lines:
            return None
        d = self.line_dim
        x = dims[d]
        rest = dims[:d] + dims[d + 1:]
        if self.n > 1:
            q = np.log2(np.asarray(rest, dtype=float))
            dist = np.sqrt(((self._rest_log2 - q) ** 2).sum(axis=1))
            near = np.nonzero(dist < self.radius)[0]
        else:
            dist = np.zeros(1)
            near = np.zeros(1, dtype=int)
        if near.size == 0:
            return None
        exact = [i for i in near if dist[i] == 0.0]
        if exact:
            line = self.lines[self._rest_keys[exact[0]]]
            log_t, end = line.at(x)
            if end is None:
                return math.exp(log_t), "interpolated", 1
            ratio = math.exp(log_t) / model(self._with_rest(rest, end))
            return model(dims) * ratio, "modeled", 1
        num = den = 0.0
        phi_max = 0.0
        for i in near:
            line_rest = self._rest_keys[i]
            log_t, end = self.lines[line_rest].at(x)
            r = log_t - math.log(model(self._with_rest(line_rest, x if end is None else end)))
            phi = (1.0 - dist[i] / self.radius) ** 2
            w = phi / dist[i] ** 2
            num += w * r
            den += w
            phi_max = max(phi_max, phi)
        return model(dims) * math.exp(phi_max * num / den), "modeled", int(near.size)
