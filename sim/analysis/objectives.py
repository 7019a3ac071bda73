"""Objectives of `clustersim search` (issue 14, item 5): rank plans by iteration time, $ per token or J per token.

- time: seconds per iteration (the flow simulator's time for a re-timed plan, else the screen's).
- cost: $ per token = $/GPU-hour (sim.pricing) x GPUs x iteration time / 3600 / tokens per iteration.
- energy: facility J per token = sim.energy.energy_from_busy(...).facility_j / tokens per iteration: a GPU
  draws busy power while its kernels run (re-timed plans: each stage's simulated compute; screened plans:
  the slowest stage's compute + recompute, taken for every stage), idle power otherwise; CPUs, NICs and
  switches of the job (sim.goodput.component_counts) draw constant power over the iteration; x PUE.
Failure-free: goodput, which falls as the GPU count grows, is left to `clustersim run --train-tokens`.
With one world size the GPU count and price are the same for every plan, so cost ranks as time; the
search varies the GPU count (`--world-size 64,128`) for the trade-off a cluster planner makes: fewer
GPUs take longer but each does more useful work, so a token can cost less.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.errors import SimError

OBJECTIVES = ("time", "cost", "energy")
WINNER_LABEL = {"time": "fastest", "cost": "cheapest per token", "energy": "least energy per token"}
KWH_J = 3.6e6


@dataclass(frozen=True)
class ObjectiveTables:
    """What prices and powers a plan: the GPU's $/GPU-hour and power row (None: not in the table)."""

    gpu: str
    tokens_per_iteration: int
    usd_per_gpu_hour: float | None
    price_source: str
    power: object = None          # sim.energy.PowerTable
    power_row: object = None      # sim.energy.GPUPower of the GPU


def load_objective_tables(gpu: str, tokens_per_iteration: int, objective: str, price_file=None,
                          power_file=None, extra_gpus=None) -> tuple[ObjectiveTables, list[str]]:
    """The tables for `gpu` and notes on what cannot be computed; SimError when the objective needs a row
    the table lacks (a missing price is an error for --objective cost, never a price of 0)."""
    from sim.energy import load_power_table
    from sim.pricing import load_price_table
    if objective not in OBJECTIVES:
        raise SimError(f"--objective: unknown objective '{objective}' (use {', '.join(OBJECTIVES)})")
    prices, power = load_price_table(price_file), load_power_table(power_file)
    notes = []
    usd = source = row = None
    try:
        price = prices.row(gpu, extra_gpus)
        usd, source = price.usd_per_gpu_hour, f"{prices.path}: {price.gpu} ({price.source}, {price.date})"
    except SimError as exc:
        if objective == "cost":
            raise
        notes.append(f"no $ per token: {exc}")
    try:
        row = power.gpu(gpu, extra_gpus)
    except SimError as exc:
        if objective == "energy":
            raise
        notes.append(f"no energy per token: {exc}")
    return ObjectiveTables(gpu, int(tokens_per_iteration), usd, source or "", power, row), notes


def plan_time_s(c) -> float:
    """The time a plan is ranked by: its flow-simulated time when re-timed, else the screen estimate."""
    return c.flow_iteration_time_s if math.isfinite(c.flow_iteration_time_s) else c.iteration_time_s


def price_candidate(c, tables: ObjectiveTables, counts) -> None:
    """Set c.usd_per_million_tokens and c.kwh_per_million_tokens (NaN where a table lacks the GPU);
    `counts`: sim.goodput.ComponentCounts of the plan's world size."""
    from sim.energy import energy_from_busy
    t, world, tpi = plan_time_s(c), int(c.plan.world_size), tables.tokens_per_iteration
    if tables.usd_per_gpu_hour is not None:
        c.usd_per_million_tokens = tables.usd_per_gpu_hour * world * t / 3600.0 / tpi * 1e6
    if tables.power_row is not None:
        flow = math.isfinite(c.flow_iteration_time_s) and math.isfinite(c.flow_gpu_busy_s)
        busy = c.flow_gpu_busy_s if flow else c.compute_busy_s * world
        e = energy_from_busy(t, busy, world, tables.power_row, tables.power, counts)
        c.kwh_per_million_tokens = e.facility_j / KWH_J / tpi * 1e6


def counts_for(topology, world: int, gpus_per_server: int):
    """Failure/power units of a job of `world` GPUs: from the topology, else one NIC per GPU, no switches."""
    from sim.goodput import ComponentCounts, component_counts
    if topology is not None:
        return component_counts(topology, world)
    servers = -(-int(world) // max(1, int(gpus_per_server)))
    return ComponentCounts(gpu=int(world), nic=int(world), switch=0, server=servers)


def objective_value(c, objective: str) -> float:
    return {"time": plan_time_s(c), "cost": c.usd_per_million_tokens, "energy": c.kwh_per_million_tokens}[objective]


def rank(cands, objective: str) -> list:
    """Feasible plans best first: the flow-confirmed ones (the search's final verdicts) before those only
    screened, each group by the objective, then by peak memory."""
    def key(c):
        v = objective_value(c, objective)
        return (not math.isfinite(c.flow_iteration_time_s), v if math.isfinite(v) else math.inf,
                c.peak_mem_bytes)
    return sorted((c for c in cands if c.feasible), key=key)


def winners(cands) -> dict:
    """objective -> best plan under it (None when nothing is feasible or the objective has no values)."""
    out = {}
    for obj in OBJECTIVES:
        ranked = rank(cands, obj)
        out[obj] = ranked[0] if ranked and math.isfinite(objective_value(ranked[0], obj)) else None
    return out


def _fmt(v: float, spec: str) -> str:
    return format(v, spec) if math.isfinite(v) else "n/a"


def _ratio(x: float) -> str:
    """Two decimals, three when two would round a real difference to 1.00."""
    return f"{x:.2f}" if abs(x - 1.0) >= 0.005 or x == 1.0 else f"{x:.3f}"


def why_lines(cands, plan_label) -> list[str]:
    """One line per objective saying which plan wins it and, against the fastest plan, at what price."""
    win = winners(cands)
    fast = win["time"]
    if fast is None:
        return []
    lines = [f"{WINNER_LABEL['time']}: {fast.plan.world_size} GPUs, {plan_label(fast.plan)}: "
             f"{plan_time_s(fast):.4g} s per iteration, ${_fmt(fast.usd_per_million_tokens, '.4g')} and "
             f"{_fmt(fast.kwh_per_million_tokens, '.4g')} kWh per million tokens"]
    for obj, what in (("cost", "$"), ("energy", "energy")):
        w = win[obj]
        if w is None:
            lines.append(f"{WINNER_LABEL[obj]}: n/a (no {'price' if obj == 'cost' else 'power'} for the GPU)")
        elif w is fast:
            one = obj == "cost" and len({c.plan.world_size for c in cands if c.feasible}) == 1
            lines.append(f"{WINNER_LABEL[obj]}: the fastest plan" + (
                " (one GPU count at one price: $ per token follows the time; give --world-size a list such as "
                "64,128 to trade time for cost)" if one else ""))
        else:
            lines.append(f"{WINNER_LABEL[obj]}: {w.plan.world_size} GPUs, {plan_label(w.plan)}: "
                         f"{_ratio(plan_time_s(w) / plan_time_s(fast))}x the time of the fastest but "
                         f"{_ratio(objective_value(w, obj) / objective_value(fast, obj))}x its {what} per token")
    return lines


def winners_dict(cands, plan_label) -> dict:
    """summary.json's `winners`: per objective the plan, its GPUs, time, $ and kWh per million tokens."""
    out = {}
    for obj, c in winners(cands).items():
        out[obj] = None if c is None else {
            "plan": plan_label(c.plan), "world_size": c.plan.world_size, "iteration_time_s": plan_time_s(c),
            "usd_per_million_tokens": c.usd_per_million_tokens if math.isfinite(c.usd_per_million_tokens) else None,
            "kwh_per_million_tokens": c.kwh_per_million_tokens if math.isfinite(c.kwh_per_million_tokens) else None}
    return out


def merge_results(results: list, objective: str):
    """One SearchResult of searches at several world sizes, ranked by `objective` (one world size ranked by
    time keeps the search's own order)."""
    from sim.analysis.search import SearchResult
    if len(results) == 1 and objective == "time":
        return results[0]
    many = len(results) > 1
    cands = [c for r in results for c in r.candidates]
    rejected = {(f"world={r.candidates[0].plan.world_size} " if many and r.candidates else "") + fam: why
                for r in results for fam, why in r.rejected_families.items()}
    notes = list(dict.fromkeys(n for r in results for n in r.notes))
    first = results[0]
    return SearchResult(cands, rank(cands, objective), rejected, sum(r.evaluated for r in results),
                        sum(r.elapsed_s for r in results), first.screen_method, first.confirm_method, notes,
                        first.memory_budget_bytes)
