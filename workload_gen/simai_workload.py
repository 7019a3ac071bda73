"""SimAI workload text files (reference/simai_formats.md §1): read and write.

Reading (`read_simai_workload`):
- Policies `HYBRID_TRANSFORMER_FWD_IN_BCKWD` (training) and `MICRO` (collective micro-benchmarks);
  SimAI's other policy names are rejected with a one-line message. Header keys are found by exact
  token match in any order; missing keys default to ep 1, pp 1, vpp 1, ga 1, all_gpus = tp x pp
  (data parallel 1; override with `world_size=`), pp_comm 0. `checkpoints:` lists are skipped.
- Every layer line must have exactly 12 whitespace-separated fields; errors name file:line.
- Column-relative groups: plain names are TP in the forward / input-grad columns and DP in the
  weight-grad column; `<X>_EP` is EP; `<X>_DP_EP` is expert-data-parallel ("edp").
  `ALLREDUCEALLTOALL` is read as an all-to-all; `BROADCAST` and `NONE` carry no traffic.
- AICB semantics are folded back: lines before the first repeated block (AICB's data-parallel lines)
  and after the last one (cross-entropy / optimizer lines) run once per iteration; the middle block,
  when it consists of `ga` identical copies (same names, comm types and sizes), is one micro-batch
  (times: per-line median over the copies, which drops AICB's one-off first-copy outliers).
  Top lines become the end of the backward list (micro-batch "last"), bottom lines the end of the
  forward / start of the backward list (micro-batch "last"). Times <= 1 ns are AICB placeholders and
  dropped. Compute ops are opaque timed kernels (kind "elementwise", numel 1, `time_s` set); the model
  is a placeholder (SimAI files carry no model dimensions). The file describes pipeline stage 0; every
  stage of the imported Workload runs that program, with pp send/recv of `pp_comm` bytes.

Writing (`write_simai_workload`): SimAI can only express one stage and a flat layer list, so the
richer Workload is flattened as AICB does (documented in docs/workload_gen.md):
- pipeline stage 0 only; virtual chunks are written one after another as plain layers and the header
  `vpp:` carries the number of layer lines' transformer layers (AICB's convention);
- gradient accumulation unrolled: the micro-batch program is repeated `ga` times;
- once-per-iteration ops (data-parallel gradient buckets, distributed-optimizer parameter gathers,
  iteration-end all-reduces, the optimizer step) are written as lines at the top, so that SimAI's
  bottom-up backward walk issues them last;
- each forward segment (kernels up to a comm) becomes one line; backward segments are attached to lines
  so that SimAI's bottom-up walk replays the backward order (extra lines when backward has more
  segments); kernels before a comm go to the input-grad column, wgrad kernels to the weight-grad column;
- groups SimAI cannot express (cp, pp, embedding, mp; etp unless etp == tp) are dropped; pipeline
  traffic is the header's `pp_comm`;
- compute times come from `time_of(op) -> seconds` (sim passes compute_db times); the default is a
  PLACEHOLDER roofline (400 TFLOP/s, 2 TB/s) for inspecting files, not for results.
"""

from __future__ import annotations

import base64
import gc
import json
import math
import os
import re
import zlib
from collections.abc import Callable, Iterable
from operator import itemgetter
from pathlib import Path

from workload_gen.errors import ConfigFileError
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.workload import ChunkProgram, CommOp, ComputeOp, Op, StageProgram, Workload

TRAINING = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
MICRO = "MICRO"
OTHER_POLICIES = ("DATA", "HYBRID_TRANSFORMER", "HYBRID_DLRM", "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA",
                  "HYBRID_CUSTOMIZED", "DISTRIBUTED_INFERENCE")
_TO_SIMAI = {"all_reduce": "ALLREDUCE", "all_gather": "ALLGATHER", "reduce_scatter": "REDUCESCATTER",
             "all_to_all": "ALLTOALL"}
_FROM_SIMAI = [("ALLREDUCEALLTOALL", "all_to_all"), ("ALLREDUCE", "all_reduce"), ("ALLGATHER", "all_gather"),
               ("REDUCESCATTER", "reduce_scatter"), ("ALLTOALL", "all_to_all")]
UPDATE_NS = 100
SECTION = "#clustersim"
SECTION_VERSION = "v1"
PLACEHOLDER_FLOPS = 400e12
PLACEHOLDER_BPS = 2e12


def placeholder_time(op: ComputeOp) -> float:
    """PLACEHOLDER kernel time (s): roofline at 400 TFLOP/s and 2 TB/s. Not calibrated."""
    if op.time_s is not None:
        return op.time_s
    return max(op.flops / PLACEHOLDER_FLOPS, op.bytes / PLACEHOLDER_BPS)


# ---------------------------------------------------------------------------------------------- reading

# Upper bounds of header and line values: far above any real job, low enough that nothing downstream
# (plan validation, the simulator's micro-batch loop, byte arithmetic) runs away on a typo'd digit.
MAX_GPUS = 1 << 20            # all_gpus, and every group size (TP, EP, PP <= all_gpus)
MAX_GA = 1 << 16              # micro-batches per iteration
MAX_VPP = 1 << 20             # header vpp (AICB writes the layer count; unused by clustersim)
MAX_LINES = 10_000_000        # layer lines announced on line 2
MAX_BYTES = 1 << 50           # one message (pp_comm and comm sizes), 1 PiB
MAX_NS = 10 ** 15             # one compute time, about 11.6 days
_HEADER_RANGES = {"tp": (1, MAX_GPUS), "ep": (1, MAX_GPUS), "pp": (1, MAX_GPUS), "vpp": (1, MAX_VPP),
                  "ga": (1, MAX_GA), "all_gpus": (1, MAX_GPUS), "pp_comm": (0, MAX_BYTES)}
_INT_RE = re.compile(r"[+-]?\d{1,30}")
_FLOAT_RE = re.compile(r"[+-]?(\d{1,30}\.?\d{0,30}|\.\d{1,30})([eE][+-]?\d{1,3})?")


def _parse_header(tokens: list[str], where: str) -> dict:
    policy = tokens[0] if tokens else ""
    if policy in OTHER_POLICIES:
        raise ConfigFileError(f"{where}: unsupported SimAI parallelism policy {policy!r} "
                              f"(clustersim reads {TRAINING} and {MICRO})")
    if policy not in (TRAINING, MICRO):
        raise ConfigFileError(f"{where}: not a SimAI workload file (first token {policy[:40]!r}; expected "
                              f"{TRAINING} or {MICRO})")
    keys = {"model_parallel_NPU_group:": "tp", "ep:": "ep", "pp:": "pp", "vpp:": "vpp", "ga:": "ga",
            "all_gpus:": "all_gpus", "pp_comm": "pp_comm", "pp_comm:": "pp_comm"}
    out: dict = {"policy": policy, "checkpoints": []}
    i = 1
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("checkpoints:", "checkpoint_initiates:"):
            n = _int(tokens[i + 1] if i + 1 < len(tokens) else "", where, tok, 0, len(tokens))
            if i + 2 + n > len(tokens):
                raise ConfigFileError(f"{where}: {tok} announces {n} layer indices but the header has "
                                      f"{len(tokens) - i - 2} more tokens")
            vals = [_int(x, where, tok, 0, MAX_LINES) for x in tokens[i + 2:i + 2 + n]]
            if tok == "checkpoints:":
                out["checkpoints"] = vals
            i += 2 + n
            continue
        if tok in keys:
            if i + 1 >= len(tokens):
                raise ConfigFileError(f"{where}: header key {tok!r} has no value")
            key = keys[tok]
            if key in out:   # SimAI keeps the last copy; an edit that left two is ambiguous
                raise ConfigFileError(f"{where}: header key {tok!r} is given twice")
            lo, hi = _HEADER_RANGES[key]
            out[key] = _int(tokens[i + 1], where, tok, lo, hi)
            i += 2
            continue
        i += 1
    return out


def _int(s: str, where: str, what: str, lo: int | None = None, hi: int | None = None) -> int:
    """An integer field: decimal digits, or a finite float literal with an integral value (AICB writes
    neither, but hand-made files do); `lo`/`hi`: the inclusive range it must lie in."""
    v = None
    if s.isascii() and s.isdigit() and len(s) <= 30:        # the common case, first
        v = int(s)
    elif _INT_RE.fullmatch(s):
        v = int(s)
    elif _FLOAT_RE.fullmatch(s):
        f = float(s)
        if math.isfinite(f) and f == int(f):
            v = int(f)
    too_long = v is None and re.fullmatch(r"[+-]?\d+", s) is not None   # digits beyond any range
    if v is None and not too_long:
        raise ConfigFileError(f"{where}: {what} must be an integer (got {s[:40]!r})")
    if too_long or (lo is not None and v < lo) or (hi is not None and v > hi):
        rng = ("at most 30 digits" if lo is None and hi is None else f">= {lo}" if hi is None
               else f"between {lo} and {hi:,}" if lo is not None else f"<= {hi:,}")
        got = s if len(s) <= 40 else f"a {len(s)}-digit number"
        raise ConfigFileError(f"{where}: {what} must be {rng} (got {got})")
    return v


def _comm_from(name: str, column: str, where: str) -> tuple[str, str] | None:
    """(collective, group) of a SimAI comm type in a column ("fwd", "ig", "wg"); None for no traffic."""
    if name in ("NONE", "BROADCAST") or name.startswith("BROADCAST"):
        return None
    group = "tp" if column in ("fwd", "ig") else "dp"
    base = name
    if name.endswith("_DP_EP"):
        group, base = "edp", name[: -len("_DP_EP")]
    elif name.endswith("_EP"):
        group, base = "ep", name[: -len("_EP")]
    for prefix, coll in _FROM_SIMAI:
        if base.startswith(prefix):
            return coll, group
    raise ConfigFileError(f"{where}: unknown comm type {name!r} (expected ALLREDUCE, ALLGATHER, REDUCESCATTER, "
                          f"ALLTOALL, ALLREDUCEALLTOALL, with optional _EP / _DP_EP, or NONE)")


class _Line(tuple):
    """A layer line: (name, ns (fwd, ig, wg), comm (per column (collective, group) or None), size (per
    column bytes), line number). A tuple, so that thousands are made by C calls (_Line.of)."""
    __slots__ = ()
    name = property(itemgetter(0))
    ns = property(itemgetter(1))
    comm = property(itemgetter(2))
    size = property(itemgetter(3))
    lineno = property(itemgetter(4))
    of = classmethod(tuple.__new__)      # _Line.of((name, ns, comm, size, lineno))


_SIGNATURE = itemgetter(0, 2, 3)      # what makes two lines the same layer (name, comm, size), a C call


def _read_lines(path: str) -> tuple[dict, list[_Line], list[tuple[int, str]], str]:
    """(header, layer lines, trailer `#` lines as (line number, text), text the trailer's checksum covers;
    "" without a trailer)."""
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read().splitlines()
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a text file (not UTF-8)") from None
    rows = [(i + 1, t) for i, t in enumerate(map(str.split, raw)) if t]     # (blank: no fields)
    if not rows:
        raise ConfigFileError(f"{path}:1: empty file (expected a SimAI workload header)")
    header = _parse_header(rows[0][1], f"{path}:{rows[0][0]}")
    if len(rows) < 2:
        raise ConfigFileError(f"{path}:2: missing the number of layer lines")
    lineno, toks = rows[1]
    if len(toks) != 1:
        raise ConfigFileError(f"{path}:{lineno}: expected the number of layer lines (one integer), got {len(toks)} fields")
    n = _int(toks[0], f"{path}:{lineno}", "number of layer lines", 0, MAX_LINES)
    body = rows[2:2 + n]
    rest = rows[2 + n:]
    # SimAI reads exactly n layer lines and stops: what follows may only be `#` lines (clustersim's section)
    if len(body) != n or any(t[0].startswith("#") for _, t in body) \
            or any(not t[0].startswith("#") for _, t in rest):
        got = sum(1 for _, t in rows[2:] if not t[0].startswith("#"))
        raise ConfigFileError(f"{path}:{rows[1][0]}: header announces {n} layer lines but the file has {got}")
    lines = _parse_body_bulk(body)
    if lines is None:        # some field is bad: the line-by-line parse names the first one
        lines = _parse_body(path, body)
    last = body[-1][0] if body else rows[1][0]
    covered = "\n".join(ln.rstrip() for ln in raw[:last]) if rest else ""
    trailer = [(ln, raw[ln - 1].strip()) for ln, _ in rest]
    return header, lines, trailer, covered


# (field index, what, lo, hi) of a layer line's integer fields, in the order _parse_body checks them
_INT_FIELDS = ((2, "forward compute time", 0, MAX_NS), (5, "input-grad compute time", 0, MAX_NS),
               (8, "weight-grad compute time", 0, MAX_NS), (11, "weight-grad update time", 0, MAX_NS),
               (1, "dependency field", None, None), (4, "fwd comm size", 0, MAX_BYTES),
               (7, "ig comm size", 0, MAX_BYTES), (10, "wg comm size", 0, MAX_BYTES))
_COMM_FIELDS = (("fwd", 3, 4), ("ig", 6, 7), ("wg", 9, 10))


def _parse_body_bulk(body: list) -> list[_Line] | None:
    """_parse_body of valid layer lines, by distinct line: a file repeats a few dozen distinct lines
    thousands of times, so each distinct line is converted once (column by column: _int, _comm_from are
    pure functions of the text) and the lines share its values. None when a line has the wrong field
    count or a distinct value is invalid: then _parse_body reads the lines in order and raises its error
    for the first bad field."""
    if not body or {len(t) for _, t in body} != {12}:
        return None
    keys = list(map(tuple, map(itemgetter(1), body)))
    distinct = list(dict.fromkeys(keys))
    cols = list(zip(*distinct))
    conv: dict[int, list[int]] = {}
    try:
        for ci, what, lo, hi in _INT_FIELDS:
            col = cols[ci]
            values = {u: _int(u, "", what, lo, hi) for u in set(col)}
            conv[ci] = list(map(values.__getitem__, col))
        comms = []
        for col, ci, _si in _COMM_FIELDS:
            values = {u: _comm_from(u, col, "") for u in set(cols[ci])}
            comms.append(list(map(values.__getitem__, cols[ci])))
    except ConfigFileError:
        return None
    # per comm column: no comm type or size 0 -> (None, 0), as _parse_body
    cs, ss = [], []
    for k, (_c, _ci, si) in enumerate(_COMM_FIELDS):
        pairs = list(zip(comms[k], conv[si]))
        cs.append([None if c is None or size == 0 else c for c, size in pairs])
        ss.append([0 if c is None or size == 0 else size for c, size in pairs])
    # per distinct line (name, ns, comm, size); per line those and its line number
    parsed = dict(zip(distinct, zip(cols[0], zip(conv[2], conv[5], conv[8]), zip(*cs), zip(*ss))))
    return [_Line.of(parsed[key] + (lineno,)) for key, (lineno, _t) in zip(keys, body)]


def _parse_body(path: str, body: list) -> list[_Line]:
    """The layer lines (line number, fields) as _Lines, line by line; errors name file:line."""
    lines = []
    comm_of: dict = {}   # (name, column) -> parsed comm type
    for lineno, t in body:
        where = f"{path}:{lineno}"
        if len(t) != 12:
            raise ConfigFileError(f"{where}: a layer line needs exactly 12 fields (got {len(t)})")
        ns = (_int(t[2], where, "forward compute time", 0, MAX_NS),
              _int(t[5], where, "input-grad compute time", 0, MAX_NS),
              _int(t[8], where, "weight-grad compute time", 0, MAX_NS))
        _int(t[11], where, "weight-grad update time", 0, MAX_NS)   # validated; the reader does not use it
        _int(t[1], where, "dependency field")   # validated (SimAI reads an integer); unused here
        comms, sizes = [], []
        for col, ci, si in (("fwd", 3, 4), ("ig", 6, 7), ("wg", 9, 10)):
            size = _int(t[si], where, f"{col} comm size", 0, MAX_BYTES)
            c = comm_of.get((t[ci], col), False)
            if c is False:
                c = comm_of[(t[ci], col)] = _comm_from(t[ci], col, where)
            if c is None or size == 0:
                c, size = None, 0
            comms.append(c)
            sizes.append(size)
        lines.append(_Line.of((t[0], ns, tuple(comms), tuple(sizes), lineno)))
    return lines


def _fold(lines: list[_Line], ga: int, max_bottom: int = 64) -> tuple[list[_Line], list[list[_Line]], list[_Line]]:
    """Split into (top once-per-iteration lines, `ga` copies of the micro-batch block, bottom lines).

    The split with the fewest top lines wins, then the fewest bottom lines; copies must match in names,
    comm types and sizes. No split found: everything is one block (not unrolled). Linear time: for each
    bottom count, the candidate periods are the distances back to earlier lines equal to the last line
    of the middle, and each is checked in O(1) with a polynomial hash of the line signatures (mod 2^64,
    numpy's wrapping arithmetic); the chosen split is then confirmed by a full comparison.
    """
    n = len(lines)
    if ga <= 1 or n < ga:
        return [], [lines], []
    import numpy as np
    ids: dict = {}
    sig = np.fromiter((ids.setdefault(sg, len(ids)) + 1 for sg in map(_SIGNATURE, lines)), dtype=np.uint64, count=n)
    base = 0x9E3779B97F4A7C15                       # odd, so invertible mod 2^64
    inv = pow(base, -1, 1 << 64)
    pw = np.full(n + 1, base, dtype=np.uint64)
    pw[0] = 1
    pw = np.cumprod(pw, dtype=np.uint64)           # base^k mod 2^64
    ipw = np.full(n, inv, dtype=np.uint64)
    ipw[0] = 1
    ipw = np.cumprod(ipw, dtype=np.uint64)         # base^-k mod 2^64
    g = np.zeros(n + 1, dtype=np.uint64)
    g[1:] = np.cumsum(sig * ipw, dtype=np.uint64)  # g[i] = sum_{j<i} sig[j] base^-j
    best: tuple[int, int, int] | None = None       # (top, bottom, period)
    for bottom in range(min(max_bottom, n - ga) + 1):
        e = n - bottom
        pers = (e - 1) - np.flatnonzero(sig[:e - 1] == sig[e - 1])
        tops = e - ga * pers
        keep = tops >= 0 if best is None else (tops >= 0) & (tops < best[0])
        pers, tops = pers[keep], tops[keep]
        if not pers.size:
            continue
        # sig[top:e-per] == sig[top+per:e]  <=>  g[e-per] - g[top] == base^per (g[e] - g[top+per])
        ok = (g[e - pers] - g[tops]) == pw[pers] * (g[e] - g[tops + pers])
        for top, per in sorted(zip(tops[ok].tolist(), pers[ok].tolist())):
            if np.array_equal(sig[top:e - per], sig[top + per:e]):
                best = (top, bottom, per)
                break
        if best is not None and best[0] == 0:
            break
    if best is None:
        return [], [lines], []
    top, bottom, per = best
    copies = [lines[top + k * per: top + (k + 1) * per] for k in range(ga)]
    return lines[:top], copies, lines[n - bottom:]


def _median_line(copies: list[list[_Line]], i: int) -> _Line:
    base = copies[0][i]
    if len(copies) == 1:
        return base
    ns = tuple(int(_median([c[i].ns[k] for c in copies])) for k in range(3))
    return _Line.of((base.name, ns, base.comm, base.size, base.lineno))


def _median(values: list[int]) -> float | int:
    """statistics.median of a non-empty list (the middle value; the mean of the two middle values of an
    even count), without importing statistics (fractions, decimal: ~6 ms of a run's start)."""
    data = sorted(values)
    n = len(data)
    if n % 2:
        return data[n // 2]
    return (data[n // 2 - 1] + data[n // 2]) / 2


def _opaque(name: str, ns: int, variant: str, phase: str, microbatch: str = "all") -> ComputeOp:
    return ComputeOp(name=name, kind="elementwise", shape=(("numel", 1),), dtype="bf16", flops=0.0, bytes=0.0,
                     variant=variant, phase=phase, microbatch=microbatch, time_s=ns * 1e-9)


def _line_ops(ln: _Line, microbatch: str, mb_bwd: str | None = None) -> tuple[list[Op], list[Op]]:
    """(forward ops, backward ops) of one line in SimAI's execution semantics."""
    mb_fwd, mb_bwd = microbatch, mb_bwd or microbatch
    fwd: list[Op] = []
    bwd: list[Op] = []
    f_ns, i_ns, w_ns = ln.ns
    (fc, ic, wc), (fs, is_, ws) = ln.comm, ln.size
    if f_ns > 1:
        fwd.append(_opaque(ln.name, f_ns, "fwd", "fwd", mb_fwd))
    if fc:
        fwd.append(CommOp(name=ln.name, collective=fc[0], group=fc[1], size_bytes=fs, phase="fwd",
                          microbatch=mb_fwd))
    if i_ns > 1:
        bwd.append(_opaque(f"{ln.name}_dgrad", i_ns, "dgrad", "bwd", mb_bwd))
    if ic:
        bwd.append(CommOp(name=f"{ln.name}_ig", collective=ic[0], group=ic[1], size_bytes=is_, phase="bwd",
                          microbatch=mb_bwd))
    if w_ns > 1:
        bwd.append(_opaque(f"{ln.name}_wgrad", w_ns, "wgrad", "bwd", mb_bwd))
    if wc:
        bwd.append(CommOp(name=f"{ln.name}_wg", collective=wc[0], group=wc[1], size_bytes=ws, phase="bwd",
                          blocking=False, microbatch=mb_bwd))
    return fwd, bwd


def read_simai_workload(path: str | os.PathLike, world_size: int | None = None,
                        clustersim_section: bool = True) -> Workload:
    """Import a SimAI workload text file as a Workload (see module docstring for the mapping).

    A file clustersim wrote carries its full workload in `#clustersim` lines after the layer lines
    (SimAI never reads them): when the layer lines are unchanged since the export (checksum), that
    workload is returned, so an export reads back to exactly what was exported. Edited layer lines, or
    `clustersim_section=False`, read the layer lines with SimAI's semantics (meta["warnings"] says why).
    """
    # thousands of token lists and line tuples and no reference cycles: the cyclic collector would scan
    # them (and all other young objects) several times, 3-10 ms of a 1,800-line file; reference counting
    # frees the temporaries
    was = gc.isenabled()
    gc.disable()
    try:
        return _read_simai_workload(str(path), world_size, clustersim_section)
    finally:
        if was:
            gc.enable()


def _read_simai_workload(path: str, world_size: int | None, clustersim_section: bool) -> Workload:
    header, lines, trailer, covered = _read_lines(path)
    warnings: list[str] = []
    if trailer and clustersim_section:
        w = _read_section(path, trailer, covered, warnings)
        if w is not None:
            if world_size is not None and world_size != w.plan.world_size:
                warnings.append(f"world size {world_size} given: the #clustersim section (world "
                                f"{w.plan.world_size}) is ignored")
            else:
                return w
    tp = header.get("tp", 1)
    if header["policy"] == TRAINING and "tp" not in header:
        raise ConfigFileError(f"{path}:1: header key 'model_parallel_NPU_group:' (TP size) is missing")
    pp = header.get("pp", 1)
    ep = header.get("ep", 1)
    ga = header.get("ga", 1)
    if world_size is not None and not 1 <= world_size <= MAX_GPUS:
        raise ConfigFileError(f"world size must be between 1 and {MAX_GPUS:,} (got {world_size})")
    ws = world_size or header.get("all_gpus") or tp * pp
    if ws % (tp * pp):
        raise ConfigFileError(f"{path}:1: all_gpus ({ws}) must be divisible by TP x PP = {tp * pp}")
    if ep > ws:
        raise ConfigFileError(f"{path}:1: ep ({ep}) must be <= all_gpus ({ws})")
    dp = ws // (tp * pp)
    etp = None if (tp * dp) % (ep * tp) == 0 else 1
    plan = ParallelPlan(world_size=ws, tp=tp, pp=pp, ep=ep, etp=etp, micro_batch_size=1,
                        global_batch_size=ga * dp, seq_length=1)
    meta = {"imported_from": "simai", "source": os.path.basename(path), "policy": header["policy"],
            "header": {k: v for k, v in header.items() if k != "policy"},
            "notes": "model dimensions unknown (placeholder ModelSpec); compute ops carry SimAI's times"}
    if warnings:
        meta["warnings"] = warnings
    if header["policy"] == MICRO:
        fwd: list[Op] = []
        for ln in lines:
            f, b = _line_ops(ln, "all")
            fwd += [op if not isinstance(op, CommOp) else _blocking(op) for op in f + b]
        model = ModelSpec(name=f"simai:{meta['source']}", num_layers=1, hidden_size=1, num_attention_heads=1,
                          ffn_hidden_size=1, vocab_size=1)
        stage = StageProgram(stage=0, chunks=[ChunkProgram(chunk=0, layers=(0,), forward=fwd, backward=[])])
        plan = ParallelPlan(world_size=ws, tp=1, pp=1, micro_batch_size=1, global_batch_size=ws, seq_length=1)
        return Workload(model=model, plan=plan, stages=[stage], schedule="none", num_microbatches=1, meta=meta)

    top, copies, bottom = _fold(lines, ga)
    folded = len(copies) == ga and ga > 1
    block = [_median_line(copies, i) for i in range(len(copies[0]))] if folded else [ln for c in copies for ln in c]
    meta["ga_unrolled_in_file"] = folded
    # SimAI walks backward bottom-up: backward lists are built in file order and reversed once
    fwd, bwd_rev = [], []
    for ln in block:
        f, b = _line_ops(ln, "all")
        fwd += f
        bwd_rev.append(b)
    for ln in bottom:
        f, b = _line_ops(ln, "last")
        fwd += f
        bwd_rev.append(b)
    head: list[Op] = []
    tail_rev: list[list[Op]] = []
    for ln in top:
        f, b = _line_ops(ln, "first", "last")
        head += f
        tail_rev.append(b)
    fwd = head + fwd
    bwd = [op for b in reversed(bwd_rev) for op in b] + [op for b in reversed(tail_rev) for op in b]
    n_layers = sum(1 for ln in block if ln.name.startswith("attention")) or 1
    model = ModelSpec(name=f"simai:{meta['source']}", num_layers=max(pp, n_layers * pp), hidden_size=1,
                      num_attention_heads=1, ffn_hidden_size=1, vocab_size=1)
    pp_bytes = header.get("pp_comm", 0) if pp > 1 else 0
    stages = []
    for s in range(pp):
        f = ([CommOp("pp_recv_fwd", "recv", "pp", pp_bytes, peer="prev")] if s > 0 else []) + fwd
        f += [CommOp("pp_send_fwd", "send", "pp", pp_bytes, peer="next")] if s < pp - 1 else []
        b = ([CommOp("pp_recv_bwd", "recv", "pp", pp_bytes, phase="bwd", peer="next")] if s < pp - 1 else []) + bwd
        b += [CommOp("pp_send_bwd", "send", "pp", pp_bytes, phase="bwd", peer="prev")] if s > 0 else []
        stages.append(StageProgram(stage=s, chunks=[ChunkProgram(chunk=0, layers=(s,), forward=f, backward=b)],
                                   pp_send_bytes=pp_bytes if s < pp - 1 else 0))
    return Workload(model=model, plan=plan, stages=stages, schedule="1f1b" if pp > 1 else "none",
                    num_microbatches=ga, meta=meta)


def _read_section(path: str, trailer: list[tuple[int, str]], covered: str, warnings: list[str]) -> Workload | None:
    """The workload of a `#clustersim` section (None: no section, or layer lines edited since export)."""
    head = [(ln, t) for ln, t in trailer if t.startswith(f"{SECTION} ")]
    if not head:
        return None
    fields = {}
    data: list[str] = []
    for ln, text in head:
        key, _, value = text[len(SECTION) + 1:].partition(" ")
        if key == "data":
            data.append(value.strip())
        elif key in ("workload", "sha256"):
            fields[key] = (ln, value.strip())
    first = head[0][0]
    if "workload" not in fields or "sha256" not in fields or not data:
        raise ConfigFileError(f"{path}:{first}: incomplete {SECTION} section (needs 'workload', 'sha256' and "
                              f"'data' lines); delete the {SECTION} lines to read the layer lines alone")
    if not fields["workload"][1].startswith(SECTION_VERSION):
        raise ConfigFileError(f"{path}:{fields['workload'][0]}: unknown {SECTION} section version "
                              f"{fields['workload'][1][:20]!r} (this clustersim reads {SECTION_VERSION})")
    import hashlib  # imported on use: only files with a #clustersim section need it
    if hashlib.sha256(covered.encode()).hexdigest() != fields["sha256"][1]:
        warnings.append("layer lines were edited after clustersim exported the file: its #clustersim section "
                        "is ignored and the layer lines are read with SimAI's semantics")
        return None
    from workload_gen.native_io import workload_from_dict
    try:
        doc = json.loads(zlib.decompress(base64.b64decode("".join(data), validate=True)))
    except (ValueError, zlib.error):
        raise ConfigFileError(f"{path}:{first}: {SECTION} section is corrupt (not base64 zlib JSON); delete the "
                              f"{SECTION} lines to read the layer lines alone") from None
    w = workload_from_dict(doc, f"{path}:{first} ({SECTION} section)")
    w.meta = dict(w.meta, read_from=f"{os.path.basename(path)} ({SECTION} section)")
    return w


def _blocking(op: CommOp) -> CommOp:
    from dataclasses import replace
    return replace(op, blocking=True, phase="fwd")


# ---------------------------------------------------------------------------------------------- writing

def _simai_comm(op: CommOp, column: str, tp: int, etp: int) -> str | None:
    """SimAI comm type name for `op` written in `column`, or None when SimAI cannot express it."""
    name = _TO_SIMAI.get(op.collective)
    if name is None:
        return None
    g = op.group
    if g == "etp":
        g = "tp" if etp == tp else None
    if g == "tp":
        return name if column in ("fwd", "ig") else None
    if g in ("dp", "dp_cp"):
        return name if column == "wg" else None
    if g == "ep":
        return f"{name}_EP"
    if g == "edp":
        return f"{name}_DP_EP"
    return None


class _Row:
    __slots__ = ("name", "f_ns", "f_comm", "i_ns", "i_comm", "w_ns", "w_comm")

    def __init__(self, name):
        self.name = name
        self.f_ns = self.i_ns = self.w_ns = 0
        self.f_comm = self.i_comm = self.w_comm = None   # (type, size)

    def text(self) -> str:
        def c(x):
            return ("NONE", 0) if x is None else x
        f, i, w = c(self.f_comm), c(self.i_comm), c(self.w_comm)
        return "\t".join(str(v) for v in (self.name, -1, max(1, self.f_ns), f[0], f[1], max(1, self.i_ns), i[0], i[1],
                                           max(1, self.w_ns), w[0], w[1], UPDATE_NS))


def _ns(t_s: float) -> int:
    return max(1, int(round(t_s * 1e9)))


def _line_name(op: Op, fallback: str) -> str:
    if op.layer == -1 and op.name.startswith("embedding"):
        return "embedding_layer"
    return op.name or fallback


def _forward_rows(ops: list[Op], time_of, tp: int, etp: int, dropped: list) -> list[_Row]:
    rows: list[_Row] = []
    cur: _Row | None = None
    for op in ops:
        if op.microbatch != "all":
            continue
        if cur is None:
            cur = _Row(_line_name(op, "fwd"))
        if isinstance(op, ComputeOp):
            cur.f_ns += _ns(time_of(op))
            if cur.name == "embedding_layer" or op.name.startswith("embedding"):
                cur.name = _line_name(op, cur.name)
            continue
        if op.group in ("dp", "dp_cp", "edp"):
            # SimAI's forward column is TP-only: a data-parallel comm of the forward pass (ZeRO-3 gathers)
            # is written in the weight-grad column of a line of its own (issued in backward by SimAI)
            r = _Row(_line_name(op, "fwd"))
            r.w_comm = (_simai_comm(op, "wg", tp, etp), op.size_bytes)
            rows.append(r)
            continue
        t = _simai_comm(op, "fwd", tp, etp)
        if t is None:
            dropped.append(op)
            continue
        cur.name = _line_name(op, cur.name)
        cur.f_comm = (t, op.size_bytes)
        rows.append(cur)
        cur = None
    if cur is not None:
        rows.append(cur)
    return rows


def _backward_rows(ops: list[Op], time_of, tp: int, etp: int, dropped: list) -> list[_Row]:
    """Backward segments in execution order; each row: ig compute, ig comm, wg compute, wg comm."""
    rows: list[_Row] = []
    cur: _Row | None = None

    def new(op):
        return _Row(_line_name(op, "bwd"))

    for op in ops:
        if op.microbatch != "all":
            continue
        if isinstance(op, ComputeOp):
            if cur is None or (op.variant != "wgrad" and (cur.w_ns or cur.i_comm)):
                if cur is not None:
                    rows.append(cur)
                cur = new(op)
            if op.variant == "wgrad":
                cur.w_ns += _ns(time_of(op))
            else:
                cur.i_ns += _ns(time_of(op))
            continue
        col = "wg" if op.group in ("dp", "dp_cp", "edp") else "ig"
        t = _simai_comm(op, col, tp, etp)
        if t is None:
            dropped.append(op)
            continue
        if cur is None:
            cur = new(op)
        if col == "ig":
            if cur.i_comm is not None or cur.w_ns:
                rows.append(cur)
                cur = new(op)
            cur.i_comm = (t, op.size_bytes)
        else:
            if cur.w_comm is not None:
                rows.append(cur)
                cur = new(op)
            cur.w_comm = (t, op.size_bytes)
            rows.append(cur)
            cur = None
    if cur is not None:
        rows.append(cur)
    return rows


def _pair(frows: list[_Row], brows: list[_Row]) -> list[_Row]:
    """Attach backward rows to forward rows so that a bottom-up walk replays the backward order."""
    free = [i for i, r in enumerate(frows) if r.w_comm is None]
    k, m = len(free), len(brows)
    out = list(frows)
    # the last free forward row carries the first backward row, and so on upwards
    for j in range(min(k, m)):
        row = out[free[k - 1 - j]]
        b = brows[j]
        row.i_ns, row.i_comm, row.w_ns, row.w_comm = b.i_ns, b.i_comm, b.w_ns, b.w_comm
    extra = brows[k:] if m > k else []
    return list(reversed(extra)) + out


def simai_lines(w: Workload, time_of: Callable[[ComputeOp], float] | None = None,
                unroll: bool = True) -> tuple[str, list[str], list[Op]]:
    """(header, layer lines, dropped ops) of the SimAI export of stage 0 (see module docstring)."""
    time_of = time_of or placeholder_time
    p = w.plan
    st = w.stages[0]
    tp, etp = p.tp, p.expert_tp
    dropped: list[Op] = []
    block: list[str] = []
    for ch in st.chunks:
        frows = _forward_rows(ch.forward, time_of, tp, etp, dropped)
        brows = _backward_rows(ch.backward, time_of, tp, etp, dropped)
        block += [r.text() for r in _pair(frows, brows)]
    # once per iteration, in the order a bottom-up walk must issue them: last-micro-batch backward ops
    # (gradient buckets), iteration start/end ops (optimizer), then first-micro-batch forward ops
    # (distributed-optimizer parameter gathers: SimAI issues them after the step, like AICB's grad_gather)
    scoped_bwd = [op for ch in st.chunks for op in ch.backward if op.microbatch != "all"]
    scoped_fwd = [op for ch in st.chunks for op in ch.forward if op.microbatch != "all"]
    once: list[_Row] = []
    for op in scoped_bwd + st.iteration_start + st.iteration_end + scoped_fwd:
        r = _Row(op.name)
        if isinstance(op, ComputeOp):
            r.i_ns = _ns(time_of(op))
        else:
            col = "wg" if op.group in ("dp", "dp_cp", "edp") else "ig"
            t = _simai_comm(op, col, tp, etp)
            if t is None:
                dropped.append(op)
                continue
            setattr(r, "w_comm" if col == "wg" else "i_comm", (t, op.size_bytes))
        once.append(r)
    # bottom-up walk issues the top lines last, in reverse file order
    top = [r.text() for r in reversed(once)]
    ga = w.num_microbatches
    lines = top + block * (ga if unroll else 1)
    n_layers = sum(len(ch.layers) for ch in st.chunks)
    pp_comm = st.pp_send_bytes if p.pp > 1 else 0
    header = (f"{TRAINING} model_parallel_NPU_group: {tp} ep: {p.ep} pp: {p.pp} vpp: {n_layers} ga: {ga} "
              f"all_gpus: {p.world_size} checkpoints: 0 checkpoint_initiates: 0 pp_comm: {pp_comm}")
    return header, lines, dropped


def with_times(w: Workload, time_of: Callable[[ComputeOp], float]) -> Workload:
    """A copy of `w` whose compute ops carry `time_of(op)` as their given time (time_s)."""
    from dataclasses import replace

    def timed(ops: list[Op]) -> list[Op]:
        return [replace(op, time_s=float(time_of(op))) if isinstance(op, ComputeOp) else op for op in ops]

    stages = [StageProgram(stage=st.stage, pp_send_bytes=st.pp_send_bytes,
                           iteration_start=timed(st.iteration_start), iteration_end=timed(st.iteration_end),
                           chunks=[ChunkProgram(chunk=ch.chunk, layers=ch.layers, forward=timed(ch.forward),
                                                backward=timed(ch.backward)) for ch in st.chunks])
              for st in w.stages]
    return Workload(model=w.model, plan=w.plan, stages=stages, schedule=w.schedule,
                    num_microbatches=w.num_microbatches, meta=dict(w.meta))


def section_lines(w: Workload, covered: str, width: int = 4096) -> list[str]:
    """The `#clustersim` lines that carry `w` in full after the layer lines (SimAI never reads them):
    a version line, the sha256 of the text above (header to last layer line), zlib+base64 native JSON."""
    import hashlib

    from workload_gen.native_io import workload_to_dict
    blob = base64.b64encode(zlib.compress(json.dumps(workload_to_dict(w), separators=(",", ":"),
                                                     default=str).encode(), 9)).decode()
    out = [f"{SECTION} workload {SECTION_VERSION}: clustersim's full workload (kernels, overlap, every pipeline "
           "stage); SimAI reads only the layer lines above. Edit those and this section is ignored.",
           f"{SECTION} sha256 {hashlib.sha256(covered.encode()).hexdigest()}"]
    out += [f"{SECTION} data {blob[i:i + width]}" for i in range(0, len(blob), width)]
    return out


def write_simai_workload(w: Workload, path: str | os.PathLike,
                         time_of: Callable[[ComputeOp], float] | None = None, unroll: bool = True,
                         section: bool = True) -> list[Op]:
    """Write stage 0 of `w` as a SimAI workload file (atomic). Returns the ops SimAI cannot express.

    time_of: kernel time (s) of a compute op for the layer lines (None: PLACEHOLDER roofline); given, the
    `#clustersim` section carries the same times. section: append the `#clustersim` lines (the full
    workload, so that clustersim reads the file back to exactly `w`)."""
    header, lines, dropped = simai_lines(w, time_of, unroll)
    text = [header, str(len(lines)), *lines]
    if section:
        text += section_lines(w if time_of is None else with_times(w, time_of),
                              "\n".join(ln.rstrip() for ln in text))
    from workload_gen.native_io import atomic_write_text
    atomic_write_text(path, "\n".join(text) + "\n")
    return dropped


def write_simai_micro(path: str | os.PathLike, sizes_bytes: Iterable[int], collective: str = "all_reduce",
                      group: str = "dp", world_size: int | None = None) -> None:
    """Write a MICRO file: one line per message size, the comm in the weight-grad column."""
    name = _TO_SIMAI.get(collective)
    if name is None:
        raise ConfigFileError(f"collective: SimAI MICRO files support {sorted(_TO_SIMAI)} (got {collective!r})")
    if group == "ep":
        name += "_EP"
    elif group == "edp":
        name += "_DP_EP"
    sizes = list(sizes_bytes)
    head = MICRO + (f" all_gpus: {world_size}" if world_size else "")
    lines = [f"{collective}_{s}\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\t{name}\t{s}\t{UPDATE_NS}" for s in sizes]
    from workload_gen.native_io import atomic_write_text
    atomic_write_text(Path(path), "\n".join([head, str(len(lines)), *lines]) + "\n")
