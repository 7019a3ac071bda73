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
arguments) pair, and the text between two start times (an end, "," and the next head) once per
distinct (end, next head) pair, so the template has three fields per slice. Times: the engine's
seconds in, the trace's microseconds out.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
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


def arg_codes(trace: list) -> tuple[np.ndarray, dict]:
    """(code, args) of the trace entries' argument dicts (field 6; None when an entry has no such
    field): code[i] is the index of the first entry holding entry i's very dict (by identity, as
    trace.json shares one text per dict), args maps each such index to its dict, in order."""
    n = len(trace)
    first: dict[int, int] = {}
    try:
        code = np.fromiter(map(first.setdefault, map(id, map(itemgetter(6), trace)), range(n)),
                           dtype=np.int64, count=n)
    except IndexError:     # entries not annotated (sim.trace_args): arguments None
        refs = [ev[6] if len(ev) > 6 else None for ev in trace]
        first = {}
        code = np.fromiter(map(first.setdefault, map(id, refs), range(n)), dtype=np.int64, count=n)
    return code, {i: trace[i][6] if len(trace[i]) > 6 else None for i in first.values()}


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


CHUNK_SLICES = 1 << 10    # slices formatted per piece: pieces are written as they are made, so the
#                           temporary lists and the piece's text stay small (their memory is reused)


def _us_columns(ns: np.ndarray) -> tuple[bytes, list, list]:
    """(format, whole part, fraction) of us_text for every element of an int64 array, for a bytes
    %-format: b"%d%s" with integer microseconds and _FRAC as bytes when all are in range (no object per
    number: the % operator writes them), else b"%s%s" with us_text and empty fractions."""
    col = _UsColumn(ns)
    return (col.fmt, *col.take(0, len(ns)))


class _UsColumn:
    """_us_columns of an int64 array, taken a range at a time."""

    def __init__(self, ns: np.ndarray):
        self.texts = None
        if len(ns) and 0 <= int(ns.min()) and int(ns.max()) < INT_TEXT_NS:
            self.fmt = b"%d%s"
            self.q, r = np.divmod(ns, 1000)
            self.r = _FRAC_BYTES[r]
        else:
            self.fmt = b"%s%s"
            self.texts = [t.encode() for t in us_texts(ns)]

    def take(self, lo: int, hi: int) -> tuple[list, list]:
        if self.texts is None:
            return self.q[lo:hi].tolist(), self.r[lo:hi].tolist()
        return self.texts[lo:hi], [b""] * (hi - lo)


def iter_slice_texts(keys, arg_at: np.ndarray, tails: dict, head_of: dict, ts_ns: np.ndarray,
                     dur_ns: np.ndarray, before: dict | None = None, after: dict | None = None) -> Iterator[bytes]:
    """The text of every slice, in order, joined by "," in pieces of at most CHUNK_SLICES slices (the
    pieces joined by b"," are the whole text), UTF-8 encoded (bytes: the % operator on bytes is faster,
    and trace.json is written as bytes), each piece made when the caller asks for it.
    head_of[keys[i]] is the head of slice i (slice_head; keys: a sequence of hashables, e.g. the
    int64 array of the index of the first slice with the same head, which is looked up column-wise);
    arg_at[i] the code of its argument dict, an integer 0 <= code <= number of slices (arg_codes: the
    first slice holding the same dict), and tails[code] that dict's text as the slice's end
    (',"args":{..}}'; a code not in tails: no "args"). before[i] / after[i]: event texts (joined by
    ",") placed just before / after slice i.
    Between two slices' start times stands the first one's end, "," and the next one's head: one text
    per distinct (end, next head) pair (a stage's program repeats micro-batch after micro-batch), so a
    slice costs three %-format fields (whole microseconds, fraction, that separator)."""
    n = len(keys)
    if n == 0:
        return
    heads = [h.encode() for h in head_of.values()]
    head_at = _dense_codes(keys, head_of)
    end_texts, which = _slice_ends(np.asarray(arg_at, dtype=np.int64), tails, dur_ns)
    if which is None:
        end_texts, which = np.array(end_texts, dtype=object), np.arange(n, dtype=np.int64)
    sep_texts, sep_at = _pair_texts(which[:-1], head_at[1:], end_texts, heads)
    bef = {i: t.encode() + b"," for i, t in (before or {}).items()}
    aft = {i: b"," + t.encode() for i, t in (after or {}).items()}

    def head(i: int) -> bytes:
        return bef.get(i, b"") + heads[head_at[i]]

    def end(i: int) -> bytes:
        return end_texts[which[i]] + aft.get(i, b"")

    # separators holding inserted events: after slice i, or before slice i + 1
    special = sorted({i for i in aft if i < n - 1} | {i - 1 for i in bef if 0 < i < n})
    si = 0
    ts = _UsColumn(ts_ns)
    unit = ts.fmt + b"%s"
    step = CHUNK_SLICES
    for lo in range(0, n, step):
        hi = min(lo + step, n)
        seps = sep_texts[sep_at[lo:hi - 1]].tolist()
        seps.append(end(hi - 1))          # a piece ends with its last slice's end
        while si < len(special) and special[si] < hi - 1:
            i = special[si]
            seps[i - lo] = end(i) + b"," + head(i + 1)
            si += 1
        if si < len(special) and special[si] == hi - 1:
            si += 1
        q, r = ts.take(lo, hi)
        flat: list = [None] * (3 * (hi - lo) + 1)
        flat[0] = head(lo)
        flat[1::3], flat[2::3], flat[3::3] = q, r, seps
        yield (b"%s" + unit * (hi - lo)) % tuple(flat)


def _dense_codes(keys, head_of: dict) -> np.ndarray:
    """Code of each slice's key: its position in head_of. Integer keys (e.g. first-slice indexes) are
    looked up in a numpy table; other keys one by one."""
    arr = keys if isinstance(keys, np.ndarray) else None
    if (arr is not None and arr.dtype.kind in "iu" and len(arr) and int(arr.min()) >= 0 and head_of
            and all(type(k) is int and k >= 0 for k in head_of)):
        top = max(int(arr.max()), max(head_of)) + 1
        table = np.full(top, -1, dtype=np.int64)
        table[list(head_of)] = np.arange(len(head_of), dtype=np.int64)
        codes = table[arr]
        if len(codes) and int(codes.min()) < 0:
            raise KeyError(int(arr[np.flatnonzero(codes < 0)[0]]))
        return codes
    code_of = {k: j for j, k in enumerate(head_of)}
    return np.fromiter(map(code_of.__getitem__, keys), dtype=np.int64, count=len(keys))


PAIR_TABLE_MAX = 1 << 16     # _pair_texts codes pairs with a table up to this many possible pairs, else
#                              by a sort (a larger table would add megabytes to the run's peak memory)


def _pair_texts(a: np.ndarray, b: np.ndarray, a_texts, b_texts: list) -> tuple[np.ndarray, np.ndarray]:
    """(texts, which): texts[which[i]] = a_texts[a[i]] + b"," + b_texts[b[i]], each distinct (a, b)
    pair's text made once (codes: 0 <= a < len(a_texts), 0 <= b < len(b_texts))."""
    nb = len(b_texts)
    pair = a * nb + b
    space = len(a_texts) * nb
    if space <= PAIR_TABLE_MAX:      # a table over every possible pair: no sort
        seen = np.zeros(space, dtype=bool)
        seen[pair] = True
        distinct = np.flatnonzero(seen)
        table = np.empty(space, dtype=np.int32)     # written (memory touched) at the distinct pairs only
        table[distinct] = np.arange(len(distinct), dtype=np.int32)
        which = table[pair]
    else:
        distinct, which = _distinct(pair)
    texts = [a_texts[x] + b"," + b_texts[y] for x, y in zip((distinct // nb).tolist(), (distinct % nb).tolist())]
    return np.array(texts, dtype=object), which


def _distinct(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the distinct values in increasing order, per element the position of its value there): what
    np.unique(values, return_inverse=True) gives, without importing numpy.ma (np.unique does). The
    sort need not be stable: equal values get one position whatever their order."""
    order = np.argsort(values)
    ordered = values[order]
    new = np.empty(len(values), dtype=bool)
    new[:1] = True
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    which = np.empty(len(values), dtype=np.int64)
    which[order] = np.cumsum(new) - 1
    return ordered[new], which


def _slice_ends(code: np.ndarray, tails: dict, dur_ns: np.ndarray) -> tuple[np.ndarray | list, np.ndarray | None]:
    """',"dur":' + the duration + the argument tail (or "}") of the slices, as bytes: (texts, which),
    slice i's text texts[which[i]]: each distinct (duration, argument code) text is made once (a
    stage's kernels repeat their durations and arguments micro-batch after micro-batch, so a trace has
    a few distinct ends per ten slices); which None: texts is the list of every slice's text.
    code: each slice's argument code (0 <= code <= n, tails[code] its text)."""
    n = len(code)
    tail_bytes = {k: t.encode() for k, t in tails.items()}
    if n == 0 or int(dur_ns.min()) < 0 or int(dur_ns.max()) >= (1 << 62) // (n + 1):
        dur_fmt, dur_q, dur_r = _us_columns(dur_ns)       # (duration, args) pairs not packable in an int64
        fmt = b',"dur":' + dur_fmt + b"%s"
        return [fmt % t for t in zip(dur_q, dur_r, map(tail_bytes.get, code.tolist(), repeat(b"}")))], None
    distinct, which = _distinct(dur_ns * (n + 1) + code)     # slice -> its distinct (duration, args) pair
    dur_fmt, dur_q, dur_r = _us_columns(distinct // (n + 1))
    fmt = b',"dur":' + dur_fmt + b"%s"
    texts = [fmt % (q, r, tail_bytes.get(c, b"}")) for q, r, c in zip(dur_q, dur_r, (distinct % (n + 1)).tolist())]
    return np.array(texts, dtype=object), which


def encode_events(events: list) -> list:
    """JSON text of trace events: text already made (str, UTF-8 bytes, or an iterator of such pieces,
    e.g. iter_slice_texts) kept, each run of dicts encoded by one json call (as json.dumps writes
    them). The texts (an iterator's pieces each) joined by "," are the traceEvents array's body."""
    if dict not in set(map(type, events)):
        return events
    out: list = []
    run: list[dict] = []
    for e in events:
        if type(e) is not dict:
            if run:
                out.append(encode(run)[1:-1])
                run = []
            out.append(e)
        else:
            run.append(e)
    if run:
        out.append(encode(run)[1:-1])
    return out
