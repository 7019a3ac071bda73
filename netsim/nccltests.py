"""Readers of measured collective data: nccl-tests output tables and SimAI's busbw file.

nccl-tests (`all_reduce_perf`, `all_gather_perf`, `reduce_scatter_perf`, `alltoall_perf`,
`sendrecv_perf`, `broadcast_perf`, `reduce_perf`) print header comments, then a column header

    #       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong
    #        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)

(older versions: no `root` column, `error` instead of `#wrong`), then one row per size with the
out-of-place and the in-place results. What the reader takes from the header:
- the collective: a `<name>_perf` token anywhere before the table (a pasted command line, or
  "# Collective test starting: all_reduce_perf"), else the file name, else --op;
- ranks, hosts and GPU model: the "#  Rank  N Group  G Pid  P on HOST device  D [..] NAME" lines;
- GPUs per process: ranks sharing a Pid (else the "nGpus" field of the first header line);
- CUDA graphs: "graph: 1" in the first header line (the launch overhead is then not in the times).

SimAI's busbw file (simai_formats.md 8): first line a free-form name, then groups `TP:` `DP:` `EP:`
`PP:` with entries `  allreduce,: 300` (GB/s or null) and, under PP, `  busbw: 47.5`.
Errors are NetsimError with file:line.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from netsim.errors import NetsimError

PERF_OPS = {"all_reduce": "all_reduce", "allreduce": "all_reduce", "all_gather": "all_gather",
            "allgather": "all_gather", "reduce_scatter": "reduce_scatter", "reducescatter": "reduce_scatter",
            "alltoall": "all_to_all", "all_to_all": "all_to_all", "sendrecv": "send", "send_recv": "send",
            "broadcast": "broadcast", "reduce": "reduce"}
GPU_NAMES = ("GB300", "GB200", "B300", "B200", "H200", "H100", "H800", "H20", "A100", "A800", "L40S", "L40",
             "V100", "MI300X")
_PERF_RE = re.compile(r"([a-z]+(?:_[a-z]+)*)_perf")
_RANK_RE = re.compile(r"#\s*Rank\s+(\d+)\s+Group\s+\d+\s+Pid\s+(\d+)\s+on\s+(\S+)\s+device\s+\d+\s+\[[^\]]*\]\s+(.*)$")


@dataclass
class PerfTable:
    """One nccl-tests output file."""
    path: str
    op: str
    ranks: int | None
    hosts: int | None
    gpu_type: str | None
    gpus_per_process: int
    cuda_graphs: bool
    rows: list[tuple[int, float, int]] = field(default_factory=list)   # (size B, time s, line)

    def describe(self) -> str:
        where = f"{self.ranks} GPUs" if self.ranks else "? GPUs"
        if self.hosts:
            where += f" on {self.hosts} node{'s' if self.hosts > 1 else ''}"
        return f"{os.path.basename(self.path)}: {self.op}, {where}, {len(self.rows)} sizes"


def _op_from(text: str) -> str | None:
    for m in _PERF_RE.finditer(text.lower()):
        words = m.group(1).split("_")
        for i in range(len(words)):          # "my_all_reduce_perf": try all_reduce, reduce
            op = PERF_OPS.get("_".join(words[i:]))
            if op:
                return op
    return None


def gpu_type_from_name(name: str) -> str | None:
    up = name.upper().replace("-", " ")
    for g in GPU_NAMES:
        if re.search(rf"\b{g}", up):
            return g
    return None


def read_nccl_tests(path, *, op: str | None = None, in_place: bool = False) -> PerfTable:
    """Parse one nccl-tests output file (out-of-place times unless in_place)."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8", errors="replace") as fh:
            lines = fh.read().splitlines()
    except OSError as exc:
        raise NetsimError(f"{path}: cannot read ({exc.strerror})") from None
    header_cols: list[str] | None = None
    found_op = None
    ranks: dict[int, tuple[str, str, str]] = {}
    ngpus_thread = 1
    graphs = False
    rows: list[tuple[int, float, int]] = []
    time_idx: list[int] = []
    size_idx = 0
    for i, raw in enumerate(lines, start=1):
        line = raw.strip()
        if not line:
            continue
        if header_cols is None or line.startswith("#"):
            if found_op is None:
                found_op = _op_from(line)
            m = _RANK_RE.search(line)
            if m:
                ranks[int(m.group(1))] = (m.group(2), m.group(3), m.group(4))
                continue
            m = re.search(r"nGpus\s+(\d+)", line)
            if m:
                ngpus_thread = int(m.group(1))
            m = re.search(r"graph:\s*(\d+)", line)
            if m:
                graphs = m.group(1) != "0"
            toks = line.lstrip("#").split()
            if "size" in toks and "time" in toks and "count" in toks:
                header_cols = toks
                size_idx = toks.index("size")
                time_idx = [j for j, t in enumerate(toks) if t == "time"]
            continue
        toks = line.split()
        if not toks[0].isdigit():
            # a trailing non-table line ends nothing: nccl-tests prints only '#' lines after the table
            raise NetsimError(f"{path}:{i}: expected a table row starting with the size in bytes, got {raw.strip()[:40]!r}")
        if len(toks) < len(header_cols):
            raise NetsimError(f"{path}:{i}: expected {len(header_cols)} columns as in the header, got {len(toks)}")
        col = time_idx[1] if in_place and len(time_idx) > 1 else time_idx[0]
        try:
            size = int(toks[size_idx])
            t_us = float(toks[col])
        except (ValueError, IndexError):
            raise NetsimError(f"{path}:{i}: size or time is not a number ({toks[size_idx]!r}, {toks[col]!r})") from None
        if t_us <= 0 or t_us != t_us:
            raise NetsimError(f"{path}:{i}: time must be > 0 us, got {toks[col]!r}")
        if size > 0:
            rows.append((size, t_us * 1e-6, i))
    if header_cols is None:
        raise NetsimError(f"{path}:1: no nccl-tests table header (a '#  size  count  type ... time  algbw  busbw' line)")
    if not rows:
        raise NetsimError(f"{path}:{len(lines)}: the table has no rows with size > 0")
    if op is None:
        op = found_op or _op_from(os.path.basename(path))
    if op is None:
        raise NetsimError(f"{path}:1: cannot tell which collective this is (no '<name>_perf' in the file or its "
                          "name): give --op")
    per_pid: dict[str, int] = {}
    for pid, host, _name in ranks.values():
        per_pid[(pid, host)] = per_pid.get((pid, host), 0) + 1
    gpp = max(per_pid.values()) if per_pid else ngpus_thread
    names = {gpu_type_from_name(n) for _p, _h, n in ranks.values()} - {None}
    return PerfTable(path, op, len(ranks) or None, len({h for _p, h, _n in ranks.values()}) or None,
                     names.pop() if len(names) == 1 else None, gpp, graphs, rows)


SIMAI_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "reducescatter": "reduce_scatter",
             "alltoall": "all_to_all"}
SIMAI_GROUPS = ("TP", "DP", "EP", "PP", "DP_EP")


def read_simai_busbw(path) -> dict[str, dict[str, tuple[float, int]]]:
    """SimAI busbw file -> {group: {op: (busbw B/s, line)}} (null entries left out; PP: op 'send')."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise NetsimError(f"{path}: cannot read busbw file ({getattr(exc, 'strerror', None) or exc})") from None
    out: dict[str, dict[str, tuple[float, int]]] = {}
    group = None
    for i, raw in enumerate(lines, start=1):
        if i == 1 or not raw.strip() or raw.strip().startswith("#"):
            continue                          # line 1: free-form name
        text = raw.strip()
        m = re.fullmatch(r"([A-Za-z_]+)\s*:", text)
        if m and not raw[:1].isspace():
            group = m.group(1).upper()
            if group not in SIMAI_GROUPS:
                raise NetsimError(f"{path}:{i}: unknown group {m.group(1)!r} (expected {', '.join(SIMAI_GROUPS)})")
            out.setdefault(group, {})
            continue
        m = re.fullmatch(r"([A-Za-z_]+)\s*,?\s*:\s*(\S+)", text)
        if not m or group is None:
            raise NetsimError(f"{path}:{i}: expected 'GROUP:' or an indented 'collective,: GB/s' entry, got {text!r}")
        key, val = m.group(1).lower(), m.group(2)
        op = "send" if key == "busbw" else SIMAI_OPS.get(key)
        if op is None:
            raise NetsimError(f"{path}:{i}: unknown collective {m.group(1)!r} (expected allreduce, allgather, "
                              "reducescatter, alltoall, busbw)")
        if val.lower() in ("null", "~", "none"):
            continue
        try:
            bw = float(val)
        except ValueError:
            raise NetsimError(f"{path}:{i}: {m.group(1)}: expected GB/s or null, got {val!r}") from None
        if not bw > 0:
            raise NetsimError(f"{path}:{i}: {m.group(1)}: busbw must be > 0 GB/s, got {val!r}")
        out[group][op] = (bw * 1e9, i)
    if not any(out.values()):
        raise NetsimError(f"{path}:1: no busbw entries (expected groups TP:/DP:/EP:/PP: with 'allreduce,: 300' lines)")
    return out
