"""Prefill/decode disaggregation: a prefill pool and a decode pool of replicas on disjoint GPUs of one
fabric, the KV cache of every request moved between them as flows on the fabric.

    from sim.serve.disagg import DisaggPlan, simulate_disaggregated, compare_colocated
    dplan = DisaggPlan(prefill=ServingPlan(tp=1, replicas=2), decode=ServingPlan(tp=2, replicas=1),
                       kv_transfer="layerwise")
    run = simulate_disaggregated("llama3-8b", dplan, RequestConfig(num_requests=500, qps=8, lengths="chat"))
    run.summary       # simulate_serving's keys (metrics, throughput, goodput, ...) + "kv_transfer", "pools"
    run.requests      # simulate_serving's columns + prefill_replica, kv_bytes, kv_transfer_start, ...
    run.transfers     # kv_transfers.csv: request_id, bytes, src_gpu, dst_gpu, start_s, end_s

The model. A request arrives at the prefill pool (routed by the prefill plan's router), is prefilled
there by the pool's scheduler (chunked or whole, batched with other prefills, never with decodes) and
emits its first token at the end of the iteration that processes its last prompt token: TTFT ends there.
Its KV cache then moves to a decode replica (sim.serve.kv_transfer: per TP rank / PP stage of the layers
each holds, netsim's point-to-point send model, max-min shared with every other transfer in flight),
"whole" after the prefill ends or "layerwise" streamed as the prefill's layers produce it. The decode
replica is chosen by the decode plan's router when the transfer starts (at the first token for "whole",
at the first prefill chunk for "layerwise"), with the decode pool's state at that instant. Once the KV
has landed the request waits for free KV blocks on its decode replica (FIFO), is admitted with its
prompt's blocks and decodes tokens 2..D with no prefill compute; the gap to token 2 therefore holds the
exposed transfer, the decode queueing and the first decode iteration. A request with one output token
ends at its prefill (no transfer).

Method: the system is feed-forward except for the decode router's view of decode completions. The
prefill pool never waits on the decode side (back-pressure from a full decode pool is ignored: landed KV
is staged until admitted, and the prefill replica frees the request's blocks at its first token), so
(1) the prefill pool is simulated alone, every request with one output token, recording every prefill
chunk's stage runs; (2)+(3) the decode pool runs on the same clock as the KV flows (the engine's KV
hand-off): a request becomes ready when its transfer may start, is routed, its flows start (some later:
chunks still to run), and it joins the replica when its last flow lands. Each pool has its own GPU type
(kernel times, memory), cost model and KV capacity; the fabric is one topology: prefill replicas on the
first GPUs, decode replicas on the next (DisaggPlan.mapping: any GPU ids, prefill ranks first).

Ignored: KV flows contending with the pools' TP/PP collectives; the pools' collectives contending with
each other (each pool's timer sees only its own replicas); the decode router's choice being informed by
transfers in flight beyond its outstanding-request counts.
"""

from __future__ import annotations

import math
from array import array
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from sim.errors import SimError
from sim.serve.engine import ServeResult, _request_arrays, simulate
from sim.serve.entities import BatchLog, PrefilledRequests, Request, TokenGaps
from sim.serve.kv_transfer import KVTransfer, rank_streams
from sim.serve.metrics import SLO, format_summary, replica_frame, request_frame, summarize
from sim.serve.plan import KV_MODES, ServingPlan

POOLS = ("prefill", "decode")


@dataclass(frozen=True)
class DisaggPlan:
    """A disaggregated deployment: two ServingPlans (replicas, tp, pp, scheduler, router, ... each), the
    compute_db GPU of each pool (None: the topology's GPU type), the KV transfer mode and, optionally,
    the topology GPU ids of the ranks (prefill replicas' ranks first, then the decode replicas', each in
    sim.serve.replica's order; None: 0, 1, 2, ...)."""
    prefill: ServingPlan
    decode: ServingPlan
    prefill_gpu: str | None = None
    decode_gpu: str | None = None
    kv_transfer: str = "layerwise"
    mapping: tuple[int, ...] | None = None

    @property
    def prefill_gpus(self) -> int:
        return self.prefill.num_gpus

    @property
    def decode_gpus(self) -> int:
        return self.decode.num_gpus

    @property
    def num_gpus(self) -> int:
        return self.prefill.num_gpus + self.decode.num_gpus

    def gpu_ids(self) -> tuple[list[int], list[int]]:
        """(prefill pool GPU ids, decode pool GPU ids) on the topology."""
        ids = list(self.mapping) if self.mapping is not None else list(range(self.num_gpus))
        return ids[:self.prefill_gpus], ids[self.prefill_gpus:self.num_gpus]

    def describe(self) -> str:
        p, d = self.prefill, self.decode
        return (f"prefill {p.replicas} x (tp {p.tp} pp {p.pp}) {p.scheduler} + decode {d.replicas} x (tp {d.tp} "
                f"pp {d.pp}) {d.scheduler}, KV transfer {self.kv_transfer}")


def validate_split(dplan: DisaggPlan, budget=None) -> None:
    """Check a disaggregated plan (both pools' fields, the transfer mode, the mapping) and that it fits
    `budget` (a GPU count or a topology; None: no limit). SimError, one line, naming what is wrong."""
    from sim.serve.validation import validate_serving_plan
    if not isinstance(dplan, DisaggPlan):
        raise SimError(f"expected a DisaggPlan (got {type(dplan).__name__})")
    for name in POOLS:
        plan = getattr(dplan, name)
        if not isinstance(plan, ServingPlan):
            raise SimError(f"{name} pool: expected a ServingPlan (got {type(plan).__name__})")
        try:
            validate_serving_plan(plan)
        except SimError as exc:
            raise SimError(f"{name} pool: {exc}") from None
    if dplan.kv_transfer not in KV_MODES:
        raise SimError(f"kv_transfer '{dplan.kv_transfer}': expected one of {', '.join(KV_MODES)}")
    if dplan.prefill.kv_cache_dtype != dplan.decode.kv_cache_dtype:
        raise SimError(f"KV cache dtype differs between the pools (prefill {dplan.prefill.kv_cache_dtype}, decode "
                       f"{dplan.decode.kv_cache_dtype}): the cache moves as it is, give both the same --kv-dtype")
    need = dplan.num_gpus
    if budget is not None:
        have = int(getattr(budget, "num_gpus", budget))
        if need > have:
            p, d = dplan.prefill, dplan.decode
            raise SimError(f"disaggregated split needs {need} GPUs (prefill {p.replicas} x tp {p.tp} x pp {p.pp} = "
                           f"{p.num_gpus} + decode {d.replicas} x tp {d.tp} x pp {d.pp} = {d.num_gpus}) but the GPU "
                           f"budget is {have}")
    if dplan.mapping is not None:
        ids = list(dplan.mapping)
        if len(ids) < need:
            raise SimError(f"mapping lists {len(ids)} GPUs but the disaggregated deployment needs {need}")
        ids = ids[:need]
        if any(isinstance(g, bool) or not isinstance(g, (int, np.integer)) or g < 0 for g in ids):
            raise SimError("mapping: GPU ids must be integers >= 0")
        if len(set(ids)) != need:
            raise SimError("mapping assigns the same GPU twice (the pools need disjoint GPUs)")
        if budget is not None and max(ids) >= int(getattr(budget, "num_gpus", budget)):
            raise SimError(f"mapping names GPU {max(ids)}, the budget is {int(getattr(budget, 'num_gpus', budget))} "
                           "GPUs")


@dataclass
class DisaggRun:
    """A finished disaggregated simulation.

    result: both pools as one ServeResult (prefill replicas 0..Rp-1, decode replicas Rp..; its plan is the
    decode plan with replicas = Rp + Rd and pp = the larger pp, for the trace's thread names);
    prefill / decode: each pool's ServingRun (decode None when no request has a second token);
    transfer: the KVTransfer (per-flow records); summary: simulate_serving's keys + "kv_transfer",
    "pools" (+ "comparison" after compare_colocated)."""
    result: ServeResult
    summary: dict
    prefill: object
    decode: object | None
    transfer: KVTransfer | None
    plan: DisaggPlan
    model: object
    request_notes: list[str] = field(default_factory=list)
    _frames: dict = field(default_factory=dict, repr=False)

    @property
    def requests(self) -> pd.DataFrame:
        if "requests" not in self._frames:
            self._frames["requests"] = disagg_request_frame(self)
        return self._frames["requests"]

    @property
    def transfers(self) -> pd.DataFrame:
        if self.transfer is None:
            return pd.DataFrame(columns=["request_id", "bytes", "src_gpu", "dst_gpu", "start_s", "end_s"])
        return self.transfer.transfers_frame()

    @property
    def replicas(self) -> pd.DataFrame:
        return pool_replica_frame(self)


# ---------------------------------------------------------------------------------------- helpers
def _topology(topology, dplan: DisaggPlan, db):
    from sim.serve.api import serving_topology
    return serving_topology(topology, dplan.num_gpus, dplan.prefill_gpu or dplan.decode_gpu, db)


def _check_pool(model, plan: ServingPlan, name: str) -> None:
    """The model-dependent sharding rules (workload_gen.inference), the error naming the pool."""
    from workload_gen import inference as inf
    from workload_gen.errors import WorkloadError
    try:
        inf.inference_spec(model, tp=plan.tp, pp=plan.pp, ep=plan.ep, weight_dtype=plan.weight_dtype,
                           kv_dtype=plan.kv_cache_dtype)
    except (WorkloadError, SimError) as exc:
        raise SimError(f"{name} pool: {exc}") from None


def _pool_setup(name, model, plan, topology, gpu, db, network, net_calibration, host, ids):
    """(BatchTimer, KVCachePlan) of one pool on its GPUs; errors name the pool."""
    from compute_db.errors import ComputeDBError
    from sim.serve.batch_time import make_timer
    from sim.serve.memory import plan_kv_cache_for_gpu
    try:
        timer = make_timer(model, plan, topology, gpu, db=db, network=network, net_calibration=net_calibration,
                           host=host, mapping=ids)
        return timer, plan_kv_cache_for_gpu(model, plan, timer.gpu, db)
    except (SimError, ComputeDBError) as exc:
        raise SimError(f"{name} pool: {exc}") from None


@dataclass
class _Arrays:
    arrived_at_s: np.ndarray
    num_prefill_tokens: np.ndarray
    num_decode_tokens: np.ndarray
    source: str = ""


def _serving_run(res, plan, timer, kv, model, db, slo, notes, duration_s):
    from sim.serve.api import ServingRun, kv_summary, peak_flops_per_s
    spec = db.gpu(timer.gpu)
    peak = peak_flops_per_s(spec, plan.weight_dtype)
    res_t = replace(res, duration_s=duration_s)       # pool busy % and KV use over the whole run
    run = ServingRun(res_t, summarize(res_t, peak, spec.hbm_Bps, slo), kv, timer, model, spec.name, peak,
                     spec.hbm_Bps, notes)
    run.summary["memory"] = kv_summary(kv)
    return run


# ---------------------------------------------------------------------------------------- simulation
def simulate_disaggregated(model, dplan: DisaggPlan, requests, *, topology=None, db=None,
                           network: str = "analytical", net_calibration=None, host="launch-gaps",
                           slo: SLO | None = None, seed: int = 0, progress: bool = False,
                           keep_token_times: bool = False, trace_cap: int | None = None) -> DisaggRun:
    """Simulate serving `requests` on a disaggregated deployment (module docstring for the model).

    model: ModelSpec, zoo name or model file; requests: RequestConfig (trimmed to the max model length,
    the smaller of the pools'), RequestSet or (arrival, prefill, decode) triples — not a closed loop
    (its arrivals would depend on decode completions); topology: Topology or spec string (None:
    Spectrum-X with whole 8-GPU servers for both pools); network/net_calibration/host: as
    simulate_serving, for both pools' iteration times (the KV transfer always runs on netsim's flow
    engine); seed: arrivals of a RequestConfig, the prefill router; the decode pool's random router
    uses seed + 1.
    """
    from sim.inputs import resolve_model
    from sim.serve.api import _resolve_requests, effective_plan, host_overhead

    validate_split(dplan)                  # the plan alone, before anything is built
    if isinstance(model, str):
        model = resolve_model(model)
    if db is None:
        from compute_db import open_db
        db = open_db()
    topology = _topology(topology, dplan, db)
    validate_split(dplan, topology)
    if isinstance(host, str):
        host = host_overhead(host)
    max_len = min(p.max_model_len or model.seq_length for p in (dplan.prefill, dplan.decode))
    plan_p, notes_p = effective_plan(model, dplan.prefill, max_len)
    plan_d, notes_d = effective_plan(model, dplan.decode, max_len)
    for name, plan in (("prefill", plan_p), ("decode", plan_d)):
        _check_pool(model, plan, name)
    streams = rank_streams(model, plan_p, plan_d)
    reqs = _resolve_requests(requests, max_len)
    notes = [f"prefill pool: {n}" for n in notes_p] + [f"decode pool: {n}" for n in notes_d]
    notes += list(reqs.report_lines()) if hasattr(reqs, "report_lines") else []
    arr, pre, dec, conc, source = _request_arrays(reqs)
    if conc is not None:
        raise SimError("a closed loop cannot drive a disaggregated deployment (its arrivals depend on decode "
                       "completions): use an open-loop arrival process")
    ids_p, ids_d = dplan.gpu_ids()
    kw = {} if trace_cap is None else {"trace_cap": trace_cap}

    # (1) the prefill pool: every request ends at its first token
    timer_p, kv_p = _pool_setup("prefill", model, plan_p, topology, dplan.prefill_gpu, db, network,
                                net_calibration, host, ids_p)
    layerwise = dplan.kv_transfer == "layerwise"
    ones = np.ones(len(pre), dtype=np.int64)
    res_p = simulate(_Arrays(arr, pre, ones, source), plan_p, timer_p, num_blocks=kv_p.num_blocks,
                     max_model_len=max_len, seed=seed, progress=progress, record_chunks=layerwise, **kw)
    by_id = res_p.requests                             # sorted by id = arrival order
    # (2)+(3) the decode pool with the KV flows on its clock
    decode_ids = [i for i in range(len(by_id)) if int(dec[i]) >= 2]
    chunks = None
    if layerwise:
        chunks = {}
        log = res_p.chunks
        for rid, s, t0, d, c in zip(log.request, log.stage, log.start_s, log.dur_s, log.tokens):
            chunks.setdefault(rid, []).append((s, t0, d, c))
    prepped: list[tuple[float, int, Request]] = []
    for i in decode_ids:
        rp = by_id[i]
        r = Request.prefilled_elsewhere(i, rp.arrived_at_s, rp.num_prefill, int(dec[i]),
                                        first_scheduled_s=rp.first_scheduled_s, first_token_s=rp.first_token_s,
                                        exec_s=rp.exec_s, model_exec_s=rp.model_exec_s, restarts=rp.restarts)
        if keep_token_times:
            r.token_times = array("d", [rp.first_token_s])
        ready = min(row[1] for row in chunks[i] if row[0] == 0) if layerwise else rp.first_token_s
        prepped.append((ready, i, r))
    prepped.sort(key=lambda x: (x[0], x[1]))
    transfer = None
    res_d = None
    timer_d = kv_d = None
    if prepped:
        timer_d, kv_d = _pool_setup("decode", model, plan_d, topology, dplan.decode_gpu, db, network,
                                    net_calibration, host, ids_d)
        from netsim.backend import Planner
        planner = Planner(topology, net_calibration=net_calibration)
        transfer = KVTransfer(streams, timer_p.placement, timer_d.placement, planner, dplan.kv_transfer,
                              {r.id: by_id[r.id].replica for _, _, r in prepped}, chunks)
        res_d = simulate(PrefilledRequests([x[0] for x in prepped], [x[2] for x in prepped], source), plan_d,
                         timer_d, num_blocks=kv_d.num_blocks, max_model_len=max_len, seed=seed + 1,
                         progress=progress, keep_token_times=keep_token_times, handoff=transfer, **kw)
    merged = _merge(res_p, res_d, plan_p, plan_d, keep_token_times)
    T = merged.duration_s
    run_p = _serving_run(res_p, plan_p, timer_p, kv_p, model, db, slo, notes_p, T)
    run_d = _serving_run(res_d, plan_d, timer_d, kv_d, model, db, slo, notes_d, T) if res_d is not None else None
    run = DisaggRun(merged, {}, run_p, run_d, transfer, dplan, model, notes)
    run.summary = _summary(run, slo, network, host, streams)
    return run


def _merge(res_p: ServeResult, res_d: ServeResult | None, plan_p: ServingPlan, plan_d: ServingPlan,
           keep_token_times: bool) -> ServeResult:
    """Both pools as one ServeResult (see DisaggRun.result)."""
    Rp = plan_p.replicas
    final = {r.id: r for r in res_p.requests}
    if res_d is not None:
        for r in res_d.requests:
            final[r.id] = r
    reqs = [final[i] for i in sorted(final)]
    for r in res_p.requests:
        if r.num_decode == 1 and keep_token_times and r.token_times is None:
            r.token_times = array("d", [r.first_token_s])
    stats = list(res_p.replicas)
    log = BatchLog()
    for name in BatchLog.__slots__:
        getattr(log, name).extend(getattr(res_p.batches, name))
    trace = list(res_p.trace)
    gaps = TokenGaps()
    total = res_p.trace_total
    if res_d is not None:
        stats += [replace(st, replica=st.replica + Rp) for st in res_d.replicas]
        for name in BatchLog.__slots__:
            src = getattr(res_d.batches, name)
            getattr(log, name).extend(array(src.typecode, (x + Rp for x in src)) if name == "replica" else src)
        trace += [(rep + Rp, *rest) for rep, *rest in res_d.trace]
        gaps = res_d.gaps
        total += res_d.trace_total
    duration = max(r.completed_s for r in reqs)
    in_sys = math.fsum(r.completed_s - r.arrived_at_s for r in reqs)
    plan = replace(plan_d, replicas=Rp + plan_d.replicas, pp=max(plan_p.pp, plan_d.pp))
    return ServeResult(plan=plan, requests=reqs, replicas=stats, batches=log, gaps=gaps, trace=trace,
                       trace_total=total, trace_cap=res_p.trace_cap, duration_s=duration, in_system_s=in_sys,
                       max_model_len=res_p.max_model_len, seed=res_p.seed, source=res_p.source,
                       wall_s=res_p.wall_s + (res_d.wall_s if res_d is not None else 0.0))


# ---------------------------------------------------------------------------------------- frames
TRANSFER_COLUMNS = ("prefill_replica", "kv_bytes", "kv_transfer_start", "kv_landed_at", "kv_transfer_time",
                    "kv_exposed_time", "decode_admitted_at", "decode_queue_time")


def disagg_request_frame(run: DisaggRun) -> pd.DataFrame:
    """simulate_serving's request columns (`replica` = the decode replica, -1 for a one-token request)
    + TRANSFER_COLUMNS: prefill replica; KV bytes moved; first flow's start; landing (last flow's end);
    landing - start; landing - first token (the part of the transfer the prefill did not hide); decode
    admission; admission - landing (waiting for decode KV blocks). NaN / 0 for one-token requests."""
    df = request_frame(run.result)
    reqs = run.result.requests
    n = len(reqs)
    pre_rep = np.asarray([r.replica for r in run.prefill.result.requests], dtype=np.int64)
    decoded = np.asarray([r.num_decode >= 2 for r in reqs])
    df["replica"] = np.where(decoded, df["replica"].to_numpy(), -1)
    kv_bytes = np.zeros(n, dtype=np.int64)
    start = np.full(n, np.nan)
    if run.transfer is not None:
        per = run.transfer.per_request()
        idx = per.index.to_numpy()
        kv_bytes[idx] = per["kv_bytes"].to_numpy()
        start[idx] = per["kv_transfer_start"].to_numpy()
    landed = np.asarray([r.kv_landed_s if d else np.nan for r, d in zip(reqs, decoded)], dtype=np.float64)
    admitted = np.asarray([r.decode_admitted_s if d else np.nan for r, d in zip(reqs, decoded)], dtype=np.float64)
    first = df["first_token_at"].to_numpy()
    df["prefill_replica"] = pre_rep
    df["kv_bytes"] = kv_bytes
    df["kv_transfer_start"] = start
    df["kv_landed_at"] = landed
    df["kv_transfer_time"] = landed - start
    df["kv_exposed_time"] = landed - first
    df["decode_admitted_at"] = admitted
    df["decode_queue_time"] = admitted - landed
    return df


def pool_replica_frame(run: DisaggRun) -> pd.DataFrame:
    """replica_metrics with a `pool` column; each pool's MFU/MBU against its own GPU's peaks; decode
    replicas numbered after the prefill replicas; busy % and KV use over the whole run."""
    frames = []
    offset = 0
    for name, pr in (("prefill", run.prefill), ("decode", run.decode)):
        if pr is None:
            continue
        f = replica_frame(pr.result, pr.peak_flops_per_s, pr.hbm_Bps)
        f["replica"] = f["replica"] + offset
        f.insert(0, "pool", name)
        f.insert(2, "gpu", pr.gpu)
        frames.append(f)
        offset += pr.result.plan.replicas
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------------------------------- summary
def _stats(x: np.ndarray, unit: str, formula: str) -> dict:
    x = np.asarray(x, dtype=np.float64)
    x = x[np.isfinite(x)]
    if len(x) == 0:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None, "unit": unit,
                "formula": formula}
    p = np.percentile(x, (50, 90, 99))
    return {"count": int(len(x)), "mean": float(x.mean()), "p50": float(p[0]), "p90": float(p[1]),
            "p99": float(p[2]), "max": float(x.max()), "unit": unit, "formula": formula}


def _none_nan(v):
    v = v.item() if hasattr(v, "item") else v
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _pool_deployment(plan: ServingPlan, gpu: str) -> dict:
    return {"replicas": plan.replicas, "tp": plan.tp, "pp": plan.pp, "ep": plan.ep, "gpu": gpu,
            "scheduler": plan.scheduler, "router": plan.router, "max_batch_size": plan.max_batch_size,
            "chunk_size": plan.chunk_size, "max_tokens_per_iteration": plan.max_tokens_per_iteration,
            "block_size": plan.block_size, "weight_dtype": plan.weight_dtype, "kv_dtype": plan.kv_cache_dtype}


def _summary(run: DisaggRun, slo, network, host, streams) -> dict:
    from sim.serve.api import _host_text
    s = summarize(run.result, None, None, slo, df=run.requests)
    rf = pool_replica_frame(run)
    s["replicas"] = [{k: _none_nan(v) for k, v in row.items()} for row in rf.to_dict("records")]
    c = s["cluster"]
    for key in ("busy_pct", "kv_use_mean_pct", "mfu_pct", "mbu_pct"):
        c[key] = _none_nan(float(rf[key].mean()))
    c["preemptions"] = int(rf["preemptions"].sum())
    c["note"] = "cluster values are means over the replicas of both pools; MFU/MBU against each pool's GPU"
    pools = {}
    for name, pr in (("prefill", run.prefill), ("decode", run.decode)):
        if pr is None:
            continue
        sub = rf[rf["pool"] == name]
        pools[name] = {"deployment": _pool_deployment(pr.result.plan, pr.gpu), "memory": pr.summary["memory"],
                       "busy_pct": _none_nan(float(sub["busy_pct"].mean())),
                       "kv_use_mean_pct": _none_nan(float(sub["kv_use_mean_pct"].mean())),
                       "mfu_pct": _none_nan(float(sub["mfu_pct"].mean())),
                       "mbu_pct": _none_nan(float(sub["mbu_pct"].mean())),
                       "preemptions": int(sub["preemptions"].sum()), "batches": int(sub["batches"].sum()),
                       "kernel_time_sources": pr.kernel_provenance(),
                       "peaks": {"flops_per_s": pr.peak_flops_per_s, "hbm_Bps": pr.hbm_Bps}}
    p, d = run.plan.prefill, run.plan.decode
    res = run.result
    s["deployment"] = {"mode": "disaggregated", "replicas": p.replicas + d.replicas,
                       "tp": f"{p.tp}/{d.tp}", "pp": f"{p.pp}/{d.pp}", "scheduler": f"{p.scheduler}/{d.scheduler}",
                       "router": f"{p.router}/{d.router}", "block_size": f"{p.block_size}/{d.block_size}",
                       "num_blocks": [st.num_blocks for st in res.replicas], "max_model_len": res.max_model_len,
                       "seed": res.seed, "kv_transfer": run.plan.kv_transfer,
                       "gpus": {"prefill": run.plan.gpu_ids()[0], "decode": run.plan.gpu_ids()[1]},
                       "note": f"values 'a/b' are prefill/decode; replicas 0..{p.replicas - 1} are the prefill pool"}
    s["pools"] = pools
    df = run.requests
    moved = df["kv_bytes"].to_numpy()
    decoded = df["request_num_decode_tokens"].to_numpy() >= 2
    s["kv_transfer"] = {
        "mode": run.plan.kv_transfer,
        "requests": int(decoded.sum()),
        "bytes": int(moved.sum()),
        "sends": int(len(run.transfer.row_request)) if run.transfer is not None else 0,
        "bytes_per_prompt_token": int(sum(st.bytes_per_token for st in streams)),
        "streams_per_request": len(streams),
        "transfer_s": _stats(df["kv_transfer_time"].to_numpy(), "s",
                             "KV landed (last flow's end) - first flow's start, per request with >= 2 output tokens"),
        "exposed_s": _stats(df["kv_exposed_time"].to_numpy(), "s",
                            "KV landed - first token (the transfer time the prefill did not hide), per request"),
        "decode_queue_s": _stats(df["decode_queue_time"].to_numpy(), "s",
                                 "decode admission - KV landed (waiting for decode KV blocks), per request"),
        "formula": "bytes = sum over requests of prompt tokens x bytes_per_prompt_token (KV of every layer "
                   "and KV head/latent each decode rank holds)",
    }
    mem = {name: pools[name]["memory"] for name in pools}
    s["memory"] = mem
    s["request_notes"] = run.request_notes
    fr: dict[str, float] = {}
    tot = 0.0
    for pr in (run.prefill, run.decode):
        if pr is None:
            continue
        for k, v in pr.timer.provenance_s().items():
            fr[k] = fr.get(k, 0.0) + v
            tot += v
    s["kernel_time_sources"] = {"fractions": {k: v / tot for k, v in fr.items() if v > 0} if tot > 0 else {},
                                "formula": "simulated kernel seconds by compute_db source / all kernel seconds "
                                           "(both pools)"}
    from sim.serve.batch_time import collective_provenance_s
    cs: dict[str, float] = {}
    for pr in (run.prefill, run.decode):
        if pr is not None:
            for k, v in collective_provenance_s(pr.timer).items():
                cs[k] = cs.get(k, 0.0) + v
    ctot = sum(cs.values())
    s["collective_time_sources"] = {"fractions": {k: v / ctot for k, v in cs.items() if v > 0} if ctot > 0 else {},
                                    "formula": "idle-network collective + PP send seconds by source / all such "
                                               "seconds (both pools; KV transfers not included)"}
    s["cost_model"] = {"gpu": {n: pools[n]["deployment"]["gpu"] for n in pools}, "network": network,
                       "kv_transfer_network": "netsim flow engine (max-min), point-to-point sends",
                       "host": _host_text(host), "model": getattr(run.model, "name", "")}
    s["peaks"] = {n: pools[n]["peaks"] for n in pools}
    return s


def format_disagg(s: dict, title: str = "") -> str:
    """The serve table of a disaggregated summary + the pools and the KV transfer (+ the comparison)."""
    lines = [format_summary(s, title)]
    for name, pool in s["pools"].items():
        d = pool["deployment"]
        lines.append(f"{name + ' pool':<26s}{d['replicas']} x (tp {d['tp']} pp {d['pp']}) {d['gpu']} {d['scheduler']}"
                     f" | busy {pool['busy_pct']:.1f} % | KV blocks {pool['memory']['num_blocks']} x "
                     f"{pool['memory']['block_size']} | preemptions {pool['preemptions']}")
    k = s["kv_transfer"]
    lines.append(f"{'KV transfer':<26s}{k['mode']}: {k['bytes'] / 2 ** 30:.3f} GiB in {k['sends']} sends for "
                 f"{k['requests']} requests ({k['bytes_per_prompt_token']} B per prompt token, "
                 f"{k['streams_per_request']} GPU pairs)")
    for key, label in (("transfer_s", "KV transfer (ms)"), ("exposed_s", "KV exposed (ms)"),
                       ("decode_queue_s", "decode queue (ms)")):
        m = k[key]
        vals = "".join(f"{'n/a' if m[q] is None else f'{1e3 * m[q]:.3f}':>11s}" for q in ("mean", "p50", "p90", "p99"))
        lines.append(f"{label:<26s}{vals}")
    if s.get("comparison"):
        lines.append(s["comparison"]["text"])
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------- colocation
def colocated_plan(dplan: DisaggPlan, base: ServingPlan | None = None) -> ServingPlan:
    """The colocated deployment on the same GPUs: `base` (None: the decode pool's plan) with replicas =
    all GPUs of the split / (its tp x pp). SimError when they do not divide."""
    base = base or dplan.decode
    per = base.tp * base.pp
    total = dplan.num_gpus
    if total % per:
        raise SimError(f"colocated comparison: the split's {total} GPUs are not a multiple of tp {base.tp} x pp "
                       f"{base.pp}; give a colocated plan whose replicas fill them")
    return replace(base, replicas=total // per)


def _key_metrics(s: dict) -> dict:
    m, t = s["metrics"], s["throughput"]
    out = {}
    for k in ("ttft_s", "tpot_s", "tbt_s", "e2e_s"):
        for q in ("p50", "p90", "p99"):
            out[f"{k[:-2]}_{q}_s"] = m[k][q]
    out["requests_per_s"] = t["requests_per_s"]["value"]
    out["output_tokens_per_s"] = t["output_tokens_per_s"]["value"]
    g = s.get("goodput")
    out["goodput_requests_per_s"] = g["requests_per_s"] if g else None
    out["goodput_fraction"] = g["fraction"] if g else None
    return out


@dataclass
class Comparison:
    """Disaggregated vs colocated on the same GPUs: both runs, the side-by-side table, its text."""
    disaggregated: DisaggRun
    colocated: object
    colocated_plan: ServingPlan
    table: dict
    text: str


def compare_colocated(model, dplan: DisaggPlan, requests, *, run: DisaggRun | None = None,
                      colocated: ServingPlan | None = None, topology=None, db=None, network: str = "analytical",
                      net_calibration=None, host="launch-gaps", slo: SLO | None = None, seed: int = 0) -> Comparison:
    """Run the colocated deployment (`colocated_plan`, or `colocated` with its replicas set to fill the
    split's GPUs) on the same topology and the same GPU ids as the split, with the same requests, and put
    TTFT / TPOT / TBT / E2E percentiles, throughput and goodput side by side. `run`: the disaggregated run
    if already done (else simulated here). Stores the table in run.summary["comparison"]. Both pools
    must use the same GPU type (the colocated replicas are identical)."""
    from sim.inputs import resolve_model
    from sim.serve.api import simulate_serving
    if isinstance(model, str):
        model = resolve_model(model)
    if dplan.prefill_gpu != dplan.decode_gpu:
        raise SimError(f"colocated comparison needs one GPU type (prefill {dplan.prefill_gpu}, decode "
                       f"{dplan.decode_gpu})")
    cplan = colocated_plan(dplan, colocated)
    if db is None:
        from compute_db import open_db
        db = open_db()
    topology = _topology(topology, dplan, db)
    validate_split(dplan, topology)
    if run is None:
        run = simulate_disaggregated(model, dplan, requests, topology=topology, db=db, network=network,
                                     net_calibration=net_calibration, host=host, slo=slo, seed=seed)
    ids = list(dplan.gpu_ids()[0]) + list(dplan.gpu_ids()[1])
    co = simulate_serving(model, cplan, requests, topology=topology, gpu=dplan.decode_gpu, db=db, network=network,
                          net_calibration=net_calibration, host=host, slo=slo, seed=seed, mapping=ids)
    a, b = _key_metrics(run.summary), _key_metrics(co.summary)
    table = {"metrics": list(a), "disaggregated": a, "colocated": b,
             "colocated_plan": {"replicas": cplan.replicas, "tp": cplan.tp, "pp": cplan.pp,
                                "scheduler": cplan.scheduler, "chunk_size": cplan.chunk_size,
                                "max_batch_size": cplan.max_batch_size, "gpus": ids},
             "note": "same requests, same topology, same GPU ids; colocated replicas batch prefills with decodes"}
    text = _comparison_text(table, dplan, cplan)
    table["text"] = text
    run.summary["comparison"] = table
    return Comparison(run, co, cplan, table, text)


def _comparison_text(table: dict, dplan: DisaggPlan, cplan: ServingPlan) -> str:
    a, b = table["disaggregated"], table["colocated"]
    lines = [f"disaggregated vs colocated on the same {dplan.num_gpus} GPUs "
             f"(colocated: {cplan.replicas} x tp {cplan.tp} pp {cplan.pp} {cplan.scheduler})",
             f"{'metric':<26s}{'disaggregated':>15s}{'colocated':>15s}"]
    for k in table["metrics"]:
        if k.startswith(("ttft_", "tpot_", "tbt_", "e2e_")):
            name, q = k[:-2].rsplit("_", 1)
            f, unit = (1.0, "s") if name == "e2e" else (1e3, "ms")
            label = f"{name.upper()} {q.upper()} ({unit})"
        else:
            label, f = k.replace("_", " "), 1.0
        fa = "n/a" if a[k] is None else f"{a[k] * f:.3f}"
        fb = "n/a" if b[k] is None else f"{b[k] * f:.3f}"
        lines.append(f"{label:<26s}{fa:>15s}{fb:>15s}")
    return "\n".join(lines)
