"""FLOPs, bytes and utilisation of one training iteration.

Conventions (multiply-add = 2 FLOPs; per iteration = global batch B sequences of length s):
- Model FLOPs ("6·N·D with attention"): per token 6 × N_mm + per layer 6·s·a·(d_qk + d_v), where N_mm
  counts the active parameters that take part in a matrix multiply (attention projections, dense MLPs,
  router, shared and top-k routed experts, LM head; not the embedding lookup, norms or biases) and
  the second term is QKᵀ and PV over the full (non-causal-halved) s×s score matrix, 3 passes.
  For a GPT (GELU 4h) this equals 72·B·s·l·h²·(1 + s/(6h) + V/(12·l·h)); for Llama-style models
  B·s·[12·l·h²·(1 + G/A + s/h) + 18·l·F·h + 6·V·h].
- Hardware FLOPs: model FLOPs plus the forward FLOPs rematerialised by recompute (full: the whole
  forward of recomputed layers; selective: the recomputed components). With full recompute of every
  layer this equals Megatron's 96·B·s·l·h²·(1 + s/(6h) + V/(16·l·h)).
- MFU = model FLOPs / (iteration time × GPUs × dense peak of the dtype); HFU the same with hardware FLOPs.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.analysis.memory import full_recompute_layers


@dataclass(frozen=True)
class FlopCount:
    model_flops: float            # per iteration, all GPUs
    hardware_flops: float         # per iteration, all GPUs (with recompute)
    tokens: int                   # tokens per iteration (global batch × sequence)
    model_flops_per_token: float
    formula: str


def _mm_params_per_layer(model, layer: int) -> float:
    """Active matmul parameters of one layer (unsharded)."""
    h, a = model.hidden_size, model.num_attention_heads
    d = model.head_dim or h // a
    kv = model.num_kv_heads or a
    if model.attention == "mla":
        nope = model.qk_nope_head_dim or d
        rope = model.qk_rope_head_dim or 0
        dv = model.v_head_dim or d
        ql, kvl = model.q_lora_rank, model.kv_lora_rank
        att = (h * ql + ql * a * (nope + rope)) if ql else h * a * (nope + rope)
        att += h * (kvl + rope) + kvl * a * (nope + dv) + a * dv * h
    else:
        att = h * (a + 2 * kv) * d + a * d * h
    nmat = 3 if model.activation == "swiglu" else 2
    if model.layer_is_moe(layer):
        Fe = model.moe_ffn_hidden_size or model.ffn_hidden_size
        mlp = h * model.num_experts + max(1, model.moe_top_k) * nmat * h * Fe
        if model.num_shared_experts:
            Fs = model.shared_expert_ffn_hidden_size or Fe
            mlp += model.num_shared_experts * nmat * h * Fs
    else:
        mlp = nmat * h * model.ffn_hidden_size
    return float(att + mlp)


def _attn_fwd_flops_per_token(model, seq: int) -> float:
    a = model.num_attention_heads
    d = model.head_dim or model.hidden_size // a
    if model.attention == "mla":
        dqk = (model.qk_nope_head_dim or d) + (model.qk_rope_head_dim or 0)
        dv = model.v_head_dim or d
    else:
        dqk = dv = d
    return 2.0 * seq * a * (dqk + dv)


def layer_fwd_flops_per_token(model, layer: int, seq: int) -> float:
    return 2.0 * _mm_params_per_layer(model, layer) + _attn_fwd_flops_per_token(model, seq)


def model_flops_per_token(model, seq: int) -> float:
    """6·N·D with attention (see module docstring), per token."""
    layers = sum(3.0 * layer_fwd_flops_per_token(model, i, seq) for i in range(model.num_layers))
    return layers + 6.0 * model.vocab_size * model.hidden_size


def count_flops(model, plan, selective: tuple[str, ...] = ("attn",)) -> FlopCount:
    """Model and hardware FLOPs of one iteration of `plan` (all GPUs)."""
    from sim.analysis.stagefacts import layer_assignment
    s = plan.seq_length
    tokens = plan.global_batch_size * s
    per_tok = model_flops_per_token(model, s)
    extra = 0.0
    if plan.recompute == "full":
        for stage in layer_assignment(model, plan):
            for chunk in stage:
                n = len(chunk) if plan.recompute_num_layers is None else min(plan.recompute_num_layers, len(chunk))
                extra += sum(layer_fwd_flops_per_token(model, i, s) for i in chunk[:n])
    elif plan.recompute == "selective":
        for i in range(model.num_layers):
            if "attn" in selective:
                extra += _attn_fwd_flops_per_token(model, s)
            if "mlp" in selective:
                h = model.hidden_size
                F = (model.moe_ffn_hidden_size or model.ffn_hidden_size) * max(1, model.moe_top_k) \
                    if model.layer_is_moe(i) else model.ffn_hidden_size
                nmat = 3 if model.activation == "swiglu" else 2
                extra += 2.0 * (nmat - 1) * h * F   # fc1 (+gate) recomputed; fc2 is not
    return FlopCount(per_tok * tokens, (per_tok + extra) * tokens, tokens, per_tok,
                     "6*N_mm*D + 6*s*a*(d_qk+d_v)*l*D (3 passes); hardware adds recomputed forward FLOPs")


def workload_flops(workload) -> float:
    """Hardware FLOPs of one iteration summed from a Workload's kernels (all GPUs)."""
    m = workload.num_microbatches
    total = 0.0
    ranks = workload.plan.ranks_per_stage
    for st in workload.stages:
        per = 0.0
        for ch in st.chunks:
            for op in list(ch.forward) + list(ch.backward):
                if getattr(op, "is_comm", False):
                    continue
                mult = m if op.microbatch == "all" else 1
                per += op.flops * mult
        for op in list(st.iteration_start) + list(st.iteration_end):
            if not getattr(op, "is_comm", False):
                per += op.flops
        total += per * ranks
    return total


def workload_bytes(workload) -> dict[str, float]:
    """HBM bytes of compute kernels and bytes moved by collectives per iteration, one rank of each stage."""
    m = workload.num_microbatches
    hbm = comm = 0.0
    for st in workload.stages:
        for ch in st.chunks:
            for op in list(ch.forward) + list(ch.backward):
                mult = m if op.microbatch == "all" else 1
                if getattr(op, "is_comm", False):
                    comm += op.size_bytes * mult
                else:
                    hbm += op.bytes * mult
        for op in list(st.iteration_start) + list(st.iteration_end):
            if getattr(op, "is_comm", False):
                comm += op.size_bytes
            else:
                hbm += op.bytes
    return {"hbm_bytes_per_rank_all_stages": hbm, "comm_buffer_bytes_per_rank_all_stages": comm}


def utilisation(flops: FlopCount, iteration_time_s: float, world_size: int, peak_flops: float) -> dict[str, float]:
    """MFU, HFU, tokens/s per GPU and achieved model TFLOP/s per GPU."""
    denom = max(1e-30, iteration_time_s * world_size)
    return {"mfu_6nd_with_attn": flops.model_flops / (denom * peak_flops),
            "hfu": flops.hardware_flops / (denom * peak_flops),
            "tokens_per_s_per_gpu": flops.tokens / denom,
            "model_tflops_per_s_per_gpu": flops.model_flops / denom / 1e12}


def _layer_sums(lk, groups: set[str]) -> dict[str, float]:
    """FLOPs / HBM bytes of one block's kernels (stagefacts.LayerKernels) and its collective bytes."""
    sel = [o for o, g in zip(lk.fwd, lk.group) if g in groups]
    return {"f": sum(o.flops for o in lk.fwd), "b": sum(o.flops for o in lk.bwd),
            "fb": sum(o.bytes for o in lk.fwd), "bb": sum(o.bytes for o in lk.bwd),
            "sf": sum(o.flops for o in sel), "sb": sum(o.bytes for o in sel),
            "c": float(sum(c.size_bytes for c in lk.fwd_comms) + sum(c.size_bytes for c in lk.bwd_comms))}


def walk_kernel_flops(model, plan, selective: tuple[str, ...] = ("attn",)) -> dict[str, float]:
    """FLOPs of the kernels the step runs (workload_gen.layers' kernels; all GPUs, per iteration),
    without and with recompute.

    Differs from model FLOPs by what the kernels really compute: padded vocabulary, router and
    elementwise FLOPs; attention over the full score matrix (as the model-FLOP convention)."""
    per = pass_costs(model, plan, selective)
    m = max(1, plan.num_microbatches)
    ranks = plan.world_size // plan.pp
    base = sum(p["fwd_flops"] + p["bwd_flops"] for p in per)
    rec = sum(p["recompute_flops"] for p in per)
    return {"kernel_flops": base * m * ranks, "kernel_flops_with_recompute": (base + rec) * m * ranks}


def pass_costs(model, plan, selective: tuple[str, ...] = ("attn",)) -> list[dict[str, float]]:
    """Per stage, per GPU, per micro-batch: FLOPs and HBM bytes of the forward, backward and recompute
    passes, and bytes handed to collectives (nccl-tests buffer sizes) inside the layers — summed over
    the kernels workload_gen.layers emits (stagefacts.KernelCatalog)."""
    from sim.analysis.stagefacts import KernelCatalog, layer_assignment
    cat = KernelCatalog(model, plan)
    groups = set(selective)
    out = []
    cache: dict[bool, dict[str, float]] = {}
    for stage, chunks in enumerate(layer_assignment(model, plan)):
        acc = {"fwd_flops": 0.0, "bwd_flops": 0.0, "recompute_flops": 0.0, "fwd_hbm_bytes": 0.0,
               "bwd_hbm_bytes": 0.0, "recompute_hbm_bytes": 0.0, "comm_bytes": 0.0}
        for ci, chunk in enumerate(chunks):
            full = full_recompute_layers(plan, chunk)
            for layer in chunk:
                key = model.layer_is_moe(layer)
                if key not in cache:
                    cache[key] = _layer_sums(cat.layer(layer), groups)
                c = cache[key]
                acc["fwd_flops"] += c["f"]
                acc["bwd_flops"] += c["b"]
                acc["fwd_hbm_bytes"] += c["fb"]
                acc["bwd_hbm_bytes"] += c["bb"]
                acc["comm_bytes"] += c["c"]
                if layer in full:
                    acc["recompute_flops"] += c["f"]
                    acc["recompute_hbm_bytes"] += c["fb"]
                elif plan.recompute == "selective":
                    acc["recompute_flops"] += c["sf"]
                    acc["recompute_hbm_bytes"] += c["sb"]
            extra = []
            if stage == 0 and ci == 0:
                extra.append(cat.embedding())
            if stage == plan.pp - 1 and ci == len(chunks) - 1:
                extra.append(cat.head())
            for lk in extra:
                c = _layer_sums(lk, set())
                acc["fwd_flops"] += c["f"]
                acc["bwd_flops"] += c["b"]
                acc["fwd_hbm_bytes"] += c["fb"]
                acc["bwd_hbm_bytes"] += c["bb"]
        out.append({"stage": stage, **acc})
    return out
