"""netsim.TopoView's per-GPU bandwidth tables (Python-float sums over a capacity list) against sums
over the numpy capacity column, and its hop cache against routes computed key by key."""

from __future__ import annotations

import pytest

from netsim.topoview import TopoView
from topo.templates import build

CASES = [("spectrum-x", {"gpus": 64}), ("nvl72", {}), ("pcie", {"gpus": 16}), ("alibaba-hpn", {"gpus": 64}),
         ("dcn+", {"gpus": 32})]


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
def test_nvlink_out_is_the_sum_over_nvlink_channels(name, kw):
    t = build(name, **kw)
    v = TopoView(t)
    for g in range(t.num_gpus):
        want = float(sum(v.capacity_Bps[lk.id] for lk in t.links if lk.src == g and lk.kind == "nvlink"))
        got = v.nvlink_out_Bps(g)
        assert got == want and type(got) is float


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
def test_hop_fast_branches_match_the_general_route(name, kw):
    # hop() routes single-port and unstriped hops straight through topo.Router; route() takes the
    # general path (striping, multi-port spreading, key-free sharing) on a separate view
    t = build(name, **kw)
    v, ref = TopoView(t), TopoView(t)
    n = min(t.num_gpus, 24)
    for a in range(n):
        for b in range(n):
            for key in (0, 5, 1031):
                path, pw, prop, cls = v.hop(a, b, key)
                chans, weights = ref.route(a, b, key)
                assert (path, pw) == (chans, weights)
                assert prop == pytest.approx(sum(ref.latency_s[c] * w for c, w in zip(chans, weights)), rel=1e-12)
                assert cls == ref.path_class(chans)
