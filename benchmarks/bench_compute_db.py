"""Benchmark: 1,000,000 kernel lookups through ComputeDB.lookup_many (target < 2 s, cold DB included).

The op list is a realistic mix: the distinct kernels of a Llama-style layer stack (forward, dgrad, wgrad
GEMMs, flash attention fwd/bwd, norms, activations, rotary, residual adds) for several layers/shapes,
each op a distinct ComputeOp object, repeated to 1e6 entries as a simulator expanding micro-batches would.
Run: python benchmarks/bench_compute_db.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import run_cases  # noqa: E402

N_LOOKUPS = 1_000_000


def _ops():
    from workload_gen.workload import ComputeOp

    def op(name, kind, dims, variant="fwd", dtype="bf16", causal=False, layer=0):
        return ComputeOp(name, kind, tuple(dims.items()), dtype, 0.0, 0.0, variant, layer=layer, causal=causal)

    ops = []
    for layer in range(32):
        for tokens, h, ffn, tp in ((4096, 4096, 14336, 1), (8192, 8192, 28672, 4), (4096, 5120, 13824, 2)):
            heads, kv, hd = h // 128 // tp, max(1, 8 // tp), 128
            for name, (m, n, k) in {"qkv": (tokens, (heads + 2 * kv) * hd, h), "proj": (tokens, h, heads * hd),
                                    "fc1": (tokens, 2 * ffn // tp, h), "fc2": (tokens, h, ffn // tp)}.items():
                ops += [op(name, "gemm", {"m": m, "n": n, "k": k}, layer=layer),
                        op(name + "_dgrad", "gemm", {"m": m, "n": k, "k": n}, "dgrad", layer=layer),
                        op(name + "_wgrad", "gemm", {"m": k, "n": n, "k": m}, "wgrad", layer=layer)]
            fa = {"batch": 1, "seq_q": tokens, "seq_kv": tokens, "heads": heads, "kv_heads": kv,
                  "head_dim_qk": hd, "head_dim_v": hd}
            ops += [op("core", "flash_attn", fa, causal=True, layer=layer),
                    op("core_bwd", "flash_attn", fa, "bwd", causal=True, layer=layer)]
            for v in ("fwd", "bwd"):
                ops += [op("norm", "rmsnorm", {"tokens": tokens, "hidden": h}, v, layer=layer),
                        op("act", "swiglu", {"tokens": tokens, "width": ffn // tp}, v, layer=layer),
                        op("rope", "rotary", {"tokens": tokens, "heads": heads + kv, "head_dim": hd}, v, layer=layer),
                        op("add", "elementwise", {"numel": tokens * h}, v, layer=layer)]
    ops.append(op("optimizer_step", "optimizer", {"params": 7_000_000_000 // 8}, "step", "fp32"))
    reps = N_LOOKUPS // len(ops) + 1
    return (ops * reps)[:N_LOOKUPS]


def lookups_h100():
    from compute_db import open_db
    ops = _ops()
    t0 = time.perf_counter()
    db = open_db()
    times = db.lookup_many(ops, "H100")
    dt = time.perf_counter() - t0
    assert len(times) == N_LOOKUPS
    return f"{N_LOOKUPS} lookups (incl. open + fits) in {dt:.3f} s"


def lookups_b200_modeled():
    from compute_db import open_db
    ops = _ops()
    t0 = time.perf_counter()
    times = open_db().lookup_many(ops, "B200")
    dt = time.perf_counter() - t0
    assert len(times) == N_LOOKUPS
    return f"{N_LOOKUPS} lookups (incl. open + fits) in {dt:.3f} s"


if __name__ == "__main__":
    run_cases({"compute_db 1e6 lookups H100": lookups_h100,
               "compute_db 1e6 lookups B200 (similar-GPU fits)": lookups_b200_modeled})
