"""The JSON text of trace.json's slices, made column-wise (sim.report writes trace.json with it), and
the trace columns that trace.json and the report's timeline chart share.

A run's trace has about one slice per kernel, collective and wait (10^5 for SimAI's 9,216-GPU MoE
example). Each slice of the stage view is `{"ph":"X","pid":..,"tid":..,"name":..,"cat":..,"ts":..,
"dur":..[,"args":{..}]}` exactly as json.dumps(..., separators=(",", ":")) writes it, but made without a
dict or a string per slice: the head (pid, tid, name, cat) and the argument dicts repeat across slices
and are encoded once each, both ends of a slice are rounded to whole nanoseconds with numpy, and a
piece of up to CHUNK_SLICES slices is one bytes %-format of a repeated template, whose %d writes the
whole microseconds from integers and a table the fraction (what repr of the float writes, at a fraction
of its cost); a slice's end (its duration and argument text) is made once per distinct (duration,
arguments) pair. Times: the engine's seconds in, the trace's microseconds out.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter

import numpy as np

encode = json.JSONEncoder(separators=(",", ":")).encode

# JSON text of microseconds with at most 3 decimals from integer nanoseconds: repr(ns / 1000) (what
# json.dumps writes for the float) made by integer arithmetic. Exact below 10^15 ns: the decimal has
# at most 15 significant digits, so it is the float's shortest round-trip text.
_FRAC = tuple(repr(r / 1000)[1:] for r in range(1000))     # ".0", ".001", ..., ".999"
_FRAC_BYTES = np.array([f.encode() for f in _FRAC], dtype=object)   # _FRAC as bytes, indexed at numpy speed
INT_TEXT_NS = 10 ** 15


def us_text(ns: int) -> str:
    """repr(ns / 1000) for an integer number of nanoseconds."""
    if 0 <= ns < INT_TEXT_NS:
        q, r = divmod(ns, 1000)
        return f"{q}{_FRAC[r]}"
    return repr(ns / 1000)


def us_texts(ns: np.ndarray) -> list[str]:
    """us_text of every element of an int64 array."""
    if len(ns) and 0 <= int(ns.min()) and int(ns.max()) < INT_TEXT_NS:
        return list(map(str.__add__, map(str, (ns // 1000).tolist()), map(_FRAC.__getitem__, (ns % 1000).tolist())))
    return list(map(us_text, ns.tolist()))


@dataclass
class TraceColumns:
    """Columns of a report's trace entries (stage, thread, name, start_s, dur_s, cat[, args]), made once
    for trace.json and the timeline chart. first_of_key: (stage, thread, name, cat) -> index of its first
    entry, in order of first appearance; firsts[i]: that index for entry i's key (a code per entry)."""
    first_of_key: dict
    firsts: np.ndarray
    start_s: np.ndarray
    dur_s: np.ndarray


def trace_columns(trace: list) -> TraceColumns:
    """TraceColumns of `trace` (one pass per column; the keys' dict keeps the first index of each)."""
    n = len(trace)
    first_of_key: dict[tuple, int] = {}
    firsts = np.fromiter(map(first_of_key.setdefault, map(itemgetter(0, 1, 2, 5), trace), range(n)),
                         dtype=np.int64, count=n)
    return TraceColumns(first_of_key, firsts, np.fromiter(map(itemgetter(3), trace), dtype=np.float64, count=n),
                        np.fromiter(map(itemgetter(4), trace), dtype=np.float64, count=n))


def slice_ns(trace: list | None = None, start: np.ndarray | None = None,
             dur: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """(start, duration) of each trace entry (stage, thread, name, start_s, dur_s, ...) in integer
    nanoseconds, from `trace` or from its start_s and dur_s columns. Both ends are rounded (half to
    even, as Python's round), not start and duration: back-to-back slices must not overlap by a
    rounding nanosecond (Perfetto treats partially overlapping slices of one thread as mis-nested); a
    duration <= 0 is 0."""
    if start is None or dur is None:
        n = len(trace)
        start = np.fromiter(map(itemgetter(3), trace), dtype=np.float64, count=n)
        dur = np.fromiter(map(itemgetter(4), trace), dtype=np.float64, count=n)
    ts = np.rint(start * 1e9)
    end = np.maximum(np.where(dur > 0, np.rint((start + dur) * 1e9), ts), ts)
    return ts.astype(np.int64), (end - ts).astype(np.int64)


class ArgsText:
    """JSON text of argument dicts, each distinct one encoded once: by identity, else by content when
    its values are scalars (e.g. one dict per wait). The caller keeps every dict alive while this lives
    (ids are not reused meanwhile)."""

    def __init__(self):
        self.by_id: dict[int, str] = {}
        self.by_value: dict[tuple, str] = {}

    def __call__(self, args: dict) -> str:
        a = self.by_id.get(id(args))
        if a is None:
            try:
                key = tuple(args.items())
                a = self.by_value.get(key)
                if a is None:
                    a = self.by_value[key] = encode(args)
            except TypeError:      # a nested value (e.g. a kernel's shape): by identity only
                a = encode(args)
            self.by_id[id(args)] = a
        return a


def slice_head(pid: int, tid: int, name: str, cat: str) -> str:
    return f'{{"ph":"X","pid":{pid},"tid":{tid},"name":{encode(name)},"cat":{encode(cat)},"ts":'


CHUNK_SLICES = 1 << 16    # slices formatted per piece: bounds the temporary lists (7 references a slice)


def _us_columns(ns: np.ndarray) -> tuple[bytes, list, list]:
    """(format, whole part, fraction) of us_text for every element of an int64 array, for a bytes
    %-format: b"%d%s" with integer microseconds and _FRAC as bytes when all are in range (no object per
    number: the % operator writes them), else b"%s%s" with us_text and empty fractions."""
    if len(ns) and 0 <= int(ns.min()) and int(ns.max()) < INT_TEXT_NS:
        q, r = np.divmod(ns, 1000)
        return b"%d%s", q.tolist(), _FRAC_BYTES[r].tolist()
    return b"%s%s", [t.encode() for t in us_texts(ns)], [b""] * len(ns)


def slice_texts(keys: list, arg_ids: list, tails: dict, head_of: dict, ts_ns: np.ndarray, dur_ns: np.ndarray,
                before: dict | None = None, after: dict | None = None) -> list[bytes]:
    """The text of every slice, in order, joined by "," in pieces of at most CHUNK_SLICES slices (the
    pieces joined by b"," are the whole text), UTF-8 encoded (bytes: the % operator on bytes is faster,
    and trace.json is written as bytes). head_of[keys[i]] is the head of slice i (slice_head; keys: any
    hashable, e.g. the index of the first slice with the same head); arg_ids[i] the id of its argument
    dict and tails[id] that dict's text as the slice's end (',"args":{..}}'; an id not in tails: no
    "args"). before[i] / after[i]: event texts (joined by ",") placed just before / after slice i."""
    n = len(keys)
    head_bytes = {k: h.encode() for k, h in head_of.items()}
    heads = list(map(head_bytes.__getitem__, keys))
    ends = _slice_ends(arg_ids, tails, dur_ns)
    for i, text in (before or {}).items():
        heads[i] = text.encode() + b"," + heads[i]
    for i, text in (after or {}).items():
        ends[i] = ends[i] + b"," + text.encode()
    ts_fmt, ts_q, ts_r = _us_columns(ts_ns)
    fmt = b"%s" + ts_fmt + b"%s,"
    pieces = []
    for lo in range(0, n, CHUNK_SLICES):
        hi = min(lo + CHUNK_SLICES, n)
        flat: list = [None] * (4 * (hi - lo))
        for k, col in enumerate((heads, ts_q, ts_r, ends)):
            flat[k::4] = col[lo:hi]
        pieces.append((fmt * (hi - lo))[:-1] % tuple(flat))
    return pieces


def _slice_ends(arg_ids: list, tails: dict, dur_ns: np.ndarray) -> list[bytes]:
    """',"dur":' + the duration + the argument tail (or "}") of every slice, as bytes: each distinct
    (duration, argument dict) text is made once (a stage's kernels repeat their durations and arguments
    micro-batch after micro-batch, so a trace has a few distinct ends per ten slices)."""
    n = len(arg_ids)
    tail_bytes = {k: t.encode() for k, t in tails.items()}
    seen: dict[int, int] = {}
    code = np.fromiter(map(seen.setdefault, arg_ids, range(n)), dtype=np.int64, count=n)   # first slice of its args
    if n == 0 or int(dur_ns.min()) < 0 or int(dur_ns.max()) >= (1 << 62) // (n + 1):
        dur_fmt, dur_q, dur_r = _us_columns(dur_ns)       # (duration, args) pairs not packable in an int64
        fmt = b',"dur":' + dur_fmt + b"%s"
        return [fmt % t for t in zip(dur_q, dur_r, map(tail_bytes.get, arg_ids, repeat(b"}")))]
    pair = dur_ns * (n + 1) + code
    order = np.argsort(pair, kind="stable")
    ordered = pair[order]
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    which = np.empty(n, dtype=np.int64)
    which[order] = np.cumsum(new) - 1          # slice -> its distinct (duration, args) pair
    distinct = ordered[new]
    dur_fmt, dur_q, dur_r = _us_columns(distinct // (n + 1))
    fmt = b',"dur":' + dur_fmt + b"%s"
    texts = [fmt % (q, r, tail_bytes.get(arg_ids[c], b"}"))
             for q, r, c in zip(dur_q, dur_r, (distinct % (n + 1)).tolist())]
    return np.array(texts, dtype=object)[which].tolist()


def encode_events(events: list) -> list[str | bytes]:
    """JSON text of trace events: text already made (str, or UTF-8 bytes) kept, each run of dicts
    encoded by one json call (as json.dumps writes them). The texts joined by "," are the traceEvents
    array's body."""
    if set(map(type, events)) <= {str, bytes}:
        return events
    out: list[str | bytes] = []
    run: list[dict] = []
    for e in events:
        if type(e) is str or type(e) is bytes:
            if run:
                out.append(encode(run)[1:-1])
                run = []
            out.append(e)
        else:
            run.append(e)
    if run:
        out.append(encode(run)[1:-1])
    return out
