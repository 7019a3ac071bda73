"""Batched routing of rings (issue 16): netsim.resolve routes the hops of a long unweighted spec through
TopoView.one_switch_hops (GPU -> host switch -> GPU) and TopoView.rail_hops / topo.Router.rail_paths
(rail-aligned D-mod-k routes as array walks). Each test compares with the hop-by-hop route of the same
hops (TopoView.hop, topo.Router.path), which these batches must reproduce exactly: same channels in the
same order, weights, link classes and propagation sums, bit for bit."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from netsim.resolve import _route_hops, _route_spec, route_specs
from netsim.schedules import build_specs, group_shape
from netsim.topoview import TopoView
from topo.templates import build

FABRICS = [("spectrum-x", {"gpus": 128}), ("multi-pod", {"gpus": 4608}), ("dcn+", {"gpus": 64}),
           ("alibaba-hpn", {"gpus": 128}), ("alibaba-hpn", {"gpus": 128, "dual_tor": True}),
           ("nvl72", {}), ("pcie", {"gpus": 16}), ("fat-tree", {"gpus": 64}),
           ("spectrum-x", {"gpus": 64, "nics": True, "gpus_per_nic": 2})]


def _groups(n_gpus: int, gps: int):
    """A data-parallel-like group (one GPU per server, stride gps), a strided group inside the
    servers (TP-like x DP), and a block of whole servers; all with > 8 hops in their rings."""
    out = [tuple(range(0, n_gpus, gps))[:64], tuple(range(1, n_gpus, 2))[:96], tuple(range(min(n_gpus, 4 * gps)))]
    return [g for g in out if len(g) > 2]


def _reference(view, spec, idx):
    # a weighted copy (all weights 1) takes the hop-by-hop loop; the result must not change
    return _route_spec(view, dataclasses.replace(spec, weights=[1.0] * len(spec.hops)), idx)


@pytest.mark.parametrize("template,params", FABRICS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(FABRICS)])
def test_batched_ring_routes_equal_hop_by_hop_routes(template, params):
    topo = build(template, **params)
    gps = topo.gpus_per_server
    checked = 0
    for routing in ("auto", "ecmp", "rail"):
        view = TopoView(topo, routing=routing)
        ref_view = TopoView(topo, routing=routing)
        for gpus in _groups(topo.num_gpus, gps):
            shape = group_shape(view, gpus)
            for op in ("all_reduce", "reduce"):
                for i, spec in enumerate(build_specs(shape, op, "ring", 1.0)):
                    if len(spec.hops) <= 8:
                        continue
                    got = _route_spec(view, spec, i)
                    want = _reference(ref_view, spec, i)
                    assert np.array_equal(got.channels, want.channels)
                    assert got.weights.dtype == want.weights.dtype
                    assert np.array_equal(got.weights, want.weights)
                    assert got.hop_class == want.hop_class
                    assert got.hop_prop_s == want.hop_prop_s      # exact float equality, hop order
                    assert (got.switch_prop_s, got.line_up_Bps) == (want.switch_prop_s, want.line_up_Bps)
                    checked += 1
    assert checked > 0


def test_one_switch_hops_are_the_hops_through_one_host_switch():
    topo = build("spectrum-x", gpus=64)
    view = TopoView(topo)
    src = np.array([0, 1, 7, 8, 0, 3, 9], dtype=np.int64)
    dst = np.array([1, 0, 0, 15, 8, 3, 8], dtype=np.int64)
    ok, l1, l2, prop, cls = view.one_switch_hops(src, dst)
    # same server and a != b: through the server's NVSwitch; other server or a == b: not answered
    assert ok.tolist() == [True, True, True, True, False, False, True]
    for i in np.flatnonzero(ok).tolist():
        path, pw, p, c = TopoView(topo).hop(int(src[i]), int(dst[i]), 12345)
        assert path == (int(l1[i]), int(l2[i])) and pw == (1.0, 1.0)
        assert p == float(prop[i]) and c == cls[i] == "nvlink"
        assert view.ch_kind[path[0]] == "nvlink" and view.ch_dst[path[0]] == view.ch_src[path[1]]


def test_rail_paths_equal_router_paths_for_every_same_rail_pair_of_a_pod():
    topo = build("multi-pod", gpus=4608)
    view = TopoView(topo, routing="rail")
    router = view._routers[False]
    rng = np.random.default_rng(7)
    src = rng.integers(0, topo.num_gpus, 4000)
    # same rail (local index) in another server, plus some pairs across rails and inside a server
    dst = (rng.integers(0, topo.num_servers, 4000) * topo.gpus_per_server + src % topo.gpus_per_server)
    dst[:200] = (src[:200] + 1) % topo.num_gpus
    paths = router.rail_paths(src, dst)
    answered = 0
    for a, b, p in zip(src.tolist(), dst.tolist(), paths):
        if p is None:
            # another rail (flow hash), or one server (host route): left to path()
            assert topo.rail_of(a) != topo.rail_of(b) or topo.server_of(a) == topo.server_of(b)
            continue
        answered += 1
        for key in (0, 5, 977):            # D-mod-k on the destination: no flow key changes it
            assert p == tuple(router.path(a, b, key))
    assert answered > 3500


def test_rail_paths_are_not_offered_for_hashed_routing():
    topo = build("dcn+", gpus=64)
    view = TopoView(topo, routing="ecmp")
    assert view._routers[False].rail_paths(np.arange(8), np.arange(8, 16)) is None


@pytest.mark.parametrize("template,params,routing", [("multi-pod", {"gpus": 4608}, "rail"),
                                                      ("multi-pod", {"gpus": 4608}, "ecmp"),
                                                      ("dcn+", {"gpus": 64}, "ecmp"),
                                                      ("spectrum-x", {"gpus": 128}, "rail")])
def test_net_paths_equal_router_paths_for_hashed_and_rail_pairs(template, params, routing):
    # any pairs (same rail: D-mod-k on a rail router; other rails / ecmp: the per-flow hash of the key)
    topo = build(template, **params)
    router = TopoView(topo, routing=routing)._routers[False]
    rng = np.random.default_rng(11)
    n = 3000
    src = rng.integers(0, topo.num_gpus, n)
    dst = rng.integers(0, topo.num_gpus, n)
    dst[:300] = src[:300]                                  # a == b: never answered
    keys = rng.integers(0, 0x7FFFFFFF, n)
    at, rows = router.net_paths(src, dst, keys)
    assert rows.shape[0] == len(at) and len(at) > n // 2
    assert not set(at.tolist()) & set(range(300))
    hashed = 0
    for i, row in zip(at.tolist(), rows.tolist()):
        a, b, k = int(src[i]), int(dst[i]), int(keys[i])
        assert tuple(x for x in row if x >= 0) == tuple(router.path(a, b, k))
        hashed += routing == "ecmp" or topo.rail_of(a) != topo.rail_of(b)
    assert hashed > 0
    # without keys only the key-free (D-mod-k) pairs are answered
    at0, _ = router.net_paths(src, dst, None)
    assert all(routing == "rail" and topo.rail_of(int(src[i])) == topo.rail_of(int(dst[i])) for i in at0.tolist())


@pytest.mark.parametrize("template,params,routing", [("multi-pod", {"gpus": 4608}, "ecmp"),
                                                      ("dcn+", {"gpus": 64}, "ecmp")])
def test_net_paths_walk_tables_from_scalar_tables_equal_fresh(template, params, routing):
    # destinations whose _towards tables the scalar path built first (array.array) and destinations
    # built by the walk itself (numpy): the same rows as a router that built every table in the walk
    topo = build(template, **params)
    used, fresh = (TopoView(topo, routing=routing)._routers[False] for _ in range(2))
    rng = np.random.default_rng(5)
    n = 2000
    src, dst = rng.integers(0, topo.num_gpus, n), rng.integers(0, topo.num_gpus, n)
    keys = rng.integers(0, 0x7FFFFFFF, n)
    for i in range(0, n, 3):
        used.path(int(src[i]), int(dst[i]), int(keys[i]))
    assert used._route and used._walk is None
    got, want = used.net_paths(src, dst, keys), fresh.net_paths(src, dst, keys)
    assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]) and len(got[0]) > n // 2
    assert len(used._route) > len(fresh._route)


def test_net_hops_equal_hop_by_hop_hops():
    topo = build("dcn+", gpus=64)
    view = TopoView(topo, routing="ecmp")
    src = np.arange(64, dtype=np.int64)
    dst = (src * 7 + 9) % 64
    keys = (src * 1009 + 3) & 0x7FFFFFFF
    at, rows, prop, cls = view.net_hops(src, dst, keys)
    assert len(at) > 32
    ref = TopoView(topo, routing="ecmp")
    for j, i in enumerate(at.tolist()):
        path, pw, p, c = ref.hop(int(src[i]), int(dst[i]), int(keys[i]))
        assert tuple(x for x in rows[j].tolist() if x >= 0) == path and pw == (1.0,) * len(path)
        assert float(prop[j]) == p and cls[j] == c == "network"


@pytest.mark.parametrize("template,params", FABRICS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(FABRICS)])
def test_group_bandwidths_from_arrays_equal_the_per_gpu_search(template, params, monkeypatch):
    topo = build(template, **params)
    view = TopoView(topo)
    gps = topo.gpus_per_server
    groups = _groups(topo.num_gpus, gps) + [tuple(range(gps)), (0, topo.num_gpus - 1)]
    got = [view._group_bandwidths_arrays(g) or view.group_bandwidths(g) for g in groups]   # arrays where they answer
    ref_view = TopoView(topo)
    monkeypatch.setattr(ref_view, "_group_bandwidths_arrays", lambda gpus: None)
    want = [ref_view.group_bandwidths(g) for g in groups]
    assert got == want          # exact: the same sums and minima
    assert view.nvlink_out_array().tolist() == [ref_view.nvlink_out_Bps(g) for g in range(topo.num_gpus)]
    # the array path answers the SimAI-like fabrics (NVLink + one network port per GPU)
    if template in ("spectrum-x", "multi-pod") and not params.get("nics"):
        assert view._group_bandwidths_arrays(groups[0]) is not None


@pytest.mark.parametrize("template,params,routing", [("spectrum-x", {"gpus": 128}, "rail"),
                                                      ("dcn+", {"gpus": 64}, "ecmp"),
                                                      ("alibaba-hpn", {"gpus": 128, "dual_tor": True}, "auto"),
                                                      ("nvl72", {}, "auto")])
def test_route_specs_of_a_collective_equal_each_spec_routed_hop_by_hop(template, params, routing):
    # route_specs routes the hops of all specs of a collective in one batch (flow keys differ per spec)
    topo = build(template, **params)
    view = TopoView(topo, routing=routing)
    ref_view = TopoView(topo, routing=routing)
    gps = topo.gpus_per_server
    checked = 0
    for gpus in _groups(topo.num_gpus, gps)[:2]:
        shape = group_shape(view, gpus)
        for op, alg in (("all_to_all", "direct"), ("all_gather", "ring")):
            specs = build_specs(shape, op, alg, 1.0)
            got = route_specs(view, specs)
            for i, (spec, r) in enumerate(zip(specs, got)):
                want = _route_hops(ref_view, spec, i)
                assert r.spec is spec
                assert np.array_equal(r.channels, want.channels) and np.array_equal(r.weights, want.weights)
                assert r.weights.dtype == want.weights.dtype
                assert r.hop_class == want.hop_class and r.hop_prop_s == want.hop_prop_s
                checked += 1
            again = route_specs(view, specs)          # the view's cache answers the second call
            assert all(a.channels is b.channels for a, b in zip(got, again))
    assert checked > 0
