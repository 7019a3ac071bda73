"""Stragglers: per-rank compute slowdown, mapped onto the engine's one representative per stage.

Model:
- Every rank r has a kernel-time factor f_r >= 1 (1 = nominal speed of the kernel DB). Given as a
  fixed list (`--straggler RANK=FACTOR`, repeatable) and/or drawn from a distribution with a seed
  (`--straggler-dist lognormal:sigma=S,seed=N`): f_r = exp(S * |z_r|), z_r ~ N(0, 1) from
  numpy.random.default_rng(N) in rank order (a half-lognormal: the kernel DB times are a healthy
  GPU's, so no rank runs faster than nominal). A fixed entry overrides the drawn factor of its rank.
- Only compute kernels are slowed; communication runs at the network's speed.
- The engine simulates one representative rank per pipeline stage. Each stage's representative takes
  the largest factor among the stage's ranks (all TP/CP/EP members and all DP replicas): its TP/CP/EP
  collectives start when it (the slowest member) arrives, its pipeline neighbours wait on its sends,
  and the healthy replicas reach the gradient reduction earlier and wait there, so the representative's
  timeline is the critical path. Exact when all stragglers sit in one model replica (one DP index); an
  upper bound when stragglers of different stages sit in different replicas (the representative
  combines them in one replica).
- Exposed straggler time per report group (s, the longest a healthy member waits for the straggler):
  TP/CP/EP: the slow rank's extra kernel time charged to its next collective of that kind (its healthy
  group peers wait there), summed over the iteration, largest stage;
  PP: the increase of a stage's wait for pipeline data over the healthy run, largest stage;
  DP: T_straggler - T_healthy when dp > 1 (a healthy replica keeps its own timeline and waits that much
  longer at the final gradient synchronisation), else 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from sim.errors import SimError


@dataclass(frozen=True)
class StragglerSpec:
    """fixed: ((rank, factor), ...); sigma/seed: the lognormal draw (sigma None: no draw)."""
    fixed: tuple = ()
    sigma: float | None = None
    seed: int = 0

    @property
    def active(self) -> bool:
        return bool(self.fixed) or self.sigma is not None

    def describe(self) -> str:
        parts = [f"rank {r} x{f:g}" for r, f in self.fixed]
        if self.sigma is not None:
            parts.insert(0, f"lognormal sigma={self.sigma:g} seed={self.seed} (f = exp(sigma |z|))")
        return ", ".join(parts) or "none"


def _factor(text: str, where: str) -> float:
    try:
        f = float(text)
    except ValueError:
        raise SimError(f"{where}: factor '{text}' is not a number") from None
    if not math.isfinite(f) or f < 1.0:
        raise SimError(f"{where}: factor must be a finite time multiplier >= 1, got {text}")
    return f


def parse_straggler(text: str) -> tuple[int, float]:
    """'RANK=FACTOR' -> (rank, factor); e.g. '3=1.2' (rank 3's kernels take 1.2x as long)."""
    where = f"--straggler '{text}'"
    rank_text, sep, fac_text = text.partition("=")
    if not sep:
        raise SimError(f"{where}: expected RANK=FACTOR, e.g. 3=1.2")
    try:
        rank = int(rank_text.strip())
    except ValueError:
        raise SimError(f"{where}: rank '{rank_text.strip()}' is not an integer") from None
    if rank < 0:
        raise SimError(f"{where}: rank must be >= 0")
    return rank, _factor(fac_text.strip(), where)


def parse_straggler_dist(text: str) -> tuple[float, int]:
    """'lognormal:sigma=S,seed=N' -> (sigma, seed)."""
    where = f"--straggler-dist '{text}'"
    name, _, rest = text.partition(":")
    if name.strip() != "lognormal":
        raise SimError(f"{where}: unknown distribution '{name.strip()}' (known: lognormal:sigma=S,seed=N)")
    kv = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        k, sep, v = item.partition("=")
        if not sep or k.strip() not in ("sigma", "seed"):
            raise SimError(f"{where}: expected sigma=S,seed=N, got '{item}'")
        kv[k.strip()] = v.strip()
    if "sigma" not in kv:
        raise SimError(f"{where}: sigma=S is required")
    try:
        sigma = float(kv["sigma"])
    except ValueError:
        raise SimError(f"{where}: sigma '{kv['sigma']}' is not a number") from None
    if not math.isfinite(sigma) or sigma < 0:
        raise SimError(f"{where}: sigma must be finite and >= 0")
    try:
        seed = int(kv.get("seed", "0"))
    except ValueError:
        raise SimError(f"{where}: seed '{kv['seed']}' is not an integer") from None
    return sigma, seed


def make_spec(fixed: list[str] | None = None, dist: str | None = None) -> StragglerSpec:
    """StragglerSpec from the CLI strings (--straggler ... repeatable, --straggler-dist)."""
    pairs = [parse_straggler(t) for t in (fixed or [])]
    ranks = [r for r, _ in pairs]
    if len(set(ranks)) != len(ranks):
        dup = next(r for r in ranks if ranks.count(r) > 1)
        raise SimError(f"--straggler: rank {dup} given twice")
    sigma, seed = parse_straggler_dist(dist) if dist else (None, 0)
    return StragglerSpec(fixed=tuple(pairs), sigma=sigma, seed=seed)


def rank_factors(spec: StragglerSpec, world: int) -> np.ndarray:
    """Kernel-time factor of every rank (length world)."""
    if spec.sigma is not None:
        z = np.random.default_rng(spec.seed).standard_normal(world)
        f = np.exp(spec.sigma * np.abs(z))
    else:
        f = np.ones(world)
    for rank, fac in spec.fixed:
        if rank >= world:
            raise SimError(f"--straggler {rank}={fac:g}: rank out of range (the job has ranks 0..{world - 1})")
        f[rank] = fac
    return f


def stage_factors(factors: np.ndarray, placement) -> list[float]:
    """Per pipeline stage the largest factor among its ranks (the stage representative's factor)."""
    return [float(factors[placement.stage_ranks(s)].max()) for s in range(int(placement.pp))]


def exposed_straggler_s(healthy, slow, dp: int) -> dict:
    """Exposed straggler time per report group (s) from the healthy and the straggler EngineResult."""
    out = dict.fromkeys(("TP", "CP", "EP", "DP", "PP"), 0.0)
    for st in slow.stages:
        for k, v in st.straggler_wait_s.items():
            out[k] = max(out[k], v)
    out["PP"] = max([0.0] + [s.pp_wait_s - h.pp_wait_s for s, h in zip(slow.stages, healthy.stages)])
    if dp > 1:
        out["DP"] = max(0.0, slow.iteration_time_s - healthy.iteration_time_s)
    return out


def straggler_section(spec: StragglerSpec, factors: np.ndarray, per_stage: list[float], healthy, slow,
                      placement) -> dict:
    """The `stragglers` section of summary.json (plain data)."""
    slow_ranks = np.flatnonzero(factors > 1.0)
    top = slow_ranks[np.argsort(-factors[slow_ranks], kind="stable")][:8]
    return {
        "model": spec.describe(),
        "stage_factors": list(per_stage),
        "slow_ranks": int(slow_ranks.size),
        "slowest_ranks": [{"rank": int(r), "factor": float(factors[r])} for r in top],
        "healthy_iteration_time_s": healthy.iteration_time_s,
        "iteration_time_s": slow.iteration_time_s,
        "slowdown": slow.iteration_time_s / healthy.iteration_time_s if healthy.iteration_time_s > 0 else math.nan,
        "exposed_straggler_s": exposed_straggler_s(healthy, slow, _dp_size(placement)),
        "approximation": ("exact: the slow ranks sit in one model replica" if _one_replica(factors, placement)
                          else "upper bound: each stage takes its slowest rank across model replicas"),
    }


def _dp_size(placement) -> int:
    return int(placement.rank_groups("dp").shape[1])


def _one_replica(factors: np.ndarray, placement) -> bool:
    """True when every rank slower than nominal has the same data-parallel index."""
    rows = placement.rank_groups("dp")            # a row: one rank of each replica, in dp order
    replica = np.empty(int(placement.world_size), dtype=np.int64)
    for j in range(rows.shape[1]):
        replica[rows[:, j]] = j
    return len(set(replica[factors > 1.0].tolist())) <= 1


def format_straggler(sec: dict) -> str:
    """Lines appended to summary.txt / the console summary."""
    e = sec["exposed_straggler_s"]
    lines = [f"stragglers                  {sec['model']}",
             f"  healthy iteration         {sec['healthy_iteration_time_s']:.6f} s",
             f"  with stragglers           {sec['iteration_time_s']:.6f} s   slowdown {sec['slowdown']:.4f}x",
             "  stage factors             " + " ".join(f"{f:.4g}" for f in sec["stage_factors"]),
             "  exposed straggler time    " + "  ".join(f"{k} {e[k]:.6f} s" for k in ("TP", "CP", "EP", "DP", "PP")),
             f"  ({sec['approximation']})"]
    return "\n".join(lines)
