"""Interpolation across measured shapes in log space, along lines of measured kernels.

A "line" is a set of measured kernels of one class (kind, dtype class, variant class) that agree in all
shape dimensions but one. A query that lies on a line (its other dimensions equal) between two measured
points gets log(time) linearly interpolated in log(dimension) between them. Times along a line are first
made non-decreasing (running maximum from the small end; measurement noise must not make a bigger kernel
faster), so interpolation is monotone along that dimension and continuous at measured points. Beyond the
ends of a line the roofline is anchored to the end point (model × measured/model ratio there): continuous
and monotone, reported as "modeled".
"""

from __future__ import annotations

import bisect
import math
from collections import defaultdict
from dataclasses import dataclass


@dataclass
class Line:
    xs: list[int]          # sorted distinct values of the free dimension
    log_t: list[float]     # non-decreasing log times


class LineIndex:
    """Lines of one kernel class; points are (dims tuple, time_s)."""

    def __init__(self, points: dict[tuple[int, ...], float]):
        self.points = points
        self.lines: dict[tuple[int, tuple], Line] = {}
        if not points:
            return
        n = len(next(iter(points)))
        buckets: dict[tuple[int, tuple], dict[int, float]] = defaultdict(dict)
        for dims, t in points.items():
            for d in range(n):
                rest = dims[:d] + dims[d + 1:]
                buckets[(d, rest)][dims[d]] = t
        for bkey, xt in buckets.items():
            if len(xt) < 2:
                continue
            xs = sorted(xt)
            logs = []
            run = -math.inf
            for x in xs:
                run = max(run, math.log(xt[x]))
                logs.append(run)
            self.lines[bkey] = Line(xs, logs)

    def interpolate(self, dims: tuple[int, ...]) -> tuple[float, float] | None:
        """(time_s, bracket width in log2 units) of the tightest line bracketing `dims`, else None."""
        best = None
        for d in range(len(dims)):
            line = self.lines.get((d, dims[:d] + dims[d + 1:]))
            if line is None:
                continue
            x = dims[d]
            i = bisect.bisect_left(line.xs, x)
            if i == 0 or i == len(line.xs):
                if i < len(line.xs) and line.xs[i] == x:
                    return math.exp(line.log_t[i]), 0.0
                continue
            if line.xs[i] == x:
                return math.exp(line.log_t[i]), 0.0
            x_lo, x_hi = line.xs[i - 1], line.xs[i]
            width = math.log2(x_hi / x_lo)
            if best is not None and best[1] <= width:
                continue
            w = math.log(x / x_lo) / math.log(x_hi / x_lo)
            lt = line.log_t[i - 1] + w * (line.log_t[i] - line.log_t[i - 1])
            best = (math.exp(lt), width)
        return best

    def anchor(self, dims: tuple[int, ...]) -> tuple[tuple[int, ...], float] | None:
        """Nearest line end (dims, monotone time) when `dims` lies on a line but beyond its range."""
        best = None
        for d in range(len(dims)):
            line = self.lines.get((d, dims[:d] + dims[d + 1:]))
            if line is None:
                continue
            x = dims[d]
            j = 0 if x < line.xs[0] else len(line.xs) - 1
            dist = abs(math.log(x / line.xs[j]))
            if best is None or dist < best[0]:
                end = dims[:d] + (line.xs[j],) + dims[d + 1:]
                best = (dist, end, math.exp(line.log_t[j]))
        return None if best is None else (best[1], best[2])
