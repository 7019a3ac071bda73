"""Several training jobs on one fabric: their flows contend on shared links (issue 14 item 1).

Model:
- Each job is a workload (zoo model + plan, or a workload file) placed on GPUs of ONE shared topology
  (sim.cluster.place_jobs) and started at its offset `start` (s). It runs `iterations` iterations back
  to back (each a fresh sim.engine.Engine started when the previous one ends).
- Every job is simulated twice with the same engine settings: alone (its own idle flow network) and
  shared (all jobs' engines interleaved by one driver over ONE flow backend, so max-min sharing splits
  every link among the flows of all jobs in flight). Engines submit every group (sampling "full"):
  omitting symmetric copies would under-load links shared with another job.
- slowdown = shared mean iteration time / alone iteration time (1 when no link is shared).
- Link utilisation = bytes carried / (effective capacity x makespan of the shared run), per directed
  link; the hottest links are named '<tier><index within tier> -> ...' with the jobs whose alone run
  used them.
Not modelled: storage / front-end traffic, schedulers that move jobs, and compute interference.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.cluster_place import SCHEDULER_POLICIES, schedule
from sim.errors import SimError

PLACEMENTS = ("contiguous", "interleave", "spread", "first-fit", "rail-aligned", "file:PATH")
_JOB_KEYS = ("name", "model", "workload", "placement", "start", "iterations", "world")


@dataclass(frozen=True)
class JobSpec:
    """One job of `clustersim cluster --job`; plan: ParallelPlan field -> text value (sim.inputs.make_plan)."""
    name: str
    model: str | None = None
    workload: str | None = None
    plan: tuple = ()                  # ((field, value), ...)
    placement: str = "contiguous"
    start_s: float = 0.0
    iterations: int = 1


def parse_job(text: str, index: int = 0) -> JobSpec:
    """'model=llama3-8b,tp=8,world=64,placement=interleave,start=0.5' -> JobSpec. Keys other than
    name, model, workload, placement, start, iterations and world (= world_size) are plan fields."""
    from sim.inputs import parse_kv
    where = f"--job '{text}'"
    kv = parse_kv(text, "--job")
    name = kv.pop("name", f"job{index}")
    model, workload = kv.pop("model", None), kv.pop("workload", None)
    if bool(model) == bool(workload):
        raise SimError(f"{where}: give model=NAME or workload=FILE (one of them)")
    placement = kv.pop("placement", "contiguous")
    if placement not in PLACEMENTS[:-1] and not placement.startswith("file:"):
        raise SimError(f"{where}: placement '{placement}' unknown (known: {', '.join(PLACEMENTS)})")
    from sim.inputs import parse_number
    start = parse_number(kv.pop("start", "0"), where, "start (s)")
    if start < 0:
        raise SimError(f"{where}: start must be >= 0 s")
    iterations = parse_number(kv.pop("iterations", "1"), where, "iterations", int, 1)
    if "world" in kv:
        kv["world_size"] = kv.pop("world")
    if workload and kv:
        raise SimError(f"{where}: plan fields ({', '.join(sorted(kv))}) cannot be combined with workload=FILE")
    return JobSpec(name=name, model=model, workload=workload, plan=tuple(sorted(kv.items())), placement=placement,
                   start_s=start, iterations=iterations)


def build_workload(spec: JobSpec):
    """The job's Workload (generated from model + plan, or read from its file)."""
    from sim.inputs import load_workload_file, make_plan, resolve_model
    if spec.workload:
        return load_workload_file(spec.workload)
    from workload_gen import generate
    model = resolve_model(spec.model)
    fields = dict(spec.plan)
    fields.setdefault("seq_length", model.seq_length)
    try:
        plan = make_plan(None, **fields)
    except SimError as exc:
        raise SimError(f"job '{spec.name}': {exc}") from None
    return generate(model, plan)


def place_jobs(worlds: list[int], placements: list[str], topology, plans: list | None = None,
               unavailable=()) -> list[list[int]]:
    """GPU ids (index = rank) of every job on the shared topology.

    file:PATH: the mapping file (sim.placement.load_mapping), placed first. The others in job order:
    contiguous: the lowest free GPU ids. interleave: the interleave jobs take free servers in turn
    (server 0 to the first, server 1 to the second, ...). spread: the job's servers evenly spaced over
    the free servers. first-fit, rail-aligned: scheduler policies (sim.cluster_place; rail-aligned needs
    the job's plan in `plans`). Jobs never share a GPU; a job without enough free GPUs is an error naming
    it. `unavailable`: GPU ids (failed) that no policy but file: may use.
    """
    from sim.placement import load_mapping
    n = int(topology.num_gpus)
    if sum(worlds) > n:
        raise SimError(f"the jobs need {sum(worlds)} GPUs but the topology has {n}")
    server_of = [int(topology.server_of(g)) for g in range(n)]
    servers: dict[int, list[int]] = {}
    for g, s in enumerate(server_of):
        servers.setdefault(s, []).append(g)
    used = np.zeros(n, dtype=bool)
    out: list[list[int] | None] = [None] * len(worlds)
    blocked = np.zeros(n, dtype=bool)
    blocked[list(unavailable)] = True

    def take(i: int, gpus: list[int]) -> None:
        gpus = gpus[: worlds[i]]
        if len(gpus) < worlds[i]:
            raise SimError(f"job {i} ({placements[i]}): needs {worlds[i]} GPUs, only {len(gpus)} free")
        used[gpus] = True
        out[i] = gpus

    for i, pl in enumerate(placements):
        if pl.startswith("file:"):
            ids = load_mapping(pl[5:])
            if len(ids) < worlds[i]:
                raise SimError(f"{pl[5:]}: lists {len(ids)} GPUs, job {i} has {worlds[i]} ranks")
            ids = ids[: worlds[i]]
            bad = [g for g in ids if not 0 <= g < n]
            if bad:
                raise SimError(f"{pl[5:]}: GPU {bad[0]} is not in the topology (0..{n - 1})")
            if len(set(ids)) != len(ids) or used[ids].any():
                raise SimError(f"{pl[5:]}: job {i} reuses a GPU (twice in the file or taken by another job)")
            take(i, ids)

    def free_servers() -> list[int]:
        return [s for s, gs in sorted(servers.items()) if not used[gs].any()]

    used |= blocked
    inter = [i for i, pl in enumerate(placements) if pl == "interleave"]
    for i, pl in enumerate(placements):
        if pl in SCHEDULER_POLICIES:
            plan = plans[i] if plans is not None else None
            if plan is None and pl == "rail-aligned":
                raise SimError(f"job {i} (rail-aligned): the job's plan is needed to lay out its ranks")
            take(i, schedule(pl, worlds[i], plan, topology, used, f"job {i} ({pl})"))
        elif pl == "contiguous":
            take(i, [g for g in range(n) if not used[g]])
        elif pl == "spread":
            free = free_servers()
            per = len(servers[free[0]]) if free else 1
            need = -(-worlds[i] // per)
            if need > len(free):
                raise SimError(f"job {i} (spread): needs {need} whole servers, {len(free)} free")
            picks = [free[int(k * len(free) / need)] for k in range(need)]
            take(i, [g for s in picks for g in servers[s]])
        elif pl == "interleave" and i == inter[0]:
            free = free_servers()
            got: dict[int, list[int]] = {j: [] for j in inter}
            turn = 0
            for s in free:
                waiting = [j for j in inter if len(got[j]) < worlds[j]]
                if not waiting:
                    break
                j = waiting[turn % len(waiting)]
                got[j].extend(servers[s])
                turn += 1
            for j in inter:
                take(j, got[j])
    return [list(map(int, g)) for g in out]


@dataclass
class _Job:
    spec: JobSpec
    workload: object
    placement: object
    times: dict
    host: object
    contention: object


def _engine(job: _Job, topology, backend, trace: bool = False):
    from sim.engine import Engine
    times = job.times
    return Engine(job.workload, job.placement, topology, backend, lambda op: times[id(op)], sampling="full",
                  trace=trace, host=job.host, contention=job.contention)


def _node_names(topology) -> dict[int, str]:
    """'<tier><index within its tier>' of every node (GPU nodes: 'gpu<id>')."""
    counts: dict[str, int] = {}
    names = {}
    for node in topology.nodes:
        k = counts.get(node.tier, 0)
        counts[node.tier] = k + 1
        names[node.id] = f"{node.tier}{k}"
    return names


@dataclass
class ClusterReport:
    jobs: list[dict]                  # name, world, gpus, placement, start_s, iterations, alone_s, shared_s, slowdown
    links: list[dict]                 # every link that carried traffic, hottest first
    makespan_s: float
    meta: dict = field(default_factory=dict)
    job_gpus: list = field(default_factory=list, repr=False)    # GPU ids (index = rank) per job
    topology: object = field(default=None, repr=False)          # the shared topology (for the picture)

    def hot_links(self, n: int = 8) -> list[dict]:
        return self.links[:n]

    def to_dict(self, top_n: int = 8) -> dict:
        return {"jobs": self.jobs, "makespan_s": self.makespan_s, "hot_links": self.hot_links(top_n),
                "meta": dict(self.meta),
                "formulas": {"slowdown": "shared mean iteration time / alone iteration time",
                             "utilization": "bytes carried / (effective capacity x makespan_s)"}}


def simulate_cluster(specs: list[JobSpec], topology, *, gpu: str | None = None, db=None, network_options=None,
                     net_calibration=None, overheads: bool = True, contention: bool = True,
                     faults=None) -> ClusterReport:
    """Simulate the jobs alone and together on one flow network (module docstring).

    faults: a topo.faults.FaultSet applied to the shared fabric; jobs are placed on the healthy
    fabric (the automatic placements skip failed GPUs), then every job must be placeable on the faulted
    one (sim.fabric_faults.check_placeable: one-line SimError naming the job) and all runs use it."""
    import netsim
    from sim.contention import ContentionModel
    from sim.inputs import default_gpu, resolve_default_nvlink
    from sim.overheads import for_plan
    from sim.placement import place
    from sim.simulation import compute_op_times
    if not specs:
        raise SimError("cluster: give at least one --job")
    if len({s.name for s in specs}) != len(specs):
        raise SimError("cluster: two jobs have the same name (name=...)")
    if db is None:
        from compute_db import open_db
        db = open_db()
    gpu_spec = db.gpu(default_gpu(topology, gpu))
    topology = resolve_default_nvlink(topology, gpu_spec)
    workloads = [build_workload(s) for s in specs]
    worlds = [int(w.plan.world_size) for w in workloads]
    healthy, unavailable = topology, []
    if faults:
        from topo.faults import apply_faults, resolve_faults
        failed = resolve_faults(healthy, faults).failed_nodes
        unavailable = sorted(g for g in failed if g < healthy.num_gpus and healthy.nodes[g].kind == "gpu")
        topology = apply_faults(healthy, faults)
    gpu_lists = place_jobs(worlds, [s.placement for s in specs], healthy, [w.plan for w in workloads], unavailable)
    jobs = []
    for s, w, gl in zip(specs, workloads, gpu_lists):
        pl = place(w.plan, topology, gl)
        if faults:
            from sim.fabric_faults import check_placeable
            try:
                check_placeable(healthy, faults, topology, pl)
            except SimError as exc:
                raise SimError(str(exc).replace("job unplaceable", f"job '{s.name}' unplaceable", 1)) from None
        times, _ = compute_op_times(w, gpu_spec.name, db)
        cm = ContentionModel(gpu_spec, bool(getattr(w.plan, "tp_comm_overlap", False))) if contention else None
        jobs.append(_Job(s, w, pl, times, for_plan(w.plan) if overheads else None, cm))
    opts = dict(network_options or {})
    if net_calibration is not None:
        opts["net_calibration"] = net_calibration

    def backend():
        return netsim.make_backend("flow", topology, **opts)

    alone, used = [], []
    for j in jobs:
        net = backend()
        alone.append(_engine(j, topology, net).run().iteration_time_s)
        used.append(np.flatnonzero(net.engine.link_bytes > 0))
    net = backend()
    ends = _run_shared(jobs, topology, net)
    makespan = max(ends[i][-1] for i in range(len(jobs)))
    rows = []
    for i, j in enumerate(jobs):
        shared = (ends[i][-1] - j.spec.start_s) / j.spec.iterations
        rows.append({"name": j.spec.name, "world": worlds[i], "placement": j.spec.placement,
                     "gpus": _ranges(gpu_lists[i]), "start_s": j.spec.start_s, "iterations": j.spec.iterations,
                     "alone_s": alone[i], "shared_s": shared,
                     "slowdown": shared / alone[i] if alone[i] > 0 else math.nan})
    links = _link_rows(net, topology, makespan, used, [j.spec.name for j in jobs])
    meta = {"topology_gpus": int(topology.num_gpus), "gpu": gpu_spec.name, "network": "flow", "sampling": "full",
            "overheads_model": "on" if overheads else "off", "contention_model": "on" if contention else "off"}
    if faults:
        meta["faults"] = faults.describe()
    return ClusterReport(jobs=rows, links=links, makespan_s=makespan, meta=meta, job_gpus=gpu_lists,
                         topology=topology)


def _run_shared(jobs: list[_Job], topology, net) -> list[list[float]]:
    """Interleave every job's engines over the one backend `net`; end time of each iteration per job."""
    ends: list[list[float]] = [[] for _ in jobs]
    active = []
    for i, j in enumerate(jobs):
        eng = _engine(j, topology, net)
        eng.start(j.spec.start_s)
        active.append([i, eng])
    while True:
        t_net = net.next_event_time()
        best, t_best = None, math.inf
        for entry in active:
            t = entry[1].next_time()
            if t < t_best:
                best, t_best = entry, t
        if t_net == math.inf and t_best == math.inf:
            break
        if t_net <= t_best:
            for _, eng in active:
                eng._now = max(eng._now, t_net)
            net.advance(t_net)
            continue
        i, eng = best
        eng.step_one()
        if eng.all_finished and eng.next_time() == math.inf:
            res = eng.finish()
            ends[i].append(eng.t0_s + res.iteration_time_s)
            active.remove(best)
            if len(ends[i]) < jobs[i].spec.iterations:
                nxt = _engine(jobs[i], topology, net)
                nxt.start(ends[i][-1])
                active.append([i, nxt])
    stuck = [jobs[i].spec.name for i, _ in active]
    if stuck:
        raise SimError(f"cluster simulation deadlocked: job(s) {', '.join(stuck)} never finished")
    return ends


def _link_rows(net, topology, makespan_s: float, used: list, names: list[str]) -> list[dict]:
    view = net.planner.view
    cap = np.asarray(view.capacity_Bps, dtype=float)
    carried = np.asarray(net.engine.link_bytes, dtype=float)
    util = np.where((cap > 0) & (makespan_s > 0), carried / (cap * max(makespan_s, 1e-300)), 0.0)
    node = _node_names(topology)
    users: dict[int, list[str]] = {}
    for name, ids in zip(names, used):
        for lk in ids.tolist():
            users.setdefault(lk, []).append(name)
    order = np.lexsort((np.arange(len(util)), -util))
    rows = []
    for lk in order.tolist():
        if carried[lk] <= 0:
            break
        rows.append({"link": int(lk), "name": f"{node[int(view.ch_src[lk])]} -> {node[int(view.ch_dst[lk])]}",
                     "kind": str(view.ch_kind[lk]), "capacity_Bps": float(cap[lk]), "bytes": float(carried[lk]),
                     "utilization": float(util[lk]), "jobs": "+".join(users.get(lk, []))})
    return rows


def _ranges(ids: list[int]) -> str:
    """[0,1,2,5] -> '0-2,5'."""
    out, start = [], None
    for k, g in enumerate(ids):
        if start is None:
            start = g
        if k + 1 == len(ids) or ids[k + 1] != g + 1:
            out.append(f"{start}-{g}" if g != start else f"{g}")
            start = None
    return ",".join(out)


def format_cluster(rep: ClusterReport, top_n: int = 8) -> str:
    lines = [f"{'job':<14s}{'GPUs':>6s}  {'placement':<14s}{'start s':>9s}{'alone s':>12s}{'shared s':>12s}"
             f"{'slowdown':>10s}"]
    for r in rep.jobs:
        lines.append(f"{r['name'][:13]:<14s}{r['world']:>6d}  {r['placement'][:13]:<14s}{r['start_s']:9.3f}"
                     f"{r['alone_s']:12.6f}{r['shared_s']:12.6f}{r['slowdown']:9.4f}x")
    lines.append(f"makespan {rep.makespan_s:.6f} s; hottest links (mean utilisation over the makespan):")
    for lk in rep.hot_links(top_n):
        lines.append(f"  {lk['name']:<24s} {lk['kind']:<8s} {100 * lk['utilization']:6.2f} %   jobs {lk['jobs'] or '-'}")
    return "\n".join(lines)


CLUSTER_FILES = ("summary.json", "summary.txt", "links.csv", "cluster.png", "report.html")


def write_cluster_results(rep: ClusterReport, out: str | Path, top_n: int = 8, extra: dict | None = None,
                          charts: bool = True) -> Path:
    """summary.json, summary.txt, links.csv (every link that carried traffic) and cluster.png (the
    fabric with the jobs and hot links, sim.cluster_draw), written atomically."""
    import csv
    import io
    import json

    from sim.report import atomic_dir

    def write(tmp: Path) -> None:
        data = rep.to_dict(top_n)
        if extra:
            data["inputs"] = extra
        (tmp / "summary.json").write_text(json.dumps(data, indent=2) + "\n")
        (tmp / "summary.txt").write_text(format_cluster(rep, top_n) + "\n")
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=["link", "name", "kind", "capacity_Bps", "bytes", "utilization", "jobs"],
                           lineterminator="\n")
        w.writeheader()
        w.writerows(rep.links)
        (tmp / "links.csv").write_text(buf.getvalue())
        if charts and rep.topology is not None:
            from sim.cluster_draw import draw_cluster
            draw_cluster(rep, rep.topology, rep.job_gpus, tmp / "cluster.png", top_n)
        from sim.html.cluster_report import write_cluster_html
        write_cluster_html(rep, tmp, top_n)   # report.html (embeds cluster.png)
    return atomic_dir(out, write, CLUSTER_FILES)
