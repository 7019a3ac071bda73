"""Serving deployment search (`clustersim serve-search`): the cheapest deployments that meet latency SLOs.

Space: the cartesian product of GPU type, TP, PP, replicas (default: as many as the GPU budget allows),
replica scheduler, Sarathi chunk size (sarathi only: other schedulers are not repeated per chunk size) and
batch cap, plus fixed ServingPlan fields. Before any simulation every configuration is checked, and
pruned with its reason (pruned.csv):
  budget   tp x pp x replicas GPUs exceed the budget (--gpus);
  invalid  the plan's own fields (sim.serve.validation) or the model's rules (TP must divide the attention
           heads, the FFN width, ...; PP must fit the layers: workload_gen.inference.inference_spec);
  memory   the KV planner (sim.serve.memory): the weights and workspace do not fit the GPU, or the KV
           cache cannot hold one request of max_model_len tokens.
Each survivor gets a capacity search (sim.serve.capacity), each probe a full `simulate_serving` run at
the probe's Poisson rate with the same seed. Cost = GPUs x $/GPU-hour (sim.pricing); ranking by QPS per
dollar = capacity (req/s) / cost ($/hour).

Resume: every finished probe is appended at once to a cache directory (sim.serve.search_probes; the CLI's
default is DIR.probes beside the results directory DIR); a re-run reads it first and recomputes no probe
it finds there. Outputs: sim.serve.search_outputs.

Parallel: configurations (each a sequence of probes) go to -j local processes (fork), or are split
round-robin over the ranks under mpiexec (sim.mpi), rank 0 gathering and writing the outputs.
"""

from __future__ import annotations

import math
import time
from collections import Counter
from dataclasses import dataclass, field, replace
from itertools import product
from pathlib import Path

from sim.errors import SimError
from sim.serve.capacity import DEFAULT_REL_TOL, CapacityResult, find_capacity
from sim.serve.plan import ServingPlan
from sim.serve.search_probes import (  # noqa: F401  (Deployment, ProbeSetup: part of this module's API)
    Deployment,
    ProbeCache,
    ProbeSetup,
    _resources,
    config_key,
    make_fingerprint,
    run_probe,
)

_PLAN_DEFAULTS = {"chunk_size": ServingPlan().chunk_size}


# ------------------------------------------------------------------------------------------------ space
@dataclass(frozen=True)
class ServeSearchSpace:
    """Values to try. replicas None: budget // (tp x pp). plan_fields: fixed ServingPlan (field, value)s."""
    gpus: tuple[str, ...] = ("H100",)
    tp: tuple[int, ...] = (1,)
    pp: tuple[int, ...] = (1,)
    replicas: tuple[int, ...] | None = None
    schedulers: tuple[str, ...] = ("sarathi",)
    chunk_sizes: tuple[int, ...] = (512,)
    batch_caps: tuple[int, ...] = (128,)
    gpu_budget: int | None = None
    plan_fields: tuple = ()
    disagg: tuple[str, ...] = ("no",)        # "no": colocated, "yes": prefill/decode pools (sim.serve.disagg)
    disagg_splits: tuple[tuple[int, int], ...] | None = None   # (prefill, decode) replicas; None: every split
    kv_transfer: str = "layerwise"


@dataclass
class Pruned:
    deployment: Deployment
    reason: str

    @property
    def kind(self) -> str:
        return self.reason.split(":", 1)[0]


def enumerate_deployments(space: ServeSearchSpace) -> tuple[list[Deployment], list[Pruned], int]:
    """(deployments, pruned for the budget, configurations not repeated because a knob does not apply)."""
    if space.replicas is None and space.gpu_budget is None:
        raise SimError("give --gpus (the GPU budget) or --replicas")
    if space.gpu_budget is not None and space.gpu_budget < 1:
        raise SimError(f"--gpus: must be a positive integer (got {space.gpu_budget})")
    fixed = dict(space.plan_fields)
    uniq = lambda xs: tuple(dict.fromkeys(xs))  # noqa: E731
    deps: list[Deployment] = []
    pruned: list[Pruned] = []
    deduped = 0
    for gpu, tp, pp in product(uniq(space.gpus), uniq(space.tp), uniq(space.pp)):
        gpr = tp * pp
        if space.replicas is not None:
            reps = uniq(space.replicas)
        else:
            reps = (max(space.gpu_budget // gpr, 0),)
        for r, sched, batch in product(reps, uniq(space.schedulers), uniq(space.batch_caps)):
            chunks = uniq(space.chunk_sizes) if sched == "sarathi" else (fixed.get("chunk_size",
                                                                                    _PLAN_DEFAULTS["chunk_size"]),)
            if sched != "sarathi":
                deduped += len(uniq(space.chunk_sizes)) - 1
            for chunk in chunks:
                kw = {**fixed, "tp": tp, "pp": pp, "replicas": max(r, 1), "scheduler": sched,
                      "max_batch_size": batch, "chunk_size": chunk}
                plan = ServingPlan(**kw)
                if r < 1:
                    pruned.append(Pruned(Deployment(gpu, plan), f"budget: one replica needs tp {tp} x pp {pp} = "
                                                                f"{gpr} GPUs > --gpus {space.gpu_budget}"))
                    continue
                if "no" in space.disagg:
                    deps.append(Deployment(gpu, plan))
                if "yes" in space.disagg and (space.disagg_splits is None or r == reps[0]):
                    # explicit splits do not depend on the replica count: once per point
                    points = _disagg_points(gpu, plan, r, space)
                    deps.extend(points)
                    if not points:
                        pruned.append(Pruned(Deployment(gpu, plan), "budget: a disaggregated deployment needs >= 2 "
                                             f"replicas (1 prefill + 1 decode); tp {tp} x pp {pp} gives {r}"))
    return deps, pruned, deduped


def _disagg_points(gpu: str, plan: ServingPlan, replicas: int, space: ServeSearchSpace) -> list[Deployment]:
    """Disaggregated deployments of `plan`: every (prefill, decode) split of `replicas` (or the given splits),
    both pools with the plan's tp, pp, scheduler and knobs, on `gpu`."""
    from sim.serve.disagg import DisaggPlan
    splits = space.disagg_splits or tuple((p, replicas - p) for p in range(1, replicas))
    out = []
    for p, d in splits:
        dplan = DisaggPlan(prefill=replace(plan, replicas=p), decode=replace(plan, replicas=d), prefill_gpu=gpu,
                           decode_gpu=gpu, kv_transfer=space.kv_transfer)
        out.append(Deployment(gpu, replace(plan, replicas=p + d), dplan))
    return out


def effective_plan(model, plan: ServingPlan) -> ServingPlan:
    """The plan as simulate_serving runs it (sim.serve.api.effective_plan), so pruning sees the same memory."""
    from sim.serve.api import effective_plan as engine_plan
    return engine_plan(model, plan)[0]


def prune_reason(model, dep: Deployment, db, gpu_budget: int | None):
    """(reason or None, KVCachePlan or None) of one deployment (module docstring: budget, invalid, memory);
    for a disaggregated one the decode pool's KV plan (both pools are checked)."""
    from sim.serve.memory import plan_kv_cache_for_gpu
    from sim.serve.validation import validate_serving_plan
    from workload_gen.errors import WorkloadError
    if gpu_budget is not None and dep.num_gpus > gpu_budget:
        return f"budget: {dep.num_gpus} GPUs > --gpus {gpu_budget}", None
    pools = [("", dep.plan)]
    try:
        if dep.disagg is not None:
            from sim.serve.disagg import validate_split
            validate_split(dep.disagg)
            pools = [("prefill pool: ", dep.disagg.prefill), ("decode pool: ", dep.disagg.decode)]
        else:
            validate_serving_plan(dep.plan)
    except SimError as exc:
        return f"invalid: {exc}", None
    kv = None
    for prefix, plan in pools:
        try:
            kv = plan_kv_cache_for_gpu(model, effective_plan(model, plan), dep.gpu, db)
        except WorkloadError as exc:
            return f"invalid: {prefix}{exc}", None
        except SimError as exc:
            return f"memory: {prefix}{exc}", None
    return None, kv


def first_guess_qps(dep: Deployment, kv, gpu_spec, mean_prefill: float, mean_decode: float) -> float:
    """Starting rate of the bracket (req/s): an optimistic closed form, only where bisection starts.

    Per replica, decode: each iteration reads a stage's weights once from HBM (W bytes per GPU at
    hbm_Bps) and advances b = min(batch cap, KV tokens / mean request tokens) requests by a token:
    D x t_iter / b seconds per request; prefill: 2 FLOPs per weight per prompt token at the GPU's peak:
    P x 2 x weights / peak. Colocated: replicas / (decode + prefill seconds); disaggregated: the smaller of
    prefill replicas / prefill seconds and decode replicas / decode seconds. Ignores attention, KV reads,
    communication and scheduling."""
    from workload_gen.layers import DTYPE_BYTES
    p = dep.plan
    w_bytes = max(s.weight_bytes for s in kv.stages)
    params = w_bytes / DTYPE_BYTES[p.weight_dtype]
    peak = gpu_spec.peak_flops.get(p.weight_dtype) or gpu_spec.peak_flops.get("bf16")
    t_iter = w_bytes / gpu_spec.hbm_Bps
    b = max(1.0, min(p.max_batch_size, kv.kv_tokens / max(mean_prefill + mean_decode, 1.0)))
    decode_s = mean_decode * t_iter / b
    prefill_s = mean_prefill * 2.0 * params / peak
    if dep.disagg is not None:
        return min(dep.disagg.prefill.replicas / prefill_s, dep.disagg.decode.replicas / decode_s)
    return p.replicas / (decode_s + prefill_s)


# ------------------------------------------------------------------------------------------------ capacity of each deployment
@dataclass(frozen=True)
class ConfigTask:
    index: int
    setup: ProbeSetup
    deployment: Deployment
    slos: tuple
    first_guess_qps: float
    rel_tol: float
    usd_per_gpu_hour: float
    key: str
    cached: dict                             # qps -> metrics found in the probe cache
    cache_dir: str | None


@dataclass
class ConfigResult:
    index: int
    deployment: Deployment
    capacity: CapacityResult | None
    usd_per_gpu_hour: float
    new_probes: int = 0
    reused_probes: int = 0
    wall_s: float = 0.0
    error: str = ""

    @property
    def cost_per_hour(self) -> float:
        return self.deployment.num_gpus * self.usd_per_gpu_hour

    @property
    def capacity_qps(self) -> float:
        return self.capacity.capacity_qps if self.capacity is not None else math.nan

    @property
    def qps_per_dollar(self) -> float:
        return self.capacity_qps / self.cost_per_hour


def search_config(task: ConfigTask) -> ConfigResult:
    """Capacity search of one deployment, each new probe appended to the cache as soon as it finishes."""
    t0 = time.perf_counter()
    cache = ProbeCache(task.cache_dir) if task.cache_dir else None
    counts = {"new": 0, "reused": 0}

    def probe(qps: float) -> dict:
        if qps in task.cached:
            counts["reused"] += 1
            return task.cached[qps]
        m = run_probe(task.setup, task.deployment, qps)
        counts["new"] += 1
        if cache is not None:
            cache.append(task.key, qps, m, task.deployment.label)
        return m

    res = ConfigResult(task.index, task.deployment, None, task.usd_per_gpu_hour)
    try:
        res.capacity = find_capacity(probe, task.slos, task.first_guess_qps, task.rel_tol)
    except Exception as exc:  # noqa: BLE001 - one failing deployment must not stop the search; reported
        msg = str(exc).splitlines()[0] if str(exc) else ""
        res.error = f"{type(exc).__name__}: {msg}"
    res.new_probes, res.reused_probes = counts["new"], counts["reused"]
    res.wall_s = time.perf_counter() - t0
    return res


# ------------------------------------------------------------------------------------------------ search
@dataclass
class SearchOutcome:
    ranked: list[ConfigResult]
    pruned: list[Pruned]
    enumerated: int
    deduplicated: int
    slos: tuple
    rel_tol: float
    prices: dict                             # gpu -> GPUPrice
    price_file: str
    cache_dir: str | None
    mode: str
    elapsed_s: float
    notes: list[str] = field(default_factory=list)

    @property
    def new_probes(self) -> int:
        return sum(r.new_probes for r in self.ranked)

    @property
    def reused_probes(self) -> int:
        return sum(r.reused_probes for r in self.ranked)


def _mean_lengths(requests, max_len: int) -> tuple[float, float]:
    from workload_gen.requests import make_requests
    rs = make_requests(replace(requests, qps=1.0, max_model_len=max_len))
    return float(rs.num_prefill_tokens.mean()), float(rs.num_decode_tokens.mean())


def _check_requests(model, requests, plans) -> None:
    """Request lengths the user fixed must fit every max model length of the space: one error up front
    rather than a failed row per configuration."""
    from sim.serve.api import _check_synthetic_lengths
    if requests.arrival not in ("poisson", "gamma"):
        raise SimError(f"serve-search: arrival '{requests.arrival}' has no rate to search; use poisson or gamma")
    for max_len in sorted({p.max_model_len or model.seq_length for p in plans}):
        _check_synthetic_lengths(requests, max_len)


@dataclass
class Prepared:
    """A search before any simulation: survivors with their KV plans, pruned configurations, prices."""
    setup: ProbeSetup
    survivors: list                          # [(Deployment, KVCachePlan)]
    pruned: list[Pruned]
    enumerated: int
    deduplicated: int
    price_rows: dict                         # gpu -> sim.pricing.GPUPrice
    price_file: str
    gpu_specs: dict


def prepare_search(setup: ProbeSetup, space: ServeSearchSpace, prices=None) -> Prepared:
    """Enumerate and prune the space; SimError (one line) for an unknown GPU, a GPU without a price, request
    lengths that fit no max model length, or an empty space (its most common pruning reasons)."""
    from sim.pricing import load_price_table
    prices = prices or load_price_table()
    db, _ = _resources(setup.db, setup.gpu_file, setup.net_calibration)
    gpu_specs = {g: db.gpu(g) for g in dict.fromkeys(space.gpus)}      # ComputeDBError on an unknown GPU
    price_rows = {g: prices.row(g, getattr(db, "extra_gpus", None)) for g in gpu_specs}
    if not setup.fingerprint:
        setup = replace(setup, fingerprint=make_fingerprint(setup))
    deps, pruned, deduped = enumerate_deployments(space)
    enumerated = len(deps) + len(pruned)
    topo_gpus = _fixed_topology_gpus(setup.topology)
    survivors = []
    for dep in deps:
        if topo_gpus is not None and dep.num_gpus > topo_gpus:
            pruned.append(Pruned(dep, f"budget: {dep.num_gpus} GPUs > the topology's {topo_gpus}"))
            continue
        reason, kv = prune_reason(setup.model, dep, db, space.gpu_budget)
        if reason:
            pruned.append(Pruned(dep, reason))
        else:
            survivors.append((dep, kv))
    if not survivors:
        raise SimError(f"empty search space: all {enumerated} configurations pruned; {_reason_digest(pruned)}")
    _check_requests(setup.model, setup.requests, [d.plan for d, _ in survivors])
    return Prepared(setup, survivors, pruned, enumerated, deduped, price_rows, prices.path, gpu_specs)


def _fixed_topology_gpus(spec: str | None) -> int | None:
    """GPUs of a topology whose size the user fixed (a file, or gpus= in the spec); None: sized per deployment."""
    if not spec or not (Path(spec).is_file() or "gpus=" in spec.partition(":")[2]):
        return None
    from sim.inputs import make_topology
    return int(make_topology(spec).num_gpus)


def serve_search(setup: ProbeSetup, space: ServeSearchSpace, slos, *, rel_tol: float = DEFAULT_REL_TOL,
                 prices=None, workers: int = 1, cache_dir: str | Path | None = None,
                 progress: bool = False) -> SearchOutcome | None:
    """Enumerate, prune, capacity-search every survivor and rank by QPS per dollar (module docstring).

    prices: a sim.pricing.PriceTable (None: the shipped table). Returns None on MPI ranks other than 0.
    SimError (one line) before any simulation (prepare_search), and after the probes when no deployment
    meets the SLOs at any rate tried."""
    from sim.mpi import mpi_comm
    t0 = time.perf_counter()
    prep = prepare_search(setup, space, prices)
    setup, model = prep.setup, prep.setup.model
    means = {}
    cached_all = ProbeCache(cache_dir).load() if cache_dir else {}
    tasks = []
    for i, (dep, kv) in enumerate(prep.survivors):
        max_len = dep.plan.max_model_len or model.seq_length
        if max_len not in means:
            means[max_len] = _mean_lengths(setup.requests, max_len)
        guess = first_guess_qps(dep, kv, prep.gpu_specs[dep.gpu], *means[max_len])
        key = config_key(setup, dep)
        tasks.append(ConfigTask(i, setup, dep, tuple(slos), guess, rel_tol,
                                prep.price_rows[dep.gpu].usd_per_gpu_hour, key, cached_all.get(key, {}),
                                str(cache_dir) if cache_dir else None))
    comm = mpi_comm()
    if comm is not None:
        rank, size = comm.Get_rank(), comm.Get_size()
        mine = [search_config(t) for t in tasks[rank::size]]
        parts = comm.gather(mine, root=0)
        if rank != 0:
            return None
        results = [r for part in parts for r in part]
        mode = f"mpi x {size}"
    else:
        results = _run_local(tasks, workers, progress)
        mode = f"{max(1, min(workers, len(tasks)))} local process(es)"
    ranked = sorted(results, key=_rank_key)
    out = SearchOutcome(ranked, prep.pruned, prep.enumerated, prep.deduplicated, tuple(slos), rel_tol,
                        prep.price_rows, prep.price_file, str(cache_dir) if cache_dir else None, mode,
                        time.perf_counter() - t0)
    ok = [r for r in ranked if r.capacity is not None]
    if not ok:
        raise SimError(f"every configuration failed to simulate; first: {ranked[0].deployment.label}: "
                       f"{ranked[0].error}")
    if all(r.capacity.capacity_qps == 0 for r in ok):
        best = min(ok, key=lambda r: r.capacity.binding_value / _limit(slos, r.capacity.binding_slo))
        c = best.capacity
        raise SimError(f"no configuration meets the SLOs ({', '.join(s.text for s in slos)}) at any rate tried: "
                       f"closest {best.deployment.label} had {c.binding_slo.split('<=')[0]} {c.binding_value:.4g} s "
                       f"at {c.upper_qps:.4g} req/s; loosen the SLO or change the space")
    for r in ranked:
        if r.error:
            out.notes.append(f"{r.deployment.label}: simulation failed: {r.error}")
    unbounded = sum(1 for r in ok if not r.capacity.bounded)
    if unbounded:
        out.notes.append(f"{unbounded} configuration(s) met the SLOs up to the rate ceiling: their capacity is a "
                         "lower bound (give a longer --duration or more --requests to load them)")
    return out


def _limit(slos, text: str) -> float:
    return next(s.limit_s for s in slos if s.text == text)


def _rank_key(r: ConfigResult):
    q = r.qps_per_dollar
    return (0 if math.isfinite(q) else 1, -(q if math.isfinite(q) else 0.0), -(r.capacity_qps if math.isfinite(
        r.capacity_qps) else 0.0), r.deployment.label)


def _run_local(tasks: list[ConfigTask], workers: int, progress: bool) -> list[ConfigResult]:
    from tqdm import tqdm
    results: list[ConfigResult] = []
    n = max(1, min(workers, len(tasks)))
    if n == 1:
        with tqdm(total=len(tasks), desc="capacity search", unit="config", disable=None if progress else True) as bar:
            for t in tasks:
                results.append(search_config(t))
                bar.update()
                bar.set_postfix(probes=sum(r.new_probes for r in results), refresh=False)
        return results
    import multiprocessing as mp
    from concurrent.futures import ProcessPoolExecutor, as_completed
    ex = ProcessPoolExecutor(n, mp_context=mp.get_context("fork"))   # forked before tqdm starts a thread
    try:
        futs = [ex.submit(search_config, t) for t in tasks]
        with tqdm(total=len(tasks), desc="capacity search", unit="config", disable=None if progress else True) as bar:
            for f in as_completed(futs):
                results.append(f.result())
                bar.update()
                bar.set_postfix(probes=sum(r.new_probes for r in results), refresh=False)
    except BaseException:
        ex.shutdown(wait=False, cancel_futures=True)
        raise
    ex.shutdown()
    return results


def _reason_digest(pruned: list[Pruned]) -> str:
    kinds = Counter(p.kind for p in pruned)
    parts = []
    for kind, n in kinds.most_common():
        example = next(p for p in pruned if p.kind == kind)
        parts.append(f"{kind} x{n} (e.g. {example.deployment.label}: {example.reason.split(':', 1)[1].strip()})")
    return "; ".join(parts)

