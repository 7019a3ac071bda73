"""sim.serve.batch_time: stage costs from real compute_db kernels and netsim collectives (no stubs)."""

from __future__ import annotations

import math

import pytest

from compute_db import open_db
from compute_db.db import SOURCES
from sim.errors import SimError
from sim.inputs import make_topology
from sim.serve.batch_time import HostOverhead, make_timer, round_kv_tokens
from sim.serve.costs import BatchShape
from sim.serve.plan import ServingPlan
from workload_gen.inference import decode_attention_op, inference_spec, stage_ops
from workload_gen.zoo import get_model

LLAMA70 = get_model("llama3-70b")


@pytest.fixture(scope="module")
def db():
    return open_db()


@pytest.fixture(scope="module")
def h100x8():
    return make_topology("spectrum-x", gpus=8, gpu_type="H100")


@pytest.fixture(scope="module")
def tp4(db, h100x8):
    return make_timer(LLAMA70, ServingPlan(tp=4), h100x8, "H100", db=db)


def decode(batch: int, context: int) -> BatchShape:
    return BatchShape(decode=(context,) * batch)


def test_decode_is_memory_bound_then_linear(tp4):
    t = {b: tp4.stage_cost(0, 0, decode(b, 4000), 0.0).time_s for b in (1, 64, 256, 512, 1024)}
    # 64x the requests: the weights are read once per step, so far less than 2x the time
    assert t[64] < 2.0 * t[1]
    # large batches: KV reads dominate, each extra request costs about the same
    slope_a = (t[512] - t[256]) / 256
    slope_b = (t[1024] - t[512]) / 512
    assert slope_a > 0 and abs(slope_b / slope_a - 1) < 0.15


def test_long_prefill_is_super_linear(tp4):
    t16 = tp4.stage_cost(0, 0, BatchShape(prefill=((16384, 0),)), 0.0).time_s
    t32 = tp4.stage_cost(0, 0, BatchShape(prefill=((32768, 0),)), 0.0).time_s
    assert t32 > 2.1 * t16


def test_tp2_speeds_up_70b_decode_by_less_than_2x(db, h100x8):
    t1 = make_timer(LLAMA70, ServingPlan(tp=1), h100x8, "H100", db=db)
    t2 = make_timer(LLAMA70, ServingPlan(tp=2), h100x8, "H100", db=db)
    for b in (1, 32):
        a = t1.stage_cost(0, 0, decode(b, 1000), 0.0).time_s
        c = t2.stage_cost(0, 0, decode(b, 1000), 0.0)
        assert 1.0 < a / c.time_s < 2.0
        assert c.comm_s > 0                          # TP all-reduces are on the critical path


def test_stage_cost_parts_add_up(db, h100x8):
    timer = make_timer(get_model("gpt-7.5b"), ServingPlan(tp=2, pp=2), h100x8, "H100", db=db)
    shape = BatchShape(prefill=((300, 0),), decode=(50, 80))
    s0 = timer.stage_cost(0, 0, shape, 0.0)
    s1 = timer.stage_cost(0, 1, shape, 0.0)
    for c in (s0, s1):
        assert math.isclose(c.time_s, c.compute_s + c.comm_s)
        assert c.flops > 0 and c.hbm_bytes > 0 and c.comm_s > 0
    assert s0.send_s > 0 and s1.send_s == 0.0
    assert timer.num_stages == 2


def test_kv_rounding_error_bound():
    for kv in list(range(1, 5000)) + [10**6 + k for k in range(0, 4000, 7)]:
        r = round_kv_tokens(kv)
        assert abs(r - kv) / kv <= 2.0 ** -9


def test_decode_rounding_keeps_time_within_half_percent(db, tp4):
    spec = inference_spec(LLAMA70, tp=4)
    for ctx in (3001, 3777, 12345):
        shape = decode(7, ctx)
        exact = db.lookup(decode_attention_op(spec, 7, 7 * (ctx + 1)), "H100").time_s
        timed = tp4._decode_entry(7, round_kv_tokens(7 * (ctx + 1)))[0][0]
        assert abs(timed / exact - 1) < 0.005
        tp4.stage_cost(0, 0, shape, 0.0)


def test_varlen_prefill_launches_once(db, tp4):
    spec = inference_spec(LLAMA70, tp=4)
    from workload_gen.inference import prefill_attention_ops
    one = db.lookup(prefill_attention_ops(spec, 256, 512)[0], "H100").time_s
    # two equal requests in one varlen launch ~ one kernel of batch 2 (same shapes)
    two_op = prefill_attention_ops(spec, 256, 512)[0]
    from dataclasses import replace
    dims = dict(two_op.shape)
    dims["batch"] = 2
    batched = db.lookup(replace(two_op, shape=tuple(dims.items())), "H100").time_s
    floor = tp4._floor_entry()[0][0]
    per_layer = floor + 2 * tp4._prefill_entry(256, 512)[0][0]
    assert per_layer < 2 * one
    assert abs(per_layer / batched - 1) < 0.05


def test_provenance_accounts_for_all_kernel_time(db, h100x8):
    timer = make_timer(get_model("mixtral-8x7b"), ServingPlan(tp=2, replicas=2), h100x8, "H100", db=db)
    shapes = [decode(8, 500), BatchShape(prefill=((128, 0), (64, 256)), decode=(10,)), decode(8, 500)]
    total = 0.0
    for i, s in enumerate(shapes):
        total += timer.stage_cost(i % 2, 0, s, float(i)).compute_s
    prov = timer.provenance_s()
    assert set(prov) == set(SOURCES)
    assert math.isclose(sum(prov.values()), total, rel_tol=1e-9)


def test_host_overhead_launch_bound_and_per_iteration(db, h100x8):
    shape = decode(1, 100)
    host = HostOverhead(per_iteration_s=0.002, per_kernel_s=0.001)
    timer = make_timer(get_model("llama3-8b"), ServingPlan(tp=2, pp=2), h100x8, "H100", db=db, host=host)
    spec = inference_spec(get_model("llama3-8b"), tp=2, pp=2)
    for stage in (0, 1):
        launches = sum(n for _, n in stage_ops(spec, stage, decode=shape.decode))
        c = timer.stage_cost(0, stage, shape, 0.0)
        # 1 ms per kernel dwarfs every kernel: the CPU issue time is the stage time
        expected = launches * 0.001 + (0.002 if stage == 0 else 0.0)
        assert math.isclose(c.time_s, expected, rel_tol=1e-9)


def test_kernel_gap_adds_per_launch(db, h100x8):
    shape = decode(4, 300)
    base = make_timer(get_model("llama3-8b"), ServingPlan(tp=2), h100x8, "H100", db=db)
    gap = make_timer(get_model("llama3-8b"), ServingPlan(tp=2), h100x8, "H100", db=db,
                     host=HostOverhead(kernel_gap_s=1e-6))
    launches = sum(n for _, n in stage_ops(inference_spec(get_model("llama3-8b"), tp=2), 0, decode=shape.decode))
    a, b = base.stage_cost(0, 0, shape, 0.0), gap.stage_cost(0, 0, shape, 0.0)
    assert math.isclose(b.time_s - a.time_s, launches * 1e-6, rel_tol=1e-9)


def test_eager_host_uses_the_training_host_constants():
    from sim.overheads import HOST_PER_KERNEL_S, KERNEL_GAP_S
    h = HostOverhead.eager(per_iteration_s=0.001)
    assert (h.per_kernel_s, h.kernel_gap_s, h.per_iteration_s) == (HOST_PER_KERNEL_S, KERNEL_GAP_S, 0.001)


def test_host_overhead_rejects_negative():
    with pytest.raises(SimError, match="per_kernel_s"):
        HostOverhead(per_kernel_s=-1.0)


def test_unknown_network_and_small_topology(db, h100x8):
    with pytest.raises(SimError, match="network 'packet'"):
        make_timer(LLAMA70, ServingPlan(tp=4), h100x8, "H100", db=db, network="packet")
    with pytest.raises(SimError, match=r"needs 16 GPUs .* only 8"):
        make_timer(LLAMA70, ServingPlan(tp=4, replicas=4), h100x8, "H100", db=db)


def test_symmetric_replicas_are_independent(db):
    topo = make_topology("spectrum-x", gpus=16, gpu_type="H100")
    timer = make_timer(LLAMA70, ServingPlan(tp=4, replicas=4), topo, "H100", db=db, network="flow")
    assert not timer.sharing.replica_pairs()
    shape = decode(32, 2000)
    first = timer.stage_cost(3, 0, shape, 0.0)
    for r in range(4):                       # all communicating at once: no replica slows another
        assert timer.stage_cost(r, 0, shape, 0.0) == first


def test_memoised_answers_are_stable(tp4):
    shape = BatchShape(prefill=((200, 100),), decode=(900, 1200, 33))
    a = tp4.stage_cost(0, 0, shape, 0.0)
    b = tp4.stage_cost(0, 0, shape, 5.0)
    assert a == b
