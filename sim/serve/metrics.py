"""Serving metrics: per-request (Vidur's request_metrics columns + ours), per-replica, per-batch, summary.

Per-request definitions (seconds; P prompt tokens, D output tokens; reference/serving.md §6-7). Times are
measured from t = 0; `first scheduled` = formation of the first batch that contains the request,
`first token` = end of the batch that processed its last prompt token, `completed` = end of the batch
that emitted its D-th token. A batch's time = its end - its formation (stage queueing and PP transfers
included); its model time = the sum of its stage times.
  request_e2e_time                       completed - arrived
  request_e2e_time_normalized            request_e2e_time / D
  request_execution_time                 sum over the request's batches of (batch end - batch formation)
  request_execution_time_normalized      request_execution_time / D
  request_model_execution_time           sum over the request's batches of the batch's stage times
  request_model_execution_time_normalized  request_model_execution_time / D
  request_preemption_time                (completed - first scheduled) - request_execution_time: time after
                                         it was first scheduled when it was in no batch (waiting between
                                         iterations, preempted, re-queued)
  request_scheduling_delay               first scheduled - arrived
  request_execution_plus_preemption_time completed - first scheduled
  request_execution_plus_preemption_time_normalized  that / D
  prefill_e2e_time                       first token - arrived (TTFT)
  prefill_time_execution_plus_preemption first token - first scheduled
  prefill_time_execution_plus_preemption_normalized  that / P
  decode_time_execution_plus_preemption_normalized   (completed - first token) / D
  request_num_tokens                     P + D;  request_num_prefill_tokens P;  request_num_decode_tokens D
  request_pd_ratio                       P / D
  request_num_restarts                   times the request was preempted and recomputed
  request_inter_arrival_delay            arrived - previous request's arrival (request 0: its arrival - 0)
Extra columns: arrived_at, first_scheduled_at, first_token_at, completed_at, replica, ttft
(= prefill_e2e_time), tpot = (E2E - TTFT) / (D - 1) (NaN when D = 1), max_tbt (largest gap between two
consecutive output tokens of the request; 0 when D = 1).
TBT percentiles are over all gaps of all requests (every token but each request's first has one).
Percentiles: linear interpolation between order statistics (numpy's default).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import numpy as np
import pandas as pd

from sim.serve.engine import ServeResult

VIDUR_COLUMNS = (
    "request_e2e_time", "request_e2e_time_normalized", "request_execution_time",
    "request_execution_time_normalized", "request_model_execution_time",
    "request_model_execution_time_normalized", "request_preemption_time", "request_scheduling_delay",
    "request_execution_plus_preemption_time", "request_execution_plus_preemption_time_normalized",
    "prefill_e2e_time", "prefill_time_execution_plus_preemption",
    "prefill_time_execution_plus_preemption_normalized", "decode_time_execution_plus_preemption_normalized",
    "request_num_tokens", "request_num_prefill_tokens", "request_num_decode_tokens", "request_pd_ratio",
    "request_num_restarts", "request_inter_arrival_delay",
)
EXTRA_COLUMNS = ("arrived_at", "first_scheduled_at", "first_token_at", "completed_at", "replica", "ttft", "tpot",
                 "max_tbt")
PERCENTILES = (50, 90, 99)

FORMULAS = {
    "ttft_s": "first output token time - arrival, per request",
    "tbt_s": "gap between consecutive output tokens of a request, over all gaps of all requests",
    "tpot_s": "(E2E - TTFT) / (output tokens - 1), per request with >= 2 output tokens",
    "e2e_s": "completion - arrival, per request",
    "e2e_normalized_s": "E2E / output tokens, per request",
    "scheduling_delay_s": "first scheduled (formation of its first batch) - arrival, per request",
    "preemption_time_s": "completion - first scheduled - time in batches, per request",
    "restarts": "preemptions (recompute restarts), per request",
    "requests_per_s": "completed requests / duration (t = 0 to the last completion)",
    "output_tokens_per_s": "sum of output tokens / duration",
    "prefill_tokens_per_s": "sum of prompt tokens / duration",
    "mean_requests_in_system": "integral over time of (arrived - completed requests) / duration, from the event loop",
    "goodput_requests_per_s": "requests meeting every given SLO / duration",
    "busy_pct": "sum of stage busy times / (stages x duration), per replica",
    "kv_use_mean_pct": "time-weighted mean over [0, duration] of KV blocks in use / num_blocks",
    "kv_use_peak_pct": "largest KV blocks in use / num_blocks",
    "mfu_pct": "sum over stages and batches of model FLOPs per GPU / (stages x duration x peak FLOP/s)",
    "mbu_pct": "sum over stages and batches of HBM bytes per GPU / (stages x duration x HBM bytes/s)",
    "mean_batch_size": "requests per batch, mean over batches",
    "mean_tokens_per_batch": "prompt-chunk tokens + decode tokens per batch, mean over batches",
}


@dataclass(frozen=True)
class SLO:
    """Service-level objectives for goodput (None: not applied). tbt_s applies to a request's largest
    gap between tokens, tpot_s to its mean time per output token."""
    ttft_s: float | None = None
    tbt_s: float | None = None
    tpot_s: float | None = None
    e2e_s: float | None = None

    def any(self) -> bool:
        return any(v is not None for v in asdict(self).values())


def np_view(a) -> np.ndarray:
    """A typed array.array as a numpy array without copying."""
    return np.frombuffer(a, dtype=np.dtype(a.typecode)) if len(a) else np.zeros(0, dtype=np.dtype(a.typecode))


def _col(reqs, name: str, dtype=np.float64) -> np.ndarray:
    return np.fromiter((getattr(r, name) for r in reqs), dtype=dtype, count=len(reqs))


def request_frame(res: ServeResult) -> pd.DataFrame:
    """One row per request (by id): `Request Id`, Vidur's columns in order, then EXTRA_COLUMNS."""
    reqs = res.requests
    arr = _col(reqs, "arrived_at_s")
    sched = _col(reqs, "first_scheduled_s")
    first = _col(reqs, "first_token_s")
    comp = _col(reqs, "completed_s")
    ex = _col(reqs, "exec_s")
    mex = _col(reqs, "model_exec_s")
    P = _col(reqs, "num_prefill", np.int64)
    D = _col(reqs, "num_decode", np.int64)
    e2e = comp - arr
    run = comp - sched
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(D > 1, (comp - first) / np.maximum(D - 1, 1), np.nan)
    cols = {
        "Request Id": _col(reqs, "id", np.int64),
        "request_e2e_time": e2e,
        "request_e2e_time_normalized": e2e / D,
        "request_execution_time": ex,
        "request_execution_time_normalized": ex / D,
        "request_model_execution_time": mex,
        "request_model_execution_time_normalized": mex / D,
        "request_preemption_time": np.maximum(run - ex, 0.0),
        "request_scheduling_delay": sched - arr,
        "request_execution_plus_preemption_time": run,
        "request_execution_plus_preemption_time_normalized": run / D,
        "prefill_e2e_time": first - arr,
        "prefill_time_execution_plus_preemption": first - sched,
        "prefill_time_execution_plus_preemption_normalized": (first - sched) / P,
        "decode_time_execution_plus_preemption_normalized": (comp - first) / D,
        "request_num_tokens": P + D,
        "request_num_prefill_tokens": P,
        "request_num_decode_tokens": D,
        "request_pd_ratio": P / D,
        "request_num_restarts": _col(reqs, "restarts", np.int64),
        "request_inter_arrival_delay": np.diff(arr, prepend=0.0),
        "arrived_at": arr,
        "first_scheduled_at": sched,
        "first_token_at": first,
        "completed_at": comp,
        "replica": _col(reqs, "replica", np.int64),
        "ttft": first - arr,
        "tpot": tpot,
        "max_tbt": _col(reqs, "max_gap_s"),
    }
    return pd.DataFrame(cols)


def batch_frame(res: ServeResult) -> pd.DataFrame:
    """One row per batch, in completion order."""
    b = res.batches
    df = pd.DataFrame({
        "batch_id": np_view(b.id), "replica": np_view(b.replica),
        "formed_at": np_view(b.formed_s), "start_at": np_view(b.start_s), "end_at": np_view(b.end_s),
        "num_requests": np_view(b.num_requests), "num_prefill_tokens": np_view(b.num_prefill_tokens),
        "num_decode_tokens": np_view(b.num_decodes), "model_time": np_view(b.model_time_s),
    }).astype({"batch_id": np.int64, "replica": np.int64, "num_requests": np.int64,
               "num_prefill_tokens": np.int64, "num_decode_tokens": np.int64})
    df["num_tokens"] = df["num_prefill_tokens"] + df["num_decode_tokens"]
    return df


def kv_use_mean_fraction(st, duration_s: float) -> float:
    """Time-weighted mean of blocks in use / num_blocks over [0, duration_s] (step function of samples)."""
    t = np_view(st.kv_t_s)
    u = np_view(st.kv_used_blocks).astype(np.float64)
    if duration_s <= 0:
        return 0.0
    dt = np.diff(np.append(np.minimum(t, duration_s), duration_s))
    return float(np.dot(u, dt) / (duration_s * st.num_blocks))


def replica_frame(res: ServeResult, peak_flops_per_s: float | None = None,
                  hbm_Bps: float | None = None) -> pd.DataFrame:
    """One row per replica: load, batch shape, busy % per stage, KV use, MFU / MBU (NaN without peaks)."""
    T = res.duration_s
    b = res.batches
    rep_col = np_view(b.replica)
    nreq = np_view(b.num_requests).astype(np.float64)
    ntok = np_view(b.num_prefill_tokens) + np_view(b.num_decodes).astype(np.float64)
    rows = []
    for st in res.replicas:
        mask = rep_col == st.replica
        S = st.num_stages
        row = {
            "replica": st.replica, "requests": st.num_requests, "batches": st.num_batches,
            "mean_batch_size": float(nreq[mask].mean()) if mask.any() else 0.0,
            "mean_tokens_per_batch": float(ntok[mask].mean()) if mask.any() else 0.0,
            "busy_pct": 100.0 * sum(st.busy_s) / (S * T) if T > 0 else 0.0,
        }
        for s in range(S):
            row[f"busy_pct_stage{s}"] = 100.0 * st.busy_s[s] / T if T > 0 else 0.0
        row["kv_use_mean_pct"] = 100.0 * kv_use_mean_fraction(st, T)
        row["kv_use_peak_pct"] = 100.0 * st.peak_used_blocks / st.num_blocks
        row["num_blocks"] = st.num_blocks
        row["preemptions"] = st.preemptions
        row["flops_per_gpu"] = sum(st.flops)
        row["hbm_bytes_per_gpu"] = sum(st.hbm_bytes)
        row["mfu_pct"] = (100.0 * sum(st.flops) / (S * T * peak_flops_per_s)
                          if peak_flops_per_s and T > 0 else math.nan)
        row["mbu_pct"] = 100.0 * sum(st.hbm_bytes) / (S * T * hbm_Bps) if hbm_Bps and T > 0 else math.nan
        rows.append(row)
    return pd.DataFrame(rows)


def weighted_percentiles(values, counts, qs=PERCENTILES) -> list[float]:
    """Percentiles of the multiset {values[i] repeated counts[i] times}, equal to numpy's default (linear)
    percentile of the expanded array, without expanding it."""
    v = np.asarray(values, dtype=np.float64)
    c = np.asarray(counts, dtype=np.int64)
    if len(v) == 0 or c.sum() == 0:
        return [math.nan] * len(qs)
    order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(c[order])
    n = int(cum[-1])
    out = []
    for q in qs:
        pos = q / 100.0 * (n - 1)
        lo = math.floor(pos)
        x_lo = v[np.searchsorted(cum, lo, side="right")]
        x_hi = v[np.searchsorted(cum, min(lo + 1, n - 1), side="right")]
        out.append(float(x_lo + (x_hi - x_lo) * (pos - lo)))
    return out


def _stats(x: np.ndarray, unit: str, formula: str) -> dict:
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None, "unit": unit,
                "formula": formula}
    p = np.percentile(x, PERCENTILES)
    return {"count": int(len(x)), "mean": float(x.mean()), "p50": float(p[0]), "p90": float(p[1]),
            "p99": float(p[2]), "max": float(x.max()), "unit": unit, "formula": formula}


def goodput_mask(df: pd.DataFrame, slo: SLO) -> np.ndarray:
    """Requests meeting every given SLO (TPOT of a one-token request counts as met)."""
    ok = np.ones(len(df), dtype=bool)
    if slo.ttft_s is not None:
        ok &= df["ttft"].to_numpy() <= slo.ttft_s
    if slo.tbt_s is not None:
        ok &= df["max_tbt"].to_numpy() <= slo.tbt_s
    if slo.tpot_s is not None:
        tp = df["tpot"].to_numpy()
        ok &= np.isnan(tp) | (tp <= slo.tpot_s)
    if slo.e2e_s is not None:
        ok &= df["request_e2e_time"].to_numpy() <= slo.e2e_s
    return ok


def _none_if_nan(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    return x


def summarize(res: ServeResult, peak_flops_per_s: float | None = None, hbm_Bps: float | None = None,
              slo: SLO | None = None, df: pd.DataFrame | None = None) -> dict:
    """JSON-able summary: request-metric distributions, throughput, goodput, per-replica and cluster stats;
    every metric carries a `formula` saying how it was obtained."""
    df = request_frame(res) if df is None else df
    T = res.duration_s
    gp = res.gaps
    gv, gc = np_view(gp.values), np_view(gp.counts)
    tbt = weighted_percentiles(gv, gc)
    ngaps = int(gc.sum())
    tbt_mean = float(np.dot(gv, gc.astype(np.float64)) / ngaps) if ngaps else None
    metrics = {
        "ttft_s": _stats(df["ttft"].to_numpy(), "s", FORMULAS["ttft_s"]),
        "tbt_s": {"count": ngaps, "mean": tbt_mean, "p50": _none_if_nan(tbt[0]), "p90": _none_if_nan(tbt[1]),
                  "p99": _none_if_nan(tbt[2]),
                  "max": float(gv.max()) if len(gv) else None, "unit": "s",
                  "formula": FORMULAS["tbt_s"]},
        "tpot_s": _stats(df["tpot"].to_numpy(), "s", FORMULAS["tpot_s"]),
        "e2e_s": _stats(df["request_e2e_time"].to_numpy(), "s", FORMULAS["e2e_s"]),
        "e2e_normalized_s": _stats(df["request_e2e_time_normalized"].to_numpy(), "s/token",
                                   FORMULAS["e2e_normalized_s"]),
        "scheduling_delay_s": _stats(df["request_scheduling_delay"].to_numpy(), "s", FORMULAS["scheduling_delay_s"]),
        "preemption_time_s": _stats(df["request_preemption_time"].to_numpy(), "s", FORMULAS["preemption_time_s"]),
        "restarts": _stats(df["request_num_restarts"].to_numpy(dtype=np.float64), "count", FORMULAS["restarts"]),
    }
    n = len(df)
    out_tokens = float(df["request_num_decode_tokens"].sum())
    in_tokens = float(df["request_num_prefill_tokens"].sum())

    def rate(x: float) -> float | None:
        return x / T if T > 0 else None

    throughput = {
        "requests_per_s": {"value": rate(n), "formula": FORMULAS["requests_per_s"]},
        "output_tokens_per_s": {"value": rate(out_tokens), "formula": FORMULAS["output_tokens_per_s"]},
        "prefill_tokens_per_s": {"value": rate(in_tokens), "formula": FORMULAS["prefill_tokens_per_s"]},
        "mean_requests_in_system": {"value": rate(res.in_system_s), "formula": FORMULAS["mean_requests_in_system"]},
    }
    goodput = None
    if slo is not None and slo.any():
        ok = goodput_mask(df, slo)
        goodput = {"slo": {k: v for k, v in asdict(slo).items() if v is not None},
                   "requests_meeting_slo": int(ok.sum()), "fraction": float(ok.mean()) if n else None,
                   "requests_per_s": rate(float(ok.sum())), "formula": FORMULAS["goodput_requests_per_s"]}
    rf = replica_frame(res, peak_flops_per_s, hbm_Bps)
    replicas = [{k: _none_if_nan(v.item() if hasattr(v, "item") else v) for k, v in row.items()}
                for row in rf.to_dict("records")]
    bf_n = len(res.batches)
    nreq = np_view(res.batches.num_requests).astype(np.float64)
    ntok = np_view(res.batches.num_prefill_tokens) + np_view(res.batches.num_decodes).astype(np.float64)
    cluster = {
        "busy_pct": _none_if_nan(float(rf["busy_pct"].mean())),
        "kv_use_mean_pct": _none_if_nan(float(rf["kv_use_mean_pct"].mean())),
        "mfu_pct": _none_if_nan(float(rf["mfu_pct"].mean())),
        "mbu_pct": _none_if_nan(float(rf["mbu_pct"].mean())),
        "preemptions": int(rf["preemptions"].sum()),
        "batches": bf_n,
        "mean_batch_size": float(nreq.mean()) if bf_n else None,
        "mean_tokens_per_batch": float(ntok.mean()) if bf_n else None,
        "formulas": {k: FORMULAS[k] for k in ("busy_pct", "kv_use_mean_pct", "kv_use_peak_pct", "mfu_pct",
                                               "mbu_pct", "mean_batch_size", "mean_tokens_per_batch")},
        "note": "cluster values are means over replicas; MFU/MBU need the GPU's peak FLOP/s and HBM bytes/s",
    }
    p = res.plan
    return {
        "requests": n, "duration_s": T, "source": res.source,
        "deployment": {"replicas": p.replicas, "tp": p.tp, "pp": p.pp, "scheduler": p.scheduler,
                       "router": p.router, "max_batch_size": p.max_batch_size, "block_size": p.block_size,
                       "num_blocks": [st.num_blocks for st in res.replicas], "max_model_len": res.max_model_len,
                       "seed": res.seed},
        "metrics": metrics, "throughput": throughput, "goodput": goodput, "cluster": cluster,
        "replicas": replicas,
        "peaks": {"flops_per_s": peak_flops_per_s, "hbm_Bps": hbm_Bps},
        "simulated_in_s": res.wall_s,
    }


def _fmt(x, scale: float = 1.0, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x * scale:.{digits}f}"


def format_summary(s: dict, title: str = "") -> str:
    """Human-readable table of a `summarize` dict."""
    d = s["deployment"]
    lines = [title] if title else []
    lines.append(f"{s['requests']} requests | {d['replicas']} replica(s) x tp {d['tp']} pp {d['pp']} | "
                 f"scheduler {d['scheduler']} | router {d['router']} | {s['duration_s']:.3f} s simulated")
    if s.get("source"):
        lines.append(f"requests: {s['source']}")
    lines.append(f"{'metric':<26s}{'mean':>11s}{'P50':>11s}{'P90':>11s}{'P99':>11s}")
    names = {"ttft_s": "TTFT (ms)", "tbt_s": "TBT (ms)", "tpot_s": "TPOT (ms)", "e2e_s": "E2E (s)",
             "e2e_normalized_s": "E2E / token (ms)", "scheduling_delay_s": "scheduling delay (s)",
             "preemption_time_s": "preemption time (s)"}
    scale = {"ttft_s": 1e3, "tbt_s": 1e3, "tpot_s": 1e3, "e2e_normalized_s": 1e3}
    for k, label in names.items():
        m = s["metrics"][k]
        f = scale.get(k, 1.0)
        lines.append(f"{label:<26s}" + "".join(f"{_fmt(m[q], f):>11s}" for q in ("mean", "p50", "p90", "p99")))
    t = s["throughput"]
    lines.append(f"{'throughput':<26s}{_fmt(t['requests_per_s']['value'])} req/s, "
                 f"{_fmt(t['output_tokens_per_s']['value'], digits=1)} output tokens/s, "
                 f"{_fmt(t['prefill_tokens_per_s']['value'], digits=1)} prompt tokens/s")
    if s.get("goodput"):
        g = s["goodput"]
        slo = ", ".join(f"{k} <= {v:g}" for k, v in g["slo"].items())
        lines.append(f"{'goodput':<26s}{_fmt(g['requests_per_s'])} req/s "
                     f"({100 * (g['fraction'] or 0):.1f}% of requests meet {slo})")
    c = s["cluster"]
    lines.append(f"{'batches':<26s}{c['batches']} (mean {_fmt(c['mean_batch_size'], digits=1)} requests, "
                 f"{_fmt(c['mean_tokens_per_batch'], digits=1)} tokens)")
    lines.append(f"{'busy / KV use (mean)':<26s}{_fmt(c['busy_pct'], digits=1)} % / {_fmt(c['kv_use_mean_pct'], digits=1)} %"
                 f"   preemptions {c['preemptions']}")
    mfu = "n/a" if c["mfu_pct"] is None else f"{c['mfu_pct']:.2f} %"
    mbu = "n/a" if c["mbu_pct"] is None else f"{c['mbu_pct']:.2f} %"
    lines.append(f"{'MFU / MBU (mean)':<26s}{mfu} / {mbu}   (model FLOPs or HBM bytes / (time x peak))")
    if len(s["replicas"]) > 1:
        lines.append(f"{'replica':<9s}{'requests':>9s}{'batches':>9s}{'busy %':>8s}{'KV %':>7s}{'preempt':>9s}")
        for r in s["replicas"][:32]:
            lines.append(f"{r['replica']:<9d}{r['requests']:>9d}{r['batches']:>9d}{r['busy_pct']:>8.1f}"
                         f"{r['kv_use_mean_pct']:>7.1f}{r['preemptions']:>9d}")
        if len(s["replicas"]) > 32:
            lines.append(f"... {len(s['replicas']) - 32} more replicas (replica_metrics.csv)")
    return "\n".join(lines)
