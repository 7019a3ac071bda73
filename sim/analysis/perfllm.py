"""A PerfLLM-style Python API over clustersim (configure / run_estimate / analysis_mem / analysis_cost / search).

Users of the training simulator in the seed documents can switch by changing the import. Differences
by design: results are numbers with units in the field names (`duration_time_per_iter_s`,
`peak_mem_bytes`), not strings; communication overlaps compute where the framework overlaps it;
kernel times come from compute_db. Accepts that tool's JSON model/strategy/system files as well as
clustersim's own YAML/JSON files, zoo names, and ModelSpec / ParallelPlan / HardwareSpec objects.

System file (that tool's layout): `sys_name`, `num_per_node`, `accelerator.mem_gbs` (GiB of device
memory), `accelerator.op.<matmul|sdp_fwd|...>.{tflops, efficient_factor}`,
`accelerator.bandwidth.default.{gbps, efficient_factor, latency_us}` (HBM, GB/s),
`networks.<high_intra_node|inter_node>.bandwidth.{gbps, efficient_factor, latency_us}` (per GPU, GB/s;
on a PCIe system the node-wide `intra_node_pcie_<n>x` level replaces high_intra_node).
SimuMax v1.2's shipped strategy/model/system files all load with SimuMax's meanings (load_strategy,
workload_gen.config_io); keys inert there or not modelled here give one-line notes (`PerfLLM.notes`,
CompatibilityWarning). Results carry clustersim's unit-named keys and the seed's names, same numbers.
clustersim's own system file: `gpu: <name>` (+ optional `gpus_per_server`, `topology: {template, ...}`).

Kernel times (run_estimate and the search alike): with that tool's system file, the roofline of its
`tflops` x `efficient_factor` figures (the user's numbers); with a GPU name, a clustersim system file
or a HardwareSpec, compute_db's measured/interpolated kernels (roofline where it has none).
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
import warnings
from pathlib import Path

from sim.analysis.cost import count_flops, pass_costs, utilisation, walk_kernel_flops
from sim.analysis.memory import MemoryOptions, analyze_memory
from sim.analysis.search import (
    SearchSpace,
    candidate_dict,
    search,
    write_pareto_png,
    write_ranked_csv,
    write_rejections_csv,
)
from sim.analysis.steptime import HardwareSpec, estimate_step, hardware_from_gpu
from sim.errors import SimError
from workload_gen.config_io import CompatibilityWarning, read_mapping
from workload_gen.errors import ConfigFileError
from workload_gen.limits import MAX_WORLD_SIZE, check_max

# ParallelPlan field -> PerfLLM strategy key (to name the user's key in plan errors)
_PLAN_TO_PERFLLM = {"tp": "tp_size", "pp": "pp_size", "cp": "cp_size", "ep": "ep_size", "etp": "etp_size",
                    "vpp": "interleaving_size", "sequence_parallel": "enable_sequence_parallel",
                    "seq_length": "seq_len", "micro_batch_size": "micro_batch_size",
                    "global_batch_size": "micro_batch_num", "world_size": "world_size",
                    "recompute_num_layers": "recompute_layer_num", "flash_attention": "use_flash_sdp",
                    "num_layers_first_stage": "num_layers_in_first_pipeline_stage",
                    "num_layers_last_stage": "num_layers_in_last_pipeline_stage",
                    "distributed_optimizer": "zero_state", "zero_stage": "zero_state", "dtype": "dtype",
                    "recompute": "recompute_granularity"}
_PERFLLM_STRATEGY_KEYS = {"tp_size", "pp_size", "ep_size", "cp_size", "micro_batch_num", "seq_len"}
GiB = 1024 ** 3


def _read(path: Path) -> dict:
    try:
        return read_mapping(path)
    except ConfigFileError as e:
        raise SimError(str(e)) from None


def _num(d: dict, key: str, where: str, default=None, positive: bool = True) -> float:
    if key not in d or d[key] is None:
        if default is None:
            raise SimError(f"{where}: key '{key}': missing")
        return default
    v = d[key]
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0) or v < 0:
        raise SimError(f"{where}: key '{key}': expected a {'positive ' if positive else ''}number, got {v!r}")
    if key == "efficient_factor" and v > 1:   # a fraction of the peak: above 1 would beat the hardware
        raise SimError(f"{where}: key '{key}': expected a fraction of the peak in (0, 1], got {v!r}")
    return float(v)


def _count(d: dict, key: str, where: str, default: int) -> int:
    """A positive whole number (GPUs per node): 7.5 must not become 7; a node cannot hold more GPUs
    than a job may have (workload_gen.limits.MAX_WORLD_SIZE)."""
    v = _num(d, key, where, default)
    if v != int(v):
        raise SimError(f"{where}: key '{key}': expected a positive integer, got {d[key]!r}")
    check_max(f"{where}: key '{key}'", int(v), MAX_WORLD_SIZE, SimError)
    return int(v)


def _sub(d: dict, key: str, where: str, required: bool = True) -> dict:
    v = d.get(key)
    if v is None:
        if required:
            raise SimError(f"{where}: key '{key}': missing")
        return {}
    if not isinstance(v, dict):
        raise SimError(f"{where}: key '{key}': expected a mapping, got {v!r}")
    return v


# ------------------------------------------------------------------------------------------------
def load_system(src, dtype: str = "bf16", db=None) -> tuple[HardwareSpec, dict]:
    """HardwareSpec (+ extra: gpu name, topology spec) from a path, mapping, GPU name or HardwareSpec.
    `db`: a ComputeDB whose user GPUs (--gpu-file) are known too."""
    if isinstance(src, HardwareSpec):
        return src, {"gpu": src.name}
    where = "<system>"
    if isinstance(src, (str, os.PathLike)):
        p = Path(src)
        if p.suffix.lower() in (".json", ".yaml", ".yml") or p.exists():
            where, data = str(p), _read(p)
        else:
            return hardware_from_gpu(str(src), dtype, db=db), {"gpu": str(src)}
    elif isinstance(src, dict):
        data = src
    else:
        raise SimError(f"system_config: expected a path, mapping, GPU name or HardwareSpec (got {type(src).__name__})")
    if "accelerator" in data:
        return _perfllm_system(data, where), {"gpu": data.get("sys_name", "custom"), "perfllm_system": True}
    if "gpu" not in data:
        raise SimError(f"{where}: key 'gpu': missing (or give a PerfLLM system file with 'accelerator')")
    gpu = data["gpu"]
    if not isinstance(gpu, str):
        raise SimError(f"{where}: key 'gpu': expected a GPU name, got {gpu!r}")
    gps = _count(data, "gpus_per_server", where, 8)
    try:
        hw = hardware_from_gpu(gpu, dtype, gps, db=db)
    except Exception as exc:  # ComputeDBError: unknown GPU
        raise SimError(f"{where}: key 'gpu': {exc}") from None
    topo = data.get("topology")
    if topo is not None and not (isinstance(topo, dict) and isinstance(topo.get("template"), str)):
        raise SimError(f"{where}: key 'topology': expected a mapping with 'template' and its parameters")
    return hw, {"gpu": gpu, "topology": topo}


def _perfllm_system(data: dict, where: str) -> HardwareSpec:
    acc = _sub(data, "accelerator", where)
    ops = _sub(acc, "op", f"{where}: accelerator")
    mm = _sub(ops, "matmul", f"{where}: accelerator.op")
    peak = _num(mm, "tflops", f"{where}: accelerator.op.matmul") * 1e12
    eff = _num(mm, "efficient_factor", f"{where}: accelerator.op.matmul", 0.78)
    sdp = ops.get("sdp_fwd") if isinstance(ops.get("sdp_fwd"), dict) else {}
    attn_eff = _num(sdp, "efficient_factor", f"{where}: accelerator.op.sdp_fwd", 0.6) if sdp else 0.6
    bw = _sub(_sub(acc, "bandwidth", f"{where}: accelerator"), "default", f"{where}: accelerator.bandwidth")
    hbm = _num(bw, "gbps", f"{where}: accelerator.bandwidth.default") * 1e9 \
        * _num(bw, "efficient_factor", f"{where}: accelerator.bandwidth.default", 1.0) / 0.8
    mem = _num(acc, "mem_gbs", f"{where}: accelerator") * GiB
    nets = _sub(data, "networks", where)
    level = _intra_level(nets, _count(data, "num_per_node", where, 8), where)
    intra = _sub(_sub(nets, level, f"{where}: networks"), "bandwidth", f"{where}: networks.{level}")
    inter = _sub(_sub(nets, "inter_node", f"{where}: networks"), "bandwidth", f"{where}: networks.inter_node")
    wi, wo = f"{where}: networks.{level}.bandwidth", f"{where}: networks.inter_node.bandwidth"
    return HardwareSpec(
        name=str(data.get("sys_name", "custom")), peak_flops=peak, hbm_Bps=hbm, hbm_bytes=mem,
        nvlink_Bps=_num(intra, "gbps", wi) * 1e9, nic_Bps=_num(inter, "gbps", wo) * 1e9,
        gpus_per_server=_count(data, "num_per_node", where, 8), gemm_efficiency=eff, attn_efficiency=attn_eff,
        nvlink_efficiency=_num(intra, "efficient_factor", wi, 1.0),
        nic_efficiency=_num(inter, "efficient_factor", wo, 1.0),
        intra_latency_s=_num(intra, "latency_us", wi, 8.0) * 1e-6,
        inter_latency_s=_num(inter, "latency_us", wo, 20.0) * 1e-6)


_PCIE_LEVEL = re.compile(r"intra_node_pcie_(\d+)x")


def _intra_level(nets: dict, per_node: int, where: str) -> str:
    """The `networks` level that carries intra-node traffic: `high_intra_node` (NVLink), or on a PCIe
    system (`intra_with_pcie: true`, levels `intra_node_pcie_<n>x` for groups of n GPUs) the level of the
    largest group that fits in a node, n <= num_per_node (the one a node-wide group uses; SimuMax's
    shipped A100-PCIe file gives every level the same bandwidth block). Per-op factors are not read."""
    pcie = sorted((int(m.group(1)), key) for key in nets if (m := _PCIE_LEVEL.fullmatch(key)))
    if nets.get("intra_with_pcie") is True or ("high_intra_node" not in nets and pcie):
        fit = [key for n, key in pcie if n <= per_node]
        if not fit:
            raise SimError(f"{where}: networks: intra_with_pcie is true but no 'intra_node_pcie_<n>x' level "
                           f"with n <= num_per_node={per_node}")
        return fit[-1]
    return "high_intra_node"


def load_model_any(src):
    """ModelSpec from a ModelSpec, file path (HF / PerfLLM / clustersim), mapping, or zoo name."""
    from workload_gen.config_io import load_model, model_from_mapping
    from workload_gen.model import ModelSpec
    from workload_gen.zoo import get_model
    if isinstance(src, ModelSpec):
        return src
    if isinstance(src, dict):
        return model_from_mapping(src)
    if isinstance(src, (str, os.PathLike)):
        p = Path(src)
        if p.suffix.lower() in (".json", ".yaml", ".yml") or p.exists():
            return load_model(p)
        return get_model(str(src))
    raise SimError(f"model_config: expected a path, mapping, zoo name or ModelSpec (got {type(src).__name__})")


def load_strategy(src, notes: list[str] | None = None) -> tuple[object, MemoryOptions, str, dict]:
    """(ParallelPlan, MemoryOptions, source name, raw mapping) from a path, mapping or ParallelPlan.

    SimuMax strategy files mean what they mean in SimuMax v1.2 (workload_gen.config_io._plan_from_perfllm
    for the plan fields). Read here: attn_recompute / mlp_recompute / mlp_rms_recompute /
    mla_rms_recompute (selective components; without any, Megatron's selective = attention core) and
    `mem_factor` = allocated/reserved in (0, 1] (SimuMax reports peak_mem / mem_factor as the reserved
    peak). `notes` collects one-line compatibility notes (None: warn them as CompatibilityWarning)."""
    from workload_gen.config_io import plan_from_mapping
    from workload_gen.plan import ParallelPlan
    if isinstance(src, ParallelPlan):
        return src, MemoryOptions(), "<strategy>", {}
    if isinstance(src, (str, os.PathLike)):
        where = str(src)
        data = _read(Path(src))
    elif isinstance(src, dict):
        where, data = "<strategy>", dict(src)
    else:
        raise SimError(f"strategy_config: expected a path, mapping or ParallelPlan (got {type(src).__name__})")
    perf = bool(_PERFLLM_STRATEGY_KEYS & set(data))
    local: list[str] = []
    plan = plan_from_mapping(data, where, notes=local)
    sel = []
    if perf:
        flags = []
        for key, comp in (("attn_recompute", "attn"), ("mlp_recompute", "mlp"), ("mlp_rms_recompute", "norm"),
                          ("mla_rms_recompute", "norm")):
            v = data.get(key)
            if v is None:
                continue
            if not isinstance(v, bool):
                raise SimError(f"{where}: key '{key}': expected true or false, got {v!r}")
            if v:
                flags.append(key)
                if comp not in sel:
                    sel.append(comp)
        if flags and plan.recompute != "selective":
            local.append(f"{where}: key '{flags[0]}': {', '.join(flags)} act only with selective_recompute "
                         f"(the plan runs {plan.recompute!r} recompute)")
        elif plan.recompute == "selective" and not flags:
            local.append(f"{where}: key 'recompute_granularity': selective_recompute without attn_recompute / "
                         f"mlp_recompute / mlp_rms_recompute / mla_rms_recompute: recomputing the attention "
                         f"core (Megatron's selective recompute)")
        ed = data.get("enable_dropout")
        if ed is not None and not isinstance(ed, bool):
            raise SimError(f"{where}: key 'enable_dropout': expected true or false, got {ed!r}")
    mf = data.get("mem_factor") if perf else None
    if mf is not None and (isinstance(mf, bool) or not isinstance(mf, (int, float)) or not 0 < mf <= 1):
        raise SimError(f"{where}: key 'mem_factor': expected a number in (0, 1] (allocated/reserved: the "
                       f"reserved peak is peak_mem / mem_factor), got {mf!r}")
    opts = MemoryOptions(selective=tuple(sel) or ("attn",), mem_factor=float(mf) if mf else None)
    if notes is not None:
        notes.extend(local)
    else:
        for n in local:
            warnings.warn(n, CompatibilityWarning, stacklevel=2)
    return plan, opts, where, data if perf else {}


def _apply_simumax_strategy(model, plan, raw: dict, where: str, notes: list[str]):
    """(model, plan) after the SimuMax strategy keys that need the model: `enable_dropout` (dropout masks
    kept or not: a model property here), and `recompute_layer_num` above the layers of a pipeline chunk,
    which SimuMax reads as "every layer" (clamped, with a note)."""
    from workload_gen.layout import layer_assignment
    if "enable_dropout" in raw:
        model = dataclasses.replace(model, extra={**model.extra, "dropout": bool(raw["enable_dropout"])})
    n = plan.recompute_num_layers
    if plan.recompute == "full" and n is not None:
        try:
            per_chunk = max(len(c) for st in layer_assignment(model, plan) for c in st)
        except ValueError:
            return model, plan           # an invalid layout: validate_plan names the key
        if n > per_chunk:
            notes.append(f"{where}: key 'recompute_layer_num': {n} is more than the {per_chunk} layers of a "
                         f"pipeline chunk; recomputing all of them")
            plan = dataclasses.replace(plan, recompute_num_layers=per_chunk)
    return model, plan


def _check_plan(model, plan, where: str, perf: bool) -> None:
    from workload_gen.errors import WorkloadError
    from workload_gen.plan_validation import validate_plan
    try:
        validate_plan(model, plan)
    except WorkloadError as exc:
        msg = str(exc)
        field = msg.split(":", 1)[0].removeprefix("plan.").removeprefix("model.")
        key = _PLAN_TO_PERFLLM.get(field, field) if perf else field
        raise SimError(f"{where}: key '{key}': {msg.split(':', 1)[1].strip() if ':' in msg else msg}") from None


# ------------------------------------------------------------------------------------------------
class PerfLLM:
    """configure() -> run_estimate() -> analysis_mem() / analysis_cost(); or the strategy search."""

    def __init__(self) -> None:
        self.model = self.plan = self.hw = None
        self.mem_options = MemoryOptions()
        self.system_extra: dict = {}
        self.topology = None
        self._estimate = None
        self._memory = None
        self._strategy_where = "<strategy>"
        self._perf_strategy = False
        self.last_search = None
        self._use_db = True
        self._db = None
        self._net_calibration = None
        self.notes: list[str] = []      # compatibility notes of the configured files (also warned)

    def _kernel_db(self):
        """compute_db for kernel times, or None (roofline of the system file's efficiencies)."""
        if self._use_db and self._db is None:
            from sim.analysis.search import _open_db
            self._db = _open_db()
        return self._db if self._use_db else None

    def configure(self, strategy_config=None, model_config=None, system_config=None, *, db=None,
                  gpu_file=None, net_calibration=None) -> PerfLLM:
        """Load and validate the three configs (paths, mappings or objects).

        db / gpu_file: your kernel DB and GPU spec file (compute_db.open_db(db, gpu_file); db may also be a
        ComputeDB); net_calibration: a netsim calibration file or object for run_estimate(simulator=...)."""
        if model_config is None or system_config is None:
            raise SimError("configure: model_config and system_config are required")
        if db is not None or gpu_file is not None:
            if db is None or isinstance(db, (str, os.PathLike)):
                from compute_db import open_db
                db = open_db(db, gpu_file)
            self._db = db
        if isinstance(net_calibration, (str, os.PathLike)):
            from sim.inputs import load_net_calibration
            net_calibration = load_net_calibration(net_calibration)
        self._net_calibration = net_calibration
        self.model = load_model_any(model_config)
        self.hw, self.system_extra = load_system(system_config, db=self._db)
        self._use_db = not self.system_extra.get("perfllm_system", False)
        notes: list[str] = []
        if strategy_config is not None:
            self.plan, self.mem_options, self._strategy_where, raw = load_strategy(strategy_config, notes)
            self._perf_strategy = bool(raw)
            if raw:
                self.model, self.plan = _apply_simumax_strategy(self.model, self.plan, raw, self._strategy_where,
                                                                notes)
            self.hw, self.system_extra = load_system(system_config, self.plan.dtype, db=self._db)
            _check_plan(self.model, self.plan, self._strategy_where, self._perf_strategy)
        self.notes = notes
        for n in notes:
            warnings.warn(n, CompatibilityWarning, stacklevel=2)
        topo = self.system_extra.get("topology")
        if topo:
            self.topology = _build_topology(topo, self.plan.world_size if self.plan else None)
        self._estimate = self._memory = None
        return self

    def _need_plan(self) -> None:
        if self.plan is None:
            raise SimError("no strategy configured: call configure(strategy_config=...) first")

    def run_estimate(self, simulator: str | None = None) -> dict:
        """Time one training iteration; returns analysis_cost().

        Default: the analytical estimate (steptime.py; milliseconds, uses the system file's efficiencies).
        simulator="analytical" | "flow": run the event-driven simulator `sim.simulate` on the generated
        workload and a topology (the system file's `topology`, else spectrum-x of the plan's size)."""
        self._need_plan()
        self._estimate = estimate_step(self.model, self.plan, self.hw, db=self._kernel_db(), topology=self.topology,
                                       selective=self.mem_options.selective)
        if simulator is not None:
            self._estimate = self._simulate(simulator)
        self._memory = self._analyze_memory()
        return self.analysis_cost()

    def _simulate(self, network: str):
        if network not in ("analytical", "flow"):
            raise SimError(f"run_estimate: simulator must be 'analytical' or 'flow' (got {network!r})")
        from sim import simulate
        from sim.analysis.search import _open_db
        from sim.inputs import make_topology
        from workload_gen import generate
        # the user's DB (configure(db=..., gpu_file=...)) even when a PerfLLM system file times the screen
        db = self._db if self._db is not None else _open_db()
        gpu = self.system_extra.get("gpu") or self.hw.name
        try:
            gpu = db.gpu(gpu).name
        except Exception:  # noqa: BLE001 - ComputeDBError: name the fix in one line
            raise SimError(f"run_estimate: the simulator needs a GPU known to compute_db; system '{gpu}' is not "
                           f"(add \"gpu\": \"H100\" to the system file)") from None
        topology = self.topology or make_topology("spectrum-x", gpus=self.plan.world_size, gpu_type=gpu,
                                                  gpus_per_server=self.hw.gpus_per_server)
        rep = simulate(generate(self.model, self.plan), topology, gpu=gpu, network=network, db=db,
                       net_calibration=self._net_calibration)
        est = self._estimate
        return dataclasses.replace(
            est, iteration_time_s=float(rep.iteration_time_s), compute_s=float(rep.compute_s),
            exposed_comm_s={k: float(v) for k, v in rep.exposed_comm_s.items()}, bubble_s=float(rep.bubble_s),
            method=f"sim.simulate(network={network!r}) on {len(topology.nodes)}-node topology; "
                   f"chunk/stage times and recompute from the analytical estimate")

    def _analyze_memory(self):
        """Activations from the generated workload's saved_bytes when workload_gen.generate is available."""
        workload = None
        try:
            from workload_gen import generate
            workload = generate(self.model, self.plan)
        except ImportError:
            pass
        return analyze_memory(self.model, self.plan, workload, options=self.mem_options)

    def analysis_mem(self) -> dict:
        """Memory of the first and last pipeline stage (and the worst stage), bytes per GPU."""
        self._need_plan()
        if self._memory is None:
            self._memory = self._analyze_memory()
        rep = self._memory
        out: dict = {"source": rep.source, "hbm_bytes": self.hw.hbm_bytes,
                     "cuda_context_bytes": rep.cuda_context_bytes}
        picks = {"first_stage": rep.stages[0]}
        if len(rep.stages) > 1:
            picks["last_stage"] = rep.stages[-1]
        picks["peak_stage"] = rep.peak
        for name, s in picks.items():
            ms = s.model_states
            out[name] = {
                "stage": s.stage,
                "model_mem_bytes": {"weight_bytes": ms.weight_bytes, "grad_bytes": ms.grad_bytes,
                                    "optimizer_bytes": ms.optimizer_bytes, "total_bytes": ms.total_bytes,
                                    "dense_params": ms.dense_params, "expert_params": ms.expert_params},
                "fwd_activation_cache_per_micro_batch_bytes": s.activation_per_microbatch_bytes,
                "activation_per_chunk_bytes": list(s.activation_per_chunk_bytes),
                "inflight_micro_batches": s.inflight_microbatches,
                "peak_activation_mem_in_1F1B_bytes": s.peak_activation_bytes,
                "fwd_peak_allocated_mem_bytes": s.fwd_peak_allocated_bytes,
                "bwd_peak_allocated_mem_bytes": s.bwd_peak_allocated_bytes,
                "comm_buffer_bytes": dict(s.comm_buffer_bytes),
                "peak_mem_bytes": s.peak_allocated_bytes,
                "peak_mem_with_reserved_bytes": s.reserved_bytes,
                "memory_reserved_ratio": s.memory_reserved_ratio,
                "peak_path": str(s.peak_path),
            }
            out[name].update(_seed_names(out[name], _SEED_MEM_KEYS))
            out[name]["model_mem"] = ms.total_bytes
        out["notes"] = list(self.notes)
        return out

    def analysis_cost(self) -> dict:
        """Iteration time, breakdown, FLOPs, MFU/HFU, throughput (numbers; units in the names)."""
        self._need_plan()
        if self._estimate is None:
            self.run_estimate()
        e, p = self._estimate, self.plan
        fc = count_flops(self.model, p, self.mem_options.selective)
        u = utilisation(fc, e.iteration_time_s, p.world_size, self.hw.peak_flops)
        kf = walk_kernel_flops(self.model, p, self.mem_options.selective)
        m = max(1, p.num_microbatches)
        denom = e.iteration_time_s * p.world_size * self.hw.peak_flops
        out = {
            "duration_time_per_iter_s": e.iteration_time_s,
            "chunk_time_s": e.chunk_time_s,
            "all_tokens_per_iter": fc.tokens,
            "throughput_per_accelerator_tokens_per_s": u["tokens_per_s_per_gpu"],
            "mfu_6nd_with_attn": u["mfu_6nd_with_attn"],
            "mfu": kf["kernel_flops"] / denom,
            "hfu": kf["kernel_flops_with_recompute"] / denom,
            "model_tflops_per_s_per_gpu": u["model_tflops_per_s_per_gpu"],
            "model_flops_per_iter": fc.model_flops,
            "hardware_flops_per_iter": fc.hardware_flops,
            "flops_formula": fc.formula,
            "comm_result": {f"{k.lower()}_exposed_per_micro_batch_s": v / m for k, v in e.exposed_comm_s.items()},
            "breakdown_result": {"compute_s": e.compute_s, "recompute_s": e.recompute_s, "bubble_s": e.bubble_s,
                                 "optimizer_s": e.optimizer_s,
                                 **{f"exposed_{k.lower()}_comm_s": v for k, v in e.exposed_comm_s.items()}},
            "compute_details": {"stage_fwd_per_micro_batch_s": list(e.stage_fwd_s),
                                "stage_bwd_per_micro_batch_s": list(e.stage_bwd_s),
                                "num_micro_batches": m, "peak_flops_per_gpu": self.hw.peak_flops,
                                "kernel_flops_per_iter": kf["kernel_flops"],
                                "kernel_flops_with_recompute_per_iter": kf["kernel_flops_with_recompute"],
                                "per_micro_batch_per_gpu": pass_costs(self.model, p, self.mem_options.selective)},
            "method": e.method,
        }
        out.update(_seed_names(out, _SEED_COST_KEYS))
        out["notes"] = list(self.notes)
        return out

    def search_best_parallel_strategy_with_recompute(
            self, world_size: int, gmi_error: float = 6, micro_batch_size=1, global_batch_size: int | None = None,
            all_search_result: list | None = None, tp_search_list=None, ep_search_list=None, pp_search_list=None,
            cp_search_list=None, vpp_search_list=None, etp_search_list=None,
            recompute_search_type=("no_recompute", "full_block", "selective_recompute"),
            use_reserved_memory: bool = False, dump_path: str | None = None, seq_len: int | None = None,
            optimizer_search_list=("none", "distributed"), top_k: int = 3, workers: int = 1) -> dict:
        """Search plans; returns the best as a dict (`best_plan` None if nothing fits).

        `global_batch_size` counts sequences (as in the seed documents); `gmi_error` is GiB kept free
        (besides the CUDA context). `*_search_list=None` searches the automatic values (etp: 1 and tp).
        Fills `all_search_result` (a list) with one dict per evaluated plan; writes ranked.csv,
        rejected_families.csv and pareto.png under `dump_path`."""
        if self.model is None:
            raise SimError("configure(model_config=..., system_config=...) first")
        if dump_path:
            from sim.outpath import check_writable
            check_writable(dump_path, directory=True)  # before the search, not after
        seq = seq_len or (self.plan.seq_length if self.plan else self.model.seq_length)
        gbs = global_batch_size or world_size
        mbs = tuple(micro_batch_size) if isinstance(micro_batch_size, (list, tuple)) else (int(micro_batch_size),)
        rmap = {"no_recompute": "none", "full_block": "full", "selective_recompute": "selective",
                "none": "none", "full": "full", "selective": "selective"}
        try:
            rc = tuple(rmap[r] for r in recompute_search_type)
        except KeyError as exc:
            raise SimError(f"recompute_search_type: unknown value {exc.args[0]!r} "
                           f"(use {', '.join(list(rmap)[:3])})") from None
        space = SearchSpace(tp=_tup(tp_search_list), pp=_tup(pp_search_list), cp=_tup(cp_search_list),
                            ep=_tup(ep_search_list), vpp=_tup(vpp_search_list), etp=_tup(etp_search_list) or (None,),
                            micro_batch_size=mbs,
                            recompute=rc, optimizer=tuple(optimizer_search_list))
        res = search(self.model, world_size, gbs, hw=self.hw, gpu=self.system_extra.get("gpu", "H100"),
                     seq_length=seq, space=space, gmi_error_GiB=gmi_error, use_reserved_memory=use_reserved_memory,
                     topology=self.topology, top_k=top_k, workers=workers,
                     mem_options=self.mem_options, use_compute_db=self._use_db,
                     db=self._kernel_db(), net_calibration=self._net_calibration)
        self.last_search = res
        if all_search_result is not None:
            all_search_result.extend(candidate_dict(c) for c in res.candidates)
        if dump_path:
            try:
                os.makedirs(dump_path, exist_ok=True)
            except OSError as exc:
                raise SimError(f"dump_path {dump_path}: cannot create ({exc.strerror})") from None
            write_ranked_csv(res, os.path.join(dump_path, "ranked.csv"))
            write_rejections_csv(res, os.path.join(dump_path, "rejected_families.csv"))
            write_pareto_png(res, os.path.join(dump_path, "pareto.png"), title=f"{self.model.name} on {world_size} GPUs")
        best = res.best
        out: dict = {"best_plan": None, "duration_time_per_iter_s": math.nan, "peak_mem_bytes": math.nan,
                     "peak_mem_with_reserved_bytes": math.nan}
        if best is not None:
            out = candidate_dict(best)
            out["best_plan"] = out.pop("plan")
            out["duration_time_per_iter_s"] = best.iteration_time_s
        out.update({"duration_time_per_iter": out["duration_time_per_iter_s"], "peak_mem": out["peak_mem_bytes"],
                    "peak_mem_with_reserved": out["peak_mem_with_reserved_bytes"]})
        out.update({"evaluated": res.evaluated, "feasible_plans": len(res.ranked), "elapsed_s": res.elapsed_s,
                    "screen_method": res.screen_method, "confirm_method": res.confirm_method,
                    "rejected_families": dict(res.rejected_families), "notes": list(res.notes)})
        return out

    def search_best_parallel_strategy(self, *args, **kwargs) -> dict:
        """SimuMax v1.2's name for the same search (`search_best_parallel_strategy_with_recompute`, same
        arguments and result). An argument that search does not take is one line naming it."""
        import inspect
        try:
            inspect.signature(self.search_best_parallel_strategy_with_recompute).bind(*args, **kwargs)
        except TypeError as exc:
            raise SimError(f"search_best_parallel_strategy: {exc}") from None
        return self.search_best_parallel_strategy_with_recompute(*args, **kwargs)


# the seed API's result names -> clustersim's (same numbers: seconds, bytes, tokens/s; see docs/analysis.md)
_SEED_COST_KEYS = {"duration_time_per_iter": "duration_time_per_iter_s", "chunk_time": "chunk_time_s",
                   "throughput_per_accelerator": "throughput_per_accelerator_tokens_per_s"}
_SEED_MEM_KEYS = {"fwd_activation_cache_per_micro_batch": "fwd_activation_cache_per_micro_batch_bytes",
                  "peak_activation_mem_in_1F1B": "peak_activation_mem_in_1F1B_bytes",
                  "fwd_peak_allocated_mem": "fwd_peak_allocated_mem_bytes",
                  "bwd_peak_allocated_mem": "bwd_peak_allocated_mem_bytes",
                  "peak_mem": "peak_mem_bytes", "peak_mem_with_reserved": "peak_mem_with_reserved_bytes"}


def _seed_names(d: dict, names: dict[str, str]) -> dict:
    return {seed: d[ours] for seed, ours in names.items()}


def _tup(v):
    if v is None:
        return None
    return tuple(v) if isinstance(v, (list, tuple)) else (v,)


def _build_topology(spec: dict, world: int | None):
    from sim.inputs import make_topology
    params = {k: v for k, v in spec.items() if k != "template"}
    if world and "gpus" not in params:
        params["gpus"] = world
    return make_topology(spec["template"], **params)
