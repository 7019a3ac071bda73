"""Failed and degraded parts of a fabric: `apply_faults(topology, faults) -> Topology` (a pure function).

A fault names a part of the topology and a capacity factor: 0 = failed (its cables are removed, so
routing, which is built from the new topology, runs ECMP over the surviving links only), a factor in
(0, 1) = degraded (each of its cables keeps that share of its capacity: Link.capacity_factor, which
netsim multiplies into the channel capacity after the calibrated efficiency).

Part names (case-insensitive; ids are the topology's node ids, as in its SimAI file):
  N | node:N          any node by id
  gpu:N               GPU N (its cables)
  server:N            server N: its GPUs and the host-side parts (NICs, PCIe switches, NVSwitch chips)
                      that serve only this server
  nic:N               the N-th NIC node (id order); nic:gpuN the NIC(s) GPU N leaves through (in the
                      SimAI model, where a GPU is its own NIC endpoint, its network cables)
  tor:N | leaf:N | asw:N    the N-th ToR / leaf switch (id order); spine:N | agg:N | psw:N the N-th
                      spine; core:N | csw:N the N-th core switch; t4:N ... higher tiers; nvswitch:N, pcie:N
  link:A-B            every cable between parts A and B (each a node name above that is one node)
Several faults on one cable multiply their factors; any failure removes it.

Modelled: loss of capacity and of paths. Ignored: the time to detect a failure and reconverge,
packet loss during it, and NCCL's own reaction (it aborts on a lost NIC; the job is then unplaceable).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from topo.errors import TopoError
from topo.model import DisjointSets, Topology, is_host_side, is_network_switch

TIER_ALIASES = {"tor": "asw", "leaf": "asw", "edge": "asw", "asw": "asw", "spine": "psw", "agg": "psw",
                "psw": "psw", "core": "csw", "csw": "csw", "nvswitch": "nvswitch", "pcie": "pcie"}
_NAMES_HINT = "names: gpu:N, server:N, nic:N, nic:gpuN, tor:N, spine:N, core:N, node:ID, link:A-B"


@dataclass(frozen=True)
class Fault:
    """One failed (factor 0) or degraded (0 < factor < 1) part; `source` says where it was given."""
    part: str
    factor: float = 0.0
    source: str = "--fail"

    def describe(self) -> str:
        return f"{self.part} failed" if self.factor == 0.0 else f"{self.part} at {self.factor:g} of its capacity"


@dataclass(frozen=True)
class FaultSet:
    faults: tuple[Fault, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.faults)

    def __add__(self, other: FaultSet) -> FaultSet:
        return FaultSet(self.faults + other.faults)

    def describe(self) -> str:
        return "; ".join(f.describe() for f in self.faults) if self.faults else "healthy"


@dataclass(frozen=True)
class ResolvedFaults:
    """What a FaultSet does to one topology: cable id -> capacity factor (0 = removed) and the fault
    that set it; node id -> fault for failed nodes (every cable of theirs is removed)."""
    cable_factor: dict = field(default_factory=dict)
    cable_fault: dict = field(default_factory=dict)
    failed_nodes: dict = field(default_factory=dict)


# ---------------------------------------------------------------- parsing
def _factor(text, where: str) -> float:
    try:
        f = float(text)
    except (TypeError, ValueError):
        raise TopoError(f"{where}: factor must be a number in (0, 1), got {text!r}") from None
    if not 0.0 < f < 1.0 or not math.isfinite(f):
        raise TopoError(f"{where}: factor must be in (0, 1) (use --fail for a failed part), got {f:g}")
    return f


def _part_text(text, where: str) -> str:
    part = str(text).strip() if text is not None else ""
    if not part or any(c.isspace() for c in part):
        raise TopoError(f"{where}: expected a part name ({_NAMES_HINT}), got {str(text)!r}")
    return part


def parse_fail(spec: str, source: str = "--fail") -> Fault:
    return Fault(_part_text(spec, f"{source} '{spec}'"), 0.0, source)


def parse_degrade(spec: str, source: str = "--degrade") -> Fault:
    """'PART=FACTOR' -> a degraded part."""
    part, eq, factor = str(spec).rpartition("=")
    where = f"{source} '{spec}'"
    if not eq:
        raise TopoError(f"{where}: expected PART=FACTOR, e.g. link:3-40=0.5")
    return Fault(_part_text(part, where), _factor(factor, where), source)


def load_fault_file(path: str | Path) -> FaultSet:
    """A YAML or JSON file: {fail: [PART, ...], degrade: {PART: FACTOR, ...}} (both optional)."""
    p = Path(path)
    if not p.is_file():
        raise TopoError(f"{p}: fault file not found")
    text = p.read_text()
    try:
        if p.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            import yaml
            data = yaml.safe_load(text)
    except Exception as exc:   # yaml / json syntax errors: one line with the parser's position
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise TopoError(f"{p}: not a valid fault file ({first})") from None
    if data is None:
        return FaultSet()
    if not isinstance(data, dict) or set(data) - {"fail", "degrade"}:
        extra = sorted(set(data) - {"fail", "degrade"}) if isinstance(data, dict) else None
        raise TopoError(f"{p}: expected keys 'fail' (list of parts) and 'degrade' (part: factor)"
                        + (f", got unknown key '{extra[0]}'" if extra else ""))
    fail = data.get("fail") or []
    if isinstance(fail, str):
        fail = [fail]
    if not isinstance(fail, list):
        raise TopoError(f"{p}: 'fail' must be a list of part names")
    degrade = data.get("degrade") or {}
    if not isinstance(degrade, dict):
        raise TopoError(f"{p}: 'degrade' must map part names to factors, e.g. 'link:3-40: 0.5'")
    out = [Fault(_part_text(x, f"{p}: fail"), 0.0, str(p)) for x in fail]
    out += [Fault(_part_text(k, f"{p}: degrade"), _factor(v, f"{p}: degrade '{k}'"), str(p))
            for k, v in degrade.items()]
    return FaultSet(tuple(out))


def fault_set(fail=(), degrade=(), files=()) -> FaultSet:
    """FaultSet from --fail specs, --degrade PART=FACTOR specs and fault files."""
    out = FaultSet(tuple(parse_fail(s) for s in fail or ()) + tuple(parse_degrade(s) for s in degrade or ()))
    for f in files or ():
        out = out + load_fault_file(f)
    return out


def parse_variant_items(text: str, source: str) -> FaultSet:
    """Comma-separated items: PART (failed), PART=FACTOR (degraded) or a fault file path; '' = healthy."""
    out = FaultSet()
    for item in (x.strip() for x in text.split(",")):
        if not item:
            continue
        if Path(item).is_file():
            out = out + load_fault_file(item)
        elif "=" in item:
            out = out + FaultSet((parse_degrade(item, source),))
        else:
            out = out + FaultSet((parse_fail(item, source),))
    return out


# ---------------------------------------------------------------- names -> nodes / cables
def _cable_ids(t: Topology) -> list[int]:
    """Cable of each link: links 2k and 2k+1 when the topology pairs them (topo.model), else the link."""
    links = t.links
    paired = len(links) % 2 == 0 and all(
        a.src == b.dst and a.dst == b.src for a, b in zip(links[0::2], links[1::2]))
    return [i // 2 for i in range(len(links))] if paired else list(range(len(links)))


def _tier_nodes(t: Topology, tier: str) -> list[int]:
    cache = t._cache.setdefault("fault_tiers", {})
    got = cache.get(tier)
    if got is None:
        got = cache[tier] = [n.id for n in t.nodes if n.tier == tier and (tier in ("gpu", "nic", "nvswitch", "pcie")
                                                                          or is_network_switch(n))]
    return got


def _index(text: str, what: str, count: int, where: str, t: Topology) -> int:
    if not text.isdigit():
        raise TopoError(f"{where}: '{text}' is not a {what} index (valid here: {valid_names(t)})")
    i = int(text)
    if i >= count:
        raise TopoError(f"{where}: no {what} {i} in this topology (valid here: {valid_names(t)})")
    return i


def valid_names(t: Topology) -> str:
    """One line: the part names this topology accepts."""
    parts = [f"gpu:0..{t.num_gpus - 1}", f"server:0..{t.num_servers - 1}"]
    nics = _tier_nodes(t, "nic")
    parts.append(f"nic:0..{len(nics) - 1}, nic:gpuN" if nics else "nic:gpuN")
    names = {"asw": "tor", "psw": "spine", "csw": "core"}
    for tier in t.network_tiers() + ["nvswitch", "pcie"]:
        n = len(_tier_nodes(t, tier))
        if n:
            parts.append(f"{names.get(tier, tier)}:0..{n - 1}")
    parts += [f"node:0..{len(t.nodes) - 1}", "link:A-B"]
    return ", ".join(parts)


def _one_node(t: Topology, name: str, where: str) -> list[int]:
    """Node ids a node name stands for (server:N and nic:gpuN may be several)."""
    low = name.strip().lower()
    kind, colon, rest = low.partition(":")
    if not colon:
        kind, rest = "node", low
    if kind == "node":
        return [_index(rest, "node", len(t.nodes), where, t)]
    if kind == "gpu":
        return [_index(rest, "gpu", t.num_gpus, where, t)]
    if kind == "server":
        return _server_nodes(t, _index(rest, "server", t.num_servers, where, t))
    if kind == "nic":
        if rest.startswith("gpu"):
            g = _index(rest[3:], "gpu", t.num_gpus, where, t)
            ports = t.gpu_ports(g)
            if not ports:
                raise TopoError(f"{where}: GPU {g} has no network link")
            # the NIC node before the switch; a GPU that is its own endpoint stands for its NIC
            return sorted({p[-2] for p in ports})
        nics = _tier_nodes(t, "nic")
        if not nics:
            raise TopoError(f"{where}: this topology has no NIC nodes (each GPU is its own NIC endpoint): "
                            "use nic:gpuN or gpu:N")
        return [nics[_index(rest, "nic", len(nics), where, t)]]
    tier = TIER_ALIASES.get(kind) or (kind if kind[:1] == "t" and kind[1:].isdigit() else None)
    if tier is None:
        raise TopoError(f"{where}: unknown part kind '{kind}' (valid here: {valid_names(t)})")
    ids = _tier_nodes(t, tier)
    if not ids:
        raise TopoError(f"{where}: this topology has no '{kind}' switches (valid here: {valid_names(t)})")
    return [ids[_index(rest, kind, len(ids), where, t)]]


def _server_nodes(t: Topology, server: int) -> list[int]:
    """GPUs of the server and the host-side nodes whose host-side component serves only this server."""
    gpus = set(t.gpus_of_server(server))
    owners = t._cache.get("fault_host_owner")
    if owners is None:
        nodes = t.nodes
        sets = DisjointSets(len(nodes))
        host = [is_host_side(n) for n in nodes]
        for lk in t.links:
            # NVSwitch chips join GPUs only: joining them with NICs would merge whole NVL racks
            if host[lk.src] and host[lk.dst] and nodes[lk.src].kind != "nvswitch" and nodes[lk.dst].kind != "nvswitch":
                sets.union(lk.src, lk.dst)
        servers: dict[int, set[int]] = {}
        for lk in t.links:
            if host[lk.src] and lk.dst < t.num_gpus:
                servers.setdefault(sets.find(lk.src), set()).add(lk.dst // t.gpus_per_server)
        owners = {}
        for n in nodes:
            if host[n.id]:
                s = servers.get(sets.find(n.id), set())
                if len(s) == 1:
                    owners[n.id] = next(iter(s))
        t._cache["fault_host_owner"] = owners
    return sorted(gpus) + sorted(n for n, s in owners.items() if s == server)


def _parts(t: Topology, fault: Fault, cable_of: list[int]) -> tuple[list[int], set[int]]:
    """(failed/degraded node ids, cable ids) of one fault."""
    where = f"{fault.source} '{fault.part}'" if fault.source.startswith("-") else f"{fault.source}: '{fault.part}'"
    low = fault.part.lower()
    if low.startswith("link:"):
        a_name, dash, b_name = fault.part[5:].partition("-")
        if not dash or not a_name or not b_name:
            raise TopoError(f"{where}: expected link:A-B with A, B node names, e.g. link:3-40 or link:tor:0-spine:1")
        a, b = _one_node(t, a_name, where), _one_node(t, b_name, where)
        if len(a) != 1 or len(b) != 1:
            raise TopoError(f"{where}: each end of a link must be one node")
        cables = {cable_of[lk.id] for lk in t.out_links(a[0]) if lk.dst == b[0]}
        cables |= {cable_of[lk.id] for lk in t.out_links(b[0]) if lk.dst == a[0]}
        if not cables:
            raise TopoError(f"{where}: nodes {a[0]} and {b[0]} are not linked (see `clustersim topo info`)")
        return [], cables
    nodes = _one_node(t, fault.part, where)
    if low.startswith("nic:gpu") and nodes[0] < t.num_gpus:
        # SimAI model: the GPU is its own NIC endpoint; its NIC is its network cables, not the GPU
        g = nodes[0]
        return [], {cable_of[lk.id] for lk in t.links
                    if (lk.src == g and is_network_switch(t.nodes[lk.dst]))
                    or (lk.dst == g and is_network_switch(t.nodes[lk.src]))}
    cables = set()
    for n in nodes:
        for lk in t.out_links(n):
            cables.add(cable_of[lk.id])
    # reverse links of an unpaired topology
    if len(set(cable_of)) == len(cable_of):
        wanted = set(nodes)
        cables |= {cable_of[lk.id] for lk in t.links if lk.dst in wanted}
    return nodes, cables


def resolve_faults(t: Topology, faults: FaultSet) -> ResolvedFaults:
    """Check every name against `t` (one-line TopoError naming the fault and the valid names) and work
    out the capacity factor of each affected cable."""
    cable_of = _cable_ids(t)
    factor: dict[int, float] = {}
    culprit: dict[int, str] = {}
    failed: dict[int, str] = {}
    for f in faults.faults:
        nodes, cables = _parts(t, f, cable_of)
        if f.factor == 0.0:
            for n in nodes:
                failed.setdefault(n, f.part)
        for c in sorted(cables):
            before = factor.get(c, 1.0)
            factor[c] = before * f.factor
            # the first failure that removed a cable names it; else the first degradation
            if (f.factor == 0.0 and before != 0.0) or c not in culprit:
                culprit[c] = f.part
    return ResolvedFaults(factor, culprit, failed)


def apply_faults(t: Topology, faults: FaultSet) -> Topology:
    """`t` with failed cables removed (link ids renumbered, cable pairs kept) and degraded cables at
    their capacity factor; nodes and their ids are kept (a failed node is left without cables)."""
    if not faults:
        return t
    res = resolve_faults(t, faults)
    cable_of = _cable_ids(t)
    links = []
    for lk in t.links:
        f = res.cable_factor.get(cable_of[lk.id], 1.0)
        if f == 0.0:
            continue
        links.append(replace(lk, id=len(links), capacity_factor=lk.capacity_factor * f))
    removed = sum(1 for v in res.cable_factor.values() if v == 0.0)
    degraded = len(res.cable_factor) - removed
    note = f"faults: {faults.describe()} ({removed} cable(s) removed, {degraded} degraded)"
    return replace(t, links=tuple(links), notes=tuple(t.notes) + (note,))
