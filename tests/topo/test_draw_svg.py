"""topo.draw_svg: the native SVG of a topology layout (report.html) says what topo.draw's matplotlib
picture says (the same layout, topo.draw_layout), is well-formed and escaped, bounded, deterministic,
and needs no matplotlib.

Expected counts from the template parameters (SimAI defaults: 64 NICs per ToR; NVL72: 18 trays x 4 GB200,
18 NVSwitch chips in 9 switch trays)."""

from __future__ import annotations

import re
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from topo.draw_layout import TAB10, drawing_view
from topo.draw_svg import render_svg, topology_svg
from topo.templates import build

SVG = "{http://www.w3.org/2000/svg}"


def _texts(svg: str) -> list[str]:
    root = ET.fromstring(svg.encode("utf-8"))
    assert root.tag == f"{SVG}svg"
    out = []
    for t in root.iter(f"{SVG}text"):
        spans = t.findall(f"{SVG}tspan")
        out.append("\n".join(s.text or "" for s in spans) if spans else (t.text or ""))
    return out


@pytest.fixture(scope="module")
def fabrics():
    return {"detailed": build("spectrum-x", gpus=16), "aggregated": build("spectrum-x", gpus=1024),
            "racks": build("nvl72", gpus=576)}


@pytest.mark.parametrize("view", ["detailed", "aggregated", "racks"])
def test_native_svg_has_the_matplotlib_pictures_labels(fabrics, view):
    import matplotlib.pyplot as plt

    from topo.draw import topology_figure
    t = fabrics[view]
    assert drawing_view(t) == view
    svg = topology_svg(t)
    assert svg.startswith("<?xml version='1.0' encoding='UTF-8'?>\n<svg xmlns='http://www.w3.org/2000/svg' ")
    native = _texts(svg)
    fig = topology_figure(t)
    try:
        mpl = [x.get_text() for ax in fig.axes for x in ax.texts] + [ax.get_title(loc="left") for ax in fig.axes]
        legend = [x.get_text() for ax in fig.axes if ax.get_legend() for x in ax.get_legend().get_texts()]
    finally:
        plt.close(fig)
    assert sorted(native) == sorted(mpl + legend)
    assert svg == topology_svg(t)                 # deterministic: same topology, same bytes


def test_aggregated_boxes_and_bundles(fabrics):
    t = fabrics["aggregated"]
    gpus, nics_per_tor = 1024, 64
    svg = topology_svg(t)
    texts = _texts(svg)
    assert f"{gpus // nics_per_tor} x ToR (asw)" in texts
    assert f"{gpus:,} cables, {gpus * 400e9 / 1e12:,.1f} Tb/s" in texts          # GPU -> ToR, one direction
    tiers = len({n.tier for n in t.nodes})
    assert svg.count("<rect ") == 1 + tiers       # the background and one box per tier


def test_racks_draw_four_racks_of_gpus(fabrics):
    svg = topology_svg(fabrics["racks"])
    gpus_per_rack, racks_drawn = 72, 4
    gpu_path = next(p for p in re.findall(r"<path d='([^']*)' fill='#4c72b0'", svg))
    assert gpu_path.count("M") == gpus_per_rack * racks_drawn
    chip_path = next(p for p in re.findall(r"<path d='([^']*)' fill='#2f6b2f'", svg))
    assert chip_path.count("M") == 18 * racks_drawn
    assert "rack 7: GPUs 504-575" in _texts(svg)


def test_detailed_colours_gpus_by_rail(fabrics):
    svg = topology_svg(fabrics["detailed"])
    # 8 rails: GPU squares in the first 8 colours of the tab10 map, 2 servers -> 2 squares per colour
    for colour in TAB10[:8]:
        squares = [d for d in re.findall(rf"<path d='([^']*)' fill='{colour}'", svg) if "h" in d]
        assert sum(d.count("M") for d in squares) >= 2, colour


def test_text_is_escaped():
    t = build("spectrum-x", gpus=16, name="<script>alert('x')</script> & co")
    svg = topology_svg(t)
    assert "<script>" not in svg and "&lt;script&gt;alert(&#x27;x&#x27;)&lt;/script&gt; &amp; co" in svg
    assert any(s.startswith("<script>alert('x')</script> & co: 16 x H100") for s in _texts(svg))


def test_multiline_and_rotated_labels_render():
    from topo.draw_layout import Drawing, Text
    d = Drawing("test", 4, 3, (0, 1), (0, 1), "t", [Text(0.5, 0.5, "a\nb\nc", ha="center", va="center"),
                                                  Text(0.2, 0.5, "up", va="center", rotation=90)])
    svg = render_svg(d)
    assert "a\nb\nc" in _texts(svg)
    # the turned label: anchored at its middle, rotated counter-clockwise about its point
    assert re.search(r"<text [^>]*text-anchor='middle' transform='rotate\(-90 [\d.]+ [\d.]+\)'>up</text>", svg)


def test_native_svg_needs_no_matplotlib():
    code = ("import sys; from topo.templates import build; from topo.draw_svg import topology_svg; "
            "[topology_svg(build(n, gpus=g)) for n, g in (('spectrum-x', 16), ('spectrum-x', 1024), ('nvl72', 144))]; "
            "print(sorted(m for m in ('matplotlib', 'pandas', 'networkx') if m in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert r.stdout.strip() == "[]"
