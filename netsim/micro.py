"""Minimal reader of SimAI `MICRO` workload files (collective micro-benchmarks).

Format (simai_formats.md section 1): line 1 header starting with `MICRO` (optional `key: value`
pairs), line 2 the number of layer lines, then layer lines of exactly 12 whitespace-separated fields;
the communication sits in the weight-grad columns (10: type, 11: bytes). Forward (4, 5) and input-grad
(7, 8) columns are read too when not NONE. Types are matched by prefix as SimAI does; the `_EP` /
`_DP_EP` suffixes name groups, which a micro-benchmark replaces by the group chosen on the command line.
A training file (`HYBRID_TRANSFORMER_FWD_IN_BCKWD`, e.g. SimAI's own `microAllReduce.txt` smoke test,
which carries its all-reduces in the forward column) is read the same way: its collectives, one at a
time, with compute times and group columns ignored (`MicroFile.note` says so).
"""

from __future__ import annotations

from dataclasses import dataclass

from netsim.errors import NetsimError

_TYPES = (("ALLREDUCEALLTOALL", ("all_reduce", "all_to_all")), ("ALLREDUCE", ("all_reduce",)),
          ("ALLGATHER", ("all_gather",)), ("REDUCESCATTER", ("reduce_scatter",)),
          ("ALLTOALL", ("all_to_all",)), ("BROADCAST", ("broadcast",)))


@dataclass(frozen=True)
class MicroOp:
    name: str
    op: str
    size_bytes: int
    line: int


def _ops_of(kind: str, where: str) -> tuple[str, ...]:
    if kind.upper() == "NONE":
        return ()
    for prefix, ops in _TYPES:
        if kind.upper().startswith(prefix):
            return ops
    raise NetsimError(f"{where}: unknown comm type {kind!r}")


@dataclass(frozen=True)
class MicroFile:
    ops: list[MicroOp]
    policy: str
    note: str = ""      # how a non-MICRO file is read


TRAINING_POLICY = "HYBRID_TRANSFORMER_FWD_IN_BCKWD"


def read_micro(path: str) -> list[MicroOp]:
    """Collectives of a MICRO (or training) workload file, in file order."""
    return read_micro_file(path).ops


def read_micro_file(path: str) -> MicroFile:
    try:
        with open(path, encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise NetsimError(f"{path}: cannot read workload file ({getattr(exc, 'strerror', None) or exc})") from None
    if not lines or not lines[0].split():
        raise NetsimError(f"{path}:1: empty file (expected a MICRO header)")
    policy = lines[0].split()[0]
    if policy not in ("MICRO", TRAINING_POLICY):
        raise NetsimError(f"{path}:1: parallelism policy {policy!r} is not supported here "
                          f"(expected MICRO or {TRAINING_POLICY})")
    if len(lines) < 2 or not lines[1].strip().isdigit():
        raise NetsimError(f"{path}:2: expected the number of layer lines")
    count = int(lines[1].strip())
    body = [(i + 3, ln) for i, ln in enumerate(lines[2:]) if ln.strip()]
    if len(body) != count:
        raise NetsimError(f"{path}:2: header says {count} layer lines, file has {len(body)}")
    out: list[MicroOp] = []
    for lineno, ln in body:
        f = ln.split()
        where = f"{path}:{lineno}"
        if len(f) != 12:
            raise NetsimError(f"{where}: expected 12 fields, got {len(f)}")
        for ti, si in ((3, 4), (6, 7), (9, 10)):
            ops = _ops_of(f[ti], where)
            if not ops:
                continue
            try:
                size = int(f[si])
            except ValueError:
                raise NetsimError(f"{where}: field {si + 1} (comm size) is not an integer: {f[si]!r}") from None
            if size < 0:
                raise NetsimError(f"{where}: negative comm size {size}")
            out.extend(MicroOp(f[0], op, size, lineno) for op in ops)
    note = ""
    if policy != "MICRO":
        note = (f"{policy} file: its {len(out)} collectives run one at a time on the chosen group; compute "
                "times and TP/DP/EP group columns are ignored (`clustersim run` simulates training)")
    return MicroFile(out, policy, note)
