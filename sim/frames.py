"""StepReport tables as pandas DataFrames and its notebook view (StepReport.to_dataframe, _repr_html_).

Tables (seconds, bytes; one iteration):
- "stages": one row per pipeline stage's representative rank: compute_s (overlap_slowdown_s is part of
  it), exposed_<TP|CP|EP|DP|PP>_s, overhead_s, bubble_s. The mean of each column over the rows is the
  summary's value (StepReport.compute_s, exposed_comm_s, overhead_s, bubble_s), computed the same way.
- "layers": one row per EndToEnd.csv row of stage 0's representative rank (layer_N, embedding_layer,
  ...): compute_<col>_s, exposed_<col>_s, comm_<col>_s, comm_<col>_bytes for col in fwd, ig, wg
  (forward, input gradient, weight gradient / data parallel) and their totals.
- "collectives": every communication operation of every representative rank, pipeline sends included
  (group "pp", peer_stage the receiver): collective, group, size, start/end, timing and exposed_s, the
  compute-stream wait charged to it as exposed communication (for a pipeline send: the receiving stage's
  in-flight wait). Summed per stage (receiving stage for sends) and report group it is the stage's exposed time.
"""

from __future__ import annotations

import html

import pandas as pd

from sim.engine import REPORT_KEYS
from sim.errors import SimError

_COLS = ("fwd", "ig", "wg")
COLLECTIVE_COLUMNS = ("stage", "rank", "group", "report_group", "name", "collective", "size_bytes", "group_size",
                      "peer_stage", "layer", "phase", "blocking", "timing", "start_s", "end_s", "duration_s",
                      "exposed_s")


def stage_frame(rep) -> pd.DataFrame:
    rows = []
    for s in rep.stages:
        row = {"stage": s["stage"], "rank": s["rank"], "gpu": s["gpu"], "compute_s": s["compute_s"],
               "overlap_slowdown_s": s.get("overlap_slowdown_s", 0.0)}
        for k in REPORT_KEYS:
            row[f"exposed_{k}_s"] = s["exposed_comm_s"][k]
        row["overhead_s"] = s.get("overhead_s", 0.0)
        row["bubble_s"] = s["bubble_s"]
        row["busy_until_s"] = s["busy_until_s"]
        rows.append(row)
    return pd.DataFrame(rows)


def layer_frame(rep) -> pd.DataFrame:
    rows = []
    for name, st in rep.layers.items():
        row = {"layer": name}
        for what, src in (("compute", st.compute_s), ("exposed", st.exposed_s), ("comm", st.comm_s)):
            for c in _COLS:
                row[f"{what}_{c}_s"] = src[c]
            row[f"{what}_s"] = src["fwd"] + src["ig"] + src["wg"]
        for c in _COLS:
            row[f"comm_{c}_bytes"] = st.comm_bytes[c]
            coll, n = st.comm_kind.get(c, ("", 0))
            row[f"comm_{c}_collective"] = coll
            row[f"comm_{c}_group_size"] = n
        rows.append(row)
    return pd.DataFrame(rows)


def collective_frame(rep) -> pd.DataFrame:
    return pd.DataFrame(list(rep.collectives), columns=list(COLLECTIVE_COLUMNS))


_FRAMES = {"stages": stage_frame, "layers": layer_frame, "collectives": collective_frame}


def step_frame(rep, table: str) -> pd.DataFrame:
    fn = _FRAMES.get(table)
    if fn is None:
        raise SimError(f"table '{table}': expected one of {', '.join(_FRAMES)}")
    return fn(rep)


def _fmt(x, unit: str = "", scale: float = 1.0, digits: int = 6) -> str:
    try:
        v = float(x) * scale
    except (TypeError, ValueError):
        return "n/a"
    return "n/a" if v != v else f"{v:.{digits}f}{unit}"


def step_html(rep) -> str:
    """A compact HTML view: headline numbers, the time split and the per-stage table."""
    m = rep.meta
    T = rep.iteration_time_s
    title = (f"{m.get('model', '?')} | {m.get('world_size')} x {m.get('gpu')} | tp {m.get('tp')} pp {m.get('pp')} "
             f"cp {m.get('cp')} ep {m.get('ep')} dp {m.get('dp')} | network {m.get('network')}")
    split = [("compute", rep.compute_s)] + [(f"exposed {k}", rep.exposed_comm_s.get(k, 0.0)) for k in REPORT_KEYS]
    split += [("launch/host overhead", rep.overhead_s), ("pipeline bubble", rep.bubble_s)]
    cells = [("iteration time", _fmt(T, " s")), ("MFU", _fmt(rep.mfu, " %", 100.0, 2)),
             ("TFLOP/s per GPU", _fmt(rep.tflops_per_gpu, "", 1.0, 1)),
             ("tokens/s per GPU", _fmt(rep.tokens_per_s_per_gpu, "", 1.0, 1))]
    cells += [(name, f"{_fmt(v, ' s')} ({100.0 * v / T:.2f}%)" if T > 0 else _fmt(v, " s")) for name, v in split]
    body = "".join(f"<tr><th style='text-align:left'>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>"
                   for k, v in cells)
    stages = stage_frame(rep).to_html(index=False, float_format=lambda x: f"{x:.6f}", border=0)
    return (f"<div class='clustersim-step'><b>clustersim StepReport</b>: {html.escape(title)}"
            f"<table>{body}</table><details><summary>per stage</summary>{stages}</details>"
            "<small>rep.to_dataframe('stages' | 'layers' | 'collectives')</small></div>")
