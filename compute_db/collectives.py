"""Measured collective curves: time over message size per (GPU, collective, num_workers, devices_per_node).

A curve answers a collective on a group of GPUs when the group has the curve's setting: the same number
of GPUs, spread `devices_per_node` per server (all in one server when the two are equal). Between two
measured sizes the time is interpolated log-log (exact at the measured sizes); outside the measured size
range, or for a group of another setting, there is no answer (the caller falls back to netsim): a
curve says nothing about latency floors below its smallest size or bandwidth beyond its largest.
Several sources for one point: the highest layer of the DB that has the point wins (a user file over
the shipped DB), inside it the median of the sources' medians.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from compute_db.store import CollectiveRow

COLLECTIVE_SOURCES = ("measured", "interpolated", "netsim")


@dataclass(frozen=True)
class CollectiveTime:
    time_s: float
    source: str          # "measured" (a measured size) | "interpolated" (between two measured sizes)
    basis: str


@dataclass(frozen=True)
class _Curve:
    sizes_bytes: np.ndarray       # strictly increasing
    times_s: np.ndarray
    sources: str


class CollectiveCurves:
    """The measured curves of one GPU; `layers`: collective rows per DB layer, highest precedence first."""

    def __init__(self, layers: Sequence[Iterable[CollectiveRow]]):
        points: dict[tuple, dict[int, tuple[float, str]]] = defaultdict(dict)
        for rows in reversed(list(layers)):        # lowest precedence first: higher layers overwrite
            per: dict[tuple, dict[int, dict[str, float]]] = defaultdict(lambda: defaultdict(dict))
            for r in rows:
                per[(r.collective, r.num_workers, r.devices_per_node)][r.size_bytes][r.source] = r.median_s
            for setting, by_size in per.items():
                for size, by_src in by_size.items():
                    points[setting][size] = (float(np.median(list(by_src.values()))), ", ".join(sorted(by_src)))
        self._curves: dict[tuple, _Curve] = {}
        for setting, by_size in points.items():
            sizes = sorted(by_size)
            self._curves[setting] = _Curve(np.array(sizes, dtype=np.int64),
                                           np.array([by_size[s][0] for s in sizes]),
                                           ", ".join(sorted({by_size[s][1] for s in sizes})))

    def __bool__(self) -> bool:
        return bool(self._curves)

    def settings(self) -> list[tuple[str, int, int]]:
        """(collective, num_workers, devices_per_node) of every curve, sorted."""
        return sorted(self._curves)

    def lookup(self, collective: str, num_workers: int, devices_per_node: int,
               size_bytes: float) -> CollectiveTime | None:
        """Time of `collective` of `size_bytes` on a group of this setting, or None (module docstring)."""
        curve = self._curves.get((collective, num_workers, devices_per_node))
        if curve is None or size_bytes <= 0:
            return None
        sizes, times = curve.sizes_bytes, curve.times_s
        if not sizes[0] <= size_bytes <= sizes[-1]:
            return None
        where = f"{collective} over {num_workers} GPUs ({devices_per_node} per server) from {curve.sources}"
        j = int(np.searchsorted(sizes, size_bytes))
        if sizes[j] == size_bytes:
            return CollectiveTime(float(times[j]), "measured", f"measured {where} at {int(size_bytes)} B")
        x0, x1, t0, t1 = float(sizes[j - 1]), float(sizes[j]), float(times[j - 1]), float(times[j])
        f = math.log(size_bytes / x0) / math.log(x1 / x0)
        t = math.exp(math.log(t0) + f * (math.log(t1) - math.log(t0)))
        return CollectiveTime(t, "interpolated", f"log-log between {int(x0)} and {int(x1)} B, {where}")


def group_setting(topology, gpus: Sequence[int]) -> tuple[int, int] | None:
    """(num_workers, devices_per_node) of a group on `topology`, None when its servers hold unequal shares."""
    per: dict[int, int] = defaultdict(int)
    for g in gpus:
        per[topology.server_of(int(g))] += 1
    counts = set(per.values())
    if len(counts) != 1:
        return None
    return len(gpus), counts.pop()


class MeasuredNetwork:
    """Measured curves bound to a topology: `time(collective, gpus, size)` for a group of GPU ids (memoised;
    None where no curve fits: the caller uses netsim)."""

    def __init__(self, curves: CollectiveCurves, topology):
        self.curves = curves
        self.topology = topology
        self._memo: dict[tuple, CollectiveTime | None] = {}

    def time(self, collective: str, gpus: Sequence[int], size_bytes: float) -> CollectiveTime | None:
        key = (collective, tuple(gpus), size_bytes)
        if key in self._memo:
            return self._memo[key]
        setting = group_setting(self.topology, gpus) if len(gpus) > 1 else None
        got = None if setting is None else self.curves.lookup(collective, setting[0], setting[1], size_bytes)
        self._memo[key] = got
        return got


def measured_network(db, gpu: str, topology) -> MeasuredNetwork | None:
    """The measured curves of `gpu` in `db` (a ComputeDB) bound to `topology`, or None when it has none."""
    curves_of = getattr(db, "collective_curves", None)
    if curves_of is None:
        return None
    curves = curves_of(gpu)
    return MeasuredNetwork(curves, topology) if curves else None
