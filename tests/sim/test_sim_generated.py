"""Generated workloads (workload_gen) through the simulator: schedules, invariants, MoE/CP/DeepSpeed."""

from __future__ import annotations

import pytest

import topo
from sim import simulate
from workload_gen import generate
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan

TINY = ModelSpec("tiny", num_layers=8, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096,
                 vocab_size=32000)
MOE = ModelSpec("tiny-moe", num_layers=4, hidden_size=1024, num_attention_heads=8, ffn_hidden_size=4096,
                vocab_size=32000, num_experts=8, moe_top_k=2, moe_ffn_hidden_size=2048)


def _run(model, network="analytical", **plan):
    p = ParallelPlan(micro_batch_size=1, seq_length=1024, **plan)
    return simulate(generate(model, p), topo.build("spectrum-x", gpus=max(8, p.world_size)), gpu="H100",
                    network=network)


def _check_split(rep):
    for st in rep.stages:
        total = st["compute_s"] + st["bubble_s"] + sum(st["exposed_comm_s"].values()) + st["overhead_s"]
        assert total == pytest.approx(rep.iteration_time_s, rel=1e-9)


def test_interleaving_shrinks_the_bubble():
    base = dict(world_size=8, tp=2, pp=4, global_batch_size=8)
    r1 = _run(TINY, **base)
    r2 = _run(TINY, vpp=2, **base)
    _check_split(r1)
    _check_split(r2)
    assert r2.meta["schedule"] == "interleaved"
    assert r2.bubble_s < r1.bubble_s
    assert r2.compute_s == pytest.approx(r1.compute_s, rel=0.05)


@pytest.mark.parametrize("model,plan", [
    (MOE, dict(world_size=16, tp=2, ep=4, pp=2, global_batch_size=8, sequence_parallel=True,
               distributed_optimizer=True)),
    (TINY, dict(world_size=16, tp=2, cp=2, pp=2, global_batch_size=8, sequence_parallel=True)),
    (TINY, dict(world_size=8, global_batch_size=16, framework="deepspeed", zero_stage=3)),
    (TINY, dict(world_size=8, tp=4, global_batch_size=4, sequence_parallel=True, tp_comm_overlap=True,
                recompute="full")),
])
def test_feature_mix_runs_on_flow(model, plan):
    rep = _run(model, network="flow", **plan)
    _check_split(rep)
    assert rep.iteration_time_s > rep.compute_s > 0
    assert abs(sum(rep.compute_sources.values()) - 1.0) < 1e-9
    if plan.get("ep", 1) > 1:
        assert rep.exposed_comm_s["EP"] > 0
    if plan.get("framework") == "deepspeed":
        assert rep.exposed_comm_s["DP"] > 0
