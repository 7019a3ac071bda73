"""networkx export: node attributes kind/tier, edge attributes of the directed links."""

from __future__ import annotations

import networkx as nx

from topo.model import Topology


def to_networkx(t: Topology) -> nx.DiGraph | nx.MultiDiGraph:
    """Directed graph (MultiDiGraph if two links share endpoints). Edge attrs: id, bandwidth_Bps,
    latency_s, kind, error_rate. GPU nodes also carry server and rail."""
    multi = len({(lk.src, lk.dst) for lk in t.links}) != len(t.links)
    g = nx.MultiDiGraph() if multi else nx.DiGraph()
    for n in t.nodes:
        attrs = {"kind": n.kind, "tier": n.tier}
        if n.kind == "gpu":
            attrs.update(server=t.server_of(n.id), rail=t.rail_of(n.id))
        g.add_node(n.id, **attrs)
    for lk in t.links:
        g.add_edge(lk.src, lk.dst, id=lk.id, bandwidth_Bps=lk.bandwidth_Bps, latency_s=lk.latency_s,
                   kind=lk.kind, error_rate=lk.error_rate)
    return g
