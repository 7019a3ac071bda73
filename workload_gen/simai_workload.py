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

import os
import statistics
from collections.abc import Callable, Iterable
from pathlib import Path

from workload_gen.errors import ConfigFileError
from workload_gen.model import ModelSpec
from workload_gen.native_io import atomic_write_text
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
PLACEHOLDER_FLOPS = 400e12
PLACEHOLDER_BPS = 2e12


def placeholder_time(op: ComputeOp) -> float:
    """PLACEHOLDER kernel time (s): roofline at 400 TFLOP/s and 2 TB/s. Not calibrated."""
    if op.time_s is not None:
        return op.time_s
    return max(op.flops / PLACEHOLDER_FLOPS, op.bytes / PLACEHOLDER_BPS)


# ---------------------------------------------------------------------------------------------- reading

def _parse_header(tokens: list[str], where: str) -> dict:
    policy = tokens[0] if tokens else ""
    if policy in OTHER_POLICIES:
        raise ConfigFileError(f"{where}: unsupported SimAI parallelism policy {policy!r} "
                              f"(clustersim reads {TRAINING} and {MICRO})")
    if policy not in (TRAINING, MICRO):
        raise ConfigFileError(f"{where}: not a SimAI workload file (first token {policy!r}; expected {TRAINING} "
                              f"or {MICRO})")
    keys = {"model_parallel_NPU_group:": "tp", "ep:": "ep", "pp:": "pp", "vpp:": "vpp", "ga:": "ga",
            "all_gpus:": "all_gpus", "pp_comm": "pp_comm", "pp_comm:": "pp_comm"}
    out: dict = {"policy": policy, "checkpoints": []}
    i = 1
    while i < len(tokens):
        tok = tokens[i]
        if tok in ("checkpoints:", "checkpoint_initiates:"):
            n = _int(tokens[i + 1] if i + 1 < len(tokens) else "", where, tok)
            vals = [_int(x, where, tok) for x in tokens[i + 2:i + 2 + n]]
            if tok == "checkpoints:":
                out["checkpoints"] = vals
            i += 2 + n
            continue
        if tok in keys:
            if i + 1 >= len(tokens):
                raise ConfigFileError(f"{where}: header key {tok!r} has no value")
            out[keys[tok]] = _int(tokens[i + 1], where, tok)
            i += 2
            continue
        i += 1
    return out


def _int(s: str, where: str, what: str) -> int:
    try:
        return int(s)
    except ValueError:
        try:
            f = float(s)
        except ValueError:
            raise ConfigFileError(f"{where}: {what} must be an integer (got {s!r})") from None
        if f != int(f):
            raise ConfigFileError(f"{where}: {what} must be an integer (got {s!r})") from None
        return int(f)


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


class _Line:
    __slots__ = ("name", "ns", "comm", "size", "lineno")

    def __init__(self, name, ns, comm, size, lineno):
        self.name, self.ns, self.comm, self.size, self.lineno = name, ns, comm, size, lineno

    def signature(self):
        return (self.name, self.comm, self.size)


def _read_lines(path: str) -> tuple[dict, list[_Line]]:
    try:
        with open(path, encoding="utf-8") as f:
            raw = f.read().splitlines()
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a text file") from None
    rows = [(i + 1, ln.split()) for i, ln in enumerate(raw) if ln.strip()]
    if not rows:
        raise ConfigFileError(f"{path}:1: empty file (expected a SimAI workload header)")
    header = _parse_header(rows[0][1], f"{path}:{rows[0][0]}")
    if len(rows) < 2:
        raise ConfigFileError(f"{path}:2: missing the number of layer lines")
    lineno, toks = rows[1]
    if len(toks) != 1:
        raise ConfigFileError(f"{path}:{lineno}: expected the number of layer lines (one integer), got {len(toks)} fields")
    n = _int(toks[0], f"{path}:{lineno}", "number of layer lines")
    body = rows[2:]
    if len(body) != n:
        raise ConfigFileError(f"{path}:{rows[1][0]}: header announces {n} layer lines but the file has {len(body)}")
    lines = []
    for lineno, t in body:
        where = f"{path}:{lineno}"
        if len(t) != 12:
            raise ConfigFileError(f"{where}: a layer line needs exactly 12 fields (got {len(t)})")
        ns = (_int(t[2], where, "forward compute time"), _int(t[5], where, "input-grad compute time"),
              _int(t[8], where, "weight-grad compute time"))
        if min(ns) < 0:
            raise ConfigFileError(f"{where}: compute times must be >= 0 ns")
        comms, sizes = [], []
        for col, ci, si in (("fwd", 3, 4), ("ig", 6, 7), ("wg", 9, 10)):
            size = _int(t[si], where, f"{col} comm size")
            if size < 0:
                raise ConfigFileError(f"{where}: comm sizes must be >= 0 bytes")
            c = _comm_from(t[ci], col, where)
            if c is None or size == 0:
                c, size = None, 0
            comms.append(c)
            sizes.append(size)
        lines.append(_Line(t[0], ns, tuple(comms), tuple(sizes), lineno))
    return header, lines


def _fold(lines: list[_Line], ga: int, max_bottom: int = 64) -> tuple[list[_Line], list[list[_Line]], list[_Line]]:
    """Split into (top once-per-iteration lines, `ga` copies of the micro-batch block, bottom lines).

    Tries the fewest top lines first, then the fewest bottom lines; copies must match in names, comm
    types and sizes. No split found: everything is one block (not unrolled).
    """
    n = len(lines)
    if ga > 1:
        sigs = [ln.signature() for ln in lines]
        for top in range(n):
            for bottom in range(min(max_bottom, n - top) + 1):
                mid = n - top - bottom
                if mid <= 0 or mid % ga:
                    continue
                per = mid // ga
                if sigs[top] != sigs[top + per] or sigs[top + per - 1] != sigs[top + mid - 1]:
                    continue
                block = sigs[top:top + per]
                if all(sigs[top + k * per: top + (k + 1) * per] == block for k in range(1, ga)):
                    copies = [lines[top + k * per: top + (k + 1) * per] for k in range(ga)]
                    return lines[:top], copies, lines[n - bottom:]
    return [], [lines], []


def _median_line(copies: list[list[_Line]], i: int) -> _Line:
    base = copies[0][i]
    if len(copies) == 1:
        return base
    ns = tuple(int(statistics.median(c[i].ns[k] for c in copies)) for k in range(3))
    return _Line(base.name, ns, base.comm, base.size, base.lineno)


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


def read_simai_workload(path: str | os.PathLike, world_size: int | None = None) -> Workload:
    """Import a SimAI workload text file as a Workload (see module docstring for the mapping)."""
    path = str(path)
    header, lines = _read_lines(path)
    tp = header.get("tp", 1)
    if header["policy"] == TRAINING and "tp" not in header:
        raise ConfigFileError(f"{path}:1: header key 'model_parallel_NPU_group:' (TP size) is missing")
    pp = max(1, header.get("pp", 1))
    ep = max(1, header.get("ep", 1))
    ga = max(1, header.get("ga", 1))
    tp = max(1, tp)
    ws = world_size or header.get("all_gpus") or tp * pp
    if ws % (tp * pp):
        raise ConfigFileError(f"{path}:1: all_gpus ({ws}) must be divisible by TP x PP = {tp * pp}")
    dp = ws // (tp * pp)
    etp = None if (tp * dp) % (ep * tp) == 0 else 1
    plan = ParallelPlan(world_size=ws, tp=tp, pp=pp, ep=ep, etp=etp, micro_batch_size=1,
                        global_batch_size=ga * dp, seq_length=1)
    meta = {"imported_from": "simai", "source": os.path.basename(path), "policy": header["policy"],
            "header": {k: v for k, v in header.items() if k != "policy"},
            "notes": "model dimensions unknown (placeholder ModelSpec); compute ops carry SimAI's times"}
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
    fwd, bwd = [], []
    for ln in block:
        f, b = _line_ops(ln, "all")
        fwd += f
        bwd = b + bwd      # SimAI walks backward bottom-up
    for ln in bottom:
        f, b = _line_ops(ln, "last")
        fwd += f
        bwd = b + bwd
    head: list[Op] = []
    tail: list[Op] = []
    for ln in top:
        f, b = _line_ops(ln, "first", "last")
        head += f
        tail = b + tail
    fwd = head + fwd
    bwd += tail
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


def write_simai_workload(w: Workload, path: str | os.PathLike,
                         time_of: Callable[[ComputeOp], float] | None = None, unroll: bool = True) -> list[Op]:
    """Write stage 0 of `w` as a SimAI workload file (atomic). Returns the ops SimAI cannot express."""
    header, lines, dropped = simai_lines(w, time_of, unroll)
    atomic_write_text(path, "\n".join([header, str(len(lines)), *lines]) + "\n")
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
    atomic_write_text(Path(path), "\n".join([head, str(len(lines)), *lines]) + "\n")
