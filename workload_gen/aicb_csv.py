"""AICB per-op CSV log export (reference/simai_formats.md §5).

One iteration of one rank of pipeline stage 0 (like AICB's log): micro-batches unrolled in order
(forward of every chunk, then backward), ops scoped to the first / last micro-batch written once,
then the iteration-end ops and an `epoch_end` row. Columns: comm_type, comm_group, comm_group_size,
msg_size, stage, dst, src, additional, _elapsed_time, algbw, busbw, count.
- comm types: all_reduce, all_gather, reduce_scatter, all_to_all, broadcast, reduce, isend, irecv,
  and `computation` rows for kernels when `include_compute` (msg_size 0, `additional` = kernel name,
  `_elapsed_time` in ms when `time_of` is given, else None).
- groups: tp_group, dp_group (dp and dp x cp), ep_group, ep_dp_group (expert-DP), ep_tp_group (expert
  TP), pp_group, embedding_group; clustersim extensions for groups AICB has no name for: cp_group,
  mp_group (gradient-norm group).
- stage: "<forward|backward|recompute|iteration_end>.<op name>"; additional: send_next / send_prev /
  recv_next / recv_prev for pipeline ops, "overlap" for non-blocking collectives.
"""

from __future__ import annotations

import csv
import io
import os
from collections.abc import Callable

from workload_gen.native_io import atomic_write_text
from workload_gen.workload import ComputeOp, Op, Workload

COLUMNS = ("comm_type", "comm_group", "comm_group_size", "msg_size", "stage", "dst", "src", "additional",
           "_elapsed_time", "algbw", "busbw", "count")
_TYPES = {"all_reduce": "all_reduce", "all_gather": "all_gather", "reduce_scatter": "reduce_scatter",
          "all_to_all": "all_to_all", "broadcast": "broadcast", "reduce": "reduce", "send": "isend",
          "recv": "irecv"}
_GROUPS = {"tp": "tp_group", "dp": "dp_group", "dp_cp": "dp_group", "ep": "ep_group", "edp": "ep_dp_group",
           "etp": "ep_tp_group", "pp": "pp_group", "embedding": "embedding_group", "cp": "cp_group",
           "mp": "mp_group"}
_PHASE = {"fwd": "forward", "bwd": "backward", "recompute": "recompute", "iteration_start": "iteration_start",
          "iteration_end": "iteration_end"}


def group_size(w: Workload, group: str) -> int:
    p = w.plan
    return {"tp": p.tp, "cp": p.cp, "dp": p.dp, "dp_cp": p.dp * p.cp, "ep": p.ep, "etp": p.expert_tp,
            "edp": p.edp, "pp": p.pp, "embedding": 2 if p.pp > 1 else 1, "mp": p.tp * p.cp * p.pp}[group]


def _rows(w: Workload, include_compute: bool, time_of: Callable[[ComputeOp], float] | None):
    st = w.stages[0]
    n = w.num_microbatches

    def row(op: Op):
        stage = f"{_PHASE.get(op.phase, op.phase)}.{op.name}"
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
        yield row(op)
    for mb in range(n):
        scopes = {"all"} | ({"first"} if mb == 0 else set()) | ({"last"} if mb == n - 1 else set())
        for ch in st.chunks:
            for op in ch.forward:
                if op.microbatch in scopes:
                    yield row(op)
        for ch in reversed(st.chunks):
            for op in ch.backward:
                if op.microbatch in scopes:
                    yield row(op)
    for op in st.iteration_end:
        yield row(op)
    yield ("CommType.epoch_end", "None", "None", 0, "", "None", "None", "", "None", "None", "None", 1)


def write_aicb_csv(w: Workload, path: str | os.PathLike, include_compute: bool = False,
                   time_of: Callable[[ComputeOp], float] | None = None) -> None:
    """Write the AICB-style per-op log of one iteration of a stage-0 rank (atomic)."""
    buf = io.StringIO()
    wr = csv.writer(buf, lineterminator="\n")
    wr.writerow(COLUMNS)
    for r in _rows(w, include_compute, time_of):
        if r is not None:
            wr.writerow(r)
    atomic_write_text(path, buf.getvalue())
