"""topo.Topology's whole-topology tables (link_arrays, nvlink_domains, rails, the GPU ports filled for
all GPUs at once) against plain per-object computations written here."""

from __future__ import annotations

import pytest

from topo.model import is_network_switch
from topo.templates import build

CASES = [("spectrum-x", {"gpus": 64}), ("dcn+", {"gpus": 32}), ("alibaba-hpn", {"gpus": 64}), ("nvl72", {}),
         ("pcie", {"gpus": 16}), ("fat-tree", {"gpus": 64}), ("multi-pod", {"gpus": 4608})]


def _bfs_ports(t, adj, gpu):
    """Shortest exits GPU -> [PCIe switch / NIC ...] -> first network switch (a NIC forwards only from
    its host side), every shortest one, in link order."""
    level, seen = [(gpu,)], {gpu}
    while level:
        found, nxt = [], []
        for path in level:
            here = t.nodes[path[-1]]
            for v in adj.get(path[-1], []):
                node = t.nodes[v]
                if is_network_switch(node):
                    found.append(path + (v,))
                elif v not in seen and (node.kind == "nic" or node.tier == "pcie") and here.kind != "nic":
                    seen.add(v)
                    nxt.append(path + (v,))
        if found:
            return found
        level = nxt
    return []


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
def test_whole_topology_tables_match_per_object_computations(name, kw):
    t = build(name, **kw)
    la = t.link_arrays()
    assert la.src.tolist() == [lk.src for lk in t.links]
    assert la.dst.tolist() == [lk.dst for lk in t.links]
    assert la.bandwidth_Bps.tolist() == [float(lk.bandwidth_Bps) for lk in t.links]
    assert la.latency_s.tolist() == [float(lk.latency_s) for lk in t.links]
    assert la.health.tolist() == [lk.capacity_factor * (1.0 - lk.error_rate) for lk in t.links]
    assert la.kind == [lk.kind for lk in t.links]
    # NVLink components numbered by their lowest GPU
    comp = list(range(len(t.nodes)))

    def find(x):
        while comp[x] != x:
            x = comp[x]
        return x
    for lk in t.links:
        if lk.kind == "nvlink":
            a, b = find(lk.src), find(lk.dst)
            comp[max(a, b)] = min(a, b)
    number = {}
    assert t.nvlink_domains() == [number.setdefault(find(g), len(number)) for g in range(t.num_gpus)]
    adj = {}
    for lk in t.links:
        adj.setdefault(lk.src, []).append(lk.dst)
    for g in range(t.num_gpus):
        assert t.gpu_ports(g) == _bfs_ports(t, adj, g), g
    assert t.rails() == [t.rail_of(g) for g in range(t.num_gpus)]
