"""The quick-answer shortcuts of finish (netsim.resolve): ring_window_s's two-slice window and
routed_latency_s's LatencyMemo against the plain formulas, bit for bit, and the Planner's sharing of
routed specs and plans between quick keys (netsim.backend.Planner._quick_routed). The ring window's
two paths are tested in test_ring_window.py."""

from __future__ import annotations

import math
import random

import numpy as np

from netsim.api import CollectiveRequest
from netsim.backend import Planner
from netsim.resolve import (
    MEMO_MIN_HOPS,
    RING_NUMPY_MIN_HOPS,
    RoutedSpec,
    critical_latency_s,
    new_latency_memo,
    routed_latency_s,
)
from netsim.schedules import FlowSpec
from topo.templates import build


def _spec(rng: random.Random, n: int) -> FlowSpec:
    kind = rng.choice(("ring", "stages", "parallel"))
    if kind == "ring":
        return FlowSpec([], 1.0, steps=rng.randint(1, 2 * n + 1), ring=True)
    if kind == "stages":
        paths = tuple(tuple(rng.sample(range(n), rng.randint(1, n))) for _ in range(rng.randint(1, 3)))
        return FlowSpec([], 1.0, lat_stages=(paths, ()) if rng.random() < 0.3 else (paths,))
    return FlowSpec([], 1.0, steps=rng.randint(1, 4))


def _plain_latency(spec: FlowSpec, classes, props, alpha: dict[str, float]) -> float:
    return critical_latency_s(spec, [alpha[c] + p for c, p in zip(classes, props)])


def test_routed_latency_equals_the_plain_formula_hit_or_miss():
    rng = random.Random(7)
    alphas = [{"nvlink": 0.6e-6, "pcie": 1.0e-6, "network": 3.1e-6},
              {"nvlink": 1.1e-6, "pcie": 1.0e-6, "network": 7.0e-6},
              {"nvlink": 0.6e-6, "pcie": 2.0e-6, "network": 3.1e-6}]
    for _ in range(400):
        n = rng.choice((1, 2, MEMO_MIN_HOPS - 1, MEMO_MIN_HOPS, 40, RING_NUMPY_MIN_HOPS, 384))
        classes = tuple(rng.choice(("nvlink", "pcie", "network")) for _ in range(n))
        props = tuple(rng.choice((0.0, 1e-7, 2.5e-7)) for _ in range(n))
        spec = _spec(rng, n)
        shared = new_latency_memo(classes) if rng.random() < 0.5 else None
        r = RoutedSpec(spec, np.zeros(0, np.int64), np.zeros(0), classes, props, 0.0, math.inf, shared)
        for alpha in alphas + alphas:            # the second pass reads the memo
            assert routed_latency_s(r, alpha.__getitem__) == _plain_latency(spec, classes, props, alpha)


def test_a_shared_memo_keeps_each_spec_its_own_latency():
    # two specs over the same hops with different steps share one memo: each keeps its own value
    classes = ("nvlink", "network") * 10
    props = tuple(1e-7 * (i % 3) for i in range(20))
    memo = new_latency_memo(classes)
    alpha = {"nvlink": 1e-6, "network": 5e-6}
    out = []
    for steps in (3, 19, 3):
        spec = FlowSpec([], 1.0, steps=steps, ring=True)
        r = RoutedSpec(spec, np.zeros(0, np.int64), np.zeros(0), classes, props, 0.0, math.inf, memo)
        out.append(routed_latency_s(r, alpha.__getitem__))
        assert out[-1] == _plain_latency(spec, classes, props, alpha)
    assert out[0] == out[2] != out[1] and len(memo.latency_s) == 2


def test_quick_answers_share_routes_and_plans():
    t = build("spectrum-x", gpus=256)
    quick, plain = Planner(t), Planner(t)
    plain.quick_key = lambda req: None
    dp = tuple(range(0, 256, 8))
    for op in ("reduce_scatter", "all_gather"):
        for size in (4096, 3 << 20):
            req = CollectiveRequest(op, dp, size)
            assert quick.analytical_s(req) == plain.analytical_s(req)
    # a ring's reduce-scatter and all-gather have equal spec fields and hops: one routed list; a new
    # size of a known key reuses its plans
    ids = {rid for _routed, rid in quick._quick_routes.values()}
    assert len(quick._quick_routes) == 1 and len(ids) == 1
    n_plans = len(quick._quick_plans)
    assert n_plans == 2 * 3          # two ops x (LL, LL128, Simple)
    req = CollectiveRequest("all_gather", dp, 1 << 30)
    assert quick.analytical_s(req) == plain.analytical_s(req)
    assert len(quick._quick_plans) == n_plans
