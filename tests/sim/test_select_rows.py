"""sim.engine's group selection from placement arrays (_select_rows / _congruent_rep, used by _groups_for and
_pp_pairs) against the contention-free rule written out here on plain tuples: congruent groups (equal
member offsets, equal NVLink-domain pattern) are represented by the first group holding the stage's
representative GPU, other group lists are submitted whole."""

from __future__ import annotations

import numpy as np
import pytest

import netsim
import topo
from sim.engine import Engine
from sim.placement import place
from workload_gen import generate
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan


def _rule(groups: list[tuple[int, ...]], rep: int, dom: list[int]) -> list[tuple[int, ...]]:
    if len(groups) <= 1:
        return groups
    off = [tuple(g - grp[0] for g in grp) for grp in groups]
    pat = [tuple(dom[g] - dom[grp[0]] for g in grp) for grp in groups]
    if len(set(off)) == 1 and len(set(pat)) == 1:
        return [grp for grp in groups if rep in grp][:1]
    return groups


def _engine(mapping=None, tp=2, pp=4, dp=4, network="analytical"):
    plan = ParallelPlan(world_size=tp * pp * dp, tp=tp, pp=pp, global_batch_size=2 * dp, micro_batch_size=1,
                        seq_length=1024)
    model = ModelSpec("m8", num_layers=8, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                      vocab_size=32000)
    t = topo.build("spectrum-x", gpus=plan.world_size)
    eng = Engine(generate(model, plan), place(plan, t, mapping), t, netsim.make_backend(network, t), lambda op: 0.0)
    eng.start(0.0)
    return eng, t


@pytest.mark.parametrize("shuffle", [False, True])
def test_groups_and_pipeline_pairs_follow_the_congruence_rule(shuffle):
    mapping = None
    if shuffle:     # a placement whose groups are not translates of each other
        mapping = np.random.default_rng(7).permutation(32).tolist()
    eng, t = _engine(mapping)
    assert eng.contention_free
    dom = t.nvlink_domains()
    gpus = eng.pl.gpus.tolist()
    for kind in ("tp", "dp"):
        for stage in range(eng.p):
            rows = eng.pl.groups_in_stage(kind, stage).tolist()
            groups = [tuple(gpus[r] for r in row) for row in rows]
            got = eng._groups_for(kind, stage)
            assert got == _rule(groups, gpus[eng.rep_ranks[stage]], dom), (kind, stage)
            assert all(type(g) is int for grp in got for g in grp)
    pp_rows = eng.pl.rank_groups("pp").tolist()
    for a, b in [(0, 1), (1, 0), (2, 3), (3, 2)]:
        pairs = [(gpus[row[a]], gpus[row[b]]) for row in pp_rows]
        got = eng._pp_pairs(a, b)
        assert got == _rule(pairs, gpus[eng.rep_ranks[a]], dom), (a, b)
        assert all(type(g) is int for q in got for g in q)
    if not shuffle:
        assert len(eng._groups_for("dp", 0)) == 1      # the translated placement is reduced to one group


def test_select_rows_picks_the_representatives_group_and_keeps_incongruent_lists():
    eng, t = _engine()
    dom = t.nvlink_domains()
    gps = t.gpus_per_server
    # congruent (one domain each, same offsets): the group holding the representative, not the first
    g = np.array([[0, 1], [gps, gps + 1], [2 * gps, 2 * gps + 1]], dtype=np.int64)
    assert eng._select_rows(g, 2 * gps + 1) == [(2 * gps, 2 * gps + 1)]
    assert eng._select_rows(g, 5 * gps) == []       # no group holds it: none, as _select
    # equal offsets but one group crosses a domain boundary: every group, as plain tuples
    g = np.array([[0, 1], [gps - 1, gps]], dtype=np.int64)
    assert dom[gps - 1] != dom[gps]
    assert eng._select_rows(g, 0) == [(0, 1), (gps - 1, gps)]
    # different offsets: every group
    g = np.array([[0, 2], [gps, gps + 1]], dtype=np.int64)
    assert eng._select_rows(g, 0) == [(0, 2), (gps, gps + 1)]
    # one group: itself
    assert eng._select_rows(np.array([[4, 5]], dtype=np.int64), 0) == [(4, 5)]


def test_select_rows_on_a_contention_backend_is_the_list_rule():
    eng, _t = _engine(network="flow")
    assert not eng.contention_free
    g = np.array([[0, 1], [8, 9]], dtype=np.int64)
    # both groups inside one 8-GPU NVLink domain: rule (1), the representative's group
    assert eng._select_rows(g, 9) == [(8, 9)]
