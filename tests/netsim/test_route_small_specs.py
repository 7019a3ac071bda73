"""Plain-Python merge of small specs (issue 16 item 3): netsim.resolve._route_hops merges the channel
uses of a spec with at most SMALL_SPEC_CHANNELS uses in Python (_merge_small) instead of np.unique +
np.bincount. Each test compares with the numpy path of the same spec (forced by setting the limit
below every spec): the same channels and weights arrays (values, dtypes, order), link classes and
propagation latencies, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

import netsim.resolve as resolve
from netsim.api import CollectiveRequest
from netsim.backend import Planner
from netsim.schedules import build_specs, group_shape
from netsim.topoview import TopoView
from topo.templates import build

FABRICS = [("spectrum-x", {"gpus": 128}, "auto"), ("multi-pod", {"gpus": 4608}, "auto"),
           ("multi-pod", {"gpus": 4608}, "ecmp"), ("alibaba-hpn", {"gpus": 128, "dual_tor": True}, "auto"),
           ("dcn+", {"gpus": 64}, "ecmp"), ("nvl72", {}, "auto")]


def _groups(topo) -> list[tuple[int, ...]]:
    """Send pairs (inside a server, to the next server, across the fabric) and small groups."""
    n, gps = topo.num_gpus, topo.gpus_per_server
    pairs = [(0, 1), (1, 0), (0, gps), (gps + 3, 3), (0, n - 1), (n // 2 + 1, 5)]
    small = [tuple(range(0, min(n, 4 * gps), gps)), tuple(range(min(n, 4))), (0, gps // 2, n - gps, n - 1)]
    return [g for g in pairs + small if len(set(g)) == len(g)]


def _specs(view, gpus):
    shape = group_shape(view, gpus)
    if len(gpus) == 2:
        yield from build_specs(shape, "send", "p2p", 1.0)
    for alg in ("tree", "ring", "nvls"):
        try:
            yield from build_specs(shape, "all_reduce", alg, 1.0)
        except Exception:        # an algorithm this group has no schedule for
            continue


def _assert_same(got, want):
    assert got.channels.dtype == want.channels.dtype == np.int64
    assert got.weights.dtype == want.weights.dtype == np.float64
    assert got.channels.tolist() == want.channels.tolist()
    assert got.weights.tolist() == want.weights.tolist()          # exact floats, channel order
    assert got.hop_class == want.hop_class and got.hop_prop_s == want.hop_prop_s
    assert (got.switch_prop_s, got.line_up_Bps) == (want.switch_prop_s, want.line_up_Bps)


@pytest.mark.parametrize("template,params,routing", FABRICS, ids=[f"{t}-{r}-{i}" for i, (t, _, r) in enumerate(FABRICS)])
@pytest.mark.parametrize("pxn", [False, True])
def test_small_spec_merge_equals_the_numpy_merge(template, params, routing, pxn, monkeypatch):
    topo = build(template, **params)
    view = TopoView(topo, routing=routing, pxn=pxn)
    ref_view = TopoView(topo, routing=routing, pxn=pxn)
    fast = slow = 0
    for gpus in _groups(topo):
        for i, spec in enumerate(_specs(view, gpus)):
            monkeypatch.setattr(resolve, "SMALL_SPEC_CHANNELS", 64)
            got = resolve._route_hops(view, spec, i)
            monkeypatch.setattr(resolve, "SMALL_SPEC_CHANNELS", -1)    # every spec through numpy
            want = resolve._route_hops(ref_view, spec, i)
            _assert_same(got, want)
            # sorted and distinct: Planner.route_signature ranks a single spec's channels 0, 1, ...
            assert np.all(np.diff(got.channels) > 0)
            uses = len(got.channels)
            fast += uses <= 64
            slow += uses > 64
    assert fast >= 5


def test_merge_small_sums_repeated_channels_in_use_order():
    # 0.1 + 0.2 + 0.3 depends on the order of the additions: bincount adds in use order from 0.0
    chans = [7, 3, 7, 9, 7, 3]
    ws = [0.1, 1.0, 0.2, 0.5, 0.3, 1e-17]
    uniq, wsum = resolve._merge_small(chans, ws)
    assert uniq.tolist() == [3, 7, 9] and uniq.dtype == np.int64 and wsum.dtype == np.float64
    assert wsum.tolist() == [1.0 + 1e-17, ((0.1 + 0.2) + 0.3), 0.5]
    ref_u, inv = np.unique(np.array(chans), return_inverse=True)
    assert wsum.tolist() == np.bincount(inv, weights=np.array(ws)).tolist()
    empty = resolve._merge_small([], [])
    assert empty[0].dtype == np.int64 and empty[1].dtype == np.float64 and len(empty[0]) == len(empty[1]) == 0


def test_route_specs_returns_a_fresh_route_without_a_copy_and_a_cached_one_with_its_own_spec():
    topo = build("spectrum-x", gpus=64)
    view = TopoView(topo)
    shape = group_shape(view, (0, 8))
    specs = build_specs(shape, "send", "p2p", 1.0)
    first = resolve.route_specs(view, specs)[0]
    assert first.spec is specs[0]
    other = build_specs(shape, "recv", "p2p", 1.0)       # the same hops: the view's cache answers
    again = resolve.route_specs(view, other)[0]
    assert again.spec is other[0] and again.channels is first.channels


@pytest.mark.parametrize("template,params", [("multi-pod", {"gpus": 4608}), ("dcn+", {"gpus": 64})])
def test_send_signature_ranks_equal_the_general_ranks(template, params):
    # route_signature's single-spec shortcut: the ranks of sorted distinct channels are 0..n-1, the
    # channel capacities in channel order; computed here the general way from the routed spec
    topo = build(template, **params)
    planner = Planner(topo)
    n = topo.num_gpus
    sigs = {}
    for pair in [(0, 8), (8, 0), (1, n - 7), (n - 7, 1), (2, 3)]:
        planner.call(CollectiveRequest("send", pair, 1 << 20))
        (r,) = planner._routed_specs("send", "p2p", pair)
        chans = r.channels.tolist()
        used = sorted(set(chans))
        cap = planner.capacity_list()
        s = r.spec
        want = ((s.nbytes, s.steps, s.deps, None, s.nvls, s.pxn, s.after, s.ring, s.lat_stages, s.share, s.fill,
                 tuple(r.hop_class), tuple(r.hop_prop_s), r.switch_prop_s, r.line_up_Bps, tuple(r.weights.tolist())),
                (tuple(used.index(c) for c in chans),), tuple(cap[c] for c in used))
        sigs.setdefault(want, set()).add(planner.route_signature("send", "p2p", pair))
    # equal signatures <-> equal ids
    assert all(len(ids) == 1 for ids in sigs.values())
    assert len({next(iter(ids)) for ids in sigs.values()}) == len(sigs)
