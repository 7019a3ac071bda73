"""report.html of `clustersim run`: one StepReport as a page.

Sections: headline numbers (iteration time, MFU, TFLOP/s, tokens/s, exposed communication, bubble,
peak memory) and how each was obtained (network backend, compute_db, kernel-time provenance, models
of overheads and contention, formulas); the time split per stage (bar + table whose mean row is the
summary); the per-stage timeline (Gantt of each stage representative's streams from rep.trace, merged to
pixel resolution and capped); exposed communication per group; memory per stage with the peak path
(sim.analysis.memory, when the workload is given and has model dimensions); the topology; per-layer
(stage 0, as EndToEnd.csv) and per-collective tables. All times in seconds per iteration.
"""

from __future__ import annotations

import base64
from collections import Counter
from operator import attrgetter, itemgetter
from pathlib import Path

from sim.engine import REPORT_KEYS
from sim.html.page import (
    Card,
    Col,
    cards,
    esc,
    fmt,
    fmt_bytes,
    how_list,
    legend,
    number,
    page,
    section,
    table,
)
from sim.html.svg import gantt_bars, gantt_pixel_s, stacked_hbars

COLORS = {"compute": "#4c72b0", "TP": "#dd8452", "CP": "#937860", "EP": "#8172b3", "DP": "#c44e52",
          "PP": "#55a868", "overhead": "#da8bc3", "bubble": "#bbbbbb"}
SPLIT_KEYS = ("compute",) + REPORT_KEYS + ("overhead", "bubble")
_TIMELINE_COLORS = {"fwd": "#4c72b0", "bwd": "#8da0cb", "recompute": "#a6cee3", "other": "#2f4b7c",
                    "TP": COLORS["TP"], "CP": COLORS["CP"], "EP": COLORS["EP"], "DP": COLORS["DP"],
                    "PP": COLORS["PP"]}
GiB = 2 ** 30


def split_of(d: dict) -> list[float]:
    """[compute, exposed TP..PP, overhead, bubble] of a summary or stage dict."""
    return ([d["compute_s"]] + [d["exposed_comm_s"].get(k, 0.0) for k in REPORT_KEYS]
            + [d.get("overhead_s", 0.0), d["bubble_s"]])


def split_label(key: str) -> str:
    return key if key in ("compute", "overhead", "bubble") else f"exposed {key}"


def _pct(x: float, T: float) -> str:
    return f"{100.0 * x / T:.1f}% of T" if T > 0 else ""


def headline(rep) -> str:
    m, T = rep.meta, rep.iteration_time_s
    mem = rep.memory or {}
    items = [
        Card("iteration time", T, fmt(T, ".6f", " s"), "simulated: event-driven overlap of compute and "
             f"communication ({m.get('schedule')} schedule, network '{m.get('network')}')", "iteration_time_s"),
        Card("MFU", rep.mfu, fmt(number(rep.mfu) * 100 if number(rep.mfu) is not None else None, ".2f", " %"),
             rep.FORMULAS["mfu"], "mfu"),
        Card("TFLOP/s per GPU", rep.tflops_per_gpu, fmt(rep.tflops_per_gpu, ".1f"), rep.FORMULAS["tflops_per_gpu"],
             "tflops_per_gpu"),
        Card("tokens/s per GPU", rep.tokens_per_s_per_gpu, fmt(rep.tokens_per_s_per_gpu, ".1f"),
             rep.FORMULAS["tokens_per_s_per_gpu"], "tokens_per_s_per_gpu"),
        Card("compute", rep.compute_s, fmt(rep.compute_s, ".6f", " s"),
             f"{_pct(rep.compute_s, T)}; of which overlap slowdown {rep.overlap_slowdown_s:.6f} s", "compute_s"),
        Card("exposed communication", rep.exposed_total_s, fmt(rep.exposed_total_s, ".6f", " s"),
             f"{_pct(rep.exposed_total_s, T)}; compute-stream waits on communication", "exposed_comm_total_s"),
        Card("pipeline bubble", rep.bubble_s, fmt(rep.bubble_s, ".6f", " s"), _pct(rep.bubble_s, T), "bubble_s"),
        Card("launch/host overhead", rep.overhead_s, fmt(rep.overhead_s, ".6f", " s"), _pct(rep.overhead_s, T),
             "overhead_s"),
    ]
    if mem.get("fits") is not None:
        verdict = "fits" if mem["fits"] else "DOES NOT FIT"
        items.append(Card("peak memory per GPU", mem["peak_reserved_bytes"], fmt_bytes(mem["peak_reserved_bytes"]),
                          f"reserved at {mem['peak_path']}; +{fmt_bytes(mem['cuda_context_bytes'])} CUDA context; "
                          f"{mem['gpu']} has {fmt_bytes(mem['gpu_hbm_bytes'])} -> {verdict}",
                          "memory.peak_reserved_bytes"))
    else:
        items.append(Card("peak memory per GPU", None, "n/a", mem.get("note", "") or "not computed"))
    return cards(items)


def provenance(rep) -> str:
    m = rep.meta
    cal = m.get("net_calibration")
    est = m.get("estimated_collectives", 0) or 0
    net = (f"backend '{m.get('network')}', sampling '{m.get('sampling')}': {m.get('network_collectives', 0):,} "
           f"collectives simulated" + (f", {est:,} estimated analytically" if est else "")
           + (f"; isolated kinds: {', '.join(m['isolated_kinds'])}" if m.get("isolated_kinds") else "")
           + "; constants: " + (f"user calibration {cal}" if cal else
                                "netsim built-in (calibrated against public NCCL figures, docs/netsim.md)"))
    src = ", ".join(f"{k} {100 * v:.1f}%" for k, v in rep.compute_sources.items()) or "n/a"
    items = [("fabric", f"{m.get('fabric') or '?'}; {m.get('topology_gpus', '?')} GPUs in the topology"),
             ("network (exposed communication)", net),
             ("kernel times", f"compute_db '{m.get('compute_db', 'shipped')}'; share of kernel time by "
                              f"provenance: {src}"),
             ("overlap slowdown", f"modeled: {m.get('contention_model', 'off')} (sim.contention)"),
             ("launch/host overhead", f"modeled: {m.get('overheads_model', 'off')} (sim.overheads)"),
             ("pipeline bubble", "follows from the parts above and the pipeline schedule")]
    items += [(f"formula: {k}", v) for k, v in rep.FORMULAS.items()]
    fams = rep.kernel_time_by_family or {}
    srcs = sorted({s for v in fams.values() for s in v})
    rows = [[fam] + [v.get(s, 0.0) for s in srcs] + [sum(v.values())]
            for fam, v in sorted(fams.items(), key=lambda kv: -sum(kv[1].values()))]
    cols = [Col("kernel family", None)] + [Col(f"{s} (s)", ".6f") for s in srcs] + [Col("total (s)", ".6f")]
    foot = ["total"] + [sum(r[i] for r in rows) for i in range(1, len(srcs) + 2)]
    tab = table(cols, rows, table_id="t-provenance", foot=foot) if rows else "<p class='note'>no kernel times</p>"
    return (how_list(items) + "<p class='note'>Nominal kernel time per iteration of every stage program by "
            "kernel family and compute_db provenance (summed over stages; the share per provenance is "
            "the summary's compute_sources):</p>" + tab)


def breakdown_chart(rep) -> tuple[str, list[tuple[str, str]]]:
    """(SVG, legend entries (label, colour)) of the time split per stage: one stacked bar for the mean
    (the summary) and one per stage, segments compute, exposed TP..PP, overhead, bubble (seconds)."""
    mean = {"compute_s": rep.compute_s, "exposed_comm_s": rep.exposed_comm_s, "overhead_s": rep.overhead_s,
            "bubble_s": rep.bubble_s}
    bars = [("mean (summary)", split_of(mean))] + [(f"stage {s['stage']} (rank {s['rank']})", split_of(s))
                                                  for s in rep.stages]
    used = [i for i, k in enumerate(SPLIT_KEYS) if any(v[i] > 0 for _, v in bars)]
    svg = stacked_hbars([(n, [v[i] for i in used]) for n, v in bars], [split_label(SPLIT_KEYS[i]) for i in used],
                        [COLORS[SPLIT_KEYS[i]] for i in used], "seconds per iteration",
                        "time breakdown per stage", end_text=[f"{sum(v):.4f} s" for _, v in bars])
    return svg, [(split_label(SPLIT_KEYS[i]), COLORS[SPLIT_KEYS[i]]) for i in used]


def breakdown(rep, chart: tuple | None = None) -> str:
    """The time-breakdown section; chart: breakdown_chart(rep) when already made."""
    T = rep.iteration_time_s
    mean = {"compute_s": rep.compute_s, "exposed_comm_s": rep.exposed_comm_s, "overhead_s": rep.overhead_s,
            "bubble_s": rep.bubble_s}
    svg, entries = chart or breakdown_chart(rep)
    leg = legend(entries)
    cols = ([Col("stage", ".0f"), Col("rank", ".0f"), Col("GPU", ".0f"), Col("compute (s)", ".6f"),
             Col("of which overlap slowdown (s)", ".6f")] + [Col(f"exposed {k} (s)", ".6f") for k in REPORT_KEYS]
            + [Col("overhead (s)", ".6f"), Col("bubble (s)", ".6f"), Col("sum (s)", ".6f")])
    rows = []
    for s in rep.stages:
        sp = split_of(s)
        rows.append([s["stage"], s["rank"], s["gpu"], s["compute_s"], s.get("overlap_slowdown_s", 0.0)]
                    + sp[1:] + [sum(sp)])
    sp = split_of(mean)
    foot = ["mean", "", "", rep.compute_s, rep.overlap_slowdown_s] + sp[1:] + [sum(sp)]
    note = (f"Iteration time T = {T:.6f} s. Each stage's representative rank splits T into compute, exposed "
            "communication per group, launch/host overhead and bubble; the summary is the mean over stages.")
    return section("Time breakdown", leg + svg + table(cols, rows, table_id="t-stages", foot=foot),
                   "breakdown", note)


def _timeline_key(thread: str, cat: str) -> str | None:
    if cat in ("wait", "overhead"):
        return None           # idle compute stream: the background
    if thread == "compute":
        return cat if cat in ("fwd", "bwd", "recompute") else "other"
    kind = thread.split(":", 1)[1] if ":" in thread else thread
    if kind.startswith("pp"):
        return "PP"
    from sim.engine import report_group
    return report_group(kind)


def bar_order(g, group_lane, start, end):
    """np.lexsort((end, start, g, group_lane[g])): slices by lane, group, start, end (ties in input order).
    A trace lists each stream's slices in time order, so one stable sort by (lane, group) rank (a
    radix sort: few groups) usually gives that order already; checked, else lexsort."""
    import numpy as np
    n_groups = len(group_lane)
    if n_groups < 1 << 15 and len(g) > 1:
        rank = np.empty(n_groups, dtype=np.int16)
        rank[np.lexsort((np.arange(n_groups), group_lane))] = np.arange(n_groups, dtype=np.int16)
        key = rank[g]
        order = np.argsort(key, kind="stable")
        k, s, e = key[order], start[order], end[order]
        if bool(np.all((k[1:] != k[:-1]) | (s[1:] > s[:-1]) | ((s[1:] == s[:-1]) & (e[1:] >= e[:-1])))):
            return order
    return np.lexsort((end, start, g, group_lane[g]))


def timeline_chart(rep, max_elements: int = 20000, columns=None) -> tuple | None:
    """(SVG, legend entries, bars drawn, bars after merging, time up to which every bar is drawn) of the
    Gantt chart of each stage representative's streams (rep.trace); None without a trace. Slices of
    one stream and colour key closer than a pixel are merged (as sim.html.svg.gantt does), column-wise
    with numpy: a trace holds up to ~10^5 slices. columns: sim.trace_text.trace_columns(rep.trace) when
    the caller made them already."""
    if not rep.trace:
        return None
    import numpy as np

    from sim.trace_text import trace_columns
    cols = trace_columns(rep.trace) if columns is None else columns
    # a (stage, thread, colour key) group per (stage, thread, category) in order of first appearance;
    # idle kinds (waits, host overhead) are the background (-1)
    group_of: dict[tuple, int] = {}
    kind_group: dict[tuple, int] = {}
    group_at_first = np.full(len(cols.firsts), -1, dtype=np.int64)    # index of a key's first entry -> group
    for (stage, thread, _name, cat), i in cols.first_of_key.items():
        grp = kind_group.get((stage, thread, cat))
        if grp is None:
            key = _timeline_key(thread, cat)
            grp = kind_group[(stage, thread, cat)] = (-1 if key is None else
                                                      group_of.setdefault((stage, thread, key), len(group_of)))
        group_at_first[i] = grp
    g = group_at_first[cols.firsts]
    start, dur = cols.start_s, cols.dur_s
    keep = (g >= 0) & (dur > 0)
    g, start, end = g[keep], start[keep], start[keep] + dur[keep]
    # groups with a slice of positive duration (bincount: np.unique would import numpy.ma, ~10 ms)
    drawn = set(np.flatnonzero(np.bincount(g, minlength=len(group_of))).tolist())
    # lanes: streams of each stage, compute first; bars in lane order, then key order (first seen), then time
    lanes = sorted({(st, th) for i, (st, th, _) in enumerate(group_of) if i in drawn},
                   key=lambda k: (k[0], k[1] != "compute", k[1]))
    lane_of = {k: i for i, k in enumerate(lanes)}
    group_lane = np.array([lane_of.get((st, th), -1) for st, th, _ in group_of], dtype=np.int64)
    order = bar_order(g, group_lane, start, end)
    g, start, end = g[order], start[order], end[order]
    px_s = gantt_pixel_s(rep.iteration_time_s)
    emax = np.empty_like(end)
    firsts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    for a, b in zip(firsts, np.r_[firsts[1:], len(g)]):      # running end of each group's current bar
        np.maximum.accumulate(end[a:b], out=emax[a:b])
    new_bar = np.r_[True, (g[1:] != g[:-1]) | (start[1:] > emax[:-1] + px_s)]
    heads = np.flatnonzero(new_bar)
    tails = np.r_[heads[1:], len(g)]
    keys = [k for _, _, k in group_of]
    lane_at = group_lane.tolist()
    bars = [(s0, e0, lane_at[gi], keys[gi], cnt) for s0, e0, gi, cnt in
            zip(start[heads].tolist(), emax[tails - 1].tolist(), g[heads].tolist(), (tails - heads).tolist())]
    names, starts_group = [], []
    for i, (stage, thread) in enumerate(lanes):
        if i == 0 or lanes[i - 1][0] != stage:
            starts_group.append(i)
        rank = rep.rep_ranks[stage] if stage < len(rep.rep_ranks) else "?"
        names.append(f"stage {stage} (rank {rank}) {thread}")
    svg, shown, total, until = gantt_bars(names, bars, rep.iteration_time_s, _TIMELINE_COLORS,
                                          "per-stage timeline", max_elements=max_elements, groups=starts_group)
    used = sorted({keys[i] for i in drawn}, key=list(_TIMELINE_COLORS).index)
    return svg, [(k, _TIMELINE_COLORS[k]) for k in used], shown, total, until


def timeline(rep, max_elements: int = 20000, chart: tuple | None = None) -> str:
    """The timeline section; chart: timeline_chart(rep, max_elements) when already made."""
    chart = chart or timeline_chart(rep, max_elements)
    if chart is None:
        return section("Timeline", "<p class='note'>No timeline: the run was made without a trace "
                                   "(--no-trace together with --charts none).</p>", "timeline")
    svg, entries, drawn, total, until = chart
    note = ("Streams of each pipeline stage's representative rank (all ranks of a stage run the same program). "
            "Bars closer than a pixel are merged; hover a bar for its interval. Idle time (waits, launch/host "
            "overhead) is the background.")
    if drawn < total:
        note += (f" Truncated: {drawn:,} of {total:,} bars drawn, complete up to t = {until:.6f} s "
                 "(dashed red line); trace.json holds every event.")
    return section("Timeline", legend(entries) + svg, "timeline", note)


def stragglers_and_faults(rep) -> str:
    """The run's stragglers (StepReport.stragglers, sim.straggler) and failed or degraded fabric parts
    (meta "faults", sim.fabric_faults); "" when it had neither."""
    sec, faults = rep.stragglers, rep.meta.get("faults")
    if not sec and not faults:
        return ""
    body = ""
    if faults:
        body += (f"<p class='note'>Fabric faults: {esc(faults)}. Failed cables and nodes are removed from the "
                 "topology and degraded ones run at the given share of their capacity; every group is simulated "
                 "on the network (no symmetric sampling), so the times above are those of the faulty fabric.</p>")
    if sec:
        e = sec["exposed_straggler_s"]
        body += cards([
            Card("healthy iteration", sec["healthy_iteration_time_s"], fmt(sec["healthy_iteration_time_s"], ".6f", " s"),
                 "the same run with every rank at nominal speed", "stragglers.healthy_iteration_time_s"),
            Card("with stragglers", sec["iteration_time_s"], fmt(sec["iteration_time_s"], ".6f", " s"),
                 "= the iteration time of this report", "stragglers.iteration_time_s"),
            Card("slowdown", sec["slowdown"], fmt(sec["slowdown"], ".4f", "x"), "with stragglers / healthy",
                 "stragglers.slowdown"),
            Card("slow ranks", sec["slow_ranks"], f"{sec['slow_ranks']:,}", f"model: {sec['model']}",
                 "stragglers.slow_ranks")])
        rows = [[k, e.get(k, 0.0)] for k in REPORT_KEYS]
        body += ("<p class='note'>Exposed straggler time per group: the longest a healthy member waits for the "
                 "slow one (TP/CP/EP: at its next collective; PP: the added wait for pipeline data; DP: at the "
                 "gradient synchronisation).</p>"
                 + table([Col("group", None), Col("exposed straggler time (s)", ".6f")], rows,
                         table_id="t-straggler-exposed", foot=["total", sum(r[1] for r in rows)]))
        stage_rows = [[i, f, rep.rep_ranks[i] if i < len(rep.rep_ranks) else None]
                      for i, f in enumerate(sec["stage_factors"])]
        body += table([Col("stage", ".0f"), Col("kernel-time factor of its slowest rank", ".4g"),
                       Col("representative rank", ".0f")], stage_rows, table_id="t-straggler-stages")
        slow = [[r["rank"], r["factor"]] for r in sec["slowest_ranks"]]
        if slow:
            body += ("<p class='note'>Slowest ranks (at most 8):</p>"
                     + table([Col("rank", ".0f"), Col("factor", ".4g")], slow, table_id="t-straggler-ranks"))
        body += f"<p class='note'>{esc(sec['approximation'])}.</p>"
    note = ("Stragglers: each stage's representative runs at the kernel-time factor of the stage's slowest rank "
            "(sim.straggler; docs/sim.md \"Stragglers\").") if sec else ""
    return section("Stragglers and faults", body, "stragglers", note)


def exposed_groups(rep) -> str:
    n = max(len(rep.stages), 1)
    cols = [Col("group", None)] + [Col(f"stage {s['stage']} (s)", ".6f") for s in rep.stages] + \
        [Col("mean = summary (s)", ".6f"), Col("share of T", ".2%")]
    T = rep.iteration_time_s
    rows = []
    for k in REPORT_KEYS:
        vals = [s["exposed_comm_s"].get(k, 0.0) for s in rep.stages]
        rows.append([k] + vals + [rep.exposed_comm_s.get(k, 0.0), rep.exposed_comm_s.get(k, 0.0) / T if T else None])
    foot = ["total"] + [sum(s["exposed_comm_s"].values()) for s in rep.stages] + \
        [rep.exposed_total_s, rep.exposed_total_s / T if T else None]
    kinds = sorted(rep.exposed_by_group_kind_s.items(), key=lambda kv: -kv[1])
    kt = table([Col("group kind", None), Col("mean exposed (s)", ".6f")], [list(kv) for kv in kinds],
               table_id="t-group-kinds", foot=["total", sum(v for _, v in kinds)])
    note = (f"Compute-stream time waiting for communication, per report group and stage ({n} stage(s)); "
            "below, the same per raw group kind (e.g. edp = expert data parallel, mp = model-parallel "
            "reductions such as the grad-norm all-reduce).")
    return section("Exposed communication per group", table(cols, rows, table_id="t-exposed", foot=foot) + kt,
                   "exposed", note)


def memory(rep, workload=None) -> str:
    mem = rep.memory or {}
    if mem.get("fits") is None:
        why = mem.get("note") or "memory was not analysed for this run"
        return section("Memory per stage", f"<p class='note'>n/a: {esc(why)}</p>", "memory")
    if workload is None or getattr(workload, "model", None) is None:
        return section("Memory per stage", f"<p class='note'>Peak {esc(fmt_bytes(mem['peak_reserved_bytes']))} "
                       f"reserved at {esc(mem['peak_path'])}; the per-stage split needs the workload (not given "
                       "to the report).</p>", "memory")
    from sim.analysis.memory import analyze_memory
    ana = analyze_memory(workload.model, workload.plan, workload)
    rows = []
    for s in ana.stages:
        ms = s.model_states
        rows.append([s.stage, ms.weight_bytes, ms.grad_bytes, ms.optimizer_bytes, s.activation_per_microbatch_bytes,
                     s.inflight_microbatches, s.peak_activation_bytes, sum(s.comm_buffer_bytes.values()),
                     s.peak_allocated_bytes, s.reserved_bytes, str(s.peak_path)])
    gib = dict(spec=".2f", scale=1 / GiB)
    cols = [Col("stage", ".0f"), Col("weights (GiB)", **gib), Col("grads (GiB)", **gib), Col("optimizer (GiB)", **gib),
            Col("activations / micro-batch (GiB)", **gib), Col("in-flight micro-batches", ".2f"),
            Col("activation peak (GiB)", **gib), Col("comm buffers (GiB)", **gib),
            Col("peak allocated (GiB)", **gib), Col("reserved (GiB)", **gib), Col("peak path", None)]
    foot = ["max"] + [""] * 7 + [max(r[8] for r in rows), max(r[9] for r in rows), ""]
    verdict = "fits" if mem["fits"] else "DOES NOT FIT"
    note = (f"Per-GPU memory of each pipeline stage (activations from {ana.source}; bytes, shown in GiB). "
            f"Peak: {fmt_bytes(mem['peak_reserved_bytes'])} reserved at {mem['peak_path']}, + "
            f"{fmt_bytes(mem['cuda_context_bytes'])} CUDA context; {mem['gpu']} has "
            f"{fmt_bytes(mem['gpu_hbm_bytes'])} -> {verdict}.")
    return section("Memory per stage", table(cols, rows, table_id="t-memory", foot=foot), "memory", note)


def _topology_svg(topology, tiers=None) -> bytes:
    """The fabric's picture (topo.draw_layout's view, written by topo.draw_svg: no matplotlib)."""
    from topo.draw_svg import topology_svg
    return topology_svg(topology, tiers=tiers).encode("utf-8")


def image_tag(data: bytes, mime: str, alt: str, cls: str = "topo") -> str:
    """An <img> holding `data` as a data: URL (an SVG in an <img> cannot run scripts or fetch)."""
    return (f"<img class='{esc(cls)}' alt='{esc(alt)}' src='data:{mime};base64,"
            + base64.b64encode(data).decode("ascii") + "'>")


def topology_section(topology, picture: bool = True, tmp_dir: Path | None = None) -> str:
    """The topology section; picture: embed the fabric's drawing (tmp_dir: unused, kept for callers)."""
    if topology is None:
        return section("Topology", "<p class='note'>The topology was not given to the report.</p>", "topology")
    from topo.draw_layout import tier_bundles
    t = topology
    tiers = Counter(map(attrgetter("tier"), t.nodes))
    pairs, bw = bundles = tier_bundles(t)
    rows = [[f"{a} - {b}", n, bw[(a, b)] / n, bw[(a, b)]] for (a, b), n in sorted(pairs.items())]
    cols = [Col("tier pair", None), Col("cables", ",.0f"), Col("bandwidth per cable (Gb/s)", ".1f", scale=8e-9),
            Col("total (Tb/s)", ".2f", scale=8e-12)]
    tier_txt = ", ".join(f"{k} x {v:,}" for k, v in sorted(tiers.items()))
    body = (f"<p class='note'>{esc(t.name or 'topology')}: {t.num_gpus:,} x {esc(t.gpu_type)}, "
            f"{t.num_servers:,} servers, NVLink domain {t.nvlink_domain_size}; nodes: {esc(tier_txt)}.</p>")
    if picture:
        body += image_tag(_topology_svg(t, bundles), "image/svg+xml", "topology drawing")
    else:
        body += "<p class='note'>Drawing skipped (--charts none).</p>"
    body += table(cols, rows, table_id="t-topology", foot=["total", sum(r[1] for r in rows), None,
                                                            sum(r[3] for r in rows)])
    return section("Topology", body, "topology")


def layers(rep) -> str:
    cols = [Col("layer", None)]
    rows = []
    for what in ("compute", "exposed", "comm"):
        cols += [Col(f"{what} {c} (s)", ".6f") for c in ("fwd", "ig", "wg")]
    cols += [Col(f"comm {c} bytes", ",.0f") for c in ("fwd", "ig", "wg")]
    cols += [Col(f"comm {c} collective", None) for c in ("fwd", "ig", "wg")]
    for name, st in rep.layers.items():
        r = [name]
        for src in (st.compute_s, st.exposed_s, st.comm_s):
            r += [src["fwd"], src["ig"], src["wg"]]
        r += [st.comm_bytes["fwd"], st.comm_bytes["ig"], st.comm_bytes["wg"]]
        for c in ("fwd", "ig", "wg"):
            kind = st.comm_kind.get(c)
            r.append(f"{kind[0]} x{kind[1]}" if kind and kind[0] else "")
        rows.append(r)
    if not rows:
        return section("Per layer", "<p class='note'>No per-layer rows.</p>", "layers")
    foot = ["total (stage 0)"] + [sum(r[i] for r in rows) for i in range(1, 13)] + ["", "", ""]
    note = ("Stage 0's representative rank, rows as EndToEnd.csv (fwd = forward, ig = input gradient, "
            "wg = weight gradient and data-parallel); the compute total is stage 0's compute time.")
    return section("Per layer", table(cols, rows, table_id="t-layers", foot=foot), "layers", note)


def collective_totals(rep) -> dict[tuple, list]:
    """{(stage, report group, group, collective, size, group size, phase, timing): [count, total
    duration_s, total exposed_s]} of rep.collectives, keys in order of first appearance, sums in row
    order. A fast run's rows not built yet (sim.simulation keeps a sim.fastpath.CollectiveRows until
    StepReport.collectives is first read) are totalled without being built: 4 * 10^4 dicts on SimAI's
    9,216-GPU example that nothing else of a run reads."""
    key_of = itemgetter("stage", "report_group", "group", "collective", "size_bytes", "group_size", "phase", "timing")
    totals = getattr(getattr(rep, "__dict__", {}).get("_collectives"), "group_totals", None)
    if totals is not None:
        return totals(key_of)
    agg: dict[tuple, list] = {}
    for c in rep.collectives:
        key = key_of(c)
        a = agg.get(key)
        if a is None:
            a = agg[key] = [0, 0.0, 0.0]
        a[0] += 1
        a[1] += c["duration_s"]
        a[2] += c["exposed_s"]
    return agg


def collectives(rep, cap: int = 3000) -> str:
    agg = collective_totals(rep)
    rows = [list(k) + v for k, v in sorted(agg.items(), key=lambda kv: -kv[1][2])]
    if not rows:
        return section("Collectives", "<p class='note'>No communication operations.</p>", "collectives")
    cols = [Col("stage", ".0f"), Col("report group", None), Col("group", None), Col("collective", None),
            Col("size (bytes)", ",.0f"), Col("group size", ".0f"), Col("phase", None), Col("timing", None),
            Col("count", ",.0f"), Col("total duration (s)", ".6f"), Col("exposed (s)", ".6f")]
    foot = ["total", "", "", "", "", "", "", "", sum(r[8] for r in rows), sum(r[9] for r in rows),
            sum(r[10] for r in rows)]
    note = (f"Every communication operation of every stage representative ({foot[8]:,}), grouped "
            "by stage, group, collective, size and phase; exposed = compute-stream wait charged to it (a "
            "pipeline send's wait is the receiving stage's). The exposed total divided by the number of "
            "stages is the summary's exposed communication.")
    return section("Collectives", table(cols, rows, table_id="t-collectives", foot=foot, cap=cap,
                                        what="collective groups"), "collectives", note)


def title_of(rep) -> tuple[str, str]:
    m = rep.meta
    title = f"clustersim run: {m.get('model', '?')} on {m.get('world_size')} x {m.get('gpu')}"
    sub = (f"tp {m.get('tp')} pp {m.get('pp')} cp {m.get('cp')} ep {m.get('ep')} dp {m.get('dp')} "
           f"vpp {m.get('vpp')} | {m.get('num_microbatches')} micro-batches ({m.get('schedule')}) | "
           f"global batch {m.get('global_batch_size')} x {m.get('seq_length')} tokens | {m.get('dtype')} | "
           f"fabric {m.get('fabric') or '?'} | network {m.get('network')}"
           + (f" | faults: {m['faults']}" if m.get("faults") else "")
           + (" | with stragglers" if rep.stragglers else ""))
    return title, sub


def flat_items(d, prefix: str = "") -> list[list]:
    """[key path, value] rows of a nested dict/list (lists of scalars joined)."""
    rows: list[list] = []
    for k, v in (d.items() if isinstance(d, dict) else enumerate(d)):
        path = f"{prefix}.{k}" if prefix else str(k)
        if isinstance(v, dict) or (isinstance(v, list) and any(isinstance(x, (dict, list)) for x in v)):
            rows += flat_items(v, path)
        elif isinstance(v, list):
            rows.append([path, ", ".join(str(x) for x in v)])
        else:
            rows.append([path, v])
    return rows


def extra_section(name: str, data) -> str:
    """A summary.json section added by the command (e.g. "training"): its values as a table."""
    rows = flat_items(data if isinstance(data, (dict, list)) else {name: data})
    cells = [[k, v if isinstance(v, str) or number(v) is None else fmt(v, ".6g")] for k, v in rows]
    return section(f"{name} (summary.json \"{name}\")",
                   table([Col("field", None), Col("value", None)], cells, table_id=f"t-extra-{name}"), f"x-{name}")


def run_html(rep, workload=None, topology=None, picture: bool = True, tmp_dir: Path | None = None,
             sections: dict | None = None, charts: dict | None = None) -> str:
    """The report page of one StepReport (see the module doc). picture: embed the topology's drawing
    (native SVG, topo.draw_svg); tmp_dir: unused (kept for callers); sections: more summary.json
    sections (name -> dict) shown as tables; charts: {"breakdown": breakdown_chart(rep), "timeline":
    timeline_chart(rep)} when the caller made them already (they are also written as files)."""
    charts = charts or {}
    title, sub = title_of(rep)
    parts = [section("Headline", headline(rep), "headline"),
             section("How each number was obtained", provenance(rep), "provenance"),
             stragglers_and_faults(rep), breakdown(rep, charts.get("breakdown")),
             timeline(rep, chart=charts.get("timeline")), exposed_groups(rep), memory(rep, workload),
             topology_section(topology, picture, tmp_dir), layers(rep), collectives(rep)]
    parts += [extra_section(k, v) for k, v in (sections or {}).items() if v is not None]
    return page(title, sub, parts)
