"""report.html of `clustersim compare` (several StepReports side by side) and the HTML page beside a
`clustersim sweep` CSV (its rows). Times in seconds per iteration; a stacked bar per configuration."""

from __future__ import annotations

import math
from collections.abc import Sequence

from sim.engine import REPORT_KEYS
from sim.html.page import Card, Col, cards, fmt, legend, number, page, section, table
from sim.html.run_report import COLORS, SPLIT_KEYS, split_label, split_of
from sim.html.svg import stacked_hbars

GiB = 2 ** 30
BAR_CAP = 200      # bars drawn in a sweep's chart (fastest first); the table has every run


def label_text(label: dict) -> str:
    return " | ".join(str(v) for v in label.values())


def _bars(names: Sequence[str], splits: Sequence[Sequence[float]], what: str) -> str:
    used = [i for i, _ in enumerate(SPLIT_KEYS) if any(s[i] > 0 for s in splits)]
    svg = stacked_hbars([(n, [s[i] for i in used]) for n, s in zip(names, splits)],
                        [split_label(SPLIT_KEYS[i]) for i in used], [COLORS[SPLIT_KEYS[i]] for i in used],
                        "seconds per iteration", what, end_text=[f"{sum(s):.4f} s" for s in splits])
    return legend([(split_label(SPLIT_KEYS[i]), COLORS[SPLIT_KEYS[i]]) for i in used]) + svg


_TRAIN_COLS = (("goodput", ("goodput", "goodput"), ".2%", 1.0), ("$ per iteration", ("iteration_usd",), ".4f", 1.0),
               ("$ per million tokens", ("usd_per_million_tokens",), ".4f", 1.0),
               ("facility energy per iteration (kJ)", ("iteration_energy", "facility_j"), ".2f", 1e-3),
               ("kWh per million tokens", ("kwh_per_million_tokens",), ".4f", 1.0),
               ("iterations to train", ("iterations",), ",.0f", 1.0), ("days to train", ("wall_time_days",), ".2f", 1.0),
               ("$ to train", ("total_usd",), ",.0f", 1.0), ("MWh to train", ("total_facility_mwh",), ".2f", 1.0))


def _get(d, path: tuple):
    for k in path:
        d = d.get(k) if isinstance(d, dict) else None
    return d


def training_section(labels: Sequence[dict], keys: Sequence[str], training: Sequence[dict | None]) -> str:
    """Cost and energy per configuration (compare.json "training", sim.train_cost to_dict); the "to train"
    columns only when a configuration has them (--train-tokens)."""
    to_train = any(t and t.get("train_tokens") is not None for t in training)
    cols = [c for c in _TRAIN_COLS if to_train or c[1][0] not in ("iterations", "wall_time_days", "total_usd",
                                                                  "total_facility_mwh")]
    known = [number(_get(t, ("usd_per_million_tokens",))) for t in training if t]
    known = [v for v in known if v is not None]
    best = min(known) if known else None
    rows = []
    for lab, t in zip(labels, training):
        per = number(_get(t, ("usd_per_million_tokens",))) if t else None
        rows.append([lab.get(k, "") for k in keys] + [_get(t, path) if t else None for _, path, _, _ in cols]
                    + [t.get("price_source", "") if t else "", per / best if per is not None and best else None])
    tcols = ([Col(k, None) for k in keys] + [Col(head, spec, scale=scale) for head, _, spec, scale in cols]
             + [Col("price source", None), Col("$ per token vs best", ".3f", "x")])
    note = ("Per configuration (compare.json \"training\"): $ = GPUs x $/GPU-hour x time; energy = facility "
            "energy (PUE) of the iteration's busy and idle GPU time plus CPU, NIC and switch power; per million "
            "tokens and to train include the expected goodput (failures, checkpoints and restarts).")
    return section("Training cost and energy", table(tcols, rows, table_id="t-training"), "training", note)


def compare_html(reports: Sequence[tuple[dict, object]], training: Sequence[dict | None] | None = None) -> str:
    """reports: (label {dimension: value}, StepReport) per configuration, in the command's order;
    training: per configuration its sim.train_cost estimate as a dict (compare.json "training"), or None."""
    keys: list[str] = []
    for lab, _ in reports:
        keys += [k for k in lab if k not in keys]
    best_T = min((r.iteration_time_s for _, r in reports), default=math.nan)
    rows = []
    for lab, r in reports:
        mem = r.memory or {}
        src = ", ".join(f"{k} {100 * v:.0f}%" for k, v in r.compute_sources.items())
        rows.append([lab.get(k, "") for k in keys]
                    + [r.iteration_time_s, r.compute_s] + [r.exposed_comm_s.get(k, 0.0) for k in REPORT_KEYS]
                    + [r.overhead_s, r.bubble_s, r.mfu, r.tflops_per_gpu, r.tokens_per_s_per_gpu,
                       mem.get("peak_reserved_bytes"),
                       {True: "fits", False: "does not fit"}.get(mem.get("fits"), "n/a"),
                       r.meta.get("network", ""), src, r.iteration_time_s / best_T if best_T > 0 else None])
    cols = ([Col(k, None) for k in keys] + [Col("iteration (s)", ".6f"), Col("compute (s)", ".6f")]
            + [Col(f"exposed {k} (s)", ".6f") for k in REPORT_KEYS]
            + [Col("overhead (s)", ".6f"), Col("bubble (s)", ".6f"), Col("MFU", ".2%"), Col("TFLOP/s per GPU", ".1f"),
               Col("tokens/s per GPU", ".1f"), Col("peak memory (GiB)", ".2f", scale=1 / GiB), Col("memory", None),
               Col("network", None), Col("kernel-time provenance", None), Col("vs best", ".3f", "x")])
    best_i = min(range(len(reports)), key=lambda i: reports[i][1].iteration_time_s) if reports else None
    head = []
    if best_i is not None:
        lab, r = reports[best_i]
        head.append(Card("fastest configuration", r.iteration_time_s, fmt(r.iteration_time_s, ".6f", " s"),
                         label_text(lab), "iteration_time_s"))
        worst = max(x.iteration_time_s for _, x in reports)
        head.append(Card("slowest / fastest", worst / r.iteration_time_s if r.iteration_time_s > 0 else None,
                         fmt(worst / r.iteration_time_s if r.iteration_time_s > 0 else None, ".3f", "x"),
                         f"{len(reports)} configurations"))
    bars = _bars([label_text(lab) for lab, _ in reports],
                 [split_of({"compute_s": r.compute_s, "exposed_comm_s": r.exposed_comm_s, "overhead_s": r.overhead_s,
                            "bubble_s": r.bubble_s}) for _, r in reports], "iteration time by configuration")
    note = ("One row per configuration (the command's order); exposed = compute-stream time waiting for that "
            "group's communication; MFU = model FLOPs / (GPUs x T x peak); vs best = T / fastest T. "
            "compare.json holds every configuration's full summary.")
    m0 = reports[0][1].meta if reports else {}
    sub = (f"{m0.get('model', '?')} | {m0.get('world_size')} ranks | tp {m0.get('tp')} pp {m0.get('pp')} "
           f"dp {m0.get('dp')} (first configuration)")
    parts = [section("Headline", cards(head), "headline"),
             section("Iteration time by configuration", bars, "bars"),
             section("Side by side", table(cols, rows, table_id="t-compare"), "compare", note)]
    if training and any(training):
        parts.append(training_section([lab for lab, _ in reports], keys, training))
    return page("clustersim compare", sub, parts)


_SWEEP_SPLIT = ("compute_s", "exposed_TP_s", "exposed_CP_s", "exposed_EP_s", "exposed_DP_s", "exposed_PP_s",
                "overhead_s", "bubble_s")


def sweep_html(rows: Sequence[dict], csv_name: str = "") -> str:
    """rows: the sweep CSV's rows (sim.commands.summary_row: label fields, then the numbers as text, then
    `error`)."""
    from sim.commands import summary_row
    value_keys = [k for k in summary_row({}, None) if k != "error"]
    label_keys: list[str] = []
    for r in rows:
        label_keys += [k for k in r if k not in value_keys and k != "error" and k not in label_keys]
    ok = [r for r in rows if not r.get("error") and number(r.get("iteration_time_s")) is not None]
    best = min((float(r["iteration_time_s"]) for r in ok), default=math.nan)
    trows = []
    for r in rows:
        t = number(r.get("iteration_time_s"))
        trows.append([r.get(k, "") for k in label_keys] + [r.get(k, "") for k in value_keys]
                     + [t / best if t is not None and best > 0 else None, r.get("error", "")])
    cols = ([Col(k, None) for k in label_keys] + [Col(k, ".6g") for k in value_keys]
            + [Col("vs best", ".3f", "x"), Col("error", None)])
    head = [Card("runs", len(rows), f"{len(rows):,}", f"{len(rows) - len(ok)} failed"),
            Card("fastest iteration", best, fmt(best, ".6f", " s"),
                 next((" | ".join(f"{k}={r.get(k)}" for k in label_keys) for r in ok
                       if float(r["iteration_time_s"]) == best), ""))]
    shown = sorted(ok, key=lambda r: float(r["iteration_time_s"]))[:BAR_CAP]
    names = [" | ".join(str(r.get(k, "")) for k in label_keys) for r in shown]
    splits = [[number(r.get(k)) or 0.0 for k in _SWEEP_SPLIT] for r in shown]
    bars = _bars(names, splits, "sweep iteration times") if ok else "<p class='note'>no successful run</p>"
    if len(shown) < len(ok):
        bars = f"<p class='note'>truncated: the fastest {len(shown)} of {len(ok)} successful runs are drawn.</p>" + bars
    note = ("One row per grid point (values as in the CSV: seconds per iteration, MFU as a fraction); failed "
            "points keep their error. Sort by any column.")
    parts = [section("Headline", cards(head), "headline"),
             section("Iteration time by grid point", bars, "bars"),
             section("All runs", table(cols, trows, table_id="t-sweep"), "sweep", note)]
    return page("clustersim sweep", f"{csv_name}: {len(rows)} runs" if csv_name else f"{len(rows)} runs", parts)
