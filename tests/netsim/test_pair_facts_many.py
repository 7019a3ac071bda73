"""The batched shapes and facts of many send pairs (TopoView.pair_facts_many, Planner._shape_pairs)
equal the pair-by-pair code: values and types (a numpy float and a Python float divide differently
by zero downstream)."""

from __future__ import annotations

import numpy as np
import pytest

from netsim.analytical import GroupFacts
from netsim.api import CollectiveRequest
from netsim.backend import _PAIR_ARRAY_MIN, Planner, _pair_shape
from netsim.errors import NetsimError
from netsim.topoview import TopoView
from topo.templates import build

CASES = [("spectrum-x", {"gpus": 256}), ("alibaba-hpn", {"gpus": 64}), ("dcn+", {"gpus": 64}), ("nvl72", {}),
         ("pcie", {"gpus": 16}), ("pcie", {"gpus": 16, "gpus_per_nic": 4})]
IDS = ["spectrum-x", "alibaba-hpn", "dcn+", "nvl72", "pcie", "pcie-shared-nic"]


def _pairs(n: int) -> list[tuple[int, int]]:
    out = [(a, b) for a in range(0, n, max(1, n // 24)) for b in range(0, n, max(1, n // 12)) if a != b]
    return out + [(a, a + 1) for a in range(n - 1)] + [(a + 1, a) for a in range(0, n - 1, 3)]


def _facts_tuple(f: GroupFacts) -> tuple:
    vals = (f.b_nv, f.b_net, f.units, f.one_per_unit, f.ll128_ok)
    return vals, tuple(type(x) for x in vals)


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_pair_facts_many_equals_pair_by_pair(name, kw, monkeypatch):
    t = build(name, **kw)
    v = TopoView(t)
    pairs = _pairs(int(t.num_gpus))
    a = np.array([p[0] for p in pairs], dtype=np.int64)
    b = np.array([p[1] for p in pairs], dtype=np.int64)
    plain = TopoView(t)
    fallback = []
    real = v._pair_bandwidths
    monkeypatch.setattr(v, "_pair_bandwidths", lambda x, y: fallback.append((x, y)) or real(x, y))
    same, same_dom, bws, ll128 = v.pair_facts_many(a, b)
    assert len(same) == len(same_dom) == len(bws) == len(ll128) == len(pairs)
    for i, (x, y) in enumerate(pairs):
        want = plain._pair_bandwidths(x, y)
        assert bws[i] == want and [type(z) for z in bws[i]] == [type(z) for z in want], (x, y)
        assert same[i] == (plain.unit_of(x) == plain.unit_of(y))
        assert same_dom[i] == (plain.domain_of(x) == plain.domain_of(y))
        assert ll128[i] == GroupFacts(plain, _pair_shape(plain, (x, y))).ll128_ok, (x, y)
    if name in ("spectrum-x", "nvl72"):          # NVLink and one port per GPU: no pair falls back
        assert not fallback
    if kw.get("gpus_per_nic"):                    # GPUs behind a NIC: every cross-unit pair falls back
        assert fallback


@pytest.mark.parametrize("name,kw", CASES, ids=IDS)
def test_shape_pairs_equal_shape(name, kw):
    t = build(name, **kw)
    pairs = _pairs(int(t.num_gpus))
    assert len(pairs) >= _PAIR_ARRAY_MIN
    batched, plain = Planner(t), Planner(t)
    batched.call_parts_many([CollectiveRequest("send", p, 1 << 20) for p in pairs])
    assert all(p in batched._shapes for p in pairs)
    for p in pairs:
        got, want = batched._shapes[p], plain.shape(p)
        assert got[0] == want[0], p
        assert _facts_tuple(got[1]) == _facts_tuple(want[1]), p


def test_shape_pairs_leave_bad_groups_to_validation():
    t = build("spectrum-x", gpus=64)
    good = [(g, g + 32) for g in range(20)]
    for bad, msg in (((3, 64), "rank 64 is not a GPU"), ((5, 5), "GPU 5 appears twice"),
                     ((-1, 2), "rank -1 is not a GPU")):
        p = Planner(t)
        with pytest.raises(NetsimError, match=msg):
            p.call_parts_many([CollectiveRequest("send", g, 1024) for g in good + [bad]])
        assert bad not in p._shapes


def test_pair_facts_many_with_uneven_and_dead_ports():
    # ports of different capacities (a degraded and a dead NIC port): each pair gets its slower port
    t = build("spectrum-x", gpus=64)
    views = [TopoView(t), TopoView(t)]
    for v in views:
        port = v._per_gpu_ports()[2]
        v.capacity_Bps[port[0]] *= 0.5
        v.capacity_Bps[port[9]] *= 0.25
        v.capacity_Bps[port[40]] = 0.0
    v, plain = views
    pairs = [(x, y) for x in (0, 9, 40, 41) for y in (0, 9, 33, 40, 57) if x != y]
    same, _dom, bws, _ll = v.pair_facts_many(np.array([p[0] for p in pairs]), np.array([p[1] for p in pairs]))
    slow = 0
    for (x, y), s, got in zip(pairs, same, bws):
        want = plain._pair_bandwidths(x, y)
        assert got == want and [type(z) for z in got] == [type(z) for z in want], (x, y)
        slow += not s and got[1] < plain.capacity_Bps[plain._per_gpu_ports()[2][33]]
    assert slow >= 10
