"""Benchmarks of ComputeDB lookups.

- 1,000,000 kernel lookups through ComputeDB.lookup_many (target < 2 s, cold DB included). The op list is a
  realistic mix: the distinct kernels of a Llama-style layer stack (forward, dgrad, wgrad GEMMs, flash attention
  fwd/bwd, norms, activations, rotary, residual adds) for several layers/shapes, each op a distinct ComputeOp
  object, repeated to 1e6 entries as a simulator expanding micro-batches would. On H100 (Vidur data) and on
  B200 (its own SimuMax GEMMs and attention, other families from similar GPUs' fits).
- Cold lookups: ~1000 distinct GEMM shapes (zoo models x TP 1/2/4/8 x token counts x fwd/dgrad/wgrad), each
  asked once of a fresh DB (fits, residual fields and profiles built on the way), as a plan search sees them.
- open_db(user file): opening a user DB layered over the shipped one and looking up a key it measured, as a
  command run per plan does (the shipped layer is indexed only when a key needs it).
Run: python benchmarks/bench_compute_db.py [case substring ...]
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


def lookups_b200():
    from compute_db import open_db
    ops = _ops()
    t0 = time.perf_counter()
    times = open_db().lookup_many(ops, "B200")
    dt = time.perf_counter() - t0
    assert len(times) == N_LOOKUPS
    return f"{N_LOOKUPS} lookups (incl. open + fits) in {dt:.3f} s"


def _cold_keys():
    from compute_db.keys import make_key
    from workload_gen.zoo import get_model
    keys = []
    for name in ("llama2-7b", "llama2-13b", "llama3-8b", "llama3-70b", "qwen2.5-72b", "yi-34b", "gpt3-175b"):
        m = get_model(name)
        h, nh, kvh, hd, ffn = m.hidden_size, m.num_attention_heads, m.kv_heads, m.head_size, m.ffn_hidden_size
        up = (2 if m.gated_mlp else 1) * ffn
        for tp in (1, 2, 4, 8):
            for tokens in (1024, 2048, 4096, 8192):
                for n, k in (((nh + 2 * kvh) * hd // tp, h), (h, nh * hd // tp), (up // tp, h), (h, ffn // tp)):
                    keys += [make_key("gemm", "fwd", {"m": tokens, "n": n, "k": k}, "bf16"),
                             make_key("gemm", "dgrad", {"m": tokens, "n": k, "k": n}, "bf16"),
                             make_key("gemm", "wgrad", {"m": k, "n": n, "k": tokens}, "bf16")]
    return list(dict.fromkeys(keys))


def _cold(gpu: str) -> str:
    from compute_db import open_db
    keys = _cold_keys()
    db = open_db()
    t0 = time.perf_counter()
    sources = {}
    for k in keys:
        src = db.lookup_key(k, gpu).source
        sources[src] = sources.get(src, 0) + 1
    dt = time.perf_counter() - t0
    return f"{len(keys)} distinct GEMM shapes, first lookups (incl. fits) in {dt:.3f} s; {sources}"


def cold_h100():
    return _cold("H100")


def cold_b200():
    return _cold("B200")


def open_user_db():
    import tempfile

    from compute_db import open_db, store
    from compute_db.keys import make_key
    key = make_key("gemm", "fwd", {"m": 4096, "n": 6144, "k": 4096}, "bf16")
    n_opens = 200
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "user.sqlite"
        store.write_rows(path, [store.KernelRow("H100", key, 1e-4, 1e-4, 1e-4, 0.0, 5, "measured", "bench")])
        t0 = time.perf_counter()
        for _ in range(n_opens):
            assert open_db(path).lookup_key(key, "H100").time_s == 1e-4
        t1 = time.perf_counter()
        open_db(path).lookup_key(make_key("gemm", "fwd", {"m": 4096, "n": 4096, "k": 4096}, "bf16"), "H100")
        t2 = time.perf_counter()
    return (f"open + lookup of a user key {(t1 - t0) / n_opens * 1e3:.2f} ms each ({n_opens} opens); "
            f"open + a shipped H100 key {(t2 - t1) * 1e3:.0f} ms")


if __name__ == "__main__":
    run_cases({"compute_db 1e6 lookups H100": lookups_h100,
               "compute_db 1e6 lookups B200": lookups_b200,
               "compute_db cold GEMM shapes H100": cold_h100,
               "compute_db cold GEMM shapes B200": cold_b200,
               "compute_db open_db(user file)": open_user_db})
