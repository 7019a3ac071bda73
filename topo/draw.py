"""PNG (or SVG) drawing of a topology (matplotlib, Agg backend), readable at every size.

- Rack-scale NVLink domains (NVL72 / NVL36: the domain spans several trays): each rack drawn as a rack
  (its compute trays with their GPUs and its NVSwitch trays with their chips, labelled with the
  NVLink cable count and bandwidth); up to 4 racks drawn, more shown as "x N racks"; the network
  above aggregated by tier.
- Up to `detail_limit` GPUs otherwise: every node and cable; tiers as rows (core on top, GPUs at the
  bottom), GPUs grouped by server, GPU/NIC-to-ToR cables and GPUs coloured by rail.
- Larger fabrics: aggregated, one box per tier ("256 x ToR (asw)") and one bundle per tier pair
  labelled with its cable count and total bandwidth (one direction).
The number of drawn artists is bounded in the rack and aggregated views (independent of the GPU count).
"""

from __future__ import annotations

import os
import tempfile
from collections import Counter, defaultdict

from topo.model import Topology, tier_rank

_ROW_ORDER = ("gpu", "nvswitch", "pcie", "nic")


def _rows(t: Topology) -> list[str]:
    tiers = {n.tier for n in t.nodes}
    low = [x for x in _ROW_ORDER if x in tiers]
    net = sorted(tiers - set(_ROW_ORDER), key=lambda x: (tier_rank(x), x))
    return low + net  # bottom to top


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def save_png(fig, path: str, *, dpi: int = 110, prefix: str = ".topo-draw.", bbox_inches=None,
             fmt: str = "png") -> None:
    """Save a matplotlib figure as PNG (or fmt="svg": SVG with text kept as text, not glyph paths)
    through a temporary file beside `path` (never half-written)."""
    import matplotlib

    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=f".{fmt}", dir=d)
    os.close(fd)
    try:
        with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "clustersim"}):
            # no date in an SVG: the same topology draws to the same bytes
            meta = {"Date": None} if fmt == "svg" else None
            fig.savefig(tmp, dpi=dpi, format=fmt, bbox_inches=bbox_inches, metadata=meta)
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp creates 0600; give the file the user's usual mode
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


DRAW_FORMATS = ("png", "svg")


def draw_topology(t: Topology, path: str, detail_limit: int = 256, *, dpi: int = 110, fmt: str = "png") -> None:
    """Draw `t` into the file `path` (atomically; see the module docstring for the views).

    fmt "png" (default, `dpi` pixels per inch) or "svg" (vector, text kept as text: about a third faster
    than a 110-dpi PNG, e.g. for report.html)."""
    import matplotlib.pyplot as plt

    if fmt not in DRAW_FORMATS:
        raise ValueError(f"draw_topology: fmt '{fmt}' is not one of {', '.join(DRAW_FORMATS)}")
    fig = topology_figure(t, detail_limit)
    try:
        save_png(fig, path, dpi=dpi, fmt=fmt)
    finally:
        plt.close(fig)


def drawing_view(t: Topology, detail_limit: int = 256) -> str:
    """Which view draw_topology uses: "racks", "detailed" or "aggregated"."""
    if _rack_scale(t):
        return "racks"
    if t.num_gpus <= detail_limit and len(t.nodes) <= 4 * detail_limit:
        return "detailed"
    return "aggregated"


def topology_figure(t: Topology, detail_limit: int = 256):
    """The matplotlib figure of draw_topology (the caller closes it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    view = drawing_view(t, detail_limit)
    if view == "racks":
        return _racks(t, plt)
    return _detailed(t, plt) if view == "detailed" else _aggregated(t, plt)


_TIER_NAMES = {"gpu": "GPU", "nvswitch": "NVSwitch", "nic": "NIC", "pcie": "PCIe switch",
               "asw": "ToR (asw)", "psw": "spine (psw)", "csw": "core (csw)"}
_HOST_TIERS = ("gpu", "nvswitch", "pcie", "nic")
MAX_RACKS_DRAWN = 4


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


def _bundles(t: Topology, group) -> tuple[Counter, Counter]:
    """Cables and total bandwidth (one direction) per unordered pair of groups, group(node) -> str."""
    cables: Counter = Counter()
    bw: Counter = Counter()
    for lk in t.links[::2]:
        key = tuple(sorted((group(lk.src), group(lk.dst))))
        cables[key] += 1
        bw[key] += lk.bandwidth_Bps
    return cables, bw


def _detailed(t: Topology, plt):
    from matplotlib.collections import LineCollection

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
            seen: Counter[float] = Counter()
            groups: dict[float, list[int]] = defaultdict(list)
            for i in ids:
                groups[round(x[i], 3)].append(i)
            for center, members in groups.items():
                if len(members) > 1:
                    span = max(min(gps, len(members)) * 0.9, 0.7 * extent[members[0]])
                    for k, i in enumerate(members):
                        x[i] = center - span / 2 + span * (k + 0.5) / len(members)
                seen[center] += 1
        else:
            n = len(ids)
            for k, i in enumerate(ids):
                x[i] = (k + 0.5) * width / n - 0.5
    rails = [t.rail_of(g) for g in range(G)] if any(t.nodes[i].tier not in ("gpu", "nvswitch") for i in x) else \
        [g % gps for g in range(G)]
    nic_rails = {i: t.nic_rail(i) for i in by_tier.get("nic", [])}
    n_rails = max(rails + list(nic_rails.values())) + 1 if rails else 1
    cmap = plt.get_cmap("tab10" if n_rails <= 10 else "tab20")
    colour_of = {}
    for g in range(G):
        colour_of[g] = cmap(rails[g] % cmap.N)
    for i, r in nic_rails.items():
        if r >= 0:
            colour_of[i] = cmap(r % cmap.N)
    # a ToR takes its endpoints' rail colour when they agree
    for i in by_tier.get("asw", []):
        down = {colour_of[v] for v in neighbours[i] if v in colour_of}
        if len(down) == 1:
            colour_of[i] = down.pop()
    fig_w = min(40.0, max(10.0, width * 0.11))
    fig_h = 1.6 + 1.3 * len(rows)
    fig, ax = plt.subplots(figsize=(fig_w, fig_h))
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
    ax.add_collection(LineCollection(segs, colors=cols, linewidths=lws, zorder=1))
    marker = {"gpu": "s", "nvswitch": "D", "pcie": "D", "nic": "o"}
    for tier in rows:
        ids = by_tier[tier]
        xs = [x[i] for i in ids]
        cs = [colour_of.get(i, (0.3, 0.3, 0.3, 1.0)) for i in ids]
        size = 28 if tier == "gpu" else 22
        ax.scatter(xs, [y_of[tier]] * len(ids), c=cs, s=size, marker=marker.get(tier, "o"),
                   edgecolors="black", linewidths=0.3, zorder=2)
        ax.text(-2.5, y_of[tier], f"{tier} ({len(ids)})", ha="right", va="center", fontsize=9)
    for s in range(t.num_servers):
        lo, hi = x[s * gps], x[min(G, (s + 1) * gps) - 1]
        ax.plot([lo - 0.4, hi + 0.4], [-0.35, -0.35], color="black", lw=1)
        if t.num_servers <= 64:
            ax.text((lo + hi) / 2, -0.5, f"s{s}", ha="center", va="top", fontsize=7)
    handles = [plt.Line2D([0], [0], color=cmap(r % cmap.N), lw=2, label=f"rail {r}") for r in range(min(n_rails, 20))]
    ax.legend(handles=handles, loc="upper right", fontsize=7, ncol=min(n_rails, 10), frameon=False,
              bbox_to_anchor=(1.0, 1.08))
    ax.set_xlim(-max(6.0, width * 0.08), width + 1)
    ax.set_ylim(-0.9, len(rows) - 0.5)
    ax.axis("off")
    ax.set_title(f"{t.name or 'topology'}: {G} x {t.gpu_type}, {t.num_servers} servers, "
                 f"NVLink domain {t.nvlink_domain_size}", fontsize=10, loc="left")
    fig.tight_layout()
    return fig


def _tier_boxes(ax, plt, rows: list[str], labels: dict, cables: Counter, bw: Counter, y0: float = 0.0,
                x0: float = 0.2, width: float = 0.6, height: float = 0.5, step: float = 1.0) -> float:
    """Boxes of `rows` (bottom to top, at y0, y0 + step, ...) joined by labelled bundles; returns the
    right edge used by elbow bundles (rows that skip a row are joined right of the boxes)."""
    y = {r: y0 + i * step for i, r in enumerate(rows)}
    for r in rows:
        ax.add_patch(plt.Rectangle((x0, y[r] - height / 2), width, height, facecolor="#dde7f5", edgecolor="black"))
        ax.text(x0 + width / 2, y[r], labels[r], ha="center", va="center", fontsize=10)
    right = x0 + width
    skip = 0
    pairs = [k for k in cables if k[0] in y and k[1] in y]
    pairs.sort(key=lambda k: (abs(rows.index(k[1]) - rows.index(k[0])), min(rows.index(k[0]), rows.index(k[1]))))
    for key in pairs:
        a, b = sorted(key, key=rows.index)
        label = _bundle_text(cables[key], bw[key])
        ia, ib = rows.index(a), rows.index(b)
        if ia == ib:
            ax.text(right + 0.03, y[a] + 0.12 * step, f"{cables[key]:,} cables inside tier", fontsize=8, va="center")
            continue
        if ib - ia == 1:   # neighbouring rows: straight through the gap between the boxes
            xm = x0 + width / 2
            ax.plot([xm, xm], [y[a] + height / 2, y[b] - height / 2], lw=1.5, color="gray")
            ax.text(xm + 0.02, (y[a] + y[b]) / 2, label, fontsize=8, va="center")
            continue
        # rows skipped (e.g. GPU -> ToR past the NVSwitch row): an elbow right of the boxes, so that the
        # line and its label never cross a box or another label
        xo = right + 0.06 + 0.1 * skip
        skip += 1
        ax.plot([right, xo, xo, right], [y[a] + 0.1, y[a] + 0.1, y[b] - 0.1, y[b] - 0.1], lw=1.5, color="gray")
        ax.text(xo + 0.015, (y[a] + y[b]) / 2, label, fontsize=8, va="center", rotation=90)
    return right + 0.15 + 0.1 * skip


def _aggregated(t: Topology, plt):
    rows = _rows(t)
    count = Counter(n.tier for n in t.nodes)
    tier_of = [n.tier for n in t.nodes]
    cables, bw = _bundles(t, lambda i: tier_of[i])
    labels = {r: f"{count[r]:,} x {tier_label(r)}" for r in rows}
    labels["gpu"] = (f"{count['gpu']:,} x GPU ({t.gpu_type}) in {t.num_servers:,} servers x "
                     f"{t.gpus_per_server}")
    fig, ax = plt.subplots(figsize=(10, 1.8 + 1.4 * len(rows)))
    right = _tier_boxes(ax, plt, rows, labels, cables, bw)
    ax.set_xlim(0, max(1.3, right))
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.axis("off")
    ax.set_title(f"{t.name or 'topology'} (aggregated): {t.num_gpus:,} x {t.gpu_type}, "
                 f"{t.num_servers:,} servers, NVLink domain {t.nvlink_domain_size}", fontsize=10, loc="left")
    fig.tight_layout()
    return fig


def _racks(t: Topology, plt):
    """NVL-style racks: trays of GPUs around NVSwitch trays; the network above aggregated by tier."""
    from matplotlib.collections import PatchCollection

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
    cables, bw = _bundles(t, lambda i: "racks" if tier_of[i] in _HOST_TIERS else tier_of[i])
    cables.pop(("racks", "racks"), None)     # NVLink inside the racks: stated per rack below
    shown = racks if len(racks) <= MAX_RACKS_DRAWN else racks[:MAX_RACKS_DRAWN - 1] + [racks[-1]]
    rack_w, gap, rack_h = 1.7, 0.7, 5.4
    slots = len(shown) + (1 if len(shown) < len(racks) else 0)
    width = max(slots * (rack_w + gap) + gap, 7.5)
    fig, ax = plt.subplots(figsize=(max(9.0, width * 1.25), 8.2 + 1.1 * len(net_tiers)))
    gpu_patches, tray_patches, sw_patches, chip_patches = [], [], [], []
    row_h = rack_h / n_rows
    x = gap
    for k, r in enumerate(shown):
        if len(shown) < len(racks) and k == len(shown) - 1:   # the skipped racks: one ellipsis slot
            ax.text(x + rack_w / 2, rack_h / 2, f"...\n{len(racks) - len(shown)} more\nracks", ha="center",
                    va="center", fontsize=10)
            x += rack_w + gap
        ax.add_patch(plt.Rectangle((x - 0.08, -0.08), rack_w + 0.16, rack_h + 0.16, facecolor="none",
                                   edgecolor="black", lw=1.5))
        gpus = [g for g in range(G) if rack_of[g] == r]
        ax.text(x + rack_w / 2, -0.3, f"rack {racks.index(r)}: GPUs {gpus[0]}-{gpus[-1]}", ha="center",
                va="top", fontsize=8)
        for row in range(n_rows):
            y = rack_h - (row + 1) * row_h
            tray = row if row < top else (row - sw_trays if row >= top + sw_trays else -1)
            if tray < 0:   # NVSwitch tray: two chips (fewer in the last tray of an odd chip count)
                sw_patches.append(plt.Rectangle((x, y + 0.1 * row_h), rack_w, 0.8 * row_h))
                for c in range(min(2, len(chips) - 2 * (row - top))):
                    chip_patches.append(plt.Rectangle((x + rack_w * (0.25 + 0.4 * c), y + 0.25 * row_h),
                                                      rack_w * 0.12, 0.5 * row_h))
                continue
            tray_patches.append(plt.Rectangle((x, y + 0.1 * row_h), rack_w, 0.8 * row_h))
            n_here = min(gps, len(gpus) - tray * gps)
            for j in range(max(n_here, 0)):
                gpu_patches.append(plt.Rectangle((x + rack_w * (0.08 + 0.88 * j / gps), y + 0.2 * row_h),
                                                 rack_w * 0.88 / gps * 0.8, 0.6 * row_h))
        x += rack_w + gap
    ax.add_collection(PatchCollection(tray_patches, facecolor="#e8e8e8", edgecolor="#888888", lw=0.4))
    ax.add_collection(PatchCollection(sw_patches, facecolor="#cfe3cf", edgecolor="#5a8f5a", lw=0.4))
    ax.add_collection(PatchCollection(gpu_patches, facecolor="#4c72b0", edgecolor="none"))
    ax.add_collection(PatchCollection(chip_patches, facecolor="#2f6b2f", edgecolor="none"))
    per_rack = (f"{len(racks):,} x NVL{D} rack: {len(rack_gpus)} GPUs ({t.gpu_type}) = {trays} compute trays x "
                f"{gps} GPUs; {len(chips)} NVSwitch chips in {sw_trays} switch trays\n"
                f"NVLink per rack: {_bundle_text(nv_cables, nv_bw)} (GPU-NVSwitch)")
    if up_cables:
        per_rack += f"\nnetwork per rack: {_bundle_text(up_cables, up_bw)} (to the {tier_label(net_tiers[0])} tier)"
    ax.text(0.0, rack_h + 0.45, per_rack, fontsize=9, va="bottom", ha="left")
    right = width
    if net_tiers:
        rows = ["racks"] + net_tiers
        labels = {r: f"{count[r]:,} x {tier_label(r)}" for r in net_tiers}
        labels["racks"] = f"{len(racks):,} rack{'s' if len(racks) > 1 else ''} ({G:,} GPUs)"
        # the racks' box is the row above: bundles from the racks start at the top of the drawing
        right = _tier_boxes(ax, plt, rows, labels, cables, bw, y0=rack_h + 2.0, x0=width * 0.2,
                            width=width * 0.45, height=0.6, step=1.3)
        right = max(width, right + 2.5)
    ax.set_xlim(-0.2, right)
    ax.set_ylim(-0.8, rack_h + 2.0 + 1.3 * len(net_tiers) + 0.6)
    ax.axis("off")
    ax.set_title(f"{t.name or 'topology'}: {G:,} x {t.gpu_type} in {len(racks):,} NVL{D} "
                 f"rack{'s' if len(racks) > 1 else ''}", fontsize=10, loc="left")
    fig.tight_layout()
    return fig
