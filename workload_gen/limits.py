"""Upper bounds on workload sizes, checked before anything is allocated (docs/workload_gen.md, "Limits").

A world size, layer count, PP degree or micro-batch count of 10^7..10^9 (a typo, a fuzzed file) would
otherwise grow lists and schedules until the machine runs out of memory. The bounds sit far above
every published training job (the largest clusters hold ~10^5 GPUs, the deepest models ~10^2 layers);
setting the environment variable CLUSTERSIM_ALLOW_HUGE=1 lifts them for deliberately huge studies.
Dimension bounds (hidden size, sequence, vocabulary...) keep FLOP counts far from float overflow.
"""

from __future__ import annotations

import os

ALLOW_HUGE_ENV = "CLUSTERSIM_ALLOW_HUGE"

MAX_WORLD_SIZE = 131_072          # GPUs in one job (2^17)
MAX_LAYERS = 1_024                # transformer layers
MAX_PP = 1_024                    # pipeline stages (also <= layers)
MAX_MICROBATCHES = 16_384         # micro-batches per iteration per DP rank (gbs / (mbs * dp))
MAX_DIM = 16_777_216              # hidden/FFN/vocab/sequence/heads/batch-size-like integers (2^24)
MAX_OPS = 5_000_000               # ops in one native workload document
MAX_TRACE_REQUESTS = 2_000_000    # rows of a request trace CSV (serving)


def allow_huge() -> bool:
    """True when CLUSTERSIM_ALLOW_HUGE is set to anything but '', '0', 'false', 'no'."""
    return os.environ.get(ALLOW_HUGE_ENV, "").strip().lower() not in ("", "0", "false", "no")


def check_max(what: str, value, bound: int, exc: type[Exception]) -> None:
    """Raise `exc` (one line naming `what`) when an int `value` exceeds `bound` and huge runs are not allowed."""
    if isinstance(value, int) and not isinstance(value, bool) and value > bound and not allow_huge():
        raise exc(f"{what}: {show_int(value)} exceeds the limit of {bound:,} "
                  f"(set {ALLOW_HUGE_ENV}=1 to run it anyway)")


def show_int(value: int) -> str:
    """An int for an error message; a number of hundreds of digits is shown by its size only."""
    return str(value) if value.bit_length() <= 128 else f"a {len(format(value, 'x')) * 4}-bit number"
