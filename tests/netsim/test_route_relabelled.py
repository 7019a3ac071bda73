"""Planner._preroute's template routes (netsim.resolve.route_relabelled: the groups of one canonical
template, and point-to-point pairs, routed as GPU arrays without building their specs) against the
plain path: build_specs of the group and route_spec spec by spec on a fresh view, value for value;
and route_signature's array keys against the tuple keys they replace (equal ids <-> equal tuples)."""

from __future__ import annotations

import numpy as np
import pytest

import netsim.backend as backend
import netsim.resolve as resolve
from netsim.api import CollectiveRequest
from netsim.backend import Planner
from netsim.schedules import build_specs, group_shape
from netsim.topoview import TopoView
from topo.templates import build

CASES = [("spectrum-x", {"gpus": 256}), ("multi-pod", {"gpus": 256, "nics_per_asw": 8, "segments_per_pod": 2,
                                                         "psw_count": 4}),
         ("dcn+", {"gpus": 128}), ("alibaba-hpn", {"gpus": 64}), ("pcie", {"gpus": 16})]
IDS = [c[0] for c in CASES]


def _requests(n: int) -> list[CollectiveRequest]:
    """Send pairs both ways, inside and across servers; strided (DP-like) and contiguous groups of
    every _RELABELLED (op, algorithm) (auto: ring and tree for all-reduce across units)."""
    half = n // 2
    reqs = [CollectiveRequest("send", (g, g + half), 1 << 20) for g in range(0, half, 5)]
    reqs += [CollectiveRequest("send", (g + half, g), 1 << 20) for g in range(1, half, 7)]
    reqs += [CollectiveRequest("recv", (g + 1, g), 1 << 20) for g in range(0, n - 1, 9)]
    for r in range(3):
        strided = tuple(range(r, n, max(1, n // 8)))
        for op in ("all_reduce", "all_gather", "reduce_scatter"):
            reqs.append(CollectiveRequest(op, strided, 1 << 22))
    reqs.append(CollectiveRequest("all_reduce", tuple(range(8, 8 + min(16, n - 8))), 1 << 22))
    return reqs


def _plain(t, op: str, alg: str, gpus: tuple[int, ...]) -> list:
    view = TopoView(t)            # fresh: no route cache shared with the planner
    return [resolve._route_spec(view, s, i) for i, s in enumerate(build_specs(group_shape(view, gpus), op, alg, 1.0))]


def _spec_fields(s) -> tuple:
    return (s.nbytes, s.steps, s.deps, s.weights, s.nvls, s.pxn, s.after, s.ring, s.lat_stages, s.share, s.fill)


@pytest.mark.parametrize("max_hops", [1 << 15, 5])
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_template_routes_equal_the_plain_routes(name, kw, max_hops, monkeypatch):
    monkeypatch.setattr(resolve, "BATCH_MAX_HOPS", max_hops)     # 5: one group per chunk, or several
    t = build(name, **kw)
    p = Planner(t)
    reqs = _requests(int(t.num_gpus))
    p.call_parts_many(reqs)
    seen = 0
    for (op, alg, gpus), routed in p._routed.items():
        want = _plain(t, op, alg, gpus)
        assert len(routed) == len(want), (op, alg, gpus)
        for got, w in zip(routed, want):
            assert _spec_fields(got.spec) == _spec_fields(w.spec)
            assert np.array_equal(got.channels, w.channels) and got.channels.dtype == w.channels.dtype
            assert np.array_equal(got.weights, w.weights) and got.weights.dtype == w.weights.dtype
            assert (got.hop_class, got.hop_prop_s, got.switch_prop_s, got.line_up_Bps) == \
                   (w.hop_class, w.hop_prop_s, w.switch_prop_s, w.line_up_Bps)
        seen += 1
    assert seen >= len(reqs) // 2
    # the template path took them (routes kept by (hops, GPUs); the rest share one of those)
    assert len(p._hop_routes) >= seen // 2


@pytest.mark.parametrize("name,kw", CASES[:3], ids=IDS[:3])
def test_calls_on_template_routes_equal_fresh_calls(name, kw):
    # the whole call (choice, plan flows, timing) of every request, batched vs one fresh planner each
    t = build(name, **kw)
    p = Planner(t)
    reqs = _requests(int(t.num_gpus))
    parts = p.call_parts_many(reqs)
    for req, (header, fields, chans) in zip(reqs, parts):
        gpus, alg, proto, flows, delay, mult = Planner(t).call(req)[:6]
        assert header == (alg, proto, delay, mult, len(flows))
        assert fields == [(tuple(f.weights.tolist()), f.frac, f.latency_s, f.cap_Bps, f.deps, f.after, f.nch,
                           f.fill_stages, f.fill_chunk) for f in flows]
        assert all(np.array_equal(a, f.channels) for a, f in zip(chans, flows))


def test_ops_with_equal_hops_share_routes_and_pairs_keep_their_direction():
    t = build("dcn+", gpus=128)
    p = Planner(t)
    g = tuple(range(3, 128, 16))
    p.call_parts_many([CollectiveRequest("all_gather", g, 1 << 20), CollectiveRequest("all_gather", g[::-1], 1 << 20)])
    p.call_parts_many([CollectiveRequest("reduce_scatter", g, 1 << 20),
                       CollectiveRequest("reduce_scatter", g[::-1], 1 << 20)])
    ag, rs = p._routed[("all_gather", "ring", g)], p._routed[("reduce_scatter", "ring", g)]
    assert all(a.channels is r.channels for a, r in zip(ag, rs))          # routed once
    assert [r.spec.nbytes for r in rs] == [s.nbytes for s in build_specs(group_shape(p.view, g), "reduce_scatter",
                                                                         "ring", 1.0)]
    # a pair and its reverse: the same template, opposite routes
    p.call_parts_many([CollectiveRequest("send", (5, 70), 1), CollectiveRequest("send", (70, 5), 1)])
    for pair in ((5, 70), (70, 5)):
        (got,) = p._routed[("send", "p2p", pair)]
        (want,) = _plain(t, "send", "p2p", pair)
        assert np.array_equal(got.channels, want.channels)


def _tuple_signature(p: Planner, op: str, alg: str, gpus) -> tuple:
    """route_signature's key as plain tuples (floats as Python floats, channel ranks as tuples)."""
    routed = p._routed_specs(op, alg, gpus)
    parts = []
    for r in routed:
        s = r.spec
        parts.append(_spec_fields(s) + (tuple(r.hop_class), tuple(r.hop_prop_s), r.switch_prop_s, r.line_up_Bps,
                                         tuple(r.weights.tolist())))
    chans = [r.channels.tolist() for r in routed]
    used = sorted(set().union(*chans))
    rank = {c: i for i, c in enumerate(used)}
    parts.append(tuple(tuple(rank[c] for c in ch) for ch in chans))
    cap = p.view.capacity_Bps.tolist()
    parts.append(tuple(cap[c] for c in used))
    return tuple(parts)


@pytest.mark.parametrize("name,kw", [("dcn+", {"gpus": 256}), ("spectrum-x", {"gpus": 256})], ids=["dcn+", "spx"])
def test_array_signature_ids_equal_tuple_signatures(name, kw):
    # tree all-reduces (no closed form: channel ranks and capacities keyed), large groups (the array
    # ranks) and pairs of GPUs (the tuple ranks), translated and shuffled so that some keys differ
    t = build(name, **kw)
    p = Planner(t)
    n = int(t.num_gpus)
    groups = [tuple(range(r, n, 32)) for r in range(10)] + [tuple(range(r, n, 64)) for r in range(4)]
    groups += [(r, r + n // 2) for r in range(0, n // 2, 37)] + [(r + 1, r) for r in range(0, n - 1, 41)]
    large = [tuple(range(r, n, 4)) for r in range(4)] + [tuple(range(r, n, 2)) for r in range(2)]
    by_tuple: dict = {}
    for g in groups + large:
        sid = p.route_signature("all_reduce", "tree", g)
        by_tuple.setdefault(_tuple_signature(p, "all_reduce", "tree", g), set()).add(sid)
    assert all(len(ids) == 1 for ids in by_tuple.values())                         # equal tuples -> one id
    assert len({next(iter(ids)) for ids in by_tuple.values()}) == len(by_tuple)    # different tuples -> ids
    uses = [sum(len(r.channels) for r in p._routed_specs("all_reduce", "tree", g)) for g in large]
    assert min(uses) >= backend._RANK_ARRAY_USES       # the array ranks are exercised
    # the array key holds the tuple key's ranks and capacities (decoded here)
    keys = {v: k for k, v in p._sig_ids.items()}
    for g in large:
        want = _tuple_signature(p, "all_reduce", "tree", g)
        got = keys[p.route_signature("all_reduce", "tree", g)]
        ranks, lens = got[-2]
        flat = np.frombuffer(ranks, dtype=np.int64).tolist()
        at = np.cumsum((0,) + lens).tolist()
        assert tuple(tuple(flat[a:b]) for a, b in zip(at, at[1:])) == want[-2]
        assert tuple(np.frombuffer(got[-1], dtype=np.float64).tolist()) == want[-1]
    if name == "dcn+":      # ECMP: translated copies collide differently, so the large keys differ too
        assert len({_tuple_signature(p, "all_reduce", "tree", g) for g in large}) > 1

