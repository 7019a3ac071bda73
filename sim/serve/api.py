"""Python API of the serving simulator: one call from a model, a deployment and a request stream to
metrics as pandas DataFrames.

    from sim.serve.api import simulate_serving
    from sim.serve.plan import ServingPlan
    from workload_gen.requests import RequestConfig
    run = simulate_serving("llama3-8b", ServingPlan(tp=1, scheduler="sarathi"),
                           RequestConfig(num_requests=500, qps=4.0, lengths="chat", seed=1), gpu="H100")
    run.requests      # DataFrame: one row per request (Vidur's request_metrics columns + ours)
    run.replicas      # DataFrame: one row per replica
    run.summary       # dict: P50/P90/P99 of TTFT, TBT, TPOT, E2E...; every metric with its formula

The pieces (sim.serve.memory, batch_time, engine, metrics) are usable alone; this module only wires
them: KV capacity from the memory planner, a BatchTimer on the topology, the event engine, the summary.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import pandas as pd

from sim.errors import SimError
from sim.serve.batch_time import HostOverhead, ServingTimer, make_timer
from sim.serve.engine import ServeResult, simulate
from sim.serve.memory import KVCachePlan, plan_kv_cache_for_gpu
from sim.serve.metrics import SLO, batch_frame, replica_frame, request_frame, summarize
from sim.serve.plan import ServingPlan

HOST_MODELS = ("none", "launch-gaps", "eager")
DEFAULT_TOKEN_BUDGET = ServingPlan().max_tokens_per_iteration


@dataclass
class ServingRun:
    """A finished serving simulation: the engine's result, the summary, and how it was set up."""
    result: ServeResult
    summary: dict
    kv_plan: KVCachePlan
    timer: ServingTimer
    model: object
    gpu: str
    peak_flops_per_s: float
    hbm_Bps: float
    request_notes: list[str] = field(default_factory=list)
    _frames: dict = field(default_factory=dict, repr=False)

    @property
    def requests(self) -> pd.DataFrame:
        if "requests" not in self._frames:
            self._frames["requests"] = request_frame(self.result)
        return self._frames["requests"]

    @property
    def replicas(self) -> pd.DataFrame:
        return replica_frame(self.result, self.peak_flops_per_s, self.hbm_Bps)

    @property
    def batches(self) -> pd.DataFrame:
        return batch_frame(self.result)

    def to_dataframe(self, table: str = "requests") -> pd.DataFrame:
        """One table: "requests" (one row per request), "replicas" or "batches" (one row per batch)."""
        frames = {"requests": lambda: self.requests, "replicas": lambda: self.replicas, "batches": lambda: self.batches}
        if table not in frames:
            raise SimError(f"table '{table}': expected one of {', '.join(frames)}")
        return frames[table]()

    def _repr_html_(self) -> str:
        import html
        t = self.summary.get("throughput", {})
        rows = [("model", getattr(self.model, "name", "")), ("GPU", self.gpu),
                ("requests", str(len(self.requests)))]
        rows += [(k, f"{v['value']:.4g}") for k, v in t.items() if isinstance(v, dict) and v.get("value") is not None]
        for k in ("ttft_s", "tpot_s", "e2e_s"):
            m = self.summary.get("metrics", {}).get(k) or {}
            if m.get("p50") is not None:
                rows.append((f"{k} p50 / p99", f"{m['p50']:.4g} / {m['p99']:.4g}"))
        body = "".join(f"<tr><th style='text-align:left'>{html.escape(str(a))}</th><td>{html.escape(str(b))}</td>"
                       "</tr>" for a, b in rows)
        return (f"<div class='clustersim-serving'><b>clustersim ServingRun</b><table>{body}</table>"
                "<small>run.to_dataframe('requests' | 'replicas' | 'batches')</small></div>")

    def kernel_provenance(self) -> dict[str, float]:
        """Fraction of simulated kernel time per compute_db source (measured / interpolated / modeled)."""
        prov = self.timer.provenance_s()
        total = sum(prov.values())
        return {k: v / total for k, v in prov.items() if v > 0} if total > 0 else {}

    def collective_provenance(self) -> dict[str, float]:
        """Fraction of blocking collective and PP-send seconds per source: the DB's measured curves ("measured"
        at a measured size, "interpolated" between two) or "netsim"."""
        from sim.serve.batch_time import collective_provenance_s
        prov = collective_provenance_s(self.timer)
        total = sum(prov.values())
        return {k: v / total for k, v in prov.items() if v > 0} if total > 0 else {}


def host_overhead(name: str, per_iteration_s: float = 0.0) -> HostOverhead:
    """The CPU-side model by name: none | launch-gaps (C++ runtime or CUDA graphs) | eager (Python, no graphs)."""
    if name == "none":
        return HostOverhead(per_iteration_s=per_iteration_s)
    if name == "launch-gaps":
        return replace(HostOverhead.launch_gap_only(), per_iteration_s=per_iteration_s)
    if name == "eager":
        return HostOverhead.eager(per_iteration_s)
    raise SimError(f"host overhead model '{name}': expected one of {', '.join(HOST_MODELS)}")


def _resolve_requests(requests, max_model_len: int):
    """RequestConfig -> RequestSet/ClosedLoop trimmed to max_model_len; other inputs pass through."""
    from workload_gen.requests import RequestConfig, make_requests
    if isinstance(requests, RequestConfig):
        _check_synthetic_lengths(requests, max_model_len)
        cfg = requests if requests.max_model_len is not None else replace(requests, max_model_len=max_model_len)
        return make_requests(cfg)
    return requests


def _check_synthetic_lengths(cfg, max_model_len: int) -> None:
    """Lengths the user asked for explicitly (fixed / uniform / zipf) must fit the model: an error, where
    trace and example lengths are trimmed (and reported)."""
    lengths = cfg.lengths or ("trace" if cfg.arrival == "trace" else "fixed")
    if lengths == "fixed":
        total, what = cfg.prefill_tokens + cfg.decode_tokens, (f"{cfg.prefill_tokens} prefill + {cfg.decode_tokens} "
                                                                 "decode tokens")
    elif lengths in ("uniform", "zipf"):
        total, what = cfg.max_tokens, f"max_tokens {cfg.max_tokens}"
    else:
        return
    if total > max_model_len:
        raise SimError(f"requests of {what} exceed the model's max length {max_model_len} (shorten them or set "
                       "--max-model-len)")


def topology_sized_by_user(spec: str) -> bool:
    """A topology spec whose size is fixed (a SimAI file, or gpus= among its parameters)."""
    from pathlib import Path
    return Path(spec).is_file() or "gpus=" in spec.partition(":")[2]


def serving_topology(topology, num_gpus: int, gpu: str | None, db):
    """The Topology a deployment of `num_gpus` GPUs runs on: a given Topology, or one built from a spec
    string (None: Spectrum-X) with whole 8-GPU servers for the deployment unless the spec fixes its size;
    a topology left at SimAI's NVLink default runs at the GPU's datasheet rate (sim.inputs)."""
    from sim.inputs import make_topology, servers_for
    if topology is None or isinstance(topology, str):
        spec = topology or "spectrum-x"
        topology = make_topology(spec, gpus=None if topology_sized_by_user(spec) else servers_for(num_gpus),
                                 gpu_type=gpu or None)
    from topo.templates import NVLINK_DEFAULT_NOTE
    if NVLINK_DEFAULT_NOTE in topology.notes:
        from sim.inputs import resolve_default_nvlink
        topology = resolve_default_nvlink(topology, db.gpu(gpu or topology.gpu_type))
    return topology


def peak_flops_per_s(gpu_spec, weight_dtype: str) -> float:
    """The GPU's peak for the GEMM dtype (bf16's when the table has none for it; NaN when neither)."""
    return gpu_spec.peak_flops.get(weight_dtype) or gpu_spec.peak_flops.get("bf16", math.nan)


def effective_plan(model, plan: ServingPlan, max_len: int | None = None) -> tuple[ServingPlan, list[str]]:
    """(the plan as the engine runs it, notes): max_model_len filled in (`max_len`, else the plan's, else
    the model's context), and vLLM/LightLLM's default token budget raised to it — vLLM without chunked
    prefill sets max_num_batched_tokens >= max_model_len: a whole prompt must fit one iteration."""
    max_len = max_len or plan.max_model_len or model.seq_length
    plan = replace(plan, max_model_len=max_len)
    notes = []
    if (plan.scheduler in ("vllm", "lightllm") and plan.max_tokens_per_iteration < max_len
            and plan.max_tokens_per_iteration == DEFAULT_TOKEN_BUDGET):
        plan = replace(plan, max_tokens_per_iteration=max_len)
        notes.append(f"max_tokens_per_iteration raised from {DEFAULT_TOKEN_BUDGET} to max_model_len {max_len} "
                     f"({plan.scheduler} admits whole prompts)")
    return plan, notes


def simulate_serving(model, plan: ServingPlan, requests, *, topology=None, gpu: str | None = None, db=None,
                     network: str = "analytical", net_calibration=None, host: HostOverhead | str = "launch-gaps",
                     slo: SLO | None = None, seed: int = 0, progress: bool = False, keep_token_times: bool = False,
                     trace_cap: int | None = None, mapping=None) -> ServingRun:
    """Simulate serving `requests` with `plan.replicas` replicas of `model` on `topology`.

    model: a ModelSpec, zoo name or model file; requests: a workload_gen RequestConfig (trimmed to the
    plan's max model length, reported in `request_notes`), RequestSet or ClosedLoop; topology: a topo
    Topology or a spec string for sim.inputs.make_topology (None: Spectrum-X with whole 8-GPU servers for
    the deployment); gpu: compute_db GPU (None: the topology's GPU type, H100 for the default fabric);
    db: a compute_db.ComputeDB (None: the shipped DB); host: a HostOverhead or a HOST_MODELS name.
    """
    from sim.inputs import resolve_model
    if isinstance(model, str):
        model = resolve_model(model)
    if db is None:
        from compute_db import open_db
        db = open_db()
    topology = serving_topology(topology, plan.num_gpus, gpu, db)
    if int(topology.num_gpus) < plan.num_gpus:
        raise SimError(f"topology has {topology.num_gpus} GPUs; the deployment needs {plan.num_gpus} "
                       f"({plan.replicas} replicas x tp {plan.tp} x pp {plan.pp})")
    if isinstance(host, str):
        host = host_overhead(host)
    plan, plan_notes = effective_plan(model, plan)
    max_len = plan.max_model_len
    timer = make_timer(model, plan, topology, gpu, db=db, network=network, net_calibration=net_calibration,
                       host=host, mapping=mapping)
    spec = db.gpu(timer.gpu)
    kv = plan_kv_cache_for_gpu(model, plan, spec.name, db)
    reqs = _resolve_requests(requests, max_len)
    notes = plan_notes + (list(reqs.report_lines()) if hasattr(reqs, "report_lines") else [])
    kwargs = {} if trace_cap is None else {"trace_cap": trace_cap}
    res = simulate(reqs, plan, timer, num_blocks=kv.num_blocks, max_model_len=max_len, seed=seed,
                   progress=progress, keep_token_times=keep_token_times, **kwargs)
    peak = peak_flops_per_s(spec, plan.weight_dtype)
    summary = summarize(res, peak, spec.hbm_Bps, slo)
    run = ServingRun(res, summary, kv, timer, model, spec.name, peak, spec.hbm_Bps, notes)
    summary["memory"] = kv_summary(kv)
    summary["request_notes"] = notes
    summary["kernel_time_sources"] = {"fractions": run.kernel_provenance(),
                                      "formula": "simulated kernel seconds by compute_db source / all kernel seconds"}
    summary["collective_time_sources"] = {"fractions": run.collective_provenance(),
                                          "formula": "idle-network collective + PP send seconds by source (measured "
                                                     "curves of the DB, else netsim) / all such seconds"}
    summary["cost_model"] = {"gpu": spec.name, "network": network, "host": _host_text(host),
                             "model": getattr(model, "name", ""), "moe": timer.moe_report()}
    return run


def kv_summary(kv: KVCachePlan) -> dict:
    GiB = 1024 ** 3
    st = min(kv.stages, key=lambda s: s.blocks) if kv.stages else None
    out = {"num_blocks": kv.num_blocks, "block_size": kv.block_size, "kv_tokens": kv.kv_tokens,
           "source": kv.source, "max_model_len": kv.max_model_len}
    if st is not None:
        out.update({"gpu_GiB": st.gpu_bytes / GiB, "weights_GiB": st.weight_bytes / GiB,
                    "activations_GiB": st.activation_bytes / GiB, "cuda_context_GiB": st.cuda_context_bytes / GiB,
                    "nccl_GiB": st.nccl_bytes / GiB, "margin_GiB": st.margin_bytes / GiB,
                    "kv_bytes_per_token": st.kv_bytes_per_token, "stage": st.stage,
                    "formula": "blocks = (GPU memory - weights - activation workspace - CUDA context - NCCL "
                               "buffers - margin) / (block_size x KV bytes per token), min over stages"})
    return out


def _host_text(h: HostOverhead) -> str:
    return (f"{h.kernel_gap_s * 1e6:.1f} us GPU launch gap per kernel, {h.per_kernel_s * 1e6:.0f} us host issue "
            f"per kernel, {h.per_iteration_s * 1e3:.2f} ms CPU per iteration")
