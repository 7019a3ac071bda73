"""The serving kernels of a model, on a grid: what `clustersim measure --serving` times.

The keys are built by the serving cost model's own kernel builders (workload_gen.inference), so a
measured row answers exactly the lookup a serving simulation makes at a grid point, and its neighbours
interpolate between grid points:
- token-level kernels over `tokens` (T rows of the batch): every layer's norms, projections, rotary, MLP or
  MoE kernels, residual adds and KV-cache write, the embedding and the final norm; the LM head and
  sampling over the same values as output rows;
- prefill attention over (chunk, kv): a chunk of `chunk` new tokens whose KV length, cached tokens plus the
  chunk, is `kv` (pairs with kv >= chunk), plus the 1 x 1 kernel the cost model charges once per batch;
- decode attention over (batch, kv): `batch` requests of `kv` tokens each (context + the new token), one
  kernel reading batch·kv cached tokens.
Per TP degree the kernels are one rank's shards. Collectives are not kernels (netsim, or imported curves).

Grid axes: `tokens`, `chunk`, `kv`, `batch`. A value list is comma-separated integers or ranges:
`lo:hi` = lo, hi and every 2^k and 3·2^k between (the shipped DB's token grid, 2 points per octave),
`lo:hi:pow2` = lo, hi and every 2^k between.
"""

from __future__ import annotations

from dataclasses import dataclass

from compute_db.errors import ComputeDBError
from compute_db.keys import KernelKey, key_of

AXES = ("tokens", "chunk", "kv", "batch")
# Vidur-like defaults: token counts up to 8k (the token budgets of chunked and whole-prompt schedulers);
# prefill chunks up to 8k and KV lengths up to the model's context; decode batches up to 256.
DEFAULT_GRID = {"tokens": "1:8192", "chunk": "1:8192:pow2", "kv": "1:{max_len}:pow2", "batch": "1:256:pow2"}
MAX_AXIS_VALUE = 1 << 22


@dataclass(frozen=True)
class ServingGrid:
    tokens: tuple[int, ...]      # rows of the token-level kernels (and output rows of the LM head)
    chunk: tuple[int, ...]       # prefill chunk lengths (new tokens)
    kv: tuple[int, ...]          # KV length per request: prefill offset + chunk; decode context + 1
    batch: tuple[int, ...]       # decode batch sizes


def _range(lo: int, hi: int, pow2_only: bool) -> list[int]:
    out = {lo, hi}
    x = 1
    while x <= hi:
        for v in ((x,) if pow2_only else (x, 3 * x)):
            if lo <= v <= hi:
                out.add(v)
        x *= 2
    return sorted(out)


def parse_values(text: str, where: str) -> tuple[int, ...]:
    """Sorted distinct positive integers of a value list (module docstring); ComputeDBError naming `where`."""
    out: set[int] = set()
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ComputeDBError(f"{where}: empty value in {text!r}")
        parts = item.split(":")
        try:
            nums = [int(x) for x in parts[:2]]
        except ValueError:
            nums = []
        if not nums or len(parts) > 3:
            raise ComputeDBError(f"{where}: {item!r} is not an integer, lo:hi or lo:hi:pow2")
        if len(parts) == 1:
            vals = nums
        else:
            lo, hi = nums
            if len(parts) == 3 and parts[2] != "pow2":
                raise ComputeDBError(f"{where}: range step must be 'pow2', got {parts[2]!r} in {item!r}")
            if lo < 1 or hi < lo:
                raise ComputeDBError(f"{where}: range {item!r} needs 1 <= lo <= hi")
            vals = _range(lo, min(hi, MAX_AXIS_VALUE), len(parts) == 3)
        for v in vals:
            if not 1 <= v <= MAX_AXIS_VALUE:
                raise ComputeDBError(f"{where}: values must be in 1..{MAX_AXIS_VALUE}, got {v}")
        out.update(vals)
    return tuple(sorted(out))


def parse_grid(specs: list[str] | None, max_len: int) -> ServingGrid:
    """A grid from `--grid AXIS=VALUES` items (each axis at most once; others take DEFAULT_GRID, `kv` up to
    `max_len`, the model's context length)."""
    given: dict[str, str] = {}
    for spec in specs or ():
        axis, eq, values = spec.partition("=")
        axis = axis.strip()
        if not eq or axis not in AXES:
            raise ComputeDBError(f"--grid {spec!r}: expected AXIS=VALUES with AXIS one of {', '.join(AXES)}")
        if axis in given:
            raise ComputeDBError(f"--grid: axis {axis} given twice")
        given[axis] = values
    vals = {}
    for axis in AXES:
        text = given.get(axis, DEFAULT_GRID[axis].format(max_len=max(1, max_len)))
        vals[axis] = parse_values(text, f"--grid {axis}")
    return ServingGrid(**vals)


def serving_key_parts(spec, grid: ServingGrid) -> dict[str, list[KernelKey]]:
    """Distinct kernel keys of one deployment shape (workload_gen.inference.InferenceSpec) on `grid`, by part:
    "token-level", "prefill attention", "decode attention" (first-seen order, no key in two parts)."""
    from workload_gen import inference as inf
    m = spec.model
    kinds = sorted({m.layer_is_moe(i) for i in range(m.num_layers)})
    parts: dict[str, list] = {"token-level": [], "prefill attention": [], "decode attention": []}
    for T in grid.tokens:
        ops = list(inf.embedding_ops(spec, T)) + list(inf.final_norm_ops(spec, T)) + list(inf.head_ops(spec, T))
        for moe in kinds:
            ops += inf.layer_token_ops(spec, T, moe)
        parts["token-level"] += ops
    pairs = {(1, 1)} | {(c, k) for c in grid.chunk for k in grid.kv if k >= c}
    for c, k in sorted(pairs):
        parts["prefill attention"] += inf.prefill_attention_ops(spec, c, k - c)
    for b in grid.batch:
        for k in grid.kv:
            parts["decode attention"].append(inf.decode_attention_op(spec, b, b * k))
    seen: set[KernelKey] = set()
    out: dict[str, list[KernelKey]] = {}
    for name, ops in parts.items():
        keys = []
        for op in ops:
            if getattr(op, "is_comm", False) or getattr(op, "time_s", None) is not None:
                continue
            key = key_of(op)
            if key not in seen:
                seen.add(key)
                keys.append(key)
        out[name] = keys
    return out
