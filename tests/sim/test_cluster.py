"""Several jobs on one fabric (issue 14 item 1): slowdown from shared links, placements, outputs."""

from __future__ import annotations

import csv
import json

import pytest

from sim.cli import main
from sim.cluster import parse_job, place_jobs, simulate_cluster
from sim.errors import SimError
from sim.inputs import make_topology

TINY = """name: tiny
num_layers: 2
hidden_size: 2048
num_attention_heads: 16
ffn_hidden_size: 8192
vocab_size: 32000
seq_length: 2048
"""
# 64 GPUs = 8 servers of 8; two servers (16 NICs) per leaf (ASW): 4 leaves under the spine (PSW) tier
FABRIC = "non-rail:nics_per_asw=16"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    p = tmp_path_factory.mktemp("cluster") / "tiny.yaml"
    p.write_text(TINY)
    return str(p)


def _jobs(tiny: str, placement: str, **extra) -> list:
    tail = "".join(f",{k}={v}" for k, v in extra.items())
    return [parse_job(f"name={n},model={tiny},tp=8,dp=4,global_batch_size=8,micro_batch_size=1,"
                      f"placement={placement}{tail}", i) for i, n in enumerate("AB")]


def test_disjoint_halves_of_a_nonblocking_fabric_do_not_slow_down(tiny):
    # contiguous: A on leaves 0-1, B on leaves 2-3; both reduce gradients across the spine, but every
    # leaf-spine link carries one job only, so max-min sharing leaves each job its alone rates
    rep = simulate_cluster(_jobs(tiny, "contiguous"), make_topology(FABRIC, gpus=64))
    assert [r["gpus"] for r in rep.jobs] == ["0-31", "32-63"]
    for r in rep.jobs:
        assert r["slowdown"] == pytest.approx(1.0, abs=1e-9)
    assert any("psw" in lk["name"] for lk in rep.links)              # the spine is used ...
    assert all("+" not in lk["jobs"] for lk in rep.links)            # ... but no link by both jobs


def test_interleaved_jobs_on_an_oversubscribed_fabric_slow_down_on_named_links(tiny):
    fabric = FABRIC + ",tor_oversubscription=4"
    rep = simulate_cluster(_jobs(tiny, "interleave"), make_topology(fabric, gpus=64))
    assert [r["gpus"] for r in rep.jobs] == ["0-7,16-23,32-39,48-55", "8-15,24-31,40-47,56-63"]
    for r in rep.jobs:
        assert r["slowdown"] > 1.05
    hot = rep.hot_links(4)
    for lk in hot:
        assert lk["jobs"] == "A+B"
        assert lk["kind"] == "network" and "asw" in lk["name"] and "psw" in lk["name"]
    assert hot[0]["utilization"] >= hot[-1]["utilization"] > 0
    # utilisation is bytes / (capacity x makespan): check the first row by hand
    assert hot[0]["utilization"] == pytest.approx(hot[0]["bytes"] / (hot[0]["capacity_Bps"] * rep.makespan_s))


def test_jobs_that_do_not_overlap_in_time_do_not_slow_down(tiny):
    fabric = FABRIC + ",tor_oversubscription=4"
    topo = make_topology(fabric, gpus=64)
    a, b = _jobs(tiny, "interleave", iterations=2)
    t_rough = simulate_cluster([b], topo).jobs[0]["alone_s"]
    start_b = 10 * t_rough             # long after A's two iterations
    b = parse_job(f"name=B,model={tiny},tp=8,dp=4,global_batch_size=8,micro_batch_size=1,placement=interleave,"
                  f"start={start_b}", 1)
    rep = simulate_cluster([a, b], topo)
    ja, jb = rep.jobs
    assert ja["shared_s"] == pytest.approx(ja["alone_s"], rel=1e-9)   # two iterations back to back, alone
    assert jb["slowdown"] == pytest.approx(1.0, abs=1e-9)
    assert rep.makespan_s == pytest.approx(start_b + jb["alone_s"], rel=1e-9)


class _Topo:
    num_gpus = 32

    @staticmethod
    def server_of(g: int) -> int:
        return g // 8


def test_placements(tmp_path):
    m = tmp_path / "map.txt"
    m.write_text("\n".join(str(g) for g in (31, 30, 29, 28)))
    got = place_jobs([4, 8, 8, 8], [f"file:{m}", "contiguous", "interleave", "interleave"], _Topo())
    assert got[0] == [31, 30, 29, 28]
    assert got[1] == list(range(8))
    assert got[2] == list(range(8, 16)) and got[3] == list(range(16, 24))
    assert place_jobs([16], ["spread"], _Topo())[0] == list(range(8)) + list(range(16, 24))
    with pytest.raises(SimError, match="need 40 GPUs but the topology has 32"):
        place_jobs([20, 20], ["contiguous", "contiguous"], _Topo())
    with pytest.raises(SimError, match="reuses a GPU"):
        place_jobs([4, 4], [f"file:{m}", f"file:{m}"], _Topo())
    with pytest.raises(SimError, match="needs 3 whole servers, 2 free"):
        place_jobs([12, 17], ["contiguous", "spread"], _Topo())


@pytest.mark.parametrize("spec,msg", [
    ("tp=8", "give model=NAME or workload=FILE"),
    ("model=x,placement=random", "placement 'random' unknown"),
    ("model=x,start=-1", "start must be >= 0"),
    ("model=x,iterations=0", "iterations must be >= 1"),
    ("workload=w.json,tp=2", "cannot be combined with workload=FILE"),
    ("model=x,tp", "expected key=value pairs"),
])
def test_bad_job_specs(spec, msg):
    with pytest.raises(SimError, match=msg):
        parse_job(spec)


def test_cli_writes_results(tiny, tmp_path, capsys):
    out = tmp_path / "res"
    job = f"model={tiny},tp=8,dp=4,global_batch_size=8,micro_batch_size=1,placement=interleave"
    rc = main(["cluster", "--job", f"name=A,{job}", "--job", f"name=B,{job}", "-t", FABRIC + ",tor_oversubscription=4",
               "--top", "3", "-o", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "slowdown" in text and "asw" in text
    data = json.loads((out / "summary.json").read_text())
    assert [j["name"] for j in data["jobs"]] == ["A", "B"]
    assert len(data["hot_links"]) == 3 and data["inputs"]["gpus"] == 64
    rows = list(csv.DictReader((out / "links.csv").open()))
    assert rows[0]["name"] == data["hot_links"][0]["name"]
    assert [float(r["utilization"]) for r in rows] == sorted((float(r["utilization"]) for r in rows), reverse=True)
    assert (out / "summary.txt").read_text().startswith("job ")
    assert (out / "cluster.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_cli_bad_job_is_one_line_error(capsys):
    assert main(["cluster", "--job", "tp=8", "-o", "-"]) == 2
    err = capsys.readouterr().err
    assert "clustersim: error:" in err and "give model=NAME or workload=FILE" in err


# ---------------------------------------------------------------- scheduler placement policies
# 32 GPUs = 4 servers of 8; two servers per rail-optimized segment: leaves {0, 1} and {2, 3}
RAIL32 = "spectrum-x:nics_per_asw=2"


def _plan(**fields):
    from sim.inputs import make_plan
    fields.setdefault("global_batch_size", 16)
    return make_plan(None, micro_batch_size=1, seq_length=1024, **fields)


def test_first_fit_takes_the_first_server_that_holds_the_job():
    # A (4) -> server 0; B (8) needs a wholly free server -> server 1, not the fragment 4-11 that
    # contiguous would take; C (4) fits server 0's rest; D (6): servers 0, 1 full -> server 2; E (2): the
    # rest of server 2
    topo = make_topology(RAIL32, gpus=32)
    got = place_jobs([4, 8, 4, 6, 2], ["first-fit"] * 5, topo)
    assert got == [[0, 1, 2, 3], list(range(8, 16)), [4, 5, 6, 7], list(range(16, 22)), [22, 23]]
    assert place_jobs([4, 8], ["contiguous"] * 2, topo)[1] == list(range(4, 12))
    # a multi-server job takes the first wholly free servers
    assert place_jobs([4, 16], ["first-fit"] * 2, topo)[1] == list(range(8, 24))
    with pytest.raises(SimError, match=r"^job 2 \(first-fit\): needs 2 wholly free servers, 1 free$"):
        place_jobs([4, 16, 12], ["first-fit"] * 3, topo)          # 4 GPUs free on server 0, server 3 whole
    with pytest.raises(SimError, match=r"^job 5 \(first-fit\): no server has 6 free GPU\(s\)$"):
        place_jobs([8, 8, 8, 4, 6, 6], ["first-fit"] * 6, make_topology(RAIL32, gpus=40))
    # failed GPUs are skipped: server 0 lost GPU 2 -> a job of 8 cannot use it
    assert place_jobs([8, 4], ["first-fit"] * 2, topo, unavailable=[2]) == [list(range(8, 16)), [0, 1, 3, 4]]


def test_rail_aligned_keeps_one_leaf_and_rails_across_servers():
    """A takes server 0 (leaf {0, 1}). B: tp 2 x dp 8 = 16 GPUs = 2 servers: leaf {2, 3} holds both
    (leaf {0, 1} has one free server). Four TP pairs (d = 0..3) fill server 2 in order; on server 3 the
    blocks run backwards (d = 4 at local GPUs 6-7, ..., d = 7 at 0-1), so the DP neighbours d = 3 and
    d = 4 across the server boundary share rail 6."""
    topo = make_topology(RAIL32, gpus=32)
    a, b = place_jobs([8, 16], ["contiguous", "rail-aligned"], topo, [None, _plan(tp=2, dp=8)])
    assert a == list(range(8))
    assert b == list(range(16, 24)) + [30, 31, 28, 29, 26, 27, 24, 25]
    assert topo.rail_of(b[6]) == topo.rail_of(b[8]) == 6
    # contiguous would straddle the two leaves (servers 1 and 2) and change rails at the boundary
    assert place_jobs([8, 16], ["contiguous"] * 2, topo)[1] == list(range(8, 24))


def test_rail_aligned_spans_as_few_leaves_as_possible(tmp_path):
    """8 servers, two per leaf (ToR): {0,1} {2,3} {4,5} {6,7}. A (file) holds server 2, B server 0.
    C (tp 8 x dp 3: 3 servers) finds no leaf with 3 free servers: the largest, {4, 5}, then the
    smallest leaf that covers the last server, {1} (tie with {3}: lowest id) -> 2 leaves; first-fit
    takes servers 1, 3, 4 (3 leaves)."""
    topo = make_topology(FABRIC, gpus=64)
    worlds = [8, 8, 24]
    plans = [None, None, _plan(tp=8, dp=3, global_batch_size=3)]
    (tmp_path / "map.txt").write_text("\n".join(str(g) for g in range(16, 24)))
    mapping = [f"file:{tmp_path / 'map.txt'}", "contiguous"]
    got = place_jobs(worlds, mapping + ["rail-aligned"], topo, plans)[2]
    assert got == list(range(32, 48)) + list(range(8, 16))
    assert len({topo.tor_of(g) for g in got}) == 2
    ff = place_jobs(worlds, mapping + ["first-fit"], topo, plans)[2]
    assert ff == list(range(8, 16)) + list(range(24, 40))
    assert len({topo.tor_of(g) for g in ff}) == 3


@pytest.mark.parametrize("order", ["tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp", "dp-tp-cp-ep-pp"])
@pytest.mark.parametrize("fields", [dict(tp=4, pp=2, dp=2), dict(tp=2, dp=16), dict(tp=2, pp=3, dp=8),
                                    dict(tp=1, cp=2, pp=4, dp=8), dict(tp=16, pp=2, dp=2), dict(tp=8, pp=4, dp=1)])
def test_rail_layout_neighbours_share_a_server_or_a_rail(order, fields):
    from sim.cluster_place import rail_layout
    from sim.placement import place
    plan = _plan(rank_order=order, **fields)
    world = int(plan.world_size)
    topo = make_topology("fat-tree:k=8", gpus=128)            # 8 GPUs per server
    server, local = rail_layout(plan, 8)
    gpus = (server * 8 + local).tolist()
    assert sorted(gpus) == list(range(world))                 # a bijection onto world / 8 whole servers
    pl = place(plan, topo, gpus)
    for kind in ("dp", "pp"):
        for row in pl.groups(kind):
            for x, y in zip(row, row[1:]):
                assert topo.server_of(x) == topo.server_of(y) or topo.rail_of(x) == topo.rail_of(y), (kind, row)
    if plan.tp * plan.cp <= 8:                                 # a TP x CP group inside one server
        for row in pl.groups("tp") + pl.groups("cp"):
            assert len({topo.server_of(g) for g in row}) == 1


def test_rail_aligned_errors():
    topo = make_topology(RAIL32, gpus=32)
    with pytest.raises(SimError, match=r"^rail-aligned: tp\*cp = 3 must divide or be a multiple of the 8 GPUs"):
        place_jobs([24], ["rail-aligned"], topo, [_plan(tp=3, dp=8, global_batch_size=8)])
    with pytest.raises(SimError, match=r"^rail-aligned: world 12 is not a multiple of the 8 GPUs per server$"):
        place_jobs([12], ["rail-aligned"], topo, [_plan(tp=2, dp=6, global_batch_size=6)])
    with pytest.raises(SimError, match=r"^job 0 \(rail-aligned\): needs 3 wholly free servers, 2 free$"):
        place_jobs([24], ["rail-aligned"], topo, [_plan(tp=8, dp=3, global_batch_size=3)], unavailable=[9, 17])
    # a job within one server: placed as first-fit
    assert place_jobs([4], ["rail-aligned"], topo, [_plan(tp=4)]) == [[0, 1, 2, 3]]


# ---------------------------------------------------------------- faults and `run --job`
def _job(tiny, name, placement):
    return f"name={name},model={tiny},tp=8,dp=2,global_batch_size=4,micro_batch_size=1,placement={placement}"


def test_cluster_fault_flags(tiny, tmp_path, capsys):
    # server 0 failed: first-fit places A on servers 1-2 and B on 3-4 (the failed GPUs are skipped)
    out = tmp_path / "res"
    rc = main(["cluster", "--job", _job(tiny, "A", "first-fit"), "--job", _job(tiny, "B", "first-fit"),
               "-t", FABRIC, "--gpus", "64", "--fail", "server:0", "--no-charts", "-o", str(out)])
    assert rc == 0
    data = json.loads((out / "summary.json").read_text())
    assert [j["gpus"] for j in data["jobs"]] == ["8-23", "24-39"]
    assert data["meta"]["faults"] and data["inputs"]["faults"]["fail"] == ["server:0"]
    capsys.readouterr()
    # contiguous lands on a GPU that lost its only network link: one line naming the job
    rc = main(["cluster", "--job", _job(tiny, "A", "contiguous"), "-t", FABRIC, "--gpus", "64",
               "--fail", "nic:gpu3", "-o", "-"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["clustersim: error: job 'A' unplaceable: GPU 3 (rank 3, server 0) lost its network link "
                   "(nic:gpu3 failed) and its dp group needs GPU 11"]
    assert main(["cluster", "--job", _job(tiny, "A", "contiguous"), "--fail", "spine:99", "-o", "-"]) == 2
    assert "clustersim: error: --fail 'spine:99'" in capsys.readouterr().err


def test_run_job_is_cluster(tiny, tmp_path, capsys):
    jobs = ["--job", _job(tiny, "A", "rail-aligned"), "--job", _job(tiny, "B", "interleave")]
    common = ["-t", FABRIC + ",tor_oversubscription=4", "--gpus", "64", "--no-charts"]
    assert main(["cluster", *jobs, *common, "-o", str(tmp_path / "c")]) == 0
    assert main(["run", *jobs, *common, "-o", str(tmp_path / "r")]) == 0
    c = json.loads((tmp_path / "c" / "summary.json").read_text())
    r = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert r["jobs"] == c["jobs"] and r["hot_links"] == c["hot_links"]
    capsys.readouterr()
    for flags, flag in ((["--tp", "2"], "--tp"), (["--model", "aicb-7"], "--model"),
                        (["--straggler", "0=1.2"], "--straggler")):
        assert main(["run", *jobs, *flags, "-o", "-"]) == 2
        assert capsys.readouterr().err.strip() == (f"clustersim: error: run --job: {flag} describes one job; give "
                                                   "the workload and plan inside each --job")
    assert main(["run", *jobs, "--network", "analytical", "-o", "-"]) == 2
    assert "flow network only" in capsys.readouterr().err
