"""Planner reuse across groups (Planner.choice_key) is exact: a planner that reuses choices, plans
and estimates between groups gives bit-identical results to a fresh planner per group (which has
nothing to reuse), on several fabrics, ops, group shapes and sizes."""

from __future__ import annotations

import numpy as np
import pytest

import topo
from netsim.api import CollectiveRequest
from netsim.backend import Planner

SIZES = (4, 1 << 20, 300 << 20)


def _fabric(name):
    if name == "multi-pod":
        return topo.build("multi-pod", gpus=256, nics_per_asw=8, segments_per_pod=2, psw_count=4)
    return topo.build(name, gpus=256 if name != "spectrum-x" else 1024)


def _requests(n_gpus: int):
    """Translated copies of the groups a TP8 PP4 job uses (pipeline pairs, DP groups, cross-server
    pairs, model-parallel groups) and a few irregular ones."""
    reqs = []
    stage = n_gpus // 4
    for g in range(0, stage, 3):                      # pipeline pairs, every stage boundary
        for s in range(3):
            reqs.append(("send", (s * stage + g, (s + 1) * stage + g)))
            reqs.append(("send", ((s + 1) * stage + g, s * stage + g)))
    for r in range(0, 8, 3):                          # DP groups: one GPU per server, one rail
        reqs.append(("all_reduce", tuple(range(r, n_gpus, 8 * 4))))
        reqs.append(("all_gather", tuple(range(r + 8, n_gpus, 8 * 4))))
    for base in range(0, n_gpus, 64):                 # model-parallel groups of 16 GPUs over 2 servers
        reqs.append(("all_reduce", tuple(range(base, base + 8)) + tuple((base + stage + i) % n_gpus for i in range(8))))
    for g in range(0, n_gpus // 2, 17):               # 2-GPU cross-server all-reduces (tied embeddings)
        reqs.append(("all_reduce", (g, (g + n_gpus // 2) % n_gpus)))
    for base in range(0, 64, 8):                      # TP groups inside one server
        reqs.append(("all_reduce", tuple(range(base, base + 8))))
    reqs.append(("all_reduce", (0, 9, 18, 27)))       # irregular: one GPU of four servers, mixed rails
    reqs.append(("reduce_scatter", (0, 1, 8, 9, 200, 201)))
    return [(op, gpus, size) for op, gpus in reqs for size in SIZES]


def _same_flows(a, b):
    assert len(a) == len(b)
    for fa, fb in zip(a, b):
        assert np.array_equal(fa.channels, fb.channels)
        assert np.array_equal(fa.weights, fb.weights)
        assert (fa.frac, fa.latency_s, fa.cap_Bps, fa.deps, fa.after, fa.nch, fa.fill_stages, fa.fill_chunk) == \
               (fb.frac, fb.latency_s, fb.cap_Bps, fb.deps, fb.after, fb.nch, fb.fill_stages, fb.fill_chunk)


@pytest.mark.parametrize("fabric", ["spectrum-x", "multi-pod", "alibaba-hpn", "dcn+"])
def test_reused_choice_plan_and_estimate_equal_fresh(fabric):
    t = _fabric(fabric)
    shared = Planner(t)
    reqs = _requests(int(t.num_gpus))
    estimates = set()
    for op, gpus, size in reqs:
        req = CollectiveRequest(op, gpus, size)
        fresh = Planner(t, view=shared.view)          # the same routes; no other group to reuse from
        got = shared.choose(req)
        want = fresh.choose(req)
        assert got[3:] == want[3:], (op, gpus, size)
        alg, proto = want[3], want[4]
        assert shared.estimate_s(op, alg, proto, gpus, float(size)) == fresh.estimate_s(op, alg, proto, gpus, float(size))
        # every candidate's estimate, not only the chosen one
        for cand in {"p2p"} if op == "send" else {"ring", "tree"} if op == "all_reduce" and want[1].m > 1 else {"ring"}:
            for pr in ("ll", "simple"):
                assert shared.estimate_s(op, cand, pr, gpus, float(size)) == fresh.estimate_s(op, cand, pr, gpus, float(size))
        c_shared, c_fresh = shared.call(req), fresh.call(req)
        assert c_shared[:3] == c_fresh[:3] and c_shared[4:6] == c_fresh[4:6] and c_shared[7] == c_fresh[7]
        _same_flows(c_shared[3], c_fresh[3])
        _same_flows(shared.plan(op, alg, proto, gpus).flows, fresh.plan(op, alg, proto, gpus).flows)
        estimates.add(fresh.estimate_s(op, alg, proto, gpus, float(size)))
    # reuse happened (translated groups share a key) and the keys are not all alike
    groups = {(op, gpus) for op, gpus, _ in reqs}
    assert len(shared._choice) < len(reqs) // 2
    assert len({shared.route_signature(op, shared.choose(CollectiveRequest(op, g, 4))[3], g)
                for op, g in groups}) > 3
    assert len(estimates) > 10


def test_keys_differ_where_routes_differ():
    # DCN+ hashes every flow over the spines (ECMP): two copies of one tree all-reduce collide on
    # different links, so their tree signatures differ although their shapes are equal; the ring
    # (closed form) signature reads no channel and is shared
    t = topo.build("dcn+", gpus=256)
    p = Planner(t)
    groups = [tuple(range(r, 256, 32)) for r in range(8)]
    tree = {p.route_signature("all_reduce", "tree", g) for g in groups}
    ring = {p.route_signature("all_reduce", "ring", g) for g in groups}
    assert len(ring) == 1 and len(tree) > 1
    # and the estimates agree with fresh planners group by group
    for g in groups:
        fresh = Planner(t, view=p.view)
        assert p.estimate_s("all_reduce", "tree", "simple", g, 1e8) == fresh.estimate_s("all_reduce", "tree", "simple", g, 1e8)


def _perturbed(gpu: int, what: str):
    """Spectrum-X 256 with one GPU's network cable slower (half bandwidth) or longer (+2 us): its
    groups have the same shape and routes as their translates but another bandwidth or latency."""
    from dataclasses import replace
    t = topo.build("spectrum-x", gpus=256)
    change = {"bandwidth": lambda lk: replace(lk, bandwidth_Bps=lk.bandwidth_Bps / 2),
              "latency": lambda lk: replace(lk, latency_s=lk.latency_s + 2e-6)}[what]
    links = tuple(change(lk) if gpu in (lk.src, lk.dst) and lk.kind == "network" else lk for lk in t.links)
    return replace(t, links=links)


@pytest.mark.parametrize("op,groups", [
    ("send", [(g, g + 128) for g in range(0, 24)]),                       # GPU 8's pair among its translates
    ("all_reduce", [tuple(range(r, 256, 64)) for r in range(0, 16)]),     # ring/tree over 4 servers, GPU 8 in one
    ("all_gather", [tuple(range(r, 256, 32)) for r in range(0, 16)]),
])
@pytest.mark.parametrize("what", ["bandwidth", "latency"])
def test_reuse_sees_bandwidth_and_latency_of_one_cable(op, groups, what):
    t = _perturbed(8, what)
    shared = Planner(t)
    odd = [g for g in groups if 8 in g]
    assert len(odd) == 1
    for size in SIZES:
        times = {}
        for g in groups:
            req = CollectiveRequest(op, g, size)
            fresh = Planner(t, view=shared.view)
            want = fresh.choose(req)
            assert shared.choose(req)[3:] == want[3:]
            alg, proto = want[3], want[4]
            times[g] = fresh.estimate_s(op, alg, proto, g, float(size))
            assert shared.estimate_s(op, alg, proto, g, float(size)) == times[g]
            _same_flows(shared.call(req)[3], fresh.call(req)[3])
        # the slow cable shows (at the largest size): its group is the only one with another time
        if size == SIZES[-1]:
            assert {g for g in groups if times[g] != times[groups[1]]} == set(odd)
