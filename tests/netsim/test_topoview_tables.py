"""netsim.TopoView's tables and cached hops against per-link / per-route reference computations.

TopoView builds its channel tables from topo.Topology.link_arrays (numpy columns), pairs cable twins by
id (2k, 2k+1), evaluates link efficiencies once per (kind, rate), builds adjacency rows on demand and
shares a hop between flow keys when no key can change it. Each test recomputes the same quantity the
plain way (a Python loop over Link objects, a dictionary pairing, a fresh view per key) and compares.
"""

from __future__ import annotations

import numpy as np
import pytest

from netsim import calibration as cal
from netsim.resolve import route_spec
from netsim.schedules import FlowSpec, build_specs, group_shape
from netsim.topoview import TopoView
from topo.model import Link, Node, Topology
from topo.templates import build

TEMPLATES = [("spectrum-x", {"gpus": 64}), ("dcn+", {"gpus": 32}), ("alibaba-hpn", {"gpus": 64}),
             ("nvl72", {}), ("pcie", {"gpus": 16}), ("fat-tree", {"gpus": 64}), ("multi-pod", {"gpus": 4608})]


def _hand_built(parallel: bool, directed: bool) -> Topology:
    """4 GPUs on 2 NVSwitches and one network switch; optional parallel cable; optional one-way links
    (read by netsim as full-duplex links)."""
    nodes = tuple([Node(i, "gpu", "gpu") for i in range(4)] + [Node(4, "nvswitch", "nvswitch"),
                                                               Node(5, "nvswitch", "nvswitch"),
                                                               Node(6, "switch", "asw")])
    ends = [(0, 4, "nvlink"), (1, 4, "nvlink"), (2, 5, "nvlink"), (3, 5, "nvlink"),
            (0, 6, "network"), (1, 6, "network"), (2, 6, "network"), (3, 6, "network")]
    if parallel:
        ends.append((0, 6, "network"))
    links = []
    for a, b, kind in ends:
        bw = 450e9 if kind == "nvlink" else 50e9
        links.append(Link(len(links), a, b, bw, 1e-6, kind))
        if directed:
            links.append(Link(len(links), b, a, bw, 1e-6, kind))
    return Topology(4, 2, "H100", 2, nodes, tuple(links), name="hand")


def _topologies():
    out = [(f"{name}", build(name, **kw)) for name, kw in TEMPLATES]
    out += [("parallel", _hand_built(True, True)), ("one-way", _hand_built(False, False))]
    return out


@pytest.mark.parametrize("name,t", _topologies(), ids=lambda x: x if isinstance(x, str) else "")
def test_channel_tables_match_a_per_link_reference(name, t):
    v = TopoView(t)
    links = list(t.links)
    pairs = {(lk.src, lk.dst): i for i, lk in enumerate(links)}
    directed = all((b, a) in pairs for (a, b) in pairs)
    assert v.directed == directed
    if directed:
        ref_src = [lk.src for lk in links]
        ref_dst = [lk.dst for lk in links]
        ref_kind = [lk.kind for lk in links]
        ref_rev = [pairs[(lk.dst, lk.src)] for lk in links]
        ref_bw = [lk.bandwidth_Bps for lk in links]
        ref_health = [lk.capacity_factor * (1.0 - lk.error_rate) for lk in links]
        ref_lat = [lk.latency_s for lk in links]
    else:
        ref_src = [x for lk in links for x in (lk.src, lk.dst)]
        ref_dst = [x for lk in links for x in (lk.dst, lk.src)]
        ref_kind = [lk.kind for lk in links for _ in (0, 1)]
        ref_rev = [c ^ 1 for c in range(2 * len(links))]
        ref_bw = [lk.bandwidth_Bps for lk in links for _ in (0, 1)]
        ref_health = [lk.capacity_factor * (1.0 - lk.error_rate) for lk in links for _ in (0, 1)]
        ref_lat = [lk.latency_s for lk in links for _ in (0, 1)]
    assert v.ch_src.tolist() == ref_src and v.ch_dst.tolist() == ref_dst and list(v.ch_kind) == ref_kind
    assert v._rev.tolist() == ref_rev
    ref_cap = [b * cal.link_efficiency(k, b, t.gpu_type) * h for k, b, h in zip(ref_kind, ref_bw, ref_health)]
    assert v.capacity_Bps.tolist() == ref_cap
    assert v.latency_s.tolist() == ref_lat
    ref_adj: dict[int, list] = {}
    for c, (a, b) in enumerate(zip(ref_src, ref_dst)):
        ref_adj.setdefault(a, []).append((c, b))
    for node in range(len(t.nodes)):
        assert v._adj[node] == ref_adj.get(node, [])
    assert [v.domain_of(g) for g in range(t.num_gpus)] == [t.nvlink_domain_of(g) for g in range(t.num_gpus)]
    assert [v.server_of(g) for g in range(t.num_gpus)] == [t.server_of(g) for g in range(t.num_gpus)]


def test_parallel_cables_pair_through_the_dictionary():
    """Two cables between the same nodes: the reverse of each forward link is the last twin, as the
    dictionary pairing always did (the id-twin shortcut is not taken)."""
    t = _hand_built(True, True)
    v = TopoView(t)
    assert v._rev[8] == 17 and v._rev[16] == 17      # both GPU0 -> switch links map to the last reverse


@pytest.mark.parametrize("name,t", _topologies()[:6], ids=lambda x: x if isinstance(x, str) else "")
def test_hops_shared_between_keys_equal_a_fresh_route_per_key(name, t):
    """hop() computes a key-independent hop once; every key must still get exactly route(src, dst, key)
    of a view that never shared anything, with its latency and link class."""
    shared = TopoView(t)
    n = t.num_gpus
    pairs = [(a, b) for a in range(min(n, 16)) for b in range(min(n, 16)) if a != b]
    pairs += [(a, (a * 7 + 3) % n) for a in range(0, n, max(1, n // 16)) if (a * 7 + 3) % n != a]
    for key in (0, 5, 1009, 77777):
        fresh = TopoView(t)
        for a, b in pairs:
            path, pw, lat, cls = shared.hop(a, b, key)
            ref_path, ref_w = fresh.route(a, b, key)
            assert (path, pw) == (ref_path, ref_w), (a, b, key)
            assert lat == sum(fresh.latency_s[c] * w for c, w in zip(ref_path, ref_w))
            assert cls == fresh.path_class(ref_path)


def test_route_spec_sums_the_weights_of_repeated_channels():
    """A flow that crosses the same channel twice carries the sum of its hop weights there (np.add.at
    reference)."""
    t = build("spectrum-x", gpus=16)
    v = TopoView(t)
    spec = FlowSpec(hops=[(0, 8), (8, 0), (0, 8), (1, 9)], nbytes=1.0, weights=[0.5, 1.0, 0.25, 2.0])
    r = route_spec(v, spec, 3)
    chans, ws = [], []
    for h, (a, b) in enumerate(spec.hops):
        path, pw = TopoView(t).route(a, b, (3 * 1009 + h) & 0x7FFFFFFF)
        chans += list(path)
        ws += [spec.weights[h] * x for x in pw]
    uniq = np.unique(np.asarray(chans))
    ref = np.zeros(len(uniq))
    np.add.at(ref, np.searchsorted(uniq, chans), ws)
    assert r.channels.tolist() == uniq.tolist()
    assert r.weights.tolist() == ref.tolist()


def test_translated_rings_across_a_pod_boundary_are_slower():
    """Why collective times are not memoised by translation across pipeline stages: on SimAI's
    9,216-GPU multi-pod fabric (pods of 4,096 GPUs) the data-parallel rings of stages 4 and 5 of its
    MoE example are translates (same member offsets, same NVLink-domain pattern), but stage 5's ring
    crosses the core between pods and takes longer. A memo keyed on the group's shape would give stage 5
    stage 4's time."""
    import netsim
    from netsim.api import CollectiveRequest
    t = build("multi-pod", gpus=9216)
    net = netsim.make_backend("analytical", t)
    stage4 = tuple(range(3072, 3840, 2))
    stage5 = tuple(range(3840, 4608, 2))             # GPUs 3840..4606: pod 0 and pod 1
    assert [g - stage4[0] for g in stage4] == [g - stage5[0] for g in stage5]
    t4 = net.estimate(CollectiveRequest("reduce_scatter", stage4, 5615517696))
    t5 = net.estimate(CollectiveRequest("reduce_scatter", stage5, 5615517696))
    assert t5 > t4 * (1 + 1e-6)
    v = net.planner.view

    def longest_hop_s(gpus):
        specs = build_specs(group_shape(v, gpus), "reduce_scatter", "ring", 1.0)
        return max(max(route_spec(v, s, i).hop_prop_s) for i, s in enumerate(specs))

    # the difference is propagation: stage 5's longest ring hop climbs to the core (more links)
    assert longest_hop_s(stage5) > longest_hop_s(stage4)
