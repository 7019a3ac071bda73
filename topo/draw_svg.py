"""A topo.draw_layout Drawing as a small native SVG document (no matplotlib; used by report.html).

Same layout as topo.draw's matplotlib pictures; the rendering is simpler: 72 pixels per inch (a point is
a pixel), the axes fill the figure inside fixed margins, the title and legend in a band on top. Items of
one style are merged into one <path> (segments by colour and width, markers and rectangle sets by
colour), so the size grows with the number of drawn shapes, not with SVG elements per shape. Every text
is XML-escaped; the output is deterministic (same drawing, same bytes).
"""

from __future__ import annotations

import math

from topo import draw_layout as L

PX_PER_IN = 72.0
_MARGIN = 10.0
_TITLE_BAND = 24.0
_LEGEND_BAND = 16.0
_LINE_SPACING = 1.2     # multi-line text: line height / font size


def _esc(s: str) -> str:
    """Text and attribute values escaped for XML (&, <, >, both quotes), as html.escape(s, quote=True)
    (not imported: the html package loads its entity table, ~3 ms of a run's start-up)."""
    return (s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
            .replace('"', "&quot;").replace("'", "&#x27;"))


def _colour(c) -> tuple[str, float]:
    """(SVG colour, opacity) of a layout colour (CSS name, '#rrggbb' or RGBA floats)."""
    if isinstance(c, str):
        return c, 1.0
    r, g, b = (max(0, min(255, round(255 * v))) for v in c[:3])
    return f"#{r:02x}{g:02x}{b:02x}", float(c[3]) if len(c) > 3 else 1.0


def _paint(attr: str, c) -> str:
    """fill='..' / stroke='..' with its opacity attribute when not opaque."""
    col, alpha = _colour(c)
    out = f"{attr}='{col}'"
    if alpha < 1.0 and col != "none":
        out += f" {attr}-opacity='{alpha:.3g}'"
    return out


def _n(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".") if math.isfinite(v) else "0"


class _Frame:
    """Data coordinates -> pixels of the axes box."""

    def __init__(self, d: L.Drawing, width: float, height: float, top: float):
        self.x0, self.x1 = d.xlim
        self.y0, self.y1 = d.ylim
        self.left, self.right = _MARGIN, width - _MARGIN
        self.top, self.bottom = top, height - _MARGIN
        self.sx = (self.right - self.left) / ((self.x1 - self.x0) or 1.0)
        self.sy = (self.bottom - self.top) / ((self.y1 - self.y0) or 1.0)

    def x(self, v: float) -> float:
        return self.left + (v - self.x0) * self.sx

    def y(self, v: float) -> float:
        return self.bottom - (v - self.y0) * self.sy


_ANCHOR = {"left": "start", "center": "middle", "right": "end"}


def _text(x: float, y: float, s: str, size: float, ha: str = "left", va: str = "baseline",
          rotation: float = 0.0) -> str:
    """A <text> (one <tspan> per line) placed as matplotlib places it: ha/va name the edge of the text's
    box at (x, y); for a text turned by 90 degrees, the turned box."""
    lines = s.split("\n")
    lh = size * _LINE_SPACING
    if rotation == 90 and len(lines) == 1:
        # turned counter-clockwise about (x, y): the text runs upwards, its glyphs' height lies along x
        anchor = {"center": "middle", "bottom": "start", "top": "end"}.get(va, "start")
        base = {"left": 0.8 * size, "center": 0.35 * size, "right": -0.2 * size}.get(ha, 0.8 * size)
        return (f"<text x='{_n(x)}' y='{_n(y + base)}' font-size='{size:g}' text-anchor='{anchor}' "
                f"transform='rotate(-90 {_n(x)} {_n(y)})'>{_esc(s)}</text>")
    # the block's first baseline: va names which edge of the whole block sits at y
    first = {"center": y - (len(lines) - 1) * lh / 2 + 0.35 * size, "top": y + 0.8 * size,
             "bottom": y - (len(lines) - 1) * lh - 0.2 * size}.get(va, y)
    rot = f" transform='rotate({-rotation:g} {_n(x)} {_n(y)})'" if rotation else ""
    head = f"<text x='{_n(x)}' font-size='{size:g}' text-anchor='{_ANCHOR.get(ha, 'start')}'{rot}"
    if len(lines) == 1:
        return f"{head} y='{_n(first)}'>{_esc(s)}</text>"
    spans = "".join(f"<tspan x='{_n(x)}' y='{_n(first + i * lh)}'>{_esc(line)}</tspan>"
                    for i, line in enumerate(lines))
    return f"{head}>{spans}</text>"


def _markers(it: L.Markers, f: _Frame) -> list[str]:
    half = math.sqrt(max(it.area_pt2, 0.0)) / 2
    by_colour: dict = {}
    for x, y, c in zip(it.xs, it.ys, it.colours):
        px, py = f.x(x), f.y(y)
        if it.shape == "s":
            d = f"M{px - half:.1f},{py - half:.1f}h{2 * half:.1f}v{2 * half:.1f}h{-2 * half:.1f}z"
        elif it.shape == "D":
            r = half * 1.2
            d = f"M{px:.1f},{py - r:.1f}l{r:.1f},{r:.1f}l{-r:.1f},{r:.1f}l{-r:.1f},{-r:.1f}z"
        else:
            d = (f"M{px - half:.1f},{py:.1f}a{half:.1f},{half:.1f} 0 1,0 {2 * half:.1f},0"
                 f"a{half:.1f},{half:.1f} 0 1,0 {-2 * half:.1f},0z")
        by_colour.setdefault(c if isinstance(c, str) else tuple(c), []).append(d)
    stroke = f" {_paint('stroke', it.edge)} stroke-width='{it.edge_width:g}'" if it.edge_width > 0 else ""
    return [f"<path d='{''.join(ds)}' {_paint('fill', c)}{stroke}/>" for c, ds in by_colour.items()]


def _item(it, f: _Frame) -> list[str]:
    if isinstance(it, L.Segments):
        groups: dict = {}
        for ((xa, ya), (xb, yb)), c, w in zip(it.segs, it.colours, it.widths):
            key = (c if isinstance(c, str) else tuple(c), w)
            groups.setdefault(key, []).append(f"M{f.x(xa):.1f},{f.y(ya):.1f}L{f.x(xb):.1f},{f.y(yb):.1f}")
        return [f"<path d='{''.join(ds)}' fill='none' {_paint('stroke', c)} stroke-width='{w:g}'/>"
                for (c, w), ds in groups.items()]
    if isinstance(it, L.Markers):
        return _markers(it, f)
    if isinstance(it, L.Polyline):
        pts = " ".join(f"{f.x(x):.1f},{f.y(y):.1f}" for x, y in zip(it.xs, it.ys))
        return [f"<polyline points='{pts}' fill='none' {_paint('stroke', it.colour)} stroke-width='{it.width:g}'/>"]
    if isinstance(it, L.Rect):
        edge = f" {_paint('stroke', it.edge)} stroke-width='{it.width:g}'" if it.edge != "none" else ""
        return [f"<rect x='{f.x(it.x):.1f}' y='{f.y(it.y + it.h):.1f}' width='{it.w * f.sx:.1f}' "
                f"height='{it.h * f.sy:.1f}' {_paint('fill', it.face)}{edge}/>"]
    if isinstance(it, L.Rects):
        if not it.rects:
            return []
        d = "".join(f"M{f.x(x):.1f},{f.y(y + h):.1f}h{w * f.sx:.1f}v{h * f.sy:.1f}h{-w * f.sx:.1f}z"
                    for x, y, w, h in it.rects)
        edge = f" {_paint('stroke', it.edge)} stroke-width='{it.width:g}'" if it.edge != "none" else ""
        return [f"<path d='{d}' {_paint('fill', it.face)}{edge}/>"]
    if isinstance(it, L.Text):
        return [_text(f.x(it.x), f.y(it.y), it.text, it.size, it.ha, it.va, it.rotation)]
    raise TypeError(f"draw_svg: unknown layout item {type(it).__name__}")


def _legend(leg: L.Legend, right: float, y: float) -> list[str]:
    """Entries right-aligned in one row (at most leg.columns per row, further rows below)."""
    out = []
    per = max(1, leg.columns)
    for row0 in range(0, len(leg.entries), per):
        entries = leg.entries[row0:row0 + per]
        widths = [22 + 0.6 * leg.size * len(label) + 10 for label, _ in entries]
        x = right - sum(widths)
        for (label, colour), w in zip(entries, widths):
            out.append(f"<line x1='{_n(x)}' y1='{_n(y - 3)}' x2='{_n(x + 16)}' y2='{_n(y - 3)}' "
                       f"{_paint('stroke', colour)} stroke-width='2'/>")
            out.append(_text(x + 20, y, label, leg.size))
            x += w
        y += leg.size * _LINE_SPACING + 2
    return out


def render_svg(d: L.Drawing) -> str:
    """The SVG document (with its XML declaration) of a layout Drawing."""
    width, height = d.width_in * PX_PER_IN, d.height_in * PX_PER_IN
    top = _MARGIN + _TITLE_BAND
    legend_rows = 0
    if d.legend is not None and d.legend.entries:
        legend_rows = -(-len(d.legend.entries) // max(1, d.legend.columns))
        top += _LEGEND_BAND * legend_rows
    f = _Frame(d, width, height, top)
    parts = [f"<rect width='{_n(width)}' height='{_n(height)}' fill='white'/>",
             _text(_MARGIN, _MARGIN + 14, d.title, d.title_size)]
    if legend_rows:
        parts += _legend(d.legend, width - _MARGIN, _MARGIN + _TITLE_BAND + 8)
    for it in d.ordered():
        parts += _item(it, f)
    return ("<?xml version='1.0' encoding='UTF-8'?>\n"
            f"<svg xmlns='http://www.w3.org/2000/svg' width='{_n(width)}' height='{_n(height)}' "
            f"viewBox='0 0 {_n(width)} {_n(height)}' font-family='DejaVu Sans, Arial, sans-serif' role='img' "
            f"aria-label='{_esc(d.title)}'>\n" + "\n".join(parts) + "\n</svg>\n")


def topology_svg(t, detail_limit: int = 256, tiers=None) -> str:
    """The SVG of topology `t` in its drawing view (topo.draw_layout.layout; tiers: its tier_bundles(t)
    when already made)."""
    return render_svg(L.layout(t, detail_limit, tiers))
