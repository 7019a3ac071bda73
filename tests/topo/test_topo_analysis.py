"""Validation, summary (bisection, oversubscription), networkx export, drawing."""

from __future__ import annotations

import dataclasses

import pytest

from topo import build
from topo.analysis import check, summarize, validate
from topo.errors import TopoError


def test_multi_pod_core_oversubscription_halves_bisection():
    full = summarize(build("multi-pod", gpus=4096, nics_per_asw=16, psw_count=16, asw_per_psw=32))
    half = summarize(build("multi-pod", gpus=4096, nics_per_asw=16, psw_count=16, asw_per_psw=32,
                           core_oversubscription=2))
    # 4096 GPUs x 400 Gb/s: injection 204.8 TB/s, full bisection half of it
    assert full["injection_Bps"] == pytest.approx(4096 * 50e9)
    assert full["full_bisection_Bps"] == pytest.approx(4096 * 50e9 / 2)
    assert full["bisection_Bps"] == pytest.approx(full["full_bisection_Bps"])
    assert half["bisection_Bps"] == pytest.approx(half["full_bisection_Bps"] / 2)
    assert half["oversubscription"] == {"asw": pytest.approx(1.0), "psw": pytest.approx(2.0)}
    assert half["max_hops"] == 6 and half["rails"] == 8 and half["rail_optimized"]


def test_single_pod_under_an_oversubscribed_core_keeps_full_bisection():
    # 4096 GPUs fit one pod (8 segments x 512): every pair turns around at the PSWs, so the 2:1 core
    # uplinks cut nothing (the tier-cut formula alone reported 0.5); two pods do cross the core
    one = summarize(build("multi-pod", gpus=4096, core_oversubscription=2))
    assert one["nodes_per_tier"]["csw"] > 0 and one["oversubscription"]["psw"] == pytest.approx(2.0)
    assert one["bisection_Bps"] == pytest.approx(one["full_bisection_Bps"]) == pytest.approx(4096 * 50e9 / 2)
    two = summarize(build("multi-pod", gpus=8192, core_oversubscription=2))
    assert two["bisection_Bps"] == pytest.approx(two["full_bisection_Bps"] / 2)
    # DCN+ dual ToR, 128 GPUs: every GPU hangs off the same ToR pair (npa 128), so the 8:1 ToR uplinks
    # are never crossed (was reported as 1/8)
    dual = summarize(build("dcn+", gpus=128, dual_tor=True))
    assert dual["oversubscription"]["asw"] == pytest.approx(8.0)
    assert dual["bisection_Bps"] == pytest.approx(dual["full_bisection_Bps"]) == pytest.approx(128 * 2 * 25e9 / 2)


def test_summary_counts_spectrum_x():
    s = summarize(build("spectrum-x", gpus=128))
    assert s["nodes_per_tier"] == {"gpu": 128, "nvswitch": 16, "asw": 8, "psw": 64}
    assert s["cables_per_kind"] == {"nvlink": 128, "network": 640}
    assert s["max_hops"] == 4
    # ASW: 16 GPUs x 400G down, 64 PSWs x 400G up
    assert s["oversubscription"]["asw"] == pytest.approx(0.25)


def test_dcn_oversubscribed_tor():
    s = summarize(build("dcn+", gpus=128))
    # 64 GPUs x 400G under each ASW, 8 PSWs x 400G above: 8:1, bisection 1/8 of full
    assert s["oversubscription"]["asw"] == pytest.approx(8.0)
    assert s["bisection_Bps"] == pytest.approx(s["full_bisection_Bps"] / 8)


def test_validate_finds_problems():
    t = build("spectrum-x", gpus=16)
    assert validate(t) == []
    assert validate(t, radix={"asw": 60})[0].startswith("switch ")
    dup = dataclasses.replace(t, links=t.links + (dataclasses.replace(t.links[0], id=len(t.links)),
                                                  dataclasses.replace(t.links[1], id=len(t.links) + 1)))
    assert any("duplicate" in p for p in validate(dup))
    cut = dataclasses.replace(t, links=t.links[:2 * 16])  # only GPU-side cables
    problems = validate(cut)
    assert any("not connected" in p for p in problems)
    with pytest.raises(TopoError):
        check(cut)


def test_fat_tree_structure():
    t = build("fat-tree", k=8)
    s = summarize(t)
    assert s["nodes_per_tier"]["asw"] == 32 and s["nodes_per_tier"]["psw"] == 32
    assert s["nodes_per_tier"]["csw"] == 16 and t.num_gpus == 128
    assert s["max_ports_per_tier"] == {"asw": 8, "psw": 8, "csw": 8}
    assert s["bisection_Bps"] == pytest.approx(s["full_bisection_Bps"])


def test_networkx_export():
    from topo.graph import to_networkx

    t = build("spectrum-x", gpus=16)
    g = to_networkx(t)
    assert g.number_of_nodes() == len(t.nodes) and g.number_of_edges() == len(t.links)
    assert g.nodes[16]["kind"] == "nvswitch" and g.edges[0, 16]["kind"] == "nvlink"
    assert g.edges[0, 16]["bandwidth_Bps"] == 360e9


def test_draw_png(tmp_path):
    pytest.importorskip("matplotlib")
    from topo.draw import draw_topology

    for tpl, kw in (("spectrum-x", dict(gpus=32)), ("multi-pod", dict(gpus=4096))):
        out = tmp_path / f"{tpl}.png"
        draw_topology(build(tpl, **kw), out)
        assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_undersubscribed_tier_printed_as_1_to_n(shared_dir):
    # AlibabaHPN ASW: 16 x 200G down, 120 x 400G up -> 3.2T : 48T = 1:15 (was printed "0.0666667:1")
    from topo.analysis import format_summary, summarize
    from topo.simai_file import read_simai_topology
    t = read_simai_topology(shared_dir / "data" / "simai_topologies" /
                            "AlibabaHPN_128g_8gps_DualToR_SinglePlane_200Gbps_H100")
    assert "oversub      asw 1:15 " in format_summary(summarize(t))
