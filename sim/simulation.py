"""sim.simulate: one training iteration of a Workload on a Topology -> StepReport.

Formulas reported (all per iteration, T = iteration time):
- compute_s, exposed_comm_s[TP|CP|EP|DP|PP], overhead_s, bubble_s: means over pipeline stages of each
  stage representative's time split (they sum to T; per-stage values in StepReport.stages).
  compute_s is kernel time including overlap_slowdown_s, the part added by communication in flight
  (sim.contention); overhead_s is compute-stream time waiting for launches and the host (sim.overheads).
- tflops_per_gpu = executed FLOPs of all ranks (recompute included) / (world_size * T) / 1e12.
- mfu = model FLOPs of all ranks (recompute excluded) / (world_size * T * peak dense FLOP/s of the
  plan's dtype on `gpu`).
- tokens_per_s_per_gpu = global_batch_size * seq_length / (T * world_size).
- compute_sources: fraction of executed kernel time per compute_db provenance
  ("measured", "interpolated", "modeled", "given").
- memory: peak per-GPU memory of the plan (sim.analysis.memory) against the GPU's HBM
  (sim.memory_fit); fields are None for imported SimAI workloads.

Tables (StepReport.to_dataframe): "stages" (one row per pipeline stage's representative rank; column means
are the summary's split), "layers" (per-layer rows of stage 0's representative, as EndToEnd.csv),
"collectives" (every communication operation of every representative rank, pipeline sends included;
exposed_s summed per stage and group is the stage's exposed time).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from sim.engine import REPORT_KEYS, Engine, report_group
from sim.errors import SimError
from sim.lazy_rows import LazyRows, timed_row
from sim.placement import Placement, place


def _finite_or_none(x: float) -> float | None:
    """JSON has no NaN: unknown metrics are written as null."""
    return x if math.isfinite(x) else None


@dataclass
class StepReport:
    """One simulated iteration; mfu / tflops_per_gpu / tokens_per_s_per_gpu are NaN when the workload
    carries no FLOPs or sequence length (SimAI files)."""

    iteration_time_s: float
    compute_s: float
    exposed_comm_s: dict
    bubble_s: float
    mfu: float
    tflops_per_gpu: float
    tokens_per_s_per_gpu: float
    compute_sources: dict
    overhead_s: float = 0.0            # launch gaps + host issue/synchronisation (sim.overheads)
    overlap_slowdown_s: float = 0.0    # of compute_s: kernels slowed by communication in flight
    stages: list = field(default_factory=list)        # per stage: dict of the same split
    exposed_by_group_kind_s: dict = field(default_factory=dict)   # raw group kind -> mean exposed s
    meta: dict = field(default_factory=dict)
    layers: dict = field(default_factory=dict, repr=False)     # row -> engine.LayerStats (stage 0)
    trace: list = field(default_factory=list, repr=False)
    rep_ranks: list = field(default_factory=list, repr=False)
    rep_gpus: list = field(default_factory=list, repr=False)
    memory: dict | None = None      # sim.memory_fit.memory_fit: peak bytes per GPU, capacity, fits
    kernel_time_by_family: dict = field(default_factory=dict)   # family -> provenance -> nominal kernel s
    # one dict per communication operation (a list; a fast run's are built when first read: _collectives_of)
    collectives: list = field(default_factory=list, repr=False)
    rank_stage: list = field(default_factory=list, repr=False)   # rank -> pipeline stage
    stragglers: dict | None = None  # sim.straggler.straggler_section when stragglers were simulated
    # traced runs: {"links": [netsim.linktrace.LinkSeries of the hottest links], "note": str}
    link_loads: dict | None = field(default=None, repr=False)
    placement: Placement | None = field(default=None, repr=False)   # ranks -> GPUs and groups (trace ranks)

    FORMULAS = {
        "mfu": "model FLOPs (no recompute) of all ranks / (world_size * iteration_time_s * peak dense FLOP/s of plan dtype)",
        "tflops_per_gpu": "executed FLOPs (recompute included) of all ranks / (world_size * iteration_time_s) / 1e12",
        "tokens_per_s_per_gpu": "global_batch_size * seq_length / (iteration_time_s * world_size)",
        "time_split": "mean over pipeline stages of each stage representative's compute / exposed comm / overhead / "
                      "bubble; sums to iteration_time_s",
        "overhead": "compute stream idle for kernel launch gaps and host issue after host synchronisations "
                    "(sim.overheads)",
        "overlap_slowdown": "kernel time added by communication in flight on the same GPU: SM share of its "
                            "kernels and its HBM traffic (sim.contention); included in compute_s",
        "memory_fits": "peak reserved bytes per GPU (stage with the largest) + CUDA context <= GPU HBM bytes",
    }

    @property
    def exposed_total_s(self) -> float:
        return sum(self.exposed_comm_s.values())

    TABLES = ("stages", "layers", "collectives")

    def to_dataframe(self, table: str = "stages"):
        """A pandas DataFrame of one table (TABLES): stages, layers or collectives (seconds, bytes)."""
        from sim.frames import step_frame
        return step_frame(self, table)

    def _repr_html_(self) -> str:
        from sim.frames import step_html
        return step_html(self)

    def to_dict(self) -> dict:
        return {
            "iteration_time_s": self.iteration_time_s,
            "compute_s": self.compute_s,
            "exposed_comm_s": dict(self.exposed_comm_s),
            "exposed_comm_total_s": self.exposed_total_s,
            "overhead_s": self.overhead_s,
            "overlap_slowdown_s": self.overlap_slowdown_s,
            "bubble_s": self.bubble_s,
            "mfu": _finite_or_none(self.mfu),
            "tflops_per_gpu": _finite_or_none(self.tflops_per_gpu),
            "tokens_per_s_per_gpu": _finite_or_none(self.tokens_per_s_per_gpu),
            "compute_sources": dict(self.compute_sources),
            "kernel_time_by_family_s": {k: dict(v) for k, v in self.kernel_time_by_family.items()},
            "exposed_by_group_kind_s": dict(self.exposed_by_group_kind_s),
            "memory": dict(self.memory) if self.memory is not None else None,
            "stages": list(self.stages),
            "formulas": dict(self.FORMULAS),
            "meta": dict(self.meta),
            **({"stragglers": dict(self.stragglers)} if self.stragglers is not None else {}),
        }


def _collectives_of(rep: StepReport) -> list:
    """StepReport.collectives: the rows given, or the fast path's (sim.fastpath.CollectiveRows) built
    and kept on first read."""
    rows = rep.__dict__["_collectives"]
    if type(rows) is not list:
        rows = rep.__dict__["_collectives"] = rows.build()
    return rows


def _set_collectives(rep: StepReport, rows) -> None:
    rep.__dict__["_collectives"] = rows


# a property over the dataclass field: __init__, dataclasses.fields / asdict / replace, == and pickling
# (of __dict__: a CollectiveRows pickles as the list it builds) see the field as before
StepReport.collectives = property(_collectives_of, _set_collectives,
                                  doc="One dict per communication operation (see the module docstring).")


def _iter_counts(workload):
    """(stage, op, executions per iteration) for every op of every stage program."""
    m = int(workload.num_microbatches)
    for st in workload.stages:
        for op in st.iteration_start:
            yield st.stage, op, 1
        for op in st.iteration_end:
            yield st.stage, op, 1
        for ch in st.chunks:
            for op in list(ch.forward) + list(ch.backward):
                n = m if op.microbatch == "all" else 1
                yield st.stage, op, n


def compute_op_times(workload, gpu: str, db=None) -> tuple[dict, dict]:
    """id(op) -> seconds and id(op) -> provenance for every ComputeOp of the workload."""
    ops, seen = [], set()
    for _, op, _ in _iter_counts(workload):
        if not op.is_comm and id(op) not in seen:
            seen.add(id(op))
            ops.append(op)
    times: dict[int, float] = {}
    sources: dict[int, str] = {}
    need = [op for op in ops if op.time_s is None]
    for op in ops:
        if op.time_s is not None:
            if op.time_s < 0:
                raise SimError(f"op '{op.name}': negative given time {op.time_s}")
            times[id(op)] = float(op.time_s)
            sources[id(op)] = workload.meta.get("time_provenance", "given")   # "trace": Chakra import
    if need:
        if db is None:
            from compute_db import open_db
            db = open_db()
        unique: dict = {}
        for op in need:
            unique.setdefault(op, []).append(op)
        keys = list(unique)
        results = db.lookup_many(keys, gpu)
        for key, kt in zip(keys, results):
            for op in unique[key]:
                times[id(op)] = float(kt.time_s)
                sources[id(op)] = str(kt.source)
    return times, sources


def _db_name(db) -> str:
    from compute_db.db import SHIPPED_DB
    path = getattr(db, "path", None)
    return "shipped" if path is None or str(path) == str(SHIPPED_DB) else str(path)


def _calibration_source(cal) -> str | None:
    """A printable name of a user network calibration (None when netsim's own constants are used)."""
    if cal is None:
        return None
    return cal.path or cal.name or "user calibration"


def _flops(workload, times: dict, sources: dict, ranks_per_stage: int):
    from compute_db.keys import FAMILY
    executed = model = 0.0
    by_source: dict[str, float] = {}
    by_family: dict[str, dict[str, float]] = {}
    for _, op, n in _iter_counts(workload):
        if op.is_comm:
            continue
        executed += op.flops * n
        if op.phase != "recompute":
            model += op.flops * n
        src = sources[id(op)]
        t = times[id(op)] * n
        by_source[src] = by_source.get(src, 0.0) + t
        fam = by_family.setdefault(FAMILY.get(op.kind, op.kind), {})
        fam[src] = fam.get(src, 0.0) + t
    return executed * ranks_per_stage, model * ranks_per_stage, by_source, by_family


def simulate(workload, topology, *, gpu: str, network="flow", db=None, placement=None,
             progress: bool = False, sampling: str = "auto", trace: bool = False,
             row_key=None, network_options: dict | None = None, net_calibration=None,
             overheads=True, contention=True, stragglers=None, fast_path: bool = True) -> StepReport:
    """Simulate one training iteration.

    network: "flow" | "analytical" (netsim.make_backend) or a NetworkBackend object.
    db: a compute_db.ComputeDB (compute_db.open_db(path, gpu_file)); None: the shipped DB.
    net_calibration: a netsim network calibration (netsim.load_net_calibration) for a named backend.
    placement: None (contiguous), a Placement, a rank->GPU list or a mapping file path.
    sampling: "auto" (exploit NVLink-domain symmetry, see sim.engine) | "full".
    overheads: True (sim.overheads.for_plan), False, or a HostOverheads.
    contention: True (sim.contention.ContentionModel of the GPU), False, or a ContentionModel.
    stragglers: a sim.straggler.StragglerSpec: the iteration is simulated twice (healthy, then with the
    slow ranks; see sim.straggler) on fresh backends; the report is the straggler run's, with
    StepReport.stragglers comparing both. Needs a named network backend.
    fast_path: on a contention-free backend, run the iteration arithmetically (sim.fastpath; same
    results) unless something needs the event engine; meta["engine"] says which ran and why.
    """
    from sim.fastpath import fewer_gc_passes, no_cyclic_gc
    analytical = (network if isinstance(network, str) else getattr(network, "kind", "")) == "analytical"
    # an analytical run builds 10^5 records and routes in about a second: the cyclic collector is paused
    # (it would re-scan them all several times) and collects after the run; flow runs keep it, less often
    # (long runs must still free their cyclic garbage): a young generation of 2 * 10^5 objects (~20 MB)
    # keeps full collections, which re-scan the 10^6 handles and records of a deep pipeline, rare (1T
    # benchmark: 0.6 s of collections instead of 1.2 s at 5 * 10^4)
    with no_cyclic_gc() if analytical else fewer_gc_passes(200_000):
        return _simulate(workload, topology, gpu=gpu, network=network, db=db, placement=placement,
                         progress=progress, sampling=sampling, trace=trace, row_key=row_key,
                         network_options=network_options, net_calibration=net_calibration,
                         overheads=overheads, contention=contention, stragglers=stragglers, fast_path=fast_path)


def _simulate(workload, topology, *, gpu, network, db, placement, progress, sampling, trace, row_key,
              network_options, net_calibration, overheads, contention, stragglers, fast_path) -> StepReport:
    t_wall = time.perf_counter()
    plan = workload.plan
    if db is None:
        from compute_db import open_db
        db = open_db()
    spec = db.gpu(gpu)
    from sim.inputs import resolve_default_nvlink
    topology = resolve_default_nvlink(topology, spec)
    pl = placement if isinstance(placement, Placement) else place(plan, topology, placement)
    times, sources = compute_op_times(workload, spec.name, db)
    from sim.memory_fit import memory_fit
    memory = memory_fit(workload, spec)
    if isinstance(network, str):
        import netsim
        opts = dict(network_options or {})
        if net_calibration is not None:
            opts["net_calibration"] = net_calibration
        if trace and network == "flow":
            opts.setdefault("record_link_changes", True)   # link counters of the trace (netsim.linktrace)
        if network == "flow":
            opts.setdefault("keep_records", False)   # per-collective records: not read by the simulator
        backend = netsim.make_backend(network, topology, **opts)
        net_name = network
    else:
        backend = network
        net_name = type(network).__name__
    from sim.contention import ContentionModel
    from sim.overheads import HostOverheads, for_plan
    host = (for_plan(plan) if overheads is True else overheads if isinstance(overheads, HostOverheads) else None)
    cm = (ContentionModel(spec, bool(getattr(plan, "tp_comm_overlap", False))) if contention is True
          else contention if isinstance(contention, ContentionModel) else None)
    section = factors = None
    if stragglers is not None and stragglers.active:
        if not isinstance(network, str):
            raise SimError("stragglers: give the network backend by name (flow or analytical), not an object")
        from sim.straggler import rank_factors, stage_factors
        rank_f = rank_factors(stragglers, int(plan.world_size))
        factors = stage_factors(rank_f, pl)
        healthy = Engine(workload, pl, topology, netsim.make_backend(network, topology, **opts),
                         lambda op: times[id(op)], sampling=sampling, row_key=row_key, host=host,
                         contention=cm).run()
    def engine():
        return Engine(workload, pl, topology, backend, lambda op: times[id(op)], sampling=sampling,
                      trace=trace, row_key=row_key, progress=progress, host=host, contention=cm,
                      stage_factors=factors)
    eng = engine()
    from sim.fastpath import applies, run_fast
    why_events = applies(eng) if fast_path else "fast_path=False"
    res = run_fast(eng) if why_events is None else None
    if res is None:
        if why_events is None:
            why_events, eng = "the fast path met a case it cannot order", engine()
        res = eng.run()
    if factors is not None:
        from sim.straggler import straggler_section
        section = straggler_section(stragglers, rank_f, factors, healthy, res, pl)
    T = res.iteration_time_s
    world = int(plan.world_size)
    n_st = len(res.stages)
    compute = sum(s.compute_s for s in res.stages) / n_st
    exposed = {k: sum(s.exposed_s[k] for s in res.stages) / n_st for k in REPORT_KEYS}
    by_kind: dict[str, float] = {}
    for s in res.stages:
        for k, v in s.exposed_kind_s.items():
            by_kind[k] = by_kind.get(k, 0.0) + v / n_st
    bubble = sum(s.bubble_s for s in res.stages) / n_st
    overhead = sum(s.overhead_s for s in res.stages) / n_st
    slowdown = sum(s.slowdown_s for s in res.stages) / n_st
    executed, model_flops, by_source, by_family = _flops(workload, times, sources, world // int(plan.pp))
    total_kernel = sum(by_source.values()) or 1.0
    peak = spec.peak_flops.get(plan.dtype) or spec.peak_flops.get("bf16", 0.0)
    tokens = int(plan.global_batch_size) * int(plan.seq_length)
    stages = [{"stage": i, "rank": res.rep_ranks[i], "gpu": pl.gpu_of(res.rep_ranks[i]),
               "compute_s": s.compute_s, "exposed_comm_s": dict(s.exposed_s), "overhead_s": s.overhead_s,
               "overlap_slowdown_s": s.slowdown_s, "bubble_s": s.bubble_s,
               "busy_until_s": s.end_s} for i, s in enumerate(res.stages)]
    meta = {
        "gpu": spec.name, "network": net_name, "world_size": world, "topology_gpus": int(topology.num_gpus),
        "tp": plan.tp, "pp": plan.pp, "cp": plan.cp, "ep": plan.ep, "dp": plan.dp, "vpp": plan.vpp,
        "num_microbatches": int(workload.num_microbatches), "schedule": workload.schedule,
        "global_batch_size": plan.global_batch_size, "seq_length": plan.seq_length, "dtype": plan.dtype,
        "model": getattr(workload.model, "name", ""), "sampling": sampling,
        "network_collectives": res.comm_count, "estimated_collectives": res.bypassed,
        "isolated_kinds": list(res.isolated), "peak_flops": peak,
        "executed_flops": executed, "model_flops": model_flops,
        "tokens_known": workload.meta.get("imported_from") != "simai" and workload.meta.get("model_known", True),
        "overheads_model": host.describe() if host is not None else "off",
        "contention_model": cm.describe() if cm is not None else "off",
        "contention_sm_term": bool(cm is not None and cm.has_sm_term),
        "net_calibration": _calibration_source(net_calibration),
        "compute_db": _db_name(db),
        "engine": "arithmetic (sim.fastpath)" if why_events is None else f"events (sim.engine): {why_events}",
        "wall_time_s": time.perf_counter() - t_wall,
    }
    from sim.fastpath import no_cyclic_gc
    with no_cyclic_gc():    # 10^5 rows and trace entries on large runs
        collective_rows = res.collective_rows     # sim.fastpath builds its own
        if collective_rows is None:
            collective_rows = _LogRows(res.comm_log, res.rep_ranks, eng.row_key)
        trace_events, link_load_data = res.trace, None
        if trace:
            from sim.trace_args import annotate, link_loads
            trace_events = annotate(res.trace, times, sources, eng, backend)
            link_load_data = link_loads(backend)
    return StepReport(
        iteration_time_s=T, compute_s=compute, exposed_comm_s=exposed, bubble_s=bubble,
        # NaN when the workload does not say (SimAI files carry kernel times, no FLOPs or sequence length)
        mfu=model_flops / (world * T * peak) if T > 0 and peak > 0 and executed > 0 else math.nan,
        tflops_per_gpu=executed / (world * T) / 1e12 if T > 0 and executed > 0 else math.nan,
        tokens_per_s_per_gpu=tokens / (T * world) if T > 0 and meta["tokens_known"] else math.nan,
        compute_sources={k: v / total_kernel for k, v in sorted(by_source.items())},
        overhead_s=overhead, overlap_slowdown_s=slowdown, kernel_time_by_family=by_family, stages=stages, exposed_by_group_kind_s=by_kind, meta=meta, layers=res.layers, trace=trace_events,
        rep_ranks=res.rep_ranks, rep_gpus=[pl.gpu_of(r) for r in res.rep_ranks], memory=memory,
        collectives=collective_rows,
        rank_stage=pl.stage_of_ranks(), stragglers=section,
        link_loads=link_load_data, placement=pl)


class _LogRows(LazyRows):
    """StepReport.collectives of an event-engine run, built (build(): _collective_rows) when the report
    is first asked for them, as sim.fastpath.CollectiveRows: a 1T-parameter run at PP 64 logs about
    10^6 operations, whose rows a run's summary never reads. The log's entries are finished (their
    fields no longer change), so the rows are the ones simulate would have built."""

    __slots__ = ("_rep_ranks", "_row_key")

    def __init__(self, log: list, rep_ranks, row_key) -> None:
        super().__init__(log)
        self._rep_ranks = rep_ranks
        self._row_key = row_key

    def build(self) -> list[dict]:
        from sim.fastpath import no_cyclic_gc
        with no_cyclic_gc():    # 10^5 dicts at once
            return _collective_rows(self._log, self._rep_ranks, self._row_key)


def _collective_rows(log, rep_ranks, row_key) -> list[dict]:
    """Plain rows of the engine's communication log (times in s from the iteration start): Handles
    (or records with their fields) and (sim.engine.FastOp, start_s, done_s, exposed_s) tuples.

    Every field but the times is the same at every execution of one op by one stage, so each row is a
    copy of a per-op prefix dict (fields in row order, the four times last) with the times set."""
    rows = []
    append = rows.append
    prefixes: dict = {}
    for h in log:
        if type(h) is tuple:
            info, start, end, exposed = h
            pre = prefixes.get(id(info))
            if pre is None:
                # the FastOp lives as long as the log (it is in it), so its id stays unique
                op = info.op
                pre = prefixes[id(info)] = _row_prefix(
                    info.stage, rep_ranks[info.stage], info.kind, info.report_group, op.name, op.collective,
                    info.size_bytes, info.group_size, None, row_key(op), getattr(op, "phase", "pipeline"),
                    bool(op.blocking), "estimate")
        else:
            op = h.op
            start, end, exposed = h.start_s, h.done_s, h.exposed_s
            if h.kind == "pp":       # a pipeline send (no CommOp): its name differs per send
                pre = _row_prefix(h.stage, rep_ranks[h.stage], "pp", "PP", h.name, h.collective, h.size_bytes,
                                  h.group_size, h.peer_stage, "pipeline", getattr(op, "phase", "pipeline"),
                                  bool(op.blocking) if op is not None else False,
                                  "estimate" if h.fast else "network")
            else:
                key = (id(op), h.kind, h.stage, h.name, h.collective, h.size_bytes, h.group_size, h.fast)
                pre = prefixes.get(key)
                if pre is None:     # ops live as long as the workload, so their ids stay unique
                    pre = prefixes[key] = _row_prefix(
                        h.stage, rep_ranks[h.stage], h.kind, report_group(h.kind), h.name, h.collective,
                        h.size_bytes, h.group_size, None, row_key(op), getattr(op, "phase", "pipeline"),
                        bool(op.blocking) if op is not None else False, "estimate" if h.fast else "network")
        append(timed_row(pre, start, end, exposed))
    return rows


def _row_prefix(stage, rank, group, report, name, collective, size_bytes, group_size, peer_stage, layer, phase,
                blocking, timing) -> dict:
    """A StepReport.collectives row with its times unset (NaN), in the row's field order."""
    return {"stage": stage, "rank": rank, "group": group, "report_group": report, "name": name,
            "collective": collective, "size_bytes": size_bytes, "group_size": group_size,
            "peer_stage": peer_stage, "layer": layer, "phase": phase, "blocking": blocking, "timing": timing,
            "start_s": math.nan, "end_s": math.nan, "duration_s": math.nan, "exposed_s": math.nan}
