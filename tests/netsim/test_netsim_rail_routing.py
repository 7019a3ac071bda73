"""NCCL-like rail-aligned routing of collective flows (make_backend(..., routing="rail"); the default
"auto" picks it on rail-optimized fabrics and the InfiniBand fat tree, ECMP hashing elsewhere).

A TP-8 job puts each data-parallel group on one rail (local GPU index r of every server). NCCL's rings
and trees join same-rail NICs, so on a rail-optimized fabric their traffic never leaves the rail switch,
and on a fabric without rail switches each rail stays in its own plane of the Clos (D-mod-k routes, no
hash collisions). Cross-rail traffic keeps ECMP hashing.
"""

from __future__ import annotations

import pytest

topo = pytest.importorskip("topo")

import netsim  # noqa: E402
from netsim import CollectiveRequest as Req  # noqa: E402

MiB = 1 << 20


def _dp_groups(t):
    gps = t.gpus_per_server
    return [tuple(range(r, t.num_gpus, gps)) for r in range(gps)]


def _tiers_of(net, flows):
    view = net.planner.view
    tiers = set()
    for f in flows:
        for c in f.channels:
            for node in (int(view.ch_src[c]), int(view.ch_dst[c])):
                tiers.add(view.topology.nodes[node].tier)
    return tiers


def _run_together(net, reqs):
    ends = []
    for r in reqs:
        net.submit(r, 0.0, ends.append)
    net.run_until_idle()
    return ends


@pytest.mark.parametrize("alg", ["ring", "tree"])
def test_tp8_dp_collectives_on_rail_optimized_fabric_never_cross_spines(alg):
    """Spectrum-X, 16 servers in one segment: every rail switch holds one rail of all servers."""
    t = topo.build("spectrum-x", gpus=128)
    net = netsim.make_backend("flow", t)
    groups = _dp_groups(t)
    for g in groups:
        plan = net.planner.plan("all_reduce", alg, "simple", g)
        assert _tiers_of(net, plan.flows) <= {"gpu", "nvswitch", "asw"}      # no "psw": no spine crossing
    alone = net.estimate(Req("all_reduce", groups[0], 256 * MiB, alg))
    ends = _run_together(net, [Req("all_reduce", g, 256 * MiB, alg) for g in groups])
    assert max(ends) == pytest.approx(alone, rel=1e-9)                     # the 8 rails never meet


def test_tp8_dp_collectives_on_fat_tree_stay_in_their_rail_plane():
    """k=16 fat tree, 128 A100 with HDR NICs (the fabric of reference/calibration.md case 1): one server
    per edge switch, so every DP hop crosses an aggregation switch. Rail r uses only aggregation
    switch r of each pod (its plane) and the 8 rails' rings never share a link: the 8 concurrent
    all-reduces take exactly the time of one. With per-flow hashing (routing="ecmp") they collide."""
    t = topo.build("fat-tree", gpus=128, gpu_type="A100", nic_bandwidth_Bps="200Gbps")
    aggs = [n.id for n in t.nodes if n.tier == "psw"]
    net = netsim.make_backend("flow", t)
    groups = _dp_groups(t)
    for r, g in enumerate(groups):
        plan = net.planner.plan("all_reduce", "ring", "simple", g)
        view = net.planner.view
        used = {int(view.ch_dst[c]) for f in plan.flows for c in f.channels} | \
               {int(view.ch_src[c]) for f in plan.flows for c in f.channels}
        planes = {aggs.index(x) % 8 for x in used if x in aggs}
        assert planes == {r}
    size = 256 * MiB
    reqs = [Req("all_reduce", g, size, "ring") for g in groups]
    alone = net.estimate(reqs[0])
    assert max(_run_together(net, reqs)) == pytest.approx(alone, rel=1e-9)
    ecmp = netsim.make_backend("flow", t, routing="ecmp")
    assert ecmp.estimate(reqs[0]) == pytest.approx(alone, rel=0.02)           # one ring alone: no collision
    assert max(_run_together(ecmp, reqs)) > 1.5 * alone                        # 8 hashed rings collide


def test_tp8_dp_collectives_on_non_rail_tors_use_one_spine_per_rail():
    """DCN+ (consecutive servers share a ToR, 8 servers per ToR) with routing="rail" (the default there is
    ECMP hashing, below): hops between servers under one ToR never leave it; the hops between ToRs of
    rail r all go through spine r (D-mod-k), so the rails do not collide on the ToR up-links."""
    t = topo.build("dcn+", gpus=128)
    psws = [n.id for n in t.nodes if n.tier == "psw"]
    net = netsim.make_backend("flow", t, routing="rail")
    view = net.planner.view
    groups = _dp_groups(t)
    for r, g in enumerate(groups):
        for f in net.planner.plan("all_reduce", "ring", "simple", g).flows:
            spines = {int(view.ch_dst[c]) for c in f.channels} & set(psws)
            assert spines <= {psws[r % len(psws)]}
    intra_tor = tuple(range(0, 64, 8))                                        # rail 0 of servers 0..7: one ToR
    flows = net.planner.plan("all_reduce", "ring", "simple", intra_tor).flows
    assert "psw" not in _tiers_of(net, flows)
    reqs = [Req("all_reduce", g, 256 * MiB, "ring") for g in groups]
    assert max(_run_together(net, reqs)) == pytest.approx(net.estimate(reqs[0]), rel=1e-9)


def test_auto_routing_is_rail_where_the_fabric_steers_rings_and_ecmp_elsewhere():
    """auto: rail-optimized fabrics and the (InfiniBand, D-mod-k) fat tree route same-rail traffic on its
    rail; DCN+ (Ethernet, one ToR per server) hashes, so concurrent DP rings of a TP-8 job collide there."""
    for name, want in (("spectrum-x", "rail"), ("rail-optimized", "rail"), ("alibaba-hpn", "rail"),
                       ("fat-tree", "rail"), ("dcn+", "ecmp"), ("non-rail", "ecmp")):
        assert netsim.make_backend("flow", topo.build(name, gpus=128)).planner.view.routing == want, name
    t = topo.build("dcn+", gpus=128)
    reqs = [Req("all_reduce", g, 256 * MiB, "ring") for g in _dp_groups(t)]
    hashed = netsim.make_backend("flow", t)
    assert max(_run_together(hashed, reqs)) > 1.2 * hashed.estimate(reqs[0])


def test_cross_rail_traffic_keeps_ecmp_hashing():
    """An all-to-all between GPUs of different rails is routed by hash in both modes (same paths)."""
    t = topo.build("dcn+", gpus=128)
    rail = netsim.make_backend("flow", t, routing="rail")
    ecmp = netsim.make_backend("flow", t, routing="ecmp")
    assert (rail.planner.view.routing, ecmp.planner.view.routing) == ("rail", "ecmp")
    src, dst = 0, 64 + 3                                                       # rail 0 -> rail 3, other ToR
    a = rail.planner.view.path(src, dst, 5)
    b = ecmp.planner.view.path(src, dst, 5)
    assert a == b
    # the modes do differ where they should: some same-rail pairs between ToRs take other spines
    same_rail = [(8 * s, 64 + 8 * d) for s in range(8) for d in range(8)]
    assert any(rail.planner.view.path(x, y, 5) != ecmp.planner.view.path(x, y, 5) for x, y in same_rail)
    with pytest.raises(netsim.NetsimError, match="routing must be one of"):
        netsim.make_backend("flow", t, routing="spray")


@pytest.mark.parametrize("servers", [3, 5])
def test_rings_over_an_odd_number_of_servers_stay_on_rails(servers):
    """An odd ring of servers cannot alternate two entry rails; it takes three (c, c-1, ..., c-2), so no
    server-to-server hop changes rail and none crosses a spine of a rail-optimized fabric."""
    from netsim.schedules import ring_order

    t = topo.build("spectrum-x", gpus=8 * servers)
    net = netsim.make_backend("flow", t)
    g = tuple(range(8 * servers))
    srv = [list(range(s * 8, s * 8 + 8)) for s in range(servers)]
    for c in range(8):
        order = ring_order(srv, c)
        assert sorted(order) == list(g)
        cross = [(a, b) for a, b in zip(order, order[1:] + order[:1]) if a // 8 != b // 8]
        assert len(cross) == servers and all(a % 8 == b % 8 for a, b in cross)
    for op in ("all_reduce", "all_gather"):
        assert "psw" not in _tiers_of(net, net.planner.plan(op, "ring", "simple", g).flows)
