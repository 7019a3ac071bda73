"""Picture of a shared fabric (sim.cluster): GPUs coloured by job, network links by utilisation.

One row per tier (GPUs at the bottom, then NICs and the switch tiers in the topology's order), nodes
evenly spaced within their row. Only scale-out links ("network" kind) are drawn: a cable's colour and
width follow the larger utilisation of its two directions (links.csv of the same run); idle cables are
drawn thin and grey. NVLink/PCIe inside servers are left out.
"""

from __future__ import annotations

from pathlib import Path

_SKIP_TIERS = ("nvswitch", "pcie")


def draw_cluster(rep, topology, job_gpus: list[list[int]], path: Path, top_n: int = 8) -> None:
    """Write the picture to `path` (PNG). rep: sim.cluster.ClusterReport; job_gpus: GPU ids per job."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import cm
    from matplotlib.colors import Normalize

    rows: list[str] = []
    for node in topology.nodes:
        if node.tier not in rows and node.tier not in _SKIP_TIERS:
            rows.append(node.tier)
    rows.sort(key=lambda t: 0 if t == "gpu" else 1 if t == "nic" else 2)   # stable: switch tiers keep their order
    members: dict[str, list[int]] = {t: [] for t in rows}
    for node in topology.nodes:
        if node.tier in members:
            members[node.tier].append(node.id)
    pos = {}
    for y, tier in enumerate(rows):
        ids = members[tier]
        for k, nid in enumerate(ids):
            pos[nid] = ((k + 0.5) / len(ids), float(y))
    util: dict[tuple[int, int], float] = {}
    for lk in topology.links:
        if lk.kind == "network" and lk.src in pos and lk.dst in pos:
            util.setdefault((min(lk.src, lk.dst), max(lk.src, lk.dst)), 0.0)
    by_id = {lk.id: lk for lk in topology.links}
    hot = []
    for row in rep.links:
        lk = by_id.get(row["link"])
        if lk is None:
            continue
        key = (min(lk.src, lk.dst), max(lk.src, lk.dst))
        if key in util:
            util[key] = max(util[key], row["utilization"])
    for row in rep.hot_links(top_n):
        lk = by_id.get(row["link"])
        if lk is not None:
            hot.append((min(lk.src, lk.dst), max(lk.src, lk.dst)))

    fig, ax = plt.subplots(figsize=(11, 1.6 * len(rows) + 1.5))
    norm = Normalize(0.0, 1.0)
    cmap = plt.get_cmap("inferno_r")
    for (a, b), u in sorted(util.items(), key=lambda kv: kv[1]):
        (xa, ya), (xb, yb) = pos[a], pos[b]
        if u <= 0:
            ax.plot([xa, xb], [ya, yb], color="0.85", lw=0.3, zorder=1)
        else:
            ax.plot([xa, xb], [ya, yb], color=cmap(norm(u)), lw=0.6 + 3.0 * u + (1.5 if (a, b) in hot else 0.0),
                    zorder=2 + u)
    colours = plt.get_cmap("tab10")
    owner = {}
    for j, gpus in enumerate(job_gpus):
        for g in gpus:
            owner[g] = j
    gpu_ids = members.get("gpu", [])
    ax.scatter([pos[g][0] for g in gpu_ids], [pos[g][1] for g in gpu_ids], s=12, zorder=5,
               c=[colours(owner[g] % 10) if g in owner else (0.8, 0.8, 0.8, 1.0) for g in gpu_ids])
    for tier in rows[1:]:
        ids = members[tier]
        ax.scatter([pos[n][0] for n in ids], [pos[n][1] for n in ids], s=30, marker="s", color="0.3", zorder=5)
    for j, r in enumerate(rep.jobs):
        ax.scatter([], [], color=colours(j % 10), label=f"{r['name']} ({r['slowdown']:.3f}x)")
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xticks([])
    ax.set_ylim(-0.5, len(rows) - 0.5)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), fontsize=8, frameon=False, title="job (slowdown)")
    fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.03, pad=0.15,
                 label="link utilisation (mean over the makespan)")
    ax.set_title("Jobs on the shared fabric; hottest links thick")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
