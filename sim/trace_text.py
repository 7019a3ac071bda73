"""The JSON text of trace.json's slices, made column-wise (sim.report writes trace.json with it).

A run's trace has about one slice per kernel, collective and wait (10^5 for SimAI's 9,216-GPU MoE
example). Each slice of the stage view is `{"ph":"X","pid":..,"tid":..,"name":..,"cat":..,"ts":..,
"dur":..[,"args":{..}]}` exactly as json.dumps(..., separators=(",", ":")) writes it, but made without a
dict per slice: the head (pid, tid, name, cat) and the argument dicts repeat across slices and are
encoded once each, both ends of a slice are rounded to whole nanoseconds with numpy, and microseconds
are written from integers (what repr of the float writes, at a fraction of its cost). Times: the
engine's seconds in, the trace's microseconds out.
"""

from __future__ import annotations

import json
from itertools import repeat
from operator import itemgetter

import numpy as np

encode = json.JSONEncoder(separators=(",", ":")).encode

# JSON text of microseconds with at most 3 decimals from integer nanoseconds: repr(ns / 1000) (what
# json.dumps writes for the float) made by integer arithmetic. Exact below 10^15 ns: the decimal has
# at most 15 significant digits, so it is the float's shortest round-trip text.
_FRAC = tuple(repr(r / 1000)[1:] for r in range(1000))     # ".0", ".001", ..., ".999"
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


def slice_ns(trace: list) -> tuple[np.ndarray, np.ndarray]:
    """(start, duration) of each trace entry (stage, thread, name, start_s, dur_s, ...) in integer
    nanoseconds. Both ends are rounded (half to even, as Python's round), not start and duration:
    back-to-back slices must not overlap by a rounding nanosecond (Perfetto treats partially
    overlapping slices of one thread as mis-nested); a duration <= 0 is 0."""
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


def slice_texts(trace: list, args_col: list, head_of: dict, ts_ns: np.ndarray, dur_ns: np.ndarray) -> list[str]:
    """The text of each entry of `trace` as a complete slice: head_of[(stage, thread, name, cat)] is its
    head (slice_head), args_col[i] its argument dict (None or empty: no "args")."""
    args_text = ArgsText()
    distinct = {id(a): a for a in args_col if a}
    tails = {k: f',"args":{args_text(a)}}}' for k, a in distinct.items()}
    heads = map(head_of.__getitem__, map(itemgetter(0, 1, 2, 5), trace))
    return list(map("".join, zip(heads, us_texts(ts_ns), repeat(',"dur":'), us_texts(dur_ns),
                                 map(tails.get, map(id, args_col), repeat("}")))))


def encode_events(events: list) -> list[str]:
    """JSON text of trace events: text already made (str) kept, each run of dicts encoded by one json
    call (as json.dumps writes them). The texts joined by "," are the traceEvents array's body."""
    if set(map(type, events)) <= {str}:
        return events
    out: list[str] = []
    run: list[dict] = []
    for e in events:
        if type(e) is str:
            if run:
                out.append(encode(run)[1:-1])
                run = []
            out.append(e)
        else:
            run.append(e)
    if run:
        out.append(encode(run)[1:-1])
    return out
