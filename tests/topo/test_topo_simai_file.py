"""SimAI topology files: round trips, hand-written files, malformed input."""

from __future__ import annotations

import pytest

from topo import build, read_simai_topology, write_simai_topology
from topo.errors import TopoError

BUILDERS = [
    ("spectrum-x", dict(gpus=64)),
    ("spectrum-x", dict(gpus=64, nvswitch_chips=4)),
    ("spectrum-x", dict(gpus=32, nvswitch_per_server=2)),
    ("spectrum-x", dict(gpus=64, nics=True, gpus_per_nic=2)),
    ("alibaba-hpn", dict(gpus=256)),
    ("alibaba-hpn", dict(gpus=256, dual_plane=True, nics=True)),
    ("dcn+", dict(gpus=256)),
    ("dcn+", dict(gpus=256, dual_tor=True)),
    ("rail-optimized", dict(gpus=64, dual_tor=True)),
    ("non-rail", dict(gpus=64, error_rate=0.001, latency_s="500ns")),
    ("multi-pod", dict(gpus=2048, nics_per_asw=16, psw_count=8, asw_per_psw=16, core_oversubscription=2)),
    ("fat-tree", dict(k=8)),
    ("nvl72", dict(gpus=144)),
    ("nvl36", dict(gpus=72)),
    ("nvl72", dict(gpus=72, network=False)),
    ("pcie", dict(gpus=32)),
]


@pytest.mark.parametrize("template,params", BUILDERS)
def test_read_write_round_trip(tmp_path, template, params):
    t = build(template, **params)
    f = tmp_path / "topo.txt"
    write_simai_topology(t, f)
    r = read_simai_topology(f)
    assert r == t
    # and the text is a fixed point
    g = tmp_path / "again.txt"
    write_simai_topology(r, g)
    assert g.read_text() == f.read_text()


def test_models_simai_cannot_express_are_flagged(tmp_path):
    t = build("pcie", gpus=16)
    warnings = write_simai_topology(t, tmp_path / "p.txt")
    text = (tmp_path / "p.txt").read_text().splitlines()
    assert any("NIC" in w for w in warnings) and any("PCIe" in w for w in warnings)
    header = text[0].split()
    n_cables = int(header[4])
    # everything SimAI reads comes first; the clustersim lines follow the last cable
    assert all(not ln.startswith("#") for ln in text[:2 + n_cables])
    assert all(ln.startswith("#clustersim") for ln in text[2 + n_cables:])


HAND = """\
12 2 1 3 7 H800
4 5 6 7 8 9 10 11
0 4 2400Gbps 0.000025ms 0
1 4 2400Gbps 0.000025ms 0
0 5 200Gbps 500ns 0
0 6 200Gbps 500ns 0
1 5 200Gbps 0.0005ms 0
1 6 200Gbps 0.0005ms 0
5 7 400Gbps 0.0005ms 0
"""


def test_hand_written_dual_tor(tmp_path):
    # 4 GPUs, 2 per server; only server 0 wired; GPUs 0,1 each on two ToRs (5 and 6)
    text = HAND.replace("12 2 1 3 7", "12 2 1 7 7")  # 4 GPUs + 1 NVS + 7 switches
    f = tmp_path / "hand.txt"
    f.write_text(text)
    t = read_simai_topology(f)
    assert t.num_gpus == 4 and t.gpus_per_server == 2 and t.gpu_type == "H800"
    assert t.tors_of(0) == (5, 6) and t.tor_of(1) == 5
    assert t.nodes[4].kind == "nvswitch" and t.nodes[5].tier == "asw" and t.nodes[7].tier == "psw"
    assert t.links[4].latency_s == pytest.approx(500e-9) and t.links[4].bandwidth_Bps == 25e9
    assert t.links[1].src == 4 and t.links[1].dst == 0 and t.links[1].kind == "nvlink"
    assert t.nvlink_domain_size == 2
    out = tmp_path / "out.txt"
    write_simai_topology(t, out)
    # rates/delays written as read; whitespace normalised to the generator's form
    assert [ln.rstrip() for ln in out.read_text().splitlines()] == text.splitlines()


@pytest.mark.parametrize("body,where,what", [
    ("18 8 1\n", ":1", "header"),
    ("4 2 1 x 1 H100\n", ":1", "integers"),
    ("4 2 1 1 1 H100\n2 3\n0 2 400Gbs 0.0005ms 0\n", ":3", "bad rate '400Gbs'"),
    ("4 2 1 1 1 H100\n2 3\n0 2 400Gbps 0.0005ms\n", ":3", "expected '<src> <dst>"),
    ("4 2 1 1 2 H100\n2 3\n0 2 400Gbps 0.0005ms 0\n", ":4", "declares 2 links"),
    ("4 2 1 1 1 H100\n2 3\n0 9 400Gbps 0.0005ms 0\n", ":3", "bad link"),
    ("4 2 1 1 1 H100\n1 3\n0 2 400Gbps 0.0005ms 0\n", ":2", "switch ids"),
    ("4 2 1 1 1 H100\n2 3\n0 2 400Gbps 5parsecs 0\n", ":3", "bad time"),
])
def test_malformed_lines_name_file_and_line(tmp_path, body, where, what):
    f = tmp_path / "bad.txt"
    f.write_text(body)
    with pytest.raises(TopoError) as exc:
        read_simai_topology(f)
    msg = str(exc.value)
    assert f"bad.txt{where}" in msg and what in msg and "\n" not in msg


def test_nvswitch_listed_anywhere(tmp_path):
    # NVSwitch 5 listed first although switch 4 has the lower id
    f = tmp_path / "odd.txt"
    f.write_text("6 2 1 1 5 A100\n5 4\n0 5 2400Gbps 0.000025ms 0\n1 5 2400Gbps 0.000025ms 0\n"
                 "0 4 200Gbps 0.0005ms 0\n1 4 200Gbps 0.0005ms 0\n2 4 200Gbps 0.0005ms 0\n")
    t = read_simai_topology(f)
    assert t.nodes[5].kind == "nvswitch" and t.nodes[4].tier == "asw"
    out = tmp_path / "o.txt"
    write_simai_topology(t, out)
    assert out.read_text().splitlines()[1] == "5 4 "
    assert read_simai_topology(out) == t
