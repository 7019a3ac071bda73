"""trace.json with `--trace-ranks`: one process per requested rank (sim.report.chrome_trace calls it).

The engine simulates one representative rank per pipeline stage; every rank of a stage runs the same
program, so a requested rank shows its stage representative's timeline (its process name says so) and
ranks of one stage have identical slices. Flow arrows (ph s -> f) then join what the ranks do together:
- a pipeline send of rank r to stage p goes to r's partner in p (the member of r's pp group at index p),
  drawn as a receive slice there with an arrow, when that partner is traced;
- a collective instance of any group kind (tp, cp, ep, etp, dp, dp_cp, edp, mp, embedding) is the slices
  with the same group id (the placement's group containing the rank), name and start time; an arrow goes
  from its lowest traced rank to each other traced member.
Ranks in no group of a kind (embedding: middle stages) get no arrow for it. Times in microseconds (trace).
"""

from __future__ import annotations

import numpy as np

from sim.errors import SimError


def _group_ids(placement, kind: str, world: int) -> np.ndarray | None:
    """rank -> index of its `kind` group (-1: in none), or None for a kind the placement lacks."""
    try:
        rows = placement.rank_groups(kind)
    except SimError:     # a kind the placement does not build: its slices get no arrows
        return None
    gid = np.full(world, -1, dtype=np.int64)
    gid[rows] = np.arange(rows.shape[0], dtype=np.int64)[:, None]
    return gid


def rank_trace(rep, ranks, events: list, tid_of) -> dict:
    """Append the slices and flows of the requested `ranks` (valid ranks of rep) to `events`;
    tid_of(pid, thread) -> tid (adds the thread's metadata). Returns the otherData entries."""
    pl = rep.placement
    world = len(rep.rank_stage)
    shown = sorted({int(r) for r in ranks})
    traced = set(shown)
    by_stage: dict[int, list[int]] = {}
    for r in shown:
        by_stage.setdefault(int(rep.rank_stage[r]), []).append(r)
    for r in shown:
        s = int(rep.rank_stage[r])
        rep_r = rep.rep_ranks[s]
        if r == rep_r:
            label = f"rank {r} (stage {s}, GPU {pl.gpu_of(r)}): stage {s}'s simulated representative"
        else:
            label = (f"rank {r} (stage {s}, GPU {pl.gpu_of(r)}): timeline of stage {s}'s representative rank "
                     f"{rep_r} (all ranks of a stage run the same program)")
        events.append({"ph": "M", "pid": r, "name": "process_name", "args": {"name": label}})
        events.append({"ph": "M", "pid": r, "name": "process_sort_index", "args": {"sort_index": r}})
        events.append({"ph": "M", "pid": r, "name": "process_labels",
                       "args": {"labels": f"stage {s}; timeline of rank {rep_r}"}})
    gids: dict[str, np.ndarray | None] = {}

    def gid_of(kind: str, r: int) -> int:
        if kind not in gids:
            gids[kind] = _group_ids(pl, kind, world)
        g = gids[kind]
        return -1 if g is None else int(g[r])

    pp_rows = pl.rank_groups("pp")
    pp_of = _group_ids(pl, "pp", world)
    flow_id = 0
    members: dict[tuple, list[dict]] = {}    # (kind, group id, name, start ns) -> slices of the instance
    for ev in rep.trace:
        rs = by_stage.get(ev[0])
        if not rs:
            continue
        stage, thread, name, start, dur, cat = ev[:6]
        args = ev[6] if len(ev) > 6 else None
        ts_ns = round(start * 1e9)    # both ends rounded, as sim.report.chrome_trace (no mis-nesting)
        end_ns = max(round((start + max(dur, 0.0)) * 1e9), ts_ns)
        ts, d = ts_ns / 1000, (end_ns - ts_ns) / 1000
        is_comm = cat == "comm" and bool(args)
        peer = args.get("peer_stage", -1) if is_comm else -1
        kind = args.get("group") if is_comm else None
        for r in rs:
            tid = tid_of(r, thread)
            x = {"ph": "X", "pid": r, "tid": tid, "name": name, "cat": cat, "ts": ts, "dur": d}
            if args:
                x["args"] = args
            events.append(x)
            if peer >= 0:
                partner = int(pp_rows[pp_of[r], peer])
                if partner not in traced:
                    continue
                flow_id += 1
                rthread = "comm:pp_recv_act" if thread == "comm:pp_next" else "comm:pp_recv_grad"
                rtid = tid_of(partner, rthread)
                events.append({"ph": "X", "pid": partner, "tid": rtid, "name": f"recv {name}", "cat": "comm",
                               "ts": ts, "dur": d, "args": {**args, "collective": "recv", "from_stage": stage,
                                                            "from_rank": r}})
                events.append({"ph": "s", "id": flow_id, "pid": r, "tid": tid, "ts": ts, "name": "pipeline send",
                               "cat": "pp_flow"})
                events.append({"ph": "f", "bp": "e", "id": flow_id, "pid": partner, "tid": rtid, "ts": ts,
                               "name": "pipeline send", "cat": "pp_flow"})
            elif kind and kind != "pp":
                g = gid_of(kind, r)
                if g >= 0:
                    members.setdefault((kind, g, name, ts_ns), []).append(x)
    pipeline_flows = flow_id
    by_kind: dict[str, int] = {}
    for (kind, _g, _name, _ts), xs in members.items():
        n = add_member_flows(events, xs, flow_id, lambda x: x["pid"], f"{kind} collective")
        by_kind[kind] = by_kind.get(kind, 0) + n - flow_id
        flow_id = n
    return {"ranks_shown": shown, "stages_shown": sorted(by_stage), "pipeline_flows": pipeline_flows,
            "collective_flows": flow_id - pipeline_flows, "collective_flows_by_group": dict(sorted(by_kind.items())),
            "ranks_note": "each rank shows its pipeline stage representative's simulated timeline"}


def add_member_flows(events: list, xs: list[dict], flow_id: int, order_key, name: str) -> int:
    """Arrows from the first member (by order_key) of one collective instance to each other member:
    xs are the instance's slices; the k-th slice of one process pairs with the k-th of the others
    (stream order). Returns the last flow id used."""
    by_pid: dict[int, list[dict]] = {}
    for x in xs:
        by_pid.setdefault(x["pid"], []).append(x)
    if len(by_pid) < 2:
        return flow_id
    order = sorted(by_pid, key=lambda p: order_key(by_pid[p][0]))
    for k in range(min(len(by_pid[p]) for p in order)):
        root = by_pid[order[0]][k]
        for p in order[1:]:
            x = by_pid[p][k]
            flow_id += 1
            events.append({"ph": "s", "id": flow_id, "pid": root["pid"], "tid": root["tid"], "ts": root["ts"],
                           "name": name, "cat": "coll_flow"})
            events.append({"ph": "f", "bp": "e", "id": flow_id, "pid": x["pid"], "tid": x["tid"], "ts": x["ts"],
                           "name": name, "cat": "coll_flow"})
    return flow_id
