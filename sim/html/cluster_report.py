"""report.html of `clustersim cluster` (sim.cluster.ClusterReport): each job alone vs sharing the fabric,
its slowdown, the hottest links and the picture of the fabric with the jobs placed (cluster.png, embedded).
Times in seconds per iteration, capacities in bytes/s (shown in Gb/s), utilisation as a fraction."""

from __future__ import annotations

from pathlib import Path

from sim.html.page import Card, Col, cards, fmt, legend, page, section, table
from sim.html.svg import stacked_hbars

_ALONE, _ADDED = "#4c72b0", "#c44e52"


def _jobs(rep) -> str:
    cols = [Col("job", None), Col("GPUs", ",.0f"), Col("placement", None), Col("GPU ids", None),
            Col("start (s)", ".3f"), Col("iterations", ",.0f"), Col("alone (s)", ".6f"), Col("shared (s)", ".6f"),
            Col("slowdown", ".4f", "x")]
    rows = [[j["name"], j["world"], j["placement"], j["gpus"], j["start_s"], j["iterations"], j["alone_s"],
             j["shared_s"], j["slowdown"]] for j in rep.jobs]
    note = ("alone = the job's iteration time on the fabric by itself; shared = its mean iteration time while "
            "every job runs on the one flow network (their flows share links); slowdown = shared / alone.")
    return section("Jobs alone and shared", table(cols, rows, table_id="t-jobs"), "jobs", note)


def _slowdown_bars(rep) -> str:
    if not rep.jobs:
        return ""
    rows = [(j["name"], [j["alone_s"], max(j["shared_s"] - j["alone_s"], 0.0)]) for j in rep.jobs]
    svg = stacked_hbars(rows, ["alone", "added by sharing"], [_ALONE, _ADDED], "seconds per iteration",
                        "slowdown per job", end_text=[f"{fmt(j['slowdown'], '.4f', 'x')}" for j in rep.jobs])
    return section("Slowdown per job", legend([("alone", _ALONE), ("added by sharing", _ADDED)]) + svg, "slowdown",
                   "Each bar is the shared iteration time: the alone time plus what sharing the fabric adds; "
                   "the number at its end is the slowdown.")


def _links(rep, top_n: int) -> str:
    hot = rep.hot_links(top_n)
    cols = [Col("link", None), Col("kind", None), Col("capacity (Gb/s)", ".1f", scale=8e-9),
            Col("bytes carried", ",.0f"), Col("utilisation", ".2%"), Col("jobs", None), Col("link id", ".0f")]
    rows = [[lk["name"], lk["kind"], lk["capacity_Bps"], lk["bytes"], lk["utilization"], lk["jobs"] or "-",
             lk["link"]] for lk in hot]
    note = (f"The {len(hot)} busiest of the {len(rep.links):,} links that carried traffic (links.csv has every "
            "one); utilisation = bytes carried / (effective capacity x makespan); jobs = those whose flows "
            "crossed it when run alone.")
    body = table(cols, rows, table_id="t-links") if rows else "<p class='note'>No link carried traffic.</p>"
    return section("Hottest links", body, "links", note)


def _picture(png: bytes | None) -> str:
    if not png:
        return section("Fabric", "<p class='note'>Picture skipped (--no-charts).</p>", "picture")
    from sim.html.run_report import image_tag
    return section("Fabric", image_tag(png, "image/png", "the fabric with the jobs placed"), "picture",
                   "cluster.png: the fabric with each job's GPUs and the hottest links.")


def cluster_html(rep, top_n: int = 8, png: bytes | None = None) -> str:
    """The page of a ClusterReport; png: cluster.png's bytes (None: no picture)."""
    worst = max(rep.jobs, key=lambda j: j["slowdown"], default=None)
    head = [Card("jobs", len(rep.jobs), f"{len(rep.jobs)}", f"{sum(j['world'] for j in rep.jobs):,} GPUs in all"),
            Card("makespan", rep.makespan_s, fmt(rep.makespan_s, ".6f", " s"),
                 "until the last job's last iteration ends", "makespan_s")]
    if worst is not None:
        head.append(Card("largest slowdown", worst["slowdown"], fmt(worst["slowdown"], ".4f", "x"),
                         f"job {worst['name']}: shared / alone iteration time"))
    if rep.links:
        lk = rep.links[0]
        head.append(Card("hottest link", lk["utilization"], fmt(100 * lk["utilization"], ".2f", " %"),
                         f"{lk['name']} ({lk['kind']})"))
    m = rep.meta
    sub = (f"{len(rep.jobs)} job(s) on {m.get('topology_gpus', '?')} x {m.get('gpu', '?')} | network "
           f"{m.get('network', '?')} (sampling {m.get('sampling', '?')}) | overheads {m.get('overheads_model', '?')}"
           f" | contention {m.get('contention_model', '?')}")
    parts = [section("Headline", cards(head), "headline"), _jobs(rep), _slowdown_bars(rep), _links(rep, top_n),
             _picture(png)]
    return page("clustersim cluster", sub, [p for p in parts if p])


def write_cluster_html(rep, tmp: Path, top_n: int = 8) -> None:
    """report.html into the results directory being written (embeds its cluster.png when there is one)."""
    pic = Path(tmp) / "cluster.png"
    png = pic.read_bytes() if pic.is_file() else None
    (Path(tmp) / "report.html").write_text(cluster_html(rep, top_n, png), encoding="utf-8")

