"""Routing: SimAI semantics (hosts never forward, shortest paths, NVLink preferred), ECMP, PXN."""

from __future__ import annotations

import random
from collections import Counter

import networkx as nx
import pytest

from topo import Router, build


def _check_chain(t, path, src, dst):
    """Links form a chain src -> dst and no GPU other than src/dst is on it (except PXN)."""
    assert t.links[path[0]].src == src and t.links[path[-1]].dst == dst
    for a, b in zip(path, path[1:]):
        assert t.links[a].dst == t.links[b].src


def test_nvl72_intra_rack_pairs_use_nvswitch_only():
    t = build("nvl72", gpus=144)
    r = Router(t)
    nvs = {n.id for n in t.nodes if n.kind == "nvswitch"}
    for rack in range(2):
        gpus = range(rack * 72, rack * 72 + 72)
        for a in gpus:
            for b in gpus:
                if a == b:
                    continue
                p = r.path(a, b, flow_key=a * 131 + b)
                assert len(p) == 2
                assert t.links[p[0]].kind == "nvlink" and t.links[p[1]].kind == "nvlink"
                assert t.links[p[0]].dst in nvs
                _check_chain(t, p, a, b)
    # across racks the network is used
    p = r.path(0, 72)
    assert all(t.links[x].kind == "network" for x in p)


def _reference_hops(t, a, b):
    """Shortest hop count with GPUs as endpoints only (networkx on a graph without other GPUs),
    preferring the NVLink domain as SimAI does."""
    g = nx.DiGraph()
    for lk in t.links:
        if lk.src < t.num_gpus and lk.src != a:
            continue
        if lk.dst < t.num_gpus and lk.dst != b:
            continue
        g.add_edge(lk.src, lk.dst)
    return nx.shortest_path_length(g, a, b)


@pytest.mark.parametrize("template,params", [
    ("spectrum-x", dict(gpus=128)),
    ("alibaba-hpn", dict(gpus=256, dual_plane=True)),
    ("dcn+", dict(gpus=256, dual_tor=True)),
    ("fat-tree", dict(k=8)),
    ("multi-pod", dict(gpus=2048, nics_per_asw=16, psw_count=8, asw_per_psw=16)),
])
def test_paths_are_shortest_and_hosts_never_forward(template, params):
    t = build(template, **params)
    r = Router(t)
    rng = random.Random(3)
    for i in range(60):
        a, b = rng.randrange(t.num_gpus), rng.randrange(t.num_gpus)
        if a == b:
            continue
        p = r.path(a, b, flow_key=i)
        _check_chain(t, p, a, b)
        inner = [t.links[x].dst for x in p[:-1]]
        assert all(v >= t.num_gpus for v in inner)
        assert len(p) == _reference_hops(t, a, b)


def test_ecmp_is_deterministic_and_spreads():
    t = build("spectrum-x", gpus=128)
    r1, r2 = Router(t), Router(t)
    # GPU 0 (rail 0) to GPU 9 (rail 1, another server): ASW0 -> any of 64 PSWs -> ASW1
    paths = [r1.path(0, 9, k) for k in range(400)]
    assert paths == [r2.path(0, 9, k) for k in range(400)]
    spines = Counter(t.links[p[1]].dst for p in paths)
    assert len(spines) > 48  # 400 flows over 64 equal-cost spines
    assert all(len(p) == 4 for p in paths)


def test_same_rail_stays_under_one_tor_and_intra_server_uses_nvlink():
    t = build("spectrum-x", gpus=128)
    r = Router(t)
    p = r.path(0, 8)  # rail 0 of servers 0 and 1: same ASW
    assert [t.links[x].kind for x in p] == ["network", "network"]
    p = r.path(0, 7)
    assert [t.links[x].kind for x in p] == ["nvlink", "nvlink"]
    assert r.path(5, 5) == ()


def test_pxn_moves_to_the_rail_matched_gpu_first():
    t = build("spectrum-x", gpus=128)
    r = Router(t, pxn=True)
    p = r.path(0, 9)  # dst on rail 1: NVLink to GPU 1, then rail-1 ToR to GPU 9
    assert [t.links[x].kind for x in p] == ["nvlink", "nvlink", "network", "network"]
    assert t.links[p[1]].dst == 1 and t.links[p[2]].dst == t.tor_of(9)


def test_pcie_server_routes_inside_and_through_nics():
    t = build("pcie", gpus=16)
    r = Router(t)
    p = r.path(0, 7)  # two PCIe switches joined through the host
    assert [t.links[x].kind for x in p] == ["pcie", "pcie", "pcie"]
    p = r.path(0, 8)
    kinds = [t.nodes[t.links[x].dst].kind for x in p]
    assert kinds[1] == "nic" and kinds[-2] == "switch" and t.links[p[-1]].kind == "pcie"


def test_faithful_nvswitch_chips_spread_over_chips():
    t = build("spectrum-x", gpus=16, nvswitch_chips=4)
    r = Router(t)
    chips = {t.links[r.path(0, 1, k)[0]].dst for k in range(64)}
    assert len(chips) == 4
    assert t.links[r.path(0, 1)[0]].bandwidth_Bps == pytest.approx(360e9 / 4)


def test_lookups():
    t = build("alibaba-hpn", gpus=128)
    assert t.server_of(17) == 2 and t.rail_of(17) == 1
    assert t.tors_of(17) == (145, 153) and t.tor_of(17) == 145
    assert t.nvlink_domain_of(17) == 2
    n = build("nvl72", gpus=144)
    assert n.server_of(71) == 17 and n.nvlink_domain_of(71) == 0 and n.nvlink_domain_of(72) == 1
    s = build("spectrum-x", gpus=64, nics=True, gpus_per_nic=2)
    assert [s.rail_of(g) for g in range(8)] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert s.tor_of(0) == s.tor_of(9) != s.tor_of(2)
    with pytest.raises(IndexError):
        t.server_of(128)


def test_network_bandwidth_per_gpu():
    # the GPU is its own 400G endpoint (SimAI); a 400G NIC shared by 2 GPUs; AlibabaHPN 2 x 200G;
    # L40S: 4 GPUs behind one PCIe switch share its two 200G NICs
    assert build("spectrum-x", gpus=16).network_bandwidth_of(3) == 50e9
    assert build("spectrum-x", gpus=16, nics=True, gpus_per_nic=2).network_bandwidth_of(3) == 25e9
    assert build("alibaba-hpn", gpus=128).network_bandwidth_of(3) == 50e9
    assert build("pcie", gpus=16).network_bandwidth_of(3) == pytest.approx(2 * 25e9 / 4)


def test_ecmp_paths_enumerates_equal_cost_set():
    t = build("spectrum-x", gpus=128)
    r = Router(t)
    paths = r.ecmp_paths(0, 9, limit=1000)
    assert len(paths) == 64 and len(set(paths)) == 64  # one per PSW
    assert all(len(p) == 4 for p in paths)
    assert r.path(0, 9, 5) in paths
    chips = build("nvl72", gpus=72)
    assert len(Router(chips).ecmp_paths(0, 5)) == 18
    hpn = Router(build("alibaba-hpn", gpus=128))
    assert len(hpn.ecmp_paths(0, 8)) == 2  # same rail, two ToRs


def test_pxn_only_where_it_avoids_the_spine():
    t = build("dcn+", gpus=128)  # a server's GPUs share one ToR: PXN gains nothing
    r = Router(t, pxn=True)
    assert all(t.links[x].kind == "network" for x in r.path(0, 64 + 9))


def test_nic_bandwidth_per_gpu_sets_port_rate():
    t = build("spectrum-x", gpus=16, nics=True, gpus_per_nic=2, nic_bandwidth_per_gpu_Bps="400Gbps")
    assert t.network_bandwidth_of(0) == 50e9 and t.name == "Spectrum-X_16g_8gps_800Gbps_H100"
    hpn = build("alibaba-hpn", gpus=128, nic_bandwidth_per_gpu_Bps="800Gbps")  # 2 x 400G ports
    assert hpn.network_bandwidth_of(0) == 100e9
    assert {lk.bandwidth_Bps for lk in hpn.links if lk.src == 0 and lk.kind == "network"} == {50e9}


def test_rail_aligned_routes_keep_a_rail_in_its_plane():
    """rail_aligned=True (NCCL-like collectives): same-rail pairs pick next hops by D-mod-k on the
    destination NIC endpoint (e = server x rails + rail). On a k=16 fat tree (8 NICs per edge switch =
    one server) the edge switch has 8 up-links to aggregation switches 0..7 of its pod: rail r goes up
    to aggregation switch r, and a same-rail pair in another pod goes through core r*8 + (server mod 8)
    ((e // 8) mod 8 among the 8 cores of aggregation switch r). Pairs on different rails keep the hash."""
    t = build("fat-tree", gpus=128, k=16)
    plain, rail = Router(t), Router(t, rail_aligned=True)
    aggs = [n.id for n in t.nodes if n.tier == "psw"]          # pod by pod, 8 per pod
    cores = [n.id for n in t.nodes if n.tier == "csw"]         # aggregation j of a pod links cores j*8 .. j*8+7
    for src in range(0, 128, 3):
        for dst in range(128):
            if src // 8 == dst // 8:
                continue
            p = rail.path(src, dst, flow_key=src * 7 + dst)
            _check_chain(t, p, src, dst)
            assert len(p) == len(plain.path(src, dst, flow_key=src * 7 + dst))      # still shortest
            if src % 8 != dst % 8:
                assert p == plain.path(src, dst, flow_key=src * 7 + dst)             # cross-rail: ECMP hash
                continue
            up_agg = t.links[p[1]].dst
            assert up_agg in aggs and aggs.index(up_agg) % 8 == src % 8              # rail r -> aggregation r
            if src // 64 != dst // 64:                                               # across pods: via a core
                core = t.links[p[2]].dst
                assert cores.index(core) == (src % 8) * 8 + (dst // 8) % 8
            # the flow key does not matter for same-rail traffic
            assert rail.path(src, dst, flow_key=12345) == p


def test_rail_aligned_is_collision_free_for_ring_hops():
    """Every rail's ring over the 16 servers (hop s -> s+1): no directed link carries two hops."""
    t = build("fat-tree", gpus=128, k=16)
    rail = Router(t, rail_aligned=True)
    used = Counter()
    for r in range(8):
        for s in range(16):
            for lid in rail.path(s * 8 + r, ((s + 1) % 16) * 8 + r):
                used[lid] += 1
    assert max(used.values()) == 1
