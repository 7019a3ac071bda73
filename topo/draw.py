"""PNG (or SVG) drawing of a topology with matplotlib (Agg backend), readable at every size.

The picture's layout (views "racks", "detailed", "aggregated": positions, boxes, lines, labels) is plain
data from topo.draw_layout; this module renders it with matplotlib (`clustersim topo draw`), and
topo.draw_svg writes the same layout as a native SVG without matplotlib (report.html). The number of
drawn artists is bounded in the rack and aggregated views (independent of the GPU count).
"""

from __future__ import annotations

import os
import tempfile

from topo import draw_layout as L
from topo.draw_layout import MAX_RACKS_DRAWN, drawing_view, layout, tier_label  # noqa: F401  (public names)
from topo.model import Topology


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
    """Draw `t` into the file `path` (atomically; see topo.draw_layout for the views).

    fmt "png" (default, `dpi` pixels per inch) or "svg" (matplotlib's SVG, text kept as text)."""
    import matplotlib.pyplot as plt

    if fmt not in DRAW_FORMATS:
        raise ValueError(f"draw_topology: fmt '{fmt}' is not one of {', '.join(DRAW_FORMATS)}")
    fig = topology_figure(t, detail_limit)
    try:
        save_png(fig, path, dpi=dpi, fmt=fmt)
    finally:
        plt.close(fig)


def topology_figure(t: Topology, detail_limit: int = 256):
    """The matplotlib figure of draw_topology (the caller closes it)."""
    return render_figure(layout(t, detail_limit))


def render_figure(d: L.Drawing):
    """A topo.draw_layout Drawing as a matplotlib figure (the caller closes it): segments as one line
    collection, markers as one scatter per item, rectangle sets as one patch collection."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import LineCollection, PatchCollection

    fig, ax = plt.subplots(figsize=(d.width_in, d.height_in))
    for it in d.items:
        if isinstance(it, L.Segments):
            ax.add_collection(LineCollection(it.segs, colors=it.colours, linewidths=it.widths, zorder=it.zorder))
        elif isinstance(it, L.Markers):
            ax.scatter(it.xs, it.ys, c=it.colours, s=it.area_pt2, marker=it.shape, edgecolors=it.edge,
                       linewidths=it.edge_width, zorder=it.zorder)
        elif isinstance(it, L.Polyline):
            ax.plot(it.xs, it.ys, color=it.colour, lw=it.width)
        elif isinstance(it, L.Rect):
            ax.add_patch(plt.Rectangle((it.x, it.y), it.w, it.h, facecolor=it.face, edgecolor=it.edge, lw=it.width))
        elif isinstance(it, L.Rects):
            kw = {"lw": it.width} if it.edge != "none" else {}
            ax.add_collection(PatchCollection([plt.Rectangle((x, y), w, h) for x, y, w, h in it.rects],
                                              facecolor=it.face, edgecolor=it.edge, **kw))
        elif isinstance(it, L.Text):
            kw = {"rotation": it.rotation} if it.rotation else {}
            ax.text(it.x, it.y, it.text, ha=it.ha, va=it.va, fontsize=it.size, **kw)
    if d.legend is not None:
        handles = [plt.Line2D([0], [0], color=c, lw=2, label=lab) for lab, c in d.legend.entries]
        ax.legend(handles=handles, loc="upper right", fontsize=d.legend.size, ncol=d.legend.columns, frameon=False,
                  bbox_to_anchor=(1.0, 1.08))
    ax.set_xlim(*d.xlim)
    ax.set_ylim(*d.ylim)
    ax.axis("off")
    ax.set_title(d.title, fontsize=d.title_size, loc="left")
    fig.tight_layout()
    return fig
