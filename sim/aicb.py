"""`clustersim aicb`: AICB's workload generator, its defaults and its AIOB kernel timing.

The flags are `clustersim workload`'s (AICB's names included, workload_gen.cli); this command adds what
needs compute_db, which workload_gen does not import:
- AICB's defaults for what the command line leaves out (AICB utils.py, reference/simai_formats.md §7):
  world size 32 (or --nnodes x --nproc_per_node), TP 8 for Megatron (1 for DeepSpeed, which has no TP),
  global batch 1024, micro-batch 1, sequence 4096; model: AICB's `-m 13` when none is given. The TP the
  user gives is always the TP used (AICB's scripts override it for some models; clustersim does not).
- output: the SimAI workload under results/workload/ (AICB's folder) unless --simai / --simai-dir / --out
  / --aicb-csv says otherwise.
- --aiob_enable: the exported SimAI / AICB files carry compute_db kernel times for --gpu_type (H100
  by default) — the same times `clustersim run` uses — instead of the PLACEHOLDER roofline;
  --comp_filepath FILE (implies it): forward kernels AIOB timed take the file's time_gpu_avg, their
  backward kernels compute_db's time scaled by the same measured/compute_db ratio (AIOB times forward
  only), kernels AIOB has no key for keep compute_db's time. A missing or malformed file is an error.
"""

from __future__ import annotations

import sys

AICB_DEFAULTS = {"world_size": 32, "gbs": 1024, "mbs": 1, "seq": 4096}
AICB_TP = {"megatron": 8, "deepseek": 8, "deepspeed": 1}
AICB_OUT = "results/workload"


def register(subparsers) -> None:
    """Add `clustersim aicb` to the clustersim parser."""
    from workload_gen import cli as workload_cli
    p = subparsers.add_parser(
        "aicb", help="AICB-compatible workload generation (AICB defaults, AIOB kernel timing with compute_db)",
        description="Generate a training workload as AICB's scripts do (same flags and defaults) and write "
                    "the SimAI workload file; --aiob_enable times its kernels with compute_db, "
                    "--comp_filepath with an AIOB compute file.")
    workload_cli.add_arguments(p)
    p.set_defaults(func=run)


def _apply_defaults(args) -> None:
    fw = (args.framework or "megatron").lower()
    if args.framework is None:
        args.framework = "megatron"
    has_model = any(getattr(args, k, None) for k in ("model", "model_opt", "aicb_size", "model_file", "plan_file"))
    if not has_model and not args.list_models:
        if getattr(args, "model_name", None):
            pass   # --model_name picks a zoo model (workload_gen.cli._model) or explains
        else:
            args.aicb_size = "13"
    if args.plan_file:
        return   # a plan file states the plan; flags override it, AICB's defaults do not
    nodes = args.nnodes is not None or args.nproc_per_node is not None
    if args.world_size is None and not nodes:
        args.world_size = AICB_DEFAULTS["world_size"]
    if args.tp is None:
        args.tp = AICB_TP.get(fw, 1)
    for k in ("gbs", "mbs", "seq"):
        if getattr(args, k) is None:
            setattr(args, k, AICB_DEFAULTS[k])
    if not (args.simai or args.simai_dir or args.out or args.aicb_csv or args.ops_csv):
        args.simai_dir = AICB_OUT


def kernel_timer(gpu: str, comp_filepath: str | None = None, db=None):
    """kernel_timer(workload) -> (time_of(op) -> s, description), for workload_gen.cli.run."""
    aiob = None
    if comp_filepath:
        from workload_gen.aiob import read_aiob_file
        aiob = read_aiob_file(comp_filepath)   # before generating: a missing file fails at once

    def timer(w):
        from compute_db import open_db
        from sim.simulation import compute_op_times
        database = db if db is not None else open_db()
        spec = database.gpu(gpu)
        times, _ = compute_op_times(w, spec.name, database)
        desc = f"compute_db kernel times for {spec.name}"
        if aiob is not None:
            times, mapped = _aiob_times(w, times, aiob)
            desc = (f"AIOB file {aiob.path} for {mapped} forward kernel kind(s) (their backward scaled by the "
                    f"same ratio), compute_db for {spec.name} elsewhere")
            for key in aiob.unmapped():
                print(f"note: {aiob.path}:{aiob.line_of[key]}: AIOB key {key!r} has no clustersim kernel; "
                      "compute_db times those kernels", file=sys.stderr)
        return (lambda op: times[id(op)]), desc
    return timer


_BWD_SUFFIXES = ("_dgrad", "_wgrad", "_bwd")


def _aiob_times(w, times: dict, aiob) -> tuple[dict, int]:
    """Replace compute_db times by AIOB's: forward kernels by name, backward ones by the forward ratio."""
    measured = aiob.kernel_times()
    ratio: dict[str, float] = {}
    ops = [op for st in w.stages for lst in ([st.iteration_start, st.iteration_end]
                                             + [ch.forward for ch in st.chunks] + [ch.backward for ch in st.chunks])
           for op in lst if not op.is_comm]
    for op in ops:
        if op.variant == "fwd" and op.name in measured and op.name not in ratio:
            db_t = times[id(op)]
            ratio[op.name] = measured[op.name] / db_t if db_t > 0 else 1.0
    out = dict(times)
    for op in ops:
        base = op.name
        if op.variant == "fwd" and base in measured:
            out[id(op)] = measured[base]
            continue
        for suf in _BWD_SUFFIXES:
            if base.endswith(suf) and base[: -len(suf)] in ratio:
                out[id(op)] = times[id(op)] * ratio[base[: -len(suf)]]
                break
    return out, len(ratio)


def run(args) -> int:
    from workload_gen import cli as workload_cli
    _apply_defaults(args)
    timer = None
    if args.aiob_enable or args.comp_filepath:
        from compute_db import open_db
        db = open_db()
        timer = kernel_timer(args.gpu_type or "H100", args.comp_filepath, db=db)
        db.gpu(args.gpu_type or "H100")    # an unknown --gpu_type fails before generating
    elif args.gpu_type:
        args.aicb_notes = list(args.aicb_notes or []) + [
            f"--gpu_type {args.gpu_type}: ignored without --aiob_enable (the file carries PLACEHOLDER times)"]
        args.gpu_type = None
    from sim.chakra import ChakraWriter
    return workload_cli.run(args, kernel_timer=timer, chakra=ChakraWriter)

