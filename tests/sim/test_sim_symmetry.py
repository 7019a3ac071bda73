"""Symmetry shortcuts are exact: 'auto' sampling gives the same iteration as submitting every group."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import topo
from netsim.api import CollectiveRequest
from sim import simulate
from sim.engine import Engine
from workload_gen import generate
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan

TINY = ModelSpec("tiny", num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096,
                 vocab_size=32000)


@pytest.mark.parametrize("tp,pp,dp,fabric", [(8, 2, 2, "spectrum-x"), (4, 2, 4, "spectrum-x"), (2, 2, 8, "dcn+")])
def test_auto_sampling_equals_full(tp, pp, dp, fabric):
    plan = ParallelPlan(world_size=tp * pp * dp, tp=tp, pp=pp, global_batch_size=4 * dp, micro_batch_size=1,
                        seq_length=1024, sequence_parallel=tp > 1, distributed_optimizer=True)
    w = generate(TINY, plan)
    t = topo.build(fabric, gpus=plan.world_size)
    auto = simulate(w, t, gpu="H100", network="flow", sampling="auto")
    full = simulate(w, t, gpu="H100", network="flow", sampling="full")
    assert auto.meta["network_collectives"] < full.meta["network_collectives"]
    assert auto.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    assert auto.compute_s == pytest.approx(full.compute_s, rel=1e-12)


def test_auto_sampling_multi_pod_within_ecmp_noise():
    # 3-tier fabric, stages in different segments: PP flows cross the spines. Rule (4) finds the copies
    # whose routes are congruent and disjoint (rail-aligned D-mod-k routes here), so auto submits as few
    # calls as the approximate rail sampling and still equals the full simulation
    plan = ParallelPlan(world_size=128, tp=8, pp=2, global_batch_size=16, micro_batch_size=1, seq_length=1024,
                        sequence_parallel=True, distributed_optimizer=True)
    w = generate(TINY, plan)
    t = topo.build("multi-pod", gpus=128, nics_per_asw=8, segments_per_pod=2, psw_count=4)
    auto = simulate(w, t, gpu="H100", sampling="auto")
    full = simulate(w, t, gpu="H100", sampling="full")
    rail = simulate(w, t, gpu="H100", sampling="rail")
    assert auto.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    assert rail.meta["network_collectives"] <= auto.meta["network_collectives"] < full.meta["network_collectives"] / 10


def test_analytical_matches_flow_when_uncontended():
    # one TP8 group on one server, nothing else on the links: both backends give the same time
    plan = ParallelPlan(world_size=8, tp=8, global_batch_size=2, micro_batch_size=1, seq_length=1024,
                        sequence_parallel=True)
    w = generate(TINY, plan)
    t = topo.build("spectrum-x", gpus=8)
    a = simulate(w, t, gpu="H100", network="analytical")
    f = simulate(w, t, gpu="H100", network="flow")
    assert a.iteration_time_s == pytest.approx(f.iteration_time_s, rel=1e-9)


# ---------------------------------------------------------------- route-congruence reduction (rule 4)
MID = ModelSpec("mid", num_layers=8, hidden_size=4096, num_attention_heads=32, ffn_hidden_size=16384,
                vocab_size=32000)


def _channels(planner, op, group, size):
    chans = set()
    for f in planner.call(CollectiveRequest(op, group, size))[3]:
        chans.update(f.channels.tolist())
    return chans


def _component(chans: dict, start):
    """Keys reachable from `start` through shared channels."""
    comp, todo = {start}, [start]
    while todo:
        a = todo.pop()
        for b, cs in chans.items():
            if b not in comp and cs & chans[a]:
                comp.add(b)
                todo.append(b)
    return comp


def test_route_classes_keep_one_copy_of_a_split_stage_pair():
    # Spectrum-X 1,024 GPUs, TP8 PP8 DP16 contiguous: stage 3 = GPUs 384..511 and stage 4 = 512..639 sit
    # under different leaves, so the 128 sends of that stage pair cross the spine; D-mod-k puts two of
    # them on each up-link (2-pair components, all alike): only the representative's component is sent
    import netsim
    t = topo.build("spectrum-x", gpus=1024)
    net = netsim.make_backend("flow", t)
    pairs = [(g, g + 128) for g in range(384, 512)]
    size = 8 << 20
    chans = {p: _channels(net.planner, "send", p, size) for p in pairs}
    assert all(len(cs) > 2 for cs in chans.values())            # beyond the two access links
    rep_comp = _component(chans, pairs[0])
    assert len(rep_comp) == 2
    kept = Engine._route_classes(SimpleNamespace(net=net), pairs, "send", size, rep_gpu=384)
    assert set(kept) == rep_comp
    assert kept == [p for p in pairs if p in rep_comp]          # list order kept
    # the representative rank's own copy is the one kept, wherever it sits
    kept = Engine._route_classes(SimpleNamespace(net=net), pairs, "send", size, rep_gpu=400)
    assert set(kept) == _component(chans, (400, 528))


def test_route_classes_keep_every_group_that_shares_a_link():
    import netsim
    t = topo.build("spectrum-x", gpus=1024)
    net = netsim.make_backend("flow", t)
    # three sends into GPU 40 share its access link: one component, nothing to omit
    pairs = [(0, 40), (8, 40), (16, 40)]
    assert Engine._route_classes(SimpleNamespace(net=net), pairs, "send", 1 << 20, rep_gpu=0) == pairs
    # three disjoint ToR-local copies (rails 0, 1 and 3): only the representative's is sent
    pairs = [(0, 8), (1, 9), (3, 11)]
    routes = {p: _channels(net.planner, "send", p, 1 << 20) for p in pairs}
    assert all(len(cs) == 2 for cs in routes.values()) and not (routes[(0, 8)] & routes[(1, 9)])
    assert Engine._route_classes(SimpleNamespace(net=net), pairs, "send", 1 << 20, rep_gpu=1) == [(1, 9)]
    # copies of two kinds: ToR-local ones (own access links only) are reduced to the representative's,
    # the kind over the spine (GPU 2 -> GPU 514, fabric links) beside them is kept whole
    pairs = [(0, 8), (1, 9), (2, 514), (3, 515)]
    assert len(_channels(net.planner, "send", (2, 514), 1 << 20)) > 2
    assert Engine._route_classes(SimpleNamespace(net=net), pairs, "send", 1 << 20, rep_gpu=1) == pairs[1:]


@pytest.mark.parametrize("fabric,tp,pp,dp,shuffle", [
    ("spectrum-x", 8, 8, 16, False),   # a leaf boundary between stages 3 and 4 (split stage pair)
    ("alibaba-hpn", 8, 4, 8, False),   # dual-homed GPUs: rule (2) never fires, routes are disjoint
    ("multi-pod", 8, 4, 16, False),    # 3-tier, stages in different segments: every pair crosses
    ("spectrum-x", 8, 4, 8, True),     # servers shuffled across leaves
])
def test_route_reduction_equals_full(fabric, tp, pp, dp, shuffle):
    import random
    plan = ParallelPlan(world_size=tp * pp * dp, tp=tp, pp=pp, global_batch_size=8 * dp, micro_batch_size=1,
                        seq_length=2048, sequence_parallel=True, distributed_optimizer=True)
    w = generate(MID, plan)
    t = topo.build(fabric, gpus=plan.world_size)
    mapping = None
    if shuffle:
        servers = random.Random(1).sample(range(plan.world_size // 8), plan.world_size // 8)
        mapping = [s * 8 + i for s in servers for i in range(8)]
    auto = simulate(w, t, gpu="H100", network="flow", sampling="auto", placement=mapping)
    full = simulate(w, t, gpu="H100", network="flow", sampling="full", placement=mapping)
    assert auto.meta["network_collectives"] * 20 < full.meta["network_collectives"]
    assert auto.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-9)
    assert auto.exposed_comm_s["PP"] == pytest.approx(full.exposed_comm_s["PP"], rel=1e-9, abs=1e-12)
    assert auto.exposed_comm_s["DP"] == pytest.approx(full.exposed_comm_s["DP"], rel=1e-9, abs=1e-12)


def test_pp_call_crossing_a_split_stage_pair_is_submitted_whole():
    # Spectrum-X 1,920 GPUs (leaves of 512 GPUs per rail), TP8 PP20 DP12: a stage is 96 GPUs, so the
    # leaf boundary at GPU 1024 splits stage 10 (960..1055) and the one at 1536 falls between stages
    # 15 and 16. The gradient sends 11 -> 10 (some over the spine, some local: submitted whole) leave
    # leaf 2 on the same up-links as the activation sends 15 -> 16 (all over the spine, copies of one
    # kind): those are submitted whole, so that the split call's flows keep their full load; of the
    # split call itself the pairs over the spine are kept whole and the local ones reduced
    import netsim
    from sim.placement import place
    tp, pp, dp = 8, 20, 12
    plan = ParallelPlan(world_size=tp * pp * dp, tp=tp, pp=pp, global_batch_size=2 * dp, micro_batch_size=1,
                        seq_length=2048, sequence_parallel=True, distributed_optimizer=True)
    model = ModelSpec("m20", num_layers=20, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096,
                      vocab_size=32000)
    w = generate(model, plan)
    t = topo.build("spectrum-x", gpus=plan.world_size)
    eng = Engine(w, place(plan, t), t, netsim.make_backend("flow", t), lambda op: 0.0)
    eng.start(0.0)
    size = 8 << 20
    rep = {s: int(eng.pl.gpus[eng.rep_ranks[s]]) for s in range(pp)}

    def chans(a, b):
        return set().union(*(_channels(eng.net.planner, "send", q, size) for q in eng._pp_pairs(a, b)))

    assert chans(11, 10) & chans(15, 16)                 # shared leaf up-links (precondition)
    pairs = eng._pp_pairs(11, 10)
    assert len(pairs) == tp * dp
    over_spine = [q for q in pairs if (q[0] < 1024) != (q[1] < 1024)]     # one GPU on each side of 1024
    assert 0 < len(over_spine) < len(pairs)
    local = [q for q in pairs if q not in over_spine]
    assert rep[11] in over_spine[0]       # the representative's pair crosses: the first local one stays
    split = eng._submitted(("pp", 11, 10, size), pairs, "send", size, rep[11])
    assert split == [q for q in pairs if q in over_spine or q == local[0]]
    crossing = eng._submitted(("pp", 15, 16, size), eng._pp_pairs(15, 16), "send", size, rep[15])
    assert crossing == eng._pp_pairs(15, 16) and len(crossing) == tp * dp
    # sends inside leaf 3 (17 -> 18) use only their GPUs' access links, which no split stage pair
    # uses: only the representative's pair
    split_chans = set().union(*(chans(a, b) for a, b in ((4, 5), (5, 4), (5, 6), (6, 5), (9, 10), (10, 9),
                                                         (10, 11), (11, 10))))
    assert not chans(17, 18) & split_chans
    local = eng._submitted(("pp", 17, 18, size), eng._pp_pairs(17, 18), "send", size, rep[17])
    assert local == [(rep[17], rep[18])]
