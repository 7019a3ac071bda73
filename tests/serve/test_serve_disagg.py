"""Prefill/decode disaggregation: the decode pool's engine path (requests prefilled elsewhere), the KV
transfer on the fabric (bytes, slow links, layer-wise overlap), the comparison with colocation, the CLI,
determinism and the one-line errors."""

from __future__ import annotations

import csv
import heapq
import json
import math

import numpy as np
import pandas as pd
import pytest
from helpers_serve import PhaseTimer

from sim.cli import main
from sim.errors import SimError
from sim.serve.api import simulate_serving
from sim.serve.disagg import DisaggPlan, compare_colocated, simulate_disaggregated, validate_split
from sim.serve.engine import simulate
from sim.serve.entities import PrefilledRequests, Request
from sim.serve.plan import SCHEDULERS, ServingPlan
from workload_gen.requests import RequestConfig

# Llama-3-8B: 32 layers, 8 KV heads of head_dim 128, K and V, bf16 (2 B): KV bytes of one token
LLAMA3_8B_KV_BYTES_PER_TOKEN = 32 * 8 * 128 * 2 * 2


def _prefilled(specs):
    """specs: (id, arrival, first token, ready, P, D) -> PrefilledRequests."""
    reqs = [Request.prefilled_elsewhere(i, a, p, d, first_scheduled_s=a, first_token_s=ft) for i, a, ft, _, p, d in specs]
    return PrefilledRequests([s[3] for s in specs], reqs)


# ------------------------------------------------------------------ engine: requests prefilled elsewhere
@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_prefilled_requests_only_decode(scheduler):
    # prefill batches would cost 1 s: none may run. Request 0 (first token at 0.4, ready 0.5) decodes tokens
    # 2..5 in 4 iterations of 10 ms from 0.5; request 1 (ready 0.6) alone from 0.6.
    timer = PhaseTimer(prefill_s=1.0, decode_s=0.01)
    reqs = _prefilled([(0, 0.0, 0.4, 0.5, 100, 5), (1, 0.1, 0.5, 0.6, 60, 5)])
    res = simulate(reqs, ServingPlan(scheduler=scheduler), timer, num_blocks=2000, max_model_len=512,
                   check_invariants=True)
    assert all(not sh.prefill for sh in timer.shapes)
    r0, r1 = res.requests
    assert r0.completed_s == pytest.approx(0.54) and r1.completed_s == pytest.approx(0.64)
    assert r0.kv_landed_s == 0.5 and r0.decode_admitted_s == 0.5 and r1.decode_admitted_s == 0.6
    assert r0.first_token_s == 0.4 and r0.generated == 5 and r0.kv_tokens == 100 + 5 - 1
    # the gap to token 2 holds the hand-off wait: 0.51 - 0.4
    assert r0.max_gap_s == pytest.approx(0.11)
    assert res.gaps.total == 2 * 4
    assert res.replicas[0].kv_used_blocks[-1] == 0


def test_landed_request_waits_for_free_blocks():
    # each request ends with 160 + 3 - 1 = 162 KV tokens = 11 blocks of 16; 12 blocks hold one at a time
    timer = PhaseTimer(prefill_s=1.0, decode_s=0.01)
    reqs = _prefilled([(0, 0.0, 0.0, 0.0, 160, 3), (1, 0.0, 0.0, 0.0, 160, 3)])
    res = simulate(reqs, ServingPlan(scheduler="sarathi"), timer, num_blocks=12, max_model_len=512,
                   check_invariants=True)
    r0, r1 = res.requests
    assert r0.completed_s == pytest.approx(0.02)
    assert r1.kv_landed_s == 0.0 and r1.decode_admitted_s == pytest.approx(0.02)
    assert r1.completed_s == pytest.approx(0.04)
    assert res.replicas[0].peak_used_blocks == 11


class _DelayHandoff:
    """KV lands `delay_s[replica]` after the routing time."""

    def __init__(self, delay_s):
        self.delay_s = delay_s
        self.heap = []
        self.started = []

    def start(self, r, replica, now_s):
        self.started.append((r.id, replica, now_s))
        heapq.heappush(self.heap, (now_s + self.delay_s[replica], r.id, r))

    def next_event_time(self):
        return self.heap[0][0] if self.heap else math.inf

    def advance(self, until_s):
        out = []
        while self.heap and self.heap[0][0] <= until_s:
            out.append(heapq.heappop(self.heap)[2])
        return out


def test_handoff_runs_on_the_engine_clock():
    timer = PhaseTimer(prefill_s=1.0, decode_s=0.01)
    reqs = _prefilled([(0, 0.0, 0.1, 0.1, 50, 3), (1, 0.0, 0.2, 0.2, 50, 3), (2, 0.0, 0.3, 0.3, 50, 3)])
    ho = _DelayHandoff([0.05, 0.5])
    res = simulate(reqs, ServingPlan(replicas=2, router="round_robin"), timer, num_blocks=100, max_model_len=512,
                   handoff=ho, check_invariants=True)
    assert ho.started == [(0, 0, 0.1), (1, 1, 0.2), (2, 0, 0.3)]
    r0, r1, r2 = res.requests
    assert r0.kv_landed_s == pytest.approx(0.15) and r1.kv_landed_s == pytest.approx(0.7)
    assert r2.kv_landed_s == pytest.approx(0.35)
    # token 2 comes one decode iteration after the landing; its gap counts from the first token
    assert r1.completed_s == pytest.approx(0.72) and r1.max_gap_s == pytest.approx(0.71 - 0.2)


def test_handoff_needs_prefilled_requests():
    with pytest.raises(SimError, match="KV hand-off needs PrefilledRequests"):
        simulate([(0.0, 10, 2)], ServingPlan(), PhaseTimer(0.1, 0.01), num_blocks=100, max_model_len=64,
                 handoff=_DelayHandoff([0.0]))


# ------------------------------------------------------------------ KV transfer on the fabric
def test_kv_bytes_equal_the_caches_created():
    # prefill tp 2 x pp 2 -> decode tp 4 x pp 2: heads and layers are re-sharded; one-token requests move nothing
    rng = np.random.default_rng(3)
    P = rng.integers(20, 700, 24)
    D = np.where(np.arange(24) % 5 == 0, 1, rng.integers(2, 20, 24))
    reqs = [(0.05 * i, int(p), int(d)) for i, (p, d) in enumerate(zip(P, D))]
    dplan = DisaggPlan(ServingPlan(tp=2, pp=2), ServingPlan(tp=4, pp=2, replicas=1))
    run = simulate_disaggregated("llama3-8b", dplan, reqs)
    expected = sum(int(p) * LLAMA3_8B_KV_BYTES_PER_TOKEN for p, d in zip(P, D) if d >= 2)
    assert run.summary["kv_transfer"]["bytes"] == expected
    assert int(run.transfers["bytes"].sum()) == expected
    assert int(run.requests["kv_bytes"].sum()) == expected
    # each decode GPU gets its 2 of 8 KV heads for its 16 of 32 layers
    per_dst = run.transfers.groupby("dst_gpu")["bytes"].sum()
    assert sorted(per_dst.index) == [4, 5, 6, 7, 8, 9, 10, 11]
    assert set(per_dst.tolist()) == {expected // 8}
    # one-token requests end at their prefill and have no decode replica
    df = run.requests
    one = df["request_num_decode_tokens"] == 1
    assert (df.loc[one, "kv_bytes"] == 0).all() and (df.loc[one, "replica"] == -1).all()
    assert (df.loc[one, "completed_at"] == df.loc[one, "first_token_at"]).all()
    whole = simulate_disaggregated("llama3-8b", DisaggPlan(dplan.prefill, dplan.decode, kv_transfer="whole"), reqs)
    assert whole.summary["kv_transfer"]["bytes"] == expected


def test_mla_latent_moves_to_every_decode_rank():
    # DeepSeek-V2-Lite: 27 layers, latent 512 + rope 64 at 2 B, replicated on each of the 2 decode ranks
    run = simulate_disaggregated("deepseek-v2-lite", DisaggPlan(ServingPlan(), ServingPlan(tp=2)),
                                 [(0.0, 100, 5), (0.1, 37, 3)])
    assert run.summary["kv_transfer"]["bytes"] == (100 + 37) * (512 + 64) * 2 * 27 * 2


@pytest.mark.parametrize("mode", ["layerwise", "whole"])
def test_tiny_kv_bandwidth_makes_ttft_plus_transfer_dominate(mode):
    # prefill GPU 0 and decode GPU 8 sit on two servers joined by 1 Gb/s NICs; requests 10 s apart
    topo = "spectrum-x:gpus=16,nic_bandwidth_Bps=1Gbps"
    reqs = [(10.0 * i, 256, 8) for i in range(6)]
    dplan = DisaggPlan(ServingPlan(), ServingPlan(), kv_transfer=mode, mapping=(0, 8))
    df = simulate_disaggregated("llama3-8b", dplan, reqs, topology=topo).requests
    line_s = 256 * LLAMA3_8B_KV_BYTES_PER_TOKEN / (1e9 / 8)      # the KV at the NIC's line rate
    assert (df["kv_transfer_time"] >= line_s).all()
    assert (df["kv_transfer_time"] <= 1.25 * line_s).all()
    share = (df["ttft"] + df["kv_exposed_time"]) / df["request_e2e_time"]
    assert (share > 0.8).all()
    fast = simulate_disaggregated("llama3-8b", DisaggPlan(ServingPlan(), ServingPlan(), kv_transfer=mode), reqs).requests
    assert (fast["kv_exposed_time"] < 0.01 * df["kv_exposed_time"]).all()
    assert ((fast["ttft"] + fast["kv_exposed_time"]) / fast["request_e2e_time"] < 0.3).all()
    assert (df["tpot"] > 5 * fast["tpot"]).all()


def test_layerwise_hides_what_whole_exposes():
    cfg = RequestConfig(num_requests=40, qps=4.0, lengths="fixed", prefill_tokens=1500, decode_tokens=8, seed=2)
    topo = "spectrum-x:gpus=16,nic_bandwidth_Bps=100Gbps"
    lw = simulate_disaggregated("llama3-8b", DisaggPlan(ServingPlan(), ServingPlan(), mapping=(0, 8)), cfg,
                                topology=topo).requests
    wh = simulate_disaggregated("llama3-8b", DisaggPlan(ServingPlan(), ServingPlan(), kv_transfer="whole",
                                                        mapping=(0, 8)), cfg, topology=topo).requests
    # same prefill pool: same first tokens; streaming during the prefill never lands later, and lands
    # after the last layer of the last chunk only (causality)
    assert np.array_equal(lw["first_token_at"].to_numpy(), wh["first_token_at"].to_numpy())
    assert (lw["kv_exposed_time"] > 0).all()
    assert (lw["kv_exposed_time"] < 0.5 * wh["kv_exposed_time"]).all()
    # whole: the transfer starts at the first token
    assert np.allclose(wh["kv_transfer_start"], wh["first_token_at"])


def test_generous_fabric_lowers_the_decode_tail_versus_colocation():
    """Same 2 H100 of one server, same requests: colocated Sarathi replicas run decode iterations that
    also carry 512-token prefill chunks, so some gaps between tokens last a chunk's prefill; the
    decode pool's iterations carry decodes only (prompts are prefilled on the other GPU and their KV
    crosses NVLink while the prefill runs), so its TBT / TPOT tails stay at a decode iteration."""
    cfg = RequestConfig(num_requests=150, qps=4.0, lengths="fixed", prefill_tokens=2048, decode_tokens=128, seed=1)
    dplan = DisaggPlan(ServingPlan(scheduler="sarathi"), ServingPlan(scheduler="sarathi"))
    cmp = compare_colocated("llama3-8b", dplan, cfg)
    dis, co = cmp.disaggregated, cmp.colocated
    assert cmp.colocated_plan.replicas == 2 and cmp.table["colocated_plan"]["gpus"] == [0, 1]
    # the physical reason, checked: colocated batches mix prefill chunks and decodes, decode-pool ones never
    cb = co.batches
    assert ((cb["num_prefill_tokens"] > 0) & (cb["num_decode_tokens"] > 0)).any()
    db = dis.decode.batches
    assert (db["num_prefill_tokens"] == 0).all()
    a, b = dis.summary["metrics"], co.summary["metrics"]
    assert a["tbt_s"]["p99"] < 0.8 * b["tbt_s"]["p99"]
    assert a["tpot_s"]["p99"] < b["tpot_s"]["p99"]
    assert dis.summary["comparison"]["colocated"]["tbt_p99_s"] == b["tbt_s"]["p99"]
    assert "disaggregated vs colocated on the same 2 GPUs" in cmp.text


def test_summary_and_frame_match_simulate_serving():
    cfg = RequestConfig(num_requests=30, qps=2.0, lengths="chat", seed=4)
    run = simulate_disaggregated("llama3-8b", DisaggPlan(ServingPlan(), ServingPlan()), cfg)
    ref = simulate_serving("llama3-8b", ServingPlan(), cfg)
    assert set(run.summary["metrics"]) == set(ref.summary["metrics"])
    for k, v in ref.summary["metrics"].items():
        assert set(run.summary["metrics"][k]) == set(v)
    assert set(ref.summary) <= set(run.summary)
    assert list(run.requests.columns[:len(ref.requests.columns)]) == list(ref.requests.columns)
    assert {"kv_bytes", "kv_landed_at", "kv_exposed_time", "decode_queue_time", "prefill_replica"} <= set(
        run.requests.columns)
    df = run.requests
    # every timestamp in order: arrival <= first token <= KV landed <= admitted <= completed
    assert (df["arrived_at"] <= df["first_token_at"]).all()
    assert (df["first_token_at"] <= df["kv_landed_at"]).all()
    assert (df["kv_landed_at"] <= df["decode_admitted_at"]).all()
    assert (df["decode_admitted_at"] < df["completed_at"]).all()
    # all tokens: gaps = sum of (D - 1)
    assert run.summary["metrics"]["tbt_s"]["count"] == int((df["request_num_decode_tokens"] - 1).sum())
    assert list(run.replicas["pool"]) == ["prefill", "decode"]


def test_deterministic():
    cfg = RequestConfig(num_requests=40, qps=6.0, lengths="chat", seed=7)
    dplan = DisaggPlan(ServingPlan(replicas=2, router="random"), ServingPlan(replicas=2, router="least_outstanding"))
    a = simulate_disaggregated("llama3-8b", dplan, cfg, seed=3)
    b = simulate_disaggregated("llama3-8b", dplan, cfg, seed=3)
    pd.testing.assert_frame_equal(a.requests, b.requests)
    pd.testing.assert_frame_equal(a.transfers, b.transfers)
    sa, sb = dict(a.summary), dict(b.summary)
    sa.pop("simulated_in_s"), sb.pop("simulated_in_s")
    assert json.dumps(sa, sort_keys=True, default=str) == json.dumps(sb, sort_keys=True, default=str)


# ------------------------------------------------------------------ errors
def test_validate_split_errors():
    dplan = DisaggPlan(ServingPlan(tp=2, replicas=2), ServingPlan(tp=4))
    with pytest.raises(SimError, match=r"^disaggregated split needs 8 GPUs \(prefill 2 x tp 2 x pp 1 = 4 \+ decode "
                                       r"1 x tp 4 x pp 1 = 4\) but the GPU budget is 6$"):
        validate_split(dplan, 6)
    validate_split(dplan, 8)
    with pytest.raises(SimError, match="kv_transfer 'bulk'"):
        validate_split(DisaggPlan(ServingPlan(), ServingPlan(), kv_transfer="bulk"))
    with pytest.raises(SimError, match="the same GPU twice"):
        validate_split(DisaggPlan(ServingPlan(), ServingPlan(), mapping=(3, 3)))
    with pytest.raises(SimError, match="KV cache dtype differs"):
        validate_split(DisaggPlan(ServingPlan(kv_dtype="fp8"), ServingPlan()))
    with pytest.raises(SimError, match=r"^decode pool: serving plan.scheduler"):
        validate_split(DisaggPlan(ServingPlan(), ServingPlan(scheduler="fifo")))


def test_simulate_errors():
    with pytest.raises(SimError, match="closed loop cannot drive"):
        simulate_disaggregated("llama3-8b", DisaggPlan(ServingPlan(), ServingPlan()),
                               RequestConfig(arrival="closed", concurrency=2, num_requests=4))
    with pytest.raises(SimError, match=r"^decode pool: serving plan.tp: must divide the attention heads"):
        simulate_disaggregated("llama3-8b", DisaggPlan(ServingPlan(), ServingPlan(tp=3)), [(0.0, 10, 2)])
    with pytest.raises(SimError, match="budget is 4"):
        simulate_disaggregated("llama3-8b", DisaggPlan(ServingPlan(replicas=3), ServingPlan(tp=2)), [(0.0, 10, 2)],
                               topology="spectrum-x:gpus=4,gpus_per_server=4")
    with pytest.raises(SimError, match="one GPU type"):
        compare_colocated("llama3-8b", DisaggPlan(ServingPlan(), ServingPlan(), prefill_gpu="H100",
                                                  decode_gpu="A100-80GB"), [(0.0, 10, 2)])
    with pytest.raises(SimError, match="not a multiple of tp 2"):
        compare_colocated("llama3-8b", DisaggPlan(ServingPlan(), ServingPlan(tp=2)), [(0.0, 10, 2)])


# ------------------------------------------------------------------ CLI
CLI = ["serve", "--disaggregate", "-m", "llama3-8b", "--gpu", "H100", "--requests", "30", "--qps", "3",
       "--lengths", "chat", "--no-charts", "--no-trace", "-q"]


def test_cli_outputs_and_comparison(tmp_path, capsys):
    out = tmp_path / "d"
    rc = main([*CLI, "--prefill-replicas", "1", "--decode-replicas", "1", "--kv-transfer", "whole",
               "--compare-colocated", "--slo-ttft", "1", "-o", str(out)])
    assert rc == 0
    text = capsys.readouterr().out
    assert "disaggregated vs colocated on the same 2 GPUs (colocated: 2 x tp 1 pp 1 sarathi)" in text
    assert "KV transfer               whole:" in text
    assert sorted(p.name for p in out.iterdir()) == ["kv_transfers.csv", "replica_metrics.csv", "report.html",
                                                     "request_metrics.csv", "summary.json", "summary.txt"]
    with open(out / "kv_transfers.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0]) == ["request_id", "bytes", "src_gpu", "dst_gpu", "start_s", "end_s"]
    assert {(r["src_gpu"], r["dst_gpu"]) for r in rows} == {("0", "1")}
    with open(out / "request_metrics.csv", newline="") as fh:
        reqs = list(csv.DictReader(fh))
    expected = sum(int(r["request_num_prefill_tokens"]) * LLAMA3_8B_KV_BYTES_PER_TOKEN for r in reqs
                   if int(r["request_num_decode_tokens"]) >= 2)
    assert sum(int(r["bytes"]) for r in rows) == expected
    s = json.loads((out / "summary.json").read_text())
    assert s["kv_transfer"]["bytes"] == expected and s["comparison"]["colocated_plan"]["replicas"] == 2
    assert s["deployment"]["mode"] == "disaggregated"
    with open(out / "replica_metrics.csv", newline="") as fh:
        assert [r["pool"] for r in csv.DictReader(fh)] == ["prefill", "decode"]


@pytest.mark.parametrize("argv, message", [
    (["--gpus", "2", "--prefill-replicas", "2", "--decode-replicas", "1"],
     "clustersim: error: disaggregated split needs 3 GPUs (prefill 2 x tp 1 x pp 1 = 2 + decode 1 x tp 1 x pp 1 = 1) "
     "but the GPU budget is 2"),
    (["--replicas", "2"], "clustersim: error: --replicas: with --disaggregate give --prefill-replicas and "
                          "--decode-replicas"),
    (["--decode-tp", "3"], "clustersim: error: decode pool: serving plan.tp: must divide the attention heads of "
                           "llama3-8b (got tp=3, heads=32)"),
])
def test_cli_errors_write_nothing(tmp_path, capsys, argv, message):
    out = tmp_path / "d"
    assert main([*CLI, *argv, "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [message]
    assert not out.exists()


def test_cli_pool_flags_need_disaggregate(tmp_path, capsys):
    out = tmp_path / "d"
    assert main(["serve", "-m", "llama3-8b", "--prefill-tp", "2", "-q", "-o", str(out)]) == 2
    assert capsys.readouterr().err.strip() == "clustersim: error: --prefill-tp: needs --disaggregate"
    assert not out.exists()
