"""`clustersim serve`: simulate LLM inference serving of a request stream on replicas of a model.

With no arguments it runs the built-in example (said on the first line). Flags name the model, the GPU
and fabric, the deployment (TP, PP, replicas, scheduler and its knobs, precision), the request stream
(arrival process and lengths, or a trace), the cost model's inputs (--db, --gpu-file, --net-calibration,
--host) and the output directory.
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import fields

from sim.commands import add_calibration_args
from sim.errors import SimError
from sim.serve.plan import ROUTERS, SCHEDULERS, ServingPlan

# The built-in example: Llama-3-8B on one H100 (a Spectrum-X server), Sarathi-Serve with 512-token chunks,
# 1,000 chat-like requests arriving as a Poisson process at 16 req/s (about 60% of its capacity, ~26 req/s).
EXAMPLE = {"model": "llama3-8b", "gpu": "H100", "tp": 1, "scheduler": "sarathi", "requests": 1000, "qps": 16.0,
           "lengths": "chat", "seed": 0}
EXAMPLE_TEXT = ("built-in example — Llama-3-8B on 1 x H100 (bf16), Sarathi-Serve (chunk 512), 1,000 chat-like "
                "requests, Poisson 16 req/s, seed 0")

_PLAN_FLAGS = (  # (dest, flags, type, help) -> ServingPlan fields
    ("tp", ("--tp",), int, "tensor-parallel GPUs per pipeline stage of a replica (default 1)"),
    ("pp", ("--pp",), int, "pipeline stages per replica (default 1)"),
    ("ep", ("--ep",), int, "expert parallel inside a replica: 1 or tp (MoE models; the TP group may span servers)"),
    ("expert_skew", ("--expert-skew",), float,
     "MoE: Zipf exponent of expert popularity; a step waits for the hottest EP rank (default 0: balanced)"),
    ("replicas", ("--replicas", "-r"), int, "model replicas (default 1)"),
    ("scheduler", ("--scheduler", "-s"), str, f"replica scheduler: {', '.join(SCHEDULERS)} (default sarathi)"),
    ("router", ("--router",), str, f"global scheduler: {', '.join(ROUTERS)} (default round_robin)"),
    ("max_batch_size", ("--batch-cap", "--max-batch-size"), int, "requests per batch (default 128)"),
    ("max_tokens_per_iteration", ("--max-tokens-per-iteration",), int,
     "vLLM/LightLLM token budget per iteration, padded accounting (default 4096)"),
    ("chunk_size", ("--chunk-size",), int, "Sarathi-Serve token budget per iteration (default 512)"),
    ("block_size", ("--block-size",), int, "tokens per KV-cache block (default 16)"),
    ("watermark_fraction", ("--watermark",), float, "vLLM: fraction of KV blocks kept free at admission (default 0.01)"),
    ("max_waiting_iterations", ("--max-waiting-iterations",), int, "LightLLM: decode iterations a prefill may wait"),
    ("num_blocks", ("--num-blocks",), int, "KV blocks per replica (default: from the memory planner)"),
    ("memory_margin_fraction", ("--memory-margin",), float, "fraction of GPU memory kept free (default 0.1)"),
    ("max_model_len", ("--max-model-len",), int, "longest request in tokens (default: the model's context length)"),
    ("weight_dtype", ("--weight-dtype", "--dtype"), str, "bf16 | fp16 | fp8 weights and GEMMs (default bf16)"),
    ("kv_dtype", ("--kv-dtype",), str, "bf16 | fp16 | fp8 KV cache (default: the activation dtype)"),
)
_PLAN_DEFAULTS = {f.name: f.default for f in fields(ServingPlan)}


def add_length_args(group, trace_help: str) -> None:
    """Request-length flags shared by `serve` and `serve-search` (workload_gen.requests.RequestConfig)."""
    group.add_argument("--lengths", help="fixed | uniform | zipf | trace | chat | summarization | code (default "
                                         "fixed; the trace's own lengths with --trace)")
    group.add_argument("--prefill-tokens", type=int, help="fixed lengths: prompt tokens (default 2048)")
    group.add_argument("--decode-tokens", type=int, help="fixed lengths: output tokens (default 512)")
    group.add_argument("--min-tokens", type=int, help="uniform/zipf: shortest total length (default 1024)")
    group.add_argument("--max-tokens", type=int, help="uniform/zipf: longest total length (default 4096)")
    group.add_argument("--pd-ratio", type=float, help="uniform/zipf: prefill:decode ratio (default 20)")
    group.add_argument("--trace", help=trace_help)
    group.add_argument("--prefill-scale", type=float, help="trace lengths: multiply prompt lengths")
    group.add_argument("--decode-scale", type=float, help="trace lengths: multiply output lengths")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="simulate LLM inference serving (no arguments: built-in example)",
        description="Simulate inference serving: requests arrive, replica schedulers batch prefills and decodes, "
                    "the KV cache fills; reports TTFT, TBT/TPOT, end-to-end latency and throughput. "
                    "Without arguments: " + EXAMPLE_TEXT + ".")
    m = p.add_argument_group("model and cluster")
    m.add_argument("--model", "-m", help="zoo name (e.g. llama3-8b, llama3-70b, mixtral-8x7b) or a HF config.json / YAML")
    m.add_argument("--gpu", help="GPU for kernel times and memory (default: the topology's GPU type)")
    m.add_argument("--topology", "--fabric", "-t", dest="fabric",
                   help="topology template[:key=value,...] or a SimAI topology file (default: Spectrum-X, whole "
                        "8-GPU servers for the deployment)")
    m.add_argument("--gpus", "-g", type=int, help="GPUs of a template topology (default: the deployment's, rounded up "
                                                  "to whole servers)")
    m.add_argument("--mapping", help="GPU ids of the replicas' ranks (JSON list or one id per line; default contiguous)")
    d = p.add_argument_group("deployment")
    for dest, flags, typ, hlp in _PLAN_FLAGS:
        d.add_argument(*flags, dest=dest, type=typ, default=None, help=hlp)
    r = p.add_argument_group("requests")
    r.add_argument("--requests", "-n", dest="num_requests", type=int, help="number of requests (default 1000)")
    r.add_argument("--duration", dest="duration_s", type=float, help="seconds of arrivals (instead of / with --requests)")
    r.add_argument("--arrival", choices=("poisson", "gamma", "static", "closed", "trace"),
                   help="arrival process (default poisson; 'trace' with --trace)")
    r.add_argument("--qps", type=float, help="requests per second (poisson, gamma; default 1)")
    r.add_argument("--cv", type=float, help="coefficient of variation of gamma inter-arrival times")
    r.add_argument("--concurrency", type=int, help="closed loop: requests kept in flight (implies --arrival closed)")
    add_length_args(r, trace_help="trace CSV: arrived_at,num_prefill_tokens,num_decode_tokens (replay) or "
                                  "num_prefill_tokens,num_decode_tokens (lengths); or chat | summarization | code")
    r.add_argument("--time-scale", type=float, help="trace replay: multiply arrival times")
    r.add_argument("--seed", type=int, default=None, help="seed of arrivals, lengths and the random router (default 0)")
    c = p.add_argument_group("cost model")
    c.add_argument("--network", "-N", choices=("analytical", "flow"), default="analytical",
                   help="netsim backend for collective times (default analytical; replicas sharing links contend "
                        "either way)")
    c.add_argument("--host", choices=("none", "launch-gaps", "eager"), default="launch-gaps",
                   help="CPU side of the engine: launch-gaps (C++ runtime or CUDA graphs; default), eager (Python "
                        "without CUDA graphs: host issue per kernel), none")
    c.add_argument("--cpu-per-iteration-ms", type=float, default=0.0,
                   help="CPU time between iterations during which the GPU idles (scheduling, input preparation), ms")
    add_calibration_args(p)
    o = p.add_argument_group("SLOs and output")
    o.add_argument("--slo-ttft", type=float, help="goodput: TTFT limit, s")
    o.add_argument("--slo-tbt", type=float, help="goodput: limit on a request's largest time between tokens, s")
    o.add_argument("--slo-tpot", type=float, help="goodput: limit on a request's mean time per output token, s")
    o.add_argument("--slo-e2e", type=float, help="goodput: end-to-end latency limit, s")
    o.add_argument("--out", "-o", default="clustersim-serve",
                   help="results directory (written atomically; '-' = none); default %(default)s")
    o.add_argument("--no-charts", action="store_true", help="skip PNG charts")
    o.add_argument("--no-trace", action="store_true", help="skip the Chrome trace")
    o.add_argument("--batches", action="store_true", help="also write batch_metrics.csv (one row per batch)")
    o.add_argument("--token-times", action="store_true", help="keep every token's time (memory grows with tokens)")
    o.add_argument("--json", action="store_true", help="print the summary as JSON")
    o.add_argument("--quiet", "-q", action="store_true", help="no progress bar, no notes")
    from sim.serve.disagg_cli import add_disagg_args
    add_disagg_args(p)
    p.set_defaults(func=cmd_serve)


def _is_default(args) -> bool:
    asked = [dest for dest, *_ in _PLAN_FLAGS] + ["model", "num_requests", "duration_s", "arrival", "qps", "cv",
                                                  "concurrency", "lengths", "prefill_tokens", "decode_tokens",
                                                  "min_tokens", "max_tokens", "pd_ratio", "trace", "time_scale",
                                                  "prefill_scale", "decode_scale", "seed"]
    return all(getattr(args, a, None) is None for a in asked)


def _plan(args) -> ServingPlan:
    vals = {dest: getattr(args, dest) for dest, *_ in _PLAN_FLAGS if getattr(args, dest) is not None}
    plan = ServingPlan(**vals)
    from sim.serve.validation import validate_serving_plan
    validate_serving_plan(plan)
    return plan


def _request_config(args):
    from workload_gen.requests import RequestConfig
    arrival = args.arrival
    if arrival is None:
        if args.concurrency is not None:
            arrival = "closed"
        elif args.trace and args.lengths is None and _has_arrivals(args.trace):
            arrival = "trace"
        else:
            arrival = "poisson"
    lengths = args.lengths
    if lengths is None and args.trace and arrival != "trace":
        lengths = "trace"
    n = args.num_requests
    if n is None and args.duration_s is None and arrival != "trace":
        n = 1000
    kw = {"num_requests": n, "duration_s": args.duration_s, "arrival": arrival, "lengths": lengths,
          "trace": args.trace, "seed": 0 if args.seed is None else args.seed}
    for name in ("qps", "cv", "concurrency", "prefill_tokens", "decode_tokens", "min_tokens", "max_tokens",
                 "pd_ratio", "time_scale", "prefill_scale", "decode_scale"):
        v = getattr(args, name)
        if v is not None:
            kw[name] = v
    return RequestConfig(**kw)


def _has_arrivals(trace: str) -> bool:
    """Whether a trace file (or packaged example) has an arrived_at column (replay) or lengths only."""
    from workload_gen.traces import resolve_trace
    try:
        with open(resolve_trace(trace), encoding="utf-8") as fh:
            header = fh.readline()
    except (OSError, ValueError):
        return False     # read_trace reports a missing or unreadable file with its own one-line error
    return "arrived_at" in header.split("#")[0]


def _example_args(args) -> None:
    for k, v in EXAMPLE.items():
        dest = "num_requests" if k == "requests" else k
        if getattr(args, dest, None) is None:
            setattr(args, dest, v)


def cmd_serve(args) -> int:
    from sim.serve.api import host_overhead, simulate_serving
    from sim.serve.disagg_cli import cmd_disagg, disagg_flags_given
    from sim.serve.metrics import SLO, format_summary
    from sim.serve.outputs import SERVE_FILES, write_results
    if args.disaggregate:
        return cmd_disagg(args)
    if disagg_flags_given(args):
        raise SimError(f"{disagg_flags_given(args)[0]}: needs --disaggregate")
    if _is_default(args):
        _example_args(args)
        print(f"clustersim serve: {EXAMPLE_TEXT}", file=sys.stderr)
    if not args.model:
        raise SimError("give --model NAME|FILE (or no arguments for the built-in example)")
    for flag, v in (("--cpu-per-iteration-ms", args.cpu_per_iteration_ms), ("--slo-ttft", args.slo_ttft),
                    ("--slo-tbt", args.slo_tbt), ("--slo-tpot", args.slo_tpot), ("--slo-e2e", args.slo_e2e)):
        if v is not None and not (v >= 0 and v != float("inf")):
            raise SimError(f"{flag}: must be a finite number >= 0 (got {v})")
    plan = _plan(args)
    cfg = _request_config(args)
    if args.out != "-":
        from sim.report import check_out_dir
        check_out_dir(args.out, SERVE_FILES)      # before the simulation, not after
    from sim.commands import open_job_db
    db = open_job_db({"db": args.db, "gpu_file": args.gpu_file})
    net_cal = None
    if args.net_calibration:
        import netsim
        net_cal = netsim.load_net_calibration(args.net_calibration)
    topology = args.fabric
    if args.gpus is not None:
        from sim.inputs import make_topology
        topology = make_topology(args.fabric or "spectrum-x", gpus=args.gpus, gpu_type=args.gpu)
    slo = SLO(args.slo_ttft, args.slo_tbt, args.slo_tpot, args.slo_e2e)
    t0 = time.perf_counter()
    run = simulate_serving(args.model, plan, cfg, topology=topology, gpu=args.gpu, db=db, network=args.network,
                           net_calibration=net_cal, host=host_overhead(args.host, args.cpu_per_iteration_ms * 1e-3),
                           slo=slo if slo.any() else None, seed=cfg.seed,
                           progress=not args.quiet and sys.stderr.isatty(), keep_token_times=args.token_times,
                           mapping=args.mapping)
    wall = time.perf_counter() - t0
    for line in run.request_notes:     # trimming is reported even with --quiet: never silent
        print(f"note: {line}", file=sys.stderr)
    s = run.summary
    title = (f"model {getattr(run.model, 'name', args.model)} | {plan.replicas} x (tp {plan.tp} pp {plan.pp}) on "
             f"{run.gpu} | {plan.weight_dtype} weights, {plan.kv_cache_dtype} KV cache")
    out = None
    if args.out != "-":
        extra = {k: v for k, v in vars(args).items() if k != "func" and v is not None}
        out = write_results(run.result, args.out, run.peak_flops_per_s, run.hbm_Bps,
                            slo if slo.any() else None, charts=not args.no_charts, trace=not args.no_trace,
                            batches=args.batches, extra=extra, title=title, summary=s)
        if args.token_times:
            _write_token_times(run, out)
    if args.json:
        print(json.dumps(s, indent=1, default=str))
        return 0
    print(format_summary(s, title))
    print(_memory_line(s["memory"]))
    if s["cost_model"].get("moe"):
        print(_moe_line(s["cost_model"]["moe"]))
    prov = s["kernel_time_sources"]["fractions"]
    print(f"{'kernel time provenance':<26s}" + ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(prov.items())))
    cprov = s.get("collective_time_sources", {}).get("fractions")
    if cprov:
        print(f"{'collective provenance':<26s}" + ", ".join(f"{k} {100 * v:.1f}%" for k, v in sorted(cprov.items())))
    print(f"simulated in {wall:.2f} s ({s['cluster']['batches']} batches)" + (f"; results in {out}/" if out else ""))
    return 0


def _memory_line(mem: dict) -> str:
    if "weights_GiB" not in mem:
        return f"{'KV cache':<26s}{mem['num_blocks']} blocks x {mem['block_size']} tokens ({mem['source']})"
    return (f"{'KV cache per replica':<26s}{mem['num_blocks']} blocks x {mem['block_size']} tokens = "
            f"{mem['kv_tokens']} tokens ({mem['source']}: {mem['gpu_GiB']:.1f} GiB - weights "
            f"{mem['weights_GiB']:.2f} - activations {mem['activations_GiB']:.2f} - context "
            f"{mem['cuda_context_GiB']:.2f} - NCCL {mem['nccl_GiB']:.2f} - margin {mem['margin_GiB']:.2f} GiB)")


def _moe_line(moe: dict) -> str:
    return (f"{'MoE routing':<26s}{moe['experts']} experts, top-{moe['top_k']}, ep {moe['ep']}, skew "
            f"{moe['expert_skew']:g} -> hottest rank {moe['imbalance_factor']:.3f} x the mean token copies")


def _write_token_times(run, out) -> None:
    """token_times.csv: request id, token index, time (s); written into the finished results directory."""
    import io

    from sim.outpath import atomic_write
    buf = io.StringIO()
    buf.write("request_id,token,time_s\n")
    for r in run.result.requests:
        for i, t in enumerate(r.token_times or ()):
            buf.write(f"{r.id},{i},{t:.9g}\n")
    atomic_write(f"{out}/token_times.csv", buf.getvalue().encode())
