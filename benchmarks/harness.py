"""Benchmark harness: run each case in a fresh subprocess, print wall time and peak RSS.

Usage from a benchmark script:
    from harness import run_cases
    run_cases({"name": "python.module:function", ...})   # or callables defined in the script
A case is a zero-argument function defined at module level of a script guarded by
`if __name__ == "__main__"`. Each case runs in a fresh interpreter (multiprocessing "spawn"), so its
peak RSS is that of a whole process doing only this job (interpreter and imports included); wall time
covers the call of the case function (imports excluded). Output: one line per case,
`name  wall_s  peak_rss_MB  [extra]`.
"""

from __future__ import annotations

import multiprocessing as mp
import resource
import sys
import time
from collections.abc import Callable


def _child(fn: Callable[[], object], conn) -> None:
    t0 = time.perf_counter()
    extra = fn()
    wall_s = time.perf_counter() - t0
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB
    conn.send((wall_s, rss_mb, "" if extra is None else str(extra)))
    conn.close()


def run_case(name: str, fn: Callable[[], object]) -> tuple[float, float, str]:
    ctx = mp.get_context("spawn")
    parent, child = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(fn, child))
    proc.start()
    child.close()
    wall_s, rss_mb, extra = parent.recv()
    proc.join()
    print(f"{name:<48s} wall {wall_s:9.3f} s   peak RSS {rss_mb:9.1f} MB   {extra}", flush=True)
    return wall_s, rss_mb, extra


def run_cases(cases: dict[str, Callable[[], object]]) -> None:
    selected = sys.argv[1:]
    for name, fn in cases.items():
        if selected and not any(s in name for s in selected):
            continue
        run_case(name, fn)
