"""The planner's batch and pair shortcuts against the plain paths they replace, value for value:
route_specs_many vs route_spec spec by spec, relabelled canonical specs vs build_specs, the pair
bandwidths and pair shape vs the general group code, Planner.call_many vs call one by one and
Planner.call_parts_many vs call."""

from __future__ import annotations

import random

import numpy as np
import pytest

import netsim.backend as backend
import netsim.resolve as resolve
from netsim.api import CollectiveRequest
from netsim.backend import _RELABELLED, Planner, _pair_shape
from netsim.errors import NetsimError
from netsim.schedules import build_specs, group_shape
from netsim.topoview import TopoView
from topo.templates import build

CASES = [("spectrum-x", {"gpus": 256}), ("multi-pod", {"gpus": 256, "nics_per_asw": 8, "segments_per_pod": 2,
                                                         "psw_count": 4}),
         ("alibaba-hpn", {"gpus": 64}), ("dcn+", {"gpus": 64}), ("nvl72", {}), ("pcie", {"gpus": 16})]
IDS = [c[0] for c in CASES]


def _groups(n_gpus: int, seed: int) -> list[tuple[int, ...]]:
    """Send pairs across and inside servers, 2-GPU groups, strided (DP-like) groups, random groups."""
    rng = random.Random(seed)
    half = n_gpus // 2
    out = [(g, g + half) for g in range(0, half, 3)] + [(g + half, g) for g in range(1, half, 5)]
    out += [(g, g + 1) for g in range(0, n_gpus - 1, 7)]
    out += [tuple(range(r, n_gpus, max(1, n_gpus // 8))) for r in range(0, 4)]
    for _ in range(6):
        out.append(tuple(rng.sample(range(n_gpus), rng.choice((2, 3, 5, 8, 12)))))
    return out


def _same_routed(got, want):
    assert got.spec is want.spec
    assert np.array_equal(got.channels, want.channels) and got.channels.dtype == want.channels.dtype
    assert np.array_equal(got.weights, want.weights) and got.weights.dtype == want.weights.dtype
    assert (got.hop_class, got.hop_prop_s, got.switch_prop_s, got.line_up_Bps) == \
           (want.hop_class, want.hop_prop_s, want.switch_prop_s, want.line_up_Bps)


@pytest.mark.parametrize("max_hops", [1 << 15, 7])
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_route_specs_many_equals_route_spec(name, kw, max_hops, monkeypatch):
    monkeypatch.setattr(resolve, "BATCH_MAX_HOPS", max_hops)     # 7: many chunks, one spec longer than a chunk
    t = build(name, **kw)
    n = int(t.num_gpus)
    view, ref = TopoView(t), TopoView(t)
    p = Planner(t, view=ref)
    lists = []
    for g in _groups(n, 1):
        shape = group_shape(ref, g)
        if len(g) == 2:
            lists.append(build_specs(shape, "send", "p2p", 1.0))
        for op, alg in (("all_reduce", "ring"), ("all_reduce", "tree"), ("all_gather", "ring"),
                        ("all_to_all", "direct"), ("all_to_all", "pxn")):
            if alg == "tree" and shape.m < 2:
                continue
            lists.append(build_specs(shape, op, alg, 1.0))
        if p.view.switch_channels(g[0])[0] and shape.domains == 1:
            lists.append(build_specs(shape, "all_reduce", "nvls", 1.0))       # ("up", gpu) hops: spec by spec
    lists.append(list(lists[0]))          # a repeated list: the second one reads the first's routes
    got = resolve.route_specs_many(view, lists)
    assert [len(x) for x in got] == [len(x) for x in lists]
    for specs, routed in zip(lists, got):
        for i, (spec, r) in enumerate(zip(specs, routed)):
            _same_routed(r, resolve._route_spec(ref, spec, i))
    # the view's cache now answers route_specs with the same routes
    for specs, routed in zip(lists[:20], got[:20]):
        for a, b in zip(resolve.route_specs(view, specs), routed):
            _same_routed(a, b)


@pytest.mark.parametrize("array_hops", [64, 0])
@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_relabelled_specs_equal_build_specs(name, kw, array_hops, monkeypatch):
    # 0: every group relabelled through the template's index arrays (else only groups of 64 hops or more)
    monkeypatch.setattr(backend, "_RELABEL_ARRAY_HOPS", array_hops)
    t = build(name, **kw)
    p = Planner(t)
    groups = _groups(int(t.num_gpus), 2)
    n = int(t.num_gpus)
    groups += [tuple(range(r, n, 2)) for r in (0, 1)]      # long rings and trees (array path at 64)
    rng = random.Random(3)
    groups += [tuple(rng.sample(g, len(g))) for g in groups if len(g) > 2]      # the same GPUs, other orders
    seen = 0
    for g in groups:
        shape = group_shape(p.view, g)
        for op, alg in sorted(_RELABELLED):
            if alg == "tree" and shape.m < 2:
                continue
            assert p._build_specs(shape, op, alg) == build_specs(shape, op, alg, 1.0), (op, alg, g)
            seen += 1
    assert seen > 40 and len(p._spec_tmpl) < seen      # templates were reused across groups


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_pair_bandwidths_and_shape_equal_general_code(name, kw):
    t = build(name, **kw)
    v = TopoView(t)
    n = int(t.num_gpus)
    pairs = [(a, b) for a in range(0, n, max(1, n // 24)) for b in range(0, n, max(1, n // 12)) if a != b]
    pairs += [(a, a + 1) for a in range(0, n - 1)]      # neighbours: same server / NVLink domain / NIC
    for a, b in pairs:
        got, want = v._pair_bandwidths(a, b), v._group_bandwidths_search((a, b))
        assert got == want and [type(x) for x in got] == [type(x) for x in want], (a, b)
        assert v.group_bandwidths((a, b)) == want
        assert _pair_shape(v, (a, b)) == group_shape(v, (a, b))


def test_pair_bandwidths_with_an_exit_shared_across_units():
    # units smaller than a NIC's GPUs (here: two GPUs per unit, four per NIC on a PCIe server) make
    # both GPUs of a pair in different units share an exit: each gets half of it
    t = build("pcie", gpus=16, gpus_per_nic=4)
    v = TopoView(t)
    n = int(t.num_gpus)
    v._unit = [g // 2 for g in range(n)]
    shared = 0
    for a in range(n):
        for b in range(n):
            if a != b:
                got, want = v._pair_bandwidths(a, b), v._group_bandwidths_search((a, b))
                assert got == want and [type(x) for x in got] == [type(x) for x in want], (a, b)
                shared += v.unit_of(a) != v.unit_of(b) and not set(v.exits(a)[0]).isdisjoint(v.exits(b)[0])
    assert shared > 10


@pytest.mark.parametrize("name,kw,pxn", [c + (False,) for c in CASES] + [("spectrum-x", {"gpus": 64}, True)],
                         ids=IDS + ["spectrum-x-pxn"])
def test_call_many_equals_call_one_by_one(name, kw, pxn):
    t = build(name, **kw)
    batched, plain = Planner(t, pxn=pxn), Planner(t, pxn=pxn)
    groups = _groups(int(t.num_gpus), 4)
    reqs = [CollectiveRequest("send", g, 1 << 20) for g in groups if len(g) == 2]
    reqs += [CollectiveRequest(op, g, size) for g in groups for op in ("all_reduce", "all_gather")
             for size in (8, 1 << 26)]
    reqs += [CollectiveRequest("all_reduce", groups[-1], 1 << 20, algorithm="ring", protocol="LL"),
             CollectiveRequest("all_reduce", groups[0], 0)]
    got = batched.call_many(reqs)
    for req, c in zip(reqs, got):
        want = plain.call(req)
        assert c[:3] == want[:3] and c[4:6] == want[4:6] and c[7] == want[7]
        assert len(c[3]) == len(want[3])
        for fa, fb in zip(c[3], want[3]):
            assert np.array_equal(fa.channels, fb.channels) and np.array_equal(fa.weights, fb.weights)
            assert (fa.frac, fa.latency_s, fa.cap_Bps, fa.deps, fa.after, fa.nch, fa.fill_stages, fa.fill_chunk) \
                == (fb.frac, fb.latency_s, fb.cap_Bps, fb.deps, fb.after, fb.nch, fb.fill_stages, fb.fill_chunk)
    assert len(batched._routed) >= len({(r.op, tuple(r.gpus)) for r in reqs if len(r.gpus) > 1})


def test_call_many_rejects_a_bad_request_like_call():
    t = build("spectrum-x", gpus=64)
    n = int(t.num_gpus)
    for bad in (CollectiveRequest("send", (0, n), 1), CollectiveRequest("all_reduce", (0, 1, 1), 1),
                CollectiveRequest("send", (0, 1, 2), 1), CollectiveRequest("all_reduce", (0, 8), 1, algorithm="nope")):
        with pytest.raises(NetsimError) as plain:
            Planner(t).call(bad)
        with pytest.raises(NetsimError) as batched:
            Planner(t).call_many([CollectiveRequest("send", (0, 8), 1), bad])
        assert str(batched.value) == str(plain.value)


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_call_parts_many_equals_call(name, kw):
    """call_parts_many (a template plan's fields with the group's channels) against call on a fresh
    planner: translated groups share a template, so a part taken from the wrong group (its channels)
    or from the wrong template (its latency, weights, timing) differs."""
    t = build(name, **kw)
    n = int(t.num_gpus)
    parts_planner, plain = Planner(t), Planner(t)
    groups = _groups(n, 5)
    half = n // 2
    groups += [tuple((g + s) % n for g in grp) for grp in groups[-6:] for s in (half, 8)]     # translates
    for op, sizes in (("send", (1 << 20, 0)), ("all_reduce", (8, 1 << 26)), ("all_gather", (1 << 22,))):
        for size in sizes:
            reqs = [CollectiveRequest(op, g, size) for g in groups if op != "send" or len(g) == 2]
            got = parts_planner.call_parts_many(reqs)
            assert len(got) == len(reqs)
            for req, (header, fields, chans) in zip(reqs, got):
                gpus, alg, proto, flows, delay, mult = plain.call(req)[:6]
                assert header == (alg, proto, delay, mult, len(flows)), req
                assert len(fields) == len(chans) == len(flows)
                for fl, ch, f in zip(fields, chans, flows):
                    assert np.array_equal(ch, f.channels) and ch.dtype == f.channels.dtype
                    assert fl == (tuple(f.weights.tolist()), f.frac, f.latency_s, f.cap_Bps, f.deps, f.after, f.nch,
                                  f.fill_stages, f.fill_chunk)
    assert parts_planner._parts          # groups took their parts from templates


def test_call_parts_many_rejects_a_bad_request_like_call():
    t = build("spectrum-x", gpus=64)
    n = int(t.num_gpus)
    for bad in (CollectiveRequest("send", (0, n), 1), CollectiveRequest("all_reduce", (0, 1, 1), 1),
                CollectiveRequest("all_reduce", (0, 8), 1, algorithm="nope")):
        with pytest.raises(NetsimError) as plain:
            Planner(t).call(bad)
        for reqs in ([bad], [CollectiveRequest("send", (0, 8), 1), bad]):
            with pytest.raises(NetsimError) as parts:
                Planner(t).call_parts_many(reqs)
            assert str(parts.value) == str(plain.value)
