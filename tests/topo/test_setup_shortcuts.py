"""Set-up shortcuts of a simulation (issue 16): nodes made on first use with per-node columns kept by the
builder (topo.model.LazyNodes / NodeArrays), the builder's link groups and array cables, netsim.TopoView's
node tables read from those columns, and distance rows of twin switches (topo.Router._twin_of). Each is
compared with a plain computation written here."""

from __future__ import annotations

import dataclasses
import pickle
import random
from collections import deque

import numpy as np
import pytest

from netsim.topoview import TopoView, _efficiencies
from topo.model import LazyNodes, Node, NodeArrays, Topology, _node_arrays, is_network_switch, node_arrays_of
from topo.routing import Router
from topo.templates import build

FABRICS = [("spectrum-x", {"gpus": 128}), ("multi-pod", {"gpus": 4608}), ("dcn+", {"gpus": 64}),
           ("alibaba-hpn", {"gpus": 128, "dual_tor": True}), ("non-rail", {"gpus": 64}),
           ("rail-optimized", {"gpus": 64}), ("fat-tree", {"gpus": 64}), ("nvl72", {}), ("pcie", {"gpus": 16}),
           ("spectrum-x", {"gpus": 64, "nics": True, "gpus_per_nic": 2}),
           ("multi-pod", {"gpus": 512, "nics_per_asw": 8, "segments_per_pod": 2, "psw_count": 4})]
IDS = [f"{t}-{i}" for i, (t, _) in enumerate(FABRICS)]


def _role(n: Node) -> int:
    if n.kind == "switch" and n.tier != "pcie":
        return 1
    return 2 if n.kind == "nic" or n.tier == "pcie" else 0


@pytest.mark.parametrize("template,params", FABRICS, ids=IDS)
def test_built_node_columns_equal_the_nodes(template, params):
    t = build(template, **params)
    assert isinstance(t.nodes, LazyNodes) and t.nodes._items is None
    na = t.node_arrays()
    assert t.nodes._items is None and len(t.nodes) == len(na)      # the columns need no Node objects
    nodes = tuple(t.nodes)
    assert [n.id for n in nodes] == list(range(len(nodes)))
    assert [(na.kinds[k], na.tiers[r]) for k, r in zip(na.kind.tolist(), na.tier.tolist())] == \
        [(n.kind, n.tier) for n in nodes]
    # names in first-seen order, as the plain computation numbers them
    assert na.kinds == tuple(dict.fromkeys(n.kind for n in nodes)) and na.kind.dtype == np.int64
    assert na.tiers == tuple(dict.fromkeys(n.tier for n in nodes))
    plain = _node_arrays(nodes)
    assert (plain.kinds, plain.tiers) == (na.kinds, na.tiers)
    assert np.array_equal(plain.kind, na.kind) and np.array_equal(plain.tier, na.tier)
    assert na.network_switches().tolist() == [is_network_switch(n) for n in nodes]
    assert na.host_switches().tolist() == [n.kind == "nvswitch" or n.tier == "pcie" for n in nodes]
    # GPUs first, as the model promises
    assert [n.kind for n in nodes[:t.num_gpus]] == ["gpu"] * t.num_gpus


def test_lazy_nodes_behave_as_the_tuple():
    t = build("spectrum-x", gpus=64)
    nodes = t.nodes
    plain = tuple(nodes)
    assert nodes == plain and plain == nodes and hash(nodes) == hash(plain) and not (nodes != plain)
    assert nodes[3] == Node(3, "gpu", "gpu") and nodes[-1] == plain[-1] and isinstance(nodes[:4], tuple)
    assert pickle.loads(pickle.dumps(nodes)) == plain and pickle.loads(pickle.dumps(t)) == t
    other = dataclasses.replace(t, nodes=plain, links=tuple(t.links))
    assert other == t and hash(other) == hash(t)
    # the copy recomputes the columns from its Node tuple: the same codes
    assert other.node_arrays() is not t.node_arrays()
    assert np.array_equal(other.node_arrays().kind, t.node_arrays().kind)
    assert other.nodes_of_tier("asw") == t.nodes_of_tier("asw") == [n.id for n in plain if n.tier == "asw"]


def test_node_columns_of_objects_with_gaps_in_their_ids():
    class Fake:
        nodes = [Node(0, "gpu", "gpu"), Node(3, "switch", "asw"), Node(2, "nic", "nic")]
    na = node_arrays_of(Fake())
    assert isinstance(na, NodeArrays) and len(na) == 4
    assert [na.kinds[k] for k in na.kind.tolist()] == ["gpu", "", "nic", "switch"]
    assert na.network_switches().tolist() == [False, False, False, True]
    assert na.kind_is("nvswitch").tolist() == [False] * 4     # a kind no node has


@pytest.mark.parametrize("template,params", FABRICS, ids=IDS)
def test_link_groups_share_their_columns_and_efficiencies(template, params):
    t = build(template, **params)
    la = t.link_arrays()
    group, n = la.groups
    assert group.dtype == np.int64 and len(group) == len(la.src) and group.max() < n
    for g in np.unique(group).tolist():
        sel = np.flatnonzero(group == g)
        for col in (la.bandwidth_Bps, la.latency_s, la.health):
            assert (col[sel] == col[sel[0]]).all()
        assert len({la.kind[i] for i in sel.tolist()}) == 1
    # per group = per distinct (kind, rate), with or without a calibration's override
    for override in ({}, {"network": 0.5}):
        got = _efficiencies(la.kind, la.bandwidth_Bps, "H100", override, la.kind_codes, la.groups)[0]
        want = _efficiencies(la.kind, la.bandwidth_Bps, "H100", override)[0]
        assert np.array_equal(got, want)


def _cables(t: Topology) -> list[tuple[int, int]]:
    la = t.link_arrays()
    return list(zip(la.src[0::2].tolist(), la.dst[0::2].tolist()))


def test_spine_and_core_cables_in_asw_major_and_psw_major_order():
    t = build("multi-pod", gpus=512, nics_per_asw=8, segments_per_pod=2, psw_count=4)
    tier = {n.id: n.tier for n in t.nodes}
    asw = [i for i in tier if tier[i] == "asw"]
    psw = [i for i in tier if tier[i] == "psw"]
    csw = [i for i in tier if tier[i] == "csw"]
    pods = len(psw) // 4
    per_pod = len(asw) // pods
    want = [(a, psw[(k // per_pod) * 4 + q]) for k, a in enumerate(asw) for q in range(4)]
    per_group = len(csw) // 4
    want += [(psw[p * 4 + j], csw[j * per_group + c]) for p in range(pods) for j in range(4) for c in range(per_group)]
    cables = [c for c in _cables(t) if tier[c[0]] in ("asw", "psw")]
    assert cables == want
    # dual ToR: every ASW of both banks to every PSW; dual plane: bank 1 to the first half, bank 2 the second
    for plane, halves in ((False, False), (True, True)):
        t = build("alibaba-hpn", gpus=128, dual_tor=True, dual_plane=plane)
        tier = {n.id: n.tier for n in t.nodes}
        asw = [i for i in tier if tier[i] == "asw"]
        psw = [i for i in tier if tier[i] == "psw"]
        half, bank = len(psw) // 2, len(asw) // 2
        want = [(a, q) for k, a in enumerate(asw)
                for q in ((psw[:half] if k < bank else psw[half:]) if halves else psw)]
        assert [c for c in _cables(t) if tier[c[0]] == "asw" and tier[c[1]] == "psw"] == want


@pytest.mark.parametrize("template,params", FABRICS, ids=IDS)
def test_topoview_node_tables_equal_the_nodes(template, params):
    t = build(template, **params)
    view = TopoView(t)
    nodes = tuple(t.nodes)
    assert [view.is_network_switch(n.id) for n in nodes] == [is_network_switch(n) for n in nodes]
    assert not view.is_network_switch(len(nodes)) and not view.is_network_switch(-1)
    assert view._roles()[:len(nodes)].tolist() == [_role(n) for n in nodes]
    for g in range(0, t.num_gpus, max(1, t.num_gpus // 8)):
        want_up = [lk.id for lk in t.out_links(g) if nodes[lk.dst].kind == "nvswitch"]
        assert view.switch_channels(g)[0] == want_up


def test_topoview_of_a_topology_like_object_reads_its_nodes():
    t = build("spectrum-x", gpus=16)

    class Like:      # not a topo.Topology: its nodes are read one by one
        num_gpus, gpus_per_server, gpu_type, nvlink_domain_size = t.num_gpus, 8, "H100", 8
        nodes, links, name = tuple(t.nodes), tuple(t.links), "like"

        def server_of(self, g):
            return g // 8

        def nvlink_domain_of(self, g):
            return g // 8

    view, ref = TopoView(Like(), routing="ecmp"), TopoView(t, routing="ecmp")
    assert np.array_equal(view._roles(), ref._roles()) and view._nvsw_list == ref._nvsw_list
    assert view.exits(3) == ref.exits(3) and view.switch_channels(9) == ref.switch_channels(9)


# ---- twin switches ------------------------------------------------------------------------------
def _plain_dist_to(t: Topology, switch: int) -> dict[int, int]:
    """Hop counts from every network switch to `switch` over switch-to-switch links (plain BFS)."""
    net = {n.id for n in t.nodes if is_network_switch(n)}
    into: dict[int, list[int]] = {}
    for lk in t.links:
        if lk.src in net and lk.dst in net:
            into.setdefault(lk.dst, []).append(lk.src)
    dist = {switch: 0}
    todo = deque([switch])
    while todo:
        v = todo.popleft()
        for u in into.get(v, []):
            if u not in dist:
                dist[u] = dist[v] + 1
                todo.append(u)
    return {s: dist.get(s, -1) for s in net}


TWIN_FABRICS = [("multi-pod", {"gpus": 512, "nics_per_asw": 8, "segments_per_pod": 2, "psw_count": 4}),
                ("alibaba-hpn", {"gpus": 128, "dual_tor": True}), ("dcn+", {"gpus": 64}), ("fat-tree", {"gpus": 64}),
                ("spectrum-x", {"gpus": 128})]


@pytest.mark.parametrize("template,params", TWIN_FABRICS, ids=[t for t, _ in TWIN_FABRICS])
def test_twin_rows_equal_plain_searches(template, params):
    t = build(template, **params)
    r = Router(t)
    sws = r._sw_ids.tolist()
    rng = random.Random(3)
    order = sws[:]
    rng.shuffle(order)
    twins = [r._twin_of(s) for s in order]
    assert any(tw != s for s, tw in zip(order, twins))         # Clos ToRs of a pod are twins
    for s in order:
        want = _plain_dist_to(t, s)
        got = r.dist_to(s)
        assert got.dtype == np.int32 and got.tolist() == [want[x] for x in sws], s


@pytest.mark.parametrize("template,params", TWIN_FABRICS, ids=[t for t, _ in TWIN_FABRICS])
def test_twin_rows_of_searches_stopped_early_hold_exact_cells(template, params):
    t = build(template, **params)
    r = Router(t)
    sws = r._sw_ids.tolist()
    m = len(sws)
    rng = random.Random(5)
    asked = rng.sample(sws, min(len(sws), 12))
    want = np.zeros((len(asked), m), dtype=bool)
    for i in range(len(asked)):
        want[i, rng.sample(range(m), 3)] = True
    r._bfs_many(asked, want)
    rows = r._dist_table()
    for i, s in enumerate(asked):
        plain = _plain_dist_to(t, s)
        row = rows.rows[rows.slot[s]]
        full = np.array([plain[x] for x in sws])
        assert (row[want[i]] == full[want[i]]).all(), s         # every wanted cell found
        known = row >= 0
        assert np.array_equal(row[known], full[known]), s          # and every known cell exact
        if rows.done[rows.slot[s]]:
            assert np.array_equal(row, full) and np.array_equal(r._dist[s], full)
    # later full searches of the same switches agree
    for s in asked:
        assert r.dist_to(s).tolist() == [_plain_dist_to(t, s)[x] for x in sws]


def test_no_twins_without_paired_cables():
    t = build("spectrum-x", gpus=64)
    r = Router(t)
    r._paired = False
    assert all(r._twin_of(s) == s for s in r._sw_ids.tolist())


def test_a_twin_wanting_the_first_twin_gets_that_cell():
    # ToRs a, b of one pod are twins; b's search is a's, so b's wanted cell "from a" is a's cell "from b"
    t = build("multi-pod", gpus=512, nics_per_asw=8, segments_per_pod=2, psw_count=4)
    r = Router(t)
    asw = [n.id for n in t.nodes if n.tier == "asw"]
    a, b = asw[0], asw[1]
    assert r._twin_of(a) == a and r._twin_of(b) == a
    want = np.zeros((1, len(r._sw_ids)), dtype=bool)
    want[0, r._sw_index[a]] = True
    r._bfs_many([b], want)
    rows = r._dist_table()
    assert rows.rows[rows.slot[b]][r._sw_index[a]] == 2 == _plain_dist_to(t, b)[a]


def _plain_reverse(src: list[int], dst: list[int]):
    """L ^ 1 for every link when links come in twins and no two links join the same (src, dst), else None."""
    pairs = list(zip(src, dst))
    if not pairs or len(pairs) % 2 or len(set(pairs)) != len(pairs):
        return None
    if any(pairs[k] != pairs[k + 1][::-1] for k in range(0, len(pairs), 2)):
        return None
    return [i ^ 1 for i in range(len(pairs))]


@pytest.mark.parametrize("cables", [[(0, 1), (1, 2), (2, 0)], [(0, 1), (0, 1)], [(0, 1), (1, 0)], [(3, 3), (0, 1)],
                                    [(0, 1), (2, 1), (1, 2)], [(5, 0), (0, 4), (4, 5)]])
def test_paired_reverse_against_a_plain_pairing(cables):
    from netsim.topoview import _paired_reverse
    src = [x for a, b in cables for x in (a, b)]
    dst = [x for a, b in cables for x in (b, a)]
    got = _paired_reverse(np.array(src, dtype=np.int64), np.array(dst, dtype=np.int64))
    want = _plain_reverse(src, dst)
    assert (got is None and want is None) or got.tolist() == want
    # two links that are not each other's reverse (an even count): never paired
    src2, dst2 = src + [src[0], 900], dst + [900, dst[0]]
    assert _plain_reverse(src2, dst2) is None
    assert _paired_reverse(np.array(src2, dtype=np.int64), np.array(dst2, dtype=np.int64)) is None


COMPONENT_FABRICS = FABRICS + [("spectrum-x", {"gpus": 32, "nvswitch_per_server": 0}),
                               ("spectrum-x", {"gpus": 32, "nvswitch_per_server": 2}),
                               ("spectrum-x", {"gpus": 64, "nvlink_domain_size": 16}),
                               ("spectrum-x", {"gpus": 32, "nvswitch_chips": 4}),
                               ("nvl36", {"gpus": 72}), ("pcie", {"gpus": 16, "network": False})]


@pytest.mark.parametrize("template,params", COMPONENT_FABRICS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(COMPONENT_FABRICS)])
def test_builder_components_equal_label_propagation(template, params):
    from topo.model import _nvlink_domains
    from topo.routing import _host_components
    t = build(template, **params)
    known_domain, known_comp = t._cache["domain"], t._cache["host_components"]
    # the same fabric without the builder's tables: found from the links
    plain = dataclasses.replace(t)
    assert "domain" not in plain._cache and "host_components" not in plain._cache
    assert known_domain == _nvlink_domains(plain) == plain.nvlink_domains()
    hostsw = np.array([n.kind == "nvswitch" or n.tier == "pcie" for n in t.nodes], dtype=bool)
    assert known_comp == _host_components(plain, hostsw) == Router(plain)._comp == Router(t)._comp
    assert plain.host_components() == known_comp and t.host_components() is known_comp
    assert Router(plain)._comp is plain.host_components()      # the topology's list, not a copy
    assert all(type(x) is int for x in known_domain + known_comp)


@pytest.mark.parametrize("hi", [3, 1 << 16, 1 << 20])
def test_stable_order_is_a_stable_argsort(hi):
    from topo.model import stable_order
    rng = np.random.default_rng(hi)
    keys = rng.integers(0, hi, size=5000, dtype=np.int64)
    order = stable_order(keys)
    # sorted by key, ties in index order
    assert sorted(range(len(keys)), key=lambda i: (keys[i], i)) == order.tolist()


@pytest.mark.parametrize("template,params", FABRICS, ids=IDS)
def test_rail_array_is_rails(template, params):
    """The rail of each GPU written out from the wiring: the GPU's local index where every GPU is its own
    network endpoint; with NIC nodes, the index (in id order, within the server) of its first NIC: one
    NIC per two GPUs (gpus_per_nic=2), or two NICs per PCIe switch of four GPUs (pcie)."""
    t = build(template, **params)
    gps = t.gpus_per_server
    if template == "pcie":
        want = [2 * (g % gps // 4) for g in range(t.num_gpus)]
    elif params.get("nics"):
        want = [g % gps // params["gpus_per_nic"] for g in range(t.num_gpus)]
    else:
        want = [g % gps for g in range(t.num_gpus)]
    arr = t.rail_array()
    assert arr.dtype == np.int64 and arr.tolist() == want
    assert t.rails() == want and [t.rail_of(g) for g in range(t.num_gpus)] == want
    plain = dataclasses.replace(t)
    assert "rail_array" not in plain._cache
    assert plain.rail_array().tolist() == want and plain.rail_array() is plain.rail_array()     # cached
