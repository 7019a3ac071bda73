"""Planner._quick_signature shared by templates with equal fields and hops: a ring's reduce-scatter
and all-gather over one group have one signature (their canonical specs are equal), computed once;
it must equal the signature a planner that never saw the other op computes, and so must the answers."""

from __future__ import annotations

import pytest

from netsim.api import CollectiveRequest
from netsim.backend import Planner
from topo.templates import build

CASES = [("spectrum-x", {"gpus": 256}), ("multi-pod", {"gpus": 256, "nics_per_asw": 8, "segments_per_pod": 2,
                                                         "psw_count": 4})]
GROUPS = [tuple(range(0, 256, 2)), tuple(range(1, 65)), tuple(range(8, 24, 2)), (0, 1), tuple(range(0, 256, 16))]


@pytest.mark.parametrize("name,kw", CASES, ids=[c[0] for c in CASES])
def test_reduce_scatter_and_all_gather_share_one_signature(name, kw):
    t = build(name, **kw)
    shared = Planner(t)
    for gpus in GROUPS:
        shape = shared.shape(gpus)[0]
        rs = shared._quick_signature("reduce_scatter", "ring", gpus, shape)
        ag = shared._quick_signature("all_gather", "ring", gpus, shape)
        assert rs is not None and ag is rs                 # computed once, for both ops
        alone = Planner(t)                                 # all-gather first and alone
        assert alone._quick_signature("all_gather", "ring", gpus, alone.shape(gpus)[0]) == ag
        for size in (4096, 3 << 20, 1 << 30):
            for op in ("reduce_scatter", "all_gather"):
                req = CollectiveRequest(op, gpus, size)
                assert shared.analytical_s(req) == Planner(t).analytical_s(req), (op, gpus, size)
    # templates that differ (an all-reduce ring moves other bytes) keep their own ids
    gpus = GROUPS[0]
    shape = shared.shape(gpus)[0]
    ar = shared._quick_signature("all_reduce", "ring", gpus, shape)
    sizes = tuple(len(s) for s in shape.servers)
    tids = {shared._quick_tmpl[(op, "ring", sizes)][3] for op in ("reduce_scatter", "all_gather", "all_reduce")}
    assert len(tids) == 2 and ar != shared._quick_signature("all_gather", "ring", gpus, shape)


def test_a_group_without_hop_keys_shares_none():
    # alibaba-hpn's dual-plane GPUs have two network ports: hop_keys cannot key them, for either op
    t = build("alibaba-hpn", gpus=64)
    p = Planner(t)
    gpus = tuple(range(0, 64, 8))
    shape = p.shape(gpus)[0]
    assert p._quick_signature("reduce_scatter", "ring", gpus, shape) is None
    assert p._quick_signature("all_gather", "ring", gpus, shape) is None
    assert p.quick_key(CollectiveRequest("all_gather", gpus, 1 << 20)) is None
