"""Benchmark: parallel-strategy search for Llama-3-70B on 1,024 H100, global batch 1,024 x 8K tokens.

Target (issue 7): >= 1,000 candidate plans evaluated in < 60 s, a feasible best plan, and every reported
plan passing workload_gen's validate_plan. The default space (TP 1-8, PP, VPP, CP, SP on/off, micro-batch
1/2/4, recompute none/selective/full(all, half), optimizer none/distributed) is screened with the
analytical estimate (no flow confirmation: that is a separate, per-plan cost).
Run: python benchmarks/bench_search.py            (serial, then 2 local worker processes)
     OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 mpiexec --oversubscribe -n 2 \
         python benchmarks/bench_search.py mpi      (candidates split over MPI ranks)
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import run_cases  # noqa: E402


def _run(workers: int) -> str:
    from sim.analysis.search import plan_label, search
    from workload_gen.plan_validation import validate_plan
    from workload_gen.zoo import get_model

    model = get_model("llama3-70b")
    res = search(model, 1024, 1024, gpu="H100", seq_length=8192, gmi_error_GiB=6, confirm=False,
                 workers=workers)
    for c in res.ranked:
        validate_plan(model, c.plan)          # raises if any reported plan is invalid
    best = res.best
    ok = res.evaluated >= 1000 and res.elapsed_s < 60 and best is not None
    return (f"evaluated {res.evaluated} in {res.elapsed_s:.1f} s ({res.evaluated / res.elapsed_s:.0f}/s); "
            f"{len(res.ranked)} feasible, all valid; best {plan_label(best.plan)} "
            f"{best.iteration_time_s:.3f} s MFU {best.mfu_6nd_with_attn:.1%} "
            f"peak {best.peak_mem_with_reserved_bytes / 2**30:.1f} GiB -> {'PASS' if ok else 'FAIL'}")


def serial() -> str:
    return _run(1)


def two_workers() -> str:
    return _run(2)


if __name__ == "__main__":
    if sys.argv[1:] == ["mpi"]:
        # under mpiexec every rank runs the search; rank 0 reports
        out = _run(1)
        if os.environ.get("OMPI_COMM_WORLD_RANK", "0") == "0":
            print(f"search llama3-70b x1024 H100 (mpi x{os.environ.get('OMPI_COMM_WORLD_SIZE', '1')})  {out}")
    else:
        run_cases({"search llama3-70b x1024 H100 (serial)": serial,
                   "search llama3-70b x1024 H100 (2 processes)": two_workers})
