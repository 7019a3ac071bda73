"""Kernel keys: what identifies one kernel measurement, and the work (FLOPs, HBM bytes) of each key.

A key is (kind, variant, dims, dtype, causal) with dims ordered as workload_gen.workload.COMPUTE_KINDS.
The GPU is not part of the key; the store files rows under (gpu, key).

FLOPs and bytes are recomputed here from the key so that lookups depend only on the key (the generator's
own ComputeOp.flops/bytes are not consulted). What is modelled per kind (bytes = HBM read + write, ideal
reuse; e = element size of the dtype):
- gemm Y[m,n]=X[m,k]W[k,n]: 2mnk FLOPs, e(mk + kn) + e_out·mn bytes. Backward GEMMs are GEMMs too:
  dgrad dX = dY·W^T is an (m, n'=k, k'=n) GEMM, wgrad dW = X^T·dY is a (m'=k, n'=n, k'=m) GEMM
  (`backward_gemm_shapes`); their ops carry those dims, so a forward measurement of the same (m, n, k)
  informs them (`gemm_equivalent`; the layouts differ only in operand transposes).
- grouped_gemm: `groups` GEMMs of (m,n,k) in one launch; attn_bmm: `batch` GEMMs of (m,n,k).
- flash_attn fwd: 2·b·h·sq·skv·(dqk + dv) FLOPs, halved by a causal mask (exact fraction of unmasked
  score entries for bottom-right-aligned masks); bwd = 2.5 × fwd FLOPs (five GEMMs instead of two)
  and reads q, k, v, o, dO, writes dq, dk, dv. Bytes: q, k, v read, o written.
- attn_decode (one query token per request, the batch's cached K/V read once): 2·h·kv·(dqk + dv) FLOPs,
  e·kv·kv_heads·(dqk + dv) + e_out·b·h·(dqk + dv) bytes; memory-bound (a family of its own).
- memory-bound kinds (norms, activations, rotary, dropout, softmax, embedding, cross-entropy, router,
  permute, element-wise, optimizer, memcpy): bytes per element as documented in `_bytes`, FLOPs small.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from compute_db.errors import ComputeDBError
from workload_gen.workload import COMPUTE_KINDS

DTYPES = ("bf16", "fp16", "fp8", "fp32")
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp8": 1, "fp32": 4}
VARIANTS = {
    "gemm": ("fwd", "dgrad", "wgrad"),
    "grouped_gemm": ("fwd", "dgrad", "wgrad"),
    "attn_bmm": ("fwd", "bwd"),
    "optimizer": ("step", "fwd", ""),
    "memcpy": ("fwd", ""),
    "attn_decode": ("fwd",),
}
DEFAULT_VARIANTS = ("fwd", "bwd")

# Op family: kinds that share one fitted efficiency model.
FAMILY = {
    "gemm": "gemm", "grouped_gemm": "gemm", "attn_bmm": "gemm",
    "flash_attn": "flash_attn",
    "attn_decode": "attn_decode",        # memory-bound: reads the batch's cached K/V once
    "layernorm": "layernorm", "rmsnorm": "rmsnorm",   # separate: measured kernels differ ~2x per byte
    "gelu": "gelu", "swiglu": "swiglu",
    "rotary": "rotary",
    "dropout": "elementwise", "elementwise": "elementwise", "memcpy": "elementwise",
    "softmax": "softmax", "embedding": "embedding", "cross_entropy": "cross_entropy",
    "router_topk": "router", "permute": "permute", "unpermute": "permute",
    "optimizer": "optimizer",
}
COMPUTE_BOUND_FAMILIES = ("gemm", "flash_attn")

FLASH_BWD_FLOP_FACTOR = 2.5


@dataclass(frozen=True, slots=True)
class KernelKey:
    kind: str
    variant: str
    dims: tuple[int, ...]      # values in COMPUTE_KINDS[kind] order
    dtype: str
    causal: bool = False

    @property
    def fields(self) -> tuple[str, ...]:
        return COMPUTE_KINDS[self.kind]

    @property
    def family(self) -> str:
        return FAMILY[self.kind]

    def dims_text(self) -> str:
        return ",".join(f"{f}={v}" for f, v in zip(self.fields, self.dims))

    def text(self) -> str:
        """Stable one-line form: kind/variant/dtype[/causal]/f=v,..."""
        c = "/causal" if self.causal else ""
        return f"{self.kind}/{self.variant}/{self.dtype}{c}/{self.dims_text()}"


def _normalize_variant(kind: str, variant: str) -> str:
    allowed = VARIANTS.get(kind, DEFAULT_VARIANTS)
    v = variant or ""
    if kind == "optimizer":
        return "step"
    if kind == "memcpy":
        return "fwd"
    if kind not in ("gemm", "grouped_gemm") and v in ("dgrad", "wgrad"):  # e.g. embedding "wgrad"
        v = "bwd"
    if v == "":
        v = "fwd"
    if v not in allowed:
        raise ComputeDBError(f"kernel {kind}: unknown variant '{variant}' (expected one of {', '.join(allowed)})")
    return v


def make_key(kind: str, variant: str, dims: dict[str, int] | tuple, dtype: str,
             causal: bool = False) -> KernelKey:
    """Validated key. dims: {field: value} or values in COMPUTE_KINDS order; all must be positive ints."""
    if kind not in COMPUTE_KINDS:
        raise ComputeDBError(f"unknown kernel kind '{kind}' (known: {', '.join(COMPUTE_KINDS)})")
    fields = COMPUTE_KINDS[kind]
    if isinstance(dims, dict):
        missing = [f for f in fields if f not in dims]
        if missing:
            raise ComputeDBError(f"kernel {kind}: missing shape field(s) {', '.join(missing)}")
        extra = [f for f in dims if f not in fields]
        if extra:
            raise ComputeDBError(f"kernel {kind}: unknown shape field(s) {', '.join(extra)} "
                                 f"(expected {', '.join(fields)})")
        values = tuple(dims[f] for f in fields)
    else:
        values = tuple(dims)
        if len(values) != len(fields):
            raise ComputeDBError(f"kernel {kind}: expected {len(fields)} shape values ({', '.join(fields)})")
    out = []
    for f, v in zip(fields, values):
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != int(v):
            raise ComputeDBError(f"kernel {kind}: shape field '{f}' must be a positive integer, got {v!r}")
        if v <= 0:
            raise ComputeDBError(f"kernel {kind}: shape field '{f}' must be positive, got {int(v)}")
        out.append(int(v))
    if dtype not in DTYPES:
        raise ComputeDBError(f"kernel {kind}: unknown dtype '{dtype}' (expected one of {', '.join(DTYPES)})")
    is_attn = kind in ("flash_attn",)
    return KernelKey(kind, _normalize_variant(kind, variant), tuple(out), dtype, bool(causal) and is_attn)


def key_of(op) -> KernelKey:
    """Key of a workload_gen ComputeOp (validates the shape)."""
    return make_key(op.kind, op.variant, dict(op.shape), op.dtype, op.causal)


def parse_key_text(text: str) -> KernelKey:
    """Inverse of KernelKey.text()."""
    parts = text.strip().split("/")
    if len(parts) not in (4, 5):
        raise ComputeDBError(f"malformed kernel key '{text}' (expected kind/variant/dtype[/causal]/f=v,...)")
    causal = len(parts) == 5
    if causal and parts[3] != "causal":
        raise ComputeDBError(f"malformed kernel key '{text}'")
    dims: dict[str, int] = {}
    for item in parts[-1].split(","):
        name, _, value = item.partition("=")
        try:
            dims[name] = int(value)
        except ValueError:
            raise ComputeDBError(f"malformed kernel key '{text}': '{item}' is not field=integer") from None
    return make_key(parts[0], parts[1], dims, parts[2], causal)


def backward_gemm_shapes(m: int, n: int, k: int) -> dict[str, tuple[int, int, int]]:
    """(m, n, k) of the three GEMMs of Y[m,n] = X[m,k] W[k,n]: dgrad dX = dY·W^T is [m,n]x[n,k] -> (m, k, n);
    wgrad dW = X^T·dY is [k,m]x[m,n] -> (k, n, m). Backward GEMM ops carry these dims (as workload_gen emits)."""
    return {"fwd": (m, n, k), "dgrad": (m, k, n), "wgrad": (k, n, m)}


def gemm_equivalent(key: KernelKey) -> tuple[int, int, int, int]:
    """(count, m, n, k) of the plain GEMM(s) a GEMM-family kernel computes.

    A dgrad/wgrad key carries the dims of the GEMM it computes (backward_gemm_shapes), so its equivalent
    is the same (m, n, k); only the operand layout (transposes) differs from a forward GEMM.
    grouped_gemm/attn_bmm: `groups`/`batch` GEMMs of (m, n, k).
    """
    d = key.dims
    if key.kind == "gemm":
        return (1, *d)
    if key.kind in ("grouped_gemm", "attn_bmm"):
        return d
    raise ComputeDBError(f"kernel {key.kind} is not a GEMM")


def work_of(kind: str, variant: str, dtype: str, causal: bool, d: Mapping[str, Any]) -> tuple[Any, Any]:
    """(FLOPs, HBM bytes) from shape fields `d` (ints, floats or numpy arrays; see the module docstring).

    Non-decreasing in every field, which keeps the roofline monotone when dimensions are padded.
    """
    e = ELEMENT_BYTES[dtype]
    e_out = 2 if dtype == "fp8" else e
    bwd = variant == "bwd"
    if FAMILY[kind] == "gemm":
        count = d["groups"] if kind == "grouped_gemm" else (d["batch"] if kind == "attn_bmm" else 1)
        m, n, kk = d["m"], d["n"], d["k"]
        return 2.0 * count * m * n * kk, count * (e * (m * kk + kk * n) + e_out * m * n)
    if kind == "flash_attn":
        b, sq, skv, h, kvh = d["batch"], d["seq_q"], d["seq_kv"], d["heads"], d["kv_heads"]
        dqk, dv = d["head_dim_qk"], d["head_dim_v"]
        if causal:
            # unmasked entries of the sq x skv score matrix, mask aligned to the bottom-right corner
            a = np.minimum(sq, skv)
            scores = a * skv - a * (a - 1) / 2
        else:
            scores = sq * skv
        flops = 2.0 * b * h * scores * (dqk + dv)
        q, kx, v, o = b * sq * h * dqk, b * skv * kvh * dqk, b * skv * kvh * dv, b * sq * h * dv
        if bwd:  # read q, k, v, o, dO, lse; write dq, dk, dv
            return FLASH_BWD_FLOP_FACTOR * flops, 2 * e * (q + kx + v) + 2 * e_out * o + 4 * b * h * sq
        return flops, e * (q + kx + v) + e_out * o + 4 * b * h * sq
    if kind == "attn_decode":
        b, kv, h, kvh = d["batch"], d["kv_tokens"], d["heads"], d["kv_heads"]
        dqk, dv = d["head_dim_qk"], d["head_dim_v"]
        # every query head of a request scores its request's cached tokens: 2 GEMV-like products;
        # bytes: cached K and V read once (kv_tokens x kv_heads), the query read and the output written
        return 2.0 * h * kv * (dqk + dv), e * kv * kvh * (dqk + dv) + e_out * b * h * (dqk + dv)
    if kind in ("layernorm", "rmsnorm"):
        n = d["tokens"] * d["hidden"]
        # fwd: read x, write y (+ weights); bwd: read x, dy, write dx (+ fp32 weight-grad partials)
        return (8.0 if bwd else 5.0) * n, (3 if bwd else 2) * e_out * n + 8 * d["hidden"] * (2 if bwd else 1)
    if kind in ("gelu", "swiglu"):
        n = d["tokens"] * d["width"]
        width_in = 2 if kind == "swiglu" else 1
        # fwd: read input (2x wide for swiglu), write output; bwd: read input and dy, write dinput
        return (16.0 if bwd else 8.0) * n, e_out * n * ((2 * width_in + 1) if bwd else (width_in + 1))
    if kind == "rotary":
        n = d["tokens"] * d["heads"] * d["head_dim"]
        return 3.0 * n, 2 * e_out * n
    if kind == "dropout":
        n = d["numel"]
        return 1.0 * n, n * (2 * e_out + 1)            # + 1-byte mask
    if kind == "elementwise":
        n = d["numel"]
        return 1.0 * n, 3 * e_out * n                  # two inputs, one output (residual add)
    if kind == "memcpy":
        return 0.0 * d["bytes"], 2 * d["bytes"]
    if kind == "softmax":
        n = d["rows"] * d["cols"]
        return 5.0 * n, (3 if bwd else 2) * e_out * n
    if kind == "embedding":
        n = d["tokens"] * d["hidden"]
        # fwd: gather rows (the vocab size does not matter); bwd (dense, as torch): zero-fill the
        # [vocab, hidden] gradient shard, read dy and scatter-add (read-modify-write) into it
        if bwd:
            return 1.0 * n, e_out * n + 2 * e_out * n + e_out * d["vocab"] * d["hidden"] + 8 * d["tokens"]
        return 0.0 * n, 2 * e_out * n + 8 * d["tokens"]
    if kind == "cross_entropy":
        n = d["tokens"] * d["vocab"]
        # fwd: read logits (max, sum-exp, target gather); bwd: read logits, write dlogits
        return 5.0 * n, (2 if bwd else 1) * e_out * n + 8 * d["tokens"]
    if kind == "router_topk":
        n = d["tokens"] * d["experts"]
        return 8.0 * n, 4 * n * (3 if bwd else 2) + 8 * d["tokens"] * d["topk"]
    if kind in ("permute", "unpermute"):
        n = d["tokens"] * d["hidden"] * d["topk"]
        return 0.0 * n, 2 * e_out * n + 16 * d["tokens"] * d["topk"]
    if kind == "optimizer":
        p = d["params"]
        # Adam over fp32 shard: read param, grad, m, v (4 x 4 B); write param, m, v (3 x 4 B) + bf16 copy
        return 12.0 * p, 30 * p
    raise ComputeDBError(f"no work model for kernel kind '{kind}'")


def work(key: KernelKey) -> tuple[float, float]:
    """(FLOPs, HBM bytes) of one kernel on one GPU, from its key (module docstring)."""
    flops, byts = work_of(key.kind, key.variant, key.dtype, key.causal, dict(zip(key.fields, key.dims)))
    return float(flops), float(byts)
