"""FlowRecord: one completed flow of a flow engine (statistics: flow completion times)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class FlowRecord:
    """Completed flow: for statistics (flow completion times)."""
    flow_id: int
    nbytes: float
    added_s: float
    start_s: float      # when it began to transfer (after its latency)
    end_s: float
