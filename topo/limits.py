"""Upper bounds on topology sizes, checked before allocation (docs/topo.md, "Limits").

A 26-byte SimAI file can declare 10^9 nodes; the reader would allocate per-node tables of that size
before noticing the file holds no such thing. The bounds sit far above any cluster built so far
(~10^5 GPUs, a few nodes and cables per GPU); CLUSTERSIM_ALLOW_HUGE=1 lifts them (the same
variable lifts workload_gen's bounds).
"""

from __future__ import annotations

import os

ALLOW_HUGE_ENV = "CLUSTERSIM_ALLOW_HUGE"

MAX_NODES = 1_048_576      # GPUs + NVSwitches + NICs + switches (2^20)
MAX_CABLES = 8_388_608     # bidirectional cables, i.e. 2x as many directed links (2^23)


def allow_huge() -> bool:
    """True when CLUSTERSIM_ALLOW_HUGE is set to anything but '', '0', 'false', 'no'."""
    return os.environ.get(ALLOW_HUGE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def over_limit(value: int, bound: int) -> bool:
    return value > bound and not allow_huge()
