"""The narrow interface between the system layer (sim) and a network backend (netsim).

A backend runs collectives on a topology and tells the caller when each completes. sim owns the
clock of compute; the backend owns the clock of the network. They meet through event times:

    net.submit(req, now_s, on_done)     # start a collective at now_s
    t = net.next_event_time()           # earliest pending network event (math.inf if idle)
    net.advance(t)                      # process network events up to t; fires on_done(t_done)

Backends: "flow" (FlowNetwork, contention-aware max-min flows) and "analytical" (alpha-beta, no
contention). Both accept the same requests; both are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol


@dataclass(frozen=True)
class CollectiveRequest:
    op: str                       # workload_gen COLLECTIVES name: all_reduce, all_gather, ..., send
    gpus: tuple[int, ...]         # topology GPU ids in group-rank order; send: (src, dst)
    size_bytes: int               # nccl-tests buffer size S (see workload_gen.workload)
    algorithm: str = "auto"       # "auto" | "ring" | "tree" | "nvls" | "rhd" | "direct" | "hierarchical" ...
    tag: str = ""                 # caller's label, carried into statistics (e.g. "dp:grad_bucket0")
    protocol: str = "auto"        # "auto" | "LL" | "LL128" | "Simple" (NCCL protocols; case-insensitive)


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw factor = bytes each rank sends (and receives) per byte of size S:
    all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n; others 1 (0 for one rank)."""
    if n <= 1:
        return 0.0
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op in ("all_gather", "reduce_scatter", "all_to_all"):
        return (n - 1) / n
    return 1.0


class NetworkBackend(Protocol):
    def submit(self, req: CollectiveRequest, now_s: float,
               on_done: Callable[[float], None]) -> None: ...

    def next_event_time(self) -> float: ...

    def advance(self, until_s: float) -> None: ...

    def estimate(self, req: CollectiveRequest) -> float:
        """Seconds for `req` alone on an idle network (no side effects)."""
        ...
