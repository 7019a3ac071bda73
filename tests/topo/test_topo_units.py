"""ns-3 rate/time strings."""

from __future__ import annotations

import pytest

from topo import build
from topo.analysis import summarize
from topo.errors import TopoError
from topo.units import format_rate, format_time, parse_rate, parse_time


@pytest.mark.parametrize("text,value", [("400Gbps", 50e9), ("2880Gbps", 360e9), ("100Mbps", 12.5e6),
                                        ("25GBps", 25e9), ("1.6Tbps", 200e9), ("800Gb/s", 100e9)])
def test_parse_rate(text, value):
    assert parse_rate(text) == pytest.approx(value, rel=1e-15)


@pytest.mark.parametrize("text,value", [("0.0005ms", 500e-9), ("0.000025ms", 25e-9), ("500ns", 500e-9),
                                        ("1us", 1e-6), ("2e-6s", 2e-6), ("0.001", 1e-3)])
def test_parse_time(text, value):
    assert parse_time(text) == pytest.approx(value, rel=1e-15)


def test_format_is_simai_form():
    assert format_rate(50e9) == "400Gbps" and format_rate(360e9) == "2880Gbps"
    assert format_time(500e-9) == "0.0005ms" and format_time(25e-9) == "0.000025ms"


@pytest.mark.parametrize("bad", ["400Gbs", "400", "Gbps", "fast", "-1Gbps"])
def test_bad_rates(bad):
    with pytest.raises(TopoError, match="bad rate"):
        parse_rate(bad, "-bw")


def test_tor_oversubscription_sets_spines():
    s = summarize(build("spectrum-x", gpus=4096, oversubscription=2))
    # 64 GPUs x 400G under each ASW, 32 PSWs x 400G above
    assert s["nodes_per_tier"]["psw"] == 32
    assert s["oversubscription"] == {"asw": pytest.approx(2.0)}
    assert s["bisection_Bps"] == pytest.approx(s["full_bisection_Bps"] / 2)
    with pytest.raises(TopoError, match="only the multi-pod"):
        build("spectrum-x", core_oversubscription=2)
