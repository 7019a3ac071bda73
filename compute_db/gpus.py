"""GPU spec table: per-dtype dense peaks, HBM size and bandwidth, NVLink and NIC rates (SI units).

The shipped table is compute_db/data/gpus.yaml (datasheet figures from reference/hardware.md; SM counts from
the vendors' datasheets / whitepapers, sources in the file). Users add
GPUs with their own YAML file of the same layout (`load_gpu_file`); names are matched case-insensitively
and through aliases. NVLink and NIC figures are per GPU and per direction.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from compute_db.errors import ComputeDBError

DTYPES = ("bf16", "fp16", "fp8", "fp32")
SHIPPED_GPU_FILE = Path(__file__).resolve().parent / "data" / "gpus.yaml"


@dataclass(frozen=True)
class GPUSpec:
    """One GPU's datasheet figures in SI units (FLOP/s, bytes, B/s)."""
    name: str
    peak_flops: dict[str, float]        # dtype -> dense FLOP/s ("fp32" is the TF32 tensor-core rate)
    hbm_bytes: float
    hbm_Bps: float
    nvlink_Bps: float                   # per GPU, one direction (0: no switched NVLink)
    nic_Bps: float                      # per GPU, one direction (0: none typical)
    aliases: tuple[str, ...] = ()
    similar_to: tuple[str, ...] = ()    # GPUs whose measured kernel data stand in when this one has none
    fp8_native: bool = True             # False: fp8 listed at the 16-bit rate (no fp8 tensor cores)
    sms: int = 0                        # streaming multiprocessors (GEMM tile waves); 0: unknown (no wave term)
    meta: dict = field(default_factory=dict, compare=False)


def _num(entry: Mapping, key: str, where: str, default: float | None = None) -> float:
    value = entry.get(key, default)
    if value is None:
        raise ComputeDBError(f"{where}: missing field '{key}'")
    try:
        value = float(value)
    except (TypeError, ValueError):
        raise ComputeDBError(f"{where}: field '{key}' must be a number, got {value!r}") from None
    if value < 0:
        raise ComputeDBError(f"{where}: field '{key}' must be >= 0, got {value}")
    return value


def _sm_count(entry: Mapping, where: str) -> int:
    value = entry.get("sm_count")
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ComputeDBError(f"{where}: field 'sm_count' must be a whole number >= 1, got {value!r}")
    return value


def _parse(data: object, source: str) -> dict[str, GPUSpec]:
    if not isinstance(data, Mapping) or not isinstance(data.get("gpus"), Mapping):
        raise ComputeDBError(f"{source}: expected a mapping with a top-level 'gpus:' mapping of GPU name -> spec")
    specs: dict[str, GPUSpec] = {}
    for name, entry in data["gpus"].items():
        where = f"{source}: gpus.{name}"
        if not isinstance(entry, Mapping):
            raise ComputeDBError(f"{where}: expected a mapping of fields")
        peaks_in = entry.get("peak_tflops")
        if not isinstance(peaks_in, Mapping):
            raise ComputeDBError(f"{where}: missing mapping 'peak_tflops' (dtype -> dense TFLOP/s)")
        peaks: dict[str, float] = {}
        for dtype in DTYPES:
            value = peaks_in.get(dtype)
            if value is None and dtype == "fp16":
                value = peaks_in.get("bf16")
            if value is None and dtype == "fp8":
                value = peaks_in.get("bf16")
            if value is None and dtype == "fp32":
                value = (peaks_in.get("bf16") or 0) / 2 or None
            if value is None:
                raise ComputeDBError(f"{where}: peak_tflops.{dtype} missing")
            peaks[dtype] = _num({dtype: value}, dtype, f"{where}.peak_tflops") * 1e12
            if peaks[dtype] <= 0:
                raise ComputeDBError(f"{where}: peak_tflops.{dtype} must be > 0")
        hbm_Bps = _num(entry, "hbm_GBps", where) * 1e9
        if hbm_Bps <= 0:
            raise ComputeDBError(f"{where}: field 'hbm_GBps' must be > 0")
        specs[str(name)] = GPUSpec(
            name=str(name),
            peak_flops=peaks,
            hbm_bytes=_num(entry, "hbm_GiB", where) * 2**30,
            hbm_Bps=hbm_Bps,
            nvlink_Bps=_num(entry, "nvlink_GBps", where, 0.0) * 1e9,
            nic_Bps=_num(entry, "nic_Gbps", where, 0.0) * 1e9 / 8,
            aliases=tuple(str(a) for a in entry.get("aliases") or ()),
            similar_to=tuple(str(a) for a in entry.get("similar_to") or ()),
            fp8_native=bool(entry.get("fp8_native", True)),
            sms=_sm_count(entry, where),
        )
    return specs


def _yaml_load(text: str, path: Path) -> object:
    """PyYAML's safe load of `text` (libyaml's loader when PyYAML was built with it: same documents,
    ~10x faster); errors name path:line."""
    import yaml
    try:
        return yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        raise ComputeDBError(f"{path}{line}: not valid YAML") from None


# The YAML the shipped table is written in, read without importing PyYAML (~20 ms of every run's
# start-up, issue 16): nested block mappings (indented by spaces), flow lists and mappings of plain
# scalars, comments. Plain scalars resolve as YAML 1.1 does (PyYAML's safe loader) for the forms
# accepted here: decimal ints, decimal floats with a fraction, true/false, names starting with a
# letter that no YAML 1.1 rule reads as a bool or null. Anything else (quotes, block lists, anchors,
# tags, other number forms, tabs) declines: the file is then read by PyYAML.
_KEY_LINE = re.compile(r"( *)([A-Za-z0-9_][A-Za-z0-9_.\-]*):(?: +(.*))?")
_INT = re.compile(r"-?(?:0|[1-9][0-9]*)")
_FLOAT = re.compile(r"-?(?:0|[1-9][0-9]*)\.[0-9]+")
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.\-]*")
_YAML11_WORDS = frozenset("y Y yes Yes YES n N no No NO true True TRUE false False FALSE on On ON off Off OFF "
                          "null Null NULL".split())


class _Declined(Exception):
    """The text is outside the subset _simple_yaml reads."""


def _scalar(text: str) -> object:
    if _INT.fullmatch(text):
        return int(text)
    if _FLOAT.fullmatch(text):
        return float(text)
    if text in ("true", "false"):
        return text == "true"
    if _NAME.fullmatch(text) and text not in _YAML11_WORDS:
        return text
    raise _Declined


def _flow(text: str) -> object:
    """A value: a plain scalar, [a, b, ...] or {k: v, ...} of plain scalars."""
    if text[:1] in "[{":
        close = "]" if text[0] == "[" else "}"
        if text[-1] != close or any(c in text[1:-1] for c in "[]{}"):
            raise _Declined
        items = [t.strip() for t in text[1:-1].split(",")] if text[1:-1].strip() else []
        if close == "]":
            return [_scalar(t) for t in items]
        out = {}
        for item in items:
            k, sep, v = item.partition(": ")
            key = _scalar(k.strip())
            if not sep or not isinstance(key, str):
                raise _Declined
            out[key] = _scalar(v.strip())
        return out
    return _scalar(text)


def _simple_yaml(text: str) -> dict | None:
    """The document of `text` as PyYAML's safe loader reads it, when the text keeps to the subset
    above; None otherwise (PyYAML then reads it)."""
    root: dict = {}
    stack = [(0, root)]        # (indent, mapping) of the open block mappings, innermost last
    pending = None             # (mapping, key) of a `key:` line: its mapping starts on the next line
    try:
        for line in text.splitlines():
            body = line.split(" #", 1)[0].rstrip()
            if not body.strip() or body.lstrip().startswith("#"):
                continue
            if "\t" in body or "'" in body or '"' in body:
                raise _Declined
            m = _KEY_LINE.fullmatch(body)
            if m is None:
                raise _Declined
            indent, key, value = len(m.group(1)), _scalar(m.group(2)), m.group(3)
            if not isinstance(key, str):
                raise _Declined
            if pending is not None:
                if indent <= stack[-1][0]:
                    raise _Declined      # `key:` with nothing under it: a null
                child: dict = {}
                pending[0][pending[1]] = child
                stack.append((indent, child))
                pending = None
            while indent < stack[-1][0]:
                stack.pop()
            if indent != stack[-1][0]:
                raise _Declined
            if value is None:
                pending = (stack[-1][1], key)
            else:
                stack[-1][1][key] = _flow(value)
    except _Declined:
        return None
    return root if pending is None and root else None


def load_gpu_file(path: str | Path) -> dict[str, GPUSpec]:
    """Read a GPU spec YAML file (layout of compute_db/data/gpus.yaml) -> {name: GPUSpec}."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise ComputeDBError(f"{path}: GPU spec file not found") from None
    shipped = path.resolve() == SHIPPED_GPU_FILE
    data = _simple_yaml(text) if shipped else None
    if data is None:
        data = _yaml_load(text, path)
    specs = _parse(data, str(path))
    table = dict(specs) if shipped else {**shipped_gpus(), **specs}
    index = _index(table)
    for name, spec in specs.items():
        for other in spec.similar_to:
            if other.strip().lower() not in index:
                raise ComputeDBError(f"{path}: gpus.{name}.similar_to: unknown GPU '{other}' "
                                     f"(known: {', '.join(sorted(table))})")
    return specs


@functools.cache
def shipped_gpus() -> Mapping[str, GPUSpec]:
    """The shipped table (read once; treat as read-only)."""
    return load_gpu_file(SHIPPED_GPU_FILE)


def _table(extra: Mapping[str, GPUSpec] | None) -> dict[str, GPUSpec]:
    table = dict(shipped_gpus())
    if extra:
        table.update(extra)
    return table


def _index(table: Mapping[str, GPUSpec]) -> dict[str, str]:
    index: dict[str, str] = {}
    for name, spec in table.items():
        for alias in spec.aliases:
            index[alias.lower()] = name
    for name in table:  # canonical names win over aliases
        index[name.lower()] = name
    return index


def canonical_name(name: str, extra: Mapping[str, GPUSpec] | None = None) -> str:
    """The table's canonical name for `name` (case-insensitive, aliases); ComputeDBError if unknown."""
    table = _table(extra)
    found = _index(table).get(str(name).strip().lower())
    if found is None:
        raise ComputeDBError(f"unknown GPU '{name}'; known GPUs: {', '.join(sorted(table))} "
                             "(add one with a GPU spec YAML file: --gpu-file)")
    return found


def get_gpu(name: str, extra: Mapping[str, GPUSpec] | None = None) -> GPUSpec:
    """Spec of a GPU by name or alias; `extra` are user GPUs (load_gpu_file) that extend the table."""
    table = _table(extra)
    return table[canonical_name(name, extra)]


def list_gpus(extra: Mapping[str, GPUSpec] | None = None) -> list[str]:
    """Canonical names of the known GPUs, sorted."""
    return sorted(_table(extra))
