"""Shortcuts of the results-writing phase give exactly the text of the plain formulas they replace:
trace.json slices with (end, next head) separators made once per pair (both coding paths, inserted
events at piece boundaries), receive slices and flow arrows of pipeline sends, the timeline's bar order,
and the gantt bars' SVG text."""

from __future__ import annotations

import json
import math
import random

import numpy as np
import pytest

import sim.trace_text as tt


def _dumps(x) -> str:
    return json.dumps(x, separators=(",", ":"))


def _slices(n: int, seed: int):
    """n random slices: heads from 5 keys, argument dicts from 4 (one None), durations repeating."""
    rnd = random.Random(seed)
    keys = [(rnd.randrange(3), rnd.randrange(2), rnd.choice(["k", 'a"b', "w\u00e9"]), rnd.choice(["fwd", "comm"]))
            for _ in range(5)]
    dicts = [{"x": 1}, {"y": [1, 2], "z": "s"}, None, {}]
    k_at = [rnd.randrange(5) for _ in range(n)]
    a_at = [rnd.randrange(4) for _ in range(n)]
    ts = np.array([rnd.randrange(0, 10**12) for _ in range(n)], dtype=np.int64)
    dur = np.array([rnd.choice([0, 1000, 1500, 999_999, 7]) for _ in range(n)], dtype=np.int64)
    return keys, dicts, k_at, a_at, ts, dur


@pytest.mark.parametrize("table_max", [tt.PAIR_TABLE_MAX, 0])      # 0: the sort path of _pair_texts
@pytest.mark.parametrize("chunk", [1, 3, 1024])
@pytest.mark.parametrize("huge", [False, True])     # a duration whose (duration, args) pair needs > 62 bits
def test_slice_texts_with_shared_separators_are_json_dumps(monkeypatch, table_max, chunk, huge):
    monkeypatch.setattr(tt, "PAIR_TABLE_MAX", table_max)
    monkeypatch.setattr(tt, "CHUNK_SLICES", chunk)
    n = 40
    keys, dicts, k_at, a_at, ts, dur = _slices(n, 7)
    if huge:
        dur[5] = 10**17       # every slice's end made on its own (_slice_ends' unpacked path)
    heads = {j: tt.slice_head(pid, tid, name, cat) for j, (pid, tid, name, cat) in enumerate(keys)}
    first: dict[int, int] = {}
    code = np.array([first.setdefault(a, i) for i, a in enumerate(a_at)], dtype=np.int64)
    tails = {i: f',"args":{tt.encode(dicts[a_at[i]])}}}' for i in first.values() if dicts[a_at[i]]}
    # events before / after slices at the first and last slice and at piece boundaries
    before = {0: '{"B":0}', 3: '{"B":3}', 4: '{"B":4}', 17: '{"B":17}'}
    after = {2: '{"A":2}', 3: '{"A":3},{"A":33}', 16: '{"A":16}', n - 1: '{"A":"last"}'}
    pieces = list(tt.iter_slice_texts(np.array(k_at, dtype=np.int64), code, tails, heads, ts, dur, before, after))
    want = []
    for i in range(n):
        pid, tid, name, cat = keys[k_at[i]]
        x = {"ph": "X", "pid": pid, "tid": tid, "name": name, "cat": cat, "ts": int(ts[i]) / 1000,
             "dur": int(dur[i]) / 1000}
        if dicts[a_at[i]]:
            x["args"] = dicts[a_at[i]]
        want += [before[i]] if i in before else []
        want.append(_dumps(x))
        want += [after[i]] if i in after else []
    assert len(pieces) == -(-n // chunk)
    assert b",".join(pieces).decode() == ",".join(want)
    # keys given as a list (looked up one by one) give the same text
    assert list(tt.iter_slice_texts(k_at, code, tails, heads, ts, dur, before, after)) == pieces


def test_slice_texts_of_one_slice():
    heads = {5: tt.slice_head(1, 2, "k", "fwd")}
    one = list(tt.iter_slice_texts(np.array([5]), np.zeros(1, dtype=np.int64), {}, heads,
                                   np.array([1500]), np.array([2]), {0: '{"B":1}'}, {0: '{"A":1}'}))
    assert one == [b'{"B":1},{"ph":"X","pid":1,"tid":2,"name":"k","cat":"fwd","ts":1.5,"dur":0.002},{"A":1}']


@pytest.mark.parametrize("bad", [9, -1])       # -1: not the table's last entry
def test_slice_texts_key_without_head_fails(bad):
    with pytest.raises(KeyError):
        list(tt.iter_slice_texts(np.array([0, bad]), np.zeros(2, dtype=np.int64), {}, {0: "x", 1: "y"},
                                 np.zeros(2, dtype=np.int64), np.zeros(2, dtype=np.int64)))


def test_receive_text_is_the_json_of_the_three_events():
    from sim.report import _RecvText
    recv = _RecvText()
    args = {"collective": "send", "group": "pp", "size_bytes": 10, "peer_stage": 1, "stage": 0}
    for t_ns, dur_ns in [(123_456_789, 1000), (7, 0), (10**15 + 3, 2500)]:   # the last: repr path of us_text
        got = recv(16, 3, "send act \u00e9", t_ns, dur_ns, args, 0, 42, 0, 1)
        ts = t_ns / 1000
        want = _dumps([
            {"ph": "X", "pid": 16, "tid": 3, "name": "recv send act \u00e9", "cat": "comm", "ts": ts,
             "dur": dur_ns / 1000, "args": {**args, "collective": "recv", "from_stage": 0}},
            {"ph": "s", "id": 42, "pid": 0, "tid": 1, "ts": ts, "name": "pipeline send", "cat": "pp_flow"},
            {"ph": "f", "bp": "e", "id": 42, "pid": 16, "tid": 3, "ts": ts, "name": "pipeline send",
             "cat": "pp_flow"}])[1:-1]
        assert got == want and got.encode() == want.encode("ascii")


@pytest.mark.parametrize("in_order", [True, False])
def test_bar_order_is_lexsort(in_order, monkeypatch):
    from sim.html.run_report import bar_order
    rnd = np.random.default_rng(3)
    n, n_groups = 2000, 7
    group_lane = np.array([2, 0, 1, 0, 2, 1, 1])
    g = rnd.integers(0, n_groups, n)
    start = rnd.integers(0, 50, n).astype(float)      # many equal starts (ties by end, then input order)
    end = start + rnd.integers(0, 3, n)
    if in_order:     # each group's slices in (start, end) order, groups interleaved: the fast path
        o = np.lexsort((end, start))
        start, end = start[o], end[o]
    want = np.lexsort((end, start, g, group_lane[g]))
    real, keys = np.lexsort, []
    monkeypatch.setattr(np, "lexsort", lambda k: keys.append(len(k)) or real(k))
    assert np.array_equal(bar_order(g, group_lane, start, end), want)
    assert (4 not in keys) == in_order          # slices in stream order: the stable sort, no fallback
    monkeypatch.setattr(np, "lexsort", real)
    start[5] = math.nan        # NaN starts: lexsort's order
    assert np.array_equal(bar_order(g, group_lane, start, end), np.lexsort((end, start, g, group_lane[g])))


def test_nums_is_num_of_each():
    from sim.html.svg import _num, _nums
    vals = [0.0, -0.0, 9.96, 10.04, 190.0, 1159.95, -3.25, 0.05, 1e6 + 0.5, 123456.789]
    assert _nums(vals) == [_num(v) for v in vals] == ["0", "-0", "10", "10", "190", "1160", "-3.2", "0.1",
                                                      "1000000.5", "123456.8"]
    for odd in (1e7, -2.5e9, math.inf, math.nan):      # not the %-format path
        assert _nums(vals + [odd]) == [_num(v) for v in vals + [odd]]


def test_gantt_bars_text_is_canvas_rect_of_each_bar():
    from sim.html.page import esc
    from sim.html.svg import _GANTT_LABEL_W, Canvas, _Axis, gantt_bars
    bars = [(0.0, 0.5, 0, "fwd", 1), (0.25, 0.2500001, 1, "a<b", 3), (0.9, 1.2, 0, "TP", 2)]
    names = ["lane 'zero'", "lane & one"]
    svg, drawn, total, until = gantt_bars(names, bars, 1.0, {"fwd": "#123456", "TP": "#dd8452"}, "t")
    assert (drawn, total, until) == (3, 3, 1.0)
    ax = _Axis(0.0, 1.0, _GANTT_LABEL_W, 1180 - 20)
    c = Canvas(1, 1, "")
    for s, e, li, key, n in bars:
        x0, x1 = ax(s), ax(e)
        c.rect(x0, 6 + li * 16 + 2, x1 - x0, 12, {"fwd": "#123456", "TP": "#dd8452"}.get(key, "#999999"),
               f"{names[li]}: {key} {s:.6f}-{e:.6f} s" + (f" ({n} ops merged)" if n > 1 else ""))
    assert "".join(c.parts) in svg
    assert svg.count("<rect ") == 3 and esc("a<b") in svg
