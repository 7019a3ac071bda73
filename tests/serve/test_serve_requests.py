"""workload_gen.requests / traces: arrival processes, length distributions, trace replay, examples, errors."""

from __future__ import annotations

import numpy as np
import pytest

from workload_gen.errors import WorkloadError
from workload_gen.requests import ClosedLoop, RequestConfig, RequestSet, main, make_requests
from workload_gen.traces import EXAMPLES, example_path, make_examples, read_trace


def gaps(rs: RequestSet) -> np.ndarray:
    return np.diff(rs.arrived_at_s, prepend=0.0)


# ------------------------------------------------------------------------------------------- arrivals

def test_poisson_exact_exponential_gaps():
    rs = make_requests(RequestConfig(num_requests=40_000, qps=5.0, seed=1))
    g = gaps(rs)
    assert g.mean() == pytest.approx(0.2, rel=0.03)
    assert g.std() / g.mean() == pytest.approx(1.0, rel=0.03)
    # no clipping at 3/qps (Vidur's): P(gap > 3/qps) = e^-3 ~ 5 %
    assert (g > 3 / 5.0).mean() == pytest.approx(np.exp(-3), rel=0.1)
    assert g.max() > 6 / 5.0


def test_gamma_mean_and_cv():
    rs = make_requests(RequestConfig(num_requests=60_000, arrival="gamma", qps=4.0, cv=2.0, seed=2))
    g = gaps(rs)
    assert g.mean() == pytest.approx(0.25, rel=0.04)
    assert g.std() / g.mean() == pytest.approx(2.0, rel=0.06)


def test_static_and_duration_modes():
    rs = make_requests(RequestConfig(num_requests=7, arrival="static"))
    assert (rs.arrived_at_s == 0).all() and len(rs) == 7
    rs = make_requests(RequestConfig(duration_s=200.0, qps=10.0, seed=3))
    assert rs.arrived_at_s.max() <= 200.0 and len(rs) == pytest.approx(2000, abs=4 * 2000 ** 0.5)
    both = make_requests(RequestConfig(duration_s=200.0, num_requests=50, qps=10.0, seed=3))
    assert len(both) == 50 and np.array_equal(both.arrived_at_s, rs.arrived_at_s[:50])


def test_seeds_are_explicit_and_arrivals_independent_of_lengths():
    a = make_requests(RequestConfig(num_requests=100, lengths="uniform", seed=9))
    b = make_requests(RequestConfig(num_requests=100, lengths="uniform", seed=9))
    c = make_requests(RequestConfig(num_requests=100, lengths="zipf", seed=9))
    d = make_requests(RequestConfig(num_requests=100, lengths="uniform", seed=10))
    assert np.array_equal(a.arrived_at_s, b.arrived_at_s) and np.array_equal(a.num_prefill_tokens, b.num_prefill_tokens)
    assert np.array_equal(a.arrived_at_s, c.arrived_at_s)
    assert not np.array_equal(a.arrived_at_s, d.arrived_at_s)


def test_closed_loop_object():
    cl = make_requests(RequestConfig(num_requests=30, arrival="closed", concurrency=4))
    assert isinstance(cl, ClosedLoop) and cl.concurrency == 4 and len(cl) == 30


# -------------------------------------------------------------------------------------------- lengths

def test_fixed_default_is_vidurs():
    rs = make_requests(RequestConfig(num_requests=3))
    assert rs.num_prefill_tokens.tolist() == [2048] * 3 and rs.num_decode_tokens.tolist() == [512] * 3


def test_uniform_split_by_ratio():
    rs = make_requests(RequestConfig(num_requests=5000, lengths="uniform", min_tokens=100, max_tokens=300,
                                     pd_ratio=3.0, seed=4))
    total = rs.num_prefill_tokens + rs.num_decode_tokens
    assert total.min() >= 100 and total.max() <= 300
    assert total.min() <= 102 and total.max() >= 298          # the whole range is reachable
    assert np.array_equal(rs.num_decode_tokens, np.rint(total / 4.0).astype(int))
    assert total.mean() == pytest.approx(200, rel=0.02)


def test_zipf_probabilities():
    rs = make_requests(RequestConfig(num_requests=50_000, lengths="zipf", min_tokens=10, max_tokens=109,
                                     pd_ratio=1.0, zipf_theta=0.6, seed=5))
    total = rs.num_prefill_tokens + rs.num_decode_tokens
    h = sum(k ** -0.6 for k in range(1, 101))
    assert (total == 10).mean() == pytest.approx(1 / h, rel=0.05)
    assert (total == 109).mean() == pytest.approx(100 ** -0.6 / h, rel=0.15)
    assert (rs.num_prefill_tokens >= 1).all() and (rs.num_decode_tokens >= 1).all()


def test_trace_lengths_use_every_row_before_repeating():
    rows = read_trace("chat")
    rs = make_requests(RequestConfig(num_requests=len(rows), lengths="chat", seed=6))
    got = sorted(zip(rs.num_prefill_tokens.tolist(), rs.num_decode_tokens.tolist()))
    assert got == sorted(zip(rows.num_prefill_tokens.tolist(), rows.num_decode_tokens.tolist()))


def test_every_request_has_a_prefill_and_a_decode_token():
    rs = make_requests(RequestConfig(num_requests=500, lengths="code", decode_scale=0.01, prefill_scale=0.001))
    assert rs.num_prefill_tokens.min() == 1 and rs.num_decode_tokens.min() == 1


# ---------------------------------------------------------------------------------------------- replay

def write(tmp_path, text, name="t.csv"):
    p = tmp_path / name
    p.write_text(text)
    return str(p)


def test_trace_replay_scaling_window_and_trimming(tmp_path):
    path = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n"
                           "0.5,100,10\n1.0,300,100\n2.0,50,5\n3.0,10,1\n")
    rs = make_requests(RequestConfig(arrival="trace", lengths="trace", trace=path, start_s=1.0, end_s=3.0,
                                     time_scale=2.0, max_model_len=200))
    assert rs.arrived_at_s.tolist() == [0.0, 2.0]
    # 300 + 100 > 200: proportional, prefill floor(300 * 200 / 400) = 150, decode 50
    assert rs.num_prefill_tokens.tolist() == [150, 50] and rs.num_decode_tokens.tolist() == [50, 5]
    assert len(rs.trimmed) == 1 and rs.trimmed[0].where == f"{path}:3"
    line = rs.report_lines()[0]
    assert "trimmed 1 request" in line and f"{path}:3 (300+100 -> 150+50)" in line
    own = make_requests(RequestConfig(arrival="trace", trace=path))          # lengths default to the rows'
    assert own.num_prefill_tokens.tolist() == [100, 300, 50, 10]
    mixed = make_requests(RequestConfig(arrival="trace", trace=path, lengths="fixed"))
    assert mixed.num_prefill_tokens.tolist() == [2048] * 4 and mixed.arrived_at_s.tolist() == [0.5, 1.0, 2.0, 3.0]
    scaled = make_requests(RequestConfig(arrival="trace", lengths="trace", trace=path, prefill_scale=0.5,
                                         decode_scale=2.0, num_requests=2))
    assert scaled.num_prefill_tokens.tolist() == [50, 150] and scaled.num_decode_tokens.tolist() == [20, 200]


def test_trim_keeps_both_parts_and_reports_synthetic_requests():
    rs = make_requests(RequestConfig(num_requests=2, prefill_tokens=4000, decode_tokens=1, max_model_len=1000))
    assert rs.num_prefill_tokens.tolist() == [999, 999] and rs.num_decode_tokens.tolist() == [1, 1]
    assert [t.where for t in rs.trimmed] == ["request 0", "request 1"]


def test_lengths_only_trace_and_extra_columns(tmp_path):
    path = write(tmp_path, "num_decode_tokens,foo,num_prefill_tokens\n7,x,3\n")
    rows = read_trace(path)
    assert rows.num_prefill_tokens.tolist() == [3] and rows.num_decode_tokens.tolist() == [7]
    assert rows.arrived_at_s is None


# -------------------------------------------------------------------------------------------- examples

def test_examples_are_reproducible_from_the_shipped_generator(tmp_path):
    written = make_examples(tmp_path)
    assert [p.name for p in written] == [f"{n}.csv" for n in EXAMPLES]
    for p in written:
        assert p.read_bytes() == example_path(p.stem).read_bytes()
    assert main(["make-examples", str(tmp_path / "again")]) == 0
    assert main(["bogus"]) == 2


def test_example_statistics():
    s = read_trace("summarization", need_arrivals=True)
    assert s.num_prefill_tokens.mean() == pytest.approx(2588, rel=0.01)
    assert s.num_decode_tokens.mean() == pytest.approx(291, rel=0.01)
    c = read_trace("chat", need_arrivals=True)
    assert 100 <= np.median(c.num_prefill_tokens) < 1000 and 100 <= np.median(c.num_decode_tokens) < 1000
    k = read_trace("code", need_arrivals=True)
    assert np.median(k.num_prefill_tokens) > 5 * np.median(k.num_decode_tokens)
    for r in (s, c, k):
        assert 300 <= len(r) <= 2000


# ---------------------------------------------------------------------------------------------- errors

@pytest.mark.parametrize("body, msg", [
    ("0.5,100,10\n1.0,abc,3\n", ":3: num_prefill_tokens 'abc' is not an integer"),
    ("0.5,100,0\n", ":2: num_decode_tokens must be >= 1 (got 0)"),
    ("0.5,100\n", ":2: expected 3 columns"),
    ("2.0,10,1\n1.0,10,1\n", ":3: arrived_at 1.0 is earlier than the previous row's 2.0"),
    ("-1,10,1\n", ":2: arrived_at must be a finite time >= 0 s"),
    ("x,10,1\n", ":2: arrived_at 'x' is not a number"),
    ("1.5,10.5,1\n", ":2: num_prefill_tokens '10.5' is not an integer"),
])
def test_malformed_rows_name_file_and_line(tmp_path, body, msg):
    path = write(tmp_path, "arrived_at,num_prefill_tokens,num_decode_tokens\n" + body)
    with pytest.raises(WorkloadError) as e:
        make_requests(RequestConfig(arrival="trace", lengths="trace", trace=path))
    assert str(e.value).startswith(path) and msg in str(e.value) and "\n" not in str(e.value)


def test_bad_trace_files(tmp_path):
    for text, msg in (("", ":1: empty file"), ("a,b\n1,2\n", ":1: header lacks num_prefill_tokens"),
                      ("num_prefill_tokens,num_decode_tokens\n", "holds no requests")):
        with pytest.raises(WorkloadError, match=msg):
            read_trace(write(tmp_path, text))
    with pytest.raises(WorkloadError, match="header lacks arrived_at"):
        make_requests(RequestConfig(arrival="trace", trace=write(tmp_path, "num_prefill_tokens,num_decode_tokens\n1,1\n")))
    with pytest.raises(WorkloadError, match="cannot read the trace"):
        read_trace(tmp_path / "missing.csv")


@pytest.mark.parametrize("cfg, msg", [
    (dict(num_requests=5, qps=0), "qps must be a number > 0 (got 0)"),
    (dict(num_requests=5, qps=-2.0), "qps must be a number > 0 (got -2.0)"),
    (dict(num_requests=5, arrival="gamma", cv=0), "cv must be a number > 0"),
    (dict(num_requests=5, arrival="closed", concurrency=0), "concurrency must be a positive integer"),
    (dict(num_requests=0), "num_requests must be a positive integer"),
    (dict(), "give num_requests or duration_s"),
    (dict(arrival="static"), "num_requests is required"),
    (dict(num_requests=5, arrival="weibull"), "arrival must be one of"),
    (dict(num_requests=5, lengths="huge"), "lengths must be one of"),
    (dict(num_requests=5, lengths="uniform", min_tokens=500, max_tokens=100), "max_tokens (100) must be >= min_tokens (500)"),
    (dict(num_requests=5, lengths="zipf", pd_ratio=-1), "pd_ratio must be a number > 0"),
    (dict(num_requests=5, prefill_tokens=0), "prefill_tokens must be a positive integer"),
    (dict(num_requests=5, max_model_len=1), "max_model_len must be >= 2"),
    (dict(arrival="trace"), "trace must name a CSV file"),
    (dict(arrival="trace", trace="chat", start_s=5, end_s=1), "end_s (1) must be greater than start_s (5)"),
    (dict(arrival="trace", trace="chat", time_scale=0), "time_scale must be a number > 0"),
    (dict(arrival="trace", trace="chat", start_s=1e9), "no request arrives"),
])
def test_bad_parameters_name_the_field(cfg, msg):
    with pytest.raises(WorkloadError) as e:
        make_requests(RequestConfig(**cfg))
    assert msg in str(e.value) and "\n" not in str(e.value)
