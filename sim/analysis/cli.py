"""`clustersim memory | search` subcommands."""

from __future__ import annotations

import argparse
import json
import os
import sys

from sim.commands import add_calibration_args
from sim.errors import SimError

GiB = 1024 ** 3


def register(subparsers) -> None:
    """Add the analysis subcommands to the clustersim parser."""
    m = subparsers.add_parser("memory", help="per-stage GPU memory of a plan: model states, activations, peak")
    _model_args(m)
    _plan_args(m)
    m.add_argument("--gpu", default="H100", help="GPU name (compute_db table) or a system file (default H100)")
    m.add_argument("--selective", default="attn",
                   help="components selective recompute rematerialises: attn,mlp,norm (default attn, or "
                        "the --plan file's attn_recompute/mlp_recompute/mlp_rms_recompute)")
    m.add_argument("--opwalk", action="store_true",
                   help="activations from workload_gen.layers' units without generating the workload (as the "
                        "search does) instead of the generated workload's saved_bytes")
    m.add_argument("--json", metavar="PATH", help="also write the full report as JSON")
    add_calibration_args(m, network=False)
    m.set_defaults(func=cmd_memory)

    s = subparsers.add_parser("search", help="search parallel plans (TP/SP/PP/VPP/CP/EP/recompute/ZeRO) that fit")
    _model_args(s)
    s.add_argument("--world-size", required=True,
                   help="number of GPUs; a comma list (e.g. 64,128) searches each GPU count and ranks all together")
    s.add_argument("--gbs", type=int, required=True, help="global batch size (sequences)")
    s.add_argument("--seq", type=int, default=None, help="sequence length (default: the model's)")
    s.add_argument("--gpu", default="H100", help="GPU name or system file (default H100)")
    s.add_argument("--dtype", default="bf16", choices=("bf16", "fp16", "fp8"))
    for name, help_ in (("tp", "tensor-parallel sizes"), ("pp", "pipeline sizes"), ("vpp", "virtual chunks"),
                        ("cp", "context-parallel sizes"), ("ep", "expert-parallel sizes"),
                        ("etp", "expert-tensor-parallel sizes"), ("mbs", "micro-batch sizes")):
        s.add_argument(f"--{name}", default=None, help=f"comma list of {help_} (default: automatic)")
    s.add_argument("--sp", default="on,off", help="sequence parallel values: on,off (default both)")
    s.add_argument("--recompute", default="none,selective,full", help="none,selective,full (default all)")
    s.add_argument("--optimizer", default="none,distributed",
                   help="none,distributed,zero1,zero2,zero3 (default none,distributed)")
    s.add_argument("--no-flash", action="store_true", help="unfused attention in every plan")
    _plan_switch_args(s)
    s.add_argument("--gmi-error", type=float, default=6.0, help="GiB of device memory kept free (default 6)")
    s.add_argument("--allocated", action="store_true",
                   help="check allocated instead of reserved (allocator-inclusive) peak memory")
    s.add_argument("--topology", default="spectrum-x",
                   help="topo template sized to --world-size, for collective estimates and the flow "
                        "confirmation (default spectrum-x; 'none': alpha-beta estimates, no confirmation)")
    s.add_argument("--top-k", type=int, default=3, help="plans to confirm with the flow backend (default 3)")
    s.add_argument("--no-confirm", action="store_true", help="skip the flow-backend confirmation")
    s.add_argument("--workers", type=int, default=1, help="local worker processes (under mpiexec: MPI ranks)")
    s.add_argument("--out", "-o", default="search_out", help="output directory (default search_out)")
    o = s.add_argument_group("objective (sim.analysis.objectives)")
    o.add_argument("--objective", default="time", choices=("time", "cost", "energy"),
                   help="rank by seconds per iteration, $ per token or facility J per token (default time)")
    o.add_argument("--price-file", help="$/GPU-hour table YAML (default: sim/data/gpu_prices.yaml)")
    o.add_argument("--power-file", help="power table YAML (default: sim/data/power.yaml)")
    add_calibration_args(s)
    s.set_defaults(func=cmd_search)


def _plan_switch_args(p) -> None:
    """Plan fields that say how a run reduces gradients and overlaps communication (run's flags)."""
    p.add_argument("--grad-reduce-dtype", default=None, choices=("auto", "fp32", "bf16", "fp16"),
                   help="gradient buffer / DP reduction dtype (default auto: Megatron-LM's rule)")
    p.add_argument("--overlap-grad-reduce", action=argparse.BooleanOptionalAction, default=None,
                   help="reduce gradient buckets during the backward pass (default on)")
    p.add_argument("--overlap-param-gather", action=argparse.BooleanOptionalAction, default=None,
                   help="distributed optimizer: gather parameters during the forward pass (default on)")
    p.add_argument("--no-dp-overlap", action="store_true", help="both of the above off (Megatron-LM 2021)")
    p.add_argument("--overlap-p2p-comm", action=argparse.BooleanOptionalAction, default=None,
                   help="interleaved schedule: overlap pipeline p2p, no device sync (default off)")
    p.add_argument("--tp-comm-overlap", action="store_true", default=None, help="overlap TP communication with GEMMs")


def _switch_fields(args) -> dict:
    """ParallelPlan fields given by _plan_switch_args flags (only those set)."""
    out = {}
    if getattr(args, "grad_reduce_dtype", None) is not None:
        out["grad_reduce_dtype"] = args.grad_reduce_dtype
    for f in ("overlap_grad_reduce", "overlap_param_gather", "overlap_p2p_comm", "tp_comm_overlap"):
        if getattr(args, f, None) is not None:
            out[f] = getattr(args, f)
    from workload_gen.plan import no_dp_overlap_fields
    return no_dp_overlap_fields(out, getattr(args, "no_dp_overlap", False))


def _db_from_args(args):
    """compute_db.open_db(--db, --gpu-file), or None when neither is given (callers open the shipped DB)."""
    if args.db or args.gpu_file:
        from sim.commands import open_job_db
        return open_job_db({"db": args.db, "gpu_file": args.gpu_file})
    return None


def _model_args(p) -> None:
    p.add_argument("--model", required=True, help="zoo name (e.g. llama3-70b) or model file (HF/PerfLLM/YAML)")


def _plan_args(p) -> None:
    p.add_argument("--plan", default=None, help="plan file (YAML/JSON of ParallelPlan fields or PerfLLM strategy)")
    p.add_argument("--world-size", type=int, default=None)
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--pp", type=int, default=1)
    p.add_argument("--vpp", type=int, default=1)
    p.add_argument("--cp", type=int, default=1)
    p.add_argument("--ep", type=int, default=1)
    p.add_argument("--etp", type=int, default=None)
    p.add_argument("--sp", action="store_true", help="sequence parallel")
    p.add_argument("--mbs", type=int, default=1)
    p.add_argument("--gbs", type=int, default=None, help="global batch (sequences; default: world/(tp*cp*pp)*mbs)")
    p.add_argument("--seq", type=int, default=None)
    p.add_argument("--recompute", default="none", choices=("none", "selective", "full"))
    p.add_argument("--recompute-layers", type=int, default=None)
    p.add_argument("--dist-opt", action="store_true", help="Megatron distributed optimizer")
    p.add_argument("--zero", type=int, default=0, choices=(0, 1, 2, 3), help="DeepSpeed ZeRO stage")
    p.add_argument("--no-flash", action="store_true", help="unfused attention (keeps the s x s scores)")
    p.add_argument("--first-stage-layers", type=int, default=None, help="layers on pipeline stage 0 (uneven)")
    p.add_argument("--last-stage-layers", type=int, default=None, help="layers on the last stage (uneven)")
    p.add_argument("--dtype", default=None, choices=("bf16", "fp16", "fp8"), help="training dtype (default bf16)")
    _plan_switch_args(p)


def _plan_from_args(args, model):
    import dataclasses

    from sim.analysis.perfllm import _apply_simumax_strategy, _check_plan, load_strategy
    from workload_gen.plan import ParallelPlan
    if args.plan:
        # PerfLLM strategy files also carry selective-recompute components and mem_factor
        notes: list[str] = []
        plan, opts, where, raw = load_strategy(args.plan, notes)
        if raw:   # SimuMax keys that need the model (enable_dropout, recompute_layer_num above a chunk)
            args.file_model, plan = _apply_simumax_strategy(model, plan, raw, where, notes)
        for note in notes:
            print(f"clustersim: warning: {note}", file=sys.stderr)
        args.file_mem_options = opts
        over = _switch_fields(args)
        if args.dtype:
            over["dtype"] = args.dtype
        plan = dataclasses.replace(plan, **over)
        _check_plan(model, plan, where, bool(raw))   # names the file and the user's key
        return plan
    # `is None`, not `or`: a 0 the user typed must reach validate_plan, not turn into the default
    world = args.world_size if args.world_size is not None else args.tp * args.cp * args.pp
    mp = args.tp * args.cp * args.pp
    dp = max(1, world // mp) if mp > 0 else 1   # tp/cp/pp <= 0: validate_plan names the field
    return ParallelPlan(world_size=world, tp=args.tp, pp=args.pp, vpp=args.vpp, cp=args.cp, ep=args.ep,
                        etp=args.etp, sequence_parallel=args.sp, micro_batch_size=args.mbs,
                        global_batch_size=args.gbs if args.gbs is not None else args.mbs * dp,
                        seq_length=args.seq if args.seq is not None else model.seq_length,
                        recompute=args.recompute, recompute_num_layers=args.recompute_layers,
                        distributed_optimizer=args.dist_opt, zero_stage=args.zero,
                        framework="deepspeed" if args.zero else "megatron", flash_attention=not args.no_flash,
                        num_layers_first_stage=args.first_stage_layers, num_layers_last_stage=args.last_stage_layers,
                        dtype=args.dtype or "bf16", **_switch_fields(args))


def _write_json(path: str, obj) -> None:
    from sim.outpath import atomic_write
    atomic_write(path, (json.dumps(obj, indent=1, default=str) + "\n").encode())


def cmd_memory(args) -> int:
    from sim.analysis.memory import MemoryOptions, analyze_memory
    from sim.analysis.perfllm import load_model_any, load_system
    from workload_gen.plan_validation import validate_plan
    model = load_model_any(args.model)
    plan = _plan_from_args(args, model)
    model = getattr(args, "file_model", model)
    validate_plan(model, plan)
    if args.json:
        from sim.outpath import check_writable
        check_writable(args.json)
    hw, _ = load_system(args.gpu, plan.dtype, db=_db_from_args(args))
    sel = tuple(x.strip() for x in args.selective.split(",") if x.strip())
    bad = [x for x in sel if x not in ("attn", "mlp", "norm")]
    if bad:
        raise SimError(f"--selective: unknown component {bad[0]!r} (use attn, mlp, norm)")
    file_opts = getattr(args, "file_mem_options", None)
    mem_factor = file_opts.mem_factor if file_opts is not None else None
    if file_opts is not None and args.selective == "attn":
        sel = file_opts.selective
    workload = None
    if not args.opwalk:
        try:
            from workload_gen import generate
            workload = generate(model, plan)
        except ImportError:
            pass  # the layer units (search accounting) give the same bytes
    rep = analyze_memory(model, plan, workload, options=MemoryOptions(selective=sel or ("attn",),
                                                                      mem_factor=mem_factor))
    print(f"{model.name}: tp={plan.tp} sp={plan.sequence_parallel} pp={plan.pp} vpp={plan.vpp} cp={plan.cp} "
          f"ep={plan.ep} dp={plan.dp} mbs={plan.micro_batch_size} m={plan.num_microbatches} "
          f"recompute={plan.recompute} flash={plan.flash_attention} dist_opt={plan.distributed_optimizer} "
          f"zero={plan.zero_stage}   (GiB per GPU; activations from {rep.source})")
    hdr = (f"{'stage':>5} {'weights':>8} {'grads':>8} {'optim':>8} {'act/mb':>8} {'inflight':>8} "
           f"{'act_peak':>8} {'fwd_pk':>8} {'bwd_pk':>8} {'buffers':>8} {'peak':>8} {'reserved':>8}  peak path")
    print(hdr)
    for s in rep.stages:
        ms = s.model_states
        print(f"{s.stage:>5} {ms.weight_bytes / GiB:8.2f} {ms.grad_bytes / GiB:8.2f} {ms.optimizer_bytes / GiB:8.2f} "
              f"{s.activation_per_microbatch_bytes / GiB:8.2f} {s.inflight_microbatches:8.2f} "
              f"{s.peak_activation_bytes / GiB:8.2f} {s.fwd_peak_allocated_bytes / GiB:8.2f} "
              f"{s.bwd_peak_allocated_bytes / GiB:8.2f} {sum(s.comm_buffer_bytes.values()) / GiB:8.2f} "
              f"{s.peak_allocated_bytes / GiB:8.2f} {s.reserved_bytes / GiB:8.2f}  {s.peak_path}")
    peak = rep.peak
    fits = peak.reserved_bytes + rep.cuda_context_bytes <= hw.hbm_bytes
    print(f"peak: {peak.reserved_bytes / GiB:.2f} GiB reserved ({peak.peak_allocated_bytes / GiB:.2f} GiB allocated) "
          f"+ {rep.cuda_context_bytes / GiB:.2f} GiB CUDA context at {peak.peak_path}; "
          f"{hw.name} has {hw.hbm_bytes / GiB:.2f} GiB -> {'fits' if fits else 'DOES NOT FIT'}")
    if args.json:
        _write_json(args.json, rep.to_dict())
    return 0


def _ints(text: str | None, flag: str):
    if text is None:
        return None
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise SimError(f"--{flag}: expected a comma list of integers (got {text!r})") from None
    if not vals or any(v < 1 for v in vals):
        raise SimError(f"--{flag}: expected positive integers (got {text!r})")
    return vals


def _words(text: str, flag: str, allowed: tuple[str, ...]) -> tuple[str, ...]:
    vals = tuple(x.strip() for x in text.split(",") if x.strip())
    bad = [v for v in vals if v not in allowed]
    if bad or not vals:
        raise SimError(f"--{flag}: unknown value {bad[0] if bad else text!r} (use {', '.join(allowed)})")
    return vals


def cmd_search(args) -> int:
    from sim.analysis import objectives as obj
    from sim.analysis.perfllm import load_model_any, load_system
    from sim.analysis.search import (
        SearchSpace,
        plan_label,
        search,
        write_pareto_png,
        write_ranked_csv,
        write_rejections_csv,
    )
    model = load_model_any(args.model)
    worlds = tuple(dict.fromkeys(_ints(str(args.world_size), "world-size")))
    if args.gbs < 1:
        raise SimError("--world-size and --gbs must be positive")
    if not args.gmi_error >= 0:  # a negative headroom would call plans larger than the device feasible
        raise SimError(f"--gmi-error: expected GiB >= 0 (got {args.gmi_error:g})")
    if args.top_k < 0 or args.workers < 1:
        raise SimError(f"--top-k must be >= 0 and --workers >= 1 (got {args.top_k}, {args.workers})")
    from sim.outpath import check_writable
    check_writable(args.out, directory=True)  # before the search, not after
    db = _db_from_args(args)
    hw, extra = load_system(args.gpu, args.dtype, db=db)
    from sim.inputs import load_net_calibration
    cal = load_net_calibration(args.net_calibration)
    fields = _switch_fields(args)
    if "grad_reduce_dtype" in fields:      # the same for every plan: reject it now, not as 0 feasible plans
        from workload_gen.plan_validation import validate_grad_reduce_dtype
        validate_grad_reduce_dtype(args.dtype, fields["grad_reduce_dtype"])
    if not fields.get("overlap_grad_reduce", True):
        fields.setdefault("overlap_param_gather", False)    # megatron-core needs grad overlap for it
    sp = tuple({"on": True, "off": False}[v] for v in _words(args.sp, "sp", ("on", "off")))
    etp = _ints(args.etp, "etp")
    space = SearchSpace(tp=_ints(args.tp, "tp"), pp=_ints(args.pp, "pp"), vpp=_ints(args.vpp, "vpp"),
                        cp=_ints(args.cp, "cp"), ep=_ints(args.ep, "ep"), etp=etp or (None,),
                        sequence_parallel=sp, micro_batch_size=_ints(args.mbs, "mbs") or (1, 2, 4),
                        recompute=_words(args.recompute, "recompute", ("none", "selective", "full")),
                        optimizer=_words(args.optimizer, "optimizer",
                                         ("none", "distributed", "zero1", "zero2", "zero3")),
                        plan_fields=tuple(sorted(fields.items())))
    from sim.train_cost import extra_gpus_of
    gpu = extra.get("gpu", args.gpu)
    tables, objective_notes = obj.load_objective_tables(      # bad tables fail before the search
        gpu, args.gbs * (args.seq or model.seq_length), args.objective, args.price_file, args.power_file,
        extra_gpus_of(args.gpu_file))
    results = []
    for world in worlds:
        topology = None
        if args.topology and args.topology != "none":
            # the same builder as `clustersim run`: templates get the GPU's datasheet NVLink rate
            from sim.inputs import make_topology
            topology = make_topology(args.topology, gpus=world, gpu_type=gpu, gpus_per_server=hw.gpus_per_server)
        r = search(model, world, args.gbs, gpu=gpu, hw=hw, seq_length=args.seq,
                   space=space, gmi_error_GiB=args.gmi_error, use_reserved_memory=not args.allocated,
                   dtype=args.dtype, topology=topology, top_k=args.top_k, confirm=not args.no_confirm,
                   workers=args.workers, progress=sys.stderr.isatty(), db=db, net_calibration=cal,
                   flash_attention=not args.no_flash)
        counts = obj.counts_for(topology, world, hw.gpus_per_server)
        for c in r.candidates:
            if c.feasible:
                obj.price_candidate(c, tables, counts)
        results.append(r)
    res = obj.merge_results(results, args.objective)
    res.notes.extend(n for n in objective_notes if n not in res.notes)
    try:
        from mpi4py import MPI  # noqa: F401 - only rank 0 writes under mpiexec
        if "OMPI_COMM_WORLD_SIZE" in os.environ and MPI.COMM_WORLD.Get_rank() != 0:
            return 0
    except ImportError:
        pass
    try:
        os.makedirs(args.out, exist_ok=True)
    except OSError as exc:
        raise SimError(f"{args.out}: cannot create the output directory ({exc.strerror})") from None
    write_ranked_csv(res, os.path.join(args.out, "ranked.csv"))
    write_rejections_csv(res, os.path.join(args.out, "rejected_families.csv"))
    gpus_text = ",".join(map(str, worlds))
    write_pareto_png(res, os.path.join(args.out, "pareto.png"),
                     title=f"{model.name} on {gpus_text} x {hw.name}, gbs {args.gbs}")
    why = obj.why_lines(res.candidates, plan_label)
    summary = {"model": model.name, "world_size": worlds[0] if len(worlds) == 1 else list(worlds),
               "global_batch_size": args.gbs, "objective": args.objective,
               "usd_per_gpu_hour": tables.usd_per_gpu_hour, "price_source": tables.price_source,
               "winners": obj.winners_dict(res.candidates, plan_label), "why": why,
               "evaluated": res.evaluated, "feasible": len(res.ranked), "elapsed_s": res.elapsed_s,
               "memory_budget_bytes": res.memory_budget_bytes,
               "screen_method": res.screen_method, "confirm_method": res.confirm_method, "notes": res.notes,
               "best": plan_label(res.best.plan) if res.best else None,
               "rejected_families": res.rejected_families}
    _write_json(os.path.join(args.out, "summary.json"), summary)
    from sim.html.search_report import search_html
    from sim.outpath import atomic_write
    atomic_write(os.path.join(args.out, "report.html"),
                 search_html(res, summary, f"{model.name} on {gpus_text} x {hw.name}, gbs {args.gbs}").encode())
    print(f"evaluated {res.evaluated} plans in {res.elapsed_s:.1f} s; {len(res.ranked)} fit in "
          f"{res.memory_budget_bytes / GiB:.1f} GiB ({hw.hbm_bytes / GiB:.1f} GiB - CUDA context - "
          f"{args.gmi_error:g} GiB headroom)")
    if res.ranked:
        print(f"ranked by {args.objective}" + (f" over {gpus_text} GPUs" if len(worlds) > 1 else "")
              + ("; $ and kWh per million tokens failure-free" if args.objective != "time" else ""))
    for i, c in enumerate(res.ranked[:10], 1):
        flow = "" if c.flow_iteration_time_s != c.flow_iteration_time_s else f" flow {c.flow_iteration_time_s:.3f} s"
        gpus = f"{c.plan.world_size:>5} GPU " if len(worlds) > 1 else ""
        per_tok = "".join(f"  {fmt.format(v)}" for fmt, v in (("${:.3f}/Mtok", c.usd_per_million_tokens),
                                                              ("{:.3f} kWh/Mtok", c.kwh_per_million_tokens))
                          if v == v and args.objective != "time")
        print(f"{i:>3}. {gpus}{plan_label(c.plan):<60} {c.iteration_time_s:8.3f} s  MFU {c.mfu_6nd_with_attn:6.1%}  "
              f"peak {c.peak_mem_with_reserved_bytes / GiB:6.1f} GiB{flow}{per_tok}")
    if not res.ranked:
        print("no plan fits; see rejected_families.csv")
    for line in why:
        print(line)
    for n in res.notes:
        print(f"note: {n}")
    print(f"wrote {args.out}/ranked.csv, rejected_families.csv, pareto.png, summary.json, report.html")
    return 0 if res.ranked else 1
