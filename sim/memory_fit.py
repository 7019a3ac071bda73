"""Does a simulated plan fit in GPU memory? Peak per-GPU memory (sim.analysis.memory) vs the GPU's HBM.

The peak is the pipeline stage with the largest reserved (caching-allocator) memory; the plan fits when
reserved + the CUDA context (outside the allocator) <= the GPU's HBM capacity, the same rule as
`clustersim memory`. Imported SimAI workloads carry kernel times but no model dimensions, so their
memory is unknown (all fields None, `note` says why).
"""

from __future__ import annotations

GiB = 1024 ** 3
SIMAI_NOTE = "n/a: imported SimAI workload has no model dimensions"


def memory_fit(workload, gpu_spec) -> dict:
    """Summary of the per-GPU memory peak of `workload` on `gpu_spec` (compute_db GPUSpec), bytes."""
    out = {"fits": None, "peak_reserved_bytes": None, "peak_allocated_bytes": None, "cuda_context_bytes": None,
           "peak_stage": None, "peak_path": None, "gpu": gpu_spec.name, "gpu_hbm_bytes": gpu_spec.hbm_bytes,
           "source": None, "note": ""}
    if workload.meta.get("imported_from") == "simai" or workload.meta.get("model_known") is False:
        out["note"] = SIMAI_NOTE if workload.meta.get("imported_from") == "simai" else \
            "n/a: imported trace has no model dimensions"
        return out
    from sim.analysis.memory import analyze_memory
    rep = analyze_memory(workload.model, workload.plan, workload)
    peak = rep.peak
    out.update(peak_reserved_bytes=peak.reserved_bytes, peak_allocated_bytes=peak.peak_allocated_bytes,
               cuda_context_bytes=rep.cuda_context_bytes, peak_stage=peak.stage, peak_path=str(peak.peak_path),
               source=rep.source,
               fits=peak.reserved_bytes + rep.cuda_context_bytes <= gpu_spec.hbm_bytes)
    return out


def format_memory(mem: dict | None) -> str:
    """One summary line: peak reserved / allocated per GPU, CUDA context, capacity, verdict, peak path."""
    if not mem:
        return f"{'memory per GPU':<28s}{'n/a':>14s}"
    if mem.get("fits") is None:
        why = (mem.get("note") or "unknown").removeprefix("n/a: ")
        return f"{'memory per GPU':<28s}{'n/a':>14s}     ({why})"
    verdict = "fits" if mem["fits"] else "DOES NOT FIT"
    return (f"{'memory per GPU (peak)':<28s}{mem['peak_reserved_bytes'] / GiB:14.2f} GiB reserved, "
            f"{mem['peak_allocated_bytes'] / GiB:.2f} GiB allocated, +{mem['cuda_context_bytes'] / GiB:.2f} GiB "
            f"CUDA context; {mem['gpu']} has {mem['gpu_hbm_bytes'] / GiB:.2f} GiB -> {verdict}\n"
            f"{'  peak at':<28s}{mem['peak_path']}")


def memory_warning(mem: dict | None) -> str | None:
    """The stderr warning for a plan that does not fit (None when it fits or is unknown)."""
    if not mem or mem.get("fits") is not False:
        return None
    need = (mem["peak_reserved_bytes"] + mem["cuda_context_bytes"]) / GiB
    return (f"warning: the plan does not fit in GPU memory: peak {need:.2f} GiB per GPU "
            f"({mem['peak_reserved_bytes'] / GiB:.2f} GiB reserved + {mem['cuda_context_bytes'] / GiB:.2f} GiB "
            f"CUDA context) > {mem['gpu_hbm_bytes'] / GiB:.2f} GiB on {mem['gpu']}, at {mem['peak_path']}")
