"""Where a job meets a faulted fabric: the fault flags of run / compare / sweep, the faulted topology,
and the check, before any simulation, that every group of the job can still talk.

A job dict carries its faults as plain data, `job["faults"] = {"fail": [PART, ...], "degrade":
[PART=FACTOR, ...], "files": [PATH, ...], "items": [(compare variant, its items), ...]}` (topo.faults
names), so jobs stay picklable for sweeps.

Unplaceable (SimError, one line naming the GPU, its server and the failed part): a GPU of the job is
on a failed part, or two GPUs of one parallel group (tp, cp, dp, ep, pp, ...) have no route left,
e.g. a GPU lost its only NIC. Reachability is by connected components of what the router may use:
the network switches among themselves, reached through a GPU's host-side exits, or the host-side
switches (NVSwitch, PCIe) inside a server; GPUs never forward.
"""

from __future__ import annotations

import argparse

from sim.errors import SimError


def add_fault_arguments(p: argparse.ArgumentParser) -> None:
    f = p.add_argument_group("failed and degraded parts (topo.faults)")
    f.add_argument("--fail", action="append", metavar="PART",
                   help="failed part (repeatable): gpu:N, server:N, nic:N, nic:gpuN, tor:N, spine:N, core:N, "
                        "node:ID, link:A-B")
    f.add_argument("--degrade", action="append", metavar="PART=FACTOR",
                   help="degraded part at FACTOR (0..1) of its capacity (repeatable), e.g. link:3-40=0.5")
    f.add_argument("--faults", dest="fault_files", action="append", metavar="FILE",
                   help="fault file, YAML/JSON: {fail: [PART, ...], degrade: {PART: FACTOR}} (repeatable)")


def fault_options(args) -> dict | None:
    """The job's "faults" entry from parsed flags (None when no fault flag was given)."""
    fail = list(getattr(args, "fail", None) or [])
    degrade = list(getattr(args, "degrade", None) or [])
    files = list(getattr(args, "fault_files", None) or [])
    if not (fail or degrade or files):
        return None
    return {"fail": fail, "degrade": degrade, "files": files}


def job_fault_set(job: dict):
    """topo.faults.FaultSet of a job (empty without faults); bad specs and files raise TopoError."""
    from topo.faults import FaultSet, fault_set, parse_variant_items
    spec = job.get("faults") or {}
    if not spec:
        return FaultSet()
    out = fault_set(spec.get("fail"), spec.get("degrade"), spec.get("files"))
    for name, text in spec.get("items") or ():
        out = out + parse_variant_items(text, f"--faults-variant {name}")
    return out


# ---------------------------------------------------------------- compare variants
def add_variant_argument(p: argparse.ArgumentParser) -> None:
    p.add_argument("--faults-variant", dest="fault_variants", action="append", metavar="NAME=PARTS",
                   help="fault set to compare (repeatable): NAME=PART[,PART=FACTOR,FILE...], e.g. healthy= "
                        "one-spine=spine:0 slow=link:3-40=0.5; added to --fail/--degrade/--faults")


def fault_variants(args) -> list[tuple[str, str]]:
    """[(name, items text)] of --faults-variant; items are checked (not yet against a topology)."""
    out = []
    for text in getattr(args, "fault_variants", None) or []:
        name, eq, items = text.partition("=")
        if not eq or not name.strip():
            raise SimError(f"--faults-variant '{text}': expected NAME=PARTS, e.g. one-spine=spine:0 or healthy=")
        from topo.faults import parse_variant_items
        parse_variant_items(items, f"--faults-variant {name.strip()}")
        out.append((name.strip(), items))
    from sim.inputs import unique_names
    return unique_names(out, "--faults-variant")


def with_variant(job: dict, name: str, items: str) -> dict:
    """A copy of `job` with a compare variant's fault items added to its own faults."""
    spec = dict(job.get("faults") or {"fail": [], "degrade": [], "files": []})
    spec["items"] = list(spec.get("items") or []) + [(name, items)]
    return dict(job, faults=spec)


def check_job_faults(job: dict) -> None:
    """Resolve a job's fault names against its topology (one-line error), without simulating."""
    if not job.get("faults"):
        return
    from sim.commands import build_inputs
    _, topology, _ = build_inputs(job)
    apply_job_faults(job, topology)


def apply_job_faults(job: dict, topology):
    """(topology with the job's faults applied, FaultSet); the topology itself without faults."""
    faults = job_fault_set(job)
    if not faults:
        return topology, faults
    from topo.faults import apply_faults
    return apply_faults(topology, faults), faults


# ---------------------------------------------------------------- placeability
def _reach_sets(t, gpus) -> dict[int, frozenset]:
    """Per GPU of `gpus`: the components it reaches others through (('net', switch comp) / ('host', comp))."""
    from topo.model import DisjointSets, is_network_switch
    nodes = t.nodes
    sets = DisjointSets(len(nodes))
    net = [is_network_switch(n) for n in nodes]
    hostsw = [n.kind == "nvswitch" or n.tier == "pcie" for n in nodes]
    for lk in t.links:
        if (net[lk.src] and net[lk.dst]) or (hostsw[lk.src] and hostsw[lk.dst]):
            sets.union(lk.src, lk.dst)
    out = {}
    for g in gpus:
        reach = {("net", sets.find(p[-1])) for p in t.gpu_ports(g)}
        reach |= {("host", sets.find(lk.dst)) for lk in t.out_links(g) if hostsw[lk.dst]}
        out[g] = frozenset(reach)
    return out


def _lost_exit(healthy, resolved, gpu: int) -> str | None:
    """The fault that took the network exits of `gpu` (None if it had none or still has one)."""
    from topo.faults import _cable_ids
    cable_of = _cable_ids(healthy)
    for p in healthy.gpu_ports(gpu):
        for a, b in zip(p, p[1:]):
            lid = healthy._link(a, b).id
            part = resolved.cable_fault.get(cable_of[lid])
            if part is not None and resolved.cable_factor.get(cable_of[lid]) == 0.0:
                return part
    return None


def check_placeable(healthy, faults, topology, placement) -> None:
    """SimError (one line) when the job of `placement` cannot run on `topology`, which is `healthy`
    with the topo.faults.FaultSet `faults` applied."""
    if not faults:
        return
    from topo.faults import resolve_faults
    resolved = resolve_faults(healthy, faults)
    gpus = [int(g) for g in placement.gpus]
    rank_of = {g: r for r, g in enumerate(gpus)}
    gps = int(topology.gpus_per_server)
    for g in gpus:
        part = resolved.failed_nodes.get(g)
        if part is not None:
            raise SimError(f"job unplaceable: rank {rank_of[g]} runs on GPU {g} (server {g // gps}), which failed "
                           f"({part})")
    reach = _reach_sets(topology, gpus)
    from sim.placement import _DENSE_KINDS, _EXPERT_KINDS
    for kind in list(_DENSE_KINDS) + list(_EXPERT_KINDS) + ["embedding"]:
        for row in placement.groups(kind):
            if len(row) < 2:
                continue
            common = frozenset.intersection(*(reach[g] for g in row))
            if common:
                continue
            distinct: dict[frozenset, int] = {}
            for g in row:
                distinct.setdefault(reach[g], g)
            items = list(distinct.items())
            for i, (ra, a) in enumerate(items):
                for rb, b in items[i + 1:]:
                    if not ra & rb:
                        _unreachable(healthy, resolved, kind, a, b, rank_of)


def _unreachable(healthy, resolved, kind: str, a: int, b: int, rank_of: dict) -> None:
    gps = int(healthy.gpus_per_server)
    for g in (a, b):
        part = _lost_exit(healthy, resolved, g)
        if part is not None:
            raise SimError(f"job unplaceable: GPU {g} (rank {rank_of[g]}, server {g // gps}) lost its network "
                           f"link ({part} failed) and its {kind} group needs GPU {b if g == a else a}")
    parts = sorted({p for c, p in resolved.cable_fault.items() if resolved.cable_factor.get(c) == 0.0})
    raise SimError(f"job unplaceable: no route left between GPU {a} (server {a // gps}) and GPU {b} "
                   f"(server {b // gps}) of one {kind} group; failed: {', '.join(parts)}")
