"""sim.trace_text: slices' JSON text made column-wise (as json.dumps writes them), in pieces; the trace
columns shared by trace.json and the timeline chart; write_results leaves the garbage collector as it was."""

from __future__ import annotations

import gc
import json

import numpy as np
import pytest

import sim.trace_text as tt
from sim.commands import run_job

PLAN = {"tp": 4, "pp": 2, "dp": 1, "global_batch_size": 4, "micro_batch_size": 1, "seq_length": 1024,
        "sequence_parallel": True}


@pytest.fixture(scope="module")
def rep():
    return run_job({"model": "aicb-7", "network": "analytical", "plan": PLAN}, trace=True)


def _dumps(x) -> str:
    return json.dumps(x, separators=(",", ":"))


def _codes(args: list) -> tuple[list[int], dict]:
    """(code per slice, tails by code) as sim.trace_text.arg_codes gives them: the first slice holding
    the same dict; tails for the non-empty dicts."""
    first: dict[int, int] = {}
    code = [first.setdefault(id(a), i) for i, a in enumerate(args)]
    return code, {i: f',"args":{tt.encode(args[i])}}}' for i in first.values() if args[i]}


def test_slice_texts_are_json_dumps_with_events_inserted_and_times_beyond_the_integer_path():
    heads = {0: tt.slice_head(3, 1, 'a"b', "comm"), 1: tt.slice_head(4, 0, "k\u00e9", "fwd")}
    keys = [0, 1, 0, 1]
    args = [{"x": 1}, None, {"y": [1, 2]}, {}]
    code, tails = _codes(args)
    ts = np.array([0, 1500, 10**15 + 7, 999], dtype=np.int64)
    dur = np.array([1, 0, 2500, 999_999], dtype=np.int64)     # ts: the repr path, dur: the integer path
    pieces = list(tt.iter_slice_texts(keys, code, tails, heads, ts, dur,
                                      before={1: '{"B":1}'}, after={3: '{"A":2},{"A":3}'}))
    want = []
    for i, (pid, tid, name, cat) in enumerate([(3, 1, 'a"b', "comm"), (4, 0, "k\u00e9", "fwd")] * 2):
        x = {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": int(ts[i]) / 1000,
             "dur": int(dur[i]) / 1000}
        if args[i]:
            x["args"] = args[i]
        want.append(_dumps(x))
    want = [want[0], '{"B":1}', want[1], want[2], want[3], '{"A":2},{"A":3}']
    assert b",".join(pieces).decode() == ",".join(want)
    assert list(tt.iter_slice_texts([], np.zeros(0, dtype=np.int64), {}, {}, ts[:0], dur[:0])) == []


@pytest.mark.parametrize("dur", [
    [5, 5, 5, 7, 7, 0, 5, 5],                                  # repeated (duration, args) pairs, integer path
    [10**15 + 7, 3, 10**15 + 7, 10**15 + 7, 3, 0, 3, 1],       # durations past the integer text path
    [2**61, 5, 2**61, 5, 5, 2**61, 0, 5],                       # durations too large to pair in an int64
])
def test_slice_ends_made_once_per_duration_and_args_are_the_slices_texts(dur):
    """Each distinct (duration, argument dict) end is made once and given to every slice that has it;
    equal durations with other arguments, and equal arguments with other durations, keep their own."""
    heads = {0: tt.slice_head(0, 0, "k", "fwd")}
    a, b = {"x": 1}, {"x": 2}
    args = [a, a, b, a, None, a, b, a]
    code, tails = _codes(args)
    ts = np.arange(8, dtype=np.int64) * 1000
    dur = np.array(dur, dtype=np.int64)
    pieces = list(tt.iter_slice_texts([0] * 8, code, tails, heads, ts, dur))
    want = []
    for i in range(8):
        x = {"ph": "X", "pid": 0, "tid": 0, "name": "k", "cat": "fwd", "ts": int(ts[i]) / 1000,
             "dur": int(dur[i]) / 1000}
        if args[i]:
            x["args"] = args[i]
        want.append(_dumps(x))
    assert b",".join(pieces).decode() == ",".join(want)


def test_slices_in_pieces_join_to_the_same_trace(rep, monkeypatch):
    from sim.report import trace_json
    whole = trace_json(rep)
    n = len(rep.trace)
    monkeypatch.setattr(tt, "CHUNK_SLICES", 7)     # many piece boundaries, around sends and receives too
    pieces = list(tt.iter_slice_texts(*_slice_inputs(rep)))
    assert len(pieces) == -(-n // 7) and n > 100
    assert trace_json(rep) == whole
    json.loads(whole)


def _slice_inputs(rep):
    cols = tt.trace_columns(rep.trace)
    heads = {i: tt.slice_head(0, 0, k[2], k[3]) for k, i in cols.first_of_key.items()}
    ts, dur = tt.slice_ns(start=cols.start_s, dur=cols.dur_s)
    return cols.firsts.tolist(), np.zeros(len(rep.trace), dtype=np.int64), {}, heads, ts, dur


def test_trace_columns_are_the_entries_fields(rep):
    cols = tt.trace_columns(rep.trace)
    keys = [(ev[0], ev[1], ev[2], ev[5]) for ev in rep.trace]
    first = {}
    for i, k in enumerate(keys):
        first.setdefault(k, i)
    assert cols.first_of_key == first and list(cols.first_of_key) == list(first)   # order of first appearance
    assert cols.firsts.tolist() == [first[k] for k in keys]
    assert cols.start_s.tolist() == [ev[3] for ev in rep.trace]
    assert cols.dur_s.tolist() == [ev[4] for ev in rep.trace]
    a, b = tt.slice_ns(rep.trace), tt.slice_ns(start=cols.start_s, dur=cols.dur_s)
    assert a[0].tolist() == b[0].tolist() and a[1].tolist() == b[1].tolist()


def test_arg_codes_are_the_first_entry_holding_the_same_dict():
    a, b = {"x": 1}, {"x": 1}          # equal but distinct dicts keep their own codes
    trace = [(0, "compute", "k", 0.0, 1.0, "fwd", a), (0, "compute", "k", 1.0, 1.0, "fwd", b),
             (0, "compute", "h", 2.0, 1.0, "overhead", None), (0, "compute", "k", 3.0, 1.0, "fwd", a),
             (0, "compute", "h", 4.0, 1.0, "overhead", None)]
    code, args = tt.arg_codes(trace)
    assert code.tolist() == [0, 1, 2, 0, 2]
    assert list(args) == [0, 1, 2] and args[0] is a and args[1] is b and args[2] is None
    bare = [ev[:6] for ev in trace[:2]] + [trace[3]]     # entries without arguments: None
    code, args = tt.arg_codes(bare)
    assert code.tolist() == [0, 0, 2] and args == {0: None, 2: a}


def test_timeline_chart_from_shared_columns_is_the_same(rep):
    from sim.html.run_report import timeline_chart
    assert timeline_chart(rep, columns=tt.trace_columns(rep.trace)) == timeline_chart(rep)


def test_write_results_leaves_the_garbage_collector_as_it_was(rep, tmp_path):
    from sim.report import write_results
    assert gc.isenabled()
    write_results(rep, tmp_path / "on")
    assert gc.isenabled()
    gc.disable()
    try:
        write_results(rep, tmp_path / "off")
        assert not gc.isenabled()
    finally:
        gc.enable()
    assert (tmp_path / "on" / "trace.json").read_bytes() == (tmp_path / "off" / "trace.json").read_bytes()
