"""Workload-level provenance report: what fraction of kernel time is measured, interpolated, modeled, given."""

from __future__ import annotations

from collections.abc import Iterable

from compute_db.db import SOURCES, ComputeDB, KernelTime


def source_fractions(times: Iterable[KernelTime], counts: Iterable[float] | None = None) -> dict[str, float]:
    """{source: fraction of total kernel time} over KernelTimes (each weighted by its count, default 1).

    Every source in db.SOURCES is present (0.0 when unused); fractions sum to 1 (all 0.0 for no time).
    """
    totals = dict.fromkeys(SOURCES, 0.0)
    if counts is None:
        for kt in times:
            totals[kt.source] += kt.time_s
    else:
        for kt, c in zip(times, counts, strict=True):
            totals[kt.source] += kt.time_s * c
    whole = sum(totals.values())
    return {s: (v / whole if whole > 0 else 0.0) for s, v in totals.items()}


def workload_kernel_counts(workload) -> list[tuple[object, float]]:
    """(ComputeOp, executions per iteration on one rank of its stage) for every compute op of a Workload.

    Micro-batch ops with microbatch "all" run num_microbatches times; "first"/"last" once;
    iteration_start/iteration_end ops once. Summed over stages (each stage weighted equally).
    """
    nmb = max(1, int(getattr(workload, "num_microbatches", 1)))
    out: list[tuple[object, float]] = []
    for stage in workload.stages:
        for chunk in stage.chunks:
            for op in list(chunk.forward) + list(chunk.backward):
                if getattr(op, "is_comm", False):
                    continue
                out.append((op, float(nmb if op.microbatch == "all" else 1)))
        for op in list(stage.iteration_start) + list(stage.iteration_end):
            if not getattr(op, "is_comm", False):
                out.append((op, 1.0))
    return out


def workload_source_fractions(workload, db: ComputeDB, gpu: str) -> dict[str, float]:
    """source_fractions of one iteration of `workload` on `gpu`."""
    pairs = workload_kernel_counts(workload)
    times = db.lookup_many([op for op, _ in pairs], gpu)
    return source_fractions(times, [c for _, c in pairs])
