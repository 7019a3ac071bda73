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

Vidur `attention.csv` (ms, fp16; head_dim = n_embd / n_q_head, heads = n_q_head / tp, kv heads = ceil(n_kv_head / tp)
per rank as clustersim's serving model keeps them; b = batch_size, c = prefill_chunk_size, k = kv_cache_size):
- attn_prefill (is_prefill)  -> flash_attn fwd causal (batch b, seq_q c, seq_kv k + c): a chunk of c new tokens
  attending to its k cached tokens and to itself (workload_gen.inference.prefill_attention_ops)
- attn_decode (not prefill)  -> attn_decode (batch b, kv_tokens b·(k + 1)): every request reads its k cached
  tokens and the new token's K/V (workload_gen.inference.decode_attention_op: contexts + 1 each)
- attn_kv_cache_save         -> memcpy of the new tokens' K and V into the cache: bytes = tokens · 2 · kv heads ·
  head_dim · 2 B (tokens = b·c prefill, b decode), as inference.kv_write_op
- attn_input_reshape / attn_output_reshape: not used (clustersim's kernels have no separate reshape: views
  or fused into the attention kernel); reported as skipped. block_size, max_model_len: not part of the key.
Vidur network profiles `all_reduce.csv` / `send_recv.csv` (ms; size in bytes; the folder names the node type,
e.g. h100_dgx): collective rows (store.CollectiveRow) per (collective, num_workers, devices_per_node, size),
send_recv filed as netsim's `send`; several ranks of one point: the slowest rank's median (a collective ends
when its last rank does), repeated rows of one rank: their median.
`import_vidur_profiles` walks a whole folder and reports every file it did not import, with the reason.

AIOB text (reference/simai_formats.md §6, µs): per-layer kernel names without shapes, so the caller
gives the model, TP degree, micro-batch tokens and the GPU (the file does not record it).
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from compute_db.errors import ComputeDBError
from compute_db.keys import KernelKey, make_key
from compute_db.store import CollectiveRow, KernelRow
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


# ---------------------------------------------------------------- Vidur attention and network profiles

VIDUR_FILES = ("mlp.csv", "attention.csv", "all_reduce.csv", "send_recv.csv")
ATTN_OPS = ("attn_prefill", "attn_decode", "attn_kv_cache_save")
ATTN_UNUSED = ("attn_input_reshape", "attn_output_reshape")
_ATTN_COLS = ("n_embd", "n_q_head", "n_kv_head", "num_tensor_parallel_workers", "batch_size", "prefill_chunk_size",
              "kv_cache_size", "is_prefill")
_NET_COLS = ("num_workers", "size", "devices_per_node")
VIDUR_COLLECTIVES = {"all_reduce": "all_reduce", "send_recv": "send"}   # Vidur name -> netsim name
_STATS = ("mean", "median", "min", "std")


def _read_csv(path: Path, what: str, required: tuple[str, ...]) -> pd.DataFrame:
    try:
        df = pd.read_csv(path)
    except pd.errors.EmptyDataError:
        raise ComputeDBError(f"{path}: empty file (no header, no rows)") from None
    except (OSError, ValueError) as exc:
        raise ComputeDBError(f"{path}: cannot read {what} ({str(exc).splitlines()[0]})") from None
    missing = [c for c in required if c not in df.columns]
    if missing:
        raise ComputeDBError(f"{path}:1: not a {what} (missing column(s) {', '.join(missing)})")
    if df.empty:
        raise ComputeDBError(f"{path}: {what} without data rows")
    return df


def _stats_ms(rec: dict, op: str) -> tuple[float, float, float, float] | None:
    """(mean, median, min, std) in seconds of `time_stats.<op>.*` (ms); None when the median is not a positive
    number. A missing mean/min is the median, a missing std 0."""
    vals = {}
    for st in _STATS:
        v = rec.get(f"time_stats.{op}.{st}")
        try:
            vals[st] = float(v) if v is not None else math.nan
        except (TypeError, ValueError):
            vals[st] = math.nan
    med = vals["median"]
    if not (math.isfinite(med) and med > 0):
        return None
    mean = vals["mean"] if math.isfinite(vals["mean"]) and vals["mean"] > 0 else med
    lo = vals["min"] if math.isfinite(vals["min"]) and vals["min"] > 0 else med
    std = vals["std"] if math.isfinite(vals["std"]) and vals["std"] >= 0 else 0.0
    return mean * 1e-3, med * 1e-3, lo * 1e-3, std * 1e-3


def _int_field(rec: dict, col: str, where: str, minimum: int = 1) -> int:
    v = rec[col]
    try:
        f = float(v)
    except (TypeError, ValueError):
        f = math.nan
    if not math.isfinite(f) or f != int(f) or f < minimum:
        raise ComputeDBError(f"{where}: column {col} must be an integer >= {minimum}, got {v!r}")
    return int(f)


def vidur_attention_key(op: str, rec: dict, where: str = "attention.csv") -> KernelKey | None:
    """Kernel key of one Vidur attention op for one attention.csv row (None: op not imported)."""
    d, h, kvh = (_int_field(rec, c, where) for c in ("n_embd", "n_q_head", "n_kv_head"))
    tp, b = _int_field(rec, "num_tensor_parallel_workers", where), _int_field(rec, "batch_size", where)
    k = _int_field(rec, "kv_cache_size", where, 0)
    prefill = _as_bool(rec["is_prefill"])
    c = _int_field(rec, "prefill_chunk_size", where, 1 if prefill else 0)
    if d % h or h % tp:
        raise ComputeDBError(f"{where}: n_q_head {h} must divide n_embd {d} and be divisible by the "
                             f"{tp} tensor-parallel workers")
    hd, heads, kv_heads = d // h, h // tp, -(-kvh // tp)
    if op == "attn_prefill" and prefill:
        return make_key("flash_attn", "fwd", {"batch": b, "seq_q": c, "seq_kv": k + c, "heads": heads,
                                              "kv_heads": kv_heads, "head_dim_qk": hd, "head_dim_v": hd},
                        "fp16", causal=True)
    if op == "attn_decode" and not prefill:
        return make_key("attn_decode", "fwd", {"batch": b, "kv_tokens": b * (k + 1), "heads": heads,
                                               "kv_heads": kv_heads, "head_dim_qk": hd, "head_dim_v": hd}, "fp16")
    if op == "attn_kv_cache_save":
        tokens = b * c if prefill else b
        return make_key("memcpy", "fwd", {"bytes": tokens * 2 * kv_heads * hd * 2}, "fp16")
    return None


_ATTN_PART = {"attn_prefill": "prefill attention", "attn_decode": "decode attention",
              "attn_kv_cache_save": "KV-cache save"}


def import_vidur_attention_csv(csv_path: str | Path, gpu: str, source: str, backend: str | None = None
                               ) -> tuple[list[KernelRow], dict[str, int], list[str]]:
    """Rows of one Vidur attention.csv (ms -> s). Returns (rows, rows per part, notes on what was not used).

    backend: keep only rows of this attention_backend (case-insensitive); rows of several backends are filed
    under separate sources (`<source>:<backend>`)."""
    csv_path = Path(csv_path)
    df = _read_csv(csv_path, "Vidur attention profile", _ATTN_COLS)
    have_ops = [op for op in ATTN_OPS + ATTN_UNUSED if f"time_stats.{op}.median" in df.columns]
    if not any(op in ATTN_OPS for op in have_ops):
        raise ComputeDBError(f"{csv_path}:1: not a Vidur attention profile (no time_stats.<op>.median column for "
                             f"{', '.join(ATTN_OPS)})")
    notes = []
    has_backend = "attention_backend" in df.columns
    if backend is not None:
        if not has_backend:
            raise ComputeDBError(f"{csv_path}:1: --attention-backend {backend}: the file has no attention_backend "
                                 "column")
        names = sorted({str(x) for x in df["attention_backend"].dropna()})
        df = df[df["attention_backend"].astype(str).str.lower() == backend.lower()]
        if df.empty:
            raise ComputeDBError(f"{csv_path}: no rows of attention backend {backend!r} (the file has "
                                 f"{', '.join(names) or 'none'})")
    groups: dict[tuple[KernelKey, str], list] = defaultdict(list)
    parts: dict[str, int] = defaultdict(int)
    without_time = 0
    for i, rec in zip(df.index, df.to_dict("records")):
        where = f"{csv_path}:{int(i) + 2}"
        src = source
        if has_backend and isinstance(rec.get("attention_backend"), str) and rec["attention_backend"].strip():
            src = f"{source}:{rec['attention_backend'].strip()}"
        for op in ATTN_OPS:
            if f"time_stats.{op}.median" not in rec:
                continue
            key = vidur_attention_key(op, rec, where)
            if key is None:
                continue
            stats = _stats_ms(rec, op)
            if stats is None:
                without_time += 1
                continue
            groups[(key, src)].append(stats)
    rows = []
    for (key, src), stats in groups.items():
        rows.append(merge_rows(gpu, key, src, stats))
        part = {"flash_attn": "attn_prefill", "attn_decode": "attn_decode", "memcpy": "attn_kv_cache_save"}[key.kind]
        parts[_ATTN_PART[part]] += 1
    if not rows:
        raise ComputeDBError(f"{csv_path}: no attention row with a positive time (of {len(df)} data rows)")
    unused = [op for op in have_ops if op in ATTN_UNUSED]
    if unused:
        notes.append(f"{', '.join(unused)}: not used (clustersim's attention has no separate reshape kernel: the "
                     "reshapes are views or fused)")
    if without_time:
        notes.append(f"{without_time} attention cell(s) without a positive median time")
    return rows, dict(parts), notes


def import_vidur_network_csv(csv_path: str | Path, gpu: str, source: str) -> tuple[list[CollectiveRow], list[str]]:
    """Collective rows of one Vidur all_reduce.csv / send_recv.csv (ms -> s). Returns (rows, notes)."""
    csv_path = Path(csv_path)
    df = _read_csv(csv_path, "Vidur network profile", _NET_COLS)
    default = csv_path.stem.lower()
    # (collective, workers, per node, size) -> rank -> medians/stats of that rank
    per: dict[tuple[str, int, int, int], dict[int, list]] = defaultdict(lambda: defaultdict(list))
    notes, unknown, without_time = [], set(), 0
    for i, rec in zip(df.index, df.to_dict("records")):
        where = f"{csv_path}:{int(i) + 2}"
        vname = str(rec.get("collective") or default).strip().lower()
        if vname not in VIDUR_COLLECTIVES:
            unknown.add(vname)
            continue
        if f"time_stats.{vname}.median" not in rec:
            raise ComputeDBError(f"{where}: no column time_stats.{vname}.median for collective {vname}")
        nw, size = _int_field(rec, "num_workers", where), _int_field(rec, "size", where)
        dpn = _int_field(rec, "devices_per_node", where)
        if nw < 2:
            raise ComputeDBError(f"{where}: num_workers must be >= 2 for a collective, got {nw}")
        if dpn > nw or nw % dpn:
            raise ComputeDBError(f"{where}: devices_per_node {dpn} must divide num_workers {nw}")
        stats = _stats_ms(rec, vname)
        if stats is None:
            without_time += 1
            continue
        rank = _int_field(rec, "rank", where, 0) if "rank" in rec else 0
        per[(VIDUR_COLLECTIVES[vname], nw, dpn, size)][rank].append(stats)
    rows = []
    for (coll, nw, dpn, size), ranks in sorted(per.items()):
        merged = [np.median(np.asarray(v), axis=0) for v in ranks.values()]   # one rank: median of repeats
        slow = max(merged, key=lambda m: m[1])                                 # the slowest rank
        rows.append(CollectiveRow(gpu, coll, nw, dpn, size, float(slow[0]), float(slow[1]), float(slow[2]),
                                  float(slow[3]), 0, "imported", source))
    if unknown:
        notes.append(f"collective(s) {', '.join(sorted(unknown))}: not used (known: {', '.join(VIDUR_COLLECTIVES)})")
    if without_time:
        notes.append(f"{without_time} row(s) without a positive median time")
    if not rows:
        raise ComputeDBError(f"{csv_path}: no collective row with a positive time (of {len(df)} data rows"
                             + (f"; {notes[0]}" if notes else "") + ")")
    return rows, notes


@dataclass
class VidurImport:
    """What `import_vidur_profiles` found: kernel rows, collective rows, per-file-kind counts, skipped files."""
    rows: list[KernelRow] = field(default_factory=list)
    collectives: list[CollectiveRow] = field(default_factory=list)
    files: dict[str, int] = field(default_factory=lambda: defaultdict(int))       # file name -> files
    counts: dict[str, int] = field(default_factory=lambda: defaultdict(int))      # file name -> rows
    parts: dict[str, int] = field(default_factory=lambda: defaultdict(int))       # attention part -> rows
    gpus: dict[str, set] = field(default_factory=lambda: defaultdict(set))        # file name -> GPUs
    skipped: list[str] = field(default_factory=list)                              # "path: reason"


def _gpu_folder(parts: tuple[str, ...]) -> int | None:
    """Index of the first folder naming a Vidur GPU (a100, h100, or a node type such as h100_dgx)."""
    for i, part in enumerate(parts):
        token = part.lower()
        if token in VIDUR_GPU_NAMES or re.split(r"[_-]", token)[0] in VIDUR_GPU_NAMES:
            return i
    return None


def import_vidur_profiles(directory: str | Path, token_counts: frozenset[int] | None = None,
                          attention_backend: str | None = None) -> VidurImport:
    """Every Vidur profile under `directory` (any depth): `<gpu>/<org>/<model>/{mlp,attention}.csv` and
    `<gpu>_<node type>/{all_reduce,send_recv}.csv` (Vidur's data/profiling/{compute,network} layout works as it
    is). Every other file, and files under no GPU folder, are listed in `skipped` with the reason. A profile
    file without the expected columns or without data rows is an error; so is a folder giving no row."""
    directory = Path(directory)
    if not directory.is_dir():
        raise ComputeDBError(f"{directory}: Vidur profiling directory not found")
    out = VidurImport()
    for f in sorted(p for p in directory.rglob("*") if p.is_file()):
        rel = f.relative_to(directory)
        name = f.name.lower()
        if name not in VIDUR_FILES:
            out.skipped.append(f"{rel}: not a Vidur profile (expected {', '.join(VIDUR_FILES)})")
            continue
        i = _gpu_folder(rel.parts[:-1])
        if i is None:
            out.skipped.append(f"{rel}: no GPU folder in its path (a folder named {' or '.join(VIDUR_GPU_NAMES)}, "
                               "or a node type such as h100_dgx, says which GPU measured it)")
            continue
        gpu = VIDUR_GPU_NAMES.get(rel.parts[i].lower()) or VIDUR_GPU_NAMES[re.split(r"[_-]", rel.parts[i].lower())[0]]
        model = "/".join(rel.parts[i + 1:-1]) or rel.parts[i]
        if name == "mlp.csv":
            rows = import_vidur_csv(f, gpu, f"vidur:{model}", token_counts)
            if not rows:
                raise ComputeDBError(f"{f}: no kernel row with a positive time"
                                     + (" at the kept token counts" if token_counts is not None else ""))
            out.rows += rows
        elif name == "attention.csv":
            rows, parts, notes = import_vidur_attention_csv(f, gpu, f"vidur:{model}", attention_backend)
            out.rows += rows
            for k, v in parts.items():
                out.parts[k] += v
            out.skipped += [f"{rel}: {n}" for n in notes]
        else:
            node = rel.parts[-2] if len(rel.parts) > 1 else rel.parts[i]
            rows, notes = import_vidur_network_csv(f, gpu, f"vidur-net:{node}")
            out.collectives += rows
            out.skipped += [f"{rel}: {n}" for n in notes]
        out.files[name] += 1
        out.counts[name] += len(rows)
        out.gpus[name].add(gpu)
    if not out.rows and not out.collectives:
        why = "; ".join(out.skipped[:3]) + (" ..." if len(out.skipped) > 3 else "")
        raise ComputeDBError(f"{directory}: no Vidur profile rows imported ({why or 'the folder is empty'})")
    return out


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
        raw = path.read_bytes()
        lines = raw.decode("utf-8").splitlines()
    except OSError as exc:
        raise ComputeDBError(f"{path}: cannot read AIOB file ({exc.strerror})") from None
    except UnicodeDecodeError as exc:
        line = raw.count(b"\n", 0, exc.start) + 1
        raise ComputeDBError(f"{path}:{line}: not UTF-8 text") from None
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
