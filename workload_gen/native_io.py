"""clustersim's native workload document: one versioned JSON file that round-trips a Workload.

Layout: {"format": "clustersim-workload", "version": 1, "model": {...ModelSpec fields; tuples as lists},
"plan": {...},
"schedule", "num_microbatches", "meta", "stages": [{"stage", "pp_send_bytes", "iteration_start": [ops],
"iteration_end": [ops], "chunks": [{"chunk", "layers", "forward": [ops], "backward": [ops]}]}]}.
An op is an object with "op": "compute" | "comm" and its dataclass fields; fields equal to their
default are omitted; compute shapes are written as {"m": .., "n": .., "k": ..} in COMPUTE_KINDS order.
`write_ops_csv` additionally writes a flat table of every op (one row per op) for spreadsheets.
"""

from __future__ import annotations

import csv
import io
import json
import os
import tempfile
from dataclasses import MISSING, asdict, fields
from pathlib import Path

from workload_gen.errors import ConfigFileError, WorkloadError
from workload_gen.limits import MAX_MICROBATCHES, allow_huge
from workload_gen.model import ModelSpec
from workload_gen.native_checks import SCHEDULES, DocError, check_stages, need_choice, need_int
from workload_gen.plan import ParallelPlan
from workload_gen.plan_validation import validate_plan
from workload_gen.workload import COMPUTE_KINDS, ChunkProgram, CommOp, ComputeOp, StageProgram, Workload

FORMAT = "clustersim-workload"


def check_output_path(path: str | os.PathLike) -> Path:
    """Reject an output path that cannot be a file: an existing directory or a missing parent folder."""
    path = Path(path)
    if path.is_dir() or not path.name or path.name in (".", ".."):
        raise ConfigFileError(f"{path}: is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        what = "is not a directory" if parent.exists() else "does not exist"
        raise ConfigFileError(f"{path}: cannot write (folder {parent} {what})")
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """atomic_write_bytes of `text` in UTF-8."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place.

    Errors name `path` (never the temporary name) as a one-line ConfigFileError."""
    path = check_output_path(path)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent if str(path.parent) else ".")
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot write ({exc.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)   # mkstemp creates 0600; give the file the user's usual mode
        os.replace(tmp, path)
    except OSError as exc:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise ConfigFileError(f"{path}: cannot write ({exc.strerror})") from None
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _defaults(cls) -> dict:
    out = {}
    for f in fields(cls):
        if f.default is not MISSING:
            out[f.name] = f.default
    return out


_COMPUTE_DEFAULTS = _defaults(ComputeOp)
_COMM_DEFAULTS = _defaults(CommOp)


def op_to_dict(op) -> dict:
    if isinstance(op, ComputeOp):
        d = {"op": "compute", "name": op.name, "kind": op.kind, "shape": dict(op.shape), "dtype": op.dtype,
             "flops": op.flops, "bytes": op.bytes}
        for k in ("variant", "layer", "phase", "saved_bytes", "microbatch", "causal", "time_s"):
            v = getattr(op, k)
            if v != _COMPUTE_DEFAULTS[k]:
                d[k] = v
        return d
    d = {"op": "comm", "name": op.name, "collective": op.collective, "group": op.group, "size_bytes": op.size_bytes}
    for k in ("layer", "phase", "blocking", "wait_op", "peer", "microbatch", "dtype"):
        v = getattr(op, k)
        if v != _COMM_DEFAULTS[k]:
            d[k] = v
    return d


def op_from_dict(d: dict):
    d = dict(d)
    kind = d.pop("op")
    if kind == "compute":
        shape = d.pop("shape")
        order = COMPUTE_KINDS.get(d["kind"])
        if order is None:
            raise KeyError(f"kind {d['kind']!r}")
        d["shape"] = tuple((f, int(shape[f])) for f in order)
        return ComputeOp(**d)
    if kind == "comm":
        return CommOp(**d)
    raise KeyError(f"op {kind!r}")


def workload_to_dict(w: Workload) -> dict:
    return {
        "format": FORMAT, "version": Workload.FORMAT_VERSION,
        "model": asdict(w.model), "plan": asdict(w.plan),
        "schedule": w.schedule, "num_microbatches": w.num_microbatches, "meta": w.meta,
        "stages": [{
            "stage": st.stage, "pp_send_bytes": st.pp_send_bytes,
            "iteration_start": [op_to_dict(op) for op in st.iteration_start],
            "iteration_end": [op_to_dict(op) for op in st.iteration_end],
            "chunks": [{"chunk": ch.chunk, "layers": list(ch.layers),
                        "forward": [op_to_dict(op) for op in ch.forward],
                        "backward": [op_to_dict(op) for op in ch.backward]} for ch in st.chunks],
        } for st in w.stages],
    }


def _model_fields(d: dict) -> dict:
    """ModelSpec keyword arguments from the document (moe_layer_pattern: JSON list -> tuple; documents
    written before the field existed kept it in extra["moe_layer_pattern"])."""
    d = dict(d)
    extra = d.get("extra")
    if d.get("moe_layer_pattern") is None and isinstance(extra, dict) and "moe_layer_pattern" in extra:
        extra = dict(extra)
        d["moe_layer_pattern"] = extra.pop("moe_layer_pattern")
        d["extra"] = extra
    if isinstance(d.get("moe_layer_pattern"), list):
        d["moe_layer_pattern"] = tuple(d["moe_layer_pattern"])
    return d


def workload_from_dict(doc: dict, source: str = "<workload>") -> Workload:
    where = "document"
    try:
        if doc.get("format") != FORMAT:
            raise ConfigFileError(f"{source}: key 'format': expected {FORMAT!r} (got {doc.get('format')!r})")
        if doc.get("version") != Workload.FORMAT_VERSION:
            raise ConfigFileError(f"{source}: key 'version': unsupported workload format version "
                                  f"{doc.get('version')!r} (this clustersim reads {Workload.FORMAT_VERSION})")
        where = "model"
        if not isinstance(doc.get("model"), dict):
            raise ConfigFileError(f"{source}: key 'model': must be an object")
        model = ModelSpec(**_model_fields(doc["model"]))
        where = "plan"
        if not isinstance(doc.get("plan"), dict):
            raise ConfigFileError(f"{source}: key 'plan': must be an object")
        plan = ParallelPlan(**doc["plan"])
        _check_document(doc, model, plan)
        stages = []
        for si, st in enumerate(doc["stages"]):
            where = f"stages[{si}]"
            chunks = [ChunkProgram(chunk=ch["chunk"], layers=tuple(ch["layers"]),
                                   forward=[op_from_dict(o) for o in ch["forward"]],
                                   backward=[op_from_dict(o) for o in ch["backward"]]) for ch in st["chunks"]]
            stages.append(StageProgram(stage=st["stage"], chunks=chunks,
                                       iteration_start=[op_from_dict(o) for o in st.get("iteration_start", [])],
                                       iteration_end=[op_from_dict(o) for o in st.get("iteration_end", [])],
                                       pp_send_bytes=st.get("pp_send_bytes", 0)))
        return Workload(model=model, plan=plan, stages=stages, schedule=doc["schedule"],
                        num_microbatches=doc["num_microbatches"], meta=doc.get("meta", {}))
    except DocError as exc:
        raise ConfigFileError(_keyed(source, str(exc))) from None
    except ConfigFileError:
        raise
    except WorkloadError as exc:   # validate_plan: "model.<field>: ..." / "plan.<field>: ..."
        raise ConfigFileError(_keyed(source, str(exc))) from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        raise ConfigFileError(f"{source}: key '{where}': malformed workload document ({exc})") from None


def _keyed(source: str, message: str) -> str:
    """'<path>: <rule>' -> "<source>: key '<path>': <rule>" (the file format of every reader's errors)."""
    path, _, rule = message.partition(": ")
    return f"{source}: key '{path}': {rule}"


def _check_document(doc: dict, model: ModelSpec, plan: ParallelPlan) -> None:
    """The model and plan pass the same validation as the CLI's (bounds included); every stage, chunk and
    op field is checked (native_checks). Raises WorkloadError with the key path (source added by caller)."""
    validate_plan(model, plan)
    need_choice("schedule", doc.get("schedule"), SCHEDULES)
    need_int("num_microbatches", doc.get("num_microbatches"), 1, MAX_MICROBATCHES if not allow_huge() else 1 << 62)
    if not isinstance(doc.get("meta", {}), dict):
        raise DocError("meta: must be an object")
    check_stages(doc, plan.pp, plan.vpp, model.num_layers)


def save_workload(w: Workload, path: str | os.PathLike) -> None:
    """Write the workload as versioned JSON (atomic)."""
    atomic_write_text(path, json.dumps(workload_to_dict(w), separators=(",", ":")))


def _line_of_byte(path, offset: int) -> int:
    """1-based line of the first undecodable byte (json.load reads in one block, so `offset` is exact
    unless the file started with a UTF-8 BOM; the line is then still right)."""
    with open(path, "rb") as f:
        return f.read(offset).count(b"\n") + 1


def load_workload(path: str | os.PathLike) -> Workload:
    """Read a workload written by `save_workload` (ConfigFileError names the file and key)."""
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
    except json.JSONDecodeError as exc:
        raise ConfigFileError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from None
    except UnicodeDecodeError as exc:
        raise ConfigFileError(f"{path}:{_line_of_byte(path, exc.start)}: not UTF-8 text") from None
    except RecursionError:   # [[[[...]]]] nested deeper than the parser's stack
        raise ConfigFileError(f"{path}: not a workload document (JSON nested too deeply)") from None
    if not isinstance(doc, dict):
        raise ConfigFileError(f"{path}: key 'format': expected a JSON object")
    return workload_from_dict(doc, str(path))


CSV_COLUMNS = ("stage", "chunk", "list", "index", "op", "name", "layer", "phase", "microbatch", "kind",
               "variant", "shape", "dtype", "flops", "bytes", "saved_bytes", "collective", "group", "size_bytes",
               "blocking", "wait_op", "peer")


def write_ops_csv(w: Workload, path: str | os.PathLike) -> None:
    """Flat table of every op (stage, chunk, list, index, fields); `shape` as k=v;k=v."""
    buf = io.StringIO()
    wr = csv.writer(buf)
    wr.writerow(CSV_COLUMNS)
    for st in w.stages:
        lists = [(-1, "iteration_start", st.iteration_start)]
        lists += [(x, name, ops) for ch in st.chunks for x, name, ops in
                  ((ch.chunk, "forward", ch.forward), (ch.chunk, "backward", ch.backward))]
        lists.append((-1, "iteration_end", st.iteration_end))
        for chunk, lname, ops in lists:
            for i, op in enumerate(ops):
                if isinstance(op, ComputeOp):
                    shape = ";".join(f"{k}={v}" for k, v in op.shape)
                    wr.writerow((st.stage, chunk, lname, i, "compute", op.name, op.layer, op.phase, op.microbatch,
                                 op.kind, op.variant, shape, op.dtype, op.flops, op.bytes, op.saved_bytes,
                                 "", "", "", "", "", ""))
                else:
                    wr.writerow((st.stage, chunk, lname, i, "comm", op.name, op.layer, op.phase, op.microbatch,
                                 "", "", "", op.dtype, "", "", "", op.collective, op.group, op.size_bytes,
                                 op.blocking, op.wait_op or "", op.peer or ""))
    atomic_write_text(path, buf.getvalue())
