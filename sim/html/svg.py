"""Small inline-SVG charts for the HTML reports: stacked horizontal bars, Gantt timeline, step lines
(CDFs) and scatter with a Pareto front. Pure Python (no numpy, no matplotlib); every text escaped.

Coordinates are pixels of the SVG's viewBox (the page scales it to its width). Element counts are
bounded by the callers' inputs; `gantt` merges spans closer than a pixel and caps its bars, saying so.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence

from sim.html.page import esc

PALETTE = ("#4c72b0", "#dd8452", "#55a868", "#c44e52", "#8172b3", "#937860", "#da8bc3", "#8c8c8c",
           "#ccb974", "#64b5cd")


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """About n round tick values covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo] if math.isfinite(lo) else [0.0]
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    first = math.ceil(lo / step - 1e-9) * step
    out, v = [], first
    while v <= hi + step * 1e-9:
        out.append(round(v, 12))
        v += step
    return out


def _num(v: float) -> str:
    return f"{v:.1f}".rstrip("0").rstrip(".") if abs(v) < 1e7 else f"{v:.0f}"


def tick_label(v: float) -> str:
    return f"{v:.6g}"


class Canvas:
    """An SVG document under construction; `count` = elements drawn so far."""

    def __init__(self, width: int, height: int, label: str):
        self.width, self.height, self.label = width, height, label
        self.parts: list[str] = []
        self.count = 0

    def rect(self, x, y, w, h, fill, tip: str = "", extra: str = "") -> None:
        t = f"<title>{esc(tip)}</title>" if tip else ""
        self.parts.append(f"<rect x='{_num(x)}' y='{_num(y)}' width='{max(w, 0.4):.2f}' height='{_num(h)}' "
                          f"fill='{esc(fill)}'{extra}>{t}</rect>" if t else
                          f"<rect x='{_num(x)}' y='{_num(y)}' width='{max(w, 0.4):.2f}' height='{_num(h)}' "
                          f"fill='{esc(fill)}'{extra}/>")
        self.count += 2 if t else 1

    def line(self, x1, y1, x2, y2, stroke="#999", width=1.0, dash: str = "") -> None:
        d = f" stroke-dasharray='{dash}'" if dash else ""
        self.parts.append(f"<line x1='{_num(x1)}' y1='{_num(y1)}' x2='{_num(x2)}' y2='{_num(y2)}' "
                          f"stroke='{esc(stroke)}' stroke-width='{width}'{d}/>")
        self.count += 1

    def text(self, x, y, s, size=11, anchor="start", fill="#333", rotate: float = 0.0, weight: str = "") -> None:
        rot = f" transform='rotate({rotate:g} {_num(x)} {_num(y)})'" if rotate else ""
        w = f" font-weight='{weight}'" if weight else ""
        self.parts.append(f"<text x='{_num(x)}' y='{_num(y)}' font-size='{size}' text-anchor='{anchor}' "
                          f"fill='{esc(fill)}'{rot}{w}>{esc(s)}</text>")
        self.count += 1

    def polyline(self, pts: Sequence[tuple[float, float]], stroke: str, width=1.5, tip: str = "") -> None:
        d = " ".join(f"{x:.2f},{y:.2f}" for x, y in pts)
        t = f"<title>{esc(tip)}</title>" if tip else ""
        self.parts.append(f"<polyline points='{d}' fill='none' stroke='{esc(stroke)}' stroke-width='{width}'>"
                          f"{t}</polyline>")
        self.count += 2 if t else 1

    def circle(self, x, y, r, fill, tip: str = "", stroke: str = "") -> None:
        t = f"<title>{esc(tip)}</title>" if tip else ""
        s = f" stroke='{esc(stroke)}'" if stroke else ""
        self.parts.append(f"<circle cx='{x:.2f}' cy='{y:.2f}' r='{r}' fill='{esc(fill)}'{s}>{t}</circle>")
        self.count += 2 if t else 1

    def render(self) -> str:
        return (f"<svg xmlns='http://www.w3.org/2000/svg' viewBox='0 0 {self.width} {self.height}' "
                f"width='{self.width}' height='{self.height}' role='img' aria-label='{esc(self.label)}'>"
                + "".join(self.parts) + "</svg>")


class _Axis:
    """Linear or log mapping of data values to pixels."""

    def __init__(self, lo: float, hi: float, p0: float, p1: float, log: bool = False):
        self.log = log and lo > 0
        if self.log:
            lo, hi = math.log10(lo), math.log10(hi)
        if not hi > lo:
            hi = lo + (abs(lo) or 1.0)
        self.lo, self.hi, self.p0, self.p1 = lo, hi, p0, p1

    def __call__(self, v: float) -> float:
        if self.log:
            v = math.log10(max(v, 10 ** self.lo))
        return self.p0 + (v - self.lo) / (self.hi - self.lo) * (self.p1 - self.p0)

    def ticks(self) -> list[float]:
        if self.log:
            return [10.0 ** e for e in range(math.ceil(self.lo - 1e-9), math.floor(self.hi + 1e-9) + 1)]
        return [t for t in nice_ticks(self.lo, self.hi) if self.lo - 1e-12 <= t <= self.hi + 1e-12]


def _x_axis(c: Canvas, ax: _Axis, y: float, top: float, label: str) -> None:
    for t in ax.ticks():
        x = ax(t)
        c.line(x, top, x, y, stroke="#e3e7ee")
        c.text(x, y + 14, tick_label(t), size=10, anchor="middle")
    c.line(ax.p0, y, ax.p1, y, stroke="#666")
    c.text((ax.p0 + ax.p1) / 2, y + 30, label, size=11, anchor="middle")


def _y_axis(c: Canvas, ay: _Axis, x: float, right: float, label: str) -> None:
    for t in ay.ticks():
        y = ay(t)
        c.line(x, y, right, y, stroke="#e3e7ee")
        c.text(x - 5, y + 3.5, tick_label(t), size=10, anchor="end")
    c.line(x, ay.p0, x, ay.p1, stroke="#666")
    c.text(14, (ay.p0 + ay.p1) / 2, label, size=11, anchor="middle", rotate=-90)


def stacked_hbars(rows: Sequence[tuple[str, Sequence[float]]], keys: Sequence[str], colors: Sequence[str],
                  xlabel: str, label: str, width: int = 980, end_text: Sequence[str] | None = None) -> str:
    """One horizontal bar per row, stacked segments in `keys` order (values >= 0, same unit)."""
    lab_w = min(300, max(90, 7 * max((len(r[0]) for r in rows), default=8)))
    bar_h, gap, top = 22, 8, 8
    height = top + len(rows) * (bar_h + gap) + 44
    c = Canvas(width, height, label)
    total_max = max((sum(max(v, 0.0) for v in vals) for _, vals in rows), default=0.0)
    ax = _Axis(0.0, total_max * 1.08 if total_max > 0 else 1.0, lab_w, width - 20)
    y_axis = top + len(rows) * (bar_h + gap)
    _x_axis(c, ax, y_axis, top, xlabel)
    for i, (name, vals) in enumerate(rows):
        y = top + i * (bar_h + gap)
        c.text(lab_w - 6, y + bar_h / 2 + 4, name, size=11, anchor="end")
        left = 0.0
        for k, v, col in zip(keys, vals, colors):
            if v <= 0:
                continue
            c.rect(ax(left), y, ax(left + v) - ax(left), bar_h, col, tip=f"{name}: {k} {v:.6g}")
            left += v
        if end_text:
            c.text(ax(left) + 4, y + bar_h / 2 + 4, end_text[i], size=10)
    return c.render()


_GANTT_LABEL_W, _GANTT_LANE_H, _GANTT_TOP = 190, 16, 6


def gantt_pixel_s(t_end: float, width: int = 1180) -> float:
    """Seconds per pixel of a gantt chart of `width` pixels spanning [0, t_end]: spans of one lane and
    key closer than this are merged into one bar."""
    return (t_end if t_end > 0 else 1.0) / (width - _GANTT_LABEL_W - 20)


def gantt(lanes: Sequence[tuple[str, Sequence[tuple[float, float, str]]]], t_end: float, colors: dict,
          label: str, width: int = 1180, max_elements: int = 20000,
          groups: Sequence[int] | None = None) -> tuple[str, int, int, float]:
    """Timeline: one lane per (label, spans); a span is (start_s, duration_s, key); colour by key.

    Spans of one lane and key closer than one pixel are merged into one bar (with a tooltip counting
    them). If more than about max_elements elements would be drawn, bars are kept in time order up to
    the budget: returns (svg, bars drawn, bars after merging, time up to which every bar is drawn).
    groups: lane indexes that start a new group (a thin separator above them).
    """
    px_s = gantt_pixel_s(t_end, width)
    bars = []      # (start, end, lane, key, ops)
    for li, (_, spans) in enumerate(lanes):
        by_key: dict[str, list[tuple[float, float]]] = {}
        for start, dur, key in spans:
            iv = by_key.get(key)
            if iv is None:
                iv = by_key[key] = []
            iv.append((start, start + dur if dur > 0 else start))
        for key, iv in by_key.items():
            iv.sort()
            s0, e0 = iv[0]
            n = 1
            for s, e in iv[1:]:
                if s <= e0 + px_s:
                    if e > e0:
                        e0 = e
                    n += 1
                else:
                    bars.append((s0, e0, li, key, n))
                    s0, e0, n = s, e, 1
            bars.append((s0, e0, li, key, n))
    return gantt_bars([name for name, _ in lanes], bars, t_end, colors, label, width, max_elements, groups)


def gantt_bars(names: Sequence[str], bars: list, t_end: float, colors: dict, label: str, width: int = 1180,
               max_elements: int = 20000, groups: Sequence[int] | None = None) -> tuple[str, int, int, float]:
    """gantt of bars already merged: (start_s, end_s, lane index, key, spans merged) per bar, in drawing
    order; names: the lanes' labels. Returns as gantt."""
    lab_w, lane_h, top = _GANTT_LABEL_W, _GANTT_LANE_H, _GANTT_TOP
    plot_w = width - lab_w - 20
    T = t_end if t_end > 0 else 1.0
    total = len(bars)
    budget = max(0, (max_elements - 40 - 4 * len(names)) // 2)    # a bar is a rect + its title
    complete_until = T
    if total > budget:
        bars = sorted(bars)
        complete_until = bars[budget][0]
        bars = bars[:budget]
    height = top + len(names) * lane_h + 44
    c = Canvas(width, height, label)
    ax = _Axis(0.0, T, lab_w, lab_w + plot_w)
    y_axis = top + len(names) * lane_h
    _x_axis(c, ax, y_axis, top, "time (s)")
    for li, name in enumerate(names):
        y = top + li * lane_h
        c.text(lab_w - 6, y + lane_h - 4, name, size=10.5, anchor="end")
        if groups and li in groups and li > 0:
            c.line(8, y, lab_w + plot_w, y, stroke="#9aa5b5", width=0.8)
    c.parts.append(_gantt_rects(bars, names, colors, ax, top, lane_h))
    c.count += 2 * len(bars)
    if complete_until < T:
        x = ax(complete_until)
        c.line(x, top, x, y_axis, stroke="#c00", width=1.0, dash="4 3")
    return c.render(), len(bars), total, complete_until


def _nums(values: list[float]) -> list[str]:
    """_num of every value: one %-format for all (10^4 bar positions) when all are below 1e7 (_num's
    "%.1f" without a trailing ".0"; the texts end at "'", which no number holds), else _num each."""
    if not values or not max(map(abs, values)) < 1e7:     # (a NaN: "nan" either way)
        return list(map(_num, values))
    return ("%.1f'" * len(values) % tuple(values)).replace(".0'", "'").split("'")[:-1]


def _gantt_rects(bars: list, names: Sequence[str], colors: dict, ax: _Axis, top: float, lane_h: float) -> str:
    """The <rect> (with its <title>) of every bar of gantt_bars, as Canvas.rect writes them: the texts
    shared by a lane and colour key are made once, the numbers of all bars by one %-format each."""
    if not bars:
        return ""
    lane_y = [_num(top + li * lane_h + 2) for li in range(len(names))]
    lane_tip = [esc(name) for name in names]
    height_txt = _num(lane_h - 4)
    fixed: dict[tuple, tuple[str, str]] = {}    # (lane, key) -> text before the width, after it
    for _s, _e, li, key, _n in bars:
        if (li, key) not in fixed:
            fixed[(li, key)] = (f"' y='{lane_y[li]}' width='",
                                f"' height='{height_txt}' fill='{esc(colors.get(key, '#999999'))}'><title>"
                                f"{lane_tip[li]}: {esc(key)} ")
    starts, ends, lanes, keys, counts = zip(*bars)
    p0, lo, span, w_px = ax.p0, ax.lo, ax.hi - ax.lo, ax.p1 - ax.p0      # _Axis.__call__'s arithmetic
    x0 = [p0 + (s - lo) / span * w_px for s in starts]
    x1 = [p0 + (e - lo) / span * w_px for e in ends]
    texts = [fixed[k] for k in zip(lanes, keys)]
    flat: list = [None] * (7 * len(bars))
    flat[0::7] = _nums(x0)
    flat[1::7] = [t[0] for t in texts]
    flat[2::7] = [max(b - a, 0.4) for a, b in zip(x0, x1)]
    flat[3::7] = [t[1] for t in texts]
    flat[4::7] = starts
    flat[5::7] = ends
    flat[6::7] = [f" ({n} ops merged)" if n > 1 else "" for n in counts]
    return ("<rect x='%s%s%.2f%s%.6f-%.6f s%s</title></rect>" * len(bars)) % tuple(flat)


def step_lines(series: Sequence[tuple[str, str, Sequence[float], Sequence[float]]], xlabel: str, ylabel: str,
               label: str, width: int = 620, height: int = 330, log_x: bool = False,
               marks: Sequence[tuple[float, str]] = ()) -> str:
    """Step curves (e.g. empirical CDFs): series (name, colour, xs ascending, ys); marks: vertical lines
    (x, text) such as percentiles."""
    left, right, top, bottom = 64, 16, 10, 46
    xs_all = [x for _, _, xs, _ in series for x in xs if math.isfinite(x)]
    ys_all = [y for _, _, _, ys in series for y in ys if math.isfinite(y)]
    c = Canvas(width, height, label)
    if not xs_all:
        c.text(width / 2, height / 2, "no data", anchor="middle")
        return c.render()
    lo, hi = min(xs_all), max(xs_all)
    log_x = log_x and lo > 0
    ax = _Axis(lo, hi if hi > lo else lo + 1.0, left, width - right, log=log_x)
    ay = _Axis(0.0, max(1.0, max(ys_all)), height - bottom, top)
    _x_axis(c, ax, height - bottom, top, xlabel + ("  [log scale]" if log_x else ""))
    _y_axis(c, ay, left, width - right, ylabel)
    for x, text in marks:
        if math.isfinite(x):
            px = ax(x)
            c.line(px, top, px, height - bottom, stroke="#888", dash="3 3")
            c.text(px + 3, top + 10, text, size=10, fill="#555")
    for name, col, xs, ys in series:
        pts = []
        prev_y = None
        for x, y in zip(xs, ys):
            px = ax(x)
            if prev_y is not None:
                pts.append((px, prev_y))
            prev_y = ay(y)
            pts.append((px, prev_y))
        if pts:
            c.polyline(pts, col, tip=name)
    return c.render()


def scatter_pareto(points: Sequence[tuple[float, float, str]], front: Sequence[tuple[float, float, str]],
                   xlabel: str, ylabel: str, label: str, width: int = 760, height: int = 420,
                   highlight: tuple[float, float, str] | None = None, vline: tuple[float, str] | None = None,
                   extra: Sequence[tuple[float, float, str]] = (), extra_label: str = "") -> str:
    """All points (x, y, tooltip) as dots, the Pareto front as a red line with dots, an optional
    highlighted point (gold) and vertical line (e.g. a budget), optional extra points (black crosses)."""
    left, right, top, bottom = 70, 20, 12, 48
    c = Canvas(width, height, label)
    pts = [(x, y, t) for x, y, t in list(points) + list(extra) if math.isfinite(x) and math.isfinite(y)]
    if vline is not None and math.isfinite(vline[0]):
        pts.append((vline[0], pts[0][1] if pts else 0.0, ""))
    if not pts:
        c.text(width / 2, height / 2, "no points", anchor="middle")
        return c.render()
    xlo, xhi = min(p[0] for p in pts), max(p[0] for p in pts)
    ylo, yhi = min(p[1] for p in pts), max(p[1] for p in pts)
    pad_x, pad_y = (xhi - xlo) * 0.06 or abs(xhi) * 0.1 or 1.0, (yhi - ylo) * 0.08 or abs(yhi) * 0.1 or 1.0
    ax = _Axis(xlo - pad_x, xhi + pad_x, left, width - right)
    ay = _Axis(ylo - pad_y, yhi + pad_y, height - bottom, top)
    _x_axis(c, ax, height - bottom, top, xlabel)
    _y_axis(c, ay, left, width - right, ylabel)
    if vline is not None and math.isfinite(vline[0]):
        x = ax(vline[0])
        c.line(x, top, x, height - bottom, stroke="#777", dash="5 3")
        c.text(x - 4, top + 12, vline[1], size=10, anchor="end", fill="#555")
    for x, y, tip in points:
        if math.isfinite(x) and math.isfinite(y):
            c.circle(ax(x), ay(y), 3, "rgba(76,114,176,0.45)", tip=tip)
    fr = [(ax(x), ay(y), tip) for x, y, tip in front if math.isfinite(x) and math.isfinite(y)]
    if len(fr) > 1:
        c.polyline([(px, py) for px, py, _ in fr], "#c44e52", width=1.6)
    for px, py, tip in fr:
        c.circle(px, py, 4, "#c44e52", tip=f"Pareto: {tip}")
    for x, y, _tip in extra:
        if math.isfinite(x) and math.isfinite(y):
            px, py = ax(x), ay(y)
            c.line(px - 4, py - 4, px + 4, py + 4, stroke="#111", width=1.5)
            c.line(px - 4, py + 4, px + 4, py - 4, stroke="#111", width=1.5)
    if highlight is not None and math.isfinite(highlight[0]) and math.isfinite(highlight[1]):
        c.circle(ax(highlight[0]), ay(highlight[1]), 7, "#f2c12e", tip=highlight[2], stroke="#333")
    if extra_label and extra:
        c.text(width - right, height - bottom - 6, extra_label, size=10, anchor="end", fill="#333")
    return c.render()



def standalone(chart: str, title: str, entries: Sequence[tuple[str, str]] = (), note: str = "") -> str:
    """A chart of this module (an <svg> string) as an SVG file of its own: XML declaration, white
    background, a title line, a legend row of (label, colour) swatches and an optional note line above
    the chart (nested as an <svg> at its own size)."""
    head = re.match(r"<svg [^>]*?width='([\d.]+)' height='([\d.]+)'", chart)
    if head is None:
        raise ValueError("standalone: not a chart of sim.html.svg (no width/height)")
    w, h = float(head.group(1)), float(head.group(2))
    c = Canvas(int(w), 0, title)
    c.text(8, 18, title, size=13, weight="600")
    x, y = 8.0, 24.0
    for label, colour in entries:
        if x > 8 and x + 30 + 6.5 * len(label) > w:      # wrap the legend at the chart's width
            x, y = 8.0, y + 18
        c.rect(x, y + 4, 11, 11, colour)
        c.text(x + 15, y + 14, label, size=11)
        x += 30 + 6.5 * len(label)
    y += 22 if entries else 4
    if note:
        c.text(8, y + 10, note, size=10.5, fill="#555")
        y += 16
    c.height = int(math.ceil(y + h))
    c.parts.insert(0, f"<rect width='{c.width}' height='{c.height}' fill='white'/>")
    c.parts.append(re.sub(r"^<svg ", f"<svg x='0' y='{_num(y)}' ", chart, count=1))
    doc = c.render().replace(" role='img'", " font-family='DejaVu Sans, Arial, sans-serif' role='img'", 1)
    return "<?xml version='1.0' encoding='UTF-8'?>\n" + doc + "\n"
