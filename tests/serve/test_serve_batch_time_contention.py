"""Fair-share contention of replicas that share fabric links, checked against netsim's flow backend."""

from __future__ import annotations

import math
from collections import defaultdict

import pytest

from netsim import CollectiveRequest, make_backend
from sim.inputs import make_topology
from sim.serve.batch_time import make_timer
from sim.serve.costs import BatchShape
from sim.serve.plan import ServingPlan
from workload_gen.inference import inference_spec, stage_ops
from workload_gen.zoo import get_model

# 4 single-GPU servers; GPUs 0, 1 under ToR A and 2, 3 under ToR B; one spine; every link 400 Gb/s.
# Replica 0 = GPUs (0, 2), replica 1 = (1, 3): both TP groups cross ToR A -> spine -> ToR B.
FABRIC = "dcn+:gpus=4,gpus_per_server=1,nics_per_asw=2,psw_count=1,asw_per_psw=8"
MAPPING = [0, 2, 1, 3]
MODEL = get_model("llama3-8b")
SHAPE = BatchShape(prefill=((2048, 0),))       # 2048 tokens: bandwidth-dominated all-reduces


@pytest.fixture(scope="module")
def topo():
    return make_topology(FABRIC, gpu_type="H100")


def _timer(topo):
    return make_timer(MODEL, ServingPlan(tp=2, replicas=2), topo, "H100", network="flow", mapping=MAPPING)


def _concurrent_s(topo, op: str, size: int) -> tuple[float, float]:
    """(alone, both replicas at once) for one collective on the flow backend."""
    net = make_backend("flow", topo)
    alone = net.estimate(CollectiveRequest(op, (0, 2), size))
    done: list[float] = []
    net.submit(CollectiveRequest(op, (0, 2), size), 0.0, done.append)
    net.submit(CollectiveRequest(op, (1, 3), size), 0.0, done.append)
    net.run_until_idle()
    return alone, max(done)


def test_sharing_is_detected(topo):
    timer = _timer(topo)
    assert timer.sharing.replica_pairs() == {(0, 1)}
    contiguous = make_timer(MODEL, ServingPlan(tp=2, replicas=2), topo, "H100", network="flow")
    assert contiguous.sharing.replica_pairs() == set()      # (0, 1) and (2, 3) stay under their ToR


def test_fair_share_matches_flow_backend(topo):
    timer = _timer(topo)
    alone = timer.stage_cost(0, 0, SHAPE, 0.0)
    both = timer.stage_cost(1, 0, SHAPE, 0.0)            # replica 0 still busy: the uplink is shared
    assert both.compute_s == alone.compute_s
    # expected: every collective of the batch as the flow engine runs it with both replicas at once
    spec = inference_spec(MODEL, tp=2)
    counts: dict[tuple[str, int], int] = defaultdict(int)
    for op, n in stage_ops(spec, 0, prefill=SHAPE.prefill):
        if op.is_comm:
            counts[(op.collective, op.size_bytes)] += n
    expected_alone = expected_both = 0.0
    for (op, size), n in counts.items():
        a, b = _concurrent_s(topo, op, size)
        expected_alone += n * a
        expected_both += n * b
    assert math.isclose(alone.comm_s, expected_alone, rel_tol=1e-6)
    assert math.isclose(both.comm_s, expected_both, rel_tol=0.05)
    assert both.comm_s > 1.5 * alone.comm_s          # the shared uplink halves the bandwidth


def test_contention_ends_when_the_other_replica_is_idle(topo):
    timer = _timer(topo)
    first = timer.stage_cost(0, 0, SHAPE, 0.0)
    later = timer.stage_cost(1, 0, SHAPE, first.time_s + 1.0)   # replica 0 finished long ago
    assert later == first


def test_pipeline_send_slows_next_stage_only_while_it_runs():
    topo = make_topology("spectrum-x", gpus=8, gpu_type="H100")
    timer = make_timer(MODEL, ServingPlan(tp=4, pp=2), topo, "H100")
    alone = make_timer(MODEL, ServingPlan(tp=4, pp=2), topo, "H100").stage_cost(0, 1, SHAPE, 0.0)
    s0 = timer.stage_cost(0, 0, SHAPE, 0.0)
    assert s0.send_s > 0
    # stage 0 computing (its collectives use GPUs 0-3 only): stage 1 is not slowed
    assert timer.stage_cost(0, 1, SHAPE, 0.0) == alone
    # stage 0's activations arrive on GPUs 4-7 while stage 1's all-reduces use the same ports
    during = timer.stage_cost(0, 1, SHAPE, s0.time_s + s0.send_s / 2)
    assert during.compute_s == alone.compute_s and during.comm_s > alone.comm_s
    after = timer.stage_cost(0, 1, SHAPE, s0.time_s + s0.send_s * 2)
    assert after == alone
