"""MLCommons Chakra execution traces (`.et`, one per rank) <-> clustersim workloads.

Needs the optional `mlc-chakra` package (import name `chakra`: its protobuf schema et_def_pb2 and its
protolib framing helpers) plus `protobuf`; install both with `pip install --no-deps mlc-chakra protobuf`
(its declared dependencies are not needed to read or write traces).

Export (`export_chakra`): file `<prefix>.<rank>.et` per rank holds a GlobalMetadata message, a
METADATA_NODE (rank, stage, world size; model, plan and schedule as JSON in `cs_*` attributes) and one
node per executed op of one iteration, in the order the simulator runs them: iteration_start, the
stage's pipeline tasks from sim.schedule (1F1B / interleaved / GPipe, micro-batches expanded with each
op's micro-batch scope), iteration_end.
- COMP_NODE: duration_micros (integer us, Chakra's field) from the caller's kernel times (compute_db for
  `clustersim workload --chakra`), attributes num_ops (FLOPs), tensor_size (HBM bytes), is_cpu_op false
  and cs_duration_s (the unrounded seconds).
- COMM_COLL_NODE: comm_type (CollectiveCommType), comm_size (bytes, clustersim's nccl-tests buffer size
  S, see workload_gen.workload), pg_name (key of `comm_group.json` in the same folder: pg_name -> ranks)
  and cs_pg_ranks (the concrete ranks from the plan's rank order).
- COMM_SEND_NODE / COMM_RECV_NODE: comm_src, comm_dst (ranks), comm_tag (matches a send to its
  receive), comm_size.
- Dependencies, per rank: data_deps chain the compute stream in program order (compute ops, blocking
  collectives, receives); a non-blocking collective depends on its issue point and is a data dependency
  of its wait point (the op named by wait_op; else the next op after its list; gradient buckets of the
  last micro-batch: the first iteration_end op); ctrl_deps order the collectives of one group kind
  (one NCCL communicator stream) and the sends of one direction.
- cs_op (JSON of the native op, workload_gen.native_io) and cs_list / cs_chunk / cs_mb / cs_index say
  where each node comes from, so a clustersim trace reads back to its compact Workload.

Import (`load_chakra`): a folder (or one of its `.et` files). A clustersim export rebuilds the compact
Workload from its annotations with every compute duration taken from the trace (provenance "trace"; the
mean over micro-batches). Any other trace (e.g. converted from a PyTorch execution trace) is read
generically: every rank must be present; rank 0's GPU nodes (in dependency order) form one list
simulated once per iteration; collectives keep type, size and group (cs_pg_ranks, else pg_name via
comm_group.json, else the whole world); groups must be TP blocks or DP stripes of an inferred plan;
compute nodes become `elementwise` ops with the trace's duration (their kernel kind is unknown, so the
contention model treats them as memory-bound). Pipeline send/recv in a trace without clustersim
annotations is refused; CPU ops, memory nodes, gather/scatter/barrier are ignored and counted in
meta["ignored_nodes"].
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

from workload_gen.errors import ConfigFileError, WorkloadError
from workload_gen.native_io import atomic_write_bytes
from workload_gen.workload import ChunkProgram, CommOp, ComputeOp, StageProgram, Workload

SCHEMA = "clustersim-chakra"
SCHEMA_VERSION = 1
ET_VERSION = "1.0.0"                 # GlobalMetadata.version, as mlc-chakra 1.0.0's generator writes
INSTALL_HINT = "pip install --no-deps mlc-chakra protobuf"
_FILE_RE = re.compile(r"^(?P<prefix>.+)\.(?P<rank>\d+)\.et(?:\.gz)?$")

# clustersim collective -> Chakra CollectiveCommType name (send/recv are node types, not collectives)
_COLL_TO_CHAKRA = {"all_reduce": "ALL_REDUCE", "reduce": "REDUCE", "all_gather": "ALL_GATHER",
                   "broadcast": "BROADCAST", "all_to_all": "ALL_TO_ALL", "reduce_scatter": "REDUCE_SCATTER"}
_CHAKRA_TO_COLL = {v: k for k, v in _COLL_TO_CHAKRA.items()} | {"REDUCE_SCATTER_BLOCK": "reduce_scatter"}


def _chakra():
    """(et_def_pb2 module, protolib.encodeMessage); WorkloadError naming the install when absent."""
    try:
        from chakra.schema.protobuf import et_def_pb2
        from chakra.src.third_party.utils.protolib import encodeMessage
    except ImportError as exc:
        raise WorkloadError(f"Chakra traces need the mlc-chakra package ({exc.name or exc} not importable): "
                            f"{INSTALL_HINT}") from None
    return et_def_pb2, encodeMessage


def chakra_available() -> bool:
    try:
        _chakra()
    except WorkloadError:
        return False
    return True


# ------------------------------------------------------------------------------------------ export
@dataclass
class ExportSummary:
    directory: str
    files: list[str]
    ranks: list[int]
    nodes_per_rank: dict[int, int]
    timing: str


def parse_ranks(text: str | None, world: int) -> list[int]:
    """'0-3,8,12-15' -> sorted ranks (None/'' -> every rank); WorkloadError names the bad part."""
    if not text:
        return list(range(world))
    out: set[int] = set()
    for part in str(text).split(","):
        part = part.strip()
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        try:
            a, b = (int(lo), int(hi)) if sep else (int(part), int(part))
        except ValueError:
            raise WorkloadError(f"--chakra-ranks '{text}': '{part}' is not a rank or range a-b") from None
        if not 0 <= a <= b < world:
            raise WorkloadError(f"--chakra-ranks '{text}': '{part}' outside ranks 0..{world - 1}")
        out.update(range(a, b + 1))
    if not out:
        raise WorkloadError(f"--chakra-ranks '{text}': no ranks given")
    return sorted(out)


def _placement(plan):
    # the concrete rank groups of every kind, from the plan's rank order (the simulator's own rule)
    from sim.placement import place
    return place(plan, SimpleNamespace(num_gpus=int(plan.world_size)))


def compute_db_times(w: Workload, gpu: str = "H100", db=None) -> tuple[Callable[[ComputeOp], float], str]:
    """The kernel times `clustersim run` uses (compute_db; ops with time_s keep theirs) and a description."""
    from sim.simulation import compute_op_times
    if db is None:
        from compute_db import open_db
        db = open_db()
    spec = db.gpu(gpu)
    times, sources = compute_op_times(w, spec.name, db)
    mix = Counter(sources.values())
    desc = f"compute_db on {spec.name} (" + ", ".join(f"{n} {s}" for s, n in sorted(mix.items())) + " kernels)"
    return (lambda op: times[id(op)]), desc


def _segments(w: Workload, stage: int) -> list[tuple[str, int, int]]:
    from sim.schedule import stage_tasks
    p, v = int(w.plan.pp), max(1, int(w.plan.vpp))
    kind = w.schedule if p > 1 or v > 1 else "1f1b"
    kind = "1f1b" if kind == "none" else kind
    tasks = stage_tasks(kind, stage, p, int(w.num_microbatches), v)
    return [("start", -1, -1)] + [(d, c, mb) for c, mb, d in tasks] + [("end", -1, -1)]


def _segment_ops(w: Workload, st: StageProgram, seg) -> tuple[str, list]:
    d, c, mb = seg
    m = int(w.num_microbatches)
    if d == "start":
        return "iteration_start", list(enumerate(st.iteration_start))
    if d == "end":
        return "iteration_end", list(enumerate(st.iteration_end))
    ch = st.chunks[c]
    src = ch.forward if d == "fwd" else ch.backward
    keep = [(i, op) for i, op in enumerate(src) if op.microbatch == "all" or (op.microbatch == "first" and mb == 0)
            or (op.microbatch == "last" and mb == m - 1)]
    return ("forward" if d == "fwd" else "backward"), keep


class _RankWriter:
    """Builds the node list of one rank (see the module docstring for the dependency rules)."""

    def __init__(self, pb, w: Workload, pl, rank: int, time_of, pg_ids: dict) -> None:
        self.pb, self.w, self.pl, self.rank = pb, w, pl, rank
        self.time_of = time_of
        self.pg_ids = pg_ids
        self.nodes: list = []
        self.stage = pl.stage_of(rank)
        self.p, self.v = int(w.plan.pp), max(1, int(w.plan.vpp))
        self.pp_row = pl.group_of("pp", rank)
        self.chain: int | None = None        # last node of the compute stream
        self.carry: list[int] = []           # finished-list waits the next stream node takes on
        self.last_of_kind: dict[str, int] = {}

    def _attr(self, name, **kw):
        return self.pb.AttributeProto(name=name, **kw)

    def _node(self, name: str, ntype: int, deps: list[int], ctrl: list[int] = ()):
        n = self.pb.Node(id=len(self.nodes), name=name, type=ntype)
        n.data_deps.extend(sorted(set(d for d in deps if d is not None)))
        n.ctrl_deps.extend(sorted(set(d for d in ctrl if d is not None)))
        self.nodes.append(n)
        return n

    def _stream_deps(self, on_chain: bool) -> list[int]:
        deps = [self.chain] + self.carry
        if on_chain:
            self.carry = []
        return deps

    def _where(self, n, lname: str, seg, index: int) -> None:
        a = self._attr
        n.attr.extend([a("cs_list", string_val=lname), a("cs_chunk", int64_val=seg[1]),
                       a("cs_mb", int64_val=seg[2]), a("cs_index", int64_val=index)])

    def _peer_rank(self, direction: str, c: int) -> tuple[int, int]:
        """(peer rank, peer virtual stage) of a send/recv of virtual chunk c towards 'next' | 'prev'."""
        vs = c * self.p + self.stage
        dst_vs = vs + 1 if direction == "next" else vs - 1
        return int(self.pp_row[dst_vs % self.p]), dst_vs

    def _tag(self, what: str, dst_vs: int, mb: int) -> int:
        # unique per (activation|gradient, receiving virtual stage, micro-batch), equal at both ends
        return ((mb * self.p * self.v + dst_vs) << 1) | (1 if what == "grad" else 0)

    def _p2p(self, op_name: str, kind: str, seg, size: int, index: int, lname: str, op=None) -> None:
        pb, a = self.pb, self._attr
        d, c, mb = seg
        fwd = d == "fwd"
        if kind == "recv":
            peer, _ = self._peer_rank("prev" if fwd else "next", c)
            my_vs = c * self.p + self.stage
            n = self._node(op_name, pb.COMM_RECV_NODE, self._stream_deps(True))
            n.attr.extend([a("comm_src", int64_val=peer), a("comm_dst", int64_val=self.rank),
                           a("comm_tag", int64_val=self._tag("act" if fwd else "grad", my_vs, mb))])
            self.chain = n.id
        else:
            peer, dst_vs = self._peer_rank("next" if fwd else "prev", c)
            key = "pp_next" if fwd else "pp_prev"
            n = self._node(op_name, pb.COMM_SEND_NODE, self._stream_deps(False), [self.last_of_kind.get(key)])
            self.last_of_kind[key] = n.id
            n.attr.extend([a("comm_src", int64_val=self.rank), a("comm_dst", int64_val=peer),
                           a("comm_tag", int64_val=self._tag("act" if fwd else "grad", dst_vs, mb))])
        n.attr.extend([a("comm_size", int64_val=int(size)), a("is_cpu_op", bool_val=False)])
        if op is not None:
            from workload_gen.native_io import op_to_dict
            n.attr.append(a("cs_op", string_val=json.dumps(op_to_dict(op), separators=(",", ":"))))
            self._where(n, lname, seg, index)
        else:
            n.attr.append(a("cs_implicit", bool_val=True))

    def write(self) -> list:
        from workload_gen.native_io import op_to_dict
        pb, a, w = self.pb, self._attr, self.w
        st = w.stages[self.stage]
        meta = self._node("clustersim_metadata", pb.METADATA_NODE, [])
        meta.attr.extend([
            a("cs_schema", string_val=SCHEMA), a("cs_version", int64_val=SCHEMA_VERSION),
            a("rank", int64_val=self.rank), a("stage", int64_val=self.stage),
            a("world_size", int64_val=int(w.plan.world_size)),
            a("cs_model", string_val=json.dumps(asdict(w.model), separators=(",", ":"))),
            a("cs_plan", string_val=json.dumps(asdict(w.plan), separators=(",", ":"))),
            a("cs_schedule", string_val=w.schedule), a("cs_num_microbatches", int64_val=int(w.num_microbatches)),
            a("cs_pp_send_bytes", int64_list=pb.Int64List(values=[int(s.pp_send_bytes) for s in w.stages])),
            a("cs_meta", string_val=json.dumps(w.meta, separators=(",", ":"), default=str)),
            a("cs_chunk_layers", string_val=json.dumps([list(ch.layers) for ch in st.chunks])),
        ])
        deferred: list[int] = []
        for seg in _segments(w, self.stage):
            lname, ops = _segment_ops(w, st, seg)
            if seg[0] == "end":
                self.carry += deferred
                deferred = []
            explicit = any(op.is_comm and op.group == "pp" for _, op in ops)
            vs = seg[1] * self.p + self.stage
            recv_ok = (seg[0] == "fwd" and vs > 0) or (seg[0] == "bwd" and vs < self.p * self.v - 1)
            send_ok = (seg[0] == "fwd" and vs < self.p * self.v - 1) or (seg[0] == "bwd" and vs > 0)
            if not explicit and recv_ok:
                size = st.pp_send_bytes if seg[0] == "bwd" else w.stages[(vs - 1) % self.p].pp_send_bytes
                self._p2p("pp_recv", "recv", seg, size, -1, lname)
            pending: dict[str, list[int]] = defaultdict(list)
            outstanding: list[int] = []
            for index, op in ops:
                if op.name in pending:
                    self.carry += pending.pop(op.name)
                if op.is_comm and op.group == "pp":
                    if (op.collective == "recv" and recv_ok) or (op.collective == "send" and send_ok):
                        self._p2p(op.name, op.collective, seg, op.size_bytes, index, lname, op)
                    continue
                if not op.is_comm:
                    t = float(self.time_of(op))
                    n = self._node(op.name, pb.COMP_NODE, self._stream_deps(True))
                    n.duration_micros = max(0, round(t * 1e6))
                    n.attr.extend([a("num_ops", uint64_val=max(0, round(op.flops))),
                                   a("tensor_size", uint64_val=max(0, round(op.bytes))),
                                   a("is_cpu_op", bool_val=False), a("cs_duration_s", double_val=t)])
                    self.chain = n.id
                else:
                    ranks = [int(r) for r in self.pl.group_of(op.group, self.rank)]
                    pg = self.pg_ids.setdefault(tuple(ranks), str(len(self.pg_ids)))
                    n = self._node(op.name, pb.COMM_COLL_NODE, self._stream_deps(op.blocking),
                                   [self.last_of_kind.get(op.group)])
                    self.last_of_kind[op.group] = n.id
                    n.attr.extend([a("comm_type", int64_val=pb.CollectiveCommType.Value(_COLL_TO_CHAKRA[op.collective])),
                                   a("comm_size", int64_val=int(op.size_bytes)), a("pg_name", string_val=pg),
                                   a("cs_pg_ranks", int64_list=pb.Int64List(values=ranks)),
                                   a("is_cpu_op", bool_val=False)])
                    if op.blocking:
                        self.chain = n.id
                    elif op.wait_op:
                        pending[op.wait_op].append(n.id)
                    elif op.microbatch == "last" and seg[0] in ("fwd", "bwd"):
                        deferred.append(n.id)
                    else:
                        outstanding.append(n.id)
                n.attr.append(a("cs_op", string_val=json.dumps(op_to_dict(op), separators=(",", ":"))))
                self._where(n, lname, seg, index)
            for ids in pending.values():
                outstanding += ids
            self.carry += outstanding
            if not explicit and send_ok:
                size = st.pp_send_bytes if seg[0] == "fwd" else w.stages[(vs - 1) % self.p].pp_send_bytes
                self._p2p("pp_send", "send", seg, size, -1, lname)
        return self.nodes


def export_chakra(w: Workload, out_dir: str | os.PathLike, *, time_of: Callable[[ComputeOp], float],
                  timing: str = "", ranks: list[int] | None = None, prefix: str = "clustersim") -> ExportSummary:
    """Write `<prefix>.<rank>.et` for each rank (default: all) and comm_group.json into `out_dir`.

    time_of(op) -> seconds of a ComputeOp (e.g. `compute_db_times`); timing: a note of their source."""
    import io
    pb, encode = _chakra()
    d = Path(out_dir)
    if d.exists() and not d.is_dir():
        raise ConfigFileError(f"--chakra: {d}: exists and is not a directory")
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigFileError(f"--chakra: {d}: cannot create ({exc.strerror})") from None
    world = int(w.plan.world_size)
    ranks = list(range(world)) if ranks is None else sorted(set(ranks))
    pl = _placement(w.plan)
    pg_ids: dict[tuple[int, ...], str] = {}
    files, counts = [], {}
    for r in ranks:
        nodes = _RankWriter(pb, w, pl, r, time_of, pg_ids).write()
        gm = pb.GlobalMetadata(version=ET_VERSION, attr=[
            pb.AttributeProto(name="schema", string_val=f"{SCHEMA}.{SCHEMA_VERSION}"),
            pb.AttributeProto(name="timing", string_val=timing or "caller-supplied kernel times")])
        buf = io.BytesIO()
        encode(buf, gm)
        for n in nodes:
            encode(buf, n)
        path = d / f"{prefix}.{r}.et"
        atomic_write_bytes(path, buf.getvalue())
        files.append(str(path))
        counts[r] = len(nodes)
    groups = {pg: list(rk) for rk, pg in sorted(pg_ids.items(), key=lambda kv: int(kv[1]))}
    atomic_write_bytes(d / "comm_group.json", (json.dumps(groups, indent=1) + "\n").encode())
    return ExportSummary(directory=str(d), files=files, ranks=ranks, nodes_per_rank=counts, timing=timing)


# ------------------------------------------------------------------------------------------ import
@dataclass
class RankTrace:
    rank: int
    path: str
    metadata: object                     # GlobalMetadata
    nodes: list = field(default_factory=list)


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(data):
            raise EOFError
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise ValueError("length prefix longer than 10 bytes")


def read_et(path: str | os.PathLike, rank: int = -1) -> RankTrace:
    """Read one `.et` file (plain or gzip): length-prefixed GlobalMetadata then Node messages.

    Errors (ConfigFileError) name the file and the last good node id."""
    from google.protobuf.message import DecodeError
    pb, _ = _chakra()
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise ConfigFileError(f"{p}: cannot read ({exc.strerror})") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            raise ConfigFileError(f"{p}: corrupt gzip data ({exc})") from None
    pos, last = 0, None
    out = RankTrace(rank=rank, path=str(p), metadata=pb.GlobalMetadata())
    first = True
    while pos < len(raw):
        where = "GlobalMetadata" if first else f"the node after id {last}" if last is not None else "the first node"
        try:
            size, pos = _read_varint(raw, pos)
        except (EOFError, ValueError):
            raise ConfigFileError(f"{p}: byte {pos}: truncated length prefix of {where}") from None
        if pos + size > len(raw):
            raise ConfigFileError(f"{p}: byte {pos}: {where} is truncated ({size} bytes announced, "
                                  f"{len(raw) - pos} left)")
        msg = pb.GlobalMetadata() if first else pb.Node()
        try:
            msg.ParseFromString(raw[pos:pos + size])
        except DecodeError as exc:
            raise ConfigFileError(f"{p}: byte {pos}: {where} is not a valid Chakra message ({exc})") from None
        pos += size
        if first:
            out.metadata = msg
            first = False
        else:
            out.nodes.append(msg)
            last = msg.id
    if first:
        raise ConfigFileError(f"{p}: empty file (no Chakra GlobalMetadata)")
    return out


def _attrs(node) -> dict:
    out = {}
    for at in node.attr:
        which = at.WhichOneof("value")
        if which is None:
            continue
        v = getattr(at, which)
        out[at.name] = list(v.values) if which.endswith("_list") else v
    return out


def find_trace_files(path: str | os.PathLike) -> tuple[Path, str, dict[int, Path]]:
    """(folder, prefix, {rank: file}) of a Chakra trace folder or one of its `<prefix>.<rank>.et` files."""
    p = Path(path)
    want = None
    if p.is_file():
        m = _FILE_RE.match(p.name)
        if not m:
            raise ConfigFileError(f"{p}: not a Chakra trace file name (<prefix>.<rank>.et)")
        want, p = m["prefix"], p.parent
    if not p.is_dir():
        raise ConfigFileError(f"{p}: Chakra trace folder not found")
    by_prefix: dict[str, dict[int, Path]] = defaultdict(dict)
    for f in sorted(p.iterdir()):
        m = _FILE_RE.match(f.name)
        if m and f.is_file():
            by_prefix[m["prefix"]][int(m["rank"])] = f
    if want is not None:
        return p, want, by_prefix[want]
    if not by_prefix:
        raise ConfigFileError(f"{p}: no Chakra trace files (<prefix>.<rank>.et)")
    if len(by_prefix) > 1:
        raise ConfigFileError(f"{p}: traces of several jobs ({', '.join(sorted(by_prefix))}): give one file "
                              "<prefix>.<rank>.et to choose")
    prefix, files = next(iter(by_prefix.items()))
    return p, prefix, files


def is_chakra_input(path: str | os.PathLike) -> bool:
    """A folder holding `<prefix>.<rank>.et` files, or such a file."""
    p = Path(path)
    if p.is_file():
        return bool(_FILE_RE.match(p.name))
    return p.is_dir() and any(_FILE_RE.match(f.name) for f in p.iterdir())


def load_chakra(path: str | os.PathLike) -> Workload:
    """Import a Chakra trace folder (or one of its files) as a Workload (module docstring)."""
    folder, prefix, files = find_trace_files(path)
    traces = {r: read_et(f, r) for r, f in sorted(files.items())}
    empty = [t.path for t in traces.values() if not t.nodes]
    if empty:   # a rank without nodes would silently drop out of the job
        raise ConfigFileError(f"{empty[0]}: no Chakra nodes after the GlobalMetadata (empty or corrupt trace)")
    first = traces[min(traces)]
    meta_nodes = [n for n in first.nodes if n.type == _chakra()[0].METADATA_NODE]
    cs = _attrs(meta_nodes[0]) if meta_nodes else {}
    if cs.get("cs_schema") == SCHEMA:
        return _load_annotated(folder, prefix, traces, cs)
    return _load_generic(folder, prefix, traces)


def _json_attr(trace: RankTrace, node, attrs: dict, key: str):
    try:
        return json.loads(attrs[key])
    except (KeyError, json.JSONDecodeError) as exc:
        raise ConfigFileError(f"{trace.path}: node id {node.id}: attribute '{key}' missing or not JSON ({exc})") from None


def _load_annotated(folder: Path, prefix: str, traces: dict[int, RankTrace], cs: dict) -> Workload:
    from sim.errors import SimError
    from workload_gen.model import ModelSpec
    from workload_gen.native_io import _model_fields, op_from_dict
    from workload_gen.plan import ParallelPlan
    pb, _ = _chakra()
    first = traces[min(traces)]
    if cs.get("cs_version") != SCHEMA_VERSION:
        raise ConfigFileError(f"{first.path}: node id 0: cs_version {cs.get('cs_version')!r} unsupported "
                              f"(this clustersim reads {SCHEMA_VERSION})")
    meta0 = [n for n in first.nodes if n.type == pb.METADATA_NODE][0]
    try:
        model = ModelSpec(**_model_fields(_json_attr(first, meta0, cs, "cs_model")))
        plan = ParallelPlan(**_json_attr(first, meta0, cs, "cs_plan"))
    except (TypeError, ValueError) as exc:
        raise ConfigFileError(f"{first.path}: node id {meta0.id}: model/plan attributes malformed ({exc})") from None
    world, p, v = int(plan.world_size), int(plan.pp), max(1, int(plan.vpp))
    bad = [r for r in traces if not 0 <= r < world]
    if bad:
        raise ConfigFileError(f"{traces[bad[0]].path}: rank {bad[0]} outside the plan's world 0..{world - 1}")
    pl = _placement(plan)
    reps: dict[int, int] = {}
    for r in sorted(traces):
        reps.setdefault(pl.stage_of(r), r)
    missing = [s for s in range(p) if s not in reps]
    if missing:
        raise ConfigFileError(f"{folder}: no trace file of pipeline stage {missing[0]} (ranks "
                              f"{[int(x) for x in pl.stage_ranks(missing[0])][:8]}...): export those ranks")
    ignored: Counter = Counter()
    # every rank: collective groups must be the plan's (the import simulates the plan's groups)
    for r, tr in traces.items():
        for n in tr.nodes:
            if n.type != pb.COMM_COLL_NODE:
                continue
            at = _attrs(n)
            if "cs_op" not in at or "cs_pg_ranks" not in at:
                continue
            op = _json_attr(tr, n, at, "cs_op")
            try:
                want = [int(x) for x in pl.group_of(str(op.get("group")), r)]
            except SimError:
                want = None
            if want != [int(x) for x in at["cs_pg_ranks"]]:
                raise ConfigFileError(f"{tr.path}: node id {n.id}: process group {at['cs_pg_ranks']} is not the "
                                      f"plan's '{op.get('group')}' group of rank {r} ({want})")
    stages = []
    for s in range(p):
        tr = traces[reps[s]]
        lists: dict[tuple[str, int], dict[int, tuple[dict, list[float]]]] = defaultdict(dict)
        for n in tr.nodes:
            if n.type == pb.METADATA_NODE:
                continue
            at = _attrs(n)
            if at.get("cs_implicit"):
                continue
            if "cs_op" not in at or "cs_list" not in at:
                ignored[f"{pb.NodeType.Name(n.type) if n.type in pb.NodeType.values() else n.type} without "
                        "clustersim annotation"] += 1
                continue
            key = (at["cs_list"], int(at.get("cs_chunk", -1)))
            idx = int(at.get("cs_index", -1))
            slot = lists[key].get(idx)
            if slot is None:
                slot = (_json_attr(tr, n, at, "cs_op"), [])
                lists[key][idx] = slot
            if n.type == pb.COMP_NODE:
                slot[1].append(float(at["cs_duration_s"]) if "cs_duration_s" in at else n.duration_micros * 1e-6)

        def ops_of(lname: str, chunk: int, tr=tr, lists=lists) -> list:
            out = []
            for idx, (d, durs) in sorted(lists.get((lname, chunk), {}).items()):
                try:
                    op = op_from_dict(d)
                except (KeyError, TypeError, ValueError) as exc:
                    raise ConfigFileError(f"{tr.path}: {lname}[{idx}]: cs_op malformed ({exc})") from None
                if not op.is_comm:
                    op = replace(op, time_s=sum(durs) / len(durs))
                out.append(op)
            return out
        rep_meta = [n for n in tr.nodes if n.type == pb.METADATA_NODE]
        rep_at = _attrs(rep_meta[0]) if rep_meta else {}
        layers = _json_attr(tr, rep_meta[0], rep_at, "cs_chunk_layers") if rep_meta else []
        if len(layers) != v:
            raise ConfigFileError(f"{tr.path}: node id 0: cs_chunk_layers lists {len(layers)} chunks, plan vpp = {v}")
        chunks = []
        for c in range(v):
            chunks.append(ChunkProgram(chunk=c, layers=tuple(layers[c]), forward=ops_of("forward", c),
                                       backward=ops_of("backward", c)))
        stages.append(StageProgram(stage=s, chunks=chunks, iteration_start=ops_of("iteration_start", -1),
                                   iteration_end=ops_of("iteration_end", -1),
                                   pp_send_bytes=int((cs.get("cs_pp_send_bytes") or [0] * p)[s])))
    try:
        src_meta = json.loads(cs.get("cs_meta") or "{}")
    except json.JSONDecodeError:
        src_meta = {}
    meta = {"imported_from": "chakra", "source": str(folder), "prefix": prefix, "time_provenance": "trace",
            "ranks_read": len(traces), "representative_ranks": [reps[s] for s in range(p)],
            "exported_meta": src_meta, "ignored_nodes": dict(ignored)}
    return Workload(model=model, plan=plan, stages=stages, schedule=str(cs.get("cs_schedule", "1f1b")),
                    num_microbatches=int(cs.get("cs_num_microbatches", 1)), meta=meta)


def _topo_order(tr: RankTrace, keep: dict[int, object]) -> list:
    """(kept node id, its kept ancestors reached through dropped nodes or directly) in dependency
    order, ties broken by file order."""
    import heapq
    pos = {n.id: i for i, n in enumerate(tr.nodes)}
    deps: dict[int, set[int]] = {}
    children: dict[int, list[int]] = defaultdict(list)
    for n in tr.nodes:
        ds = set(n.data_deps) | set(n.ctrl_deps)
        for dep in ds:
            if dep not in pos:
                raise ConfigFileError(f"{tr.path}: node id {n.id}: depends on unknown node id {dep}")
            children[dep].append(n.id)
        deps[n.id] = ds
    indeg = {nid: len(ds) for nid, ds in deps.items()}
    heap = [(pos[nid], nid) for nid, k in indeg.items() if k == 0]
    heapq.heapify(heap)
    order = []
    while heap:
        _, nid = heapq.heappop(heap)
        order.append(nid)
        for c in children[nid]:
            indeg[c] -= 1
            if indeg[c] == 0:
                heapq.heappush(heap, (pos[c], c))
    if len(order) != len(deps):
        stuck = min((nid for nid, k in indeg.items() if k > 0), key=lambda x: pos[x])
        raise ConfigFileError(f"{tr.path}: node id {stuck}: dependency cycle")
    kept_parents: dict[int, set[int]] = {}
    for nid in order:   # dependencies through dropped nodes (CPU ops, memory nodes) are inherited
        ps: set[int] = set()
        for d in deps[nid]:
            ps |= {d} if d in keep else kept_parents[d]
        kept_parents[nid] = ps
    return [(nid, kept_parents[nid]) for nid in order if nid in keep]


def _load_generic(folder: Path, prefix: str, traces: dict[int, RankTrace]) -> Workload:
    from workload_gen.model import ModelSpec
    from workload_gen.plan import ParallelPlan
    pb, _ = _chakra()
    world = max(traces) + 1
    missing = sorted(set(range(world)) - set(traces))
    if missing:
        raise ConfigFileError(f"{folder}: {prefix}.{missing[0]}.et missing: a trace without clustersim "
                              f"annotations needs every rank 0..{world - 1}")
    groups_file = folder / "comm_group.json"
    pg_map: dict[str, list[int]] = {}
    if groups_file.is_file():
        try:
            raw = json.loads(groups_file.read_text())
            pg_map = {str(k): [int(x) for x in v] for k, v in raw.items()}
        except (json.JSONDecodeError, AttributeError, TypeError, ValueError) as exc:
            raise ConfigFileError(f"{groups_file}: expected {{pg_name: [ranks]}} ({exc})") from None
    ignored: Counter = Counter()
    programs: dict[int, list] = {}
    all_groups: set[tuple[int, ...]] = set()
    for r, tr in traces.items():
        keep: dict[int, tuple] = {}
        for n in tr.nodes:
            at = _attrs(n)
            t = n.type
            tname = pb.NodeType.Name(t) if t in pb.NodeType.values() else f"type {t}"
            if t == pb.METADATA_NODE:
                continue
            if t in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE):
                raise ConfigFileError(f"{tr.path}: node id {n.id}: {tname}: pipeline send/recv is imported only "
                                      "from clustersim exports (stage structure unknown)")
            if t == pb.COMP_NODE:
                if at.get("is_cpu_op", False):
                    ignored["COMP_NODE (CPU op)"] += 1
                    continue
                keep[n.id] = ("comp", n, at)
            elif t == pb.COMM_COLL_NODE:
                ct = at.get("comm_type")
                name = pb.CollectiveCommType.Name(ct) if ct in pb.CollectiveCommType.values() else None
                if ct is None:
                    raise ConfigFileError(f"{tr.path}: node id {n.id}: COMM_COLL_NODE without comm_type")
                coll = _CHAKRA_TO_COLL.get(name or "")
                if coll is None:
                    ignored[f"COMM_COLL_NODE {name or ct}"] += 1
                    continue
                if "comm_size" not in at or int(at["comm_size"]) < 0:
                    raise ConfigFileError(f"{tr.path}: node id {n.id}: COMM_COLL_NODE without a comm_size >= 0")
                if "cs_pg_ranks" in at:
                    grp = tuple(sorted(int(x) for x in at["cs_pg_ranks"]))
                elif at.get("pg_name"):
                    if str(at["pg_name"]) not in pg_map:
                        raise ConfigFileError(f"{tr.path}: node id {n.id}: pg_name '{at['pg_name']}' not in "
                                              f"{groups_file.name}")
                    grp = tuple(sorted(pg_map[str(at["pg_name"])]))
                else:
                    grp = tuple(range(world))
                if r not in grp:
                    raise ConfigFileError(f"{tr.path}: node id {n.id}: rank {r} is not in its process group {list(grp)}")
                all_groups.add(grp)
                keep[n.id] = ("coll", n, at, coll, grp)
            else:
                ignored[tname] += 1
        programs[r] = [(keep[nid], ps) for nid, ps in _topo_order(tr, keep)]
    tp = _infer_tp(world, all_groups, folder)
    plan = ParallelPlan(world_size=world, tp=tp, pp=1, micro_batch_size=1, global_batch_size=world // tp,
                        seq_length=1)
    pl = _placement(plan)
    warnings = []
    sig0 = [_signature(e) for e, _ in programs[0]]
    differ = [r for r in programs if [_signature(e) for e, _ in programs[r]] != sig0]
    if differ:
        warnings.append(f"{len(differ)} rank(s) (first: {differ[0]}) run a different node sequence than rank 0; "
                        "rank 0's program is simulated for every rank")
    ops = _generic_ops(traces[0], programs[0], pl, tp)
    model = ModelSpec(name=f"chakra:{folder.name}/{prefix}", num_layers=1, hidden_size=1, num_attention_heads=1,
                      ffn_hidden_size=1, vocab_size=1)
    stage = StageProgram(stage=0, chunks=[ChunkProgram(chunk=0, layers=(0,), forward=ops, backward=[])])
    meta = {"imported_from": "chakra", "model_known": False, "time_provenance": "trace", "source": str(folder),
            "prefix": prefix, "ranks_read": len(traces), "ignored_nodes": dict(ignored), "warnings": warnings,
            "notes": "model dimensions unknown (placeholder ModelSpec); compute ops carry the trace's durations"}
    return Workload(model=model, plan=plan, stages=[stage], schedule="none", num_microbatches=1, meta=meta)


def _signature(entry) -> tuple:
    if entry[0] == "comp":
        return ("comp",)
    return ("coll", entry[3], int(entry[2]["comm_size"]), len(entry[4]))


def _infer_tp(world: int, groups: set[tuple[int, ...]], folder: Path) -> int:
    """TP size: the largest aligned contiguous block size below the world (1 when there is none)."""
    sizes = {len(g) for g in groups if 1 < len(g) < world and g == tuple(range(g[0], g[0] + len(g)))
             and g[0] % len(g) == 0}
    tp = max(sizes) if sizes else 1
    if world % tp:
        raise ConfigFileError(f"{folder}: TP block size {tp} does not divide the world {world}")
    for g in groups:
        block = g == tuple(range(g[0], g[0] + len(g))) and g[0] % len(g) == 0 and len(g) == tp
        stripe = len(g) == world // tp and all(b - a == tp for a, b in zip(g, g[1:]))
        if not (block or stripe or len(g) == 1):
            raise ConfigFileError(f"{folder}: process group {list(g)[:16]} is neither a TP block of {tp} nor a DP "
                                  f"stripe (every {tp}th rank) of world {world}")
    return tp


def _generic_ops(tr: RankTrace, program: list, pl, tp: int) -> list:
    """Ops of rank 0 in dependency order; a collective is blocking when the node right after it depends
    on it, otherwise it is waited by its first dependant (wait_op) or at the end of the list."""
    first_user: dict[int, int] = {}
    for i, (_, parents) in enumerate(program):
        for q in parents:
            first_user.setdefault(q, i)
    names = []
    for entry, _ in program:
        n = entry[1]
        names.append(n.name or f"node{n.id}")
    ops: list = []
    rename: dict[int, str] = {}
    for i, (entry, _) in enumerate(program):
        n = entry[1]
        if entry[0] == "comp":
            at = entry[2]
            dur = float(at["cs_duration_s"]) if "cs_duration_s" in at else n.duration_micros * 1e-6
            ops.append(ComputeOp(name=names[i], kind="elementwise", shape=(("numel", 1),), dtype="bf16",
                                 flops=float(at.get("num_ops", 0)), bytes=float(at.get("tensor_size", 0)),
                                 variant="", time_s=dur))
            continue
        _, _, at, coll, grp = entry
        kind = "tp" if grp == tuple(sorted(int(x) for x in pl.group_of("tp", tr.rank))) else "dp"
        user = first_user.get(n.id)
        blocking = user == i + 1
        wait = None
        if user is not None and not blocking:
            # wait_op names the first later op with that name: make the dependant's name unique if needed
            if any(names[j] == names[user] for j in range(i + 1, user)):
                rename[user] = f"{names[user]}#{program[user][0][1].id}"
                names[user] = rename[user]
            wait = names[user]
        ops.append(CommOp(name=names[i], collective=coll, group=kind, size_bytes=int(at["comm_size"]),
                          blocking=blocking, wait_op=wait))
    if rename:   # names changed after earlier ops were built
        ops = [replace(op, name=names[k]) if op.name != names[k] else op for k, op in enumerate(ops)]
    return ops


# ------------------------------------------------------------------------------------------ CLI
def run_workload_command(args) -> int:
    """`clustersim workload`: workload_gen's command with the Chakra writer of this module."""
    from workload_gen import cli as workload_cli
    return workload_cli.run(args, chakra=ChakraWriter)


class ChakraWriter:
    """What `workload_gen.cli.run` calls for --chakra / --chakra-ranks."""

    @staticmethod
    def check_args(args, world: int) -> None:
        check_chakra_args(args, world)

    @staticmethod
    def write_from_args(w: Workload, args, kernel_timer=None) -> str:
        return write_chakra_from_args(w, args, kernel_timer)


def check_chakra_args(args, world: int) -> None:
    """`clustersim workload --chakra DIR [--chakra-ranks R]`: fail early (package, folder, ranks)."""
    if not getattr(args, "chakra", None):
        raise WorkloadError("--chakra-ranks: give --chakra DIR too")
    _chakra()
    d = Path(args.chakra)
    if d.exists() and not d.is_dir():
        raise ConfigFileError(f"--chakra: {d}: exists and is not a directory")
    parse_ranks(getattr(args, "chakra_ranks", None), int(world))


def write_chakra_from_args(w: Workload, args, kernel_timer=None) -> str:
    """Write the traces for `clustersim workload --chakra`; returns a description for the output list.
    Kernel times: `kernel_timer(w)` when the caller passes one, else compute_db on --chakra-gpu."""
    ranks = parse_ranks(getattr(args, "chakra_ranks", None), int(w.plan.world_size))
    if kernel_timer is not None:
        time_of, timing = kernel_timer(w)
    else:
        from compute_db.errors import ComputeDBError
        try:
            time_of, timing = compute_db_times(w, getattr(args, "chakra_gpu", None) or "H100")
        except ComputeDBError as exc:
            raise WorkloadError(f"--chakra-gpu: {exc}") from None
    s = export_chakra(w, args.chakra, time_of=time_of, timing=timing, ranks=ranks)
    return f"{s.directory} ({len(s.files)} rank file(s) + comm_group.json; kernel times: {timing})"
