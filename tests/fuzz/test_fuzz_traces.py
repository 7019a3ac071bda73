"""Fuzz the request-trace CSV reader (Vidur's arrived_at,num_prefill_tokens,num_decode_tokens) through
`clustersim serve --trace FILE`: every mutation breaks a type, range, order or size rule and must be
refused with file:line, exit 2, and no results folder."""

from __future__ import annotations

import pytest
from fuzzkit import BAD_NUMBERS, CORPUS, refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
HEADER = "arrived_at,num_prefill_tokens,num_decode_tokens"
ROWS = ["0.0,128,64", "0.5,256,32", "1.0,512,16", "1.5,1024,8"]
BAD_TOKENS = BAD_NUMBERS + ("0", "1_000", "99999999999", "1e3", " ", "+-5", "٣")
BAD_TIMES = ("nan", "inf", "-1", "x", "", "1e400", "-inf", "0x1p3", "1,5")


def _serve(tmp_path, p):
    out = tmp_path / "res"
    return refused("trace", ["serve", "--model", "llama3-8b", "--arrival", "trace", "--trace", str(p),
                             "--out", str(out), "-q"], out=out, must_mention=str(p))


def test_base_trace_is_read(tmp_path):
    from workload_gen.traces import read_trace
    p = tmp_path / "t.csv"
    p.write_text("\n".join([HEADER] + ROWS) + "\n")
    rows = read_trace(p, need_arrivals=True)
    assert list(rows.num_prefill_tokens) == [128, 256, 512, 1024]


@FUZZ
@given(row=st.integers(0, len(ROWS) - 1), col=st.integers(0, 2), data=st.data())
def test_bad_cell(tmp_path, row, col, data):
    rows = [r.split(",") for r in ROWS]
    rows[row][col] = data.draw(st.sampled_from(BAD_TIMES if col == 0 else BAD_TOKENS))
    p = tmp_path / "t.csv"
    p.write_text("\n".join([HEADER] + [",".join(r) for r in rows]) + "\n", encoding="utf-8")
    line = _serve(tmp_path, p)
    assert f"{p}:{row + 2}:" in line


@FUZZ
@given(data=st.data())
def test_bad_structure(tmp_path, data):
    how = data.draw(st.sampled_from(["order", "columns", "header", "empty", "no_rows", "bytes", "quote"]))
    lines = [HEADER] + list(ROWS)
    raw = None
    if how == "order":
        i = data.draw(st.integers(2, len(lines) - 1))
        lines[i - 1], lines[i] = lines[i], lines[i - 1]
    elif how == "columns":
        i = data.draw(st.integers(1, len(lines) - 1))
        lines[i] = data.draw(st.sampled_from([lines[i] + ",7", "0.1,5", "3", lines[i] + ",,"]))
    elif how == "header":
        lines[0] = data.draw(st.sampled_from(["arrived_at,num_prefill_tokens", "a,b,c", "", "num_decode_tokens"]))
    elif how == "empty":
        lines = []
    elif how == "no_rows":
        lines = [HEADER]
    elif how == "quote":
        lines.insert(2, '0.2,"12\n')
    else:
        text = ("\n".join(lines) + "\n").encode()
        at = data.draw(st.integers(0, len(text)))
        raw = text[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3\x28", b"\x80\x80"])) + text[at:]
    p = tmp_path / "t.csv"
    if raw is None:
        p.write_text("\n".join(lines) + ("\n" if lines else ""))
    else:
        p.write_bytes(raw)
    _serve(tmp_path, p)


@pytest.mark.parametrize("path", sorted((CORPUS / "traces").glob("*.csv")), ids=lambda p: p.name)
def test_corpus(tmp_path, path):
    _serve(tmp_path, path)


def test_trace_length_bounded(tmp_path, monkeypatch):
    """Over limits.MAX_TRACE_REQUESTS rows: refused at the first row past the bound (bound lowered here
    so that the test stays small; the production bound is documented in docs/workload_gen.md)."""
    import workload_gen.traces as traces
    monkeypatch.setattr(traces, "MAX_TRACE_REQUESTS", 3)
    p = tmp_path / "t.csv"
    p.write_text("\n".join([HEADER] + ROWS) + "\n")
    assert "more than 3 requests" in _serve(tmp_path, p)
