"""What the arithmetic fast path shares between ops and stages (sim.fastpath / sim.engine):

- Engine.footprint: one contention.Footprint per (op fields the model reads, group size, NVLink-local,
  duration), whatever the stage; NVLink-locality of large groups read from the domain array;
- FastRun._op_info: one _OpInfo per CommOp *value* of a stage (equal ops, e.g. a SimAI import's
  repeated layer lines), a new one when any field differs;
- FastRun._send: the footprint of a pipeline send gets the duration the engine would estimate itself;
- Engine._kind_congruent: a kind whose groups are not all congruent is still sampled stage by stage.

Expected values are written out here from the rules (ContentionModel.footprint with locality computed
GPU by GPU from topology.nvlink_domain_of, the backend's own estimate), not taken from the code under test."""

from __future__ import annotations

import dataclasses

import pytest

import netsim
import topo
from compute_db import open_db
from sim.contention import ContentionModel
from sim.engine import Engine
from sim.fastpath import FastRun, _Stage
from sim.placement import place
from workload_gen import generate
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan
from workload_gen.workload import CommOp


def _engine(tp=2, pp=4, dp=4, trace=False, gpus=None, mapping=None):
    plan = ParallelPlan(world_size=tp * pp * dp, tp=tp, pp=pp, global_batch_size=2 * dp, micro_batch_size=1,
                        seq_length=1024)
    model = ModelSpec("m8", num_layers=8, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                      vocab_size=32000)
    t = topo.build("spectrum-x", gpus=gpus or plan.world_size)       # NVLink domains of 8 GPUs
    cm = ContentionModel(open_db().gpu("H100"))
    eng = Engine(generate(model, plan), place(plan, t, mapping), t, netsim.make_backend("analytical", t),
                 lambda op: 1e-3, contention=cm, trace=trace)
    eng.start(0.0)
    return eng, t, cm


def _expected(eng, t, cm, op, group, duration_s=None):
    """ContentionModel.footprint with locality checked GPU by GPU and the backend's estimate."""
    local = all(t.nvlink_domain_of(g) == t.nvlink_domain_of(group[0]) for g in group)
    if duration_s is None:
        duration_s = float(eng.net.estimate(netsim.CollectiveRequest(op.collective, group, op.size_bytes)))
    return cm.footprint(op, len(group), local, duration_s)


@pytest.mark.parametrize("group", [
    tuple(range(8)),                   # one NVLink domain, 8 GPUs (the domain array's branch)
    tuple(range(4, 12)),               # 8 GPUs over two domains
    tuple(range(0, 32, 2)),            # 16 GPUs over four domains
    (0, 3),                            # small groups: GPU by GPU
    (7, 8),
])
def test_footprint_locality_and_rate_follow_the_model(group):
    eng, t, cm = _engine()
    op = CommOp("ag", "all_gather", "dp", 64 << 20, blocking=False)
    assert eng.footprint(0, op, [group]) == _expected(eng, t, cm, op, group)
    # a duration short enough that the line rate (NVLink if local, else the NIC) caps the traffic
    assert eng.footprint(1, op, [group], 1e-6) == _expected(eng, t, cm, op, group, 1e-6)


def test_locality_matters_to_the_footprint():
    """(so that the cases above would see a wrong locality: an NVLink-local group's traffic is capped
    at the NVLink rate, not the NIC's)"""
    eng, t, cm = _engine()
    op = CommOp("ag", "all_gather", "dp", 64 << 20, blocking=False)
    group = tuple(range(8))
    dur = float(eng.net.estimate(netsim.CollectiveRequest(op.collective, group, op.size_bytes)))
    assert cm.footprint(op, 8, False, dur) != cm.footprint(op, 8, True, dur) == eng.footprint(0, op, [group])


def test_footprints_are_shared_across_stages_only_when_the_model_inputs_agree():
    eng, t, cm = _engine()
    grp = tuple(range(8))
    op = CommOp("rs", "reduce_scatter", "tp", 8 << 20, blocking=False)
    a = eng.footprint(0, op, [grp], 1e-3)
    b = eng.footprint(1, dataclasses.replace(op, name="other name"), [grp], 1e-3)
    assert b is a                     # same fields the model reads, same group size, locality, duration
    assert eng.footprint(2, op, [grp], 2e-3) == cm.footprint(op, 8, True, 2e-3) != a    # duration
    # locality (a duration short enough that the line rate caps the traffic)
    local = eng.footprint(3, op, [grp], 1e-6)
    spread = eng.footprint(6, op, [tuple(range(4, 12))], 1e-6)
    assert local == cm.footprint(op, 8, True, 1e-6) != spread == cm.footprint(op, 8, False, 1e-6)
    bigger = dataclasses.replace(op, size_bytes=op.size_bytes * 4)
    assert eng.footprint(4, bigger, [grp], 1e-3) == cm.footprint(bigger, 8, True, 1e-3) != a
    wg = dataclasses.replace(op, wait_op="x_wgrad")
    assert eng.footprint(5, wg, [grp], 1e-3) == cm.footprint(wg, 8, True, 1e-3)


def test_send_footprint_gets_the_estimate_of_its_first_pair():
    eng, t, cm = _engine()
    fr = FastRun(eng)
    st = _Stage(0, eng.w.stages[0], [])
    size = int(eng.w.stages[0].pp_send_bytes)
    fr._send(st, "fwd", 0, 0, size)
    (h,) = fr.log
    pair = eng._pp_pairs(0, 1)[0]
    want = _expected(eng, t, cm, CommOp(h.name, "send", "pp", size), pair)
    assert h.fp == want
    assert h.done_s - h.start_s == float(eng.net.estimate(netsim.CollectiveRequest("send", pair, size)))


def test_send_footprint_of_a_stage_pair_with_several_pairs_is_that_of_the_first_pair():
    """Stage 0 -> 1 pairs that are not congruent (ranks 1 and 8 swap GPUs: pairs (0, 1) and (8, 9) stay in
    one NVLink domain, the other six cross domains): all eight are estimated, the send takes the slowest,
    and its footprint gets pairs[0]'s own locality and estimate."""
    mapping = list(range(32))
    mapping[1], mapping[8] = 8, 1
    eng, t, cm = _engine(gpus=64, mapping=mapping)
    pairs = eng._pp_pairs(0, 1)
    assert pairs == [(0, 1), (8, 9), (2, 10), (3, 11), (4, 12), (5, 13), (6, 14), (7, 15)]
    fr = FastRun(eng)
    st = _Stage(0, eng.w.stages[0], [])
    size = int(eng.w.stages[0].pp_send_bytes)
    fr._send(st, "fwd", 0, 0, size)
    (h,) = fr.log

    def est(pair):
        return float(eng.net.estimate(netsim.CollectiveRequest("send", pair, size)))

    local_s, spread_s = est((0, 1)), est((2, 10))
    assert local_s < spread_s                        # the pairs' estimates differ...
    assert h.done_s - h.start_s == spread_s          # ...the send lasts the slowest pair's
    op = CommOp(h.name, "send", "pp", size)
    assert h.fp == cm.footprint(op, 2, True, local_s)
    assert h.fp != cm.footprint(op, 2, True, spread_s)   # (the duration matters to the footprint)


def test_kind_not_congruent_overall_is_still_sampled_per_stage():
    """tp pairs at GPU offset 1 in stages 0 and 3, offset 2 in stage 1 (congruent there), offsets 1 and 2
    mixed in stage 2: the kind is not congruent as a whole, stage 1 still submits only its representative's
    pair, stage 2 all four."""
    eng, _t, _cm = _engine()
    assert eng._kind_congruent("tp") is True         # identity placement: every tp pair at offset 1
    mapping = list(range(32))
    mapping[8:16] = [8, 10, 9, 11, 12, 14, 13, 15]
    mapping[16:24] = [16, 17, 18, 20, 19, 21, 22, 23]
    eng, _t, _cm = _engine(gpus=64, mapping=mapping)
    assert eng._kind_congruent("tp") is False
    assert eng._groups_for("tp", 0) == [(0, 1)]
    assert eng._groups_for("tp", 1) == [(8, 10)]
    assert eng._groups_for("tp", 2) == [(16, 17), (18, 20), (19, 21), (22, 23)]
    assert eng._groups_for("tp", 3) == [(24, 25)]


@pytest.mark.parametrize("trace", [False, True])
def test_equal_ops_of_a_stage_share_one_op_info(trace):
    eng, t, cm = _engine(trace=trace)
    fr = FastRun(eng)
    st = _Stage(1, eng.w.stages[1], [])
    op = CommOp("attn_ag", "all_gather", "tp", 4 << 20, layer=3, phase="fwd")
    twin = dataclasses.replace(op)           # another layer's op object with the same fields
    assert twin is not op and twin == op
    info = fr._op_info(st, op)
    assert fr._op_info(st, twin) is info
    assert list(st.opinfo.values()) == [info]
    for field, value in (("name", "mlp_ag"), ("size_bytes", 8 << 20), ("layer", 4), ("phase", "bwd"),
                         ("blocking", False), ("collective", "reduce_scatter")):
        other = dataclasses.replace(op, **{field: value})
        got = fr._op_info(st, other)
        assert got is not info, field
        assert (got.name, got.collective, got.size_bytes, got.op) == (other.name, other.collective,
                                                                       other.size_bytes, other), field
