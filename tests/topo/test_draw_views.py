"""topo.draw views: NVL racks drawn as racks, large fabrics aggregated by tier, small ones in full.

Expected counts come from the template parameters (SimAI defaults: 64 NICs per ToR, 400 Gb/s NICs,
2880 Gb/s NVLink per GPU; NVL72: 18 trays x 4 GB200, 18 NVSwitch chips, 7200 Gb/s NVLink per GPU).
"""

import math

import pytest

from topo.draw import draw_topology, drawing_view, topology_figure
from topo.templates import build


def _texts(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.texts] + [ax.get_title(loc="left") for ax in fig.axes]


def _artists(fig) -> tuple[int, int]:
    """(artists on the axes, drawn shapes including each path of a collection)."""
    n = shapes = 0
    for ax in fig.axes:
        n += len(ax.patches) + len(ax.lines) + len(ax.texts) + len(ax.collections)
        shapes += len(ax.patches) + len(ax.lines) + sum(len(c.get_paths()) for c in ax.collections)
    return n, shapes


@pytest.fixture
def figure():
    import matplotlib.pyplot as plt
    figs = []

    def make(t):
        fig = topology_figure(t)
        figs.append(fig)
        return fig
    yield make
    for f in figs:
        plt.close(f)


def test_16k_fabric_is_aggregated_by_tier_with_counts(figure):
    gpus, gps, nics_per_tor = 16384, 8, 64
    t = build("multi-pod", gpus=gpus)
    assert drawing_view(t) == "aggregated"
    fig = figure(t)
    texts = _texts(fig)
    tors = gpus // nics_per_tor
    assert f"{tors} x ToR (asw)" in texts
    assert f"{gpus:,} x GPU (H100) in {gpus // gps:,} servers x {gps}" in texts
    assert f"{gpus // gps:,} x NVSwitch" in texts                      # one NVSwitch node per server (SimAI)
    assert f"{gpus:,} cables, {gpus * 400e9 / 1e12:,.1f} Tb/s" in texts          # GPU -> ToR
    assert f"{gpus:,} cables, {gpus * 2880e9 / 1e12:,.1f} Tb/s" in texts         # GPU -> NVSwitch
    for tier, name in (("psw", "spine (psw)"), ("csw", "core (csw)")):
        assert f"{len(t.nodes_of_tier(tier)):,} x {name}" in texts
    n, shapes = _artists(fig)
    assert n <= 40 and shapes <= 40


def _nvl72(racks: int):
    if racks <= 8:
        return build("nvl72", gpus=72 * racks)
    return build("multi-pod", gpus=72 * racks, gpus_per_server=4, nvswitch_chips=18, nvlink_domain_size=72,
                 nvlink_bandwidth_Bps="7200Gbps", gpu_type="GB200")


def test_nvl72_racks_drawn_as_racks_with_counts(figure):
    racks, trays, gps, chips, nvlink_bps, nic_bps = 8, 18, 4, 18, 7200e9, 400e9
    t = _nvl72(racks)
    assert drawing_view(t) == "racks"
    fig = figure(t)
    texts = _texts(fig)
    gpus = trays * gps
    per_rack = next(s for s in texts if s.startswith(f"{racks} x NVL72 rack"))
    lines = per_rack.split("\n")
    assert lines[0] == (f"{racks} x NVL72 rack: {gpus} GPUs (GB200) = {trays} compute trays x {gps} GPUs; "
                        f"{chips} NVSwitch chips in {chips // 2} switch trays")
    # every GPU has one cable to every chip; its NVLink bandwidth is split over them
    assert lines[1] == f"NVLink per rack: {gpus * chips:,} cables, {gpus * nvlink_bps / 1e12:,.1f} Tb/s (GPU-NVSwitch)"
    assert lines[2] == f"network per rack: {gpus} cables, {gpus * nic_bps / 1e12:,.1f} Tb/s (to the ToR (asw) tier)"
    tors = gps * math.ceil(racks * trays / 64)        # rail-optimized: per rail, 64 NICs per ToR
    assert f"{tors} x ToR (asw)" in texts
    assert f"{racks} racks ({racks * gpus:,} GPUs)" in texts
    assert f"{racks * gpus:,} cables, {racks * gpus * nic_bps / 1e12:,.1f} Tb/s" in texts
    # 4 racks drawn (0, 1, 2 and the last), the others summarised
    assert [s for s in texts if s.startswith("rack ")] == [
        "rack 0: GPUs 0-71", "rack 1: GPUs 72-143", "rack 2: GPUs 144-215", "rack 7: GPUs 504-575"]
    assert "...\n4 more\nracks" in texts
    gpu_squares = [c for ax in fig.axes for c in ax.collections if len(c.get_paths()) == 4 * gpus]
    assert len(gpu_squares) == 1                  # one collection: the 72 GPUs of each of the 4 racks


def test_rack_drawing_is_bounded_by_racks_drawn_not_size(figure):
    small, large = figure(_nvl72(8)), figure(_nvl72(64))        # 576 and 4,608 GPUs (16,128: benchmarks)
    assert _artists(large)[1] <= 800
    # the large fabric draws the same racks; only its network tiers add boxes and bundles
    n_small, n_large = _artists(small)[0], _artists(large)[0]
    assert n_large <= n_small + 6
    texts = _texts(large)
    assert "...\n60 more\nracks" in texts and "rack 63: GPUs 4536-4607" in texts


def test_single_rack_and_small_fabrics(figure, tmp_path):
    t = _nvl72(1)
    texts = _texts(figure(t))
    assert "1 rack (72 GPUs)" in texts and not [s for s in texts if "more" in s]
    small = build("spectrum-x", gpus=128)
    assert drawing_view(small) == "detailed"                    # every node drawn, as before
    n, _ = _artists(figure(small))
    assert n > 10
    out = tmp_path / "r.png"
    draw_topology(t, str(out))
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert not [p for p in tmp_path.iterdir() if p.name != "r.png"]    # no temporary file left
