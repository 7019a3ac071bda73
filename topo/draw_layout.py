"""Layout of a topology drawing as plain data: positions, boxes, lines and labels, no renderer.

topo.draw renders a Drawing with matplotlib (PNG/SVG files of `clustersim topo draw`); topo.draw_svg
writes it as a small native SVG (report.html, no matplotlib). Three views (drawing_view):
- "racks": rack-scale NVLink domains (NVL72 / NVL36: the domain spans several trays): each rack drawn
  as a rack (compute trays with their GPUs, NVSwitch trays with their chips, labelled with the NVLink
  cable count and bandwidth); up to 4 racks drawn, more shown as "x N racks"; the network above
  aggregated by tier.
- "detailed" (up to `detail_limit` GPUs): every node and cable; tiers as rows (core on top, GPUs at the
  bottom), GPUs grouped by server, GPU/NIC-to-ToR cables and GPUs coloured by rail.
- "aggregated" (larger fabrics): one box per tier ("256 x ToR (asw)") and one bundle per tier pair
  labelled with its cable count and total bandwidth (one direction).
The number of items is bounded in the rack and aggregated views (independent of the GPU count).

Coordinates are data units of the drawing's axes (xlim, ylim; y up); sizes of text in points, marker
areas in points^2 and line widths in points (matplotlib's conventions). Colours are CSS names, '#rrggbb'
or RGBA tuples of floats in [0, 1]. `zorder` orders the items as matplotlib's defaults do (patches and
collections 1, lines 2, texts 3); within one zorder, list order.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field

from topo.model import Topology, link_arrays_of, tier_rank

Colour = str | tuple[float, float, float, float]

_ROW_ORDER = ("gpu", "nvswitch", "pcie", "nic")
_TIER_NAMES = {"gpu": "GPU", "nvswitch": "NVSwitch", "nic": "NIC", "pcie": "PCIe switch",
               "asw": "ToR (asw)", "psw": "spine (psw)", "csw": "core (csw)"}
_HOST_TIERS = ("gpu", "nvswitch", "pcie", "nic")
MAX_RACKS_DRAWN = 4

# matplotlib's qualitative colour maps tab10 / tab20 (the published colour values), so that a layout
# needs no matplotlib: rail r takes colour r modulo the map's length
TAB10 = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22",
         "#17becf")
TAB20 = ("#1f77b4", "#aec7e8", "#ff7f0e", "#ffbb78", "#2ca02c", "#98df8a", "#d62728", "#ff9896", "#9467bd",
         "#c5b0d5", "#8c564b", "#c49c94", "#e377c2", "#f7b6d2", "#7f7f7f", "#c7c7c7", "#bcbd22", "#dbdb8d",
         "#17becf", "#9edae5")


def rgba(hex_colour: str, alpha: float = 1.0) -> tuple[float, float, float, float]:
    """'#rrggbb' -> (r, g, b, alpha) floats in [0, 1]."""
    h = hex_colour.lstrip("#")
    return (int(h[0:2], 16) / 255, int(h[2:4], 16) / 255, int(h[4:6], 16) / 255, alpha)


# ------------------------------------------------------------------------------------------- items
@dataclass
class Segments:
    """Straight segments ((x0, y0), (x1, y1)), one colour and width each (a line collection)."""
    segs: list
    colours: list
    widths: list
    zorder: float = 1


@dataclass
class Polyline:
    """A line through (xs[i], ys[i]); width in points."""
    xs: list
    ys: list
    colour: Colour
    width: float
    zorder: float = 2


@dataclass
class Markers:
    """Markers at (xs[i], ys[i]) with colours[i]; shape 's' square, 'D' diamond, 'o' circle; area pt^2."""
    xs: list
    ys: list
    colours: list
    area_pt2: float
    shape: str
    edge: Colour = "black"
    edge_width: float = 0.3
    zorder: float = 2


@dataclass
class Rect:
    """A rectangle with lower-left corner (x, y), width w and height h."""
    x: float
    y: float
    w: float
    h: float
    face: Colour
    edge: Colour
    width: float = 1.0
    zorder: float = 1


@dataclass
class Rects:
    """Many rectangles (x, y, w, h) of one style (a patch collection)."""
    rects: list
    face: Colour
    edge: Colour
    width: float = 1.0
    zorder: float = 1


@dataclass
class Text:
    """A label at (x, y); size in points."""
    x: float
    y: float
    text: str
    size: float = 10
    ha: str = "left"        # left | center | right
    va: str = "baseline"    # baseline | center | top | bottom
    rotation: float = 0.0   # degrees, counter-clockwise
    zorder: float = 3


@dataclass
class Legend:
    """Entries (label, colour) drawn as short lines, in `columns` columns at the top right."""
    entries: list
    columns: int = 1
    size: float = 7


@dataclass
class Drawing:
    """One view of a topology drawing: its items in data coordinates, size in inches."""
    view: str
    width_in: float
    height_in: float
    xlim: tuple
    ylim: tuple
    title: str
    items: list = field(default_factory=list)
    legend: Legend | None = None
    title_size: float = 10

    def ordered(self) -> list:
        """Items in drawing order (zorder, then insertion order)."""
        return sorted(self.items, key=lambda it: it.zorder)

    def texts(self) -> list[str]:
        return [it.text for it in self.items if isinstance(it, Text)] + [self.title]


# ------------------------------------------------------------------------------------------- helpers
def _rows(t: Topology) -> list[str]:
    tiers = {n.tier for n in t.nodes}
    low = [x for x in _ROW_ORDER if x in tiers]
    net = sorted(tiers - set(_ROW_ORDER), key=lambda x: (tier_rank(x), x))
    return low + net  # bottom to top


def tier_label(tier: str) -> str:
    return _TIER_NAMES.get(tier, tier)


def _rate_text(bytes_per_s: float) -> str:
    bps = bytes_per_s * 8
    return f"{bps / 1e12:,.1f} Tb/s" if bps >= 1e12 else f"{bps / 1e9:,.0f} Gb/s"


def _bundle_text(cables: int, bytes_per_s: float) -> str:
    return f"{cables:,} cables, {_rate_text(bytes_per_s)}"


def _rack_scale(t: Topology) -> bool:
    """NVLink domains spanning several trays (servers) through NVSwitch chips: NVL72 / NVL36 racks."""
    return (t.nvlink_domain_size > t.gpus_per_server and t.num_gpus >= t.nvlink_domain_size
            and any(n.tier == "nvswitch" for n in t.nodes))


def bundles(t: Topology, node_group: list[str]) -> tuple[Counter, Counter]:
    """Cables and total bandwidth (one direction, B/s) per unordered pair of groups (names sorted);
    node_group[i] is node i's group. Column-wise (numpy) over one direction of each cable; the bandwidth
    of a pair is summed in link order."""
    import numpy as np
    la = link_arrays_of(t)      # the link columns: no Link objects made (cable k = link 2k as written)

    def column(name: str, dtype):
        return getattr(la, name)[::2].astype(dtype, copy=False)

    names = sorted(set(node_group))
    index = {g: i for i, g in enumerate(names)}
    code = np.fromiter(map(index.__getitem__, node_group), dtype=np.int64, count=len(node_group))
    a, b = code[column("src", np.int64)], code[column("dst", np.int64)]
    pair = np.minimum(a, b) * len(names) + np.maximum(a, b)
    uniq, inv, counts = np.unique(pair, return_inverse=True, return_counts=True)
    sums = np.bincount(inv, weights=column("bandwidth_Bps", np.float64), minlength=len(uniq))
    keys = [(names[p // len(names)], names[p % len(names)]) for p in uniq.tolist()]
    return Counter(dict(zip(keys, counts.tolist()))), Counter(dict(zip(keys, sums.tolist())))


def tier_bundles(t: Topology) -> tuple[Counter, Counter]:
    """bundles() per pair of tiers."""
    return bundles(t, [n.tier for n in t.nodes])


def drawing_view(t: Topology, detail_limit: int = 256) -> str:
    """Which view a drawing of `t` uses: "racks", "detailed" or "aggregated"."""
    if _rack_scale(t):
        return "racks"
    if t.num_gpus <= detail_limit and len(t.nodes) <= 4 * detail_limit:
        return "detailed"
    return "aggregated"


def layout(t: Topology, detail_limit: int = 256, tiers: tuple[Counter, Counter] | None = None) -> Drawing:
    """The Drawing of `t` in its view (drawing_view); tiers: tier_bundles(t) when already made."""
    view = drawing_view(t, detail_limit)
    if view == "racks":
        return _racks(t)
    return _detailed(t) if view == "detailed" else _aggregated(t, tiers)


# ------------------------------------------------------------------------------------------- views
def _detailed(t: Topology) -> Drawing:
    rows = _rows(t)
    y_of = {tier: i for i, tier in enumerate(rows)}
    G, gps = t.num_gpus, t.gpus_per_server
    gap = 1.0
    x = {}
    for g in range(G):
        x[g] = g + (g // gps) * gap
    width = x[G - 1] + 1 if G else 1
    by_tier: dict[str, list[int]] = defaultdict(list)
    for n in t.nodes:
        by_tier[n.tier].append(n.id)
    neighbours: dict[int, list[int]] = defaultdict(list)
    for lk in t.links[::2]:
        neighbours[lk.src].append(lk.dst)
        neighbours[lk.dst].append(lk.src)
    # host-side nodes sit above their GPUs, network tiers spread evenly
    for tier in rows[1:]:
        ids = by_tier[tier]
        if tier in ("nvswitch", "pcie", "nic"):
            extent = {}
            for i in ids:
                gs = [v for v in neighbours[i] if v < G] or [v for v in neighbours[i] if v in x]
                x[i] = sum(x[v] for v in gs) / len(gs) if gs else 0.0
                extent[i] = (max(x[v] for v in gs) - min(x[v] for v in gs)) if gs else 0.0
            # spread chips that share the same GPUs
            groups: dict[float, list[int]] = defaultdict(list)
            for i in ids:
                groups[round(x[i], 3)].append(i)
            for center, members in groups.items():
                if len(members) > 1:
                    span = max(min(gps, len(members)) * 0.9, 0.7 * extent[members[0]])
                    for k, i in enumerate(members):
                        x[i] = center - span / 2 + span * (k + 0.5) / len(members)
        else:
            n = len(ids)
            for k, i in enumerate(ids):
                x[i] = (k + 0.5) * width / n - 0.5
    rails = [t.rail_of(g) for g in range(G)] if any(t.nodes[i].tier not in ("gpu", "nvswitch") for i in x) else \
        [g % gps for g in range(G)]
    nic_rails = {i: t.nic_rail(i) for i in by_tier.get("nic", [])}
    n_rails = max(rails + list(nic_rails.values())) + 1 if rails else 1
    cmap = [rgba(h) for h in (TAB10 if n_rails <= 10 else TAB20)]
    colour_of = {}
    for g in range(G):
        colour_of[g] = cmap[rails[g] % len(cmap)]
    for i, r in nic_rails.items():
        if r >= 0:
            colour_of[i] = cmap[r % len(cmap)]
    # a ToR takes its endpoints' rail colour when they agree
    for i in by_tier.get("asw", []):
        down = {colour_of[v] for v in neighbours[i] if v in colour_of}
        if len(down) == 1:
            colour_of[i] = down.pop()
    d = Drawing("detailed", min(40.0, max(10.0, width * 0.11)), 1.6 + 1.3 * len(rows),
                (-max(6.0, width * 0.08), width + 1), (-0.9, len(rows) - 0.5),
                f"{t.name or 'topology'}: {G} x {t.gpu_type}, {t.num_servers} servers, "
                f"NVLink domain {t.nvlink_domain_size}")
    segs, cols, lws = [], [], []
    for lk in t.links[::2]:
        a, b = lk.src, lk.dst
        ta, tb = t.nodes[a].tier, t.nodes[b].tier
        segs.append(((x[a], y_of[ta]), (x[b], y_of[tb])))
        if lk.kind == "nvlink":
            cols.append((0.35, 0.7, 0.35, 0.35))
            lws.append(0.5)
        elif lk.kind == "pcie":
            cols.append((0.55, 0.45, 0.25, 0.6))
            lws.append(0.8)
        elif a in colour_of and t.nodes[a].tier in ("gpu", "nic"):
            c = colour_of[a]
            cols.append((c[0], c[1], c[2], 0.7))
            lws.append(0.8)
        else:
            cols.append((0.5, 0.5, 0.5, 0.25))
            lws.append(0.4)
    d.items.append(Segments(segs, cols, lws, zorder=1))
    marker = {"gpu": "s", "nvswitch": "D", "pcie": "D", "nic": "o"}
    for tier in rows:
        ids = by_tier[tier]
        d.items.append(Markers([x[i] for i in ids], [y_of[tier]] * len(ids),
                               [colour_of.get(i, (0.3, 0.3, 0.3, 1.0)) for i in ids],
                               28 if tier == "gpu" else 22, marker.get(tier, "o")))
        d.items.append(Text(-2.5, y_of[tier], f"{tier} ({len(ids)})", size=9, ha="right", va="center"))
    for s in range(t.num_servers):
        lo, hi = x[s * gps], x[min(G, (s + 1) * gps) - 1]
        d.items.append(Polyline([lo - 0.4, hi + 0.4], [-0.35, -0.35], "black", 1))
        if t.num_servers <= 64:
            d.items.append(Text((lo + hi) / 2, -0.5, f"s{s}", size=7, ha="center", va="top"))
    d.legend = Legend([(f"rail {r}", cmap[r % len(cmap)]) for r in range(min(n_rails, 20))],
                      columns=min(n_rails, 10))
    return d


def _tier_boxes(d: Drawing, rows: list[str], labels: dict, cables: Counter, bw: Counter, y0: float = 0.0,
                x0: float = 0.2, width: float = 0.6, height: float = 0.5, step: float = 1.0) -> float:
    """Boxes of `rows` (bottom to top, at y0, y0 + step, ...) joined by labelled bundles; returns the
    right edge used by elbow bundles (rows that skip a row are joined right of the boxes)."""
    y = {r: y0 + i * step for i, r in enumerate(rows)}
    for r in rows:
        d.items.append(Rect(x0, y[r] - height / 2, width, height, "#dde7f5", "black"))
        d.items.append(Text(x0 + width / 2, y[r], labels[r], size=10, ha="center", va="center"))
    right = x0 + width
    skip = 0
    pairs = [k for k in cables if k[0] in y and k[1] in y]
    pairs.sort(key=lambda k: (abs(rows.index(k[1]) - rows.index(k[0])), min(rows.index(k[0]), rows.index(k[1]))))
    for key in pairs:
        a, b = sorted(key, key=rows.index)
        label = _bundle_text(cables[key], bw[key])
        ia, ib = rows.index(a), rows.index(b)
        if ia == ib:
            d.items.append(Text(right + 0.03, y[a] + 0.12 * step, f"{cables[key]:,} cables inside tier", size=8,
                                va="center"))
            continue
        if ib - ia == 1:   # neighbouring rows: straight through the gap between the boxes
            xm = x0 + width / 2
            d.items.append(Polyline([xm, xm], [y[a] + height / 2, y[b] - height / 2], "gray", 1.5))
            d.items.append(Text(xm + 0.02, (y[a] + y[b]) / 2, label, size=8, va="center"))
            continue
        # rows skipped (e.g. GPU -> ToR past the NVSwitch row): an elbow right of the boxes, so that the
        # line and its label never cross a box or another label
        xo = right + 0.06 + 0.1 * skip
        skip += 1
        d.items.append(Polyline([right, xo, xo, right], [y[a] + 0.1, y[a] + 0.1, y[b] - 0.1, y[b] - 0.1], "gray", 1.5))
        d.items.append(Text(xo + 0.015, (y[a] + y[b]) / 2, label, size=8, va="center", rotation=90))
    return right + 0.15 + 0.1 * skip


def _aggregated(t: Topology, tiers: tuple[Counter, Counter] | None = None) -> Drawing:
    rows = _rows(t)
    count = Counter(n.tier for n in t.nodes)
    tier_of = [n.tier for n in t.nodes]
    cables, bw = tiers if tiers is not None else bundles(t, tier_of)
    labels = {r: f"{count[r]:,} x {tier_label(r)}" for r in rows}
    labels["gpu"] = (f"{count['gpu']:,} x GPU ({t.gpu_type}) in {t.num_servers:,} servers x "
                     f"{t.gpus_per_server}")
    d = Drawing("aggregated", 10, 1.8 + 1.4 * len(rows), (0, 1.3), (-0.6, len(rows) - 0.4),
                f"{t.name or 'topology'} (aggregated): {t.num_gpus:,} x {t.gpu_type}, "
                f"{t.num_servers:,} servers, NVLink domain {t.nvlink_domain_size}")
    right = _tier_boxes(d, rows, labels, cables, bw)
    d.xlim = (0, max(1.3, right))
    return d


def _racks(t: Topology) -> Drawing:
    """NVL-style racks: trays of GPUs around NVSwitch trays; the network above aggregated by tier."""
    G, gps, D = t.num_gpus, t.gpus_per_server, t.nvlink_domain_size
    rack_of = {g: t.nvlink_domain_of(g) for g in range(G)}
    racks = sorted(set(rack_of.values()))
    r0 = racks[0]
    tier_of = [n.tier for n in t.nodes]
    rack_gpus = [g for g in range(G) if rack_of[g] == r0]
    chips: set[int] = set()
    nv_cables, nv_bw = 0, 0.0
    gpu_set = set(rack_gpus)
    host = set(gpu_set)          # rack 0's host side: its GPUs, chips, NICs and PCIe switches
    for lk in t.links[::2]:
        a, b = lk.src, lk.dst
        if a in gpu_set and tier_of[b] in _HOST_TIERS:
            host.add(b)
        elif b in gpu_set and tier_of[a] in _HOST_TIERS:
            host.add(a)
        if (a in gpu_set and tier_of[b] == "nvswitch") or (b in gpu_set and tier_of[a] == "nvswitch"):
            chips.add(b if a in gpu_set else a)
            nv_cables += 1
            nv_bw += lk.bandwidth_Bps
    up_cables, up_bw = 0, 0.0
    for lk in t.links[::2]:
        if (lk.src in host) != (lk.dst in host):
            other = lk.dst if lk.src in host else lk.src
            if tier_of[other] not in _HOST_TIERS:
                up_cables += 1
                up_bw += lk.bandwidth_Bps
    trays = -(-len(rack_gpus) // gps)
    sw_trays = -(-len(chips) // 2)          # GB200 NVL racks: two NVLink switch chips per switch tray
    top = trays // 2 + 1 if trays > 1 else trays       # NVL72: 10 compute trays above the switches, 8 below
    n_rows = trays + sw_trays
    net_tiers = [r for r in _rows(t) if r not in _HOST_TIERS]
    count = Counter(tier_of)
    cables, bw = bundles(t, ["racks" if tier in _HOST_TIERS else tier for tier in tier_of])
    cables.pop(("racks", "racks"), None)     # NVLink inside the racks: stated per rack below
    shown = racks if len(racks) <= MAX_RACKS_DRAWN else racks[:MAX_RACKS_DRAWN - 1] + [racks[-1]]
    rack_w, gap, rack_h = 1.7, 0.7, 5.4
    slots = len(shown) + (1 if len(shown) < len(racks) else 0)
    width = max(slots * (rack_w + gap) + gap, 7.5)
    d = Drawing("racks", max(9.0, width * 1.25), 8.2 + 1.1 * len(net_tiers), (-0.2, width),
                (-0.8, rack_h + 2.0 + 1.3 * len(net_tiers) + 0.6),
                f"{t.name or 'topology'}: {G:,} x {t.gpu_type} in {len(racks):,} NVL{D} "
                f"rack{'s' if len(racks) > 1 else ''}")
    gpu_rects, tray_rects, sw_rects, chip_rects = [], [], [], []
    row_h = rack_h / n_rows
    x = gap
    for k, r in enumerate(shown):
        if len(shown) < len(racks) and k == len(shown) - 1:   # the skipped racks: one ellipsis slot
            d.items.append(Text(x + rack_w / 2, rack_h / 2, f"...\n{len(racks) - len(shown)} more\nracks",
                                size=10, ha="center", va="center"))
            x += rack_w + gap
        d.items.append(Rect(x - 0.08, -0.08, rack_w + 0.16, rack_h + 0.16, "none", "black", 1.5))
        gpus = [g for g in range(G) if rack_of[g] == r]
        d.items.append(Text(x + rack_w / 2, -0.3, f"rack {racks.index(r)}: GPUs {gpus[0]}-{gpus[-1]}", size=8,
                            ha="center", va="top"))
        for row in range(n_rows):
            y = rack_h - (row + 1) * row_h
            tray = row if row < top else (row - sw_trays if row >= top + sw_trays else -1)
            if tray < 0:   # NVSwitch tray: two chips (fewer in the last tray of an odd chip count)
                sw_rects.append((x, y + 0.1 * row_h, rack_w, 0.8 * row_h))
                for c in range(min(2, len(chips) - 2 * (row - top))):
                    chip_rects.append((x + rack_w * (0.25 + 0.4 * c), y + 0.25 * row_h, rack_w * 0.12, 0.5 * row_h))
                continue
            tray_rects.append((x, y + 0.1 * row_h, rack_w, 0.8 * row_h))
            n_here = min(gps, len(gpus) - tray * gps)
            for j in range(max(n_here, 0)):
                gpu_rects.append((x + rack_w * (0.08 + 0.88 * j / gps), y + 0.2 * row_h,
                                  rack_w * 0.88 / gps * 0.8, 0.6 * row_h))
        x += rack_w + gap
    d.items.append(Rects(tray_rects, "#e8e8e8", "#888888", 0.4))
    d.items.append(Rects(sw_rects, "#cfe3cf", "#5a8f5a", 0.4))
    d.items.append(Rects(gpu_rects, "#4c72b0", "none", 0.0))
    d.items.append(Rects(chip_rects, "#2f6b2f", "none", 0.0))
    per_rack = (f"{len(racks):,} x NVL{D} rack: {len(rack_gpus)} GPUs ({t.gpu_type}) = {trays} compute trays x "
                f"{gps} GPUs; {len(chips)} NVSwitch chips in {sw_trays} switch trays\n"
                f"NVLink per rack: {_bundle_text(nv_cables, nv_bw)} (GPU-NVSwitch)")
    if up_cables:
        per_rack += f"\nnetwork per rack: {_bundle_text(up_cables, up_bw)} (to the {tier_label(net_tiers[0])} tier)"
    d.items.append(Text(0.0, rack_h + 0.45, per_rack, size=9, ha="left", va="bottom"))
    right = width
    if net_tiers:
        rows = ["racks"] + net_tiers
        labels = {r: f"{count[r]:,} x {tier_label(r)}" for r in net_tiers}
        labels["racks"] = f"{len(racks):,} rack{'s' if len(racks) > 1 else ''} ({G:,} GPUs)"
        # the racks' box is the row above: bundles from the racks start at the top of the drawing
        right = _tier_boxes(d, rows, labels, cables, bw, y0=rack_h + 2.0, x0=width * 0.2,
                            width=width * 0.45, height=0.6, step=1.3)
        right = max(width, right + 2.5)
    d.xlim = (-0.2, right)
    return d
