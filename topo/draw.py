"""PNG drawing of a topology (matplotlib, Agg backend).

Up to `detail_limit` GPUs every node and cable is drawn: tiers as rows (core on top, GPUs at the
bottom), GPUs grouped by server, GPU/NIC-to-ToR cables and GPUs coloured by rail. Larger fabrics are
drawn aggregated: one box per tier with node counts, and one edge per tier pair with cable count and
total bandwidth.
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


def save_png(fig, path: str, *, dpi: int = 110, prefix: str = ".topo-draw.", bbox_inches=None) -> None:
    """Save a matplotlib figure as PNG through a temporary file beside `path` (never half-written)."""
    path = os.fspath(path)
    d = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".png", dir=d)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi, format="png", bbox_inches=bbox_inches)
        os.chmod(tmp, 0o666 & ~_umask())   # mkstemp creates 0600; give the file the user's usual mode
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def draw_topology(t: Topology, path: str, detail_limit: int = 256) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if t.num_gpus <= detail_limit and len(t.nodes) <= 4 * detail_limit:
        fig = _detailed(t, plt)
    else:
        fig = _aggregated(t, plt)
    save_png(fig, path)
    plt.close(fig)


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


def _aggregated(t: Topology, plt):
    rows = _rows(t)
    count = Counter(n.tier for n in t.nodes)
    pair_cables: Counter[tuple[str, str]] = Counter()
    pair_bw: Counter[tuple[str, str]] = Counter()
    for lk in t.links[::2]:
        a, b = t.nodes[lk.src].tier, t.nodes[lk.dst].tier
        key = tuple(sorted((a, b), key=rows.index))
        pair_cables[key] += 1
        pair_bw[key] += lk.bandwidth_Bps
    fig, ax = plt.subplots(figsize=(10, 1.8 + 1.4 * len(rows)))
    for i, tier in enumerate(rows):
        ax.add_patch(plt.Rectangle((0.2, i - 0.25), 0.6, 0.5, facecolor="#dde7f5", edgecolor="black"))
        ax.text(0.5, i, f"{tier}  x {count[tier]:,}", ha="center", va="center", fontsize=11)
    skip = 0
    for (a, b), n in sorted(pair_cables.items(), key=lambda kv: (rows.index(kv[0][1]) - rows.index(kv[0][0]),
                                                                rows.index(kv[0][0]))):
        ia, ib = rows.index(a), rows.index(b)
        label = f"{n:,} cables, {pair_bw[(a, b)] * 8 / 1e12:,.1f} Tbps"
        if ia == ib:
            ax.text(0.83, ia + 0.12, f"{n:,} cables inside tier", fontsize=8, va="center")
            continue
        if ib - ia == 1:   # neighbouring rows: straight through the gap between the boxes
            ax.plot([0.5, 0.5], [ia + 0.25, ib - 0.25], lw=1.5, color="gray")
            ax.text(0.52, (ia + ib) / 2, label, fontsize=8, va="center")
            continue
        # rows skipped (e.g. GPU -> ToR past the NVSwitch row): an elbow right of the boxes, so that the
        # line and its label never cross a box or another label
        xo = 0.86 + 0.1 * skip
        skip += 1
        ax.plot([0.8, xo, xo, 0.8], [ia + 0.1, ia + 0.1, ib - 0.1, ib - 0.1], lw=1.5, color="gray")
        ax.text(xo + 0.015, (ia + ib) / 2, label, fontsize=8, va="center", rotation=90)
    ax.set_xlim(0, max(1.3, 0.95 + 0.1 * skip))
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.axis("off")
    ax.set_title(f"{t.name or 'topology'} (aggregated): {t.num_gpus:,} x {t.gpu_type}, "
                 f"{t.num_servers:,} servers, NVLink domain {t.nvlink_domain_size}", fontsize=10, loc="left")
    fig.tight_layout()
    return fig
