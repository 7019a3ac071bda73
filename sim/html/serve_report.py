"""report.html of `clustersim serve` (one serving run) and `clustersim serve-search` (ranked deployments).

serve: headline latency percentiles and throughput (the summary's values), how they were obtained
(formulas, kernel/collective time provenance, KV-cache planner), latency CDFs (TTFT and E2E per request,
TBT over all token gaps, weighted), per-replica and per-request tables (capped, sortable).
serve-search: ranked deployments (results.csv's columns) and the Pareto plot of QPS per dollar against a
latency at capacity. Times in seconds unless a column says ms.
"""

from __future__ import annotations

import math

import numpy as np

from sim.html.page import Card, Col, cards, fmt, how_list, legend, number, page, section, table
from sim.html.svg import PALETTE, scatter_pareto, step_lines

REQUEST_CAP = 2000     # rows of the per-request table (request_metrics.csv has every request)
CURVE_POINTS = 600     # points per CDF curve
_REQ_COLS = (("Request Id", "request id", ".0f"), ("replica", "replica", ".0f"), ("arrived_at", "arrived (s)", ".6f"),
             ("request_num_prefill_tokens", "prompt tokens", ".0f"),
             ("request_num_decode_tokens", "output tokens", ".0f"), ("ttft", "TTFT (s)", ".6f"),
             ("tpot", "TPOT (s)", ".6f"), ("max_tbt", "max TBT (s)", ".6f"),
             ("request_e2e_time", "E2E (s)", ".6f"), ("request_scheduling_delay", "scheduling delay (s)", ".6f"),
             ("request_preemption_time", "preemption (s)", ".6f"), ("request_num_restarts", "restarts", ".0f"))
_METRIC_NAMES = {"ttft_s": "TTFT", "tbt_s": "TBT", "tpot_s": "TPOT", "e2e_s": "E2E",
                 "e2e_normalized_s": "E2E / output token", "scheduling_delay_s": "scheduling delay",
                 "preemption_time_s": "preemption time", "restarts": "restarts"}


def ecdf(values, counts=None, points: int = CURVE_POINTS) -> tuple[list[float], list[float]]:
    """Empirical CDF (x ascending, fraction <= x) of values (weighted by counts), at most `points` steps."""
    v = np.asarray(values, dtype=np.float64)
    c = np.ones(len(v)) if counts is None else np.asarray(counts, dtype=np.float64)
    keep = np.isfinite(v)
    v, c = v[keep], c[keep]
    if not len(v):
        return [], []
    order = np.argsort(v, kind="stable")
    v, cum = v[order], np.cumsum(c[order])
    y = cum / cum[-1]
    if len(v) > points:
        pick = np.unique(np.searchsorted(y, np.linspace(0.0, 1.0, points + 1)).clip(0, len(v) - 1))
        v, y = v[pick], y[pick]
    return v.tolist(), y.tolist()


def _cdf_svg(name: str, xs, ys, stats: dict | None, unit_label: str) -> str:
    marks = []
    if stats:
        marks = [(number(stats.get("p50")) or math.nan, "P50"), (number(stats.get("p99")) or math.nan, "P99")]
    med = stats.get("p50") if stats else None
    heavy = bool(xs) and xs[0] > 0 and med and xs[-1] > 50 * med
    return step_lines([(name, PALETTE[0], xs, ys)], f"{name} ({unit_label})", "fraction of " +
                      ("token gaps" if name == "TBT" else "requests"), f"{name} CDF", log_x=heavy, marks=marks)


def _metric_cards(s: dict) -> list[Card]:
    m = s.get("metrics", {})
    out = [Card("requests", s.get("requests"), f"{s.get('requests', 0):,}", s.get("source", ""), "requests")]
    for key, label in (("ttft_s", "TTFT"), ("tbt_s", "TBT"), ("e2e_s", "E2E")):
        st = m.get(key)
        if not st:
            continue
        for q in ("p50", "p99"):
            out.append(Card(f"{label} {q.upper()}", st.get(q), fmt(st.get(q), ".4g", " s"), st.get("formula", ""),
                            f"metrics.{key}.{q}"))
    thr = s.get("throughput", {})
    for key, label, unit in (("requests_per_s", "throughput", " req/s"), ("output_tokens_per_s", "output tokens/s", "")):
        d = thr.get(key)
        if d:
            out.append(Card(label, d.get("value"), fmt(d.get("value"), ",.2f", unit), d.get("formula", ""),
                            f"throughput.{key}.value"))
    g = s.get("goodput")
    if isinstance(g, dict):
        for k, v in g.items():
            if number(v) is not None and not isinstance(v, bool):
                out.append(Card(f"goodput {k}", v, fmt(v, ".4g"), "requests meeting every SLO", f"goodput.{k}"))
                break
    return out


def _how(s: dict) -> list[tuple[str, str]]:
    d = s.get("deployment", {})
    items = [("deployment", ", ".join(f"{k} {v}" for k, v in d.items()))] if d else []
    for key, what in (("kernel_time_sources", "kernel time provenance"),
                      ("collective_time_sources", "collective time provenance")):
        fr = (s.get(key) or {}).get("fractions")
        if fr:
            items.append((what, ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(fr.items()))))
    mem = s.get("memory")
    if isinstance(mem, dict):
        items.append(("KV cache / memory", ", ".join(f"{k} {v:.4g}" if isinstance(v, float) else f"{k} {v}"
                                                     for k, v in mem.items() if not isinstance(v, (dict, list)))))
    for k, v in (s.get("cost_model") or {}).items():
        if not isinstance(v, (dict, list)):
            items.append((f"cost model: {k}", str(v)))
    for k, d in (s.get("throughput") or {}).items():
        if isinstance(d, dict) and d.get("formula"):
            items.append((f"formula: {k}", d["formula"]))
    for k, v in ((s.get("cluster") or {}).get("formulas") or {}).items():
        items.append((f"formula: {k}", v))
    return items


def _metrics_table(s: dict) -> str:
    rows = []
    for key, st in (s.get("metrics") or {}).items():
        if isinstance(st, dict):
            rows.append([_METRIC_NAMES.get(key, key), st.get("count"), st.get("mean"), st.get("p50"), st.get("p90"),
                         st.get("p99"), st.get("max"), st.get("unit", ""), st.get("formula", "")])
    cols = [Col("metric", None), Col("count", ",.0f"), Col("mean", ".6g"), Col("P50", ".6g"), Col("P90", ".6g"),
            Col("P99", ".6g"), Col("max", ".6g"), Col("unit", None), Col("how", None)]
    return table(cols, rows, table_id="t-metrics")


def _request_table(df) -> str:
    present = [(c, h, f) for c, h, f in _REQ_COLS if c in df.columns]
    n = len(df)
    k = min(n, REQUEST_CAP)
    arrays = [df[c].to_numpy()[:k].tolist() for c, _, _ in present]
    rows = [list(r) for r in zip(*arrays)] if arrays else []
    tab = table([Col(h, f) for _, h, f in present], rows, table_id="t-requests")
    if k < n:
        tab = (f"<p class='note'>truncated: the first {k:,} of {n:,} requests (by id) are shown; "
               "request_metrics.csv has every request.</p>" + tab)
    return tab


def _replica_table(s: dict) -> str:
    reps = [r for r in (s.get("replicas") or []) if isinstance(r, dict)]
    if not reps:
        return "<p class='note'>no per-replica rows</p>"
    keys: list[str] = []
    for r in reps:
        keys += [k for k in r if k not in keys and not isinstance(r[k], (dict, list))]
    cols = [Col(k, None if all(isinstance(r.get(k), str) for r in reps) else ".6g") for k in keys]
    return table(cols, [[r.get(k) for k in keys] for r in reps], table_id="t-replicas", cap=1000, what="replicas")


def serve_html(res, s: dict, df, title: str = "") -> str:
    """res: sim.serve.engine.ServeResult; s: its summary dict (summary.json); df: the request frame
    (request_metrics.csv); title: the command's one-line description."""
    m = s.get("metrics") or {}
    charts = []
    if "ttft" in df.columns:
        xs, ys = ecdf(df["ttft"].to_numpy())
        charts.append(_cdf_svg("TTFT", xs, ys, m.get("ttft_s"), "s"))
    gaps = getattr(res, "gaps", None)
    if gaps is not None:
        from sim.serve.metrics import np_view
        xs, ys = ecdf(np_view(gaps.values), np_view(gaps.counts))
        charts.append(_cdf_svg("TBT", xs, ys, m.get("tbt_s"), "s"))
    if "request_e2e_time" in df.columns:
        xs, ys = ecdf(df["request_e2e_time"].to_numpy())
        charts.append(_cdf_svg("E2E", xs, ys, m.get("e2e_s"), "s"))
    grid = "<div style='display:grid;grid-template-columns:repeat(auto-fill,minmax(560px,1fr));gap:8px'>" + \
        "".join(f"<div>{c}</div>" for c in charts) + "</div>"
    cl = s.get("cluster") or {}
    cluster_cards = [Card(label, cl.get(k), fmt(cl.get(k), ".2f", " %"), "", f"cluster.{k}")
                     for k, label in (("busy_pct", "busy"), ("kv_use_mean_pct", "KV use (mean)"),
                                      ("mfu_pct", "MFU"), ("mbu_pct", "MBU")) if k in cl]
    sub = title or f"{s.get('requests')} requests, {fmt(s.get('duration_s'), '.3f', ' s')} simulated"
    parts = [section("Headline", cards(_metric_cards(s) + cluster_cards), "headline",
                     f"{s.get('duration_s', 0):.3f} s of simulated time; percentiles as numpy's linear "
                     "percentile (TBT weighted over all token gaps)."),
             section("Latency percentiles", _metrics_table(s), "metrics"),
             section("Latency CDFs", legend([("empirical CDF", PALETTE[0]), ("P50 / P99: dashed", "#888888")])
                     + grid, "cdf"),
             section("How each number was obtained", how_list(_how(s)), "provenance"),
             section("Replicas", _replica_table(s), "replicas"),
             section("Requests", _request_table(df), "requests",
                     "One row per request (request_metrics.csv holds every column); click a header to sort.")]
    return page("clustersim serve", sub, parts)


def serve_search_html(outcome, rows: list[dict], summary: dict, latency_key: str, title: str = "") -> str:
    """outcome: sim.serve.search.SearchOutcome; rows: results.csv rows; summary: summary.json dict."""
    from sim.serve.search_outputs import RESULT_COLUMNS, _pareto_points, pareto_front
    pts = _pareto_points(outcome, latency_key)
    front = pareto_front(pts)
    stat, name = latency_key.split(":")
    best = summary.get("best") or {}
    counts = summary.get("counts") or {}
    head = [Card("deployments searched", counts.get("searched"), f"{counts.get('searched', 0):,}",
                 f"{counts.get('pruned', 0)} pruned before simulation, {counts.get('meeting_slos', 0)} meet the SLOs",
                 "counts.searched")]
    if best:
        head.append(Card("best QPS per dollar", best.get("qps_per_dollar"), fmt(best.get("qps_per_dollar"), ".4g"),
                         f"{best.get('deployment')}: capacity {best.get('capacity_qps')} req/s at "
                         f"${best.get('cost_per_hour')}/h", "best.qps_per_dollar"))
    svg = scatter_pareto([(lat, q, f"{r.deployment.label}: {q:.4g} QPS/$, {lat:.4g} s") for lat, q, r in pts],
                         [(lat, q, r.deployment.label) for lat, q, r in front],
                         f"{stat.upper()} {name.replace('_', ' ')} at capacity (s)",
                         "QPS per dollar", "deployments: QPS per dollar vs latency")
    text = {"deployment", "kind", "gpu", "scheduler", "capacity_bounded", "binding_slo", "note", "command"}
    cols = [Col(c, None if c in text else ".6g") for c in RESULT_COLUMNS]
    tab = table(cols, [[r.get(c, "") for c in RESULT_COLUMNS] for r in rows], table_id="t-results", cap=1000,
                what="deployments")
    how = [("capacity", summary.get("capacity_definition", "")), ("ranking", summary.get("ranking", "")),
           ("SLOs", ", ".join(summary.get("slos") or []) or "none")]
    how += [("note", n) for n in summary.get("notes") or []]
    pr = summary.get("pruned_by_reason") or {}
    pruned = table([Col("reason", None), Col("deployments", ",.0f")], [[k, v] for k, v in pr.items()],
                   table_id="t-pruned") if pr else "<p class='note'>none pruned</p>"
    note = (f"Blue: deployments with a capacity > 0 ({len(pts)}), at their {stat.upper()} {name} at capacity; "
            f"red: Pareto front ({len(front)}): no other deployment has both lower latency and more QPS per dollar.")
    parts = [section("Headline", cards(head) + how_list(how), "headline"),
             section("Pareto: QPS per dollar vs latency", svg, "pareto", note),
             section("Ranked deployments", tab, "results", "Columns as results.csv (best QPS per dollar first)."),
             section("Pruned before simulation", pruned, "pruned")]
    return page("clustersim serve-search", title or str(summary.get("model", "")), parts)
