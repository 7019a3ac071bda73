"""Symmetry shortcuts are exact: 'auto' sampling gives the same iteration as submitting every group."""

from __future__ import annotations

import pytest

import topo
from sim import simulate
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
    # 3-tier fabric, stages in different segments: PP flows are hashed over spines (ECMP), so copies
    # on different rails are not exactly congruent; omitting DP copies changes which PP flow is the
    # unluckiest only marginally
    plan = ParallelPlan(world_size=128, tp=8, pp=2, global_batch_size=16, micro_batch_size=1, seq_length=1024,
                        sequence_parallel=True, distributed_optimizer=True)
    w = generate(TINY, plan)
    t = topo.build("multi-pod", gpus=128, nics_per_asw=8, segments_per_pod=2, psw_count=4)
    auto = simulate(w, t, gpu="H100", sampling="auto")
    full = simulate(w, t, gpu="H100", sampling="full")
    rail = simulate(w, t, gpu="H100", sampling="rail")
    assert auto.iteration_time_s == pytest.approx(full.iteration_time_s, rel=1e-3)
    assert rail.meta["network_collectives"] < auto.meta["network_collectives"] < full.meta["network_collectives"]


def test_analytical_matches_flow_when_uncontended():
    # one TP8 group on one server, nothing else on the links: both backends give the same time
    plan = ParallelPlan(world_size=8, tp=8, global_batch_size=2, micro_batch_size=1, seq_length=1024,
                        sequence_parallel=True)
    w = generate(TINY, plan)
    t = topo.build("spectrum-x", gpus=8)
    a = simulate(w, t, gpu="H100", network="analytical")
    f = simulate(w, t, gpu="H100", network="flow")
    assert a.iteration_time_s == pytest.approx(f.iteration_time_s, rel=1e-9)
