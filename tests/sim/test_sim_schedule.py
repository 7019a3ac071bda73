"""Pipeline schedule orders (Megatron's 1F1B and interleaved), written out by hand."""

from __future__ import annotations

import pytest

from sim.errors import SimError
from sim.schedule import stage_tasks


def test_1f1b_orders():
    assert stage_tasks("1f1b", 0, 2, 4) == [(0, 0, "fwd"), (0, 1, "fwd"), (0, 0, "bwd"), (0, 2, "fwd"), (0, 1, "bwd"),
                                           (0, 3, "fwd"), (0, 2, "bwd"), (0, 3, "bwd")]
    assert stage_tasks("1f1b", 1, 2, 4) == [(0, 0, "fwd"), (0, 0, "bwd"), (0, 1, "fwd"), (0, 1, "bwd"),
                                           (0, 2, "fwd"), (0, 2, "bwd"), (0, 3, "fwd"), (0, 3, "bwd")]
    # fewer micro-batches than warm-up slots: all forwards, then all backwards
    assert stage_tasks("1f1b", 0, 4, 2) == [(0, 0, "fwd"), (0, 1, "fwd"), (0, 0, "bwd"), (0, 1, "bwd")]


def test_interleaved_order_stage0():
    # p = 2, v = 2, m = 4: warm-up (p-s-1)*2 + (v-1)*p = 4 virtual forwards, chunk sweeps in groups of p
    F, B = "fwd", "bwd"
    assert stage_tasks("interleaved", 0, 2, 4, vpp=2) == [
        (0, 0, F), (0, 1, F), (1, 0, F), (1, 1, F),
        (0, 2, F), (1, 0, B), (0, 3, F), (1, 1, B), (1, 2, F), (0, 0, B), (1, 3, F), (0, 1, B),
        (1, 2, B), (1, 3, B), (0, 2, B), (0, 3, B)]


def test_interleaved_last_stage_and_m_equals_p():
    F, B = "fwd", "bwd"
    assert stage_tasks("interleaved", 1, 2, 4, vpp=2)[:4] == [(0, 0, F), (0, 1, F), (1, 0, F), (1, 0, B)]
    # m == p: every forward first (Megatron's rule)
    tasks = stage_tasks("interleaved", 1, 2, 2, vpp=2)
    assert [d for _, _, d in tasks] == [F] * 4 + [B] * 4


def test_every_task_once():
    for kind, v in (("1f1b", 1), ("interleaved", 3), ("gpipe", 1)):
        for s in range(4):
            tasks = stage_tasks(kind, s, 4, 8, vpp=v)
            assert sorted(tasks) == sorted((c, mb, d) for c in range(v) for mb in range(8) for d in ("fwd", "bwd"))


def test_schedule_errors():
    with pytest.raises(SimError, match="micro-batches"):
        stage_tasks("interleaved", 0, 4, 2, vpp=2)
    with pytest.raises(SimError, match="unknown pipeline schedule"):
        stage_tasks("zigzag", 0, 2, 2)
