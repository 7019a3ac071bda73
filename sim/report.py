"""Results of a run: summary JSON + human table, EndToEnd-style per-layer CSV, Chrome trace, charts
(SVG by default: the report's own charts, sim.html.svg; PNG with matplotlib on request), report.html.

Everything is written into a temporary directory beside the target and renamed into place when
complete (an existing results directory is replaced only after the new one is fully written).
Trace: one process per pipeline stage's representative rank (all ranks of a stage run the same
program, so these ranks are the sampled subset of any job size), or per rank of --trace-ranks
(sim.trace_ranks); threads are the compute stream,
one communication stream per group kind and the pipeline receives; slices carry their arguments
(sim.trace_args) and pipeline sends flow arrows to their receives. Times in the CSV are microseconds, bandwidths GiB/s (as SimAI).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from netsim.api import bus_factor
from sim.engine import _CROSS_STAGE
from sim.errors import SimError
from sim.fastpath import no_cyclic_gc
from sim.outpath import check_parents_writable
from workload_gen.limits import MAX_WORLD_SIZE

KEYS = ("TP", "CP", "EP", "DP", "PP")


def _pct(x: float, total: float) -> str:
    return f"{100.0 * x / total:.2f}%" if total > 0 else "0.00%"


def format_summary(rep, title: str = "") -> str:
    """Human-readable table of a StepReport."""
    T = rep.iteration_time_s
    m = rep.meta
    lines = []
    if title:
        lines.append(title)
    lines.append(f"model {m.get('model', '?')} | {m.get('world_size')} x {m.get('gpu')} | tp {m.get('tp')} "
                 f"pp {m.get('pp')} cp {m.get('cp')} ep {m.get('ep')} dp {m.get('dp')} vpp {m.get('vpp')} | "
                 f"{m.get('num_microbatches')} micro-batches ({m.get('schedule')}) | network {m.get('network')}")
    if m.get("faults"):   # sim.fabric_faults
        lines.append(f"faults: {m['faults']}")
    lines.append(f"{'iteration time':<28s}{T:14.6f} s")
    rows = [("compute", rep.compute_s)] + [(f"exposed {k} comm", rep.exposed_comm_s.get(k, 0.0)) for k in KEYS]
    rows.append(("launch/host overhead", rep.overhead_s))
    rows.append(("pipeline bubble", rep.bubble_s))
    for name, v in rows:
        lines.append(f"  {name:<26s}{v:14.6f} s  {_pct(v, T):>8s}")
        if name == "compute":
            slow = rep.overlap_slowdown_s
            lines.append(f"    {'of which overlap slowdown':<24s}{slow:14.6f} s  {_pct(slow, T):>8s}"
                         "   (kernels beside communication in flight)")
    if m.get("executed_flops", 0) > 0:
        lines.append(f"{'MFU':<28s}{100 * rep.mfu:13.2f} %   (model FLOPs / (GPUs x T x peak {m.get('dtype')}))")
        lines.append(f"{'TFLOP/s per GPU':<28s}{rep.tflops_per_gpu:14.1f}     (executed FLOPs incl. recompute)")
    else:
        lines.append(f"{'MFU, TFLOP/s per GPU':<28s}{'n/a':>14s}     (workload carries kernel times, no FLOPs)")
    if m.get("tokens_known", True):
        lines.append(f"{'tokens/s per GPU':<28s}{rep.tokens_per_s_per_gpu:14.1f}")
    else:
        lines.append(f"{'tokens/s per GPU':<28s}{'n/a':>14s}     (sequence length unknown)")
    from sim.memory_fit import format_memory
    lines.append(format_memory(rep.memory))
    src = ", ".join(f"{k} {100 * v:.1f}%" for k, v in rep.compute_sources.items())
    lines.append(f"{'kernel time provenance':<28s}{src}")
    return "\n".join(lines)


def _bw(bytes_: float, secs: float, kind) -> tuple[str, str]:
    if secs <= 0 or bytes_ <= 0:
        return "-nan", "-nan"
    alg = bytes_ / secs / 2**30
    coll, n = kind if kind else ("", 1)
    return f"{alg:.2f}", f"{alg * bus_factor(coll, n):.2f}"


def _us(x: float) -> int:
    return int(round(x * 1e6))


def end_to_end_csv(rep, run_name: str = "clustersim") -> str:
    """SimAI EndToEnd.csv layout: header, summary line (µs and %), per-layer header and rows."""
    T = rep.iteration_time_s
    by = rep.exposed_by_group_kind_s
    dp_ep = by.get("edp", 0.0)
    dp = max(0.0, rep.exposed_comm_s.get("DP", 0.0) - dp_ep)
    tp = rep.exposed_comm_s.get("TP", 0.0)
    ep = rep.exposed_comm_s.get("EP", 0.0)
    pp = rep.exposed_comm_s.get("PP", 0.0)
    total_exposed = sum(rep.exposed_comm_s.values())
    out = ["File name, Expose DP comm, Expose DP_EP comm, Expose TP comm, Expose_EP_comm, Expose_PP_comm, "
           "bubble time, total comp, total exposed comm, Total time"]
    cells = [f"{_us(v)} ({_pct(v, T)})" for v in (dp, dp_ep, tp, ep, pp, rep.bubble_s, rep.compute_s, total_exposed)]
    out.append(", ".join([f"{run_name}-"] + cells + [str(_us(T))]))
    out.append(f"layer_name,{run_name},fwd compute,wg compute,ig compute,fwd exposed comm,wg exposed comm,"
               "ig exposed comm,fwd total comm,algbw,busbw,wg total comm,algbw,busbw,ig total comm,algbw,busbw")
    for row, st in rep.layers.items():
        cells = [row, run_name, _us(st.compute_s["fwd"]), _us(st.compute_s["wg"]), _us(st.compute_s["ig"]),
                 _us(st.exposed_s["fwd"]), _us(st.exposed_s["wg"]), _us(st.exposed_s["ig"])]
        for col in ("fwd", "wg", "ig"):
            alg, bus = _bw(st.comm_bytes[col], st.comm_s[col], st.comm_kind.get(col))
            cells += [_us(st.comm_s[col]), alg, bus]
        out.append(",".join(str(c) for c in cells))
    return "\n".join(out) + "\n"


def parse_ranks(text: str) -> list[int]:
    """'0,16' / '0-15,32' -> rank list (the --trace-ranks flag)."""
    ranks = []
    for part in str(text).split(","):
        a, dash, b = part.strip().partition("-")
        try:
            lo = int(a)
            hi = int(b) if dash else lo
        except ValueError:
            raise SimError(f"--trace-ranks: '{part.strip()}' is not a rank or a range a-b "
                           "(expected e.g. 0,16 or 0-15)") from None
        if lo < 0 or hi < lo:
            raise SimError(f"--trace-ranks: '{part.strip()}' is not a rank or a range a-b with 0 <= a <= b")
        if hi >= MAX_WORLD_SIZE:   # checked before the list is built: no job has such a rank
            raise SimError(f"--trace-ranks: '{part.strip()}' goes beyond the largest world size {MAX_WORLD_SIZE:,}")
        ranks.extend(range(lo, hi + 1))
    return ranks


def _trace_stages(rep, ranks) -> list[int]:
    """Stages whose representative's timeline the trace shows: all, or those holding `ranks`."""
    if ranks is None:
        return list(range(len(rep.rep_ranks)))
    world = len(rep.rank_stage)
    stages = set()
    for r in ranks:
        if not 0 <= int(r) < world:
            raise SimError(f"--trace-ranks: rank {r} is not a rank of this job (0..{world - 1})")
        stages.add(int(rep.rank_stage[int(r)]))
    return sorted(stages)


TRACE_LINKS = 8    # counter tracks of link utilisation in trace.json (the hottest links)
COUNTER_POINTS_MAX = 4000   # a track with more steps is shown as COUNTER_BINS bin means
COUNTER_BINS = 2000


def chrome_trace(rep, ranks=None, links: int = TRACE_LINKS) -> dict:
    """Chrome trace-event JSON (Perfetto loads it): pid = a stage's representative rank, tid = stream.

    Slices carry their arguments (sim.trace_args). Every pipeline send is drawn on the sender's
    comm:pp_next / comm:pp_prev thread and as a receive on the receiver's comm:pp_recv_act /
    comm:pp_recv_grad thread over the same interval (NCCL runs a send/recv pair together), joined by a
    flow arrow (ph s -> f). A cross-stage collective (groups spanning stages: mp, embedding) is one
    instance on several shown stages: an arrow (s -> f) goes from the lowest shown stage's slice to the
    slice of each other member. ranks: None (every stage's representative) or the ranks to show, one
    process each (pid = rank) with its stage representative's timeline and flow arrows between the
    members of every group kind among them (sim.trace_ranks); a report without a placement shows the
    stages holding `ranks` instead.
    links: counter tracks (ph C) of the `links` hottest links' utilisation, in a process of their own
    (pid = world size, no rank has it), when the report carries link loads (flow backend).
    """
    return json.loads(trace_json(rep, ranks, links))


def trace_json(rep, ranks=None, links: int = TRACE_LINKS) -> str:
    """The text of trace.json (compact JSON; chrome_trace is its parsed form). Slices are written as
    text as they are made (no dict per slice): a slice's fixed head (pid, tid, name, cat) and its
    argument dicts, shared by many slices, are encoded once each."""
    return b"".join(_trace_parts(rep, ranks, links)).decode("utf-8")


def write_trace_json(path: Path, rep, ranks=None, links: int = TRACE_LINKS, columns=None) -> None:
    """trace_json(rep, ranks, links) written to `path` in pieces, each written as it is made (no
    copy of the 10^7-byte text in memory).
    columns: sim.trace_text.trace_columns(rep.trace) when the caller made them already."""
    with open(path, "wb") as fh:
        fh.writelines(_trace_parts(rep, ranks, links, columns))


def _trace_parts(rep, ranks, links: int, columns=None) -> Iterator[bytes]:
    """The UTF-8 text of trace.json in pieces (concatenated: the file): the events' texts with "," between."""
    from sim.trace_text import encode_events
    events, other = _trace_events(rep, ranks, links, columns)
    yield b'{"traceEvents":['
    sep = b""
    for text in encode_events(events):
        for piece in ((text,) if type(text) is str or type(text) is bytes else text):   # text or an iterator
            yield sep
            sep = b","
            yield piece if type(piece) is bytes else piece.encode("utf-8")
    yield ('],"displayTimeUnit":"ms","otherData":' + json.dumps(other, separators=(",", ":")) + "}").encode("utf-8")


def _trace_events(rep, ranks, links: int, columns=None) -> tuple[list, dict]:
    """(events, otherData) of trace_json: events are JSON text (str), dicts, or the stage view's slices
    as an iterator of UTF-8 pieces (sim.trace_text.iter_slice_texts, made as they are written).
    columns: trace_columns(rep.trace), made here when not given."""
    from sim.trace_text import (
        ArgsText,
        arg_codes,
        encode,
        iter_slice_texts,
        slice_head,
        slice_ns,
        trace_columns,
    )
    stages = _trace_stages(rep, ranks)
    if ranks is not None and getattr(rep, "placement", None) is not None:
        return _ranks_trace(rep, ranks, links)
    shown = set(stages)
    asked: dict[int, list[int]] = {}
    for r in ranks or ():
        asked.setdefault(int(rep.rank_stage[int(r)]), []).append(int(r))
    events: list = []
    tids: dict[tuple[int, str], int] = {}
    per_pid: dict[int, int] = {}
    for i in stages:
        rank = rep.rep_ranks[i]
        gpu = rep.rep_gpus[i] if i < len(rep.rep_gpus) else rank
        label = f"rank {rank} (stage {i}, GPU {gpu})"
        if asked.get(i) and asked[i] != [rank]:
            label += f"; stands for rank(s) {', '.join(map(str, sorted(set(asked[i]))))} of the stage"
        events.append(encode({"ph": "M", "pid": rank, "name": "process_name", "args": {"name": label}}))
        events.append(encode({"ph": "M", "pid": rank, "name": "process_sort_index", "args": {"sort_index": i}}))

    def tid_of(pid: int, thread: str, sink: list) -> int:
        tid = tids.get((pid, thread))
        if tid is None:
            tid = tids[(pid, thread)] = per_pid.get(pid, 0)
            per_pid[pid] = tid + 1
            sink.append(encode({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": thread}}))
        return tid

    trace = rep.trace
    if len(shown) < len(rep.rep_ranks):
        trace = [ev for ev in trace if ev[0] in shown]
        columns = None
    if columns is None:
        columns = trace_columns(trace)
    arg_at, args = arg_codes(trace)
    ts_ns, dur_ns = slice_ns(start=columns.start_s, dur=columns.dur_s)
    # the slices' text is made column-wise (sim.trace_text); what depends on event order is placed
    # here: a stream's thread metadata before its first slice (tids in order of first appearance), a
    # pipeline send's receive slice and flow arrow after it, cross-stage collectives' members
    first_of_key = columns.first_of_key
    first: dict[tuple[int, str], int] = {}
    for (stage, thread, _name, _cat), i in first_of_key.items():
        first.setdefault((stage, thread), i)
    special = _special_slices(columns, arg_at, args)
    before: dict[int, list] = {}
    after: dict[int, list] = {}
    flow_id = 0
    members: dict[tuple, list[dict]] = {}   # cross-stage collective instance -> its slices, by stage
    rep_ranks = rep.rep_ranks
    recv_text = _RecvText()
    for i in sorted(special.union(first.values())):
        stage, thread, name = trace[i][:3]
        pid = rep_ranks[stage]
        if first[(stage, thread)] == i:
            tid_of(pid, thread, before.setdefault(i, []))
        if i not in special:
            continue
        tid, args_i = tids[(pid, thread)], args[int(arg_at[i])]
        t_ns = int(ts_ns[i])
        if args_i.get("group") in _CROSS_STAGE:
            # the participants' slices of one instance share its start (the rendezvous time)
            members.setdefault((args_i["group"], name, t_ns), []).append(
                {"pid": pid, "tid": tid, "ts": t_ns / 1000, "args": args_i})
        peer = args_i.get("peer_stage", -1)
        if peer >= 0 and peer in shown:
            flow_id += 1
            sink = after.setdefault(i, [])
            rpid = rep_ranks[peer]
            rthread = "comm:pp_recv_act" if thread == "comm:pp_next" else "comm:pp_recv_grad"
            rtid = tid_of(rpid, rthread, sink)
            sink.append(recv_text(rpid, rtid, name, t_ns, int(dur_ns[i]), args_i, stage, flow_id, pid, tid))
    head_of = {i: slice_head(rep_ranks[stage], tids[(rep_ranks[stage], thread)], name, cat)
               for (stage, thread, name, cat), i in first_of_key.items()}
    args_text = ArgsText()
    tails = {k: f',"args":{args_text(a)}}}' for k, a in args.items() if a}
    events.append(iter_slice_texts(columns.firsts, arg_at, tails, head_of, ts_ns, dur_ns,
                                   {i: ",".join(t) for i, t in before.items()},
                                   {i: ",".join(t) for i, t in after.items()}))   # pieces made as written
    pipeline_flows = flow_id
    tail: list = []      # every event is text (trace_text.encode_events passes it through)
    flow_id = _collective_flows(tail, members, flow_id)
    counters = _link_counters(tail, rep, links)
    if tail:
        events.append(encode(tail)[1:-1])
    return events, {"generator": "clustersim", "iteration_time_s": rep.iteration_time_s,
                    "stages_shown": stages, "pipeline_flows": pipeline_flows,
                    "collective_flows": flow_id - pipeline_flows, "link_counters": counters}


class _RecvText:
    """JSON text (as encode writes the three dicts) of a pipeline send's receive slice on the receiver
    and its flow arrow (ph s on the sender -> ph f on the receiver), over the send's interval. The
    receive's arguments (the send's plus collective "recv" and from_stage) repeat from micro-batch to
    micro-batch and are encoded once per argument dict (they live as long as the trace's argument
    table); times are integer ns (trace_text.us_text)."""

    def __init__(self):
        from sim.trace_text import encode, slice_head, us_text
        self.encode, self.slice_head, self.us_text = encode, slice_head, us_text
        self.args: dict[tuple[int, int], str] = {}

    def __call__(self, rpid: int, rtid: int, name: str, t_ns: int, dur_ns: int, args: dict, stage: int,
                 flow_id: int, pid: int, tid: int) -> str:
        us_text = self.us_text
        args_text = self.args.get((id(args), stage))
        if args_text is None:
            args_text = self.args[(id(args), stage)] = self.encode({**args, "collective": "recv", "from_stage": stage})
        ts = us_text(t_ns)
        return (f'{self.slice_head(rpid, rtid, f"recv {name}", "comm")}{ts},'
                f'"dur":{us_text(dur_ns)},"args":{args_text}}},{{"ph":"s","id":{flow_id},"pid":{pid},'
                f'"tid":{tid},"ts":{ts},"name":"pipeline send","cat":"pp_flow"}},{{"ph":"f","bp":"e",'
                f'"id":{flow_id},"pid":{rpid},"tid":{rtid},"ts":{ts},"name":"pipeline send","cat":"pp_flow"}}')


def _special_slices(columns, arg_at, args: dict) -> set[int]:
    """Indices of the communication slices whose arguments mark a cross-stage collective or a pipeline
    send (trace.json adds arrows and receive slices for them); arg_at, args: sim.trace_text.arg_codes."""
    import numpy as np
    n = len(arg_at)
    marked = np.zeros(n, dtype=bool)
    marked[[i for i, a in args.items() if a and (a.get("group") in _CROSS_STAGE or a.get("peer_stage", -1) >= 0)]] = True
    comm = np.zeros(n, dtype=bool)
    comm[[i for key, i in columns.first_of_key.items() if key[3] == "comm"]] = True
    return set(np.flatnonzero(marked[arg_at] & comm[columns.firsts]).tolist())


def _collective_flows(events: list, members: dict, flow_id: int) -> int:
    """Arrows from the lowest shown stage's slice of each cross-stage collective instance to the other
    members' slices; returns the last flow id used."""
    from sim.trace_ranks import add_member_flows
    for (group, _name, _ts), xs in members.items():
        flow_id = add_member_flows(events, xs, flow_id, lambda x: x["args"].get("stage", 0), f"{group} collective")
    return flow_id


def _ranks_trace(rep, ranks, links: int) -> tuple[list, dict]:
    """_trace_events with --trace-ranks: one process per requested rank (sim.trace_ranks)."""
    from sim.trace_ranks import rank_trace
    events: list = []
    tids: dict[tuple[int, str], int] = {}
    per_pid: dict[int, int] = {}

    def tid_of(pid: int, thread: str) -> int:
        tid = tids.get((pid, thread))
        if tid is None:
            tid = tids[(pid, thread)] = per_pid.get(pid, 0)
            per_pid[pid] = tid + 1
            events.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": thread}})
        return tid

    other = rank_trace(rep, ranks, events, tid_of)
    counters = _link_counters(events, rep, links)
    return events, {"generator": "clustersim", "iteration_time_s": rep.iteration_time_s, **other,
                    "link_counters": counters}


def _link_counters(events: list, rep, links: int) -> dict:
    """Counter tracks of the hottest links' utilisation (rep.link_loads); returns the trace metadata."""
    data = getattr(rep, "link_loads", None)
    if not data:
        return {"links": 0, "note": "no link counters: the report carries no link loads (run with tracing)"}
    series = data["links"][:max(int(links), 0)]
    if not series:
        return {"links": 0, "note": data["note"] if not data["links"] else "no link counters requested (links=0)"}
    pid = len(rep.rank_stage) if rep.rank_stage else max(rep.rep_ranks, default=0) + 1
    events.append({"ph": "M", "pid": pid, "name": "process_name",
                   "args": {"name": f"network: {len(series)} hottest links (utilisation)"}})
    events.append({"ph": "M", "pid": pid, "name": "process_sort_index", "args": {"sort_index": 1 << 20}})
    from netsim.linktrace import resample_mean
    described = []
    for rank, s in enumerate(series):
        track = f"#{rank + 1} {s.name} ({s.kind})"
        times, util = s.times_s, s.util
        info = {"track": track, "link_id": s.link_id, "capacity_Bps": s.capacity_Bps,
                "bytes_carried": s.bytes_carried, "busy_s": s.busy_s}
        if len(times) > COUNTER_POINTS_MAX:
            # a long run's steps are far finer than a viewer shows: bin means keep the bytes carried
            end = max(rep.iteration_time_s, times[-1])
            times, util = resample_mean(times, util, end, COUNTER_BINS)
            info["resampled_bin_s"] = end / COUNTER_BINS
        for t, u in zip(times, util):
            events.append({"ph": "C", "pid": pid, "name": track, "ts": round(t * 1e9) / 1000,
                           "args": {"utilisation": u}})
        described.append(info)
    return {"links": len(series), "pid": pid, "note": data["note"], "tracks": described}


_COLORS = {"compute": "#4c72b0", "TP": "#dd8452", "CP": "#937860", "EP": "#8172b3", "DP": "#c44e52",
           "PP": "#55a868", "overhead": "#da8bc3", "bubble": "#bbbbbb"}


def plot_breakdown(rep, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    labels = ["mean"] + [f"stage {s['stage']}" for s in rep.stages] if len(rep.stages) > 1 else ["rank 0"]
    series = [{"compute": rep.compute_s, **rep.exposed_comm_s, "overhead": rep.overhead_s, "bubble": rep.bubble_s}]
    if len(rep.stages) > 1:
        series += [{"compute": s["compute_s"], **s["exposed_comm_s"], "overhead": s.get("overhead_s", 0.0),
                    "bubble": s["bubble_s"]} for s in rep.stages]
    fig, ax = plt.subplots(figsize=(9, 1.2 + 0.45 * len(labels)))
    left = [0.0] * len(labels)
    for key in ("compute",) + KEYS + ("overhead", "bubble"):
        vals = [d.get(key, 0.0) for d in series]
        if not any(v > 0 for v in vals):
            continue
        name = key if key in ("compute", "bubble", "overhead") else f"exposed {key}"
        ax.barh(labels, vals, left=left, color=_COLORS[key], label=name)
        left = [a + b for a, b in zip(left, vals)]
    ax.invert_yaxis()
    ax.set_xlabel("seconds per iteration")
    ax.set_title(f"Time breakdown: iteration {rep.iteration_time_s:.3f} s")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_timeline(rep, path: Path) -> None:
    """Compute stream and comm streams of each stage's representative rank (one pipeline)."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch
    n = len(rep.rep_ranks)
    bars: dict[tuple[int, str], list] = {}
    for ev in rep.trace:
        stage, thread, _name, start, dur, cat = ev[:6]
        if dur <= 0 or cat in ("wait", "overhead"):
            continue          # idle time (waits, launch/host overhead) is the background
        if thread == "compute":
            key = "wait" if cat == "wait" else ("bwd" if cat in ("bwd", "recompute") else
                                                 "fwd" if cat == "fwd" else "other")
            lane = 0
        else:
            kind = thread.split(":", 1)[1]
            key = "PP" if kind.startswith("pp") else {"tp": "TP", "etp": "TP", "cp": "CP", "ep": "EP"}.get(kind, "DP")
            lane = 1
        bars.setdefault((stage * 2 + lane, key), []).append((start, dur))
    # merge spans closer than a pixel-ish gap: hundreds of thousands of kernels draw as a few bars
    gap = max(rep.iteration_time_s, 1e-12) * 2e-4
    for k, spans in bars.items():
        spans.sort()
        merged = [list(spans[0])]
        for start, dur in spans[1:]:
            last = merged[-1]
            if start <= last[0] + last[1] + gap:
                last[1] = max(last[1], start + dur - last[0])
            else:
                merged.append([start, dur])
        bars[k] = [tuple(x) for x in merged]
    colors = {"fwd": "#4c72b0", "bwd": "#8da0cb", "other": "#2f4b7c", "wait": "#eeeeee", **_COLORS}
    fig, ax = plt.subplots(figsize=(12, 1.0 + 0.7 * n))
    for (row, key), spans in sorted(bars.items()):
        stage, lane = divmod(row, 2)
        y = stage * 1.0 + (0.0 if lane == 0 else 0.5)
        ax.broken_barh(spans, (y, 0.42 if lane == 0 else 0.3), facecolors=colors.get(key, "#999999"))
    ax.set_yticks([s + 0.35 for s in range(n)])
    ax.set_yticklabels([f"stage {s} (rank {r})" for s, r in enumerate(rep.rep_ranks)])
    ax.invert_yaxis()
    ax.set_xlim(0, rep.iteration_time_s * 1.01 if rep.iteration_time_s > 0 else 1)
    ax.set_xlabel("time (s)  — upper lane: compute stream, lower lane: communication streams")
    ax.set_title("Timeline of one pipeline (each stage's representative rank)")
    used = sorted({k for _, k in bars})
    ax.legend(handles=[Patch(color=colors.get(k, "#999999"), label=k) for k in used], fontsize=8,
              loc="center left", bbox_to_anchor=(1.0, 0.5), frameon=False)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


CHART_FORMATS = ("svg", "png", "none")     # `run --charts`
# every file a run may write (an earlier results directory holding only these may be replaced)
RUN_FILES = ("summary.json", "summary.txt", "EndToEnd.csv", "trace.json", "breakdown.svg", "timeline.svg",
             "breakdown.png", "timeline.png", "report.html")
COMPARE_FILES = ("compare.csv", "compare.txt", "compare.json", "compare.png", "report.html")


def check_out_dir(out: str | Path, owned: tuple[str, ...] = RUN_FILES) -> Path:
    """Fail early (before simulating) when `out` cannot become a results directory.

    An existing directory is replaced only when it is empty or holds nothing but files named in `owned`
    (an earlier results directory): a user's directory with other content is never deleted.
    """
    out = Path(out)
    if not out.name or out.name in (".", "..") or out.resolve() == Path.cwd().resolve():
        raise SimError(f"{out}: cannot replace this directory; give a new results directory name")
    if out.exists() and not out.is_dir():
        raise SimError(f"{out}: exists and is not a directory")
    if out.is_dir():
        foreign = sorted(p.name for p in out.iterdir() if p.name not in owned)
        if foreign:
            raise SimError(f"{out}: directory exists and holds files clustersim did not write "
                           f"({', '.join(foreign[:3])}{', ...' if len(foreign) > 3 else ''}); "
                           "choose another output directory or remove it")
    check_parents_writable(out)
    return out


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # exists, owned by someone else
        return True
    return True


def remove_stale_temps(out: Path) -> None:
    """Remove `.NAME.tmp-PID-*` / `.NAME.old-PID-*` folders beside `out` left by a run that was killed
    (its PID no longer runs; folders without a PID come from older versions and are removed too)."""
    for p in out.parent.glob(f".{out.name}.*-*"):
        kind, _, rest = p.name[len(out.name) + 2:].partition("-")
        if kind not in ("tmp", "old") or not p.is_dir():
            continue
        pid = rest.partition("-")[0]
        if not (pid.isdigit() and _pid_alive(int(pid))):
            shutil.rmtree(p, ignore_errors=True)


def atomic_dir(out: str | Path, write, owned: tuple[str, ...] = RUN_FILES) -> Path:
    """Call write(tmp_dir) and move the finished directory to `out` (replacing an old results dir)."""
    out = check_out_dir(out, owned)
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temps(out)
        tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-{os.getpid()}-", dir=out.parent))
    except OSError as exc:
        raise SimError(f"{out}: cannot create the results directory ({exc.strerror})") from None
    os.chmod(tmp, 0o755)
    try:
        write(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if out.exists():
        old = Path(tempfile.mkdtemp(prefix=f".{out.name}.old-{os.getpid()}-", dir=out.parent))
        os.rmdir(old)
        os.replace(out, old)
        os.replace(tmp, out)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, out)
    return out


def _json_default(x):
    if isinstance(x, float) and not math.isfinite(x):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def chart_format(charts) -> str:
    """`charts` of write_results as one of CHART_FORMATS (True: "svg", False/None: "none")."""
    if charts is True:
        return "svg"
    if charts is False or charts is None:
        return "none"
    if charts not in CHART_FORMATS:
        raise SimError(f"--charts: '{charts}' is not one of {', '.join(CHART_FORMATS)}")
    return charts


def write_svg_charts(rep, tmp: Path, charts: dict) -> None:
    """breakdown.svg and timeline.svg (the charts of report.html, sim.html.run_report, as files)."""
    from sim.html.svg import standalone
    svg, entries = charts["breakdown"]
    (tmp / "breakdown.svg").write_text(standalone(
        svg, f"Time breakdown: iteration {rep.iteration_time_s:.6f} s (mean over stages and per stage)", entries),
        encoding="utf-8")
    if charts.get("timeline") is not None:
        svg, entries, drawn, total, until = charts["timeline"]
        note = ("one lane per stream of each stage's representative rank (compute first); idle time is the "
                "background; bars closer than a pixel merged")
        if drawn < total:
            note += f"; truncated: {drawn:,} of {total:,} bars drawn, complete up to t = {until:.6f} s"
        (tmp / "timeline.svg").write_text(standalone(
            svg, "Timeline of one pipeline (each stage's representative rank)", entries, note), encoding="utf-8")


def write_results(rep, out_dir: str | Path, run_name: str = "clustersim", charts: str | bool = "svg",
                  trace: bool = True, extra: dict | None = None, trace_ranks=None, sections: dict | None = None,
                  trace_links: int = TRACE_LINKS,
                  summary_tail: str = "", workload=None, topology=None) -> Path:
    """Write summary.json, summary.txt, EndToEnd.csv, trace.json, charts and report.html into `out_dir`.
    charts: "svg" (breakdown.svg, timeline.svg: the report's own charts, no matplotlib), "png"
    (breakdown.png, timeline.png drawn with matplotlib) or "none" (no chart files and no topology picture
    in report.html); True / False mean "svg" / "none".
    trace_ranks: None (every stage in trace.json) or ranks whose stages it shows (chrome_trace);
    trace_links: counter tracks of that many hottest links in trace.json.
    workload, topology: the run's inputs, for report.html's per-stage memory and topology picture."""
    fmt = chart_format(charts)
    if trace and rep.trace:
        _trace_stages(rep, trace_ranks)      # a bad rank fails before anything is written

    def write(tmp: Path) -> None:
        with no_cyclic_gc():    # 10^5 slices' keys and texts: collections would re-scan the whole report
            write_files(tmp)

    def write_files(tmp: Path) -> None:
        from sim.html.run_report import breakdown_chart, run_html, timeline_chart
        data = rep.to_dict()
        if extra:
            data["inputs"] = extra
        data.update(sections or {})   # more top-level keys (e.g. "training": sim.train_cost)
        (tmp / "summary.json").write_text(json.dumps(data, indent=2, default=_json_default) + "\n")
        (tmp / "summary.txt").write_text(format_summary(rep) + (f"\n{summary_tail}" if summary_tail else "") + "\n")
        (tmp / "EndToEnd.csv").write_text(end_to_end_csv(rep, run_name))
        from sim.trace_text import trace_columns
        columns = trace_columns(rep.trace) if rep.trace else None   # shared by trace.json and the timeline
        if trace and rep.trace:
            write_trace_json(tmp / "trace.json", rep, trace_ranks, trace_links, columns)
        # the report's charts, made once: report.html embeds them and --charts svg writes them as files
        html_charts = {"breakdown": breakdown_chart(rep), "timeline": timeline_chart(rep, columns=columns)}
        if fmt == "svg":
            write_svg_charts(rep, tmp, html_charts)
        elif fmt == "png":
            plot_breakdown(rep, tmp / "breakdown.png")
            if rep.trace:
                plot_timeline(rep, tmp / "timeline.png")
        (tmp / "report.html").write_text(run_html(rep, workload, topology, picture=fmt != "none", tmp_dir=tmp,
                                                  sections=sections, charts=html_charts), encoding="utf-8")
    return atomic_dir(out_dir, write)
