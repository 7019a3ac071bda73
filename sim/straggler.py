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
from typing import TYPE_CHECKING

from sim.errors import SimError

if TYPE_CHECKING:
    import numpy as np

# numpy is imported inside the functions: the CLI's argument helpers below are imported to build --help


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
    from sim.inputs import parse_number
    return parse_number(rank_text, where, "rank", int, 0), _factor(fac_text.strip(), where)


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
    from sim.inputs import parse_number
    return parse_number(kv["sigma"], where, "sigma", float, 0), parse_number(kv.get("seed", "0"), where, "seed", int)


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
    import numpy as np
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
    import numpy as np
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
    import numpy as np
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


# ---------------------------------------------------------------- flags of run / compare / sweep
def add_straggler_arguments(p, variants: bool = False) -> None:
    """--straggler, --straggler-dist (and compare's --straggler-variant)."""
    p.add_argument("--straggler", action="append", metavar="RANK=FACTOR",
                   help="rank whose kernels take FACTOR (>= 1) times as long (repeatable); the iteration is "
                        "also simulated healthy and the slowdown and exposed straggler time are reported")
    p.add_argument("--straggler-dist", metavar="lognormal:sigma=S,seed=N",
                   help="every rank's kernel-time factor drawn as exp(S |z|), z ~ N(0,1), seeded")
    if variants:
        p.add_argument("--straggler-variant", dest="straggler_variants", action="append", metavar="NAME=SPEC",
                       help="straggler set to compare (repeatable): NAME=RANK=FACTOR[,RANK=FACTOR...] or "
                            "NAME=lognormal:sigma=S,seed=N (both: join with ';'); 'healthy=' for none; "
                            "added to --straggler/--straggler-dist")


def straggler_options(args) -> dict | None:
    """The job's "stragglers" entry ({"fixed": [...], "dist": ...}) from parsed flags, checked; None
    without straggler flags."""
    fixed = list(getattr(args, "straggler", None) or [])
    dist = getattr(args, "straggler_dist", None)
    if not fixed and not dist:
        return None
    make_spec(fixed, dist)
    return {"fixed": fixed, "dist": dist}


def parse_variant(text: str) -> tuple[str, dict]:
    """'NAME=SPEC' of --straggler-variant -> (name, {"fixed": [...], "dist": ...}); SPEC: ';'-separated
    parts, each 'lognormal:...' (the distribution) or comma-separated RANK=FACTOR items; empty: none."""
    name, eq, spec = text.partition("=")
    where = f"--straggler-variant '{text}'"
    if not eq or not name.strip():
        raise SimError(f"{where}: expected NAME=SPEC, e.g. slow3=3=1.2 or healthy=")
    fixed, dist = [], None
    for part in filter(None, (x.strip() for x in spec.split(";"))):
        if ":" in part.split("=", 1)[0]:
            if dist is not None:
                raise SimError(f"{where}: two distributions")
            dist = part
        else:
            fixed += [x.strip() for x in part.split(",") if x.strip()]
    opts = {"fixed": fixed, "dist": dist}
    try:
        make_spec(fixed, dist)
    except SimError as exc:
        raise SimError(f"{where}: {exc}") from None
    return name.strip(), opts


def straggler_variants(args) -> list[tuple[str, dict]]:
    """[(name, straggler options)] of compare's --straggler-variant (names unique)."""
    out = [parse_variant(t) for t in getattr(args, "straggler_variants", None) or []]
    from sim.inputs import unique_names
    return unique_names(out, "--straggler-variant")


def with_straggler_variant(job: dict, name: str, opts: dict) -> dict:
    """A copy of `job` with a compare variant's stragglers added to its own (one distribution at most)."""
    base = job.get("stragglers") or {"fixed": [], "dist": None}
    if base.get("dist") and opts.get("dist"):
        raise SimError(f"--straggler-variant {name}: --straggler-dist already gives a distribution")
    merged = {"fixed": list(base.get("fixed") or []) + list(opts["fixed"]), "dist": base.get("dist") or opts["dist"]}
    try:
        make_spec(merged["fixed"], merged["dist"])
    except SimError as exc:
        raise SimError(f"--straggler-variant {name}: {exc}") from None
    if not merged["fixed"] and not merged["dist"]:
        return dict(job, stragglers=None)
    return dict(job, stragglers=merged)


def straggler_columns(sec: dict | None) -> dict:
    """Columns of compare / sweep rows for a run with stragglers (empty without)."""
    if not sec:
        return {}
    return {"healthy_iteration_time_s": f"{sec['healthy_iteration_time_s']:.6g}",
            "straggler_slowdown": f"{sec['slowdown']:.6g}"}
