"""AICB per-op CSV log: export, and read back what clustersim exported (reference/simai_formats.md §5).

One iteration of one rank of pipeline stage 0 (like AICB's log): micro-batches unrolled in order
(forward of every chunk, then backward), ops scoped to the first / last micro-batch written once,
then the iteration-end ops and an `epoch_end` row. Columns: comm_type, comm_group, comm_group_size,
msg_size, stage, dst, src, additional, _elapsed_time, algbw, busbw, count.
- comm types: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, isend, irecv,
  and `computation` rows for kernels when `include_compute` (msg_size 0, `additional` = kernel name,
  `_elapsed_time` in ms when the op has a time or `time_of` is given, else None).
- groups: tp_group, dp_group (dp and dp x cp), ep_group, ep_dp_group (expert-DP), ep_tp_group (expert
  TP), pp_group, embedding_group; clustersim extensions for groups AICB has no name for: cp_group,
  mp_group (gradient-norm group).
- stage: "<forward|backward|recompute|iteration_start|iteration_end>.<op name>"; additional: send_next /
  send_prev / recv_next / recv_prev for pipeline ops, "overlap" for non-blocking collectives (AICB's
  tokens, unchanged, so AICB's replay reads them).

clustersim details (`details=True`, the default): what AICB's columns cannot say — the kernel's kind,
shape, FLOPs and bytes, a collective's wait point and micro-batch scope, the layer — follows the stage
label as compact JSON (`forward.attn_qkv {"op":"compute",...}`), and the `epoch_end` row's stage holds the
model and plan. `read_aicb_csv` rebuilds the Workload from them; the editable columns win (msg_size,
_elapsed_time). AICB's log describes pipeline stage 0 only, so only pp = 1 workloads read back.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from collections.abc import Callable
from dataclasses import asdict

from workload_gen.errors import ConfigFileError, WorkloadError
from workload_gen.limits import MAX_MICROBATCHES, allow_huge
from workload_gen.native_checks import SCHEDULES, DocError, check_op, need_choice, need_int
from workload_gen.native_io import _model_fields, atomic_write_text, op_from_dict, op_to_dict
from workload_gen.plan_validation import validate_plan
from workload_gen.workload import ChunkProgram, ComputeOp, Op, StageProgram, Workload

COLUMNS = ("comm_type", "comm_group", "comm_group_size", "msg_size", "stage", "dst", "src", "additional",
           "_elapsed_time", "algbw", "busbw", "count")
FORMAT = "clustersim-aicb-csv"
VERSION = 1
_TYPES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
          "all_to_all": "all_to_all", "broadcast": "broadcast", "reduce": "reduce", "send": "isend",
          "recv": "irecv"}
_FROM_TYPE = {v: k for k, v in _TYPES.items()}
_GROUPS = {"tp": "tp_group", "dp": "dp_group", "dp_cp": "dp_group", "ep": "ep_group", "edp": "ep_dp_group",
           "etp": "ep_tp_group", "pp": "pp_group", "embedding": "embedding_group", "cp": "cp_group",
           "mp": "mp_group"}
_PHASE = {"fwd": "forward", "bwd": "backward", "recompute": "recompute", "iteration_start": "iteration_start",
          "iteration_end": "iteration_end"}


def group_size(w: Workload, group: str) -> int:
    p = w.plan
    return {"tp": p.tp, "cp": p.cp, "dp": p.dp, "dp_cp": p.dp * p.cp, "ep": p.ep, "etp": p.expert_tp,
            "edp": p.edp, "pp": p.pp, "embedding": 2 if p.pp > 1 else 1, "mp": p.tp * p.cp * p.pp}[group]


class _PlanOf:
    """The part of a Workload that group_size reads."""

    def __init__(self, plan):
        self.plan = plan


def _rows(w: Workload, include_compute: bool, time_of: Callable[[ComputeOp], float] | None, details: bool):
    st = w.stages[0]
    n = w.num_microbatches

    def row(op: Op, where: dict):
        stage = f"{_PHASE.get(op.phase, op.phase)}.{op.name}"
        if details:
            d = op_to_dict(op)
            d.pop("time_s", None)        # the _elapsed_time column holds it
            if not op.is_comm:
                d.pop("name", None)      # = additional
            stage += " " + json.dumps({**d, **where}, separators=(",", ":"))
        if isinstance(op, ComputeOp):
            if not include_compute:
                return None
            t = op.time_s if op.time_s is not None else (time_of(op) if time_of else None)
            return ("CommType.computation", "None", "None", 0, stage, "None", "None", op.name,
                    "None" if t is None else f"{t * 1e3:.6f}", "None", "None", 1)
        extra = f"{op.collective}_{op.peer}" if op.peer else ("overlap" if not op.blocking else "")
        return (f"CommType.{_TYPES[op.collective]}", f"CommGroup.{_GROUPS[op.group]}", group_size(w, op.group),
                op.size_bytes, stage, "None", "None", extra, "None", "None", "None", 1)

    for op in st.iteration_start:
        yield row(op, {"list": "start"})
    for mb in range(n):
        scopes = {"all"} | ({"first"} if mb == 0 else set()) | ({"last"} if mb == n - 1 else set())
        for ch in st.chunks:
            for op in ch.forward:
                if op.microbatch in scopes:
                    yield row(op, {"list": "forward", "chunk": ch.chunk, "mb": mb})
        for ch in reversed(st.chunks):
            for op in ch.backward:
                if op.microbatch in scopes:
                    yield row(op, {"list": "backward", "chunk": ch.chunk, "mb": mb})
    for op in st.iteration_end:
        yield row(op, {"list": "end"})
    end = ""
    if details:
        end = json.dumps({"format": FORMAT, "version": VERSION, "model": asdict(w.model), "plan": asdict(w.plan),
                          "schedule": w.schedule, "num_microbatches": n, "pp_send_bytes": st.pp_send_bytes,
                          "chunks": [{"chunk": ch.chunk, "layers": list(ch.layers)} for ch in st.chunks],
                          "compute_rows": include_compute},
                         separators=(",", ":"), default=str)
    yield ("CommType.epoch_end", "None", "None", 0, end, "None", "None", "", "None", "None", "None", 1)


def write_aicb_csv(w: Workload, path: str | os.PathLike, include_compute: bool = False,
                   time_of: Callable[[ComputeOp], float] | None = None, details: bool = True) -> None:
    """Write the AICB-style per-op log of one iteration of a stage-0 rank (atomic).

    include_compute: also `computation` rows for kernels (needed to read the file back); time_of: their
    times in s (None: an op's own time_s, else None in the file); details: clustersim's JSON details."""
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(COLUMNS)
    for r in _rows(w, include_compute, time_of, details):
        if r is not None:
            wr.writerow(r)
    atomic_write_text(path, buf.getvalue())


# ---------------------------------------------------------------------------------------------- reading

def _json(text: str, where: str, what: str) -> dict:
    try:
        d = json.loads(text)
    except ValueError:
        raise ConfigFileError(f"{where}: {what}: not valid JSON") from None
    if not isinstance(d, dict):
        raise ConfigFileError(f"{where}: {what}: expected a JSON object")
    return d


def _checked(d: dict, where: str, num_layers: int) -> Op:
    """The op of a row's details after the native reader's field checks (types, ranges, finiteness)."""
    try:
        check_op(d, "stage details", num_layers)
    except DocError as exc:
        raise ConfigFileError(f"{where}: {exc}") from None
    return op_from_dict(d)


def _row_op(r: list[str], where: str, num_layers: int = 1 << 30) -> tuple[Op, dict]:
    label, _, detail = r[4].partition(" ")
    if not detail:
        raise ConfigFileError(f"{where}: stage {label[:60]!r} carries no clustersim details")
    d = _json(detail, where, "stage details")
    place = {k: d.pop(k) for k in ("list", "chunk", "mb") if k in d}
    try:
        if r[0] == "CommType.computation":
            d["name"] = r[7]
            t = r[8].strip()
            if t not in ("", "None"):
                t_s = float(t) * 1e-3
                if not (math.isfinite(t_s) and t_s >= 0):
                    raise ConfigFileError(f"{where}: _elapsed_time must be a finite time >= 0 ms (got {t!r})")
                d["time_s"] = t_s
            op = _checked(d, where, num_layers)
        else:
            kind = r[0].removeprefix("CommType.")
            if _FROM_TYPE.get(kind) != d.get("collective"):
                raise ConfigFileError(f"{where}: comm_type {r[0]!r} disagrees with the stage details "
                                      f"({d.get('collective')!r})")
            if r[1] != f"CommGroup.{_GROUPS.get(d.get('group'))}":   # an edited group would be ignored
                raise ConfigFileError(f"{where}: comm_group {r[1][:40]!r} disagrees with the stage details "
                                      f"({d.get('group')!r})")
            size = r[3].strip()
            if not size.isdigit():
                raise ConfigFileError(f"{where}: msg_size must be a byte count >= 0 (got {size[:40]!r})")
            d["size_bytes"] = int(size)
            op = _checked(d, where, num_layers)
    except ConfigFileError:
        raise
    except (KeyError, TypeError, ValueError) as exc:
        raise ConfigFileError(f"{where}: stage details do not describe an op ({exc})") from None
    if isinstance(op, ComputeOp) and not (all(math.isfinite(v) and v >= 0 for v in (op.flops, op.bytes))
                                          and all(isinstance(v, int) and v >= 1 for _, v in op.shape)):
        raise ConfigFileError(f"{where}: stage details: kernel FLOPs and bytes must be finite >= 0 and its "
                              "shape positive integers")
    if place.get("list") not in ("start", "end", "forward", "backward"):
        raise ConfigFileError(f"{where}: stage details: 'list' must be start, end, forward or backward")
    return op, place


def _merge(first: list[Op], last: list[Op]) -> list[Op]:
    """One chunk list from the first micro-batch's ops (scopes all + first) and the last one's (all + last)."""
    out, i, j = [], 0, 0
    while i < len(first) or j < len(last):
        if i < len(first) and first[i].microbatch == "first":
            out.append(first[i])
            i += 1
        elif j < len(last) and last[j].microbatch == "last":
            out.append(last[j])
            j += 1
        elif i < len(first) and j < len(last):
            out.append(first[i])
            i += 1
            j += 1
        else:
            raise ValueError("the first and last micro-batches hold different per-micro-batch ops")
    return out


def read_aicb_csv(path: str | os.PathLike) -> Workload:
    """Rebuild the Workload of an AICB CSV that clustersim wrote (with details and computation rows)."""
    from workload_gen.model import ModelSpec
    from workload_gen.plan import ParallelPlan
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8", newline="") as f:
            rows = list(csv.reader(f))
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a text file (not UTF-8)") from None
    except csv.Error as exc:
        raise ConfigFileError(f"{path}: not a CSV file ({exc})") from None
    if not rows or tuple(c.strip() for c in rows[0]) != COLUMNS:
        raise ConfigFileError(f"{path}:1: not an AICB CSV log (header must be {','.join(COLUMNS)})")
    end = [(i, r) for i, r in enumerate(rows[1:], start=2) if r and r[0] == "CommType.epoch_end"]
    if not end:
        raise ConfigFileError(f"{path}: no CommType.epoch_end row (an AICB log ends each iteration with one)")
    ln, r = end[0]
    if len(r) != len(COLUMNS) or not r[4].strip().startswith("{"):
        raise ConfigFileError(f"{path}:{ln}: the epoch_end row carries no clustersim model/plan: clustersim reads "
                              "back the AICB CSV files it wrote (AICB's own logs have no kernel shapes; give "
                              "AICB's SimAI workload file instead)")
    doc = _json(r[4], f"{path}:{ln}", "epoch_end stage")
    if doc.get("format") != FORMAT or doc.get("version") != VERSION:
        raise ConfigFileError(f"{path}:{ln}: epoch_end stage: expected format {FORMAT!r} version {VERSION}")
    if not doc.get("compute_rows"):
        raise ConfigFileError(f"{path}:{ln}: written without computation rows: kernels cannot be rebuilt "
                              "(export with computation rows: `clustersim workload --aicb-csv` writes them)")
    try:
        model = ModelSpec(**_model_fields(doc["model"]))
        plan = ParallelPlan(**doc["plan"])
        layers = {int(c["chunk"]): tuple(int(x) for x in c["layers"]) for c in doc["chunks"]}
        # the same field rules as the native workload reader (limits included)
        n = need_int("num_microbatches", doc.get("num_microbatches"), 1,
                     MAX_MICROBATCHES if not allow_huge() else 1 << 62)
        need_choice("schedule", doc.get("schedule", "none"), SCHEDULES)
        pp_send_bytes = need_int("pp_send_bytes", doc.get("pp_send_bytes", 0), 0)
        validate_plan(model, plan)
    except DocError as exc:
        raise ConfigFileError(f"{path}:{ln}: epoch_end stage: {exc}") from None
    except (KeyError, TypeError, ValueError, WorkloadError) as exc:
        raise ConfigFileError(f"{path}:{ln}: epoch_end stage: bad model/plan ({exc})") from None
    if plan.pp > 1:
        raise ConfigFileError(f"{path}:{ln}: pipeline parallel {plan.pp}: an AICB log holds stage 0 only, so the "
                              "other stages cannot be rebuilt (export SimAI or native JSON for pp > 1)")
    start: list[Op] = []
    stop: list[Op] = []
    lists: dict[tuple[str, int, int], list[Op]] = {}
    for i, row in enumerate(rows[1:ln - 1], start=2):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(COLUMNS):
            raise ConfigFileError(f"{path}:{i}: expected {len(COLUMNS)} columns, got {len(row)}")
        op, place = _row_op(row, f"{path}:{i}", model.num_layers)
        if op.is_comm and row[2] != str(group_size(_PlanOf(plan), op.group)):   # an edit would be ignored
            raise ConfigFileError(f"{path}:{i}: comm_group_size {row[2][:40]!r} disagrees with the plan "
                                  f"({op.group} group of {group_size(_PlanOf(plan), op.group)})")
        if place["list"] == "start":
            start.append(op)
        elif place["list"] == "end":
            stop.append(op)
        else:
            key = (place["list"], place.get("chunk"), place.get("mb"))
            if not all(isinstance(v, int) and not isinstance(v, bool) for v in key[1:]):   # 0.5 -> 0 would move the op
                raise ConfigFileError(f"{path}:{i}: stage details need integer 'chunk' and 'mb' (got {key[1:]!r})")
            if key[1] not in layers or not 0 <= key[2] < n:
                raise ConfigFileError(f"{path}:{i}: chunk {key[1]} / micro-batch {key[2]} outside the plan")
            lists.setdefault(key, []).append(op)
    chunks = []
    for c in sorted(layers):
        prog = {}
        for kind in ("forward", "backward"):
            try:
                prog[kind] = _merge(lists.get((kind, c, 0), []), lists.get((kind, c, n - 1), []))
            except ValueError as exc:
                raise ConfigFileError(f"{path}: chunk {c} {kind}: {exc}") from None
        chunks.append(ChunkProgram(chunk=c, layers=layers[c], forward=prog["forward"], backward=prog["backward"]))
    stage = StageProgram(stage=0, chunks=chunks, iteration_start=start, iteration_end=stop,
                         pp_send_bytes=pp_send_bytes)
    return Workload(model=model, plan=plan, stages=[stage], schedule=str(doc.get("schedule", "none")),
                    num_microbatches=n, meta={"imported_from": "aicb-csv", "source": os.path.basename(path)})


def is_aicb_csv(path: str | os.PathLike) -> bool:
    """Whether the file starts with AICB's CSV header."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(200).decode("utf-8", errors="replace")
    except OSError:
        return False
    return head.split("\n", 1)[0].strip().replace(" ", "") == ",".join(COLUMNS)
