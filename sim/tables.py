"""Reading the small editable YAML tables of sim (prices, power, failures): one place for the file read,
the YAML error with its line, the number checks and the per-GPU row lookup. Every error is a one-line
SimError naming the file and the field."""

from __future__ import annotations

import math
from pathlib import Path

from sim.errors import SimError


def read_yaml(path: Path, what: str):
    """The parsed YAML of `path`; SimError '<file>[:line]: ...' when it cannot be read or parsed."""
    import yaml
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise SimError(f"{path}: cannot read the {what} ({exc.strerror})") from None
    except UnicodeDecodeError:
        raise SimError(f"{path}: the {what} is not UTF-8 text") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise SimError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None


def number(v, where: str, minimum: float = 0.0, strict: bool = True) -> float:
    """`v` as a float: a finite number > `minimum` (>= when not strict); SimError naming `where` otherwise."""
    bad = isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
    if bad or v < minimum or (strict and v == minimum):
        raise SimError(f"{where}: must be a number {'>' if strict else '>='} {minimum:g} (got {v!r})")
    return float(v)


def text_field(entry: dict, key: str, where: str, why: str) -> str:
    """A required non-empty text field (a source, a date); SimError '<where>.<key>: missing (<why>)'."""
    value = str(entry.get(key) or "").strip()
    if not value:
        raise SimError(f"{where}.{key}: missing ({why})")
    return value


def aliases(entry: dict, where: str) -> tuple[str, ...]:
    """The optional `aliases` list of a row."""
    names = entry.get("aliases") or []
    if not isinstance(names, list):
        raise SimError(f"{where}.aliases: expected a list of names")
    return tuple(str(a) for a in names)


def gpu_names(name: str, extra_gpus=None) -> list[str]:
    """Names a GPU may be listed under: `name`, compute_db's canonical name for it (a --gpu-file's GPUs
    included when `extra_gpus` is given) and that GPU's aliases."""
    names = [name]
    try:
        from compute_db.gpus import canonical_name, get_gpu
        names.append(canonical_name(name, extra_gpus))
        names.extend(get_gpu(name, extra_gpus).aliases)
    except Exception:  # noqa: BLE001 - a GPU compute_db does not know can still have a row
        pass
    return names


def find_gpu_row(rows, name: str, extra_gpus=None):
    """The row (with `.gpu` and `.aliases`) of GPU `name` under any of its gpu_names, case-insensitively
    (the first name that has a row wins); None if there is none. Shared by the price and power tables."""
    index: dict = {}
    for r in rows:
        for n in (r.gpu, *r.aliases):
            index.setdefault(n.lower(), r)
    return next((index[n.lower()] for n in gpu_names(name, extra_gpus) if n.lower() in index), None)
