"""The bundled (lock-step) schedules the flow backend runs agree with the step-level p2p DAGs run
transfer by transfer through the same engine, for large messages where pipeline fill is small.

Both sides use the Simple protocol and the same per-hop latencies and per-call delay; the bundle's
pipeline-fill factor is switched off (fill_scale=0) because the DAGs pipeline their pieces explicitly."""

from __future__ import annotations

import pytest

topo = pytest.importorskip("topo")

from netsim import CollectiveRequest as Req  # noqa: E402
from netsim import NetCalibration  # noqa: E402
from netsim.backend import FlowNetwork, Planner, step_level_time_s  # noqa: E402
from netsim.dag import build_dag  # noqa: E402

S = 256 << 20


@pytest.fixture(scope="module")
def planner():
    return Planner(topo.build("spectrum-x", gpus=16, nvlink_bandwidth_Bps=450e9),
                   net_calibration=NetCalibration(fill_scale=0.0))


@pytest.mark.parametrize("op,alg,n,pieces,rel", [
    ("all_reduce", "ring", 8, 8, 0.05),
    ("all_reduce", "hierarchical", 16, 1, 0.05),
    ("all_gather", "hierarchical", 16, 1, 0.05),
    ("reduce_scatter", "hierarchical", 16, 1, 0.05),
    ("all_reduce", "rhd", 8, 1, 0.05),
    ("all_reduce", "rhd", 12, 1, 0.05),
    ("all_to_all", "direct", 16, 1, 0.05),
    # pipelines: the step DAG pays a fill of about depth / pieces that the fluid bundle does not
    ("all_reduce", "tree", 8, 16, 0.15),
    ("all_reduce", "nvls", 8, 4, 0.15),
])
def test_step_level_matches_bundle(planner, op, alg, n, pieces, rel):
    servers = [list(range(i, min(i + 8, n))) for i in range(0, n, 8)]
    dag = build_dag(op, alg, servers, S, pieces=pieces)
    step = step_level_time_s(planner, dag, tuple(range(n)), check_invariants=True)
    bundle = FlowNetwork(None, planner=planner).estimate(Req(op, tuple(range(n)), S, alg, protocol="Simple"))
    assert step == pytest.approx(bundle, rel=rel)


@pytest.fixture(scope="module")
def planner32():
    return Planner(topo.build("spectrum-x", gpus=32, nvlink_bandwidth_Bps=450e9),
                   net_calibration=NetCalibration(fill_scale=0.0))


@pytest.mark.parametrize("op,alg,n", [
    ("all_reduce", "ring", 16), ("all_reduce", "ring", 32), ("all_gather", "ring", 32),
    ("reduce_scatter", "ring", 24), ("broadcast", "ring", 16), ("reduce", "ring", 32),
    ("all_reduce", "tree", 32), ("all_reduce", "tree", 12), ("broadcast", "tree", 16),
    ("all_reduce", "hierarchical", 32),
])
def test_small_messages_cross_server_latency_matches_step_dag(planner32, op, alg, n):
    """Latency-bound (16 B) across servers: a piece pays each hop's alpha once along its path, so
    only the hops that leave a server pay the network alpha. The bundled lock-step flows once
    charged every step the slowest (network) hop: 3-4x the step-level DAG's time."""
    servers = [list(range(i, min(i + 8, n))) for i in range(0, n, 8)]
    dag = build_dag(op, alg, servers, 16.0, pieces=1)
    step = step_level_time_s(planner32, dag, tuple(range(n)))
    bundle = FlowNetwork(None, planner=planner32).estimate(Req(op, tuple(range(n)), 16, alg, protocol="Simple"))
    assert bundle == pytest.approx(step, rel=0.02)
