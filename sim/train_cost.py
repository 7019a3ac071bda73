"""Time, cost and energy to train (issue 14, items 4 and 5) from one simulated iteration.

- tokens per iteration = global_batch_size x seq_length; iterations = ceil(train_tokens / that).
- failure-free time T_s = iterations x iteration_time_s; expected wall time T_w = T_s / goodput
  (sim.goodput: Daly's model, checkpoint interval Daly's optimum unless given).
- cost: you pay for every GPU-hour of wall time: world x $/GPU-hour (sim.pricing) x T_w / 3600;
  per iteration (failure-free) world x $/GPU-hour x iteration_time_s / 3600.
- energy: facility energy of one iteration (sim.energy) x T_w / iteration_time_s (lost work and restarts
  are taken to draw the iteration's mean power).
- per million tokens: cost or energy / train_tokens x 1e6 with a budget, else per iteration / goodput /
  tokens per iteration x 1e6 (goodput included either way).
The same estimate feeds `run`, the cost/energy columns of `compare` and `sweep` (training_columns) and,
failure-free, the objectives of `search` (sim.analysis.objectives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sim.energy import IterationEnergy, PowerTable, iteration_energy
from sim.errors import SimError
from sim.goodput import ComponentCounts, FailureModel, GoodputReport, estimate_goodput
from sim.pricing import PriceTable

DAY_S = 86400.0
KWH_J = 3.6e6


@dataclass(frozen=True)
class TrainEstimate:
    world: int
    tokens_per_iteration: int | None
    train_tokens: int | None
    iterations: int | None
    iteration_time_s: float
    solve_time_s: float | None         # failure-free
    wall_time_s: float | None          # expected, with failures and checkpoints
    goodput: GoodputReport
    usd_per_gpu_hour: float
    price_source: str
    iteration_usd: float
    iteration_energy: IterationEnergy
    total_usd: float | None
    total_facility_j: float | None

    @property
    def usd_per_million_tokens(self) -> float | None:
        if self.train_tokens:
            return self.total_usd / self.train_tokens * 1e6
        if self.tokens_per_iteration:
            return self.iteration_usd / self.goodput.goodput / self.tokens_per_iteration * 1e6
        return None

    @property
    def kwh_per_million_tokens(self) -> float | None:
        if self.train_tokens:
            return self.total_facility_j / KWH_J / self.train_tokens * 1e6
        if self.tokens_per_iteration:
            return (self.iteration_energy.facility_j / self.goodput.goodput / KWH_J
                    / self.tokens_per_iteration * 1e6)
        return None

    def to_dict(self) -> dict:
        return {"world_size": self.world, "tokens_per_iteration": self.tokens_per_iteration,
                "train_tokens": self.train_tokens, "iterations": self.iterations,
                "iteration_time_s": self.iteration_time_s, "failure_free_time_s": self.solve_time_s,
                "wall_time_s": self.wall_time_s,
                "wall_time_days": self.wall_time_s / DAY_S if self.wall_time_s is not None else None,
                "goodput": self.goodput.to_dict(),
                "usd_per_gpu_hour": self.usd_per_gpu_hour, "price_source": self.price_source,
                "iteration_usd": self.iteration_usd, "total_usd": self.total_usd,
                "usd_per_million_tokens": self.usd_per_million_tokens,
                "iteration_energy": self.iteration_energy.to_dict(), "total_facility_j": self.total_facility_j,
                "total_facility_mwh": self.total_facility_j / 3.6e9 if self.total_facility_j is not None else None,
                "kwh_per_million_tokens": self.kwh_per_million_tokens}


def estimate_training(rep, counts: ComponentCounts, ckpt_bytes: float, failures: FailureModel,
                      power: PowerTable, prices: PriceTable, train_tokens: int | None = None,
                      interval_s: float | None = None, extra_gpus=None) -> TrainEstimate:
    """Time, cost and energy to train `train_tokens` (None: per iteration only) with StepReport `rep`."""
    t = float(rep.iteration_time_s)
    if not t > 0:
        raise SimError("the simulated iteration takes no time: cannot estimate time, cost or energy to train")
    world = int(rep.meta["world_size"])
    tokens_known = bool(rep.meta.get("tokens_known", True))
    tpi = int(rep.meta["global_batch_size"]) * int(rep.meta["seq_length"]) if tokens_known else None
    if train_tokens is not None:
        if tpi is None:
            raise SimError("--train-tokens: this workload does not say its tokens per iteration "
                           "(imported trace without sequence length); give a model and plan")
        if train_tokens <= 0:
            raise SimError(f"--train-tokens: must be > 0 (got {train_tokens})")
    g = estimate_goodput(failures, counts, ckpt_bytes, interval_s)
    price = prices.row(rep.meta["gpu"], extra_gpus)
    energy = iteration_energy(rep, power, counts, extra_gpus=extra_gpus)
    it_usd = world * price.usd_per_gpu_hour * t / 3600.0
    iters = solve = wall = total_usd = total_j = None
    if g.goodput <= 0:
        raise SimError(f"goodput is 0: checkpoint segments ({g.interval_s:.3g} s of work) are far longer than "
                       f"the job's MTBF ({g.job_mtbf_s:.3g} s); lower --checkpoint-interval")
    if train_tokens is not None:
        iters = math.ceil(train_tokens / tpi)
        solve = iters * t
        wall = solve / g.goodput
        total_usd = world * price.usd_per_gpu_hour * wall / 3600.0
        total_j = energy.facility_j * wall / t
    return TrainEstimate(world, tpi, train_tokens, iters, t, solve, wall, g, price.usd_per_gpu_hour,
                         f"{prices.path}: {price.gpu} ({price.source}, {price.date})", it_usd, energy,
                         total_usd, total_j)


def _dur(s: float) -> str:
    if not math.isfinite(s):
        return "inf"
    if s >= 2 * DAY_S:
        return f"{s / DAY_S:.2f} days"
    if s >= 2 * 3600:
        return f"{s / 3600:.2f} h"
    if s >= 120:
        return f"{s / 60:.1f} min"
    return f"{s:.2f} s"


def format_training(e: TrainEstimate) -> str:
    """The summary lines of `clustersim run --train-tokens` (same column layout as format_summary)."""
    g = e.goodput
    c = g.counts
    w = 28
    en = e.iteration_energy
    lines = [
        f"{'components (failure units)':<{w}s}{c.gpu} GPU, {c.nic} NIC, {c.switch} switch, {c.server} server",
        f"{'job MTBF':<{w}s}{_dur(g.job_mtbf_s)}",
        f"{'checkpoint':<{w}s}{g.checkpoint_bytes / 1e9:.1f} GB, write {_dur(g.checkpoint_write_s)}, "
        f"restart {_dur(g.restart_s)}",
        f"{'checkpoint interval':<{w}s}{_dur(g.interval_s)} (Young {_dur(g.young_interval_s)}, "
        f"Daly {_dur(g.daly_interval_s)})",
        f"{'goodput':<{w}s}{g.goodput * 100:.1f}%",
        f"{'cost per iteration':<{w}s}${e.iteration_usd:,.4f} ({e.world} GPU x ${e.usd_per_gpu_hour:g}/GPU-h)",
        f"{'energy per iteration':<{w}s}{en.facility_j / 1e3:,.1f} kJ facility (PUE {en.pue:g}); "
        f"GPU busy {en.gpu_busy_s / (en.gpu_busy_s + en.gpu_idle_s) * 100:.1f}% of GPU-time; "
        f"{en.switches_charged:.3g} of {c.switch} switches charged",
    ]
    if e.train_tokens is not None:
        lines += [
            f"{'to train':<{w}s}{e.train_tokens:,} tokens = {e.iterations:,} iterations of "
            f"{e.tokens_per_iteration:,} tokens",
            f"{'time to train':<{w}s}{_dur(e.wall_time_s)} expected ({_dur(e.solve_time_s)} without failures)",
            f"{'cost to train':<{w}s}${e.total_usd:,.0f}",
            f"{'energy to train':<{w}s}{e.total_facility_j / 3.6e9:,.2f} MWh facility",
        ]
    if e.usd_per_million_tokens is not None:
        lines.append(f"{'per million tokens':<{w}s}${e.usd_per_million_tokens:.4f}, "
                     f"{e.kwh_per_million_tokens:.4f} kWh")
    return "\n".join(lines)


def checkpoint_bytes_for(workload, failures: FailureModel, given: float | None = None) -> float:
    """Checkpoint size: `given` bytes, else the model's parameters x bytes per parameter."""
    if given is not None:
        if not given > 0:
            raise SimError(f"--checkpoint-bytes: must be > 0 (got {given})")
        return float(given)
    known = workload.meta.get("imported_from") != "simai" and workload.meta.get("model_known", True)
    if not known or getattr(workload, "model", None) is None:
        raise SimError("checkpoint size unknown: the workload has no model dimensions; give --checkpoint-bytes")
    from sim.goodput import checkpoint_bytes
    return checkpoint_bytes(workload.model, failures.storage.bytes_per_param)


# ------------------------------------------------------------------------------------------- CLI (run)
@dataclass(frozen=True)
class TrainingInputs:
    failures: FailureModel
    power: PowerTable
    prices: PriceTable
    train_tokens: int | None
    interval_s: float | None
    checkpoint_bytes: float | None


def _token_count(text: str) -> int:
    """'2e12', '15000000000000' or with a K/M/B/T suffix ('15T') -> tokens; SimError otherwise."""
    t = str(text).strip().replace(",", "").replace("_", "")
    scale = {"K": 1e3, "M": 1e6, "B": 1e9, "G": 1e9, "T": 1e12}.get(t[-1:].upper(), 1.0)
    if scale != 1.0:
        t = t[:-1]
    try:
        v = float(t) * scale
    except ValueError:
        raise SimError(f"--train-tokens: expected a token count such as 2e12 or 15T (got '{text}')") from None
    if not math.isfinite(v) or v < 1:
        raise SimError(f"--train-tokens: must be at least 1 token (got '{text}')")
    return int(round(v))


def load_training_inputs(args) -> TrainingInputs:
    """Read the tables and check the flags (before the simulation, so a bad file fails at once)."""
    from sim.energy import load_power_table
    from sim.goodput import load_failure_model
    from sim.pricing import load_price_table
    interval = getattr(args, "checkpoint_interval", None)
    if interval is not None and not (math.isfinite(interval) and interval > 0):
        raise SimError(f"--checkpoint-interval: must be > 0 seconds (got {interval})")
    ckpt = getattr(args, "checkpoint_bytes", None)
    if ckpt is not None and not (math.isfinite(ckpt) and ckpt > 0):
        raise SimError(f"--checkpoint-bytes: must be > 0 (got {ckpt})")
    tokens = getattr(args, "train_tokens", None)
    return TrainingInputs(load_failure_model(args.mtbf_file), load_power_table(args.power_file),
                          load_price_table(args.price_file), _token_count(tokens) if tokens is not None else None,
                          interval, ckpt)


def extra_gpus_of(gpu_file) -> dict | None:
    """The GPUs of a --gpu-file (their names and aliases find price and power rows), None without one."""
    if not gpu_file:
        return None
    from compute_db.gpus import load_gpu_file
    return load_gpu_file(gpu_file)


def estimate_for_run(rep, workload, topology, inputs: TrainingInputs, job: dict | None = None) -> TrainEstimate:
    """The estimate of a `clustersim run` (or a compare/sweep row) from its StepReport, workload, topology
    and job dict (its `gpu_file` GPUs are looked up in the price and power tables with their aliases)."""
    from sim.goodput import component_counts
    counts = component_counts(topology, int(rep.meta["world_size"]))
    ckpt = checkpoint_bytes_for(workload, inputs.failures, inputs.checkpoint_bytes)
    return estimate_training(rep, counts, ckpt, inputs.failures, inputs.power, inputs.prices,
                             inputs.train_tokens, inputs.interval_s, extra_gpus_of((job or {}).get("gpu_file")))


# ------------------------------------------------------------------------------------------- compare / sweep
TRAIN_COLUMNS = ("goodput", "iteration_usd", "usd_per_million_tokens", "iteration_facility_j",
                 "kwh_per_million_tokens")
TO_TRAIN_COLUMNS = ("iterations_to_train", "days_to_train", "usd_to_train", "mwh_to_train")


def training_columns(e: TrainEstimate | None, to_train: bool) -> dict:
    """CSV columns of one compare/sweep row (empty strings for a failed row); SI units or named in the key."""
    keys = TRAIN_COLUMNS + (TO_TRAIN_COLUMNS if to_train else ())
    if e is None:
        return dict.fromkeys(keys, "")
    vals = [e.goodput.goodput, e.iteration_usd, e.usd_per_million_tokens, e.iteration_energy.facility_j,
            e.kwh_per_million_tokens]
    if to_train:
        vals += [e.iterations, e.wall_time_s / DAY_S, e.total_usd, e.total_facility_j / 3.6e9]
    return {k: (f"{v:.6g}" if isinstance(v, float) else ("" if v is None else v)) for k, v in zip(keys, vals)}


def format_training_table(rows) -> str:
    """The cost and energy block under `clustersim compare`'s table: rows of (label text, TrainEstimate)."""
    to_train = any(e.train_tokens is not None for _, e in rows)
    w = min(72, max(14, *(len(lab) for lab, _ in rows))) + 1
    head = f"{'configuration':<{w}s}{'goodput':>8s}{'$/iter':>10s}{'$/Mtok':>9s}{'kJ/iter':>10s}{'kWh/Mtok':>9s}"
    if to_train:
        head += f"{'days':>9s}{'$ to train':>13s}{'MWh':>9s}"
    known = [e.usd_per_million_tokens for _, e in rows if e.usd_per_million_tokens is not None]
    best_usd = min(known) if known else None
    head += f"{'$/tok vs best':>14s}"
    lines = [head, "-" * len(head)]

    def num(v, width: int, fmt: str) -> str:
        return f"{'n/a':>{width}s}" if v is None else f"{v:{width}{fmt}}"

    for label, e in rows:
        per_mtok = e.usd_per_million_tokens
        line = (f"{label[:w - 1]:<{w}s}{e.goodput.goodput * 100:7.1f}%{e.iteration_usd:10.4f}{num(per_mtok, 9, '.3f')}"
                f"{e.iteration_energy.facility_j / 1e3:10.1f}{num(e.kwh_per_million_tokens, 9, '.3f')}")
        if to_train:
            line += (num(e.wall_time_s / DAY_S if e.wall_time_s is not None else None, 9, ".2f")
                     + num(e.total_usd, 13, ",.0f")
                     + num(e.total_facility_j / 3.6e9 if e.total_facility_j is not None else None, 9, ".2f"))
        ratio = per_mtok / best_usd if per_mtok is not None and best_usd else None
        lines.append(line + (f"{ratio:13.3f}x" if ratio is not None else f"{'n/a':>14s}"))
    lines.append("cost/energy: $ = GPUs x $/GPU-hour x time; energy = facility (PUE) from the timeline's busy/idle "
                 "GPU time + CPU/NIC/switch power; per Mtok and to train include the expected goodput")
    return "\n".join(lines)
