"""`clustersim cluster`: several training jobs on one fabric (sim.cluster)."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers) -> None:
    c = subparsers.add_parser(
        "cluster", help="several training jobs on one fabric: slowdown per job and the hottest links",
        description="Simulate jobs alone and together on one fabric (their flows share links). "
                    "--job 'model=llama3-8b,tp=8,world=64,placement=interleave,start=0' (repeatable); keys "
                    "besides name, model, workload, placement (contiguous | interleave | spread | file:PATH), "
                    "start (s), iterations and world are plan fields (dp, pp, global_batch_size, ...).")
    c.add_argument("--job", "-j", dest="jobs", action="append", required=True, metavar="SPEC",
                   help="one job (repeatable)")
    c.add_argument("--topology", "--fabric", "-t", dest="fabric", default="spectrum-x",
                   help="shared topology template[:key=value,...] or SimAI topology file (default spectrum-x)")
    c.add_argument("--gpus", "-g", type=int, help="GPUs of a template topology (default: the jobs' total, whole servers)")
    c.add_argument("--gpu", help="GPU for compute times (default: the topology's GPU type)")
    from sim.commands import add_calibration_args
    add_calibration_args(c)
    c.add_argument("--top", type=int, default=8, help="hottest links listed (default 8)")
    c.add_argument("--out", "-o", default="clustersim-cluster", help="results directory ('-' = none)")
    c.add_argument("--no-charts", action="store_true", help="skip cluster.png (the fabric with the jobs placed)")
    c.set_defaults(func=cmd_cluster)


def cmd_cluster(args: argparse.Namespace) -> int:
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
    from sim.inputs import load_net_calibration, make_topology, parse_kv, servers_for
    if args.top < 0:
        raise SimError(f"--top {args.top}: must be >= 0")
    specs = [parse_job(text, i) for i, text in enumerate(args.jobs)]
    if args.out != "-":
        from sim.report import check_out_dir
        check_out_dir(args.out, CLUSTER_FILES)
    gpus = args.gpus
    if gpus is None and not Path(args.fabric).is_file() and "gpus=" not in args.fabric:
        total = sum(int(build_workload(s).plan.world_size) for s in specs)
        gps_text = parse_kv(args.fabric.partition(":")[2], "fabric").get("gpus_per_server", "8")
        if not gps_text.isdigit() or int(gps_text) <= 0:
            raise SimError(f"fabric '{args.fabric}': gpus_per_server must be a positive integer (got '{gps_text}')")
        gpus = servers_for(total, int(gps_text))
    topology = make_topology(args.fabric, gpus=gpus)
    db = open_job_db({"db": args.db, "gpu_file": args.gpu_file})
    rep = simulate_cluster(specs, topology, gpu=args.gpu, db=db,
                           net_calibration=load_net_calibration(args.net_calibration))
    print(format_cluster(rep, args.top))
    if args.out != "-":
        out = write_cluster_results(rep, args.out, args.top, extra={"jobs": args.jobs, "fabric": args.fabric,
                                                                    "gpus": int(topology.num_gpus)},
                                    charts=not args.no_charts)
        print(f"results in {out}/ (summary.json, summary.txt, links.csv{'' if args.no_charts else ', cluster.png'})")
    return 0
