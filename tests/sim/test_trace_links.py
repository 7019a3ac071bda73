"""Link-utilisation counter tracks (netsim.linktrace + report.chrome_trace) and collective flow arrows."""

import json
from types import SimpleNamespace

import pytest

import netsim
from netsim.errors import NetsimError
from netsim.linktrace import hottest_links
from sim.commands import EXAMPLE_JOB, run_job
from sim.report import chrome_trace
from topo.templates import build

B1, B2 = 30e9, 20e9     # bytes of the two flows of the hand-computed case


def _channel(view, src: int, kind: str) -> int:
    return next(ch for ch in range(len(view.ch_src)) if view.ch_src[ch] == src and view.ch_kind[ch] == kind)


@pytest.fixture(scope="module")
def two_flows():
    """Flow 1 on GPU 0's NVLink port A only; flow 2 on A and GPU 0's NIC link N (its bottleneck)."""
    net = netsim.make_backend("flow", build("spectrum-x", gpus=16), record_link_changes=True)
    view = net.planner.view
    a, n = _channel(view, 0, "nvlink"), _channel(view, 0, "network")
    ca, cn = float(view.capacity_Bps[a]), float(view.capacity_Bps[n])
    assert cn < ca / 2           # max-min: flow 2 is held to cn by N, flow 1 takes the rest of A
    net.engine.add_flow([a], B1)
    net.engine.add_flow([a, n], B2)
    net.run_until_idle()
    return net, a, n, ca, cn


def test_two_flow_series_match_the_hand_computation(two_flows):
    net, a, n, ca, cn = two_flows
    t1 = B1 / (ca - cn)            # flow 1 ends (A full until then)
    t2 = B2 / cn                   # flow 2 ends (N full all along)
    assert t2 > t1
    by_id = {s.link_id: s for s in hottest_links(net, 8)}
    assert set(by_id) == {a, n}
    sa, sn = by_id[a], by_id[n]
    assert sa.times_s == pytest.approx([0.0, t1, t2], rel=1e-9)
    assert sa.util == pytest.approx([1.0, cn / ca, 0.0], rel=1e-9)
    assert sn.times_s == pytest.approx([0.0, t2], rel=1e-9)
    assert sn.util == pytest.approx([1.0, 0.0], rel=1e-9)
    assert sa.name == "gpu0 -> nvswitch0" and sa.kind == "nvlink"
    assert sn.name.startswith("gpu0 -> asw") and sn.kind == "network"
    for s, carried in ((sa, B1 + B2), (sn, B2)):
        # integral of the step function x capacity = the bytes that crossed the link
        integral = sum(u * (t_next - t) for t, t_next, u in zip(s.times_s, s.times_s[1:], s.util))
        assert integral * s.capacity_Bps == pytest.approx(carried, rel=1e-9)
        assert s.bytes_carried == pytest.approx(carried, rel=1e-9)
        assert s.busy_s == pytest.approx(carried / s.capacity_Bps, rel=1e-9)


def test_hottest_first_and_top_n(two_flows):
    net, a, n, ca, cn = two_flows
    assert B2 / cn > (B1 + B2) / ca                # N is busier than A
    assert [s.link_id for s in hottest_links(net, 8)] == [n, a]
    assert [s.link_id for s in hottest_links(net, 1)] == [n]
    assert hottest_links(net, 0) == []


def test_recorder_is_off_by_default_and_required():
    net = netsim.make_backend("flow", build("spectrum-x", gpus=16))
    assert net.engine.link_changes == [] and net.engine._recorded_load is None
    net.engine.add_flow([0], 1e6)
    net.run_until_idle()
    assert net.engine.link_changes == []
    with pytest.raises(NetsimError, match="record_link_changes=True"):
        hottest_links(net)


@pytest.fixture(scope="module")
def example():
    rep = run_job(dict(EXAMPLE_JOB), trace=True)
    return rep, json.loads(json.dumps(chrome_trace(rep)))


def test_example_counters_in_range_and_integrate_to_bytes(example):
    rep, trace = example
    meta = trace["otherData"]["link_counters"]
    assert meta["links"] == 8 and len(meta["tracks"]) == 8
    pid = meta["pid"]
    assert pid == 32 and pid not in rep.rep_ranks          # world size: a pid no rank has
    counters = [e for e in trace["traceEvents"] if e["ph"] == "C"]
    assert counters and all(e["pid"] == pid for e in counters)
    busy = [t["busy_s"] for t in meta["tracks"]]
    assert busy == sorted(busy, reverse=True)
    for tr in meta["tracks"]:
        pts = [(e["ts"] * 1e-6, e["args"]["utilisation"]) for e in counters if e["name"] == tr["track"]]
        assert pts and all(0.0 <= u <= 1.0 for _, u in pts)
        assert pts[-1][1] == 0.0                               # idle at the end of the iteration
        assert pts[-1][0] <= rep.iteration_time_s * (1 + 1e-9)
        integral = sum(u * (t2 - t1) for (t1, u), (t2, _) in zip(pts, pts[1:]))
        assert integral * tr["capacity_Bps"] == pytest.approx(tr["bytes_carried"], rel=1e-4)
    assert chrome_trace(rep, links=3)["otherData"]["link_counters"]["links"] == 3
    none = chrome_trace(rep, links=0)
    assert none["otherData"]["link_counters"]["links"] == 0
    assert not [e for e in none["traceEvents"] if e["ph"] == "C"]


def test_analytical_backend_has_no_counters_and_says_why():
    rep = run_job(dict(EXAMPLE_JOB, network="analytical"), trace=True)
    meta = chrome_trace(rep)["otherData"]["link_counters"]
    assert meta["links"] == 0
    assert "analytical network backend has no link loads" in meta["note"]
    assert not [e for e in chrome_trace(rep)["traceEvents"] if e["ph"] == "C"]


def _flows(trace, cat):
    ev = trace["traceEvents"]
    s = [e for e in ev if e["ph"] == "s" and e["cat"] == cat]
    f = [e for e in ev if e["ph"] == "f" and e["cat"] == cat]
    return s, f


def test_example_collective_flow_links_the_two_stages(example):
    rep, trace = example
    s, f = _flows(trace, "coll_flow")
    assert trace["otherData"]["collective_flows"] == 1 == len(s) == len(f)   # one mp all-reduce, 2 stages
    assert s[0]["id"] == f[0]["id"] and f[0]["bp"] == "e"
    assert (s[0]["pid"], f[0]["pid"]) == (rep.rep_ranks[0], rep.rep_ranks[1])
    ids = [e["id"] for e in trace["traceEvents"] if e["ph"] == "s"]
    assert len(ids) == len(set(ids))                         # pipeline and collective ids never collide
    fids = [e["id"] for e in trace["traceEvents"] if e["ph"] == "f"]
    assert sorted(fids) == sorted(ids) == list(range(1, 18))   # every "s" has exactly one "f": 16 pp + 1 mp


def _fake_rep(trace):
    return SimpleNamespace(trace=trace, rep_ranks=[0, 8, 16], rep_gpus=[0, 8, 16], rank_stage=[0] * 8 + [1] * 8 + [2] * 8,
                           iteration_time_s=1.0, link_loads=None)


def _mp(stage, t, name="grad_norm"):
    return (stage, "comm:mp", name, t, 1e-3, "comm",
            {"collective": "all_reduce", "group": "mp", "group_size": 3, "stage": stage})


def test_collective_flows_pair_every_member_instance():
    # two instances of one mp all-reduce over 3 stages, plus a same-named DP collective that must not link
    dp = [(s, "comm:dp", "grad_norm", 0.5, 1e-3, "comm", {"collective": "all_reduce", "group": "dp", "stage": s})
          for s in range(3)]
    rep = _fake_rep([_mp(2, 0.5), _mp(0, 0.5), _mp(1, 0.5), _mp(0, 0.9), _mp(1, 0.9), _mp(2, 0.9)] + dp)
    trace = chrome_trace(rep)
    s, f = _flows(trace, "coll_flow")
    assert trace["otherData"]["collective_flows"] == 4 == len(s) == len(f)     # 2 instances x (3 - 1)
    fs = {e["id"]: e for e in f}
    assert sorted(fs) == sorted(e["id"] for e in s) and len(fs) == 4
    pairs = sorted((e["ts"], e["pid"], fs[e["id"]]["pid"]) for e in s)
    assert pairs == [(500000.0, 0, 8), (500000.0, 0, 16), (900000.0, 0, 8), (900000.0, 0, 16)]
    # only stage 1 shown: no partner, no arrow
    only = chrome_trace(rep, [9])
    assert only["otherData"]["collective_flows"] == 0 and not _flows(only, "coll_flow")[0]
    assert only["otherData"]["link_counters"]["links"] == 0


def test_recording_limit_stops_and_is_reported():
    from sim.trace_args import link_loads
    net = netsim.make_backend("flow", build("spectrum-x", gpus=16), record_link_changes=True)
    view = net.planner.view
    a, n = _channel(view, 0, "nvlink"), _channel(view, 0, "network")
    net.engine.link_changes_limit = 2           # t=0 records A and N; the change of A at t1 would be the 3rd
    net.engine.add_flow([a], B1)
    net.engine.add_flow([a, n], B2)
    net.run_until_idle()
    t1 = B1 / (float(view.capacity_Bps[a]) - float(view.capacity_Bps[n]))
    assert net.engine.link_changes_stopped_s == pytest.approx(t1, rel=1e-9)
    assert sum(len(c[1]) for c in net.engine.link_changes) == 2
    got = link_loads(net)
    assert "recording stopped at" in got["note"] and "more than 2 load changes" in got["note"]
    assert [s.link_id for s in got["links"]] == [n, a]          # ranking still uses every byte carried


def test_cli_trace_links(tmp_path, capsys):
    from sim.cli import main
    out = tmp_path / "r"
    assert main(["run", "--no-charts", "-q", "--trace-links", "3", "-o", str(out)]) == 0
    t = json.loads((out / "trace.json").read_text())
    assert t["otherData"]["link_counters"]["links"] == 3
    assert len({e["name"] for e in t["traceEvents"] if e["ph"] == "C"}) == 3
    assert main(["run", "--no-charts", "-q", "--trace-links", "33", "-o", str(tmp_path / "x")]) == 2
    assert "clustersim: error: --trace-links: 33 is not in 0..32" in capsys.readouterr().err


def test_resample_mean_keeps_the_integral():
    from netsim.linktrace import resample_mean
    t, u = resample_mean([0.0, 0.3, 0.35, 1.0], [1.0, 0.5, 0.25, 0.0], 1.0, 4)
    # bin [0.25, 0.5]: 0.05 s at 1, 0.05 s at 0.5, 0.15 s at 0.25 -> 0.1125 / 0.25; equal bins merged
    assert t == pytest.approx([0.0, 0.25, 0.5, 1.0]) and u == pytest.approx([1.0, 0.45, 0.25, 0.0])
    integral = sum(v * (b - a) for a, b, v in zip(t, t[1:], u))
    assert integral == pytest.approx(0.3 + 0.05 * 0.5 + 0.65 * 0.25)


def test_long_series_are_shown_as_bin_means(example, monkeypatch):
    import sim.report as report
    rep, _ = example
    monkeypatch.setattr(report, "COUNTER_POINTS_MAX", 10)
    monkeypatch.setattr(report, "COUNTER_BINS", 50)
    trace = json.loads(json.dumps(chrome_trace(rep, links=2)))
    tracks = trace["otherData"]["link_counters"]["tracks"]
    for tr in tracks:
        assert tr["resampled_bin_s"] == pytest.approx(rep.iteration_time_s / 50, rel=1e-6)
        pts = [(e["ts"] * 1e-6, e["args"]["utilisation"]) for e in trace["traceEvents"]
               if e["ph"] == "C" and e["name"] == tr["track"]]
        assert 2 <= len(pts) <= 51 and all(0.0 <= u <= 1.0 for _, u in pts)
        integral = sum(u * (t2 - t1) for (t1, u), (t2, _) in zip(pts, pts[1:]))
        assert integral * tr["capacity_Bps"] == pytest.approx(tr["bytes_carried"], rel=1e-4)
