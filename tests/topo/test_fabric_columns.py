"""The fabric builder's shortcuts (issue 16): links made without the frozen __init__ (topo.model.link_maker),
the link columns kept while building (Topology.link_arrays), and the array forms of rails and
is_rail_optimized for fabrics whose GPUs are their own NIC endpoints. Each is compared with the plain
computation over Link objects / per-GPU ports."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from topo.analysis import is_rail_optimized
from topo.model import Link, _link_arrays, direct_gpu_links, link_maker
from topo.templates import build

FABRICS = [("spectrum-x", {"gpus": 128}), ("multi-pod", {"gpus": 4608}), ("dcn+", {"gpus": 64}),
           ("alibaba-hpn", {"gpus": 128, "dual_tor": True}), ("non-rail", {"gpus": 64}),
           ("rail-optimized", {"gpus": 64}), ("fat-tree", {"gpus": 64}), ("nvl72", {}), ("pcie", {"gpus": 16}),
           ("spectrum-x", {"gpus": 64, "nics": True, "gpus_per_nic": 2}),
           ("spectrum-x", {"gpus": 64, "error_rate": 0.01})]


def test_link_maker_builds_the_same_frozen_link():
    make = link_maker()
    got = make(7, 1, 2, 50e9, 1e-6, "network", 0.001, "400Gbps", "0.001ms")
    want = Link(7, 1, 2, 50e9, 1e-6, "network", 0.001, "400Gbps", "0.001ms")
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
    assert (got.rate_text, got.delay_text, got.capacity_factor) == ("400Gbps", "0.001ms", 1.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.src = 3
    assert make(0, 4, 5, 1.0, 2.0, "nvlink") == Link(0, 4, 5, 1.0, 2.0, "nvlink")


@pytest.mark.parametrize("template,params", FABRICS, ids=[f"{t}-{i}" for i, (t, _) in enumerate(FABRICS)])
def test_built_link_columns_rails_and_rail_optimization_match_the_plain_forms(template, params):
    try:
        t = build(template, **params)
    except TypeError:
        pytest.fail(f"template {template} rejected {params}")
    la, ref = t.link_arrays(), _link_arrays(t.links)
    for col in ("src", "dst", "bandwidth_Bps", "latency_s", "health"):
        a, b = getattr(la, col), getattr(ref, col)
        assert a.dtype == b.dtype and np.array_equal(a, b), col
    assert la.kind == ref.kind
    # the builder's kind codes: the distinct kinds of the links in first-seen order, per link its code
    names, codes = la.kind_codes
    assert list(names) == list(dict.fromkeys(ref.kind)) and list(names.values()) == list(range(len(names)))
    assert codes.dtype == np.int64 and [list(names)[c] for c in codes.tolist()] == ref.kind
    assert ref.kind_codes is None
    # the same topology with the array shortcut of rails / is_rail_optimized switched off
    plain = build(template, **params)
    g, sw, _every = direct_gpu_links(plain)
    plain._cache["direct_links"] = (g, sw, False)
    assert t.rails() == plain.rails()
    assert t._cache.get("nic_rail") == plain._cache.get("nic_rail")
    assert is_rail_optimized(t) == is_rail_optimized(plain)


def test_node_maker_builds_the_same_frozen_node():
    from topo.model import Node, node_maker
    got = node_maker()(12, "switch", "asw")
    want = Node(12, "switch", "asw")
    assert got == want and hash(got) == hash(want) and repr(got) == repr(want)
    with pytest.raises(dataclasses.FrozenInstanceError):
        got.tier = "psw"


def test_rail_optimization_of_known_fabrics():
    assert is_rail_optimized(build("spectrum-x", gpus=128))
    assert is_rail_optimized(build("multi-pod", gpus=4608))
    assert not is_rail_optimized(build("dcn+", gpus=64))
    assert direct_gpu_links(build("spectrum-x", gpus=64))[2]
    assert not direct_gpu_links(build("spectrum-x", gpus=64, nics=True, gpus_per_nic=2))[2]


def test_built_links_are_made_on_first_use_and_behave_as_the_tuple():
    import pickle

    from topo.model import LazyLinks
    t = build("spectrum-x", gpus=64)
    links = t.links
    assert isinstance(links, LazyLinks) and links._items is None
    n = len(links)
    assert n == 2 * t.num_cables and links._items is None      # the length needs no Link objects
    la = t.link_arrays()
    assert links._items is None                                  # nor do the columns
    plain = tuple(links)
    assert len(plain) == n and all(isinstance(lk, Link) for lk in plain)
    # link 2k is cable k as written, 2k+1 its reverse, with the columns' values
    for k in (0, 1, n // 2, n - 2, n - 1):
        lk = plain[k]
        assert lk.id == k and (lk.src, lk.dst) == (int(la.src[k]), int(la.dst[k]))
        assert (lk.bandwidth_Bps, lk.latency_s, lk.kind) == (la.bandwidth_Bps[k], la.latency_s[k], la.kind[k])
        twin = plain[k ^ 1]
        assert (twin.src, twin.dst, twin.rate_text, twin.delay_text) == (lk.dst, lk.src, lk.rate_text, lk.delay_text)
    assert links == plain and plain == links and not (links != plain) and hash(links) == hash(plain)
    assert links != plain[:-1] and links[::2] == plain[::2] and isinstance(links[::2], tuple)
    assert links + (plain[0],) == plain + (plain[0],) and (plain[0],) + links == (plain[0],) + plain
    assert plain[3] in links and list(reversed(links)) == list(reversed(plain))
    assert pickle.loads(pickle.dumps(links)) == plain
    other = dataclasses.replace(t, links=plain)
    assert other == t and hash(other) == hash(t)
    assert t.out_links(0) == [lk for lk in plain if lk.src == 0]
