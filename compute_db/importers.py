"""Importers: Vidur profiling CSVs and AICB AIOB compute-timing text files -> KernelRow (seconds).

Vidur (`<dir>/<gpu>/<org>/<model>/mlp.csv`, ms, fp16, forward only). Kernel shapes are derived from the
model columns (head_dim = n_embd / n_head, tp = num_tensor_parallel_workers, m = num_tokens):
- attn_pre_proj  -> gemm m, k=n_embd, n=(n_head + 2·n_kv_head)·head_dim/tp
- attn_post_proj -> gemm m, k=n_head·head_dim/tp, n=n_embd
- mlp_up_proj    -> gemm m, k=n_embd, n=(2 if gated else 1)·n_expanded_embd/tp
- mlp_down_proj  -> gemm m, k=n_expanded_embd/tp, n=n_embd
- input/post_attention_layernorm -> rmsnorm (gated models) or layernorm (tokens, n_embd)
- attn_rope      -> rotary (tokens, heads=(n_head + n_kv_head)/tp, head_dim) (gated models only: phi-2
  rotates part of each head, not modelled)
- mlp_act        -> swiglu (gated) or gelu (tokens, width=n_expanded_embd/tp)
- add            -> elementwise (numel = tokens·n_embd; gated models only: phi-2's parallel
  attention/MLP residual adds three tensors);  emb -> embedding (tokens, n_embd, vocab/tp)
Duplicate (shape, source) rows are merged: median of medians, mean of means, min of mins, max std.

AIOB text (reference/simai_formats.md §6, µs): per-layer kernel names without shapes, so the caller
gives the model, TP degree, micro-batch tokens and the GPU (the file does not record it).
"""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

import numpy as np
import pandas as pd

from compute_db.errors import ComputeDBError
from compute_db.keys import KernelKey, make_key
from compute_db.store import KernelRow
from workload_gen.vocab import padded_vocab_size

VIDUR_GPU_NAMES = {"a100": "A100-80GB", "h100": "H100"}
VIDUR_OPS = ("emb", "input_layernorm", "attn_pre_proj", "attn_rope", "attn_post_proj",
             "post_attention_layernorm", "mlp_up_proj", "mlp_act", "mlp_down_proj", "add")
_MODEL_COLS = ("n_head", "n_kv_head", "n_embd", "n_expanded_embd", "vocab_size", "use_gated_mlp",
               "num_tokens", "num_tensor_parallel_workers")


def _as_bool(v) -> bool:
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes")
    return bool(v)


def vidur_key(op: str, rec: dict) -> KernelKey | None:
    """Kernel key of one Vidur op column for one CSV row (None: op not imported)."""
    h, kvh, d, ffn = (int(rec[c]) for c in ("n_head", "n_kv_head", "n_embd", "n_expanded_embd"))
    vocab, m, tp = int(rec["vocab_size"]), int(rec["num_tokens"]), int(rec["num_tensor_parallel_workers"])
    gated = _as_bool(rec["use_gated_mlp"])
    hd = d // h
    dt = "fp16"
    if op == "attn_pre_proj":
        return make_key("gemm", "fwd", {"m": m, "n": (h + 2 * kvh) * hd // tp, "k": d}, dt)
    if op == "attn_post_proj":
        return make_key("gemm", "fwd", {"m": m, "n": d, "k": h * hd // tp}, dt)
    if op == "mlp_up_proj":
        return make_key("gemm", "fwd", {"m": m, "n": (2 if gated else 1) * ffn // tp, "k": d}, dt)
    if op == "mlp_down_proj":
        return make_key("gemm", "fwd", {"m": m, "n": d, "k": ffn // tp}, dt)
    if op in ("input_layernorm", "post_attention_layernorm"):
        return make_key("rmsnorm" if gated else "layernorm", "fwd", {"tokens": m, "hidden": d}, dt)
    if op == "attn_rope":
        if not gated:
            return None
        return make_key("rotary", "fwd", {"tokens": m, "heads": (h + kvh) // tp, "head_dim": hd}, dt)
    if op == "mlp_act":
        return make_key("swiglu" if gated else "gelu", "fwd", {"tokens": m, "width": ffn // tp}, dt)
    if op == "add":
        if not gated:
            return None  # phi-2 (parallel attention/MLP) adds three tensors; not a plain residual add
        return make_key("elementwise", "fwd", {"numel": m * d}, dt)
    if op == "emb":
        return make_key("embedding", "fwd", {"tokens": m, "hidden": d, "vocab": max(1, vocab // tp)}, dt)
    return None


def merge_rows(gpu: str, key: KernelKey, source: str, stats: list[tuple[float, float, float, float]]) -> KernelRow:
    """One imported row from several measurements (mean, median, min, std in s) of a key: mean of means,
    median of medians, min of mins, max std."""
    arr = np.asarray(stats, dtype=float)  # columns: mean, median, min, std (seconds)
    return KernelRow(gpu=gpu, key=key, mean_s=float(arr[:, 0].mean()), median_s=float(np.median(arr[:, 1])),
                     min_s=float(arr[:, 2].min()), std_s=float(arr[:, 3].max()), samples=0,
                     provenance="imported", source=source)


def shipped_token_counts(max_tokens: int = 1 << 20) -> frozenset[int]:
    """A log-spaced subset of token counts: 1, 2, 4, 8 and 2^k, 3·2^k above (`import-vidur --shipped-grid`; the
    shipped DB keeps every token count)."""
    out = {1, 2, 4}
    x = 8
    while x <= max_tokens:
        out.update((x, 3 * x))
        x *= 2
    return frozenset(out)


def import_vidur_csv(csv_path: str | Path, gpu: str, source: str,
                     token_counts: frozenset[int] | None = None) -> list[KernelRow]:
    """Rows of one Vidur mlp.csv (times converted ms -> s); token_counts: keep only these num_tokens."""
    csv_path = Path(csv_path)
    try:
        df = pd.read_csv(csv_path)
    except (OSError, ValueError) as exc:
        raise ComputeDBError(f"{csv_path}: cannot read Vidur CSV ({exc})") from None
    missing = [c for c in _MODEL_COLS if c not in df.columns]
    if missing:
        raise ComputeDBError(f"{csv_path}:1: not a Vidur profiling CSV (missing column(s) {', '.join(missing)})")
    groups: dict[KernelKey, list] = defaultdict(list)
    if token_counts is not None:
        df = df[df["num_tokens"].isin(sorted(token_counts))]
    for rec in df.to_dict("records"):
        for op in VIDUR_OPS:
            cols = [f"time_stats.{op}.{s}" for s in ("mean", "median", "min", "std")]
            if any(c not in rec for c in cols):
                continue
            vals = [float(rec[c]) for c in cols]
            if not all(np.isfinite(vals[:3])) or min(vals[:3]) <= 0:
                continue
            key = vidur_key(op, rec)
            if key is None:
                continue
            std = vals[3] if np.isfinite(vals[3]) else 0.0
            groups[key].append((vals[0] * 1e-3, vals[1] * 1e-3, vals[2] * 1e-3, std * 1e-3))
    return [merge_rows(gpu, key, source, stats) for key, stats in groups.items()]


def import_vidur(directory: str | Path, token_counts: frozenset[int] | None = None) -> list[KernelRow]:
    """All `<gpu>/<org>/<model>/mlp.csv` under a Vidur profiling directory (gpu folder a100|h100)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ComputeDBError(f"{directory}: Vidur profiling directory not found")
    rows: list[KernelRow] = []
    files = sorted(directory.glob("*/*/*/mlp.csv")) + sorted(directory.glob("*/*/mlp.csv"))
    if not files:
        raise ComputeDBError(f"{directory}: no <gpu>/<org>/<model>/mlp.csv files found")
    for f in files:
        rel = f.relative_to(directory)
        gpu_dir = rel.parts[0].lower()
        if gpu_dir not in VIDUR_GPU_NAMES:
            raise ComputeDBError(f"{f}: unknown Vidur GPU folder '{rel.parts[0]}' "
                                 f"(known: {', '.join(VIDUR_GPU_NAMES)})")
        model = "/".join(rel.parts[1:-1])
        rows.extend(import_vidur_csv(f, VIDUR_GPU_NAMES[gpu_dir], f"vidur:{model}", token_counts))
    return rows


def model_of_source(source: str) -> str:
    """The model a row came from ('vidur:meta-llama/Llama-2-7b-hf' -> 'meta-llama/Llama-2-7b-hf')."""
    return source.split(":", 1)[1] if ":" in source else source


# ---------------------------------------------------------------- AICB AIOB text files

_AIOB_STAT = re.compile(r"^\s+time_gpu_(max|min|avg)\s*:\s*([0-9.eE+-]+)\s*$")
_AIOB_KEY = re.compile(r"^(\S[^:]*):\s*$")


def parse_aiob_text(path: str | Path) -> tuple[int, dict[str, dict[str, float]]]:
    """(train_iter, {kernel name: {max, min, avg} in seconds}) of an AIOB compute-timing file."""
    path = Path(path)
    try:
        lines = path.read_text().splitlines()
    except OSError as exc:
        raise ComputeDBError(f"{path}: cannot read AIOB file ({exc.strerror})") from None
    if not lines or not lines[0].startswith("train_iter:"):
        raise ComputeDBError(f"{path}:1: AIOB file must start with 'train_iter:<n>'")
    try:
        iters = int(lines[0].split(":", 1)[1])
    except ValueError:
        raise ComputeDBError(f"{path}:1: 'train_iter' is not an integer") from None
    out: dict[str, dict[str, float]] = {}
    current = None
    for i, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        m = _AIOB_KEY.match(line)
        if m:
            current = m.group(1).strip()
            out[current] = {}
            continue
        m = _AIOB_STAT.match(line)
        if m and current is not None:
            try:
                value = float(m.group(2))
            except ValueError:
                raise ComputeDBError(f"{path}:{i}: time is not a number: {m.group(2)!r}") from None
            if not value > 0 or value == float("inf"):
                raise ComputeDBError(f"{path}:{i}: time_gpu_{m.group(1)} must be a positive number of us "
                                     f"(got {m.group(2)})")
            out[current][m.group(1)] = value * 1e-6
            continue
        raise ComputeDBError(f"{path}:{i}: expected '<kernel>:' or '    time_gpu_max|min|avg: <us>'")
    for name, st in out.items():
        if "avg" not in st:
            raise ComputeDBError(f"{path}: kernel '{name}' has no time_gpu_avg")
    return iters, out


def aiob_keys(model, tp: int, tokens: int, micro_batch: int, seq: int, dtype: str) -> dict[str, KernelKey]:
    """AIOB kernel name -> kernel key for a dense/GQA Megatron layer sharded by `tp` (tokens = mbs·seq)."""
    d, h, kvh, hd = model.hidden_size, model.num_attention_heads, model.kv_heads, model.head_size
    ffn = model.ffn_hidden_size
    norm = "rmsnorm" if model.norm == "rmsnorm" else "layernorm"
    gated = model.gated_mlp
    # Megatron pads the vocabulary so every TP shard is equal: the workload's embedding / LM head use it
    vocab_rank = padded_vocab_size(model.vocab_size, tp, model.make_vocab_size_divisible_by) // tp
    keys = {
        "atten_qkv": make_key("gemm", "fwd", {"m": tokens, "n": (h + 2 * kvh) * hd // tp, "k": d}, dtype),
        "atten_linear": make_key("gemm", "fwd", {"m": tokens, "n": d, "k": h * hd // tp}, dtype),
        "mlp_linear_1": make_key("gemm", "fwd", {"m": tokens, "n": (2 if gated else 1) * ffn // tp, "k": d}, dtype),
        "mlp_linear_2": make_key("gemm", "fwd", {"m": tokens, "n": d, "k": ffn // tp}, dtype),
        "layernorm": make_key(norm, "fwd", {"tokens": tokens, "hidden": d}, dtype),
        "layernorm2": make_key(norm, "fwd", {"tokens": tokens, "hidden": d}, dtype),
        "layernorm_post": make_key(norm, "fwd", {"tokens": tokens, "hidden": d}, dtype),
        "mlp_gelu": make_key("swiglu" if gated else "gelu", "fwd", {"tokens": tokens, "width": ffn // tp}, dtype),
        "atten_flash": make_key("flash_attn", "fwd", {
            "batch": micro_batch, "seq_q": seq, "seq_kv": seq, "heads": h // tp, "kv_heads": max(1, kvh // tp),
            "head_dim_qk": hd, "head_dim_v": hd}, dtype, causal=True),
        "Emb": make_key("embedding", "fwd", {"tokens": tokens, "hidden": d, "vocab": vocab_rank},
                        dtype),
        "logit_time": make_key("gemm", "fwd", {"m": tokens, "n": vocab_rank, "k": d}, dtype),
    }
    return keys


def import_aiob(path: str | Path, gpu: str, model, tp: int = 1, micro_batch: int = 1, seq: int | None = None,
                dtype: str = "bf16") -> tuple[list[KernelRow], list[str]]:
    """Rows of an AIOB file measured on `gpu` for `model` (ModelSpec). Returns (rows, skipped kernel names).

    Kernels whose shape the file does not determine (MoE and MLA keys, param_time, the unfused attention
    core) are skipped and listed.
    """
    _, stats = parse_aiob_text(path)
    seq = seq or model.seq_length
    keys = aiob_keys(model, tp, micro_batch * seq, micro_batch, seq, dtype)
    grouped: dict[KernelKey, list] = defaultdict(list)
    skipped = []
    for name, st in stats.items():
        key = keys.get(name)
        if key is None:
            skipped.append(name)
            continue
        avg = st["avg"]
        lo = st.get("min", avg)
        hi = st.get("max", avg)
        grouped[key].append((avg, avg, lo, (hi - lo) / 4))  # AIOB gives no median/std: avg and range/4
    rows = [merge_rows(gpu, key, f"aiob:{Path(path).name}", s) for key, s in grouped.items()]
    return rows, skipped
