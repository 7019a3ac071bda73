"""`clustersim cluster`: several training jobs on one fabric (sim.cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    c = subparsers.add_parser(
        "cluster", help="several training jobs on one fabric: slowdown per job and the hottest links",
        description="Simulate jobs alone and together on one fabric (their flows share links). "
                    "--job 'model=llama3-8b,tp=8,world=64,placement=interleave,start=0' (repeatable); keys "
                    "besides name, model, workload, placement (contiguous | interleave | spread | first-fit | "
                    "rail-aligned | file:PATH), "
                    "start (s), iterations and world are plan fields (dp, pp, global_batch_size, ...).")
    c.add_argument("--job", "-j", dest="jobs", action="append", required=True, metavar="SPEC",
                   help="one job (repeatable)")
    c.add_argument("--topology", "--fabric", "-t", dest="fabric", default="spectrum-x",
                   help="shared topology template[:key=value,...] or SimAI topology file (default spectrum-x)")
    c.add_argument("--gpus", "-g", type=int, help="GPUs of a template topology (default: the jobs' total, whole servers)")
    c.add_argument("--gpu", help="GPU for compute times (default: the topology's GPU type)")
    from sim.commands import add_calibration_args
    add_calibration_args(c)
    from sim.fabric_faults import add_fault_arguments
    add_fault_arguments(c)
    c.add_argument("--top", type=int, default=8, help="hottest links listed (default 8)")
    c.add_argument("--out", "-o", default="clustersim-cluster", help="results directory ('-' = none)")
    c.add_argument("--no-charts", action="store_true", help="skip cluster.png (the fabric with the jobs placed)")
    c.set_defaults(func=cmd_cluster)


def add_run_job_argument(p) -> None:
    """`run --job SPEC --job SPEC`: the same simulation as `clustersim cluster` (cmd_run_jobs)."""
    p.add_argument("--job", dest="jobs", action="append", metavar="SPEC",
                   help="several jobs on one fabric, as `clustersim cluster --job` (repeatable): "
                        "'model=NAME,tp=8,world=64,placement=first-fit,start=0'; takes --topology, --gpus, "
                        "--gpu, --gpu-type, --db, --gpu-file, --net-calibration, --fail/--degrade/--faults, "
                        "--out, --no-charts")


# run flags that describe ONE job (its workload, plan, mapping, stragglers, outputs): refused with --job
_SINGLE_JOB_FLAGS = ("workload", "model", "plan_file", "mapping", "straggler", "straggler_dist", "name",
                     "trace_ranks", "json", "explain")


def cmd_run_jobs(args: argparse.Namespace) -> int:
    """`clustersim run --job ... --job ...` (one implementation with `cluster`)."""
    from sim.commands import _job_from_args
    from sim.errors import SimError
    bad = [f for f in _SINGLE_JOB_FLAGS if getattr(args, f, None)]
    plan = _job_from_args(args)["plan"]
    if bad or plan:
        flag = "--" + (bad[0] if bad else sorted(plan)[0]).replace("_", "-")
        raise SimError(f"run --job: {flag} describes one job; give the workload and plan inside each --job")
    if getattr(args, "network", "flow") != "flow":
        raise SimError("run --job: several jobs share links on the flow network only (--network flow)")
    if getattr(args, "sampling", "auto") == "rail":
        raise SimError("run --job: jobs sharing a fabric submit every group (--sampling rail is not supported)")
    if _simai_given(args):
        raise SimError("run --job: SimAI options (-nv, -nic, -busbw, ...) are not supported with --job")
    from sim.train_flags import training_wanted
    if training_wanted(args):
        raise SimError("run --job: training cost/energy options are not supported with --job")
    return _run_cluster(args, args.fabric or "spectrum-x", top=8)


def _simai_given(args) -> bool:
    from sim.simai_compat import job_options
    return job_options(args) is not None


def cmd_cluster(args: argparse.Namespace) -> int:
    return _run_cluster(args, args.fabric, top=args.top)


def _run_cluster(args: argparse.Namespace, fabric: str, top: int) -> int:
    from sim.cluster import (
        CLUSTER_FILES,
        build_workload,
        format_cluster,
        parse_job,
        simulate_cluster,
        write_cluster_results,
    )
    from sim.commands import open_job_db
    from sim.errors import SimError
    from sim.fabric_faults import fault_options, job_fault_set
    from sim.inputs import load_net_calibration, make_topology, parse_kv, servers_for
    if top < 0:
        raise SimError(f"--top {top}: must be >= 0")
    specs = [parse_job(text, i) for i, text in enumerate(args.jobs)]
    fault_spec = fault_options(args)
    faults = job_fault_set({"faults": fault_spec})          # bad specs and files: one line, early
    if args.out != "-":
        from sim.report import check_out_dir
        check_out_dir(args.out, CLUSTER_FILES)
    gpus = args.gpus
    if gpus is None and not Path(fabric).is_file() and "gpus=" not in fabric:
        total = sum(int(build_workload(s).plan.world_size) for s in specs)
        gps_text = parse_kv(fabric.partition(":")[2], "fabric").get("gpus_per_server", "8")
        if not gps_text.isdigit() or int(gps_text) <= 0:
            raise SimError(f"fabric '{fabric}': gpus_per_server must be a positive integer (got '{gps_text}')")
        gpus = servers_for(total, int(gps_text))
    topology = make_topology(fabric, gpus=gpus, gpu_type=getattr(args, "gpu_type", None))
    if faults:
        from topo.faults import resolve_faults
        resolve_faults(topology, faults)     # misspelt parts: one line before any simulation
    db = open_job_db({"db": args.db, "gpu_file": args.gpu_file})
    rep = simulate_cluster(specs, topology, gpu=args.gpu, db=db,
                           net_calibration=load_net_calibration(args.net_calibration), faults=faults or None)
    print(format_cluster(rep, top))
    if args.out != "-":
        extra = {"jobs": args.jobs, "fabric": fabric, "gpus": int(topology.num_gpus)}
        if fault_spec:
            extra["faults"] = fault_spec
        out = write_cluster_results(rep, args.out, top, extra=extra, charts=not args.no_charts)
        print(f"results in {out}/ (summary.json, summary.txt, links.csv{'' if args.no_charts else ', cluster.png'}, report.html)")
    return 0
