"""Benchmarks of `clustersim serve` (issue 11): wall time and peak RSS of whole serving simulations.

Each case calls sim.serve.api.simulate_serving as the CLI does — memory planner, cost model on the
topology (compute_db kernels, netsim collectives), request generation, the event engine and the summary —
in a fresh interpreter (benchmarks/harness.py; imports excluded from wall time, included in peak RSS).
Requests: the packaged chat-like length mix, Poisson arrivals, seed 1. Goals on the 2-core machine:
  (a) Llama-3-8B, 1 x H100, Sarathi chunk 512, 10,000 requests near capacity (24 req/s; capacity ~26)  <= 10 s
  (b) Llama-3-70B TP 4 x 16 replicas (64 H100, 8 servers, Spectrum-X), 100,000 requests, 150 req/s     <= 90 s, <= 2 GB
  (c) Mixtral-8x7B TP 2 x 4 replicas, vLLM, 20,000 requests, 40 req/s                                   <= 30 s
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
        "engine: stub timer, 100k req, 16 replicas, sarathi": partial(_engine, 100_000, 16, 160.0, "sarathi"),
        "engine: stub timer, 100k req, 16 replicas, vllm": partial(_engine, 100_000, 16, 160.0, "vllm"),
    })
