"""Outputs of `clustersim serve-search` (sim.serve.search), written atomically into one directory:

  results.csv   one row per searched deployment, best QPS per dollar first (RESULT_COLUMNS): capacity,
                cost, binding SLO, the SLO metrics at capacity, and `command`, the `clustersim serve` line
                that reruns that deployment at its capacity (the probe itself: same requests and seed)
  pruned.csv    one row per configuration pruned before simulation, with its reason
  pareto.png    QPS per dollar vs a latency at capacity, Pareto front marked
  summary.json  inputs, SLOs, counts, pruning reasons, probes made and reused, prices with their source
  summary.txt   the printed table
  report.html   self-contained page: ranked deployments and the Pareto plot (sim.html.serve_report)
"""

from __future__ import annotations

import csv
import io
import json
import math
import shlex
from collections import Counter
from dataclasses import asdict, fields
from pathlib import Path

from sim.serve.capacity import METRICS
from sim.serve.plan import ServingPlan
from sim.serve.search import ConfigResult, Pruned, SearchOutcome, ServeSearchSpace
from sim.serve.search_probes import Deployment, ProbeSetup

SEARCH_FILES = ("results.csv", "pruned.csv", "pareto.png", "summary.json", "summary.txt", "report.html")
METRIC_COLUMNS = tuple(f"{s}_{m}_s" for m in METRICS for s in ("p50", "p90", "p99"))
RESULT_COLUMNS = ("rank", "deployment", "kind", "gpu", "num_gpus", "replicas", "prefill_replicas",
                  "decode_replicas", "tp", "pp", "scheduler",
                  "chunk_size", "batch_cap", "capacity_qps", "capacity_bounded", "upper_qps", "qps_per_dollar",
                  "cost_per_hour", "usd_per_gpu_hour", "binding_slo", "binding_value_s", *METRIC_COLUMNS,
                  "requests_per_s", "output_tokens_per_s", "busy_pct", "kv_use_mean_pct", "preemptions",
                  "probes", "new_probes", "first_guess_qps", "note", "command")
PRUNED_COLUMNS = ("deployment", "kind", "gpu", "num_gpus", "replicas", "tp", "pp", "scheduler", "chunk_size",
                  "batch_cap", "reason_kind", "reason")
_PLAN_DEFAULTS = {f.name: f.default for f in fields(ServingPlan)}

def serve_command(setup: ProbeSetup, dep: Deployment, qps: float) -> str:
    """The `clustersim serve` line that simulates `dep` at `qps` with the search's requests and cost model."""
    from workload_gen.requests import RequestConfig
    a = ["clustersim", "serve", "-m", setup.model_arg, "--gpu", dep.gpu]
    if setup.topology:
        a += ["--topology", setup.topology]
    p = dep.plan
    a += ["--tp", str(p.tp), "--pp", str(p.pp)]
    if dep.disagg is None:
        a += ["--replicas", str(p.replicas)]
    else:
        a += ["--disaggregate", "--prefill-replicas", str(dep.disagg.prefill.replicas), "--decode-replicas",
              str(dep.disagg.decode.replicas), "--kv-transfer", dep.disagg.kv_transfer]
    a += ["--scheduler", p.scheduler]
    if p.scheduler == "sarathi":
        a += ["--chunk-size", str(p.chunk_size)]
    a += ["--batch-cap", str(p.max_batch_size)]
    from sim.serve.cli import _PLAN_FLAGS
    done = {"tp", "pp", "replicas", "scheduler", "chunk_size", "max_batch_size"}
    for dest, flags, _, _ in _PLAN_FLAGS:
        v = getattr(p, dest)
        if dest not in done and v != _PLAN_DEFAULTS[dest]:
            a += [flags[0], str(v)]
    r, d = setup.requests, RequestConfig()
    req_flags = (("num_requests", "--requests"), ("duration_s", "--duration"), ("arrival", "--arrival"),
                 ("cv", "--cv"), ("lengths", "--lengths"), ("prefill_tokens", "--prefill-tokens"),
                 ("decode_tokens", "--decode-tokens"), ("min_tokens", "--min-tokens"), ("max_tokens", "--max-tokens"),
                 ("pd_ratio", "--pd-ratio"), ("trace", "--trace"), ("prefill_scale", "--prefill-scale"),
                 ("decode_scale", "--decode-scale"))
    for name, flag in req_flags:
        v = getattr(r, name)
        if v is not None and (v != getattr(d, name) or name == "num_requests"):
            a += [flag, f"{v:g}" if isinstance(v, float) else str(v)]
    a += ["--qps", f"{qps:.6g}", "--seed", str(r.seed)]
    if setup.network != "analytical":
        a += ["--network", setup.network]
    if setup.host != "launch-gaps":
        a += ["--host", setup.host]
    if setup.cpu_per_iteration_s:
        a += ["--cpu-per-iteration-ms", f"{setup.cpu_per_iteration_s * 1e3:g}"]
    for name, flag in (("db", "--db"), ("gpu_file", "--gpu-file"), ("net_calibration", "--net-calibration")):
        if getattr(setup, name):
            a += [flag, getattr(setup, name)]
    return shlex.join(a)


def _fmt(v, digits: int = 6) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return ""
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


def result_row(rank: int, r: ConfigResult, setup: ProbeSetup) -> dict:
    d, p, c = r.deployment, r.deployment.plan, r.capacity
    m = c.metrics if c is not None else {}
    row = {"rank": rank, "deployment": d.label, "kind": d.kind, "gpu": d.gpu, "num_gpus": d.num_gpus,
           "replicas": p.replicas, "prefill_replicas": d.disagg.prefill.replicas if d.disagg else "",
           "decode_replicas": d.disagg.decode.replicas if d.disagg else "", "tp": p.tp, "pp": p.pp, "scheduler": p.scheduler,
           "chunk_size": p.chunk_size if p.scheduler == "sarathi" else "", "batch_cap": p.max_batch_size,
           "capacity_qps": _fmt(r.capacity_qps), "capacity_bounded": "" if c is None else c.bounded,
           "upper_qps": _fmt(c.upper_qps) if c is not None else "", "qps_per_dollar": _fmt(r.qps_per_dollar),
           "cost_per_hour": _fmt(r.cost_per_hour), "usd_per_gpu_hour": _fmt(r.usd_per_gpu_hour),
           "binding_slo": (c.binding_slo or "") if c is not None else "",
           "binding_value_s": _fmt(c.binding_value) if c is not None else ""}
    for col in METRIC_COLUMNS:
        stat, name = col[:-2].split("_", 1)
        row[col] = _fmt(m.get(f"{stat}:{name}"))
    for k in ("requests_per_s", "output_tokens_per_s", "busy_pct", "kv_use_mean_pct", "preemptions"):
        row[k] = _fmt(m.get(k))
    row["probes"] = r.new_probes + r.reused_probes
    row["new_probes"] = r.new_probes
    row["first_guess_qps"] = _fmt(c.first_guess_qps) if c is not None else ""
    row["note"] = r.error or (c.note if c is not None else "")
    row["command"] = serve_command(setup, d, c.capacity_qps) if c is not None and c.capacity_qps > 0 else ""
    return row


def pruned_row(p: Pruned) -> dict:
    d, pl = p.deployment, p.deployment.plan
    return {"deployment": d.label, "kind": d.kind, "gpu": d.gpu, "num_gpus": d.num_gpus, "replicas": pl.replicas,
            "tp": pl.tp, "pp": pl.pp, "scheduler": pl.scheduler,
            "chunk_size": pl.chunk_size if pl.scheduler == "sarathi" else "", "batch_cap": pl.max_batch_size,
            "reason_kind": p.kind, "reason": p.reason.split(":", 1)[1].strip()}


def _csv(rows: list[dict], columns) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def pareto_front(points: list[tuple[float, float, object]]) -> list:
    """Points (latency, qps_per_dollar, item) that no other point beats on both (lower latency, higher
    QPS per dollar); returned by increasing latency."""
    front, best = [], -math.inf
    for lat, q, item in sorted(points, key=lambda t: (t[0], -t[1])):
        if q > best:
            front.append((lat, q, item))
            best = q
    return front


def _pareto_points(outcome: SearchOutcome, latency_key: str):
    pts = []
    for r in outcome.ranked:
        c = r.capacity
        if c is None or c.capacity_qps <= 0:
            continue
        lat = c.metrics.get(latency_key)
        if lat is not None and math.isfinite(lat):
            pts.append((float(lat), r.qps_per_dollar, r))
    return pts


def write_pareto_png(outcome: SearchOutcome, path: Path, latency_key: str, title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    pts = _pareto_points(outcome, latency_key)
    front = pareto_front(pts)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    if pts:
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=14, alpha=0.45, color="tab:blue",
                   label=f"deployments at capacity ({len(pts)})")
        ax.plot([p[0] for p in front], [p[1] for p in front], "-o", color="tab:red", ms=5,
                label=f"Pareto front ({len(front)})")
        for lat, q, r in front[:8]:
            ax.annotate(r.deployment.label, (lat, q), fontsize=6, xytext=(4, 3), textcoords="offset points")
    else:
        ax.text(0.5, 0.5, "no deployment with a capacity > 0", ha="center", va="center", transform=ax.transAxes)
    stat, name = latency_key.split(":")
    ax.set_xlabel(f"{stat.upper()} {name.replace('_', ' ')} at capacity (s)")
    ax.set_ylabel("QPS per dollar (capacity req/s / $ per hour)")
    ax.set_title(title or "serving deployments: cost efficiency vs latency")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    ax.margins(x=0.2, y=0.1)          # room for the labels of the front's points
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)


def format_table(outcome: SearchOutcome, top: int = 10) -> str:
    lines = [f"{'#':>3s}  {'deployment':<44s}{'capacity':>12s}{'$/h':>9s}{'QPS/$':>10s}  binding SLO (+: lower bound)"]
    for i, r in enumerate(outcome.ranked[:top], 1):
        c = r.capacity
        if c is None:
            lines.append(f"{i:>3d}  {r.deployment.label:<44s}{'failed':>12s}  {r.error}")
            continue
        cap = f"{c.capacity_qps:.3f}" + ("" if c.bounded else "+")
        lines.append(f"{i:>3d}  {r.deployment.label:<44s}{cap:>12s}{r.cost_per_hour:9.2f}{r.qps_per_dollar:10.4f}  "
                     f"{c.binding_slo or 'none reached'}")
    more = len(outcome.ranked) - top
    if more > 0:
        lines.append(f"     ... {more} more in results.csv")
    return "\n".join(lines)


def summary_dict(outcome: SearchOutcome, setup: ProbeSetup, space: ServeSearchSpace, latency_key: str,
                 rows: list[dict]) -> dict:
    pruned_kinds = Counter(p.kind for p in outcome.pruned)
    ok = [r for r in outcome.ranked if r.capacity is not None]
    front = pareto_front(_pareto_points(outcome, latency_key))
    return {
        "command": "serve-search",
        "model": setup.model_arg,
        "capacity_definition": "highest Poisson arrival rate (req/s) at which every SLO holds, by bracketing "
                               "(doubling/halving from an analytical first guess) and bisection until "
                               "upper - lower <= tolerance x lower; capacity = lower",
        "slos": [s.text for s in outcome.slos],
        "tolerance": outcome.rel_tol,
        "ranking": "qps_per_dollar = capacity_qps / cost_per_hour; cost_per_hour = num_gpus x usd_per_gpu_hour",
        "space": {"gpus": list(space.gpus), "tp": list(space.tp), "pp": list(space.pp),
                  "replicas": list(space.replicas) if space.replicas else "budget // (tp x pp)",
                  "schedulers": list(space.schedulers), "chunk_sizes": list(space.chunk_sizes),
                  "batch_caps": list(space.batch_caps), "gpu_budget": space.gpu_budget,
                  "fixed_plan_fields": dict(space.plan_fields), "disagg": list(space.disagg),
                  "disagg_splits": [f"{a}:{b}" for a, b in space.disagg_splits] if space.disagg_splits else
                  ("every prefill:decode split of the replicas" if "yes" in space.disagg else None),
                  "kv_transfer": space.kv_transfer if "yes" in space.disagg else None},
        "requests": {k: v for k, v in asdict(setup.requests).items() if k != "qps"},
        "cost_model": {"topology": setup.topology or "spectrum-x (whole servers per deployment)",
                       "network": setup.network, "host": setup.host, "cpu_per_iteration_s": setup.cpu_per_iteration_s,
                       "db": setup.db, "gpu_file": setup.gpu_file, "net_calibration": setup.net_calibration},
        "counts": {"enumerated": outcome.enumerated, "not_repeated_knob_does_not_apply": outcome.deduplicated,
                   "pruned": len(outcome.pruned), "searched": len(outcome.ranked),
                   "meeting_slos": sum(1 for r in ok if r.capacity.capacity_qps > 0),
                   "capacity_zero": sum(1 for r in ok if r.capacity.capacity_qps == 0),
                   "unbounded": sum(1 for r in ok if not r.capacity.bounded),
                   "failed": len(outcome.ranked) - len(ok)},
        "pruned_by_reason": dict(pruned_kinds.most_common()),
        "probes": {"new": outcome.new_probes, "reused_from_cache": outcome.reused_probes,
                   "cache": outcome.cache_dir},
        "prices": {g: asdict(p) for g, p in outcome.prices.items()},
        "price_file": outcome.price_file,
        "best": rows[0] if rows else None,
        "pareto_latency": latency_key,
        "pareto_front": [r.deployment.label for _, _, r in front],
        "parallel": outcome.mode,
        "elapsed_s": outcome.elapsed_s,
        "notes": outcome.notes,
    }


def write_outputs(outcome: SearchOutcome, setup: ProbeSetup, space: ServeSearchSpace, out: str | Path,
                  latency_key: str = "p90:ttft", title: str = "") -> Path:
    """results.csv, pruned.csv, pareto.png, summary.json, summary.txt into `out` (atomically)."""
    from sim.report import atomic_dir
    rows = [result_row(i, r, setup) for i, r in enumerate(outcome.ranked, 1)]
    prows = [pruned_row(p) for p in outcome.pruned]
    summary = summary_dict(outcome, setup, space, latency_key, rows)
    table = format_table(outcome)

    def write(tmp: Path) -> None:
        (tmp / "results.csv").write_text(_csv(rows, RESULT_COLUMNS))
        (tmp / "pruned.csv").write_text(_csv(prows, PRUNED_COLUMNS))
        (tmp / "summary.json").write_text(json.dumps(summary, indent=1, default=str) + "\n")
        (tmp / "summary.txt").write_text(table + "\n")
        write_pareto_png(outcome, tmp / "pareto.png", latency_key, title)
        from sim.html.serve_report import serve_search_html
        (tmp / "report.html").write_text(serve_search_html(outcome, rows, summary, latency_key, title),
                                         encoding="utf-8")
    return atomic_dir(out, write, SEARCH_FILES)
