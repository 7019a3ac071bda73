"""Per-rank device memory of a training plan: model states, activations, transients, buffers, allocator.

Everything is per GPU (one rank of a pipeline stage), in bytes. Modelled:
- Model states (mixed precision, Adam): 2 B/param 16-bit weights, 4 B/param fp32 main gradients (2 B
  when the plan's gradient dtype is 16-bit: fp16 runs by Megatron-LM's default, grad_reduce_dtype),
  12 B/param fp32 master weights + Adam m + v. Megatron's distributed optimizer / ZeRO-1 shards the 12 B
  over DP x CP (dense) and expert-DP (experts); ZeRO-2 also shards gradients; ZeRO-3 also weights.
  Shards are rounded up to whole parameters.
- Activations per layer per micro-batch: the bytes each forward kernel keeps for backward
  (`ComputeOp.saved_bytes` of a Workload, or the same kernels built without a Workload from
  workload_gen.layers via `stagefacts.KernelCatalog`), minus what the recompute policy rematerialises (selective: chosen components; full: only the layer input kept
  for `recompute_num_layers` layers of each chunk).
- In-flight micro-batches: 1F1B stage i of p keeps min(p - i, m); interleaved (Megatron) keeps the
  (p - i - 1)*2 + (v - 1)*p + 1 chunk forwards of its warm-up, each with that chunk's layers; GPipe keeps m.
- Transients: forward — the saved activations so far plus the op's own temporaries (gathered SP input,
  scores, 16-bit logits next to their fp32 softmax); backward — rematerialised activations of the layer
  plus the gradient working set (two tensors the size of the op's largest saved/temporary tensor; for
  the loss, the 16-bit logits gradient: the fp32 one is formed in place in the saved softmax).
- Communication buffers: NCCL buffers per communicator this rank belongs to, pipeline receive buffers,
  DeepSpeed ZeRO reduce/all-gather buckets.
- Allocator (PyTorch caching allocator): reserved = allocated peak + block rounding (2 MiB per large
  block) + the transient blocks of the other pass that stay cached but cannot be reused for
  differently-sized requests. `mem_factor` (SimuMax strategy field: allocated/reserved, 0.94 in its
  shipped files) replaces this model as SimuMax applies it: reserved = allocated peak / mem_factor.
Ignored: CUDA context/cuBLAS workspaces outside the allocator (reported separately as a constant),
fp8 weight copies, activation offloading, CPU optimizer offload.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from sim.analysis.stagefacts import KernelCatalog, LayerKernels, layer_assignment, rank_params
from sim.analysis.stagefacts import RankParams as RankParamsLike
from workload_gen.layers import SELECTIVE_DROP

GiB = 1024 ** 3
MiB = 1024 ** 2

# recompute component names users choose (PerfLLM: attn_recompute, mlp_recompute, mlp_rms_recompute)
SELECTIVE_COMPONENTS = {"attn": "attn_core", "mlp": "mlp_act", "norm": "norm_out"}


@dataclass(frozen=True)
class MemoryOptions:
    selective: tuple[str, ...] = ("attn",)     # what "selective" recompute rematerialises
    nccl_buffer_bytes_per_comm: int = 2 * 8 * 4 * MiB  # 2 peers x 8 channels x NCCL_BUFFSIZE 4 MiB
    cuda_context_bytes: int = 600 * MiB          # outside the allocator; reported, not in peak_mem
    block_round_bytes: int = 2 * MiB
    mem_factor: float | None = None              # SimuMax's allocated/reserved in (0, 1]: reserved = peak / it


@dataclass
class ModelStateMemory:
    dense_params: int
    expert_params: int
    weight_bytes: int
    grad_bytes: int
    optimizer_bytes: int

    @property
    def total_bytes(self) -> int:
        return self.weight_bytes + self.grad_bytes + self.optimizer_bytes


@dataclass
class PeakPath:
    stage: int
    chunk: int
    layer: int
    op: str
    phase: str        # "fwd" | "bwd"

    def __str__(self) -> str:
        return f"stage {self.stage} chunk {self.chunk} layer {self.layer} op {self.op} ({self.phase})"


@dataclass
class StageMemory:
    stage: int
    layers: list[tuple[int, ...]]
    model_states: ModelStateMemory
    activation_per_layer_bytes: dict[int, int]
    activation_per_chunk_bytes: list[int]
    activation_per_microbatch_bytes: int
    inflight_microbatches: float
    peak_activation_bytes: int
    fwd_peak_allocated_bytes: int
    bwd_peak_allocated_bytes: int
    comm_buffer_bytes: dict[str, int]
    peak_allocated_bytes: int
    reserved_bytes: int
    peak_path: PeakPath
    fwd_path: PeakPath
    bwd_path: PeakPath

    @property
    def memory_reserved_ratio(self) -> float:
        return self.reserved_bytes / max(1, self.peak_allocated_bytes)


@dataclass
class MemoryReport:
    stages: list[StageMemory]
    cuda_context_bytes: int
    source: str                       # "workload" | "layers" (workload_gen.layers units, no Workload built)
    notes: list[str] = field(default_factory=list)

    @property
    def peak(self) -> StageMemory:
        return max(self.stages, key=lambda s: s.reserved_bytes)

    @property
    def peak_allocated_bytes(self) -> int:
        return max(s.peak_allocated_bytes for s in self.stages)

    @property
    def peak_reserved_bytes(self) -> int:
        return max(s.reserved_bytes for s in self.stages)

    def to_dict(self) -> dict:
        out = {"source": self.source, "cuda_context_bytes": self.cuda_context_bytes,
               "peak_allocated_bytes": self.peak_allocated_bytes,
               "peak_reserved_bytes": self.peak_reserved_bytes,
               "peak_path": str(self.peak.peak_path), "notes": list(self.notes), "stages": []}
        for s in self.stages:
            d = asdict(s)
            d["model_states"]["total_bytes"] = s.model_states.total_bytes
            d["activation_per_layer_bytes"] = {str(k): v for k, v in s.activation_per_layer_bytes.items()}
            d["memory_reserved_ratio"] = s.memory_reserved_ratio
            for k in ("peak_path", "fwd_path", "bwd_path"):
                d[k] = str(getattr(s, k))
            out["stages"].append(d)
        return out


# ---------------------------------------------------------------------------------------------
# model states
# ---------------------------------------------------------------------------------------------
def _ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def _grad_elem_bytes(plan) -> int:
    """Main-grad buffer bytes per parameter: Megatron's buffer has the reduction dtype
    (workload_gen.dp_comm.grad_reduce_dtype: fp32, or the 16-bit dtype for fp16 runs by default);
    DeepSpeed keeps fp32 gradient partitions (4 B)."""
    if plan.framework == "deepspeed":
        return 4
    from workload_gen.dp_comm import grad_reduce_bytes
    return grad_reduce_bytes(plan)


def model_state_bytes(dense_params: int, expert_params: int, plan) -> ModelStateMemory:
    """Weights/grads/optimizer bytes of one rank holding `dense_params` + `expert_params` (TP/PP/EP-sharded)."""
    dshard = plan.dp * plan.cp
    eshard = max(1, plan.edp)
    zero = int(plan.zero_stage)
    opt_sharded = bool(plan.distributed_optimizer) or zero >= 1

    def per(n_dense: int, n_exp: int, sharded: bool) -> int:
        if not sharded:
            return n_dense + n_exp
        return _ceil_div(n_dense, dshard) + (_ceil_div(n_exp, eshard) if n_exp else 0)

    return ModelStateMemory(
        dense_params=dense_params, expert_params=expert_params,
        weight_bytes=2 * per(dense_params, expert_params, zero >= 3),
        grad_bytes=_grad_elem_bytes(plan) * per(dense_params, expert_params, zero >= 2),
        optimizer_bytes=12 * per(dense_params, expert_params, opt_sharded))


# ---------------------------------------------------------------------------------------------
# recompute
# ---------------------------------------------------------------------------------------------
def dropped_components(plan, options: MemoryOptions) -> frozenset[str]:
    """Saved-tensor components (workload_gen.layers.COMPONENTS) the plan's recompute rematerialises."""
    if plan.recompute != "selective":
        return frozenset()
    return frozenset(SELECTIVE_COMPONENTS[c] for c in options.selective)


def full_recompute_layers(plan, chunk_layers: tuple[int, ...]) -> set[int]:
    """Layers of a chunk that keep only their input (Megatron 'block' method: the first n of each chunk)."""
    if plan.recompute != "full":
        return set()
    n = len(chunk_layers) if plan.recompute_num_layers is None else min(plan.recompute_num_layers,
                                                                          len(chunk_layers))
    return set(chunk_layers[:n])


def layer_input_bytes(c) -> int:
    """The layer input (kept by full recompute) of a workload_gen.layers.Ctx `c`."""
    return c.ab * c.tokens_sp * c.h


# ---------------------------------------------------------------------------------------------
# in-flight micro-batches
# ---------------------------------------------------------------------------------------------
def inflight_chunks(stage: int, pp: int, vpp: int, m: int, schedule: str = "1f1b") -> list[int]:
    """Chunk index of every chunk-forward alive when the stage's first backward starts."""
    if pp == 1 or schedule == "none":
        return list(range(vpp))
    if schedule == "gpipe":
        return [c for _ in range(m) for c in range(vpp)]
    if vpp == 1:
        return [0] * min(pp - stage, m)
    n = min((pp - stage - 1) * 2 + (vpp - 1) * pp + 1, m * vpp)
    return [(k // pp) % vpp for k in range(n)]


def inflight_microbatches(stage: int, pp: int, vpp: int, m: int, schedule: str = "1f1b") -> float:
    return len(inflight_chunks(stage, pp, vpp, m, schedule)) / max(1, vpp)


# ---------------------------------------------------------------------------------------------
# activations
# ---------------------------------------------------------------------------------------------
def activations_from_workload(workload) -> dict[tuple[int, int], dict[int, int]]:
    """{(stage, chunk): {layer: saved bytes per micro-batch}} from the kernels' saved_bytes (-1: non-layer)."""
    out: dict[tuple[int, int], dict[int, int]] = {}
    for st in workload.stages:
        for ch in st.chunks:
            per: dict[int, int] = {}
            for op in ch.forward:
                if getattr(op, "is_comm", False) or op.phase != "fwd":
                    continue
                per[op.layer] = per.get(op.layer, 0) + int(op.saved_bytes)
            out[(st.stage, ch.chunk)] = per
    return out


def layer_activation_bytes(model, plan, layer: int = 0, options: MemoryOptions = MemoryOptions(),
                           full: bool | None = None) -> int:
    """Saved activation bytes of one layer per micro-batch on one rank under the plan's recompute."""
    cat = KernelCatalog(model, plan)
    if full is None:
        full = plan.recompute == "full"
    if full:
        return layer_input_bytes(cat.ctx)
    return cat.layer(layer).saved_bytes(dropped_components(plan, options))


def _bwd_working(lk: LayerKernels, rematerialised: int) -> tuple[int, str]:
    """Peak extra bytes while one layer's backward runs: recomputed tensors + gradient working set
    (two tensors the size of the largest tensor one kernel keeps or holds)."""
    best, name = 0, lk.fwd[0].name if lk.fwd else ""
    for i, op in enumerate(lk.fwd):
        largest = max([lk.temp[i], *(b for _, b in lk.saved[i])])
        if 2 * largest > best:
            best, name = 2 * largest, op.name
    return rematerialised + best, name


@dataclass(frozen=True)
class _Segment:
    """One layer (or the embedding / output block) under a recompute policy, summarised for the walk."""
    saved: int          # bytes kept for backward
    fwd_max: int        # max over ops of (saved before the op inside the segment + op temporaries + its saved)
    fwd_op: str
    bwd_extra: int      # rematerialised + gradient working set while its backward runs
    bwd_op: str
    n_ops: int


def _segment(lk: LayerKernels, saved: list[int], remat: int) -> _Segment:
    cum, best, name = 0, 0, lk.fwd[0].name if lk.fwd else ""
    for op, tmp, sv in zip(lk.fwd, lk.temp, saved):
        cand = cum + tmp + sv
        if cand > best:
            best, name = cand, op.name
        cum += sv
    extra, bname = _bwd_working(lk, remat) if lk.fwd else (0, "")
    return _Segment(int(cum), int(best), name, int(extra), bname, len(lk.fwd))


def analyze_memory(model, plan, workload=None, *, options: MemoryOptions = MemoryOptions(),
                   schedule: str | None = None, catalog: KernelCatalog | None = None) -> MemoryReport:
    """Memory of every pipeline stage of `plan` (per rank). Uses `workload` saved_bytes when given.
    `catalog`: the plan's KernelCatalog when the caller already has one (search)."""
    cat = catalog or KernelCatalog(model, plan)
    assign = layer_assignment(model, plan)
    pp, vpp = plan.pp, max(1, plan.vpp)
    m = max(1, plan.num_microbatches)
    if schedule is None:
        schedule = workload.schedule if workload is not None else (
            "none" if pp == 1 else ("interleaved" if vpp > 1 else "1f1b"))
    drop = dropped_components(plan, options)
    wl_acts = activations_from_workload(workload) if workload is not None else None
    emb, head = cat.embedding(), cat.head()
    stages: list[StageMemory] = []
    notes: list[str] = []
    inp_bytes = layer_input_bytes(cat.ctx)
    moe = model.num_experts > 0
    summaries: dict[tuple[bool, bool], _Segment] = {}

    def layer_summary(layer: int, full: bool) -> _Segment:
        key = (moe and model.layer_is_moe(layer), full)
        seg = summaries.get(key)
        if seg is None:
            lk = cat.layer(layer)
            if full:
                # workload_gen.layers.full_recompute_saved: the first kernel keeps the layer input
                saved = [inp_bytes if k == 0 else 0 for k in range(len(lk.fwd))]
                remat = lk.saved_bytes() - inp_bytes
            else:
                saved = [lk.op_saved(i, drop) for i in range(len(lk.fwd))]
                remat = lk.saved_bytes() - lk.saved_bytes(drop)
            seg = summaries[key] = _segment(lk, saved, remat)
        return seg

    emb_seg = _segment(emb, [emb.op_saved(i) for i in range(len(emb.fwd))], 0)
    out_seg = _segment(head, [head.op_saved(i) for i in range(len(head.fwd))], 0)
    # the loss backward: a 16-bit logits gradient (the fp32 one is formed in place in the saved softmax)
    ce_name, ce_grad = "cross_entropy", max(t for op, t in zip(head.fwd, head.temp) if op.kind == "cross_entropy")
    params_cache: dict[tuple, RankParamsLike] = {}
    for stage in range(pp):
        chunks = assign[stage]
        all_layers = tuple(x for c in chunks for x in c)
        # stages of identical composition hold identical parameter counts
        pkey = (stage == 0, stage == pp - 1,
                tuple(model.layer_is_moe(x) for x in all_layers) if moe else len(all_layers))
        rp = params_cache.get(pkey)
        if rp is None:
            rp = params_cache[pkey] = rank_params(model, plan, stage)
        states = model_state_bytes(rp.dense, rp.expert, plan)
        per_layer: dict[int, int] = {}
        chunk_bytes: list[int] = []
        # forward/backward peak candidates inside one chunk-forward: (extra bytes, layer, op)
        fwd_inside: list[tuple[int, int, str]] = []
        bwd_inside: list[tuple[int, int, str]] = []
        n_ops = 0
        for ci, layers in enumerate(chunks):
            fulls = full_recompute_layers(plan, layers)
            first_chunk = stage == 0 and ci == 0
            last_chunk = stage == pp - 1 and ci == len(chunks) - 1
            segs: list[tuple[int, _Segment]] = [(-1, emb_seg)] if first_chunk else []
            segs += [(layer, layer_summary(layer, layer in fulls)) for layer in layers]
            if last_chunk:
                segs.append((-1, out_seg))
            n_ops = max(n_ops, sum(sg.n_ops for _, sg in segs))
            if wl_acts is not None:
                # the workload's own accounting (generator's saved_bytes) replaces the walk's totals
                wl = dict(wl_acts.get((stage, ci), {}))
                # the generator's "selective" drops SELECTIVE_DROP: adjust to the chosen components
                extra_drop = drop - SELECTIVE_DROP
                restore = SELECTIVE_DROP - drop if plan.recompute == "selective" else frozenset()
                for layer in layers:
                    if (extra_drop or restore) and layer not in fulls:
                        lk = cat.layer(layer)
                        wl[layer] = (wl.get(layer, 0) - (lk.saved_bytes() - lk.saved_bytes(extra_drop))
                                     + (lk.saved_bytes() - lk.saved_bytes(restore)))
                    per_layer[layer] = wl.get(layer, 0)
                total = sum(wl.values())
            else:
                for layer, sg in segs:
                    if layer >= 0:
                        per_layer[layer] = sg.saved
                total = sum(sg.saved for _, sg in segs)
            chunk_bytes.append(int(total))
            cum, best = 0, (0, -1, "")
            for layer, sg in segs:
                if cum + sg.fwd_max > best[0]:
                    best = (cum + sg.fwd_max, layer, sg.fwd_op)
                cum += sg.saved
            # relative to the chunk's full saved set (walk accounting on both sides)
            fwd_inside.append((best[0] - cum, best[1], best[2]))
            # backward: the first layer backwarded is the chunk's last one (largest live set). The loss
            # backward forms the fp32 gradient in place in the saved softmax and casts it to a 16-bit
            # gradient of the logits: one logits-sized 16-bit tensor on top of the saved set.
            bbest = (ce_grad, -1, ce_name) if last_chunk else (0, -1, "")
            if layers:
                sg = layer_summary(layers[-1], layers[-1] in fulls)
                if sg.bwd_extra > bbest[0]:
                    bbest = (sg.bwd_extra, layers[-1], sg.bwd_op)
            bwd_inside.append(bbest)
        act_mb = sum(chunk_bytes)
        inflight = inflight_chunks(stage, pp, vpp, m, schedule)
        peak_act = sum(chunk_bytes[c] for c in inflight)
        bufs = comm_buffers(model, plan, cat.ctx, options)
        base = states.total_bytes + sum(bufs.values())
        # forward peak: during the last in-flight chunk-forward
        last_c = inflight[-1]
        f_extra, f_layer, f_op = fwd_inside[last_c]
        fwd_peak = base + peak_act + max(0, f_extra)
        # backward peak: the first backward (all in-flight alive) runs on the last model chunk (v-1)
        b_c = len(chunks) - 1
        b_extra, b_layer, b_op = bwd_inside[b_c]
        bwd_peak = base + peak_act + b_extra
        fpath = PeakPath(stage, last_c, f_layer, f_op, "fwd")
        bpath = PeakPath(stage, b_c, b_layer, b_op, "bwd")
        peak_alloc = max(fwd_peak, bwd_peak)
        path = fpath if fwd_peak >= bwd_peak else bpath
        n_blocks = len(inflight) * max(1, n_ops) + 8
        if options.mem_factor:
            reserved = int(peak_alloc / options.mem_factor)
        else:
            other = min(max(0, f_extra), b_extra)
            rounding = min(n_blocks * options.block_round_bytes // 2, peak_alloc // 50)
            reserved = peak_alloc + other + rounding
        stages.append(StageMemory(stage, [tuple(c) for c in chunks], states, per_layer, chunk_bytes, act_mb,
                                  len(inflight) / vpp, peak_act, fwd_peak, bwd_peak, bufs, peak_alloc,
                                  int(reserved), path, fpath, bpath))
    if wl_acts is not None:
        notes.append("activations from the workload's ComputeOp.saved_bytes; transients from workload_gen.layers' units")
    return MemoryReport(stages, options.cuda_context_bytes, "workload" if workload is not None else "layers",
                        notes)


def comm_buffers(model, plan, c, options: MemoryOptions) -> dict[str, int]:
    """Explicit communication-buffer terms of one rank (bytes); `c`: workload_gen.layers.Ctx."""
    out: dict[str, int] = {}
    groups = {"tp": plan.tp, "cp": plan.cp, "dp_cp": plan.dp * plan.cp, "pp": plan.pp,
              "ep": plan.ep if model.num_experts else 1, "etp": plan.expert_tp if model.num_experts else 1,
              "edp": plan.edp if model.num_experts else 1}
    n_comm = sum(1 for v in groups.values() if v > 1)
    if plan.pp > 1:
        n_comm += 1  # model-parallel (grad-norm) communicator; embedding group on first/last stages
    out["nccl_buffers"] = n_comm * options.nccl_buffer_bytes_per_comm
    if plan.pp > 1:
        out["pp_recv_buffers"] = 2 * c.ab * c.tokens_sp * c.h
    if plan.framework == "deepspeed" and plan.zero_stage >= 1:
        out["zero_reduce_bucket"] = 2 * plan.reduce_bucket_elements
        out["zero_allgather_bucket"] = 2 * plan.allgather_bucket_elements
    if plan.framework == "deepspeed" and plan.zero_stage >= 3:
        # ZeRO-3 gathers a layer's full (TP-sharded) weights before use and prefetches the next one
        out["zero3_gathered_params"] = 2 * 2 * _largest_layer_params(model, plan)
    if plan.tp_comm_overlap and plan.tp > 1:
        out["tp_overlap_userbuffers"] = 2 * c.ab * c.tokens * c.h
    return out


def _largest_layer_params(model, plan) -> int:
    """Parameters of the largest transformer layer held by one rank before ZeRO sharding."""
    from workload_gen.params import layer_rank_params
    return max(sum(layer_rank_params(model, plan, i)[:2]) for i in {0, model.num_layers - 1})
