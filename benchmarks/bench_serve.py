"""Benchmarks of `clustersim serve` (issue 11): wall time and peak RSS of whole serving simulations.

Each case calls sim.serve.api.simulate_serving as the CLI does — memory planner, cost model on the
topology (compute_db kernels, netsim collectives), request generation, the event engine and the summary —
in a fresh interpreter (benchmarks/harness.py; imports excluded from wall time, included in peak RSS).
Requests: the packaged chat-like length mix, Poisson arrivals, seed 1. Goals on the 2-core machine:
  (a) Llama-3-8B, 1 x H100, Sarathi chunk 512, 10,000 requests near capacity (24 req/s; capacity ~26)  <= 10 s
  (b) Llama-3-70B TP 4 x 16 replicas (64 H100, 8 servers, Spectrum-X), 100,000 requests, 150 req/s     <= 90 s, <= 2 GB
  (c) Mixtral-8x7B TP 2 x 4 replicas, vLLM, 20,000 requests, 40 req/s                                   <= 30 s
  (d) serve-search Llama-3-70B on <= 16 H100 (Spectrum-X), TP {1,2,4,8} x PP {1,2} x {sarathi, vllm} x
      chunk {256, 512, 1024} (sarathi only) x batch cap {32, 64, 128, 256}, replicas filling the budget:
      128 configurations, 112 after pruning (TP 1 x PP 1 does not fit); chat lengths, Poisson arrivals
      during 60 s per probe, P99 scheduling delay <= 5 s, tolerance 2.5 %, -j 2                          <= 30 min
      (peak RSS printed is the parent's; the workers' largest is in the extra column)
"engine" cases replace the cost model by a closed-form stub, to see the engine's own cost.

    python benchmarks/bench_serve.py            # all cases
    python benchmarks/bench_serve.py "(b)"      # cases whose name contains "(b)"
"""

from __future__ import annotations

import sys
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import run_cases  # noqa: E402

import sim.serve.api  # noqa: E402,F401  (imports outside the timed part)


def _serve(model: str, tp: int, replicas: int, scheduler: str, n: int, qps: float) -> str:
    from sim.serve.api import simulate_serving
    from sim.serve.plan import ServingPlan
    from workload_gen.requests import RequestConfig
    run = simulate_serving(model, ServingPlan(tp=tp, replicas=replicas, scheduler=scheduler),
                           RequestConfig(num_requests=n, qps=qps, lengths="chat", seed=1), gpu="H100")
    s = run.summary
    m = s["metrics"]
    return (f"{s['cluster']['batches']} iterations, {s['throughput']['requests_per_s']['value']:.1f} req/s, "
            f"TTFT P50 {m['ttft_s']['p50'] * 1e3:.0f} ms, TBT P50 {m['tbt_s']['p50'] * 1e3:.1f} ms")


def _serve_search(tps, pps, schedulers, chunks, caps, duration_s: float, tol: float, jobs: int) -> str:
    import resource
    import tempfile

    from sim.inputs import resolve_model
    from sim.serve.capacity import DEFAULT_SLOS
    from sim.serve.search import ProbeSetup, ServeSearchSpace, serve_search
    from workload_gen.requests import RequestConfig
    setup = ProbeSetup(resolve_model("llama3-70b"), "llama3-70b",
                       RequestConfig(duration_s=duration_s, num_requests=100_000, lengths="chat", seed=0))
    space = ServeSearchSpace(gpus=("H100",), tp=tps, pp=pps, schedulers=schedulers, chunk_sizes=chunks,
                             batch_caps=caps, gpu_budget=16)
    with tempfile.TemporaryDirectory() as cache:       # a fresh probe cache: every probe is simulated
        out = serve_search(setup, space, DEFAULT_SLOS, rel_tol=tol, workers=jobs, cache_dir=cache)
    best = out.ranked[0]
    child_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    return (f"{len(out.ranked)} configs searched ({len(out.pruned)} pruned), {out.new_probes} probes, best "
            f"{best.deployment.label} {best.capacity_qps:.2f} req/s {best.qps_per_dollar:.3f} QPS/$; "
            f"worker peak RSS {child_mb:.0f} MB")


class StubTimer:
    """Decode-dominated stage time of a ~7B model on one GPU: 8 ms + 60 us per token + 10 ns per KV token."""
    num_stages = 1

    def stage_cost(self, replica, stage, shape, now_s):
        from sim.serve.costs import StageCost
        n = shape.num_tokens
        t = 0.008 + 6e-5 * n + 1e-8 * sum(shape.decode)
        return StageCost(t, compute_s=t, flops=1.4e10 * n, hbm_bytes=1.4e10 + 1e5 * n)


def _engine(n: int, replicas: int, qps: float, scheduler: str) -> str:
    from sim.serve.engine import simulate
    from sim.serve.plan import ServingPlan
    from workload_gen.requests import RequestConfig, make_requests
    reqs = make_requests(RequestConfig(num_requests=n, qps=qps, lengths="chat", max_model_len=4096, seed=1))
    res = simulate(reqs, ServingPlan(replicas=replicas, scheduler=scheduler), StubTimer(), 20000, 4096)
    return f"{len(res.batches)} iterations"


if __name__ == "__main__":
    run_cases({   # partial objects of module-level functions pickle for the spawned case process
        "(a) llama3-8b 1xH100 sarathi 10k req": partial(_serve, "llama3-8b", 1, 1, "sarathi", 10_000, 24.0),
        "(b) llama3-70b tp4 x16 sarathi 100k req": partial(_serve, "llama3-70b", 4, 16, "sarathi", 100_000, 150.0),
        "(c) mixtral-8x7b tp2 x4 vllm 20k req": partial(_serve, "mixtral-8x7b", 2, 4, "vllm", 20_000, 40.0),
        "(d) serve-search llama3-70b <=16xH100, 112 configs, -j 2": partial(
            _serve_search, (1, 2, 4, 8), (1, 2), ("sarathi", "vllm"), (256, 512, 1024), (32, 64, 128, 256), 60.0,
            0.025, 2),
        "engine: stub timer, 100k req, 16 replicas, sarathi": partial(_engine, 100_000, 16, 160.0, "sarathi"),
        "engine: stub timer, 100k req, 16 replicas, vllm": partial(_engine, 100_000, 16, 160.0, "vllm"),
    })
