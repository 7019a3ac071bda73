"""`clustersim run | compare | sweep` subcommands (owned by sim; memory/search live in sim.analysis).

A run is described by a plain, picklable job dict (so sweeps can ship it to other processes):
  workload   path of a native workload JSON or a SimAI workload text file (or None)
  model      zoo name or model file (used when workload is None)
  plan_file  plan YAML/JSON (optional) and plan {field: value} overrides (ParallelPlan fields, plus dp)
  fabric     topology template spec 'NAME[:key=value,...]' or a SimAI topology file
  gpus       GPUs of a template topology (default: the job's world size rounded up to whole servers)
  gpu        GPU for compute times (default: the topology's GPU type)
  network    "flow" | "analytical";  sampling "auto" | "full";  mapping rank->GPU file
  db         kernel DB path (compute_db.open_db; None: shipped), gpu_file: user GPU spec YAML
  net_calibration  network calibration file (netsim.load_net_calibration; None: netsim's constants)
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import sys
import time
from pathlib import Path

from sim.errors import SimError
from workload_gen.plan import no_dp_overlap_fields

# The built-in example `clustersim run` simulates when given no arguments: a GPT-7B-class model
# (AICB -m 7) on 32 H100 of a Spectrum-X fabric, TP 4 (sequence parallel) x PP 2 (1F1B) x DP 4,
# distributed optimizer, 8 micro-batches of 4,096 tokens.
EXAMPLE_JOB = {
    "workload": None, "model": "aicb-7", "plan_file": None,
    "plan": {"tp": 4, "pp": 2, "dp": 4, "global_batch_size": 32, "micro_batch_size": 1, "seq_length": 4096,
             "sequence_parallel": True, "distributed_optimizer": True},
    "fabric": "spectrum-x", "gpus": None, "gpu": None, "network": "flow", "sampling": "auto", "mapping": None,
}

_PLAN_FLAGS = (  # (dest, flags, type, help)
    ("tp", ("--tp", "--tensor_model_parallel_size"), int, "tensor parallel size"),
    ("pp", ("--pp", "--pipeline_model_parallel"), int, "pipeline stages"),
    ("cp", ("--cp", "--context-parallel-size"), int, "context parallel size"),
    ("ep", ("--ep", "--expert_model_parallel_size"), int, "expert parallel size"),
    ("dp", ("--dp",), int, "data parallel size (world = tp*cp*pp*dp unless --world-size)"),
    ("vpp", ("--vpp",), int, "virtual pipeline chunks per stage (interleaved 1F1B)"),
    ("world_size", ("--world-size", "--world_size"), int, "number of ranks"),
    ("global_batch_size", ("--global-batch", "--global_batch"), int, "sequences per iteration"),
    ("micro_batch_size", ("--micro-batch", "--micro_batch"), int, "sequences per micro-batch"),
    ("seq_length", ("--seq-length", "--seq_length"), int, "tokens per sequence"),
    ("dtype", ("--dtype",), str, "bf16 | fp16 | fp8"),
    ("recompute", ("--recompute",), str, "none | selective | full"),
    ("framework", ("--frame", "--framework"), str, "megatron | deepspeed"),
    ("zero_stage", ("--zero-stage", "--stage"), int, "DeepSpeed ZeRO stage"),
    ("rank_order", ("--rank-order",), str, "rank order, default tp-cp-ep-dp-pp"),
    ("num_layers_first_stage", ("--first-stage-layers", "--decoder-first-pipeline-num-layers"), int,
     "layers on pipeline stage 0 (uneven pipeline; divisible by --vpp)"),
    ("num_layers_last_stage", ("--last-stage-layers", "--decoder-last-pipeline-num-layers"), int,
     "layers on the last pipeline stage (uneven pipeline)"),
    ("recompute_num_layers", ("--recompute-num-layers",), int, "full recompute: layers per stage chunk"),
    ("grad_reduce_dtype", ("--grad-reduce-dtype",), str,
     "gradient buffer / DP reduction dtype: auto (Megatron-LM: fp32 for bf16, fp16 for fp16) | fp32 | bf16 | fp16"),
)
_PLAN_BOOLS = (
    ("sequence_parallel", ("--sp", "--enable_sequence_parallel"), "sequence parallelism"),
    ("distributed_optimizer", ("--use-distributed-optimizer", "--distributed-optimizer"), "ZeRO-1-like optimizer"),
    ("tp_comm_overlap", ("--tp-comm-overlap",), "overlap TP communication with GEMMs"),
)
# on/off plan switches (--X / --no-X): (dest, flag, help)
_PLAN_SWITCHES = (
    ("flash_attention", "--flash-attn", "flash attention (default on; --no-flash-attn: unfused attention)"),
    ("overlap_grad_reduce", "--overlap-grad-reduce",
     "reduce gradient buckets during the backward pass (Megatron --overlap-grad-reduce; default on)"),
    ("overlap_param_gather", "--overlap-param-gather",
     "distributed optimizer: gather parameters during the forward pass (default on)"),
    ("overlap_p2p_comm", "--overlap-p2p-comm",
     "interleaved schedule: overlap pipeline p2p, no device sync after each send/recv (default off)"),
)


# ---------------------------------------------------------------- jobs
def build_inputs(job: dict):
    """(workload, topology, gpu name) of a job."""
    from sim.inputs import load_workload_file, make_plan, make_topology, resolve_model, servers_for
    if job.get("workload"):
        workload = load_workload_file(job["workload"])
        if job.get("plan"):
            raise SimError("plan flags cannot be combined with --workload (the file fixes the plan)")
    else:
        if not job.get("model"):
            raise SimError("give --workload FILE or --model NAME|FILE")
        from workload_gen import generate
        model = resolve_model(job["model"])
        plan_fields = dict(job.get("plan") or {})
        if "seq_length" not in plan_fields and not job.get("plan_file"):
            plan_fields["seq_length"] = model.seq_length
        plan = make_plan(job.get("plan_file"), **plan_fields)
        workload = generate(model, plan)
    world = int(workload.plan.world_size)
    # default fabric: one Spectrum-X pod holds at most 4,096 GPUs (SimAI generator rules)
    fabric = job.get("fabric") or ("spectrum-x" if world <= 4096 else "multi-pod")
    gpus = job.get("gpus")
    if gpus is None and not Path(fabric).is_file() and "gpus=" not in fabric:
        from sim.inputs import parse_kv
        gps_text = parse_kv(fabric.partition(":")[2], "fabric").get("gpus_per_server", "8")
        try:
            gps = int(gps_text)
        except ValueError:
            gps = 0
        if gps <= 0:
            raise SimError(f"fabric '{fabric}': gpus_per_server must be a positive integer (got '{gps_text}')")
        gpus = servers_for(world, gps)
    topology = make_topology(fabric, gpus=gpus, gpu_type=job.get("gpu_type"))
    from sim.inputs import default_gpu
    return workload, topology, default_gpu(topology, job.get("gpu"))


def add_calibration_args(p: argparse.ArgumentParser, network: bool = True) -> None:
    """--db, --gpu-file (and --net-calibration): the user's own kernel, GPU and network measurements."""
    c = p.add_argument_group("calibration (your own measurements)")
    c.add_argument("--db", help="kernel timing DB (SQLite from `clustersim measure`/`compute-db`), layered "
                                "over the shipped one")
    c.add_argument("--gpu-file", help="GPU spec YAML adding GPUs to the table (compute_db layout)")
    if network:
        c.add_argument("--net-calibration", help="network calibration file fitted to your nccl-tests runs "
                                                 "(`clustersim collective calibrate`)")


def open_job_db(job: dict):
    """compute_db.open_db(--db, --gpu-file) of a job (the shipped DB when neither is given)."""
    from compute_db import open_db
    return open_db(job.get("db"), job.get("gpu_file"))


def run_job(job: dict, progress: bool = False, trace: bool = False, row_key=None, return_inputs: bool = False):
    from sim.inputs import load_net_calibration
    from sim.simulation import simulate
    db = open_job_db(job)
    cal = load_net_calibration(job.get("net_calibration"))
    workload, topology, gpu = build_inputs(job)
    from sim.fabric_faults import apply_job_faults, check_placeable
    healthy = topology
    topology, faults = apply_job_faults(job, healthy)   # bad part names: one line, before simulating
    placement = job.get("mapping")
    if faults:
        from sim.placement import place
        placement = place(workload.plan, topology, placement)
        check_placeable(healthy, faults, topology, placement)
    net_opts = None
    if job.get("simai"):   # SimAI's -nv / -nic / -busbw / PXN (sim.simai_compat)
        from sim.simai_compat import network_settings
        cal, net_opts = network_settings(job["simai"], topology, cal)
    stragglers = None
    if job.get("stragglers"):   # sim.straggler: {"fixed": ["RANK=FACTOR", ...], "dist": "lognormal:..."}
        from sim.straggler import make_spec
        stragglers = make_spec(job["stragglers"].get("fixed"), job["stragglers"].get("dist"))
    rep = simulate(workload, topology, gpu=gpu, network=job.get("network") or "flow", db=db,
                   net_calibration=cal, placement=placement, progress=progress, network_options=net_opts,
                   # faults break the symmetry "auto" sampling relies on: every group is submitted
                   sampling="full" if faults else job.get("sampling") or "auto", trace=trace,
                   row_key=row_key or _row_key_for(workload), stragglers=stragglers)
    rep.meta["fabric"] = job.get("fabric")
    if faults:
        rep.meta["faults"] = faults.describe()
    return (rep, workload, topology) if return_inputs else rep


def _row_key_for(workload):
    """Per-layer CSV rows: SimAI imports keep their layer lines; native workloads group by layer."""
    if workload.meta.get("imported_from") == "simai":
        def key(op):
            name = op.name
            for suffix in ("_dgrad", "_wgrad", "_ig", "_wg"):
                if name.endswith(suffix):
                    return name[: -len(suffix)]
            return name
        return key
    return None


def summary_row(label: dict, rep=None, error: str = "") -> dict:
    row = dict(label)
    keys = ("iteration_time_s", "compute_s", "exposed_TP_s", "exposed_CP_s", "exposed_EP_s", "exposed_DP_s",
            "exposed_PP_s", "overhead_s", "bubble_s", "overlap_slowdown_s", "mfu", "tflops_per_gpu",
            "tokens_per_s_per_gpu")
    if rep is None:
        row.update(dict.fromkeys(keys, ""))
    else:
        vals = [rep.iteration_time_s, rep.compute_s] + [rep.exposed_comm_s[k] for k in ("TP", "CP", "EP", "DP", "PP")]
        vals += [rep.overhead_s, rep.bubble_s, rep.overlap_slowdown_s, rep.mfu, rep.tflops_per_gpu,
                 rep.tokens_per_s_per_gpu]
        row.update({k: f"{v:.6g}" if math.isfinite(v) else "n/a" for k, v in zip(keys, vals)})
        from sim.straggler import straggler_columns
        row.update(straggler_columns(rep.stragglers))
    row["error"] = error
    return row


def _job_worker(args):
    label, job, *train = args    # train: [sim.train_cost.TrainingInputs] when cost/energy columns are wanted
    from sim.train_cost import estimate_for_run, training_columns
    inputs = train[0] if train else None
    try:
        rep, workload, topology = run_job(job, return_inputs=True)
        row = summary_row(label, rep)
        if inputs is not None:
            est = estimate_for_run(rep, workload, topology, inputs, job)
            row = _with_columns(row, training_columns(est, inputs.train_tokens is not None))
        return row
    except Exception as exc:  # a failed grid point must not stop the sweep; reported in its row
        row = summary_row(label, None, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}")
        return row if inputs is None else _with_columns(row, training_columns(None, inputs.train_tokens is not None))


def _with_columns(row: dict, extra: dict) -> dict:
    """`row` with `extra` columns inserted before its last (error) column."""
    error = row.pop("error")
    return {**row, **extra, "error": error}


# ---------------------------------------------------------------- argument helpers
def _add_inputs(p: argparse.ArgumentParser, fabric_flag: bool = True) -> None:
    g = p.add_argument_group("workload")
    g.add_argument("--workload", "-w", help="native workload JSON or SimAI workload text file")
    g.add_argument("--model", "-m", help="model: zoo name (e.g. llama3-70b, aicb-7) or config file")
    g.add_argument("--plan-file", help="parallel plan YAML/JSON (flags below override it)")
    for dest, flags, typ, hlp in _PLAN_FLAGS:
        g.add_argument(*flags, dest=dest, type=typ, default=None, help=hlp)
    for dest, flags, hlp in _PLAN_BOOLS:
        g.add_argument(*flags, dest=dest, action="store_const", const=True, default=None, help=hlp)
    for dest, flag, hlp in _PLAN_SWITCHES:
        g.add_argument(flag, dest=dest, action=argparse.BooleanOptionalAction, default=None, help=hlp)
    g.add_argument("--no-dp-overlap", dest="no_dp_overlap", action="store_true",
                   help="no DP overlap at all (as Megatron-LM 2021): --no-overlap-grad-reduce --no-overlap-param-gather")
    t = p.add_argument_group("cluster")
    if fabric_flag:
        t.add_argument("--topology", "--fabric", "-t", dest="fabric", default=None,
                       help="topology template[:key=value,...] (spectrum-x, dcn+, alibaba-hpn, multi-pod, ...) "
                            "or a SimAI topology file (default: spectrum-x, multi-pod above 4,096 GPUs)")
    t.add_argument("--gpus", "-g", type=int, help="GPUs of a template topology (default: job size)")
    t.add_argument("--gpu", help="GPU for compute times (default: the topology's GPU type)")
    t.add_argument("--gpu-type", help="GPU type written into a template topology (e.g. A100, H100)")
    t.add_argument("--mapping", help="rank -> GPU mapping file (JSON list or one id per line)")
    add_calibration_args(p)
    from sim.fabric_faults import add_fault_arguments
    add_fault_arguments(p)
    s = p.add_argument_group("simulation")
    s.add_argument("--network", "-n", choices=("flow", "analytical"), default="flow",
                   help="network backend (default flow)")
    s.add_argument("--sampling", choices=("auto", "full", "rail"), default="auto",
                   help="auto: skip copies of groups that exact symmetry makes redundant (default); full: submit "
                        "every group; rail: also let one rail stand for all rails (approximate: ignores ECMP "
                        "hash asymmetry between rails)")


def _job_from_args(args) -> dict:
    dests = [d for d, *_ in _PLAN_FLAGS] + [d for d, *_ in _PLAN_BOOLS] + [d for d, *_ in _PLAN_SWITCHES]
    plan = {dest: getattr(args, dest) for dest in dests if getattr(args, dest, None) is not None}
    plan = no_dp_overlap_fields(plan, getattr(args, "no_dp_overlap", False))
    return {"workload": args.workload, "model": args.model, "plan_file": args.plan_file, "plan": plan,
            "fabric": getattr(args, "fabric", None), "gpus": args.gpus, "gpu": args.gpu,
            "gpu_type": args.gpu_type, "network": args.network, "sampling": args.sampling,
            "mapping": args.mapping, "db": args.db, "gpu_file": args.gpu_file,
            "net_calibration": args.net_calibration, "simai": _simai_options(args),
            "faults": _fault_options(args), "stragglers": _straggler_options(args)}


def _straggler_options(args) -> dict | None:
    from sim.straggler import straggler_options
    return straggler_options(args)


def _fault_options(args) -> dict | None:
    from sim.fabric_faults import fault_options
    return fault_options(args)


def _simai_options(args) -> dict | None:
    from sim.simai_compat import job_options
    return job_options(args)


def _is_default_run(args) -> bool:
    job = _job_from_args(args)
    return not job["workload"] and not job["model"] and not job["plan"] and not job["plan_file"]


def _progress_wanted(args) -> bool:
    return not getattr(args, "quiet", False) and sys.stderr.isatty()


# ---------------------------------------------------------------- run
def _charts_of(args) -> str:
    """--charts with --no-charts as its alias of "none" (both given: they must agree)."""
    charts = getattr(args, "charts", None)
    if getattr(args, "no_charts", False):
        if charts not in (None, "none"):
            raise SimError(f"--no-charts contradicts --charts {charts} (--no-charts is --charts none)")
        return "none"
    return charts or "svg"


def cmd_run(args) -> int:
    from sim.report import format_summary, write_results
    charts = _charts_of(args)
    args.no_charts = charts == "none"     # `run --job` (sim.cluster_cli) reads --no-charts
    if getattr(args, "jobs", None):   # `run --job ... --job ...`: `clustersim cluster` (sim.cluster_cli)
        from sim.cluster_cli import cmd_run_jobs
        return cmd_run_jobs(args)
    if _is_default_run(args):
        job = dict(EXAMPLE_JOB)
        job.update({k: v for k, v in (("gpus", args.gpus), ("gpu", args.gpu), ("gpu_type", args.gpu_type),
                                      ("mapping", args.mapping), ("db", args.db), ("gpu_file", args.gpu_file),
                                      ("net_calibration", args.net_calibration),
                                      ("faults", _fault_options(args))) if v})
        if args.fabric:
            job["fabric"] = args.fabric
        job["network"], job["sampling"] = args.network, args.sampling
        cluster = "32 x H100 on Spectrum-X 400 Gb/s"
        if args.fabric or args.gpu or args.gpu_type or args.gpus:
            cluster = "32 ranks on the cluster you gave"
        if not getattr(args, "quiet", False):
            print(f"clustersim run: built-in example — AICB GPT-7B (-m 7), {cluster}, "
                  "TP4 (SP) x PP2 x DP4, 8 micro-batches of 4096 tokens", file=sys.stderr)
    else:
        job = _job_from_args(args)
    if getattr(args, "straggler", None) or getattr(args, "straggler_dist", None):
        from sim.straggler import make_spec
        make_spec(args.straggler, args.straggler_dist)   # bad flags fail before simulating
        job["stragglers"] = {"fixed": list(args.straggler or []), "dist": args.straggler_dist}
    if job.get("simai"):
        from sim.simai_compat import check_options
        check_options(job["simai"])   # SimAI inputs read and checked before simulating
    if args.out != "-":
        from sim.report import check_out_dir
        check_out_dir(args.out)  # before minutes of simulation, not after
    from sim.train_flags import training_wanted
    train_inputs = None
    if training_wanted(args):   # the cost/energy models are imported only when asked for
        from sim.train_cost import load_training_inputs
        train_inputs = load_training_inputs(args)   # bad files fail early
    from sim.report import parse_ranks
    trace_ranks = parse_ranks(args.trace_ranks) if args.trace_ranks else None
    from sim.trace_args import LINK_SERIES_KEPT
    if not 0 <= args.trace_links <= LINK_SERIES_KEPT:
        raise SimError(f"--trace-links: {args.trace_links} is not in 0..{LINK_SERIES_KEPT}")
    t0 = time.perf_counter()
    rep, workload, topology = run_job(job, progress=_progress_wanted(args),
                                      trace=not args.no_trace or charts != "none", return_inputs=True)
    wall = time.perf_counter() - t0
    train = None
    if train_inputs is not None:
        from sim.train_cost import estimate_for_run, format_training
        train = estimate_for_run(rep, workload, topology, train_inputs, job)
    name = Path(job["workload"]).name if job.get("workload") else (job.get("model") or "run")
    from sim.straggler import format_straggler
    tail = "\n".join(t for t in (format_straggler(rep.stragglers) if rep.stragglers else "",
                                  format_training(train) if train else "") if t)
    out = None
    if args.out != "-":
        out = write_results(rep, args.out, run_name=args.name or name, charts=charts,
                            trace=not args.no_trace, extra={k: v for k, v in job.items() if v is not None},
                            trace_ranks=trace_ranks, trace_links=args.trace_links,
                            sections={"training": train.to_dict()} if train else None,
                            summary_tail=tail, workload=workload, topology=topology)
    if args.json:
        data = rep.to_dict()
        if train:
            data["training"] = train.to_dict()
        if args.explain:
            from sim.explain import explain_dict
            data["explain"] = explain_dict(rep)
        print(json.dumps(data, indent=2, default=str))
    else:
        print(format_summary(rep))
        if rep.stragglers:
            print(format_straggler(rep.stragglers))
        if train:
            print(format_training(train))
        if args.explain:
            from sim.explain import format_explain
            print(format_explain(rep))
        print(f"simulated in {wall:.2f} s ({rep.meta['network_collectives']} network collectives)"
              + (f"; results in {out}/" if out else ""))
    from sim.memory_fit import memory_warning
    warning = memory_warning(rep.memory)
    if warning:   # a warning, not an error: the time estimate of the plan is still useful
        sys.stdout.flush()
        print(warning, file=sys.stderr)
    return 0


# ---------------------------------------------------------------- compare
def _parse_plan_spec(spec: str) -> tuple[str, dict, str | None]:
    """'tp=4,pp=2' -> inline overrides; an existing file -> plan file."""
    from sim.inputs import parse_kv
    if Path(spec).is_file():
        return Path(spec).stem, {}, spec
    return spec, parse_kv(spec, "plan"), None


def cmd_compare(args) -> int:
    from sim.report import atomic_dir
    base = _job_from_args(args)
    fabrics = args.fabrics or ["spectrum-x", "dcn+"]
    plans = args.plans or [None]
    jobs = []
    for plan_spec in plans:
        for fab in fabrics:
            job = dict(base, fabric=fab, plan=dict(base["plan"]))
            label = {"fabric": Path(fab).name if Path(fab).is_file() else fab}
            if plan_spec is not None:
                name, fields, pfile = _parse_plan_spec(plan_spec)
                job["plan"].update(fields)
                if pfile:
                    job["plan_file"] = pfile
                label["plan"] = name
            jobs.append((label, job))
    if not base["workload"] and not base["model"]:
        for _, job in jobs:
            job["model"] = EXAMPLE_JOB["model"]
            job["plan"] = {**EXAMPLE_JOB["plan"], **job["plan"]}
    from sim.fabric_faults import check_job_faults, fault_variants, with_variant
    variants = fault_variants(args)
    if variants:   # healthy vs degraded side by side: every configuration under every fault set
        jobs = [({**label, "faults": name}, with_variant(job, name, items))
                for label, job in jobs for name, items in variants]
    from sim.straggler import straggler_variants, with_straggler_variant
    svariants = straggler_variants(args)
    if svariants:   # every configuration under every straggler set
        jobs = [({**label, "stragglers": name}, with_straggler_variant(job, name, opts))
                for label, job in jobs for name, opts in svariants]
    for _, job in jobs:
        check_job_faults(job)   # misspelt parts fail before any simulation
    if args.out != "-":
        from sim.report import COMPARE_FILES, check_out_dir
        check_out_dir(args.out, COMPARE_FILES)
    from sim.train_cost import estimate_for_run, load_training_inputs
    from sim.train_flags import training_wanted
    train_inputs = load_training_inputs(args) if training_wanted(args) else None   # bad files fail early
    reports, estimates = [], []
    for label, job in jobs:
        if not args.quiet:
            print(f"simulating {label} ...", file=sys.stderr)
        rep, workload, topology = run_job(job, return_inputs=True)
        reports.append((label, rep))
        if train_inputs is not None:
            estimates.append(estimate_for_run(rep, workload, topology, train_inputs, job))
    if len({rep.meta.get("gpu") for _, rep in reports}) > 1:
        # fabrics of different GPU types change compute too: say so in every label
        for label, rep in reports:
            label["gpu"] = rep.meta.get("gpu")
    rows = [summary_row(label, rep) for label, rep in reports]
    table = format_compare(reports)
    if estimates:
        from sim.train_cost import format_training_table, training_columns
        to_train = train_inputs.train_tokens is not None
        rows = [_with_columns(r, training_columns(e, to_train)) for r, e in zip(rows, estimates)]
        table += "\n\n" + format_training_table([(_label_text(lab), e) for (lab, _), e in zip(reports, estimates)])
    print(table)

    def write(tmp: Path) -> None:
        (tmp / "compare.csv").write_text(_csv_text(rows))
        (tmp / "compare.txt").write_text(table + "\n")
        entries = [{"label": lab, **rep.to_dict()} for lab, rep in reports]
        for entry, est in zip(entries, estimates):
            entry["training"] = est.to_dict()
        (tmp / "compare.json").write_text(json.dumps(entries, indent=2, default=str) + "\n")
        plot_compare(reports, tmp / "compare.png")
        from sim.html.compare_report import compare_html
        (tmp / "report.html").write_text(compare_html(reports, [e.to_dict() for e in estimates]), encoding="utf-8")
    if args.out != "-":
        from sim.report import COMPARE_FILES
        out = atomic_dir(args.out, write, COMPARE_FILES)
        print(f"results in {out}/ (compare.csv, compare.png, report.html)")
    return 0


def _label_text(label: dict) -> str:
    return " | ".join(str(v) for v in label.values())


def format_compare(reports) -> str:
    w = min(72, max(14, *(len(_label_text(lab)) for lab, _ in reports))) + 1
    head = f"{'configuration':<{w}s}{'iter (s)':>10s}{'compute':>9s}{'TP':>8s}{'CP':>8s}{'EP':>8s}{'DP':>8s}" \
           f"{'PP':>8s}{'ovh':>8s}{'bubble':>8s}{'MFU %':>7s}{'vs best':>9s}"
    best = min(rep.iteration_time_s for _, rep in reports)
    lines = [head, "-" * len(head)]
    for label, rep in reports:
        e = rep.exposed_comm_s
        lines.append(f"{_label_text(label)[:w - 1]:<{w}s}{rep.iteration_time_s:10.4f}{rep.compute_s:9.3f}"
                     f"{e['TP']:8.3f}{e['CP']:8.3f}{e['EP']:8.3f}{e['DP']:8.3f}{e['PP']:8.3f}{rep.overhead_s:8.3f}"
                     f"{rep.bubble_s:8.3f}"
                     + (f"{100 * rep.mfu:7.1f}" if math.isfinite(rep.mfu) else f"{'n/a':>7s}")
                     + f"{rep.iteration_time_s / best:8.3f}x")
    lines.append("columns: seconds per iteration; TP..PP = exposed communication; ovh = launch/host overhead; "
                 "MFU = model FLOPs / (GPUs x T x peak)")
    return "\n".join(lines)


def plot_compare(reports, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from sim.report import _COLORS
    labels = [_label_text(lab) for lab, _ in reports]
    fig, ax = plt.subplots(figsize=(max(6, 1.6 * len(labels) + 3), 4.5))
    bottom = [0.0] * len(labels)
    for key in ("compute", "TP", "CP", "EP", "DP", "PP", "overhead", "bubble"):
        vals = [(rep.compute_s if key == "compute" else rep.bubble_s if key == "bubble"
                 else rep.overhead_s if key == "overhead" else rep.exposed_comm_s[key])
                for _, rep in reports]
        if not any(v > 0 for v in vals):
            continue
        ax.bar(labels, vals, bottom=bottom, color=_COLORS[key],
               label=key if key in ("compute", "bubble", "overhead") else f"exposed {key}")
        bottom = [a + b for a, b in zip(bottom, vals)]
    for i, (_, rep) in enumerate(reports):
        ax.text(i, bottom[i], f"{rep.iteration_time_s:.3f} s", ha="center", va="bottom", fontsize=8)
    ax.set_ylabel("seconds per iteration")
    ax.set_title("Iteration time by configuration")
    ax.legend(loc="center left", bbox_to_anchor=(1.0, 0.5), fontsize=8, frameon=False)
    plt.setp(ax.get_xticklabels(), rotation=15, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# ---------------------------------------------------------------- sweep
def _csv_text(rows: list[dict]) -> str:
    fields: list[str] = []
    for r in rows:
        for k in r:
            if k not in fields:
                fields.append(k)
    if "error" in fields:   # last even when an error row comes before rows with more columns
        fields.append(fields.pop(fields.index("error")))
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    w.writeheader()
    w.writerows(rows)
    return buf.getvalue()


def sweep_jobs(base: dict, grids: list[str], fabrics: list[str] | None, networks: list[str] | None):
    """Cartesian product of plan-field grids ('tp=1,2,4'), fabrics and networks -> [(label, job)]."""
    import itertools
    dims: list[tuple[str, list[str]]] = []
    for g in grids:
        if "=" not in g:
            raise SimError(f"--grid '{g}': expected FIELD=v1,v2,...")
        k, vals = g.split("=", 1)
        values = [v.strip() for v in vals.split(",") if v.strip()]
        if not values:
            raise SimError(f"--grid '{g}': no values")
        field = k.strip().replace("-", "_")
        if field != "dp":
            from sim.inputs import _coerce
            for v in values:  # a misspelt field or value is a usage error, not a failed grid point
                _coerce(field, v)
        dims.append((field, values))
    fabric_vals = fabrics or [base.get("fabric")]
    network_vals = networks or [base.get("network") or "flow"]
    jobs = []
    for fab, net in itertools.product(fabric_vals, network_vals):
        for combo in itertools.product(*[v for _, v in dims]) if dims else [()]:
            plan = dict(base["plan"])
            label = {"fabric": (Path(fab).name if Path(fab).is_file() else fab) if fab else "auto", "network": net}
            for (k, _), v in zip(dims, combo):
                plan[k] = v
                label[k] = v
            jobs.append((label, dict(base, fabric=fab, network=net, plan=plan)))
    return jobs


def sweep_html_path(csv_path: Path) -> Path:
    """The HTML report beside a sweep CSV: NAME.csv -> NAME.html (another name: NAME.EXT.html)."""
    return csv_path.with_suffix(".html") if csv_path.suffix.lower() == ".csv" else Path(f"{csv_path}.html")


def _default_sigterm() -> None:
    """Pool workers die on SIGTERM: the CLI's handler (raise Terminated) is for the parent only."""
    import signal
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def cmd_sweep(args) -> int:
    base = _job_from_args(args)
    if not base["workload"] and not base["model"]:
        raise SimError("sweep needs --model NAME|FILE or --workload FILE")
    jobs = sweep_jobs(base, args.grid or [], args.fabrics, args.networks)
    if base.get("faults"):   # misspelt parts: one error before any simulation, not one per row
        from sim.fabric_faults import check_job_faults
        for fab in dict.fromkeys(job.get("fabric") for _, job in jobs):
            check_job_faults(next(job for _, job in jobs if job.get("fabric") == fab))
    from sim.outpath import check_writable
    check_writable(args.out, kind="CSV file")  # before any simulation
    check_writable(sweep_html_path(Path(args.out)))
    from sim.train_cost import load_training_inputs
    from sim.train_flags import training_wanted
    if training_wanted(args):   # cost/energy columns; bad tables fail before any simulation
        inputs = load_training_inputs(args)
        jobs = [(label, job, inputs) for label, job in jobs]
    from sim.mpi import mpi_comm
    comm = mpi_comm()
    if comm is not None:
        rank, size = comm.Get_rank(), comm.Get_size()
        mine = [(i, _job_worker(jobs[i])) for i in range(rank, len(jobs), size)]
        gathered = comm.gather(mine, root=0)
        if rank != 0:
            return 0
        rows = [r for _, r in sorted((x for part in gathered for x in part), key=lambda t: t[0])]
        mode = f"mpi x {size}"
    else:
        n = max(1, min(args.jobs or 1, len(jobs)))
        if n > 1:
            import multiprocessing as mp
            # close + join: workers leave on their own once the queue is drained. The context manager's
            # terminate() alone can kill a worker while it holds the task queue's lock, and an idle
            # worker waiting on that lock then hangs the join (seen once under pytest-xdist).
            with mp.get_context("fork").Pool(n, initializer=_default_sigterm) as pool:
                rows = pool.map(_job_worker, jobs, chunksize=1)
                pool.close()
                pool.join()
        else:
            rows = [_job_worker(j) for j in jobs]
        mode = f"{n} local process(es)"
    out = Path(args.out)
    from sim.outpath import atomic_write
    atomic_write(out, _csv_text(rows).encode(), kind="CSV file")
    from sim.html.compare_report import sweep_html
    atomic_write(sweep_html_path(out), sweep_html(rows, out.name).encode())
    failed = sum(1 for r in rows if r["error"])
    print(f"sweep: {len(rows)} runs ({mode}), {failed} failed; results in {out} (report: {sweep_html_path(out)})")
    return 0


# ---------------------------------------------------------------- registration
def register(subparsers) -> None:
    """Add sim's subcommands to the clustersim parser."""
    p = subparsers.add_parser("run", help="simulate one training iteration (no arguments: built-in example)",
                              description="Simulate one training iteration. Without arguments: a built-in "
                                          "example (GPT-7B class on 32 H100, Spectrum-X).")
    _add_inputs(p)
    p.add_argument("--out", "-o", default="clustersim-results",
                   help="results directory (written atomically; '-' = none); default %(default)s")
    p.add_argument("--name", help="run name in EndToEnd.csv")
    p.add_argument("--charts", choices=("svg", "png", "none"), default=None,
                   help="chart files: svg (default: breakdown.svg, timeline.svg), png (breakdown.png, "
                        "timeline.png, drawn with matplotlib: slower) or none (no charts, no topology picture)")
    p.add_argument("--no-charts", action="store_true", help="the same as --charts none")
    p.add_argument("--no-trace", action="store_true", help="skip the Chrome trace")
    p.add_argument("--trace-ranks", metavar="LIST",
                   help="ranks trace.json shows, one process each with flow arrows between group members, "
                        "e.g. 0,16 or 0-15 (default: one process per pipeline stage)")
    p.add_argument("--trace-links", metavar="N", type=int, default=8,
                   help="counter tracks of the N busiest links' utilisation in trace.json (flow network; "
                        "default 8, at most 32, 0: none)")
    p.add_argument("--json", action="store_true", help="print the summary as JSON")
    p.add_argument("--explain", action="store_true",
                   help="also print which parts of the time rest on measurements and which on models")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    from sim.straggler import add_straggler_arguments
    add_straggler_arguments(p)
    from sim.cluster_cli import add_run_job_argument
    add_run_job_argument(p)
    from sim.simai_compat import add_run_arguments
    add_run_arguments(p)
    from sim.train_flags import add_training_arguments
    add_training_arguments(p)
    p.set_defaults(func=cmd_run)

    c = subparsers.add_parser("compare", help="one workload across fabrics and/or plans: table + bar chart")
    _add_inputs(c, fabric_flag=False)
    c.add_argument("--fabric", "--topology", "-t", dest="fabrics", action="append",
                   help="fabric to compare (repeatable): template[:key=value,...] or SimAI topology file")
    c.add_argument("--plan", dest="plans", action="append",
                   help="plan variant (repeatable): inline 'tp=8,pp=2' or a plan file")
    from sim.fabric_faults import add_variant_argument
    add_variant_argument(c)
    add_straggler_arguments(c, variants=True)
    c.add_argument("--out", "-o", default="clustersim-compare", help="results directory ('-' = none)")
    c.add_argument("--quiet", "-q", action="store_true")
    add_training_arguments(c)
    c.set_defaults(func=cmd_compare)

    s = subparsers.add_parser("sweep", help="grid of runs (parallel under mpiexec or local processes) -> one CSV")
    _add_inputs(s)
    s.add_argument("--grid", action="append", help="plan field grid, e.g. --grid tp=1,2,4 --grid pp=1,2")
    s.add_argument("--fabric-grid", dest="fabrics", action="append", help="fabric values (repeatable)")
    s.add_argument("--network-grid", dest="networks", action="append", choices=("flow", "analytical"))
    s.add_argument("--jobs", "-j", type=int, default=2, help="local worker processes without MPI (default 2)")
    s.add_argument("--out", "-o", default="clustersim-sweep.csv", help="CSV file (written atomically)")
    add_straggler_arguments(s)
    add_training_arguments(s)
    s.set_defaults(func=cmd_sweep)

    from sim import aicb, simai_compat
    aicb.register(subparsers)   # `clustersim aicb`: AICB's generator with compute_db kernel timing
    simai_compat.register(subparsers)   # `clustersim simai`: SimAI's command lines (scripts/SimAI_*)
    from sim import cluster_cli
    cluster_cli.register(subparsers)    # `clustersim cluster`: several jobs on one fabric (sim.cluster)
