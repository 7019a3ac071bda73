"""`clustersim run --explain`: which parts of an iteration time rest on measurements and which on models.

Shares are of the iteration time T (means over pipeline stages, as the summary's split):
- kernel time (compute without the overlap slowdown), split by kernel family and compute_db provenance
  (measured / interpolated / modeled / given), from the nominal kernel times of every stage program;
- overlap slowdown: modeled (sim.contention);
- exposed communication: the network backend with netsim's built-in constants (calibrated against
  public NCCL figures, docs/netsim.md) or a user calibration file (--net-calibration);
- launch/host overhead: modeled (sim.overheads);
- pipeline bubble: follows from the above (no model of its own).
"""

from __future__ import annotations


def explain_dict(rep) -> dict:
    """Shares of the iteration time by what they rest on (see the module docstring)."""
    T = rep.iteration_time_s or 1.0
    m = rep.meta
    kernel_s = max(0.0, rep.compute_s - rep.overlap_slowdown_s)
    fams = rep.kernel_time_by_family or {}
    total = sum(sum(v.values()) for v in fams.values()) or 1.0
    families = {}
    for fam, by_src in sorted(fams.items(), key=lambda kv: -sum(kv[1].values())):
        share = kernel_s / T * sum(by_src.values()) / total
        families[fam] = {"share": share,
                         "provenance": {src: kernel_s / T * t / total for src, t in sorted(by_src.items())}}
    cal = m.get("net_calibration")
    network = {
        "share": rep.exposed_total_s / T,
        "backend": m.get("network"),
        "basis": (f"user calibration {cal}" if cal else
                  "netsim built-in constants, calibrated against public NCCL figures (docs/netsim.md)"),
    }
    return {
        "iteration_time_s": rep.iteration_time_s,
        "kernels": {"share": kernel_s / T, "compute_db": m.get("compute_db", "shipped"), "families": families},
        "overlap_slowdown": {"share": rep.overlap_slowdown_s / T, "basis": "modeled: " + m.get("contention_model", "off")
                             + " (sim.contention; docs/fidelity.md)"},
        "exposed_communication": network,
        "overhead": {"share": rep.overhead_s / T, "basis": "modeled: " + m.get("overheads_model", "off")
                     + " (sim.overheads; docs/fidelity.md)"},
        "bubble": {"share": rep.bubble_s / T, "basis": "follows from the parts above (pipeline schedule)"},
    }


def format_explain(rep) -> str:
    d = explain_dict(rep)
    pct = lambda x: f"{100 * x:5.1f}%"   # noqa: E731
    lines = ["what this answer rests on (share of the iteration time):"]
    k = d["kernels"]
    lines.append(f"  {'kernel time':<22s}{pct(k['share'])}   compute_db ({k['compute_db']}), by family and provenance:")
    for fam, f in k["families"].items():
        prov = ", ".join(f"{src} {pct(v).strip()}" for src, v in f["provenance"].items())
        lines.append(f"    {fam:<20s}{pct(f['share'])}   {prov}")
    s = d["overlap_slowdown"]
    lines.append(f"  {'overlap slowdown':<22s}{pct(s['share'])}   {s['basis']}")
    n = d["exposed_communication"]
    lines.append(f"  {'exposed comm':<22s}{pct(n['share'])}   network '{n['backend']}': {n['basis']}")
    o = d["overhead"]
    lines.append(f"  {'launch/host overhead':<22s}{pct(o['share'])}   {o['basis']}")
    b = d["bubble"]
    lines.append(f"  {'pipeline bubble':<22s}{pct(b['share'])}   {b['basis']}")
    return "\n".join(lines)
