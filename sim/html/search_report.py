"""report.html of `clustersim search`: ranked plans (ranked.csv's columns) and the Pareto plot of
iteration time against peak memory per GPU (sim.analysis.search.pareto_front)."""

from __future__ import annotations

import math

from sim.html.page import Card, Col, cards, esc, fmt, how_list, page, section, table
from sim.html.svg import scatter_pareto

GiB = 2 ** 30
TABLE_CAP = 1000      # ranked plans in the table (ranked.csv has all)
POINT_CAP = 4000      # feasible plans drawn (the front, the best and the flow-confirmed ones always are)
_TEXT = {"plan", "sequence_parallel", "dtype", "flash_attention", "recompute", "framework", "distributed_optimizer",
         "grad_reduce_dtype", "overlap_grad_reduce", "overlap_param_gather", "overlap_p2p_comm", "peak_path"}


def _t(c) -> float:
    """The time a plan is ranked by: the flow re-timing when it has one, else the analytical screen."""
    f = getattr(c, "flow_iteration_time_s", math.nan)
    return f if math.isfinite(f) else c.iteration_time_s


def search_html(res, summary: dict, title: str = "") -> str:
    """res: sim.analysis.search.SearchResult; summary: the summary.json dict of the command."""
    from sim.analysis.search import CSV_FIELDS, candidate_dict, pareto_front, plan_label
    best = res.best
    head = [Card("plans evaluated", res.evaluated, f"{res.evaluated:,}", f"screen: {res.screen_method}", "evaluated"),
            Card("plans that fit", len(res.ranked), f"{len(res.ranked):,}",
                 f"memory budget {res.memory_budget_bytes / GiB:.1f} GiB per GPU"
                 if math.isfinite(res.memory_budget_bytes) else "", "feasible")]
    if best is not None:
        how = ("flow re-timing (" + res.confirm_method + ")" if math.isfinite(best.flow_iteration_time_s)
               else "analytical screen")
        head.append(Card("best plan", _t(best), fmt(_t(best), ".4f", " s"), f"{plan_label(best.plan)}; {how}"))
        head.append(Card("best plan MFU", best.mfu_6nd_with_attn, fmt(best.mfu_6nd_with_attn * 100, ".1f", " %"),
                         "6ND + attention FLOPs / (GPUs x T x peak), screen time"))
    fields = [f for f in CSV_FIELDS if f != "rank"]
    rows = []
    for i, c in enumerate(res.ranked[:TABLE_CAP], 1):
        d = candidate_dict(c)
        rows.append([i] + [d.get(f, "") for f in fields])
    cols = [Col("rank", ".0f")] + [Col(f, None if f in _TEXT else ".6g") for f in fields]
    ranked = table(cols, rows, table_id="t-ranked") if rows else "<p class='note'>no plan fits</p>"
    if len(res.ranked) > TABLE_CAP:
        ranked = (f"<p class='note'>truncated: the first {TABLE_CAP:,} of {len(res.ranked):,} ranked plans are "
                  "shown; ranked.csv has all.</p>" + ranked)
    feas = [c for c in res.candidates if c.feasible]
    front = pareto_front(res.candidates)
    confirmed = [c for c in res.ranked if math.isfinite(getattr(c, "flow_iteration_time_s", math.nan))]
    shown = feas
    if len(feas) > POINT_CAP:
        step = len(feas) / POINT_CAP
        shown = [feas[int(k * step)] for k in range(POINT_CAP)]

    def pt(c, t):
        return (c.peak_mem_with_reserved_bytes / GiB, t, f"{plan_label(c.plan)}: {t:.4f} s, "
                f"{c.peak_mem_with_reserved_bytes / GiB:.1f} GiB")
    svg = scatter_pareto([pt(c, c.iteration_time_s) for c in shown], [pt(c, c.iteration_time_s) for c in front],
                         "peak memory per GPU incl. allocator reserve (GiB)", "iteration time (s)",
                         "plans: iteration time vs peak memory",
                         highlight=pt(best, _t(best)) if best is not None else None,
                         vline=(res.memory_budget_bytes / GiB, "memory budget")
                         if math.isfinite(res.memory_budget_bytes) else None,
                         extra=[pt(c, c.flow_iteration_time_s) for c in confirmed],
                         extra_label="x: re-timed by the flow simulator" if confirmed else "")
    note = (f"Blue: feasible plans at their analytical screen time ({len(feas):,}"
            + (f", {len(shown):,} drawn" if len(shown) < len(feas) else "") + f"); red: Pareto front ({len(front)}) "
            "of time and memory; black crosses: top plans at their flow-simulated time; gold: the best plan.")
    rej = sorted((res.rejected_families or {}).items())
    rej_tab = table([Col("family", None), Col("reason", None)], [list(x) for x in rej], table_id="t-rejected",
                    cap=500, what="families") if rej else "<p class='note'>none</p>"
    how = [("screen", res.screen_method), ("confirmation", res.confirm_method)]
    how += [(k, str(summary[k])) for k in ("objective", "price_source") if summary.get(k) is not None]
    how += [("note", n) for n in res.notes]
    sub = title or f"{summary.get('model', '?')}, {summary.get('world_size')} GPUs, gbs {summary.get('global_batch_size')}"
    parts = [section("Headline", cards(head) + how_list(how), "headline"),
             section("Pareto: iteration time vs peak memory", svg, "pareto", note),
             section("Ranked plans", ranked, "ranked", "Columns as ranked.csv; click a header to sort."),
             section("Rejected plan families", rej_tab, "rejected")]
    if summary.get("why"):
        parts.append(section("Why these plans", "".join(f"<p class='note'>{esc(w)}</p>" for w in summary["why"])))
    return page("clustersim search", sub, parts)
