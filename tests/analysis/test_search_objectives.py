"""`clustersim search --objective time|cost|energy` over several GPU counts (sim.analysis.objectives): the
winner under each objective, derived by hand from the candidates' times and the price/power tables."""

from __future__ import annotations

import csv
import json
import math

import pytest

from sim.analysis import objectives as obj
from sim.analysis.search import Candidate, plan_label
from sim.cli import main
from sim.energy import load_power_table
from sim.errors import SimError
from sim.goodput import ComponentCounts

PRICES = "prices:\n  H100: {usd_per_gpu_hour: 4.0, source: test quote, date: 2025-01}\n"
POWER = """gpus:
  H100: {busy_w: 1000, idle_w: 100, source: test}
server_cpu_w: 500
nic_w: 20
switch_w: 1000
pue: 1.5
"""
TPI = 64 * 4096      # tokens per iteration of the synthetic plans


def _cand(world: int, time_s: float, busy_s: float) -> Candidate:
    from workload_gen.plan import ParallelPlan
    plan = ParallelPlan(world_size=world, tp=8, pp=1, sequence_parallel=True, micro_batch_size=1,
                        global_batch_size=64, seq_length=4096)
    c = Candidate(plan, True)
    c.iteration_time_s, c.compute_busy_s = time_s, busy_s
    return c


@pytest.fixture()
def two_plans(tmp_path):
    """64 GPUs at 1.0 s (0.8 s of kernels per GPU) against 128 GPUs at 0.6 s (0.4 s of kernels)."""
    (tmp_path / "c.yaml").write_text(PRICES)
    (tmp_path / "p.yaml").write_text(POWER)
    tables, notes = obj.load_objective_tables("H100", TPI, "cost", tmp_path / "c.yaml", tmp_path / "p.yaml")
    assert notes == []
    a, b = _cand(64, 1.0, 0.8), _cand(128, 0.6, 0.4)
    obj.price_candidate(a, tables, ComponentCounts(gpu=64, nic=64, switch=2, server=8))
    obj.price_candidate(b, tables, ComponentCounts(gpu=128, nic=128, switch=4, server=16))
    return a, b


def test_cost_and_energy_per_token_by_hand(two_plans):
    a, b = two_plans
    # $ per iteration = 4 $/GPU-h x GPUs x T / 3600: 0.071111 $ (64 GPUs) and 0.085333 $ (128 GPUs)
    assert a.usd_per_million_tokens == pytest.approx(4 * 64 * 1.0 / 3600 / TPI * 1e6, rel=1e-12)
    assert b.usd_per_million_tokens == pytest.approx(4 * 128 * 0.6 / 3600 / TPI * 1e6, rel=1e-12)
    # energy of one iteration, J: GPUs busy x 1000 W + idle x 100 W, 500 W a server, 20 W a NIC, 1 kW a switch,
    # x PUE 1.5. 64 GPUs: 51,200 + 1,280 + 4,000 + 1,280 + 2,000 = 59,760 J IT
    a_j = 1.5 * (64 * 0.8 * 1000 + 64 * 0.2 * 100 + 8 * 500 * 1.0 + 64 * 20 * 1.0 + 2 * 1000 * 1.0)
    b_j = 1.5 * (128 * 0.4 * 1000 + 128 * 0.2 * 100 + 16 * 500 * 0.6 + 128 * 20 * 0.6 + 4 * 1000 * 0.6)
    assert (a_j, b_j) == (pytest.approx(89_640.0), pytest.approx(93_744.0))
    assert a.kwh_per_million_tokens == pytest.approx(a_j / 3.6e6 / TPI * 1e6, rel=1e-12)
    assert b.kwh_per_million_tokens == pytest.approx(b_j / 3.6e6 / TPI * 1e6, rel=1e-12)


def test_cost_objective_picks_fewer_gpus_and_says_why(two_plans):
    a, b = two_plans
    assert obj.rank([a, b], "time") == [b, a]
    assert obj.rank([a, b], "cost") == [a, b]          # 64 x 1.0 = 64 < 128 x 0.6 = 76.8 GPU-seconds
    assert obj.rank([a, b], "energy") == [a, b]        # 89,640 J < 93,744 J for the same tokens
    lines = obj.why_lines([b, a], plan_label)
    assert lines[0].startswith(f"fastest: 128 GPUs, {plan_label(b.plan)}: 0.6 s per iteration")
    assert lines[1] == (f"cheapest per token: 64 GPUs, {plan_label(a.plan)}: 1.67x the time of the fastest "
                        "but 0.83x its $ per token")          # 1.0/0.6; 64/76.8
    assert lines[2] == (f"least energy per token: 64 GPUs, {plan_label(a.plan)}: 1.67x the time of the fastest "
                        "but 0.96x its energy per token")     # 89,640/93,744 = 0.956
    w = obj.winners_dict([a, b], plan_label)
    assert (w["time"]["world_size"], w["cost"]["world_size"], w["energy"]["world_size"]) == (128, 64, 64)


def test_flow_confirmed_plans_rank_first_at_their_flow_time(two_plans):
    a, b = two_plans
    b.flow_iteration_time_s = 0.7            # re-timed: the screen's 0.6 s no longer counts
    assert obj.plan_time_s(b) == 0.7
    assert obj.rank([a, b], "time") == [b, a]  # only b was confirmed: a screened plan cannot overtake it


def test_missing_price_is_an_error_only_for_the_cost_objective(tmp_path):
    (tmp_path / "c.yaml").write_text(PRICES)
    with pytest.raises(SimError, match=r"no price for GPU 'A40'.*--price-file"):
        obj.load_objective_tables("A40", TPI, "cost", tmp_path / "c.yaml")
    tables, notes = obj.load_objective_tables("A40", TPI, "time", tmp_path / "c.yaml")
    assert tables.usd_per_gpu_hour is None and notes[0].startswith("no $ per token:")
    c = _cand(64, 1.0, 0.5)
    obj.price_candidate(c, tables, ComponentCounts(gpu=64, nic=64, switch=0, server=8))
    assert math.isnan(c.usd_per_million_tokens) and c.kwh_per_million_tokens > 0   # A40 has a power row
    assert load_power_table().gpu("A40").busy_w == 300


SEARCH = ["search", "--model", "llama3-8b", "--world-size", "16,32", "--gbs", "16", "--seq", "4096", "--tp", "2",
          "--pp", "2", "--vpp", "1", "--cp", "1", "--sp", "on", "--mbs", "1", "--recompute", "none",
          "--optimizer", "distributed", "--no-confirm", "--topology", "none"]


def test_cli_cost_objective_picks_a_different_plan_than_time(tmp_path, capsys):
    """Acceptance (issue 14): the winners derived by hand from the two GPU counts' fastest plans and the
    price table: $ per token = 3 $/GPU-h x GPUs x T / 3600 / (16 x 4096 tokens)."""
    prices = tmp_path / "c.yaml"
    prices.write_text(PRICES.replace("4.0", "3.0"))
    out_c = tmp_path / "c"
    assert main([*SEARCH, "--price-file", str(prices), "--objective", "cost", "-o", str(out_c)]) == 0
    text = capsys.readouterr().out
    rows = list(csv.DictReader(open(out_c / "ranked.csv")))
    fastest = {}
    for r in rows:
        w, t = int(r["world_size"]), float(r["iteration_time_s"])
        fastest[w] = min(fastest.get(w, math.inf), t)
    assert sorted(fastest) == [16, 32]
    usd = {w: 3.0 * w * t / 3600 / (16 * 4096) * 1e6 for w, t in fastest.items()}
    time_winner = min(fastest, key=fastest.get)
    cost_winner = min(usd, key=usd.get)
    assert (time_winner, cost_winner) == (32, 16)      # the case is a real trade-off
    assert int(rows[0]["world_size"]) == cost_winner
    assert float(rows[0]["usd_per_million_tokens"]) == pytest.approx(usd[cost_winner], rel=1e-5)
    s = json.loads((out_c / "summary.json").read_text())
    assert s["objective"] == "cost" and s["world_size"] == [16, 32] and s["usd_per_gpu_hour"] == 3.0
    assert (s["winners"]["time"]["world_size"], s["winners"]["cost"]["world_size"]) == (time_winner, cost_winner)
    assert s["winners"]["time"]["iteration_time_s"] == pytest.approx(fastest[time_winner], rel=1e-5)
    why = (f"cheapest per token: 16 GPUs, {rows[0]['plan']}: {fastest[16] / fastest[32]:.2f}x the time of the "
           f"fastest but {usd[16] / usd[32]:.2f}x its $ per token")
    assert why in text and why in s["why"]


@pytest.mark.parametrize("flags,message", [
    (["--objective", "money"], "invalid choice: 'money'"),
    (["--world-size", "16,x"], "--world-size: expected a comma list of integers"),
    (["--world-size", "16,0"], "--world-size: expected positive integers"),
    (["--objective", "cost", "--gpu", "A100", "--price-file", "PRICEFILE"], "no price for GPU 'A100'"),
])
def test_cli_objective_errors_are_one_line(tmp_path, capsys, flags, message):
    (tmp_path / "c.yaml").write_text(PRICES)
    flags = [str(tmp_path / "c.yaml") if f == "PRICEFILE" else f for f in flags]
    args = SEARCH + ["-o", str(tmp_path / "o")]
    if "--world-size" in flags:
        i = args.index("--world-size")
        args = args[:i] + args[i + 2:]
    try:
        rc = main(args + flags)
    except SystemExit as exc:     # argparse's own checks (a choice) exit from the parser, one line too
        rc = exc.code
    assert rc == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.count("\n") == 0 and "Traceback" not in err
    assert not (tmp_path / "o").exists()


def test_one_gpu_count_cost_follows_time(two_plans):
    a, _ = two_plans
    c = _cand(64, 0.9, 0.8)
    c.usd_per_million_tokens, c.kwh_per_million_tokens = a.usd_per_million_tokens * 0.9, a.kwh_per_million_tokens
    lines = obj.why_lines([a, c], plan_label)
    assert lines[1].startswith("cheapest per token: the fastest plan (one GPU count at one price")
    assert "--world-size a list" in lines[1]
