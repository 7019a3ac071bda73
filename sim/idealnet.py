"""A contention-free network backend with a caller-given duration per collective.

Used for what-if runs (e.g. zero-cost communication) and for tests of the executor. Implements the
netsim.api.NetworkBackend protocol; deterministic (completions ordered by time, then submission).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable

from netsim.api import CollectiveRequest


class IdealNetwork:
    """Each collective takes `duration_s(req)` seconds, independent of any other traffic."""

    def __init__(self, duration_s: Callable[[CollectiveRequest], float] | None = None) -> None:
        self.duration_s = duration_s or (lambda req: 0.0)
        self._events: list = []
        self._seq = 0
        self.submitted: list[tuple[float, CollectiveRequest]] = []

    def submit(self, req: CollectiveRequest, now_s: float, on_done: Callable[[float], None]) -> None:
        self._seq += 1
        self.submitted.append((now_s, req))
        heapq.heappush(self._events, (now_s + float(self.duration_s(req)), self._seq, on_done))

    def next_event_time(self) -> float:
        return self._events[0][0] if self._events else math.inf

    def advance(self, until_s: float) -> None:
        while self._events and self._events[0][0] <= until_s:
            t, _, cb = heapq.heappop(self._events)
            cb(t)

    def estimate(self, req: CollectiveRequest) -> float:
        return float(self.duration_s(req))
