"""Results directory of a serving run, written atomically (temp dir renamed into place, sim.report).

Files:
  request_metrics.csv   one row per request: `Request Id`, Vidur's columns, then ours (sim.serve.metrics)
  replica_metrics.csv   one row per replica (busy % per stage, KV use, MFU/MBU, preemptions)
  batch_metrics.csv     one row per batch (only with batches=True: a million-iteration run makes ~60 MB)
  summary.json          `metrics.summarize` (+ "inputs": what the caller passes as `extra`)
  summary.txt           the printed table
  chrome_trace.json     Chrome trace events (Perfetto loads it): pid = replica, tid = pipeline stage, one
                        "X" slice per batch and stage with args batch id, size, request ids and tokens per
                        request; only the first `trace_cap` slices of the run are kept (otherData says so)
  cdf_ttft.png, cdf_tbt.png, cdf_e2e.png   empirical CDFs;  kv_usage.png   KV blocks in use over time
  report.html           self-contained page: headline percentiles, latency CDFs, replica/request tables
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from sim.report import atomic_dir
from sim.serve.engine import ServeResult
from sim.serve.metrics import (
    SLO,
    batch_frame,
    format_summary,
    np_view,
    replica_frame,
    request_frame,
    summarize,
    weighted_percentiles,
)

SERVE_FILES = ("request_metrics.csv", "replica_metrics.csv", "batch_metrics.csv", "summary.json", "summary.txt",
               "chrome_trace.json", "cdf_ttft.png", "cdf_tbt.png", "cdf_e2e.png", "kv_usage.png", "report.html")


def chrome_trace(res: ServeResult) -> dict:
    """Trace-event JSON of the kept batch-stage slices (times in µs; ends rounded to the ns, not durations,
    so back-to-back slices of a stage never overlap by a rounding error)."""
    events = []
    stages = res.plan.pp
    for st in res.replicas:
        events.append({"ph": "M", "pid": st.replica, "name": "process_name", "args": {"name": f"replica {st.replica}"}})
        events.append({"ph": "M", "pid": st.replica, "name": "process_sort_index", "args": {"sort_index": st.replica}})
        for s in range(stages):
            events.append({"ph": "M", "pid": st.replica, "tid": s, "name": "thread_name",
                           "args": {"name": f"stage {s}"}})
    for rep, s, start, dur, bid, pids, chunks, dids in res.trace:
        ts_ns = round(start * 1e9)
        end_ns = max(round((start + dur) * 1e9), ts_ns)
        kind = "mixed" if pids and dids else ("prefill" if pids else "decode")
        events.append({"ph": "X", "pid": rep, "tid": s, "name": f"batch {bid}", "cat": kind,
                       "ts": ts_ns / 1000, "dur": (end_ns - ts_ns) / 1000,
                       "args": {"batch_id": bid, "size": len(pids) + len(dids), "request_ids": pids + dids,
                                "tokens": chunks + [1] * len(dids), "num_tokens": sum(chunks) + len(dids)}})
    kept = len(res.trace)
    return {"traceEvents": events, "displayTimeUnit": "ms",
            "otherData": {"generator": "clustersim serve", "slices_kept": kept, "slices_total": res.trace_total,
                          "slice_cap": res.trace_cap,
                          "note": (f"only the first {kept} of {res.trace_total} batch-stage slices are kept "
                                   f"(cap {res.trace_cap})" if kept < res.trace_total
                                   else "all batch-stage slices are included")}}


def _ecdf_plot(path: Path, values: np.ndarray, counts: np.ndarray | None, xlabel: str, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    v = np.asarray(values, dtype=np.float64)
    c = np.ones(len(v)) if counts is None else np.asarray(counts, dtype=np.float64)
    keep = np.isfinite(v)
    v, c = v[keep], c[keep]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    if len(v):
        marks = weighted_percentiles(v, c.astype(np.int64), (50, 99))
        order = np.argsort(v, kind="stable")
        v, cum = v[order], np.cumsum(c[order])
        y = cum / cum[-1]
        if len(v) > 20000:                     # the curve needs no more points than pixels
            pick = np.unique(np.searchsorted(y, np.linspace(0, 1, 4001)).clip(0, len(v) - 1))
            v, y = v[pick], y[pick]
        ax.step(v, y, where="post", color="#4c72b0")
        med = v[min(np.searchsorted(y, 0.5), len(v) - 1)]
        if v[0] > 0 and med > 0 and v[-1] > 50 * med:    # heavy tail (preemptions, queueing): log scale
            ax.set_xscale("log")
            xlabel += "  [log scale]"
        for q, x, ls in zip((50, 99), marks, (":", "--")):     # the summary's percentiles
            ax.axvline(x, color="#888888", ls=ls, lw=0.8, label=f"P{q} {x:.4g}")
        ax.legend(fontsize=8, frameon=False, loc="lower right")
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_xlabel(xlabel)
    ax.set_ylabel("fraction")
    ax.set_ylim(0, 1.01)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _kv_plot(path: Path, res: ServeResult) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    T = res.duration_s if res.duration_s > 0 else 1.0
    grid = np.linspace(0.0, T, 2000)
    fig, ax = plt.subplots(figsize=(9, 4.0))
    shown = res.replicas[:16]
    for st in shown:
        t, u = np_view(st.kv_t_s), np_view(st.kv_used_blocks)
        y = 100.0 * u[np.searchsorted(t, grid, side="right") - 1] / st.num_blocks
        ax.step(grid, y, where="post", lw=0.8, label=f"replica {st.replica}")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("KV blocks in use (%)")
    ax.set_ylim(0, 101)
    more = f" (first 16 of {len(res.replicas)} replicas)" if len(res.replicas) > 16 else ""
    ax.set_title("KV-cache use over time" + more)
    if len(shown) <= 8:
        ax.legend(fontsize=8, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if hasattr(x, "item"):
        return x.item()
    return str(x)


def _clean(x):
    """NaN/inf -> None recursively (JSON has no NaN)."""
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def write_results(res: ServeResult, out_dir: str | Path, peak_flops_per_s: float | None = None,
                  hbm_Bps: float | None = None, slo: SLO | None = None, charts: bool = True, trace: bool = True,
                  batches: bool = False, extra: dict | None = None, title: str = "",
                  summary: dict | None = None, more=None, more_files: tuple[str, ...] = ()) -> Path:
    """Write the results directory (see the module doc); returns its path. An existing directory is
    replaced only if it holds nothing but files of this list (+ `more_files`; sim.report.check_out_dir).
    more(tmp_dir): called last inside the same atomic write (extra files, or files it rewrites)."""
    df = request_frame(res)
    s = summary if summary is not None else summarize(res, peak_flops_per_s, hbm_Bps, slo, df=df)

    def write(tmp: Path) -> None:
        df.to_csv(tmp / "request_metrics.csv", index=False, float_format="%.9g")
        replica_frame(res, peak_flops_per_s, hbm_Bps).to_csv(tmp / "replica_metrics.csv", index=False,
                                                              float_format="%.9g")
        if batches:
            batch_frame(res).to_csv(tmp / "batch_metrics.csv", index=False, float_format="%.9g")
        data = dict(s)
        if extra:
            data["inputs"] = extra
        (tmp / "summary.json").write_text(json.dumps(_clean(data), indent=1, default=_json_default) + "\n")
        (tmp / "summary.txt").write_text(format_summary(s, title) + "\n")
        if trace:
            (tmp / "chrome_trace.json").write_text(json.dumps(chrome_trace(res), separators=(",", ":")))
        if charts:
            _ecdf_plot(tmp / "cdf_ttft.png", df["ttft"].to_numpy(), None, "TTFT (s)", "Time to first token")
            _ecdf_plot(tmp / "cdf_tbt.png", np_view(res.gaps.values), np_view(res.gaps.counts), "TBT (s)",
                       "Time between tokens (all gaps)")
            _ecdf_plot(tmp / "cdf_e2e.png", df["request_e2e_time"].to_numpy(), None, "E2E latency (s)",
                       "End-to-end request latency")
            _kv_plot(tmp / "kv_usage.png", res)
        from sim.html.serve_report import serve_html
        (tmp / "report.html").write_text(serve_html(res, _clean(data), df, title), encoding="utf-8")
        if more is not None:
            more(tmp)

    return atomic_dir(out_dir, write, owned=SERVE_FILES + tuple(more_files))
