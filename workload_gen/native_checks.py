"""Field checks of a native workload document (native_io) before any object is built.

Every op field is checked for type, range and finiteness, so that a hand-edited or fuzzed document
fails with one line naming the JSON path (`stages[0].chunks[1].forward[3].size_bytes`) instead of a
traceback later, or a silently different plan: fractional ids are refused rather than truncated,
null sizes rather than read as 0, NaN/inf times and FLOPs rather than propagated.
"""

from __future__ import annotations

import math

from workload_gen.errors import ConfigFileError
from workload_gen.limits import ALLOW_HUGE_ENV, MAX_OPS, allow_huge
from workload_gen.workload import (
    COLLECTIVES,
    COMPUTE_KINDS,
    COMPUTE_VARIANTS,
    GROUP_KINDS,
    MICROBATCH_SCOPE,
    PHASES,
)

OP_DTYPES = ("bf16", "fp16", "fp8", "fp32")
PEERS = ("next", "prev")
SCHEDULES = ("1f1b", "interleaved", "none", "gpipe")
_MAX_SIZE = 1 << 62   # bytes / elements of one op: far above any real kernel, far below float trouble

_COMPUTE_KEYS = {"op", "name", "kind", "shape", "dtype", "flops", "bytes", "variant", "layer", "phase",
                 "saved_bytes", "microbatch", "causal", "time_s"}
_COMM_KEYS = {"op", "name", "collective", "group", "size_bytes", "layer", "phase", "blocking", "wait_op", "peer",
              "microbatch", "dtype"}


class DocError(ConfigFileError):
    """A malformed field; native_io prefixes the file name."""


def is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _show(v) -> str:
    text = repr(v)
    return text if len(text) <= 60 else text[:60] + "..."


def need_int(where: str, v, lo: int, hi: int = _MAX_SIZE) -> int:
    if not is_int(v) or not lo <= v <= hi:
        rule = f"an integer >= {lo}" if hi == _MAX_SIZE else f"an integer in {lo}..{hi}"
        raise DocError(f"{where}: must be {rule} (got {_show(v)})")
    return v


def need_number(where: str, v, *, optional: bool = False) -> None:
    """A finite non-negative number (bools are not numbers here)."""
    if optional and v is None:
        return
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not (0 <= v < math.inf):
        raise DocError(f"{where}: must be a finite non-negative number (got {_show(v)})")


def need_choice(where: str, v, allowed) -> None:
    if not isinstance(v, str) or v not in allowed:
        raise DocError(f"{where}: must be one of {', '.join(allowed)} (got {_show(v)})")


def _need_str(where: str, v, *, optional: bool = False) -> None:
    if optional and v is None:
        return
    if not isinstance(v, str):
        raise DocError(f"{where}: must be a string (got {_show(v)})")


def _need_bool(where: str, v) -> None:
    if not isinstance(v, bool):
        raise DocError(f"{where}: must be true or false (got {_show(v)})")


def check_op(d, where: str, num_layers: int) -> None:
    """Raise DocError naming `where.<field>` for the first bad field of one op object."""
    if not isinstance(d, dict):
        raise DocError(f"{where}: must be an object (got {_show(d)})")
    kind = d.get("op")
    need_choice(f"{where}.op", kind, ("compute", "comm"))
    allowed = _COMPUTE_KEYS if kind == "compute" else _COMM_KEYS
    unknown = sorted(set(d) - allowed)
    if unknown:
        raise DocError(f"{where}.{unknown[0]}: unknown field for a {kind} op")
    _need_str(f"{where}.name", d.get("name"))
    if "layer" in d:
        need_int(f"{where}.layer", d["layer"], -1, num_layers - 1)
    if "phase" in d:
        need_choice(f"{where}.phase", d["phase"], PHASES)
    if "microbatch" in d:
        need_choice(f"{where}.microbatch", d["microbatch"], MICROBATCH_SCOPE)
    if "dtype" in d or kind == "compute":
        need_choice(f"{where}.dtype", d.get("dtype"), OP_DTYPES)
    if kind == "compute":
        need_choice(f"{where}.kind", d.get("kind"), tuple(COMPUTE_KINDS))
        shape = d.get("shape")
        if not isinstance(shape, dict) or set(shape) != set(COMPUTE_KINDS[d["kind"]]):
            raise DocError(f"{where}.shape: must be an object with exactly "
                           f"{', '.join(COMPUTE_KINDS[d['kind']])} (got {_show(shape)})")
        for f, v in shape.items():
            need_int(f"{where}.shape.{f}", v, 1)
        need_number(f"{where}.flops", d.get("flops"))
        need_number(f"{where}.bytes", d.get("bytes"))
        need_number(f"{where}.time_s", d.get("time_s"), optional=True)
        if "variant" in d:
            need_choice(f"{where}.variant", d["variant"], COMPUTE_VARIANTS)
        if "saved_bytes" in d:
            need_int(f"{where}.saved_bytes", d["saved_bytes"], 0)
        if "causal" in d:
            _need_bool(f"{where}.causal", d["causal"])
    else:
        need_choice(f"{where}.collective", d.get("collective"), COLLECTIVES)
        need_choice(f"{where}.group", d.get("group"), GROUP_KINDS)
        need_int(f"{where}.size_bytes", d.get("size_bytes"), 0)
        if "blocking" in d:
            _need_bool(f"{where}.blocking", d["blocking"])
        _need_str(f"{where}.wait_op", d.get("wait_op"), optional=True)
        if d.get("peer") is not None:
            need_choice(f"{where}.peer", d["peer"], PEERS)
        if d.get("collective") in ("send", "recv") and d.get("peer") is None:
            raise DocError(f"{where}.peer: a {d['collective']} needs peer 'next' or 'prev' (got None)")


def check_stages(doc: dict, pp: int, vpp: int, num_layers: int) -> None:
    """Stage, chunk and layer ids: stages 0..pp-1 once each in order, chunks 0..vpp-1, every layer once;
    ops bounded in number (limits.MAX_OPS) and each checked by `check_op`."""
    stages = doc.get("stages")
    if not isinstance(stages, list) or len(stages) != pp:
        raise DocError(f"stages: must be a list of plan.pp = {pp} stages (got "
                       f"{len(stages) if isinstance(stages, list) else _show(stages)})")
    n_ops = 0
    seen_layers: set[int] = set()
    for si, st in enumerate(stages):
        w = f"stages[{si}]"
        if not isinstance(st, dict):
            raise DocError(f"{w}: must be an object")
        if st.get("stage") != si or not is_int(st.get("stage")):
            raise DocError(f"{w}.stage: stages must be numbered 0..{pp - 1} in order (got {_show(st.get('stage'))})")
        need_int(f"{w}.pp_send_bytes", st.get("pp_send_bytes", 0), 0)
        chunks = st.get("chunks")
        if not isinstance(chunks, list) or len(chunks) != vpp:
            raise DocError(f"{w}.chunks: must be a list of plan.vpp = {vpp} chunks")
        lists = [(f"{w}.{k}", st.get(k, [])) for k in ("iteration_start", "iteration_end")]
        for ci, ch in enumerate(chunks):
            wc = f"{w}.chunks[{ci}]"
            if not isinstance(ch, dict):
                raise DocError(f"{wc}: must be an object")
            if not is_int(ch.get("chunk")) or ch.get("chunk") != ci:
                raise DocError(f"{wc}.chunk: chunks must be numbered 0..{vpp - 1} in order (got {_show(ch.get('chunk'))})")
            layers = ch.get("layers")
            if not isinstance(layers, list):
                raise DocError(f"{wc}.layers: must be a list of layer indices")
            for li, layer in enumerate(layers):
                need_int(f"{wc}.layers[{li}]", layer, 0, num_layers - 1)
                if layer in seen_layers:
                    raise DocError(f"{wc}.layers[{li}]: layer {layer} appears twice")
                seen_layers.add(layer)
            lists += [(f"{wc}.{k}", ch.get(k)) for k in ("forward", "backward")]
        for wl, ops in lists:
            if not isinstance(ops, list):
                raise DocError(f"{wl}: must be a list of ops")
            n_ops += len(ops)
            if n_ops > MAX_OPS and not allow_huge():
                raise DocError(f"{wl}: more than {MAX_OPS:,} ops in the document "
                               f"(set {ALLOW_HUGE_ENV}=1 to read it anyway)")
            for oi, op in enumerate(ops):
                check_op(op, f"{wl}[{oi}]", num_layers)
    if len(seen_layers) != num_layers:
        missing = min(set(range(num_layers)) - seen_layers)
        raise DocError(f"stages: layer {missing} is in no chunk (model.num_layers = {num_layers})")
