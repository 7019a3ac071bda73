"""`clustersim serve-search`: the cheapest serving deployments that meet latency SLOs (sim.serve.search).

    clustersim serve-search -m llama3-8b --gpu H100 --gpus 2 --tp 1,2 --scheduler sarathi,vllm --requests 500 -o DIR

List flags take comma-separated values; every combination is a configuration. Outputs in DIR (written
atomically): results.csv, pruned.csv, pareto.png, summary.json, summary.txt; finished probes in the
cache DIR.probes (or --probe-cache) so that an interrupted or repeated search recomputes nothing.
"""

from __future__ import annotations

import sys

from sim.commands import add_calibration_args
from sim.errors import SimError
from sim.serve.cli import add_length_args
from sim.serve.plan import ROUTERS, SCHEDULERS

# A fixed request count lets a large deployment clear the whole stream as one burst whatever the rate (no
# capacity found); a fixed arrival window loads every probe for the same time (docs/serve_search.md).
DEFAULT_DURATION_S = 60.0
DEFAULT_REQUEST_CAP = 100_000

# fixed ServingPlan flags (one value for the whole search): (dest, flags, type, help)
_FIXED_PLAN_FLAGS = (
    ("router", ("--router",), str, f"global scheduler: {', '.join(ROUTERS)} (default round_robin)"),
    ("max_tokens_per_iteration", ("--max-tokens-per-iteration",), int,
     "vLLM/LightLLM token budget per iteration (default 4096, raised to max_model_len for whole prompts)"),
    ("block_size", ("--block-size",), int, "tokens per KV-cache block (default 16)"),
    ("memory_margin_fraction", ("--memory-margin",), float, "fraction of GPU memory kept free (default 0.1)"),
    ("max_model_len", ("--max-model-len",), int, "longest request in tokens (default: the model's context length)"),
    ("weight_dtype", ("--weight-dtype", "--dtype"), str, "bf16 | fp16 | fp8 weights and GEMMs (default bf16)"),
    ("kv_dtype", ("--kv-dtype",), str, "bf16 | fp16 | fp8 KV cache (default: the activation dtype)"),
)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve-search", help="search serving deployments: capacity under SLOs, ranked by QPS per dollar",
        description="For every deployment of the space (GPU, TP, PP, replicas, scheduler, chunk size, batch cap) "
                    "that fits, find its capacity (highest Poisson rate meeting the SLOs, by bisection on full "
                    "serving simulations) and rank by QPS per dollar. Example: clustersim serve-search -m llama3-8b "
                    "--gpu H100 --gpus 2 --tp 1,2 --scheduler sarathi,vllm --requests 500 -o DIR")
    m = p.add_argument_group("model and cluster")
    m.add_argument("--model", "-m", required=True, help="zoo name (e.g. llama3-8b) or a HF config.json / YAML")
    m.add_argument("--gpu", default="H100", help="GPU type(s), comma-separated (default H100)")
    m.add_argument("--gpus", "-g", type=int, help="GPU budget: a deployment uses at most this many GPUs")
    m.add_argument("--topology", "--fabric", "-t", dest="fabric",
                   help="topology template[:key=value,...] or a SimAI topology file (default: Spectrum-X, whole "
                        "8-GPU servers per deployment)")
    s = p.add_argument_group("space (comma-separated lists)")
    s.add_argument("--tp", default="1", help="tensor-parallel degrees (default 1)")
    s.add_argument("--pp", default="1", help="pipeline stages (default 1)")
    s.add_argument("--replicas", "-r", help="replica counts (default: as many as --gpus allows)")
    s.add_argument("--scheduler", "-s", default="sarathi", help=f"schedulers: {', '.join(SCHEDULERS)} (default sarathi)")
    s.add_argument("--chunk-size", default="512", help="Sarathi-Serve chunk sizes (sarathi only; default 512)")
    s.add_argument("--batch-cap", "--max-batch-size", dest="batch_cap", default="128",
                   help="requests per batch (default 128)")
    for dest, flags, typ, hlp in _FIXED_PLAN_FLAGS:
        s.add_argument(*flags, dest=dest, type=typ, default=None, help=hlp)
    s.add_argument("--disagg", default="no",
                   help="no | yes | no,yes: colocated and/or prefill/decode disaggregated deployments (default no)")
    s.add_argument("--disagg-splits",
                   help="disaggregated: prefill:decode replica counts, e.g. 1:3,2:2 (default: every split of the "
                        "replicas the budget allows)")
    s.add_argument("--kv-transfer", choices=("layerwise", "whole"), default="layerwise",
                   help="disaggregated: KV cache streamed per layer during the prefill, or sent whole after it "
                        "(default layerwise)")
    r = p.add_argument_group("requests (the rate is what the search varies)")
    r.add_argument("--requests", "-n", dest="num_requests", type=int,
                   help="requests per probe (with --duration: a cap; default: arrivals during 60 s, at most 100,000)")
    r.add_argument("--duration", dest="duration_s", type=float,
                   help="seconds of arrivals per probe: every probe loads the deployment for the same time "
                        "(default 60 when --requests is not given)")
    r.add_argument("--arrival", choices=("poisson", "gamma"), default="poisson", help="arrival process (default poisson)")
    r.add_argument("--cv", type=float, help="coefficient of variation of gamma inter-arrival times")
    add_length_args(r, trace_help="lengths from a trace CSV (num_prefill_tokens,num_decode_tokens) or chat | "
                                  "summarization | code")
    r.add_argument("--seed", type=int, default=0, help="seed of arrivals and lengths, the same at every rate (default 0)")
    c = p.add_argument_group("cost model")
    c.add_argument("--network", "-N", choices=("analytical", "flow"), default="analytical",
                   help="netsim backend for collective times (default analytical)")
    c.add_argument("--host", choices=("none", "launch-gaps", "eager"), default="launch-gaps",
                   help="CPU side of the engine (default launch-gaps)")
    c.add_argument("--cpu-per-iteration-ms", type=float, default=0.0, help="CPU time between iterations, ms")
    add_calibration_args(p)
    c.add_argument("--price-file", help="$/GPU-hour table YAML replacing the shipped sim/data/gpu_prices.yaml")
    o = p.add_argument_group("search and output")
    o.add_argument("--slo", action="append",
                   help="SLO STAT:METRIC<=LIMIT[s|ms] (repeatable), STAT p50|p90|p99|mean, METRIC ttft|tbt|tpot|e2e|"
                        "scheduling_delay; default p99:scheduling_delay<=5 (Vidur)")
    o.add_argument("--tolerance", type=float, default=0.025,
                   help="bisection stops when upper - lower <= tolerance x lower (default 0.025)")
    o.add_argument("--pareto-latency", default="p90:ttft",
                   help="latency of the Pareto plot, STAT:METRIC (default p90:ttft)")
    o.add_argument("--jobs", "-j", type=int, default=1, help="local worker processes without MPI (default 1)")
    o.add_argument("--probe-cache", help="directory of finished probes (default: DIR.probes beside -o DIR)")
    o.add_argument("--out", "-o", default="serve-search-out", help="results directory (default %(default)s)")
    o.add_argument("--top", type=int, default=10, help="rows of the printed table (default 10)")
    o.add_argument("--dry-run", action="store_true",
                   help="enumerate and prune only: print the configurations that would be searched, write nothing")
    o.add_argument("--quiet", "-q", action="store_true", help="no progress bar")
    p.set_defaults(func=cmd_serve_search)


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    vals = []
    for part in str(text).split(","):
        part = part.strip()
        try:
            v = int(part)
        except ValueError:
            raise SimError(f"{flag} '{text}': expected comma-separated positive integers") from None
        if v < 1:
            raise SimError(f"{flag} '{text}': values must be >= 1 (got {v})")
        vals.append(v)
    return tuple(dict.fromkeys(vals))


def _splits(text: str) -> tuple[tuple[int, int], ...]:
    out = []
    for part in str(text).split(","):
        p, sep, d = part.strip().partition(":")
        try:
            pair = (int(p), int(d))
        except ValueError:
            pair = (0, 0)
        if not sep or min(pair) < 1:
            raise SimError(f"--disagg-splits '{text}': expected PREFILL:DECODE replica counts >= 1, e.g. 1:3,2:2")
        out.append(pair)
    return tuple(dict.fromkeys(out))


def _str_list(text: str, flag: str, known=None) -> tuple[str, ...]:
    vals = tuple(dict.fromkeys(v.strip() for v in str(text).split(",") if v.strip()))
    if not vals:
        raise SimError(f"{flag}: no values")
    for v in vals:
        if known is not None and v not in known:
            raise SimError(f"{flag}: unknown value '{v}' (known: {', '.join(known)})")
    return vals


def _request_config(args):
    from dataclasses import replace

    from workload_gen.requests import RequestConfig, make_requests
    lengths = args.lengths
    if lengths is None and args.trace:
        lengths = "trace"
    n, dur = args.num_requests, args.duration_s
    if n is None and dur is None:
        n, dur = DEFAULT_REQUEST_CAP, DEFAULT_DURATION_S
    kw = {"num_requests": n, "duration_s": dur, "arrival": args.arrival, "lengths": lengths,
          "trace": args.trace, "seed": args.seed}
    for name in ("cv", "prefill_tokens", "decode_tokens", "min_tokens", "max_tokens", "pd_ratio", "prefill_scale",
                 "decode_scale"):
        v = getattr(args, name)
        if v is not None:
            kw[name] = v
    if args.duration_s is not None and not (0 < args.duration_s < float("inf")):
        raise SimError(f"--duration: must be a number > 0 (got {args.duration_s})")
    cfg = RequestConfig(**kw)
    make_requests(replace(cfg, num_requests=8, duration_s=None))     # a bad field is an error now, not per probe
    return cfg


def cmd_serve_search(args) -> int:
    from pathlib import Path

    from sim.inputs import resolve_model
    from sim.mpi import mpi_comm
    from sim.pricing import load_price_table
    from sim.serve.capacity import METRICS, STATS, parse_slos
    from sim.serve.search import ProbeSetup, ServeSearchSpace, serve_search
    from sim.serve.search_outputs import SEARCH_FILES, format_table, write_outputs
    slos = parse_slos(args.slo)
    if not (0 < args.tolerance < 1):
        raise SimError(f"--tolerance: must be in (0, 1) (got {args.tolerance})")
    stat, _, metric = args.pareto_latency.partition(":")
    if stat not in STATS or metric not in METRICS:
        raise SimError(f"--pareto-latency '{args.pareto_latency}': expected STAT:METRIC, STAT in {'|'.join(STATS)}, "
                       f"METRIC in {'|'.join(METRICS)}")
    if args.jobs < 1:
        raise SimError(f"--jobs: must be >= 1 (got {args.jobs})")
    if args.cpu_per_iteration_ms is None or not (0 <= args.cpu_per_iteration_ms < float("inf")):
        raise SimError(f"--cpu-per-iteration-ms: must be a finite number >= 0 (got {args.cpu_per_iteration_ms})")
    fixed = tuple((dest, getattr(args, dest)) for dest, *_ in _FIXED_PLAN_FLAGS if getattr(args, dest) is not None)
    space = ServeSearchSpace(
        gpus=_str_list(args.gpu, "--gpu"), tp=_int_list(args.tp, "--tp"), pp=_int_list(args.pp, "--pp"),
        replicas=_int_list(args.replicas, "--replicas") if args.replicas else None,
        schedulers=_str_list(args.scheduler, "--scheduler", SCHEDULERS),
        chunk_sizes=_int_list(args.chunk_size, "--chunk-size"), batch_caps=_int_list(args.batch_cap, "--batch-cap"),
        gpu_budget=args.gpus, plan_fields=fixed, disagg=_str_list(args.disagg, "--disagg", ("no", "yes")),
        disagg_splits=_splits(args.disagg_splits) if args.disagg_splits else None, kv_transfer=args.kv_transfer)
    if args.disagg_splits and "yes" not in space.disagg:
        raise SimError("--disagg-splits: give --disagg yes (or no,yes)")
    if space.replicas is None and space.gpu_budget is None:
        raise SimError("give --gpus N (the GPU budget) or --replicas")
    prices = load_price_table(args.price_file)
    model = resolve_model(args.model)
    cfg = _request_config(args)
    comm = mpi_comm()
    root = comm is None or comm.Get_rank() == 0
    out = Path(args.out)
    from sim.report import check_out_dir
    check_out_dir(out, SEARCH_FILES)                  # before any simulation
    cache = Path(args.probe_cache) if args.probe_cache else out.parent / f"{out.name}.probes"
    setup = ProbeSetup(model, args.model, cfg, topology=args.fabric, db=args.db, gpu_file=args.gpu_file,
                       net_calibration=args.net_calibration, network=args.network, host=args.host,
                       cpu_per_iteration_s=args.cpu_per_iteration_ms * 1e-3)
    if args.dry_run:
        return _dry_run(setup, space, prices) if root else 0
    outcome = serve_search(setup, space, slos, rel_tol=args.tolerance, prices=prices, workers=args.jobs,
                           cache_dir=cache, progress=root and not args.quiet)
    if outcome is None:                               # an MPI rank other than 0
        return 0
    write_outputs(outcome, setup, space, out, args.pareto_latency,
                  title=f"{args.model}: QPS per dollar vs {args.pareto_latency} at capacity")
    print(f"serve-search {args.model}: {len(outcome.ranked)} configurations searched, {len(outcome.pruned)} pruned "
          f"(of {outcome.enumerated}); SLOs {', '.join(s.text for s in slos)}; tolerance {args.tolerance:g}")
    print(format_table(outcome, args.top))
    for note in outcome.notes:
        print(f"note: {note}", file=sys.stderr)
    print(f"{outcome.new_probes} new probes, {outcome.reused_probes} reused from {cache}; {outcome.mode}; "
          f"{outcome.elapsed_s:.1f} s; results in {out}/")
    return 0


def _dry_run(setup, space, prices) -> int:
    from collections import Counter

    from sim.serve.search import prepare_search
    prep = prepare_search(setup, space, prices)
    print(f"serve-search (dry run): {len(prep.survivors)} configurations to search, {len(prep.pruned)} pruned "
          f"(of {prep.enumerated}); {prep.deduplicated} not repeated (chunk size applies to sarathi only)")
    for kind, n in Counter(p.kind for p in prep.pruned).most_common():
        print(f"  pruned {kind}: {n}")
    for dep, _ in prep.survivors:
        price = prep.price_rows[dep.gpu].usd_per_gpu_hour
        print(f"  {dep.label:<48s}{dep.num_gpus:>4d} GPUs  ${dep.num_gpus * price:.2f}/h")
    return 0
