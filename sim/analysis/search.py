"""Parallel-strategy search: enumerate plans, prune by validity and memory, screen, confirm the best.

Space: TP, SP, PP, VPP, CP, EP, expert-TP, micro-batch size, recompute policy (none / selective /
full with a layer count) and optimizer sharding (none / Megatron distributed optimizer / DeepSpeed
ZeRO 1-3). For each candidate, in order:
1. `workload_gen.plan_validation.validate_plan` — divisibility and framework rules (reason kept);
2. memory (`memory.analyze_memory`): peak (reserved or allocated) + CUDA context + `gmi_error_GiB` must
   fit the GPU (the same verdict as `clustersim memory` gives with gmi_error 0);
3. screening step time: `steptime.estimate_step` (analytical, milliseconds per plan; see that module);
then the top K are re-timed with `sim.simulate(..., network="flow")` when sim and workload_gen.generate
are importable. Candidates are split over MPI ranks under `mpiexec` (mpi4py) or local processes.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import math
import sys
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import product

from sim.analysis.cost import count_flops, utilisation
from sim.analysis.memory import GiB, MemoryOptions, analyze_memory
from sim.analysis.steptime import CommTimer, HardwareSpec, KernelTimer, estimate_step, make_analytical_backend
from sim.mpi import mpi_comm
from sim.outpath import atomic_write

OPTIMIZERS = ("none", "distributed", "zero1", "zero2", "zero3")
RECOMPUTES = ("none", "selective", "full")


@dataclass(frozen=True)
class SearchSpace:
    """Values to try; None = automatic (all values that can divide the model/world)."""
    tp: tuple[int, ...] | None = None
    pp: tuple[int, ...] | None = None
    vpp: tuple[int, ...] | None = None
    cp: tuple[int, ...] | None = None
    ep: tuple[int, ...] | None = None
    etp: tuple[int | None, ...] = (None,)   # None: MoE tries 1 and tp (Megatron's default etp = tp)
    sequence_parallel: tuple[bool, ...] = (True, False)
    micro_batch_size: tuple[int, ...] = (1, 2, 4)
    recompute: tuple[str, ...] = RECOMPUTES
    full_recompute_fractions: tuple[float, ...] = (1.0, 0.5)   # of the layers per chunk
    optimizer: tuple[str, ...] = ("none", "distributed")
    max_tp: int = 8
    uneven_pipeline: bool = True      # pp not dividing the layers: first/last stages absorb the rest
    plan_fields: tuple = ()           # ((ParallelPlan field, value), ...) fixed for every candidate


@dataclass
class Candidate:
    plan: object
    feasible: bool
    reason: str = ""
    peak_mem_bytes: int = 0
    peak_mem_with_reserved_bytes: int = 0
    peak_path: str = ""
    iteration_time_s: float = math.nan
    mfu_6nd_with_attn: float = math.nan
    hfu: float = math.nan
    tokens_per_s_per_gpu: float = math.nan
    exposed_comm_s: dict = field(default_factory=dict)
    bubble_s: float = math.nan
    flow_iteration_time_s: float = math.nan
    # objectives (sim.analysis.objectives): kernel time per GPU (screen: slowest stage, recompute included),
    # kernel GPU-seconds of the flow re-timing, and the failure-free $ and facility kWh per million tokens
    compute_busy_s: float = math.nan
    flow_gpu_busy_s: float = math.nan
    usd_per_million_tokens: float = math.nan
    kwh_per_million_tokens: float = math.nan

    @property
    def family(self) -> str:
        p = self.plan
        return f"tp={p.tp} pp={p.pp} cp={p.cp}" + (f" ep={p.ep} etp={p.expert_tp}" if p.etp is not None else "")


@dataclass
class SearchResult:
    candidates: list[Candidate]
    ranked: list[Candidate]
    rejected_families: dict[str, str]
    evaluated: int
    elapsed_s: float
    screen_method: str
    confirm_method: str = "none"
    notes: list[str] = field(default_factory=list)
    memory_budget_bytes: float = math.nan

    @property
    def best(self) -> Candidate | None:
        return self.ranked[0] if self.ranked else None


# ------------------------------------------------------------------------------------------------
def _divisors(n: int, cap: int | None = None) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0 and (cap is None or d <= cap)]


def _pow2_upto(n: int) -> list[int]:
    out, v = [], 1
    while v <= n:
        out.append(v)
        v *= 2
    return out


def pipeline_split(num_layers: int, pp: int) -> tuple[int | None, int | None, int] | None:
    """(layers on the first stage, on the last stage, on each middle stage); None/None when even.

    Uneven: middle stages get ceil(L/pp) layers, the first and last stages share the rest (the first
    one the smaller half: it also holds the embedding). None when no such split exists."""
    if num_layers % pp == 0:
        return None, None, num_layers // pp
    if pp == 2:
        return num_layers // 2, num_layers - num_layers // 2, 0
    per = -(-num_layers // pp)
    rest = num_layers - per * (pp - 2)
    first, last = rest // 2, rest - rest // 2
    if first < 1:
        return None
    return first, last, per


def pipeline_split_vpp(num_layers: int, pp: int, vpp: int) -> tuple[int | None, int | None, int] | None:
    """pipeline_split whose stage counts are all divisible by `vpp` (megatron-core's uneven pipeline
    with VPP: first/last stage counts and the even middle split are each cut into vpp chunks).

    The even split when it divides; else middle stages get the smallest multiple of vpp >= L/pp
    layers and the first and last stages share the rest in multiples of vpp (the first the smaller).
    None when no such split exists."""
    even = pipeline_split(num_layers, pp)
    if even is not None and all(c % vpp == 0 for c in (even[0] or 0, even[1] or 0, even[2])):
        return even
    if pp < 3:
        if pp == 2 and num_layers % vpp == 0:
            first = vpp * (num_layers // (2 * vpp))
            last = num_layers - first
            if first >= vpp and last >= vpp:
                return first, last, 0
        return None
    per = vpp * -(-num_layers // (pp * vpp))
    rest = num_layers - per * (pp - 2)
    if rest < 2 * vpp or rest % vpp:
        return None
    first = vpp * (rest // (2 * vpp))
    return first, rest - first, per


def enumerate_plans(model, world_size: int, global_batch_size: int, seq_length: int,
                    space: SearchSpace = SearchSpace(), dtype: str = "bf16",
                    flash_attention: bool = True) -> list:
    """All ParallelPlans of the space whose sizes multiply out (no model rules checked here)."""
    from workload_gen.plan import ParallelPlan
    L = model.num_layers
    heads = model.num_attention_heads
    tps = space.tp or tuple(d for d in _pow2_upto(space.max_tp) if heads % d == 0)
    pps = space.pp or tuple(sorted(
        {d for d in _divisors(L) if world_size % d == 0 and d <= 32}
        | ({d for d in _pow2_upto(min(32, L)) if world_size % d == 0} if space.uneven_pipeline else set())))
    cps = space.cp or tuple(c for c in (1, 2, 4, 8) if seq_length % (2 * c) == 0 or c == 1)
    moe = model.num_experts > 0
    eps = space.ep or (tuple(e for e in _pow2_upto(min(model.num_experts, 256)) if model.num_experts % e == 0)
                       if moe else (1,))
    plans = []
    for tp, cp, pp in product(tps, cps, pps):
        if world_size % (tp * cp * pp):
            continue
        dp = world_size // (tp * cp * pp)
        # layer split per vpp: an uneven first/last stage is combined with VPP as megatron-core does
        splits = {}
        for v in (space.vpp or (1, 2, 3, 4, 5, 6, 8, 10)):
            sp_v = pipeline_split(L, pp) if v == 1 else (pipeline_split_vpp(L, pp, v) if pp > 1 else None)
            if sp_v is None or (v > 1 and not space.uneven_pipeline and sp_v[0] is not None):
                continue
            splits[v] = sp_v       # pipeline_split_vpp only returns splits whose stages divide by v
        if not splits:
            continue
        vpps = tuple(splits)
        sps = (False,) if tp == 1 else space.sequence_parallel   # SP needs tp > 1
        etps = tuple(dict.fromkeys(v for e in space.etp for v in ((1, tp) if e is None else (e,)))) if moe \
            else (None,)
        for ep, etp_v, mbs, vpp, sp, opt in product(eps, etps, space.micro_batch_size, vpps, sps,
                                                    space.optimizer):
            first, last, per_mid = splits[vpp]
            # full recompute of n layers per chunk (clipped to each chunk's size): fractions of the largest
            # chunk, so that fraction 1.0 recomputes every layer of an uneven pipeline too
            max_stage = max(c for c in (first, last, per_mid) if c)
            if not sp and tp > 1 and moe and ep > 1:
                continue
            if global_batch_size % (mbs * dp):
                continue
            if moe and (tp * cp * dp) % (ep * etp_v):
                continue
            framework, dist, zero = "megatron", False, 0
            if opt == "distributed":
                dist = True
            elif opt.startswith("zero"):
                framework, zero = "deepspeed", int(opt[-1])
                if vpp > 1 or cp > 1 or (pp > 1 and zero > 1):
                    continue
            for rc in space.recompute:
                nums: tuple = (None,)
                if rc == "full":
                    chunk = max_stage // vpp
                    nums = tuple(sorted({max(1, int(round(chunk * f))) for f in space.full_recompute_fractions},
                                        reverse=True))
                for n in nums:
                    extra = dict(space.plan_fields)
                    if vpp == 1:
                        extra.pop("overlap_p2p_comm", None)    # an interleaved-schedule option
                    if framework == "deepspeed":               # Megatron options
                        extra.pop("overlap_grad_reduce", None)
                        extra.pop("overlap_param_gather", None)
                    plans.append(ParallelPlan(
                        world_size=world_size, tp=tp, pp=pp, cp=cp, ep=ep, etp=etp_v, vpp=vpp,
                        sequence_parallel=sp, framework=framework, distributed_optimizer=dist, zero_stage=zero,
                        micro_batch_size=mbs, global_batch_size=global_batch_size, seq_length=seq_length,
                        dtype=dtype, recompute=rc, recompute_num_layers=n, flash_attention=flash_attention or cp > 1,
                        num_layers_first_stage=first, num_layers_last_stage=last, **extra))
    return plans


# ------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class _Ctx:
    model: object
    hw: HardwareSpec
    gmi_error_GiB: float
    use_reserved_memory: bool
    mem_options: MemoryOptions
    topology: object = None
    db: object = None


def evaluate(ctx: _Ctx, plan, timers_cache: dict | None = None) -> Candidate:
    """Validate, memory-check and (if it fits) screen one plan."""
    from workload_gen.errors import WorkloadError
    from workload_gen.plan_validation import validate_plan
    try:
        validate_plan(ctx.model, plan)
    except WorkloadError as exc:
        return Candidate(plan, False, f"invalid: {exc}")
    from sim.analysis.stagefacts import KernelCatalog
    cat = KernelCatalog(ctx.model, plan, None if timers_cache is None else timers_cache.setdefault("units", {}))
    mem = analyze_memory(ctx.model, plan, options=ctx.mem_options, catalog=cat)
    peak = mem.peak
    alloc, reserved = mem.peak_allocated_bytes, mem.peak_reserved_bytes
    used = reserved if ctx.use_reserved_memory else alloc
    budget = fit_budget_bytes(ctx.hw, ctx.gmi_error_GiB, mem.cuda_context_bytes)
    c = Candidate(plan, True, "", alloc, reserved, str(peak.peak_path))
    if used > budget:
        c.feasible = False
        c.reason = (f"memory: peak {used / GiB:.1f} GiB > {budget / GiB:.1f} GiB "
                    f"({ctx.hw.hbm_bytes / GiB:.1f} GiB - CUDA context {mem.cuda_context_bytes / GiB:.2f} GiB "
                    f"- gmi_error {ctx.gmi_error_GiB:g} GiB) at {peak.peak_path}; "
                    f"model states {peak.model_states.total_bytes / GiB:.1f} GiB, activations in flight "
                    f"{peak.peak_activation_bytes / GiB:.1f} GiB")
        return c
    kt = None
    if timers_cache is not None:
        kt = timers_cache.get("kt")
        if kt is None or kt.dtype != plan.dtype:
            kt = timers_cache["kt"] = KernelTimer(ctx.hw, ctx.db, dtype=plan.dtype)
    else:
        kt = KernelTimer(ctx.hw, ctx.db, dtype=plan.dtype)
    backend = shared = None
    if ctx.topology is not None and timers_cache is not None:
        if "backend" not in timers_cache:
            timers_cache["backend"] = make_analytical_backend(ctx.topology)
            timers_cache["comm"] = {}
        backend, shared = timers_cache["backend"], timers_cache["comm"]
    ct = CommTimer(ctx.hw, plan, ctx.topology, backend=backend, shared_cache=shared)
    sel = ctx.mem_options.selective
    est = estimate_step(ctx.model, plan, ctx.hw, timers=(kt, ct), selective=sel, catalog=cat)
    u = utilisation(count_flops(ctx.model, plan, sel), est.iteration_time_s, plan.world_size, ctx.hw.peak_flops)
    c.iteration_time_s = est.iteration_time_s
    c.compute_busy_s = est.compute_s + est.recompute_s
    c.mfu_6nd_with_attn, c.hfu, c.tokens_per_s_per_gpu = u["mfu_6nd_with_attn"], u["hfu"], u["tokens_per_s_per_gpu"]
    c.exposed_comm_s, c.bubble_s = dict(est.exposed_comm_s), est.bubble_s
    return c


def fit_budget_bytes(hw: HardwareSpec, gmi_error_GiB: float, cuda_context_bytes: int) -> float:
    """Bytes the allocator may use: device memory - CUDA context (outside the allocator) - headroom."""
    return hw.hbm_bytes - cuda_context_bytes - gmi_error_GiB * GiB


def _evaluate_many(args) -> list[Candidate]:
    ctx, plans = args
    cache: dict = {}
    return [evaluate(ctx, p, cache) for p in plans]


def search(model, world_size: int, global_batch_size: int, *, gpu: str = "H100", seq_length: int | None = None,
           space: SearchSpace = SearchSpace(), gmi_error_GiB: float = 6.0, use_reserved_memory: bool = True,
           dtype: str = "bf16", topology=None, hw: HardwareSpec | None = None, top_k: int = 3,
           confirm: bool = True, workers: int = 1, mem_options: MemoryOptions | None = None,
           progress: bool = False, max_candidates: int | None = None,
           use_compute_db: bool = True, db=None, net_calibration=None,
           flash_attention: bool = True) -> SearchResult:
    """Search the plan space for the fastest plan that fits (see module docstring).

    `use_compute_db=False` times kernels with the roofline of `hw` (its efficiencies) instead of
    compute_db, as PerfLLM does for that tool's system files. `db`: the ComputeDB to use
    (compute_db.open_db(path, gpu_file); default the shipped one); `net_calibration`: a netsim
    network calibration for the flow confirmation."""
    from sim.analysis.steptime import hardware_from_gpu
    if not gmi_error_GiB >= 0:  # negative headroom would report plans larger than the device as feasible
        from sim.errors import SimError
        raise SimError(f"gmi_error: expected GiB >= 0 (got {gmi_error_GiB!r})")
    t0 = time.perf_counter()
    seq = seq_length or model.seq_length
    if use_compute_db and db is None:
        db = _open_db()
    elif not use_compute_db:
        db = None
    hw = hw or hardware_from_gpu(gpu, dtype, db=db)
    mem_options = mem_options or MemoryOptions()
    ctx = _Ctx(model, hw, gmi_error_GiB, use_reserved_memory, mem_options, topology, db)
    plans = enumerate_plans(model, world_size, global_batch_size, seq, space, dtype, flash_attention)
    if max_candidates is not None:
        plans = plans[:max_candidates]
    comm = mpi_comm()
    if comm is not None:
        rank, size = comm.Get_rank(), comm.Get_size()
        mine = _evaluate_many((ctx, plans[rank::size]))
        parts = comm.allgather(mine)
        cands = [None] * len(plans)
        for r, part in enumerate(parts):
            for j, c in enumerate(part):
                cands[r + j * size] = c
    elif workers > 1 and len(plans) > 50:
        from concurrent.futures import ProcessPoolExecutor
        chunks = [plans[i::workers] for i in range(workers)]
        with ProcessPoolExecutor(workers) as ex:
            parts = list(ex.map(_evaluate_many, [(ctx, ch) for ch in chunks]))
        cands = [None] * len(plans)
        for r, part in enumerate(parts):
            for j, c in enumerate(part):
                cands[r + j * workers] = c
    else:
        it = plans
        if progress:
            try:
                from tqdm import tqdm
                it = tqdm(plans, desc="screening", unit="plan")
            except ImportError:
                pass
        cache: dict = {}
        cands = [evaluate(ctx, p, cache) for p in it]
    ranked = sorted((c for c in cands if c.feasible), key=lambda c: (c.iteration_time_s, c.peak_mem_bytes))
    result = SearchResult(cands, ranked, rejected_families(cands), len(cands), 0.0,
                          "analysis.steptime analytical estimate (compute_db kernels when available, "
                          "netsim analytical collectives when a topology is given)" if db is not None else
                          "analysis.steptime analytical estimate (roofline kernels with the hardware's "
                          "efficiencies; netsim analytical collectives when a topology is given)",
                          memory_budget_bytes=fit_budget_bytes(hw, gmi_error_GiB, mem_options.cuda_context_bytes))
    if db is None and use_compute_db:
        result.notes.append("compute_db.open_db not importable: kernel times from the roofline fallback")
    if confirm and ranked and top_k > 0:
        _confirm(result, model, topology, gpu, top_k, progress, db=db, net_calibration=net_calibration)
    result.elapsed_s = time.perf_counter() - t0
    return result


def _open_db():
    try:
        from compute_db import open_db
    except ImportError:
        return None
    try:
        return open_db()
    except Exception:  # noqa: BLE001 - no shipped DB yet: roofline fallback
        return None


def _confirm(result: SearchResult, model, topology, gpu: str, top_k: int, progress: bool = False,
             db=None, net_calibration=None) -> None:
    """Re-time the top-K plans with the flow backend of the event-driven simulator."""
    try:
        from sim import simulate
        from workload_gen import generate
    except ImportError:
        result.notes.append("top plans not confirmed: sim.simulate / workload_gen.generate not importable yet")
        return
    if topology is None:
        result.notes.append("top plans not confirmed: no topology given (use --topology)")
        return
    comm = mpi_comm()
    rank, size = (comm.Get_rank(), comm.Get_size()) if comm is not None else (0, 1)
    top = result.ranked[:top_k]
    mine: dict[int, tuple[float, str, float]] = {}
    for i, c in enumerate(top):
        if i % size != rank:
            continue   # under mpiexec the top-K plans are split over the ranks
        if progress:
            print(f"confirming {i + 1}/{len(top)} with the flow backend: {plan_label(c.plan)}",
                  file=sys.stderr, flush=True)
        try:
            rep = simulate(generate(model, c.plan), topology, gpu=gpu, network="flow", db=db,
                           net_calibration=net_calibration)
            from sim.energy import gpu_busy_s
            mine[i] = (float(rep.iteration_time_s), "", gpu_busy_s(rep, c.plan.world_size))
        except Exception as exc:  # noqa: BLE001 - recorded, the screening result stands
            mine[i] = (math.nan, f"flow confirmation failed for {plan_label(c.plan)}: {exc}", math.nan)
    parts = comm.allgather(mine) if comm is not None else [mine]
    for part in parts:
        for i, (t, note, busy) in sorted(part.items()):
            top[i].flow_iteration_time_s, top[i].flow_gpu_busy_s = t, busy
            if note:
                result.notes.append(note)
    result.confirm_method = "sim.simulate(network='flow')"
    if all(not math.isnan(c.flow_iteration_time_s) for c in top):
        top.sort(key=lambda c: c.flow_iteration_time_s)
        result.ranked[:top_k] = top


def rejected_families(cands: list[Candidate]) -> dict[str, str]:
    """Families (tp, pp, cp, ep, etp) with no feasible plan -> why (most common reason, closest miss)."""
    by: dict[str, list[Candidate]] = defaultdict(list)
    for c in cands:
        by[c.family].append(c)
    out = {}
    for fam, cs in by.items():
        if any(c.feasible for c in cs):
            continue
        mem = [c for c in cs if c.reason.startswith("memory")]
        kinds = Counter(c.reason.split(":", 1)[0] for c in cs)
        if mem:
            closest = min(mem, key=lambda c: c.peak_mem_with_reserved_bytes)
            out[fam] = (f"{len(mem)}/{len(cs)} plans over memory; closest: {plan_label(closest.plan)} "
                        f"{closest.reason}")
        else:
            reasons = Counter(c.reason for c in cs).most_common(1)[0][0]
            out[fam] = f"{kinds['invalid']}/{len(cs)} plans invalid; e.g. {reasons}"
    return out


# ------------------------------------------------------------------------------------------------
def plan_label(p) -> str:
    opt = "distopt" if p.distributed_optimizer else (f"zero{p.zero_stage}" if p.zero_stage else "noshard")
    rc = p.recompute + (f"{p.recompute_num_layers}" if p.recompute == "full" and p.recompute_num_layers else "")
    moe = f"-ep{p.ep}-etp{p.expert_tp}" if p.etp is not None else ""
    pp = f"pp{p.pp}" + (f"[{p.num_layers_first_stage},..,{p.num_layers_last_stage}]"
                        if p.num_layers_first_stage is not None else "")
    return (f"tp{p.tp}{'+sp' if p.sequence_parallel else ''}-{pp}-vpp{p.vpp}-cp{p.cp}{moe}"
            f"-dp{p.dp}-mbs{p.micro_batch_size}-{rc}-{opt}")


CSV_FIELDS = ("rank", "plan", "world_size", "tp", "sequence_parallel", "pp", "num_layers_first_stage",
              "num_layers_last_stage", "vpp", "cp", "ep", "etp", "dp", "micro_batch_size", "num_microbatches",
              "global_batch_size", "seq_length", "dtype", "flash_attention", "recompute", "recompute_num_layers",
              "framework", "distributed_optimizer", "zero_stage", "grad_reduce_dtype", "overlap_grad_reduce",
              "overlap_param_gather", "overlap_p2p_comm", "iteration_time_s", "flow_iteration_time_s", "mfu_6nd_with_attn", "hfu",
              "tokens_per_s_per_gpu", "bubble_s", "exposed_tp_s", "exposed_cp_s", "exposed_ep_s",
              "exposed_dp_s", "exposed_pp_s", "peak_mem_bytes", "peak_mem_with_reserved_bytes", "peak_path",
              "usd_per_million_tokens", "kwh_per_million_tokens")


def _row(i: int, c: Candidate) -> dict:
    p = c.plan
    e = c.exposed_comm_s
    return {"rank": i, "plan": plan_label(p), "world_size": p.world_size, "tp": p.tp, "sequence_parallel": p.sequence_parallel, "pp": p.pp,
            "num_layers_first_stage": p.num_layers_first_stage or "", "num_layers_last_stage": p.num_layers_last_stage or "",
            "vpp": p.vpp, "cp": p.cp, "ep": p.ep, "etp": "" if p.etp is None else p.etp, "dp": p.dp,
            "micro_batch_size": p.micro_batch_size, "num_microbatches": p.num_microbatches,
            "global_batch_size": p.global_batch_size, "seq_length": p.seq_length, "dtype": p.dtype,
            "flash_attention": p.flash_attention,
            "recompute": p.recompute, "recompute_num_layers": p.recompute_num_layers or "",
            "framework": p.framework, "distributed_optimizer": p.distributed_optimizer,
            "zero_stage": p.zero_stage, "grad_reduce_dtype": p.grad_reduce_dtype,
            "overlap_grad_reduce": p.overlap_grad_reduce, "overlap_param_gather": p.overlap_param_gather,
            "overlap_p2p_comm": p.overlap_p2p_comm, "iteration_time_s": f"{c.iteration_time_s:.6g}",
            "flow_iteration_time_s": "" if math.isnan(c.flow_iteration_time_s) else f"{c.flow_iteration_time_s:.6g}",
            "mfu_6nd_with_attn": f"{c.mfu_6nd_with_attn:.4f}", "hfu": f"{c.hfu:.4f}",
            "tokens_per_s_per_gpu": f"{c.tokens_per_s_per_gpu:.2f}", "bubble_s": f"{c.bubble_s:.6g}",
            **{f"exposed_{k.lower()}_s": f"{e.get(k, 0.0):.6g}" for k in ("TP", "CP", "EP", "DP", "PP")},
            "peak_mem_bytes": c.peak_mem_bytes, "peak_mem_with_reserved_bytes": c.peak_mem_with_reserved_bytes,
            "peak_path": c.peak_path,
            **{k: "" if math.isnan(getattr(c, k)) else f"{getattr(c, k):.6g}"
               for k in ("usd_per_million_tokens", "kwh_per_million_tokens")}}


def write_ranked_csv(result: SearchResult, path: str) -> None:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=CSV_FIELDS, lineterminator="\n")
    w.writeheader()
    for i, c in enumerate(result.ranked, 1):
        w.writerow(_row(i, c))
    atomic_write(path, buf.getvalue().encode())


def write_rejections_csv(result: SearchResult, path: str) -> None:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(("family", "reason"))
    for fam in sorted(result.rejected_families):
        w.writerow((fam, result.rejected_families[fam]))
    atomic_write(path, buf.getvalue().encode())


def pareto_front(cands: list[Candidate]) -> list[Candidate]:
    """Feasible plans not beaten on both step time and peak memory (sorted by memory)."""
    pts = sorted((c for c in cands if c.feasible), key=lambda c: (c.peak_mem_with_reserved_bytes, c.iteration_time_s))
    front, best_t = [], math.inf
    for c in pts:
        if c.iteration_time_s < best_t:
            front.append(c)
            best_t = c.iteration_time_s
    return front


def write_pareto_png(result: SearchResult, path: str, title: str = "") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    feas = [c for c in result.candidates if c.feasible]
    front = pareto_front(result.candidates)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=110)
    ax.scatter([c.peak_mem_with_reserved_bytes / GiB for c in feas], [c.iteration_time_s for c in feas],
               s=8, alpha=0.35, color="tab:blue", label=f"feasible plans ({len(feas)})")
    ax.plot([c.peak_mem_with_reserved_bytes / GiB for c in front], [c.iteration_time_s for c in front],
            "-o", color="tab:red", ms=4, label=f"Pareto front ({len(front)})")
    # Top-K re-timed by the flow simulator are drawn at their flow time: the best plan is chosen by
    # it, so drawing it at its screen time could show it dominated by its own neighbours.
    confirmed = [c for c in result.ranked if math.isfinite(c.flow_iteration_time_s)]
    if confirmed:
        ax.scatter([c.peak_mem_with_reserved_bytes / GiB for c in confirmed],
                   [c.flow_iteration_time_s for c in confirmed], marker="x", s=40, color="k", zorder=4,
                   label=f"top {len(confirmed)} re-timed by flow simulation")
    if result.best is not None:
        b = result.best
        flow = math.isfinite(b.flow_iteration_time_s)
        ax.scatter([b.peak_mem_with_reserved_bytes / GiB], [b.flow_iteration_time_s if flow else b.iteration_time_s],
                   marker="*", s=200, color="gold", edgecolor="k", zorder=5,
                   label=f"best: {plan_label(b.plan)}" + (f" (flow {b.flow_iteration_time_s:.3f} s)" if flow else ""))
    if not math.isnan(result.memory_budget_bytes):
        ax.axvline(result.memory_budget_bytes / GiB, color="grey", ls="--", lw=1,
                   label=f"memory budget {result.memory_budget_bytes / GiB:.1f} GiB")
    ax.set_xlabel("peak memory per GPU incl. allocator reserve (GiB)")
    ax.set_ylabel("iteration time (s): dots analytical screen" + (", x flow" if confirmed else ""))
    ax.set_title(title or "step time vs peak memory")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper center")
    fig.tight_layout()
    buf = io.BytesIO()
    fig.savefig(buf, format="png")
    plt.close(fig)
    atomic_write(path, buf.getvalue())


def candidate_dict(c: Candidate) -> dict:
    d = {k: v for k, v in _row(0, c).items() if k != "rank"}
    d["feasible"] = c.feasible
    d["reason"] = c.reason
    d["plan_fields"] = dataclasses.asdict(c.plan)
    return d
