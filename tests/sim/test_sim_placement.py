"""Placement: Megatron rank order -> concrete groups."""

from __future__ import annotations

import pytest
from helpers_sim import FakeTopo

from sim.errors import SimError
from sim.placement import place
from workload_gen.plan import ParallelPlan


def test_default_order_groups():
    plan = ParallelPlan(world_size=16, tp=2, pp=2, ep=2)   # dp = 4, edp = 2
    pl = place(plan, FakeTopo(16))
    assert pl.groups("tp")[:3] == [(0, 1), (2, 3), (4, 5)]
    assert pl.groups("dp")[:2] == [(0, 2, 4, 6), (1, 3, 5, 7)]
    assert pl.groups("pp")[:2] == [(0, 8), (1, 9)]
    assert pl.groups("ep")[:3] == [(0, 2), (1, 3), (4, 6)]
    assert pl.groups("edp")[:2] == [(0, 4), (1, 5)]
    assert pl.groups("embedding")[0] == (0, 8)
    assert pl.groups("mp")[0] == (0, 1, 8, 9)
    assert pl.groups("dp_cp")[0] == (0, 2, 4, 6)
    assert pl.stage_of(9) == 1
    for kind in ("tp", "dp", "ep", "edp", "pp", "cp"):
        members = sorted(g for grp in pl.groups(kind) for g in grp)
        assert members == list(range(16)), kind


def test_cp_and_custom_order():
    plan = ParallelPlan(world_size=8, tp=2, cp=2, rank_order="tp-dp-cp-ep-pp")  # dp 2
    pl = place(plan, FakeTopo(8))
    assert pl.groups("dp")[0] == (0, 2)
    assert pl.groups("cp")[0] == (0, 4)
    assert pl.groups("dp_cp")[0] == (0, 2, 4, 6)


def test_mapping_and_errors(tmp_path):
    plan = ParallelPlan(world_size=4, tp=2)
    pl = place(plan, FakeTopo(8), mapping=[7, 6, 5, 4])
    assert pl.groups("tp") == [(7, 6), (5, 4)]
    f = tmp_path / "map.txt"
    f.write_text("3\n2\n1\n0\n")
    assert place(plan, FakeTopo(8), mapping=str(f)).gpu_of(0) == 3
    with pytest.raises(SimError, match="needs 16 GPUs but the topology has only 8"):
        place(ParallelPlan(world_size=16), FakeTopo(8))
    with pytest.raises(SimError, match="same GPU"):
        place(plan, FakeTopo(8), mapping=[1, 1, 2, 3])
    with pytest.raises(SimError, match="rank_order"):
        place(ParallelPlan(world_size=4, rank_order="tp-dp"), FakeTopo(8))
