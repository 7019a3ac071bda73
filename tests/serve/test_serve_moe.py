"""MoE serving: EP all-to-all bytes on the fabric, the expert-load (skew) model, MLA KV-cache bytes, and
Mixtral / DeepSeek-V3 / Qwen3-MoE end to end (docs/serve_moe.md)."""

from __future__ import annotations

import math

import pytest

from compute_db.db import KernelTime
from netsim.backend import Planner
from netsim.schedules import build_specs
from sim.errors import SimError
from sim.inputs import make_topology
from sim.serve.api import simulate_serving
from sim.serve.batch_time import ServingTimer
from sim.serve.costs import BatchShape
from sim.serve.memory import kv_bytes_per_token, plan_kv_cache
from sim.serve.plan import ServingPlan
from sim.serve.replica import place_replicas
from workload_gen.errors import WorkloadError
from workload_gen.expert_load import expert_load, routing_probabilities
from workload_gen.inference import inference_spec, layer_token_ops
from workload_gen.requests import RequestConfig
from workload_gen.zoo import get_model

MIXTRAL = get_model("mixtral-8x7b")        # h 4096, 8 experts top-2, expert ffn 14336, SwiGLU
QWEN30 = get_model("qwen3-30b-a3b")        # h 2048, 128 experts top-8, expert ffn 768
DSV3 = get_model("deepseek-v3")            # 61 layers, MLA kv_lora 512 + rope 64


def _a2a_wire_bytes(ops, gpus, planner) -> tuple[float, float]:
    """(all bytes, bytes between servers) that netsim's flows of every all-to-all op in `ops` carry."""
    total = inter = 0.0
    for op in ops:
        if not op.is_comm or op.collective != "all_to_all":
            continue
        shape, _facts = planner.shape(gpus)
        for spec in build_specs(shape, "all_to_all", "direct", op.size_bytes):
            for i, (src, dst) in enumerate(spec.hops):
                b = spec.nbytes * (spec.weights[i] if spec.weights else 1.0)
                total += b
                if src // 8 != dst // 8:
                    inter += b
    return total, inter


def test_all_to_all_bytes_per_layer_match_hand_calculation_in_one_server():
    # Mixtral, tp = ep = 4, a batch of 64 tokens, balanced routing. By hand: each rank routes 64 / 4 = 16
    # tokens x top-2 = 32 copies; the experts are spread evenly (2 per rank), so a copy stays on its own
    # rank with probability 1/4: 24 copies x 4096 x 2 B = 196,608 B leave each rank for dispatch, as many
    # come back for combine. Per layer: 2 x 4 ranks x 196,608 B.
    topo = make_topology("spectrum-x", gpus=8)
    planner = Planner(topo)
    gpus = (0, 1, 2, 3)
    assert planner.prepare(_req(gpus))[3] == "direct"
    ops = layer_token_ops(inference_spec(MIXTRAL, tp=4, ep=4), 64, moe=True)
    assert [op.name for op in ops if op.is_comm and op.collective == "all_to_all"] == ["moe_dispatch", "moe_combine"]
    total, inter = _a2a_wire_bytes(ops, gpus, planner)
    assert total == 2 * 4 * (32 * 3 // 4) * 4096 * 2 == 1_572_864
    assert inter == 0


def test_all_to_all_across_two_servers_hand_calculation():
    # Qwen3-30B-A3B, tp = ep = 16 on two 8-GPU servers, 256 tokens: 16 tokens x top-8 = 128 copies per
    # rank; 15/16 of them go to another rank (120 x 2048 x 2 B = 491,520 B), 8/16 to the other server
    # (64 copies = 262,144 B). Dispatch + combine, 16 ranks.
    topo = make_topology("spectrum-x", gpus=16)
    planner = Planner(topo)
    gpus = tuple(range(16))
    ops = layer_token_ops(inference_spec(QWEN30, tp=16, ep=16), 256, moe=True)
    total, inter = _a2a_wire_bytes(ops, gpus, planner)
    assert total == pytest.approx(2 * 16 * 120 * 2048 * 2, rel=1e-12)
    assert inter == pytest.approx(2 * 16 * 64 * 2048 * 2, rel=1e-12)


def _req(gpus):
    from netsim.api import CollectiveRequest
    return CollectiveRequest("all_to_all", gpus, 1 << 20)


def test_zipf_routing_probabilities_by_hand():
    # s = 1, 8 experts, top-2: p_i = (1/(i+1)) / H_8, q_i = 2 p_i (the largest, 2/H_8 = 0.736, is < 1)
    h8 = sum(1 / i for i in range(1, 9))
    assert routing_probabilities(8, 2, 1.0) == pytest.approx([2 / (i * h8) for i in range(1, 9)], rel=1e-12)
    # s = 2: 2 p_0 = 2 / (sum 1/i^2) = 1.31 > 1 -> q_0 = 1 (picked by every token), the other top-1 pick
    # spread in proportion: q_i = p_i / (1 - p_0)
    z = sum(1 / i ** 2 for i in range(1, 9))
    p = [1 / (i ** 2 * z) for i in range(1, 9)]
    assert routing_probabilities(8, 2, 2.0) == pytest.approx([1.0] + [x / (1 - p[0]) for x in p[1:]], rel=1e-12)
    assert routing_probabilities(8, 2, 0.0) == (0.25,) * 8
    # imbalance: rank 0 of 4 holds popularity ranks 0 and 4 (round robin) -> 4 x (p_0 + p_4)
    assert expert_load(8, 2, 4, 1.0).imbalance == pytest.approx(4 * (1 + 1 / 5) / h8, rel=1e-12)
    assert expert_load(8, 2, 4, 0.0).imbalance == pytest.approx(1.0)


class _ComputeBoundDB:
    """Stub compute_db: grouped expert GEMMs take FLOPs (from their dims) / 1 PFLOP/s, everything else 0."""

    def lookup_many(self, ops, gpu):
        out = []
        for op in ops:
            d = dict(op.shape)
            t = 2.0 * d["groups"] * d["m"] * d["n"] * d["k"] / 1e15 if op.kind == "grouped_gemm" else 0.0
            out.append(KernelTime(t, "modeled"))
        return out


class _A2ANet:
    """Stub network: an all-to-all of buffer S takes S / 100 GB/s (no latency), other collectives 0."""

    def estimate(self, req):
        return req.size_bytes / 1e11 if req.op == "all_to_all" else 0.0


def _moe_step(skew: float, tokens: int):
    plan = ServingPlan(tp=4, ep=4, expert_skew=skew)
    spec = inference_spec(MIXTRAL, tp=4, ep=4, expert_skew=skew)
    placement = place_replicas(plan, make_topology("spectrum-x", gpus=8))
    timer = ServingTimer(spec, plan, placement, "H100", _ComputeBoundDB(), _A2ANet(), None)
    return timer.stage_cost(0, 0, BatchShape(prefill=((tokens, 0),)), 0.0)


def test_skewed_expert_load_slows_the_moe_step_by_the_hottest_rank_factor():
    # Zipf s = 1 over Mixtral's 8 experts on 4 EP ranks: the hottest rank holds popularity ranks 0 and 4
    # and receives 4 (p_0 + p_4) = 4 x 1.2 / H_8 = 1.766 x the mean token copies. With compute-bound
    # expert GEMMs and bandwidth-bound all-to-alls (everything else free) the step takes that much longer.
    h8 = sum(1 / i for i in range(1, 9))
    factor = 4 * (1 + 1 / 5) / h8
    tokens = 1 << 14
    bal, skew = _moe_step(0.0, tokens), _moe_step(1.0, tokens)
    assert skew.compute_s / bal.compute_s == pytest.approx(factor, rel=1e-3)
    assert skew.comm_s / bal.comm_s == pytest.approx(factor, rel=1e-3)
    assert skew.time_s / bal.time_s == pytest.approx(factor, rel=1e-3)
    # balanced compute by hand: 16384 x 2 / 4 = 8192 copies per rank x (fc1 2 x 14336 + fc2 14336) x 4096 x 2
    assert bal.compute_s * 1e15 == pytest.approx(32 * 8192 * 3 * 14336 * 4096 * 2, rel=1e-12)
    # routing changes which GPU waits, not the model's work
    assert skew.flops == pytest.approx(bal.flops, rel=1e-12)


def test_small_decode_reads_only_the_experts_it_routes_to():
    # one decoding token, top-2 of 8: two experts run (one row each), the other six cost nothing
    ops = layer_token_ops(inference_spec(MIXTRAL, tp=1), 1, moe=True)
    fc = [op for op in ops if op.kind == "grouped_gemm"]
    assert [(dict(op.shape)["groups"], dict(op.shape)["m"]) for op in fc] == [(2, 1), (2, 1)]
    weights = 3 * 4096 * 14336 * 2                             # one expert's gate, up, down in bf16
    assert sum(op.bytes for op in fc) == pytest.approx(2 * weights + 2 * 2 * (4096 + 2 * 14336) + 2 * 2 * (14336 + 4096))
    # a large batch touches every expert
    big = [op for op in layer_token_ops(inference_spec(MIXTRAL, tp=1), 512, moe=True) if op.kind == "grouped_gemm"]
    assert {dict(op.shape)["groups"] for op in big} == {8} and {dict(op.shape)["m"] for op in big} == {128}


def test_hottest_rank_gets_at_least_one_token():
    # 1 token x top-8 over 16 ranks: the mean is half a copy per rank, the busiest rank gets one
    load = expert_load(256, 8, 16)
    assert load.hot(1).copies == 1 and load.hot(1).active_experts == 1
    assert load.hot(4096).copies == 2048 and load.hot(4096).active_experts == 16


def test_mla_kv_bytes_per_token_deepseek_v3_exact():
    # per token per layer: the 512-wide latent + the 64-wide shared rope key, whole on every TP rank
    gib80 = 80 * 1024 ** 3
    for kv_dtype, e in (("bf16", 2), ("fp8", 1)):
        kv = plan_kv_cache(DSV3, ServingPlan(tp=16, ep=16, weight_dtype="fp8", kv_dtype=kv_dtype), gib80)
        (st,) = kv.stages
        assert st.kv_bytes_per_token == 61 * (512 + 64) * e
        assert kv.num_blocks == st.kv_capacity_bytes // (16 * 61 * 576 * e)
    for tp in (1, 8, 16):               # not split by heads: the same bytes on every rank
        assert kv_bytes_per_token(DSV3, tp, 61, "bf16") == 61 * 576 * 2
    kv = plan_kv_cache(get_model("deepseek-v2"), ServingPlan(tp=8, pp=2), gib80)      # 60 layers, same MLA dims
    assert [s.kv_bytes_per_token for s in kv.stages] == [30 * 576 * 2] * 2
    # the KV-cache write kernel copies exactly those bytes
    (w,) = [op for op in layer_token_ops(inference_spec(DSV3, tp=16, ep=16, kv_dtype="fp8"), 7, moe=True)
            if op.name == "kv_cache_write"]
    assert dict(w.shape)["bytes"] == 7 * 576


FEW = RequestConfig(num_requests=6, qps=4.0, lengths="fixed", prefill_tokens=300, decode_tokens=12, seed=3)


@pytest.mark.parametrize("model,plan,gpus", [
    ("mixtral-8x7b", ServingPlan(tp=2, ep=2), 8),
    ("deepseek-v3", ServingPlan(tp=16, ep=16, weight_dtype="fp8", kv_dtype="fp8", expert_skew=0.8), 16),
    ("qwen3-235b-a22b", ServingPlan(tp=8, ep=8, weight_dtype="fp8"), 8),
    ("qwen3-30b-a3b", ServingPlan(tp=1), 8),
])
def test_moe_models_serve_end_to_end(model, plan, gpus):
    run = simulate_serving(model, plan, FEW, topology=make_topology("spectrum-x", gpus=gpus), gpu="H100")
    reqs = run.result.requests
    assert len(reqs) == 6 and all(r.generated == 12 for r in reqs)
    assert all(r.first_token_s > r.arrived_at_s for r in reqs)
    moe = run.summary["cost_model"]["moe"]
    assert moe["ep"] == plan.ep and moe["imbalance_factor"] >= 1.0
    if plan.tp == 16:       # one replica over two servers: the EP group crosses the fabric
        group = run.timer.placement.replicas[0].tp_group(0)
        assert {g // 8 for g in group} == {0, 1}


def test_deepseek_v3_needs_fp8_on_16_h100():
    with pytest.raises(SimError, match=r"^deployment does not fit: weights .* on H100 \(tp 16"):
        plan_kv_cache(DSV3, ServingPlan(tp=16, ep=16), 80 * 1024 ** 3, "H100")


def test_cli_reports_the_imbalance_factor(capsys):
    from sim.cli import main
    args = ["serve", "-m", "qwen3-30b-a3b", "--tp", "2", "--ep", "2", "--expert-skew", "0", "--requests", "4",
            "--lengths", "fixed", "--prefill-tokens", "64", "--decode-tokens", "4", "-o", "-", "-q"]
    assert main(args) == 0
    assert "MoE routing               128 experts, top-8, ep 2, skew 0 -> hottest rank 1.000 x" in capsys.readouterr().out


@pytest.mark.parametrize("extra,message", [
    (["-m", "qwen3-30b-a3b", "--expert-skew", "-1"], "serving plan.expert_skew: must be a finite number >= 0"),
    (["-m", "llama3-8b", "--expert-skew", "1"], "serving plan.expert_skew: needs a MoE model"),
    (["-m", "qwen3-30b-a3b", "--tp", "4", "--ep", "2"], "serving plan.ep:"),
])
def test_bad_moe_input_is_one_line(extra, message, capsys, tmp_path):
    from sim.cli import main
    out = tmp_path / "r"
    assert main(["serve", *extra, "--requests", "3", "-o", str(out), "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("clustersim: error: ") and message in err[0], err
    assert not out.exists()


def test_expert_skew_is_validated_in_the_api():
    with pytest.raises(WorkloadError, match=r"^serving plan\.expert_skew: must be a finite number >= 0 \(got nan\)$"):
        inference_spec(MIXTRAL, tp=2, expert_skew=math.nan)
