"""`clustersim` subcommands owned by compute_db: `measure` and `compute-db {info,lookup,gpus,calibrate,
import-vidur,import-simumax,import-aiob,import-csv,export-csv,build-shipped}`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compute_db.errors import ComputeDBError


def _db_arg(p: argparse.ArgumentParser, required: bool = False, help_: str | None = None) -> None:
    p.add_argument("--db", required=required, metavar="PATH",
                   help=help_ or "compute DB (SQLite); default: the DB shipped with clustersim")


def _gpu_file_arg(p: argparse.ArgumentParser) -> None:
    p.add_argument("--gpu-file", metavar="YAML", help="extra GPU specs (layout of compute_db/data/gpus.yaml)")


def register(subparsers) -> None:
    """Add this package's subcommands to the clustersim parser."""
    m = subparsers.add_parser(
        "measure", help="time every distinct kernel of a workload, or a model's serving kernels (--serving), "
                        "with torch into a compute DB",
        description="Time every distinct compute kernel of a workload (forward and backward) with torch: CUDA "
                    "events on a GPU, wall-clock on CPU; warm-up, repeats, outlier filtering. Rows are written "
                    "to --db with the device identity. --serving: the serving kernels of --model instead "
                    "(token-level kernels over token counts, prefill attention over (chunk, KV length), decode "
                    "attention over (batch, KV length)) for each --tp, on the --grid. Needs the aiob extra (torch).")
    src = m.add_mutually_exclusive_group(required=True)
    src.add_argument("--workload", metavar="JSON", help="native workload JSON (clustersim workload files)")
    src.add_argument("--model", "-m", metavar="NAME|FILE",
                     help="zoo model name or model config file (HF config.json; with --plan, or --serving)")
    m.add_argument("--plan", "--plan-file", dest="plan", metavar="FILE",
                   help="parallel plan file (YAML/JSON), with --model (--plan-file as in `clustersim workload`)")
    _db_arg(m, required=True, help_="compute DB to write (created if missing)")
    m.add_argument("--device", default="auto", help="auto | cpu | cuda[:N] (default auto)")
    m.add_argument("--gpu-name", help="name to file rows under (default: detected GPU table name; CPU: 'CPU')")
    m.add_argument("--warmup", type=int, default=3, help="untimed calls per kernel (default 3)")
    m.add_argument("--repeats", type=int, default=10, help="timed calls per kernel (default 10)")
    m.add_argument("--max-kernels", type=int, default=None, help="measure at most N distinct kernels")
    m.add_argument("--kinds", help="comma-separated kernel kinds to measure (default all)")
    m.add_argument("--fused", action="store_true",
                   help="compile rotary, SwiGLU/GELU, norms, softmax, cross-entropy and router top-k with "
                        "torch.compile into one kernel each, as fused training/serving stacks run them "
                        "(CUDA only; rows filed under source aiob-runner-fused)")
    m.add_argument("--max-gb", type=float, default=None,
                   help="skip kernels needing more memory than this (default 70%% of GPU memory; CPU 2 GB)")
    s = m.add_argument_group("serving kernels (--serving)")
    s.add_argument("--serving", action="store_true",
                   help="measure the serving kernels of --model (the keys `clustersim serve` looks up)")
    s.add_argument("--tp", help="tensor-parallel degrees, comma-separated (default 1): one rank's shards each")
    s.add_argument("--ep", help="expert-parallel degrees of MoE models, comma-separated: 1 or equal to tp "
                                "(default 1; combinations that do not fit are listed and skipped)")
    s.add_argument("--grid", action="append", metavar="AXIS=VALUES",
                   help="grid axis (repeatable): tokens (token-level kernels, LM-head rows), chunk (prefill "
                        "chunk), kv (KV length per request), batch (decode requests); VALUES = comma list of "
                        "integers, lo:hi (2^k and 3*2^k) or lo:hi:pow2. Defaults tokens=1:8192, "
                        "chunk=1:8192:pow2, kv=1:<model context>:pow2, batch=1:256:pow2")
    s.add_argument("--weight-dtype", "--dtype", dest="weight_dtype", default=None,
                   help="bf16 | fp16 | fp8 weights and GEMMs (default bf16), as `clustersim serve`")
    s.add_argument("--kv-dtype", default=None, help="bf16 | fp16 | fp8 KV cache (default: the activation dtype)")
    s.add_argument("--max-model-len", type=int, default=None,
                   help="longest request in tokens: the kv axis' default upper end (default: the model's context)")
    m.set_defaults(func=cmd_measure)

    c = subparsers.add_parser("compute-db", help="kernel timing database: info, lookup, calibrate, import, export")
    sub = c.add_subparsers(dest="compute_db_command", metavar="ACTION")
    c.set_defaults(func=lambda args: (c.print_help(), 2)[1])

    p = sub.add_parser("info", help="GPUs, kernel kinds and row counts in a DB")
    _db_arg(p)
    p.set_defaults(func=cmd_info)

    p = sub.add_parser("gpus", help="list the GPU spec table")
    _gpu_file_arg(p)
    p.set_defaults(func=cmd_gpus)

    p = sub.add_parser("lookup", help="time of one kernel on a GPU, with its provenance")
    _db_arg(p)
    _gpu_file_arg(p)
    p.add_argument("--gpu", required=True)
    p.add_argument("--kind", required=True, help="kernel kind (gemm, flash_attn, rmsnorm, ...)")
    p.add_argument("--variant", default="fwd", help="fwd | dgrad | wgrad | bwd | step (default fwd)")
    p.add_argument("--dtype", default="bf16", help="bf16 | fp16 | fp8 | fp32 (default bf16)")
    p.add_argument("--shape", required=True, help="field=value list, e.g. m=4096,n=4096,k=4096")
    p.add_argument("--causal", action="store_true", help="causal mask (attention)")
    p.set_defaults(func=cmd_lookup)

    p = sub.add_parser("calibrate", help="hold-out error of interpolation + roofline, per op family",
                       description="Leave-one-model-out (default): every model measured on the GPU is held out in "
                                   "turn and its kernels predicted from the rest. --by shape: leave-one-shape-out "
                                   "for GPUs measured on many shapes of few models (e.g. SimuMax's B200 GEMMs).")
    _db_arg(p)
    _gpu_file_arg(p)
    p.add_argument("--gpu", required=True)
    p.add_argument("--by", choices=("model", "shape"), default="model",
                   help="hold out one model (default) or one shape at a time")
    p.add_argument("--min-tokens", type=int, default=None,
                   help="only kernels with at least this many tokens (default 64; --by model only)")
    p.add_argument("--family", action="append",
                   help="restrict to an op family (repeatable), e.g. gemm; with --by shape: kernel kinds "
                        "(default gemm, grouped_gemm)")
    p.set_defaults(func=cmd_calibrate)

    p = sub.add_parser("import-vidur", help="import Vidur profiles: <gpu>/<org>/<model>/{mlp,attention}.csv and "
                                            "network <gpu>_<node>/{all_reduce,send_recv}.csv",
                       description="Import every Vidur profile under DIRECTORY (any depth; Vidur's data/profiling "
                                   "layout works as it is): mlp.csv (token-level kernels), attention.csv (prefill "
                                   "and decode attention, KV-cache save) and the network profiles all_reduce.csv / "
                                   "send_recv.csv (measured collective curves used by `clustersim serve`). The GPU "
                                   "is the a100|h100 folder (or node type such as h100_dgx) in the path. Counts per "
                                   "file kind are printed; every file not imported is listed with the reason.")
    p.add_argument("directory")
    _db_arg(p, required=True, help_="compute DB to write (created if missing)")
    p.add_argument("--shipped-grid", action="store_true",
                   help="mlp.csv: keep only token counts 1, 2, 4 and 2^k, 3*2^k (a log-spaced subset)")
    p.add_argument("--attention-backend", metavar="NAME",
                   help="attention.csv: keep only rows of this attention_backend (default: all, one source each)")
    p.add_argument("--fresh", action="store_true", help="replace the DB instead of adding to it")
    p.set_defaults(func=cmd_import_vidur)

    p = sub.add_parser("import-simumax", help="import SimuMax measured kernel efficiencies "
                                              "(<dir>/<gpu>_kernel_efficiency.csv, <gpu>_system_defaults.json)")
    p.add_argument("directory")
    _db_arg(p, required=True, help_="compute DB to write (created if missing)")
    p.add_argument("--fresh", action="store_true", help="replace the DB instead of adding to it")
    p.set_defaults(func=cmd_import_simumax)

    p = sub.add_parser("build-shipped", help="rebuild the shipped DB from the reference data (../shared)",
                       description="Rebuild compute_db/data/kernels.sqlite from the Vidur profiles and SimuMax "
                                   "efficiencies under --shared (default: the 'shared' folder beside the "
                                   "repository). Deterministic; replaces the output atomically.")
    p.add_argument("--shared", metavar="DIR", help="reference data folder (holds data/vidur_profiling, "
                                                   "data/simumax_efficiency)")
    p.add_argument("--out", metavar="PATH", help="DB to write (default: the shipped compute_db/data/kernels.sqlite)")
    p.set_defaults(func=cmd_build_shipped)

    p = sub.add_parser("import-aiob", help="import an AICB AIOB compute-timing text file (µs)")
    p.add_argument("file")
    _db_arg(p, required=True, help_="compute DB to write (created if missing)")
    p.add_argument("--gpu", required=True, help="GPU the file was measured on (the file does not say)")
    p.add_argument("--model", required=True, help="zoo model name or model config file")
    p.add_argument("--tp", type=int, default=1)
    p.add_argument("--micro-batch", type=int, default=1)
    p.add_argument("--seq-length", type=int, default=None, help="default: the model's seq_length")
    p.add_argument("--dtype", default="bf16")
    _gpu_file_arg(p)
    p.set_defaults(func=cmd_import_aiob)

    p = sub.add_parser("import-csv", help="import rows from a CSV written by export-csv")
    p.add_argument("csv")
    _db_arg(p, required=True, help_="compute DB to write (created if missing)")
    p.set_defaults(func=cmd_import_csv)

    p = sub.add_parser("export-csv", help="write a DB's rows as CSV (seconds)")
    _db_arg(p)
    p.add_argument("--out", "-o", dest="out", required=True, metavar="CSV", help="CSV file to write; - = stdout")
    p.add_argument("--gpu", help="only this GPU's rows")
    p.set_defaults(func=cmd_export_csv)


# ---------------------------------------------------------------------------- handlers

def _open(args):
    from compute_db.db import open_db
    return open_db(getattr(args, "db", None), getattr(args, "gpu_file", None))


def _db_path(args) -> Path:
    from compute_db.db import SHIPPED_DB
    return Path(args.db) if getattr(args, "db", None) else SHIPPED_DB


def cmd_info(args) -> int:
    from compute_db import store
    path = _db_path(args)
    rows = store.summary(path)
    print(f"compute DB {path} (schema {store.SCHEMA_VERSION})")
    if not rows:
        print("  no rows")
        return 0
    print(f"  {'gpu':<14s} {'kind':<22s} {'provenance':<10s} {'rows':>7s}")
    for gpu, kind, prov, n in rows:
        print(f"  {gpu:<14s} {kind:<22s} {prov:<10s} {n:>7d}")
    return 0


def cmd_gpus(args) -> int:
    from compute_db import gpus
    extra = gpus.load_gpu_file(args.gpu_file) if args.gpu_file else None
    print(f"{'gpu':<16s} {'bf16 TF/s':>10s} {'fp8 TF/s':>9s} {'tf32 TF/s':>9s} {'HBM GiB':>7s} {'HBM GB/s':>9s} "
          f"{'NVLink GB/s/dir':>15s} {'NIC Gb/s':>8s}")
    for name in gpus.list_gpus(extra):
        g = gpus.get_gpu(name, extra)
        print(f"{name:<16s} {g.peak_flops['bf16'] / 1e12:>10.1f} {g.peak_flops['fp8'] / 1e12:>9.1f} "
              f"{g.peak_flops['fp32'] / 1e12:>9.1f} {g.hbm_bytes / 2**30:>7.0f} {g.hbm_Bps / 1e9:>9.0f} "
              f"{g.nvlink_Bps / 1e9:>15.0f} {g.nic_Bps * 8 / 1e9:>8.0f}")
    return 0


def _parse_shape(text: str) -> dict[str, int]:
    dims: dict[str, int] = {}
    for item in text.split(","):
        name, eq, value = item.partition("=")
        if not eq:
            raise ComputeDBError(f"--shape: '{item}' is not field=value")
        try:
            dims[name.strip()] = int(value)
        except ValueError:
            raise ComputeDBError(f"--shape: '{item}': value must be an integer") from None
    return dims


def cmd_lookup(args) -> int:
    from compute_db.keys import make_key, work
    db = _open(args)
    key = make_key(args.kind, args.variant, _parse_shape(args.shape), args.dtype, args.causal)
    kt = db.lookup_key(key, args.gpu)
    flops, byts = work(key)
    spec = db.gpu(args.gpu)
    print(f"{key.text()} on {spec.name}: {kt.time_s * 1e6:.2f} us ({kt.source}; {kt.basis})")
    if flops:
        print(f"  {flops / 1e9:.3f} GFLOP -> {flops / kt.time_s / 1e12:.1f} TFLOP/s "
              f"({flops / kt.time_s / spec.peak_flops[key.dtype]:.1%} of {key.dtype} peak); "
              f"{byts / 1e6:.3f} MB HBM traffic -> {byts / kt.time_s / 1e9:.0f} GB/s")
    else:
        print(f"  {byts / 1e6:.3f} MB HBM traffic -> {byts / kt.time_s / 1e9:.0f} GB/s")
    return 0


def cmd_calibrate(args) -> int:
    from compute_db.calibrate import format_table, leave_one_model_out, leave_one_shape_out
    from compute_db.keys import FAMILY
    from workload_gen.workload import COMPUTE_KINDS
    known = sorted(COMPUTE_KINDS) if args.by == "shape" else sorted(set(FAMILY.values()))
    unknown = sorted(set(args.family or ()) - set(known))
    if unknown:
        what = "kernel kind" if args.by == "shape" else "op family"
        raise ComputeDBError(f"--family: unknown {what} {', '.join(unknown)} (known: {', '.join(known)})")
    if args.min_tokens is not None and args.by == "shape":
        raise ComputeDBError("--min-tokens: applies to --by model only (--by shape evaluates every measured shape)")
    min_tokens = 64 if args.min_tokens is None else args.min_tokens
    if min_tokens < 0:
        raise ComputeDBError(f"--min-tokens: must be >= 0, got {min_tokens}")
    db = _open(args)
    name = db.gpu(args.gpu).name
    if args.by == "shape":
        kinds = tuple(args.family) if args.family else ("gemm", "grouped_gemm")
        errors = leave_one_shape_out(db, name, kinds)
        print(format_table(name, errors, 0, title=f"Leave-one-shape-out error on {name} (every measured shape of "
                                                  f"{', '.join(kinds)}; |predicted/measured - 1|)", group="shapes"))
        return 0
    errors = leave_one_model_out(db, name, min_tokens, tuple(args.family) if args.family else None, with_total=True)
    print(format_table(name, errors, min_tokens))
    return 0


def _write(path: str, rows, fresh: bool = False, figures=(), pack: bool = False, collectives=()) -> int:
    """Write rows (and figures, collective rows); pack: token sweeps as compact series (store.pack_series)."""
    from compute_db import store
    if fresh:
        return store.write_fresh(path, rows, figures, pack=pack, collectives=collectives)
    plain, series = store.pack_series(rows) if pack else (list(rows), [])
    return store.write_data(path, plain, series, figures, collectives=collectives)


def cmd_import_vidur(args) -> int:
    from compute_db import importers, store
    store.check_output_path(args.db)
    got = importers.import_vidur_profiles(args.directory,
                                          importers.shipped_token_counts() if args.shipped_grid else None,
                                          args.attention_backend)
    n = _write(args.db, got.rows, args.fresh, pack=True, collectives=got.collectives)
    nc = len(got.collectives)
    gpus = sorted({r.gpu for r in got.rows})
    cgpus = sorted({c.gpu for c in got.collectives})
    text = f"imported {n - nc} Vidur kernel rows ({', '.join(gpus) or '-'})"
    if nc:
        text += f" and {nc} collective points ({', '.join(cgpus)})"
    print(text + f" into {args.db}")
    for name in importers.VIDUR_FILES:
        if not got.files.get(name):
            continue
        files = got.files[name]
        what = "collective points" if name in ("all_reduce.csv", "send_recv.csv") else "kernel rows"
        line = (f"  {name:<15s}{files:>4d} file{'s' if files > 1 else ' '} {got.counts[name]:>7d} {what} "
                f"({', '.join(sorted(got.gpus[name]))})")
        if name == "attention.csv":
            line += ": " + ", ".join(f"{v} {k}" for k, v in sorted(got.parts.items()))
        elif what == "collective points":
            settings = sorted({(c.collective, c.num_workers, c.devices_per_node) for c in got.collectives
                               if (c.collective == "send") == (name == "send_recv.csv")})
            line += ": " + ", ".join(f"{c} over {w} GPUs ({d} per server)" for c, w, d in settings)
        print(line)
    if got.skipped:
        print(f"skipped ({len(got.skipped)}):")
        for s in got.skipped:
            print(f"  {s}")
    return 0


def cmd_import_simumax(args) -> int:
    from compute_db import simumax
    rows, figures = simumax.import_simumax(args.directory)
    n = _write(args.db, rows, args.fresh, figures)
    gpus = sorted({r.gpu for r in rows} | {f.gpu for f in figures})
    print(f"imported {n - len(figures)} SimuMax kernel rows and {len(figures)} HBM-efficiency figures "
          f"({', '.join(gpus)}) into {args.db}")
    return 0


def cmd_build_shipped(args) -> int:
    from compute_db.build import build_shipped
    from compute_db.db import SHIPPED_DB
    shared = Path(args.shared) if args.shared else SHIPPED_DB.parents[2].parent / "shared"
    out = Path(args.out) if args.out else SHIPPED_DB
    s = build_shipped(shared, out)
    print(f"wrote {s.path}: {s.rows} kernel rows ({s.series} token sweeps stored as series, {s.plain_rows} plain rows) "
          f"and {s.figures} figures for {', '.join(s.gpus)}; {s.size_bytes:,} bytes")
    return 0


def _load_model(name: str):
    from workload_gen.errors import WorkloadError
    try:
        if Path(name).is_file():
            from workload_gen.config_io import load_model
            return load_model(name)
        from workload_gen.zoo import get_model
        return get_model(name)
    except WorkloadError as exc:
        raise ComputeDBError(str(exc)) from None


def cmd_import_aiob(args) -> int:
    from compute_db import gpus, importers
    extra = gpus.load_gpu_file(args.gpu_file) if args.gpu_file else None
    gpu = gpus.canonical_name(args.gpu, extra)
    model = _load_model(args.model)
    tp = args.tp
    if tp < 1:
        raise ComputeDBError(f"--tp: must be a positive integer, got {tp}")
    for what, n in (("num_attention_heads", model.num_attention_heads), ("num_kv_heads", model.kv_heads),
                    ("ffn_hidden_size", model.ffn_hidden_size)):
        if n % tp:   # Megatron shards these evenly over TP; other shapes would not match the workload's kernels
            raise ComputeDBError(f"--tp: must divide the model's {what} (got tp={tp}, {what}={n})")
    for flag, v in (("--micro-batch", args.micro_batch), ("--seq-length", args.seq_length)):
        if v is not None and v < 1:
            raise ComputeDBError(f"{flag}: must be a positive integer, got {v}")
    rows, skipped = importers.import_aiob(args.file, gpu, model, args.tp, args.micro_batch, args.seq_length,
                                          args.dtype)
    if not rows:   # an import of nothing is an error, not a success that changes nothing
        why = f"every kernel's shape is undetermined: {', '.join(skipped)}" if skipped else "the file lists no kernel"
        raise ComputeDBError(f"{args.file}: no AIOB kernel rows to import ({why[:200]})")
    n = _write(args.db, rows)
    print(f"imported {n} AIOB kernel rows for {gpu} into {args.db}")
    if skipped:
        print(f"skipped (shape not determined by the file): {', '.join(skipped)}")
    return 0


def cmd_import_csv(args) -> int:
    from compute_db import store
    rows = list(store.iter_csv(args.csv))
    if not rows:   # an import of nothing is an error, not a success that changes nothing
        raise ComputeDBError(f"{args.csv}: no data rows to import (only a header)")
    n = store.write_rows(args.db, rows)
    print(f"imported {n} rows from {args.csv} into {args.db}")
    return 0


def cmd_export_csv(args) -> int:
    from compute_db import store
    path, gpu = _db_path(args), args.gpu
    if gpu is not None and gpu not in store.gpus_in(path):
        from compute_db.gpus import canonical_name
        try:   # an alias such as A100 -> A100-80GB, as lookup accepts
            gpu = canonical_name(gpu)
        except ComputeDBError:
            pass
    n = store.export_csv(path, args.out, gpu)
    print(f"wrote {n} rows to {'stdout' if args.out == '-' else args.out}", file=sys.stderr if args.out == "-" else sys.stdout)
    return 0


def _workload_from_args(args):
    from workload_gen.errors import WorkloadError
    try:
        if args.workload:
            from workload_gen.native_io import load_workload
            return load_workload(args.workload)
        if not args.plan:
            raise ComputeDBError("--model needs --plan FILE")
        from workload_gen import generate
        from workload_gen.config_io import load_plan
        model = _load_model(args.model)
        return generate(model, load_plan(args.plan, model=model))
    except WorkloadError as exc:
        raise ComputeDBError(str(exc)) from None
    except ImportError as exc:
        raise ComputeDBError(f"workload generator not available in this installation ({exc})") from None


PROGRESS_EVERY = 50      # kernels between progress lines when stderr is not a terminal
_SERVING_FLAGS = (("tp", "--tp"), ("ep", "--ep"), ("grid", "--grid"), ("weight_dtype", "--weight-dtype"),
                  ("kv_dtype", "--kv-dtype"), ("max_model_len", "--max-model-len"))


def _measure_common(args):
    """Checks shared by both measure modes; returns the wanted kernel kinds (None: all)."""
    from compute_db import store
    if args.max_kernels is not None and args.max_kernels < 1:
        raise ComputeDBError(f"--max-kernels: must be >= 1, got {args.max_kernels}")
    if args.max_gb is not None and not args.max_gb > 0:
        raise ComputeDBError(f"--max-gb: must be > 0, got {args.max_gb}")
    wanted = None
    if args.kinds:
        from workload_gen.workload import COMPUTE_KINDS
        wanted = {k.strip() for k in args.kinds.split(",") if k.strip()}
        unknown = sorted(wanted - set(COMPUTE_KINDS))
        if unknown or not wanted:
            raise ComputeDBError(f"--kinds: unknown kernel kind(s) {', '.join(unknown) or repr(args.kinds)} "
                                 f"(known: {', '.join(COMPUTE_KINDS)})")
    # check --db before minutes of measuring: an existing file must be a compute DB, a new one writable
    if Path(args.db).exists():
        store.connect_ro(args.db).close()
    else:
        store.check_output_path(args.db)
    return wanted


def _int_list(text: str | None, flag: str, default: tuple[int, ...]) -> tuple[int, ...]:
    if text is None:
        return default
    out = []
    for item in text.split(","):
        try:
            v = int(item)
        except ValueError:
            raise ComputeDBError(f"{flag}: {item.strip()!r} is not an integer (expected e.g. 1,2,4)") from None
        if v < 1:
            raise ComputeDBError(f"{flag}: values must be >= 1, got {v}")
        out.append(v)
    return tuple(dict.fromkeys(out))


def cmd_measure_serving(args) -> int:
    """`measure --serving`: the serving kernels of --model for each --tp (and --ep) on the --grid."""
    from compute_db import measure, serving, store
    from workload_gen.errors import WorkloadError
    if args.workload or args.plan:
        raise ComputeDBError(f"{'--workload' if args.workload else '--plan'}: not used with --serving "
                             "(give --model and --tp)")
    measure.require_torch()
    wanted = _measure_common(args)
    tps = _int_list(args.tp, "--tp", (1,))
    eps = _int_list(args.ep, "--ep", (1,))
    if args.max_model_len is not None and args.max_model_len < 1:
        raise ComputeDBError(f"--max-model-len: must be >= 1, got {args.max_model_len}")
    model = _load_model(args.model)
    grid = serving.parse_grid(args.grid, args.max_model_len or model.seq_length)
    from workload_gen import inference as inf
    plans: list[tuple[str, dict[str, list]]] = []
    seen: set = set()
    for tp in tps:
        for ep in eps:
            try:
                spec = inf.inference_spec(model, tp=tp, ep=ep, weight_dtype=args.weight_dtype or "bf16",
                                          kv_dtype=args.kv_dtype)
            except WorkloadError as exc:
                if len(tps) * len(eps) == 1:
                    raise ComputeDBError(str(exc)) from None
                print(f"measure: skipping tp={tp} ep={ep}: {exc}", file=sys.stderr)
                continue
            parts = serving.serving_key_parts(spec, grid)
            for name in parts:   # a key shared with an earlier degree is measured once
                parts[name] = [k for k in parts[name] if k not in seen and (wanted is None or k.kind in wanted)]
                seen.update(parts[name])
            plans.append((f"tp={tp}" + (f" ep={ep}" if ep > 1 else ""), parts))
    if not plans:
        raise ComputeDBError(f"--tp/--ep: no combination fits {model.name}")
    total = sum(len(v) for _, parts in plans for v in parts.values())
    if total == 0:
        raise ComputeDBError(f"--kinds: the serving kernels of {model.name} have no kernels of kind(s) "
                             f"{', '.join(sorted(wanted or ()))}")
    budget = args.max_kernels
    goal = min(total, budget or total)
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=goal, desc="measuring serving kernels", unit="kernel")
    done = [0]

    def progress(_key) -> None:
        done[0] += 1
        if bar is not None:
            bar.update(1)
        elif done[0] % PROGRESS_EVERY == 0:      # a log file still shows the run advancing
            print(f"measure: {done[0]}/{goal} kernels", file=sys.stderr, flush=True)
    measured = n_rows = 0
    gpu = "-"
    all_skipped: list[str] = []
    for label, parts in plans:
        keys = [k for v in parts.values() for k in v]
        if budget is not None:
            keys = keys[:max(0, budget - measured)]
        if not keys:
            continue
        print(f"measure: {model.name} {label}: " + ", ".join(f"{len(v)} {n}" for n, v in parts.items())
              + f" kernels ({len(keys)} to measure)", file=sys.stderr)
        rows, skipped = measure.measure_keys(
            keys, device=args.device, warmup=args.warmup, repeats=args.repeats, gpu_name=args.gpu_name,
            max_bytes=None if args.max_gb is None else args.max_gb * 1e9, progress=progress, fused=args.fused)
        # written per degree: an interrupted run keeps what it measured
        plain, series = store.pack_series(rows)
        store.write_data(args.db, plain, series)
        measured += len(keys)
        n_rows += len(rows)
        gpu = rows[0].gpu if rows else gpu
        all_skipped += skipped
        print(f"measure: {label}: {len(rows)} rows written to {args.db}", file=sys.stderr)
    if bar is not None:
        bar.close()
    print(f"measured {n_rows} of {measured} serving kernels of {model.name} "
          f"({', '.join(label for label, _ in plans)}) on {gpu} into {args.db}")
    for line in all_skipped:
        print(f"  skipped {line}")
    return 0


def cmd_measure(args) -> int:
    from compute_db import measure, store
    if args.serving:
        return cmd_measure_serving(args)
    given = [flag for dest, flag in _SERVING_FLAGS if getattr(args, dest, None) is not None]
    if given:
        raise ComputeDBError(f"{given[0]}: applies to --serving only")
    measure.require_torch()  # fail fast with the install hint
    wanted = _measure_common(args)
    workload = _workload_from_args(args)
    keys = measure.distinct_keys(measure.workload_ops(workload))
    if wanted is not None:
        keys = [k for k in keys if k.kind in wanted]
        if not keys:
            raise ComputeDBError(f"--kinds: the workload has no kernels of kind(s) {', '.join(sorted(wanted))}")
    if args.max_kernels is not None:
        keys = keys[: args.max_kernels]
    bar = None
    if sys.stderr.isatty():
        from tqdm import tqdm
        bar = tqdm(total=len(keys), desc="measuring kernels", unit="kernel")
    rows, skipped = measure.measure_keys(
        keys, device=args.device, warmup=args.warmup, repeats=args.repeats, gpu_name=args.gpu_name,
        max_bytes=None if args.max_gb is None else args.max_gb * 1e9,
        progress=(lambda _k: bar.update(1)) if bar is not None else None, fused=args.fused)
    if bar is not None:
        bar.close()
    n = store.write_rows(args.db, rows)
    gpu = rows[0].gpu if rows else "-"
    print(f"measured {n} of {len(keys)} distinct kernels on {gpu} into {args.db}")
    for line in skipped:
        print(f"  skipped {line}")
    return 0
