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
