"""Fast analytical step-time estimate for screening many plans (milliseconds per plan).

Built from the same kernels as the simulator — the ComputeOps workload_gen.layers emits for a layer
(`stagefacts.KernelCatalog`, no Workload built), forward, backward (dgrad/wgrad) and recompute — timed by compute_db (`ComputeDB.lookup_many`) when a database is importable, else
by a roofline with size-dependent GEMM efficiency — and from collective times of netsim's analytical
backend (`estimate`) when a topology is given, else an alpha-beta model on the GPU's NVLink/NIC rates.
Assembly (per micro-batch, bottleneck stage):
- a layer's forward = its kernels + its TP/EP/CP collectives (the non-blocking CP K/V ring exchange hides
  behind the attention kernels); backward = its backward kernels + the forward's collectives mirrored
  + recompute;
- iteration = (m + (p − 1)/v) × (fwd + bwd of the slowest stage) + exposed pipeline p2p
  + exposed DP gradient reduction (what does not hide behind the last micro-batch's backward)
  + exposed parameter all-gather (distributed optimizer; hides behind the first forward) + optimizer step;
  without overlap_grad_reduce / overlap_param_gather (plan fields) those are fully exposed, in the
  plan's gradient dtype (workload_gen.dp_comm.grad_reduce_bytes);
- per kernel the same launch costs as the simulator (sim.overheads): a kernel occupies the stream for
  max(its time, the host's issue time) + the launch gap (runs of short kernels are host-bound);
  optimizer-side kernels at their real size (zero-grad, gradient norm, Adam: dp_comm).
Ignored (the event-driven simulator models them): contention between groups, stream-level overlap
details, per-stage imbalance beyond the slowest stage. Confirm the best plans with `sim.simulate`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from sim.analysis.stagefacts import KernelCatalog, layer_assignment, rank_params
from sim.overheads import HOST_PER_KERNEL_S, KERNEL_GAP_S
from workload_gen.dp_comm import grad_reduce_bytes, megatron_bucket_elements, shard_kernel_bytes

GEMM_PEAK_EFF = 0.78       # large-GEMM efficiency (H100 measured 70–85% of dense peak, hardware.md)
HBM_EFF = 0.80             # achievable fraction of HBM bandwidth for memory-bound kernels
NVLINK_EFF = 370 / 450     # NCCL busbw / NVLink4 line rate (hardware.md)
NIC_EFF = 46 / 50          # NCCL busbw / NDR line rate (hardware.md)
ALPHA_INTRA_S = 8e-6
ALPHA_INTER_S = 20e-6


@dataclass
class HardwareSpec:
    """What the estimate needs of a GPU and its fabric (SI units)."""
    name: str
    peak_flops: float              # dense FLOP/s of the training dtype
    hbm_Bps: float
    hbm_bytes: float
    nvlink_Bps: float              # per GPU, one direction
    nic_Bps: float                 # per GPU, one direction
    gpus_per_server: int = 8
    gemm_efficiency: float = GEMM_PEAK_EFF
    attn_efficiency: float = 0.6   # flash attention fraction of peak
    nvlink_efficiency: float = NVLINK_EFF
    nic_efficiency: float = NIC_EFF
    intra_latency_s: float = ALPHA_INTRA_S
    inter_latency_s: float = ALPHA_INTER_S


def hardware_from_gpu(gpu: str, dtype: str = "bf16", gpus_per_server: int = 8, db=None) -> HardwareSpec:
    """HardwareSpec of a GPU of the compute_db table (`db`: a ComputeDB whose user GPUs count too)."""
    if db is not None and hasattr(db, "gpu"):
        g = db.gpu(gpu)
    else:
        from compute_db.gpus import get_gpu
        g = get_gpu(gpu)
    return HardwareSpec(g.name, float(g.peak_flops.get(dtype, g.peak_flops["bf16"])), float(g.hbm_Bps),
                        float(g.hbm_bytes), float(g.nvlink_Bps), float(g.nic_Bps), gpus_per_server)


@dataclass
class StepEstimate:
    iteration_time_s: float
    compute_s: float
    recompute_s: float
    exposed_comm_s: dict[str, float]
    bubble_s: float
    optimizer_s: float
    chunk_time_s: float               # fwd + bwd of one micro-batch on the slowest stage
    stage_fwd_s: list[float] = field(default_factory=list)
    stage_bwd_s: list[float] = field(default_factory=list)
    method: str = "analytical estimate (analysis.steptime)"


# ------------------------------------------------------------------------------------------------
class KernelTimer:
    """Seconds per kernel: compute_db when available, else roofline. Cached by (kind, shape, variant)."""

    def __init__(self, hw: HardwareSpec, db=None, gpu_name: str | None = None, dtype: str = "bf16"):
        self.hw, self.db, self.gpu, self.dtype = hw, db, gpu_name or hw.name, dtype
        self._cache: dict[tuple, float] = {}

    def _roofline(self, op) -> float:
        hw = self.hw
        flops, nbytes = op.flops, op.bytes
        if op.kind in ("gemm", "grouped_gemm", "attn_bmm"):
            dims = dict(op.shape)
            m, n, k = dims.get("m", 1), dims.get("n", 1), dims.get("k", 1)
            # efficiency falls for skinny/small GEMMs: saturating in the smallest dimension
            small = min(m, n, k)
            eff = hw.gemm_efficiency * min(1.0, (small / 1024.0) ** 0.25) * (0.9 if op.kind == "attn_bmm" else 1.0)
            tc = flops / (hw.peak_flops * max(0.05, eff))
        elif op.kind == "flash_attn":
            tc = flops * (0.5 if op.causal else 1.0) / (hw.peak_flops * hw.attn_efficiency)
        else:
            tc = 0.0
        return max(tc, nbytes / (hw.hbm_Bps * HBM_EFF))

    def time(self, op) -> float:
        """Stream time of one workload_gen ComputeOp: max(kernel, host issue) + launch gap (sim.overheads)."""
        key = (op.kind, op.shape, op.variant, op.causal, op.dtype)
        t = self._cache.get(key)
        if t is None:
            t = max(self._lookup(op), HOST_PER_KERNEL_S) + KERNEL_GAP_S
            self._cache[key] = t
        return t

    def _lookup(self, op) -> float:
        if self.db is not None:
            try:
                return float(self.db.lookup(op, self.gpu).time_s)
            except Exception:  # noqa: BLE001 - any DB miss/shape issue falls back to the roofline
                pass
        return self._roofline(op)

    def total(self, ops) -> float:
        return sum(self.time(o) for o in ops)


# ------------------------------------------------------------------------------------------------
def group_ranks(plan, kind: str) -> tuple[int, ...]:
    """Global ranks of the group of `kind` containing rank 0 (Megatron order tp-cp-(ep)-dp-pp)."""
    tp, cp, dp, pp = plan.tp, plan.cp, plan.dp, plan.pp
    etp, ep = plan.expert_tp, plan.ep
    spec = {"tp": (tp, 1), "cp": (cp, tp), "dp": (dp, tp * cp), "dp_cp": (dp * cp, tp),
            "pp": (pp, tp * cp * dp), "etp": (etp, 1), "ep": (ep, etp), "edp": (plan.edp, etp * ep),
            "embedding": (2, tp * cp * dp * (pp - 1) if pp > 1 else 1)}
    n, stride = spec.get(kind, (1, 1))
    return tuple(i * stride for i in range(max(1, n)))


class CommTimer:
    """Seconds for a collective of one group kind: netsim analytical backend or alpha-beta fallback."""

    def __init__(self, hw: HardwareSpec, plan, topology=None, *, backend=None, shared_cache: dict | None = None):
        """`backend`/`shared_cache` let many plans on one topology share one netsim backend and its estimates."""
        self.hw, self.plan, self.topology = hw, plan, topology
        self._backend = backend if backend is not None else (make_analytical_backend(topology) if topology else None)
        self._shared = shared_cache if shared_cache is not None else {}
        self._cache: dict[tuple, float] = {}

    def time(self, collective: str, kind: str, size_bytes: float) -> float:
        if size_bytes <= 0 or collective == "none":
            return 0.0
        ranks = group_ranks(self.plan, kind)
        if len(ranks) <= 1 and collective != "send":
            return 0.0
        key = (collective, kind, int(size_bytes))
        t = self._cache.get(key)
        if t is None:
            t = self._estimate(collective, ranks, size_bytes)
            self._cache[key] = t
        return t

    def _estimate(self, collective: str, ranks: tuple[int, ...], size: float) -> float:
        if collective == "send" and len(ranks) < 2:
            ranks = (0, self.plan.tp * self.plan.cp * self.plan.dp)
        if self._backend is not None:
            gpus = tuple(ranks[:2] if collective == "send" else ranks)
            key = (collective, gpus, int(size))
            t = self._shared.get(key)
            if t is not None:
                return t
            try:
                from netsim import CollectiveRequest
                t = float(self._backend.estimate(CollectiveRequest(collective, gpus, int(size))))
                self._shared[key] = t
                return t
            except Exception:  # noqa: BLE001 - fall back to alpha-beta on any backend refusal
                pass
        hw = self.hw
        n = len(ranks)
        span = (max(ranks) // hw.gpus_per_server) - (min(ranks) // hw.gpus_per_server)
        intra = span == 0 and hw.nvlink_Bps > 0
        bw = hw.nvlink_Bps * hw.nvlink_efficiency if intra else hw.nic_Bps * hw.nic_efficiency
        alpha = hw.intra_latency_s if intra else hw.inter_latency_s
        if collective == "all_reduce":
            factor = 2.0 * (n - 1) / n
            alpha *= 2 * math.log2(max(2, n)) if not intra else 2
        elif collective in ("all_gather", "reduce_scatter", "all_to_all"):
            factor = (n - 1) / n
        else:
            factor = 1.0
        return alpha + size * factor / max(1.0, bw)


def make_analytical_backend(topology):
    """netsim's analytical (alpha-beta, topology-aware) backend, or None when netsim lacks it."""
    try:
        from netsim import make_backend
        return make_backend("analytical", topology)
    except (ImportError, AttributeError):
        return None


# ------------------------------------------------------------------------------------------------
def block_comm_times(comms, ct: CommTimer, plan, attn_s: float) -> dict[str, float]:
    """Exposed seconds per report group (TP/CP/EP) of one block's CommOps: non-blocking CP exchanges
    (ring attention's K/V) hide behind the attention kernels (`attn_s`); with TP comm overlap (TE
    userbuffers) TP collectives are 80% hidden behind the GEMMs."""
    out: dict[str, float] = {}
    for op in comms:
        t = ct.time(op.collective, op.group, op.size_bytes)
        if op.group == "cp" and not op.blocking:
            t = max(0.0, t - attn_s)
        grp = {"tp": "TP", "etp": "TP", "cp": "CP", "ep": "EP"}.get(op.group, "TP")
        if grp == "TP" and plan.tp_comm_overlap:
            t *= 0.2
        out[grp] = out.get(grp, 0.0) + t
    return out


def estimate_step(model, plan, hw: HardwareSpec, *, db=None, topology=None, selective=("attn",),
                  timers: tuple[KernelTimer, CommTimer] | None = None,
                  catalog: KernelCatalog | None = None) -> StepEstimate:
    """Analytical iteration time of `plan` (see module docstring); `catalog`: the plan's KernelCatalog."""
    kt, ct = timers if timers is not None else (KernelTimer(hw, db, dtype=plan.dtype), CommTimer(hw, plan, topology))
    cat = catalog or KernelCatalog(model, plan)
    c = cat.ctx
    assign = layer_assignment(model, plan)
    pp, vpp, m = plan.pp, max(1, plan.vpp), max(1, plan.num_microbatches)
    rec_groups = set(selective) if plan.recompute == "selective" else set()

    layer_cache: dict[bool, tuple[float, float, float, float, dict[str, float], dict[str, float]]] = {}

    def layer_times(layer: int):
        key = model.layer_is_moe(layer)
        if key in layer_cache:
            return layer_cache[key]
        lk = cat.layer(layer)
        f = kt.total(lk.fwd)
        b = kt.total(lk.bwd)
        attn_t = kt.total(o for o in lk.fwd if o.kind in ("flash_attn", "attn_bmm", "softmax"))
        comm_f = block_comm_times(lk.fwd_comms, ct, plan, attn_t)
        sel = kt.total(o for o, g in zip(lk.fwd, lk.group) if g in rec_groups) if rec_groups else 0.0
        # full recompute re-runs the forward including its collectives
        full_t = f + sum(comm_f.values())
        layer_cache[key] = (f, b, sel, full_t, comm_f, dict(comm_f))
        return layer_cache[key]

    emb, head = cat.embedding(), cat.head()
    emb_f = kt.total(emb.fwd) + sum(block_comm_times(emb.fwd_comms, ct, plan, 0.0).values())
    emb_b = kt.total(emb.bwd) + sum(block_comm_times(emb.bwd_comms, ct, plan, 0.0).values())
    # head: final norm, LM head (+ its SP all-gather), vocab-parallel cross-entropy and its all-reduces
    out_f = kt.total(head.fwd) + sum(block_comm_times(head.fwd_comms, ct, plan, 0.0).values())
    out_b = kt.total(head.bwd) + sum(block_comm_times(head.bwd_comms, ct, plan, 0.0).values())

    stage_f, stage_b, stage_comp, stage_rec = [], [], [], []
    comm_stage: list[dict[str, float]] = []
    for stage in range(pp):
        f = b = comp = rec = 0.0
        comm: dict[str, float] = {}
        for ci, chunk in enumerate(assign[stage]):
            nfull = 0
            if plan.recompute == "full":
                nfull = len(chunk) if plan.recompute_num_layers is None else min(plan.recompute_num_layers, len(chunk))
            for li, layer in enumerate(chunk):
                lf, lb, sel, full_t, comm_f, _ = layer_times(layer)
                lc = sum(comm_f.values())
                f += lf + lc
                r = full_t if li < nfull else sel
                b += lb + lc + r
                comp += lf + lb
                rec += r
                for k, v in comm_f.items():
                    comm[k] = comm.get(k, 0.0) + 2 * v
            if stage == 0 and ci == 0:
                f, b, comp = f + emb_f, b + emb_b, comp + emb_f + emb_b
            if stage == pp - 1 and ci == len(assign[stage]) - 1:
                f, b, comp = f + out_f, b + out_b, comp + out_f + out_b
        stage_f.append(f)
        stage_b.append(b)
        stage_comp.append(comp)
        stage_rec.append(rec)
        comm_stage.append(comm)
    slow = max(range(pp), key=lambda i: stage_f[i] + stage_b[i])
    chunk_s = stage_f[slow] + stage_b[slow]
    bubble = (pp - 1) / vpp * chunk_s
    exposed = {"TP": 0.0, "CP": 0.0, "EP": 0.0, "DP": 0.0, "PP": 0.0}
    for k, v in comm_stage[slow].items():
        exposed[k] = exposed.get(k, 0.0) + v * m
    if pp > 1:
        p2p = ct.time("send", "pp", c.ab * c.tokens_sp * c.h)     # the generator's pp_send_fwd message
        exposed["PP"] = 2 * p2p * (m + pp - 1)

    # data-parallel gradient reduction and parameter gather (bucketed, overlapped unless the plan says not)
    rp = rank_params(model, plan, slow)
    deepspeed = plan.framework == "deepspeed"
    bucket_el = plan.reduce_bucket_elements if deepspeed else megatron_bucket_elements(plan)
    dist = plan.distributed_optimizer or plan.zero_stage >= 1
    n_layers_stage = max(1, sum(len(c) for c in assign[slow]))
    gb = grad_reduce_bytes(plan)
    overlap_grad = deepspeed or plan.overlap_grad_reduce
    overlap_gather = deepspeed or plan.overlap_param_gather
    window = stage_b[slow] / vpp if overlap_grad else 0.0
    dp_t = 0.0
    for n_params, kind in ((rp.dense, "dp_cp"), (rp.expert, "edp")):
        if n_params <= 0:
            continue
        buckets = max(1, math.ceil(n_params / max(1, bucket_el)))
        if plan.zero_stage >= 2:
            # partitioned gradients: DeepSpeed reduce-scatters them after every micro-batch's backward
            t_red = ct.time("reduce_scatter", kind, gb * n_params)
            dp_t += m * max(t_red / buckets, t_red - window)
        else:
            op = "reduce_scatter" if dist else "all_reduce"
            t_red = ct.time(op, kind, gb * n_params)
            dp_t += max(t_red / buckets, t_red - window) if overlap_grad else t_red
        if plan.zero_stage >= 3:
            # weights gathered layer by layer before every forward and backward of every micro-batch;
            # the first gather of each pass cannot hide behind compute
            t_all = ct.time("all_gather", kind, 2 * n_params)
            t_one = ct.time("all_gather", kind, 2 * n_params // n_layers_stage)
            dp_t += m * max(2 * t_one, 2 * t_all - (stage_f[slow] + stage_b[slow]))
        elif dist:
            t_ag = ct.time("all_gather", kind, 2 * n_params)
            dp_t += max(t_ag / buckets, t_ag - stage_f[slow]) if overlap_gather else t_ag
    if pp > 1 and model.tie_embeddings:
        dp_t += ct.time("all_reduce", "embedding", gb * c.vocab_rank * c.h)
    exposed["DP"] = dp_t
    shard = (rp.dense / (plan.dp * plan.cp) + rp.expert / max(1, plan.edp)) if dist else rp.total
    # dp_comm's optimizer-side kernels over the shard, zero_grad_buffer over every local parameter
    kernels = shard_kernel_bytes(plan)
    per_shard = float(sum(b for _, b in kernels))
    optimizer_s = ((shard * per_shard + rp.total * gb) / (hw.hbm_Bps * HBM_EFF)
                   + (len(kernels) + 1) * (HOST_PER_KERNEL_S + KERNEL_GAP_S))
    compute_s = m * stage_comp[slow]
    it = (m + (pp - 1) / vpp) * chunk_s + exposed["PP"] + exposed["DP"] + optimizer_s
    return StepEstimate(it, compute_s, m * stage_rec[slow], exposed, bubble, optimizer_s, chunk_s,
                        stage_f, stage_b)
