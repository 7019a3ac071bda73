"""Rule (5), sim.ep_symmetry: congruent EP groups sharing fabric links run as one quotient copy."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest

import netsim
import topo
from netsim.api import CollectiveRequest
from netsim.engine import FlowEngine
from netsim.resolve import ScheduleRun
from sim import engine as sim_engine
from sim import simulate
from sim.ep_symmetry import QuotientGroup, fold_flows, quotient_groups
from workload_gen import generate
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan

SIZE = 32 << 20


def _fabric():
    # 16 servers, 4 NICs per leaf and 2 spines per pod: EP groups of 16 GPUs strided by TP 2 span 4
    # servers, their cross-rail hops go over the spines, where ECMP makes the groups collide
    return topo.build("multi-pod", gpus=128, nics_per_asw=4, psw_count=2)


def _ep_groups(first: int, count: int):
    """EP 16 groups of TP 2 (ranks tp-ep-dp): GPUs first + 32 j + {0, 2, ..., 30} and the odd lane."""
    out = []
    for j in range(count // 2):
        base = first + 32 * j
        out += [tuple(range(base, base + 32, 2)), tuple(range(base + 1, base + 32, 2))]
    return out


def _is_fabric(view, ch: int) -> bool:
    return bool(view.is_network_switch(int(view.ch_src[ch])) and view.is_network_switch(int(view.ch_dst[ch])))


def test_quotient_weights_are_the_copies_load_on_fabric_links():
    net = netsim.make_backend("flow", _fabric())
    planner, view = net.planner, net.planner.view
    groups = _ep_groups(0, 4)
    out = quotient_groups(planner, groups, "all_to_all", SIZE, rep_gpu=2)
    assert len(out) == 1 and isinstance(out[0], QuotientGroup)
    q = out[0]
    assert q == groups[0] and q.plan.copies == 4            # the representative rank's group
    calls = [planner.call(CollectiveRequest("all_to_all", g, SIZE)) for g in groups]
    assert q.plan.algorithm == calls[0][1] and q.plan.delay_s == calls[0][4]
    extra = 0
    for i, f in enumerate(q.plan.flows):
        want: dict = defaultdict(float)         # computed here from every copy's own flows
        for k, c in enumerate(calls):
            g = c[3][i]
            for ch, w in zip(g.channels.tolist(), g.weights.tolist()):
                if k == 0 or _is_fabric(view, ch):
                    want[ch] += w
        got = dict(zip(f.channels.tolist(), f.weights.tolist()))
        assert got.keys() == want.keys()
        assert all(got[ch] == pytest.approx(want[ch], rel=1e-15) for ch in got)
        # the representative's own (non-fabric) links keep its weights: no copy crosses them
        rep = dict(zip(calls[0][3][i].channels.tolist(), calls[0][3][i].weights.tolist()))
        assert all(got[ch] == rep[ch] for ch in rep if not _is_fabric(view, ch))
        extra += sum(1 for ch in got if ch not in rep)
        assert f.frac == calls[0][3][i].frac and f.latency_s == calls[0][3][i].latency_s
    assert extra > 0            # the copies' spine links are loaded too, not only the representative's
    # the sums do not depend on which member represents the class
    alt = fold_flows(planner.fabric_mask(), calls, 2)
    for a, b in zip(alt, q.plan.flows):
        fab = np.array([_is_fabric(view, ch) for ch in a.channels.tolist()])
        fb = np.array([_is_fabric(view, ch) for ch in b.channels.tolist()])
        assert np.array_equal(a.channels[fab], b.channels[fb]) and np.array_equal(a.weights[fab], b.weights[fb])


def test_groups_of_another_shape_are_not_folded():
    net = netsim.make_backend("flow", _fabric())
    strided = _ep_groups(0, 2)
    contiguous = (64 + np.arange(16)).tolist()       # two whole servers: other own-link pattern
    groups = strided + [tuple(contiguous)]
    out = quotient_groups(net.planner, groups, "all_to_all", SIZE, rep_gpu=1)
    assert len(out) == 2
    assert isinstance(out[0], QuotientGroup) and out[0] == strided[1] and out[0].plan.copies == 2
    assert type(out[1]) is tuple and out[1] == tuple(contiguous)
    # congruent groups that share a GPU's own links (here: the same group twice) are not folded
    out = quotient_groups(net.planner, [strided[0], strided[0]], "all_to_all", SIZE, rep_gpu=0)
    assert out == [strided[0], strided[0]] and all(type(g) is tuple for g in out)


def test_quotient_alone_equals_every_copy_when_copies_do_not_meet():
    # two copies on disjoint links (even and odd TP lanes use different rails): the quotient run alone
    # finishes when the two copies run together do, to the last bits
    net = netsim.make_backend("flow", _fabric())
    planner = net.planner
    groups = _ep_groups(0, 2)
    calls = [planner.call(CollectiveRequest("all_to_all", g, SIZE)) for g in groups]
    ch = [set().union(*(f.channels.tolist() for f in c[3])) for c in calls]
    assert not ch[0] & ch[1]

    def run(schedules):
        eng = FlowEngine(planner.view.capacity_Bps, use_numba=False)
        ends = []
        for flows, delay, mult in schedules:
            ScheduleRun(eng, flows, float(SIZE), ends.append, delay_s=delay, lat_mult=mult).start()
        eng.run()
        return max(ends)

    q = quotient_groups(planner, groups, "all_to_all", SIZE, rep_gpu=0)[0].plan
    assert run([(q.flows, q.delay_s, q.lat_mult)]) == run([(c[3], c[4], c[5]) for c in calls])


MOE = ModelSpec("moe-mid", num_layers=2, hidden_size=4096, num_attention_heads=8, ffn_hidden_size=4096,
                vocab_size=32000, num_experts=16, moe_top_k=2, moe_ffn_hidden_size=1024)


@pytest.mark.slow
def test_quotient_within_stated_bound_of_full(monkeypatch):
    # docs/sim.md (Symmetry, rule 5): within 1% of --sampling full; this case 128 GPUs, TP2 EP16 PP2
    plan = ParallelPlan(world_size=128, tp=2, pp=2, ep=16, global_batch_size=64, micro_batch_size=1,
                        seq_length=4096, sequence_parallel=True, distributed_optimizer=True)
    w = generate(MOE, plan)
    t = _fabric()
    auto = simulate(w, t, gpu="H100", network="flow", sampling="auto")
    full = simulate(w, t, gpu="H100", network="flow", sampling="full")
    monkeypatch.setattr(sim_engine, "QUOTIENT_KINDS", frozenset())
    exact = simulate(w, t, gpu="H100", network="flow", sampling="auto")
    assert auto.meta["network_collectives"] < exact.meta["network_collectives"]     # rule (5) fired
    assert auto.exposed_comm_s["EP"] > 0.01 * auto.iteration_time_s                 # and EP matters
    assert auto.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-2)
    assert auto.exposed_comm_s["EP"] == pytest.approx(full.exposed_comm_s["EP"], rel=5e-2)
