"""Planner.quick_key (analytical_s shared between groups without routing them) against the plain
path, value for value: every group's (estimate, algorithm, protocol) equals a planner that never
shares, and what the quick key holds per hop (TopoView.hop_keys) fixes the routed class and
propagation."""

from __future__ import annotations

import random

import numpy as np
import pytest

from netsim.api import CollectiveRequest
from netsim.backend import Planner
from netsim.resolve import route_specs
from netsim.schedules import build_specs
from netsim.topoview import TopoView
from topo.templates import build

CASES = [("spectrum-x", {"gpus": 256}), ("multi-pod", {"gpus": 256, "nics_per_asw": 8, "segments_per_pod": 2,
                                                         "psw_count": 4}),
         ("alibaba-hpn", {"gpus": 64}), ("dcn+", {"gpus": 64}), ("nvl72", {}), ("pcie", {"gpus": 16})]
IDS = [c[0] for c in CASES]
OPS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send")


def _groups(n: int, seed: int) -> list[tuple[int, ...]]:
    """Translated groups (TP-, EP- and DP-like strides at several offsets) and random ones."""
    rng = random.Random(seed)
    out = []
    for size, stride in ((2, 1), (8, 1), (16, 1), (4, n // 4), (8, 2)):
        if size * stride <= n:
            out += [tuple(range(o, o + size * stride, stride)) for o in range(0, n - size * stride + 1,
                                                                             max(1, n // 6))]
    out += [tuple(rng.sample(range(n), rng.choice((2, 3, 8, 12)))) for _ in range(6)]
    return out


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_analytical_s_equals_unshared_planner(name, kw, monkeypatch):
    t = build(name, **kw)
    quick = Planner(t)
    plain = Planner(t)
    monkeypatch.setattr(plain, "quick_key", lambda req: None)
    hits = 0
    for gpus in _groups(t.num_gpus, 3):
        for op in OPS:
            if op == "send" and len(gpus) != 2:
                continue
            for size in (1024, 3 << 20, 1 << 28):
                req = CollectiveRequest(op, gpus, size)
                k = quick.quick_key(req)
                hits += k is not None and k in quick._quick
                assert quick.analytical_s(req) == plain.analytical_s(req), (op, gpus, size)
    if name in ("spectrum-x", "multi-pod", "alibaba-hpn", "dcn+"):
        assert hits > 0          # translated groups do share on SimAI's fabrics


@pytest.mark.parametrize("name,kw", CASES[:2], ids=IDS[:2])
def test_choice_from_the_quick_cache_equals_choose(name, kw):
    # Planner.choice (the trace's algorithm/protocol arguments) answers from earlier analytical_s calls
    t = build(name, **kw)
    quick, plain = Planner(t), Planner(t)
    groups = _groups(t.num_gpus, 5)
    for gpus in groups[: len(groups) // 2]:
        quick.analytical_s(CollectiveRequest("all_gather", gpus, 3 << 20))
    served = 0
    for i, gpus in enumerate(groups):
        req = CollectiveRequest("all_gather", gpus, 3 << 20)
        served += i >= len(groups) // 2 and quick._quick.get(quick.quick_key(req) or ()) is not None
        assert quick.choice(req) == plain.choose(req)[3:5], gpus
    assert served > 0      # groups never estimated were answered from a translated group's entry


KEYED = [CASES[0], CASES[1], CASES[3]]      # alibaba-hpn's dual-plane GPUs have two network ports


@pytest.mark.parametrize("name,kw", KEYED, ids=[c[0] for c in KEYED])
def test_equal_hop_keys_mean_equal_class_and_propagation(name, kw):
    t = build(name, **kw)
    view = TopoView(t)
    seen: dict[bytes, tuple] = {}
    n = t.num_gpus
    for gpus in _groups(n, 5):
        if len(gpus) < 3:
            continue
        specs = build_specs(Planner(t, view=view).shape(gpus)[0], "all_to_all", "direct", 1.0)
        src = np.array([a for s in specs for a, _ in s.hops], dtype=np.int64)
        dst = np.array([b for s in specs for _, b in s.hops], dtype=np.int64)
        keys = view.hop_keys(src, dst)
        assert keys is not None and keys.shape == (len(src), 6)
        routed = route_specs(view, specs)
        got = [(c, p) for r in routed for c, p in zip(r.hop_class, r.hop_prop_s)]
        for row, cp in zip(keys, got):
            assert seen.setdefault(row.tobytes(), cp) == cp


def test_uneven_switch_links_give_no_hop_keys():
    t = build("spectrum-x", gpus=256)
    view = TopoView(t)
    router = view._routers[False]
    lids = router.inner_links()
    view.latency_s = view.latency_s.copy()
    view.latency_s[lids[0]] += 1e-9          # one switch-to-switch link slower than the others
    src, dst = np.array([0, 0]), np.array([1, 200])
    assert view.hop_keys(src, dst) is None
    req = CollectiveRequest("all_reduce", tuple(range(0, 256, 32)), 1 << 20)
    assert Planner(t, view=view).quick_key(req) is None


def test_two_port_gpus_give_no_hop_keys():
    view = TopoView(build("alibaba-hpn", gpus=64))
    assert view.hop_keys(np.array([0]), np.array([40])) is None


def test_new_quick_keys_are_answered_without_routing():
    # groups whose hop rows differ (a DP-like group inside a pod, one across pods) each get a new quick
    # key: analytical_s answers from the rows (no route is built) with the plain planner's values
    t = build(*CASES[1][:1], **CASES[1][1])
    quick, plain = Planner(t), Planner(t)
    plain.quick_key = lambda req: None
    groups = [tuple(range(0, 64, 2)), tuple(range(96, 160, 2)), tuple(range(0, 256, 8)), tuple(range(1, 17))]
    keys = set()
    for gpus in groups:
        for op in ("all_gather", "reduce_scatter", "all_to_all"):      # all_reduce: tree has no closed form
            for size in (4096, 3 << 20, 1 << 30):
                req = CollectiveRequest(op, gpus, size)
                keys.add(quick.quick_key(req))
                assert quick.analytical_s(req) == plain.analytical_s(req), (op, gpus, size)
    assert None not in keys and len(keys) == len(quick._quick)
    assert not quick._routed and not quick._plans and plain._routed


@pytest.mark.parametrize("name,kw", KEYED, ids=[c[0] for c in KEYED])
def test_hop_key_routes_equal_the_routed_class_and_propagation(name, kw):
    t = build(name, **kw)
    view = TopoView(t)
    planner = Planner(t, view=view)
    for gpus in _groups(t.num_gpus, 7):
        if len(gpus) < 3:
            continue
        for op, alg in (("all_gather", "ring"), ("all_to_all", "direct")):
            specs = build_specs(planner.shape(gpus)[0], op, alg, 1.0)
            src = np.array([a for s in specs for a, _ in s.hops], dtype=np.int64)
            dst = np.array([b for s in specs for _, b in s.hops], dtype=np.int64)
            rows = view.hop_keys(src, dst)
            classes, props = view.hop_key_routes(rows)
            routed = route_specs(view, specs)
            assert classes == [c for r in routed for c in r.hop_class]
            assert props == [p for r in routed for p in r.hop_prop_s]      # bit-equal sums


@pytest.mark.parametrize("name,kw", [CASES[0], CASES[3]], ids=["spectrum-x", "dcn+"])
def test_nvls_groups_get_quick_keys_with_the_plain_values(name, kw):
    # groups inside one NVLink domain have NVLS as a candidate: their quick keys hold the NVLS route's
    # two terms, and translated groups are answered from the first one's entry without routing
    t = build(name, **kw)
    quick, plain = Planner(t), Planner(t)
    plain.quick_key = lambda req: None
    groups = [(0, 1), (2, 3), (4, 5), (0, 1, 2, 3), (4, 5, 6, 7)]
    for op in ("all_reduce", "all_gather", "reduce_scatter"):
        for gpus in groups:
            for size in (4096, 3 << 20, 1 << 30):
                req = CollectiveRequest(op, gpus, size)
                k = quick.quick_key(req)
                assert k is not None and "nvls" in k[10], (op, gpus)
                assert quick.analytical_s(req) == plain.analytical_s(req), (op, gpus, size)
    # 3 ops x 2 group sizes x 3 sizes distinct answers; the translated groups added none
    assert len(quick._quick) == 18
    assert not quick._plans


def test_nvls_quick_key_holds_the_switch_line_rate():
    # a GPU whose NVSwitch ports are slower gets another key and the plain planner's (slower) answer:
    # a key without the line rate would answer its group from the translated group's entry
    t = build("spectrum-x", gpus=256)
    view = TopoView(t)
    up, _down = view.switch_channels(9)
    view.line_Bps = view.line_Bps.copy()
    view.line_Bps[up[0]] *= 0.5
    quick, plain = Planner(t, view=view), Planner(t, view=view)
    plain.quick_key = lambda req: None
    a = CollectiveRequest("all_reduce", (0, 1, 2, 3), 1 << 30)
    b = CollectiveRequest("all_reduce", (8, 9, 10, 11), 1 << 30)
    assert quick.analytical_s(a)[1] == "nvls"
    assert quick.quick_key(a) != quick.quick_key(b)
    assert quick.analytical_s(b) == plain.analytical_s(b)
    assert quick.analytical_s(a)[0] < quick.analytical_s(b)[0]
