"""`clustersim serve --disaggregate`: the prefill/decode split of sim.serve.disagg from the command line.

The ServingPlan flags of `serve` (--scheduler, --chunk-size, --batch-cap, --kv-dtype, ...) are the base of
both pools; --prefill-X / --decode-X override them per pool (replicas, tp, pp, GPU, scheduler, router,
batch cap). --gpus / the topology is the GPU budget: a split that does not fit is one line, exit 2,
before anything is written. --compare-colocated also runs the colocated deployment on the same GPUs
(the base plan with --tp/--pp if given, else the decode pool's tp/pp, replicas filling the split).
Outputs: what `serve` writes (replica_metrics.csv with a `pool` column) + kv_transfers.csv.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from sim.errors import SimError
from sim.serve.plan import KV_MODES, ROUTERS, SCHEDULERS

DISAGG_FILES = ("kv_transfers.csv",)
_POOL_FLAGS = (  # (suffix, ServingPlan field or None, type, help)
    ("replicas", "replicas", int, "replicas of the {pool} pool (default 1)"),
    ("tp", "tp", int, "tensor-parallel GPUs per stage of a {pool} replica (default: --tp, else 1)"),
    ("pp", "pp", int, "pipeline stages of a {pool} replica (default: --pp, else 1)"),
    ("gpu", None, str, "GPU of the {pool} pool for kernel times and memory (default: --gpu / the topology's)"),
    ("scheduler", "scheduler", str, f"{{pool}} pool scheduler: {', '.join(SCHEDULERS)} (default: --scheduler)"),
    ("router", "router", str, f"{{pool}} pool router: {', '.join(ROUTERS)} (default: --router)"),
    ("batch_cap", "max_batch_size", int, "requests per batch of the {pool} pool (default: --batch-cap)"),
)


def add_disagg_args(p) -> None:
    g = p.add_argument_group("prefill/decode disaggregation (--disaggregate)")
    g.add_argument("--disaggregate", action="store_true",
                   help="separate prefill and decode pools; the KV cache moves between them on the fabric")
    for pool in ("prefill", "decode"):
        for suffix, _field, typ, hlp in _POOL_FLAGS:
            g.add_argument(f"--{pool}-{suffix.replace('_', '-')}", dest=f"{pool}_{suffix}", type=typ, default=None,
                           help=hlp.format(pool=pool))
    g.add_argument("--kv-transfer", choices=KV_MODES, default=None,
                   help="layerwise: streamed as the prefill produces each layer (default); whole: after the prefill")
    g.add_argument("--compare-colocated", action="store_true",
                   help="also run the colocated deployment on the same GPUs and print both side by side")


def disagg_flags_given(args) -> list[str]:
    """Disaggregation flags on the command line (an error without --disaggregate)."""
    names = [f"{pool}_{s}" for pool in ("prefill", "decode") for s, *_ in _POOL_FLAGS] + ["kv_transfer"]
    out = ["--" + n.replace("_", "-") for n in names if getattr(args, n, None) is not None]
    if getattr(args, "compare_colocated", False):
        out.append("--compare-colocated")
    return out


def _dplan(args):
    from sim.serve.cli import _plan
    from sim.serve.disagg import DisaggPlan
    if args.replicas is not None:
        raise SimError("--replicas: with --disaggregate give --prefill-replicas and --decode-replicas")
    base = _plan(args)
    pools = {}
    for pool in ("prefill", "decode"):
        kw = {}
        for suffix, field, _typ, _hlp in _POOL_FLAGS:
            v = getattr(args, f"{pool}_{suffix}")
            if field is not None and v is not None:
                kw[field] = v
        pools[pool] = replace(base, **kw)
    mapping = None
    if args.mapping:
        from sim.placement import load_mapping
        if not Path(args.mapping).is_file():
            raise SimError(f"--mapping {args.mapping}: file not found")
        mapping = tuple(load_mapping(args.mapping))
    gpu = args.gpu
    return base, DisaggPlan(prefill=pools["prefill"], decode=pools["decode"],
                            prefill_gpu=args.prefill_gpu or gpu, decode_gpu=args.decode_gpu or gpu,
                            kv_transfer=args.kv_transfer or "layerwise", mapping=mapping)


def cmd_disagg(args) -> int:
    from sim.serve.api import host_overhead
    from sim.serve.cli import _request_config
    from sim.serve.disagg import (
        colocated_plan,
        compare_colocated,
        format_disagg,
        simulate_disaggregated,
        validate_split,
    )
    from sim.serve.metrics import SLO
    from sim.serve.outputs import SERVE_FILES, write_results
    from sim.serve.validation import validate_serving_plan
    if not args.model:
        raise SimError("--disaggregate: give --model NAME|FILE")
    for flag, v in (("--cpu-per-iteration-ms", args.cpu_per_iteration_ms), ("--slo-ttft", args.slo_ttft),
                    ("--slo-tbt", args.slo_tbt), ("--slo-tpot", args.slo_tpot), ("--slo-e2e", args.slo_e2e)):
        if v is not None and not (v >= 0 and v != float("inf")):
            raise SimError(f"{flag}: must be a finite number >= 0 (got {v})")
    base, dplan = _dplan(args)
    validate_split(dplan, args.gpus)             # the budget first: nothing is built for a split that cannot fit
    from sim.commands import open_job_db
    db = open_job_db({"db": args.db, "gpu_file": args.gpu_file})
    if args.gpus is not None:
        from sim.inputs import make_topology
        topology = make_topology(args.fabric or "spectrum-x", gpus=args.gpus, gpu_type=dplan.prefill_gpu)
    else:
        from sim.serve.disagg import _topology
        topology = _topology(args.fabric, dplan, db)
    validate_split(dplan, topology)
    cplan = None
    if args.compare_colocated:
        cbase = base if (args.tp is not None or args.pp is not None) else replace(
            base, tp=dplan.decode.tp, pp=dplan.decode.pp)
        cplan = colocated_plan(dplan, cbase)
        validate_serving_plan(cplan)
        if dplan.prefill_gpu != dplan.decode_gpu:
            raise SimError(f"--compare-colocated needs one GPU type (--prefill-gpu {dplan.prefill_gpu}, --decode-gpu "
                           f"{dplan.decode_gpu})")
    cfg = _request_config(args)
    if args.out != "-":
        from sim.report import check_out_dir
        check_out_dir(args.out, SERVE_FILES + DISAGG_FILES)
    net_cal = None
    if args.net_calibration:
        import netsim
        net_cal = netsim.load_net_calibration(args.net_calibration)
    slo = SLO(args.slo_ttft, args.slo_tbt, args.slo_tpot, args.slo_e2e)
    slo = slo if slo.any() else None
    host = host_overhead(args.host, args.cpu_per_iteration_ms * 1e-3)
    t0 = time.perf_counter()
    run = simulate_disaggregated(args.model, dplan, cfg, topology=topology, db=db, network=args.network,
                                 net_calibration=net_cal, host=host, slo=slo, seed=cfg.seed,
                                 progress=not args.quiet and sys.stderr.isatty(), keep_token_times=args.token_times)
    if cplan is not None:
        compare_colocated(run.model, dplan, cfg, run=run, colocated=cplan, topology=topology, db=db,
                          network=args.network, net_calibration=net_cal, host=host, slo=slo, seed=cfg.seed)
    wall = time.perf_counter() - t0
    for line in run.request_notes:
        print(f"note: {line}", file=sys.stderr)
    s = run.summary
    title = f"model {getattr(run.model, 'name', args.model)} | disaggregated: {dplan.describe()}"
    text = format_disagg(s, title)
    out = None
    if args.out != "-":
        extra = {k: v for k, v in vars(args).items() if k != "func" and v is not None}

        def more(tmp: Path) -> None:
            run.transfers.to_csv(tmp / "kv_transfers.csv", index=False, float_format="%.9g")
            run.replicas.to_csv(tmp / "replica_metrics.csv", index=False, float_format="%.9g")
            (tmp / "summary.txt").write_text(text + "\n")

        out = write_results(run.result, args.out, None, None, slo, charts=not args.no_charts, trace=not args.no_trace,
                            batches=args.batches, extra=extra, title=title, summary=s, more=more,
                            more_files=DISAGG_FILES)
        if args.token_times:
            from sim.serve.cli import _write_token_times
            _write_token_times(run, out)
    if args.json:
        print(json.dumps(s, indent=1, default=str))
        return 0
    print(text)
    print(f"simulated in {wall:.2f} s ({s['cluster']['batches']} batches)" + (f"; results in {out}/" if out else ""))
    return 0
