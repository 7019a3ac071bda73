"""Serving capacity: the highest arrival rate (requests/s) at which every SLO of a deployment holds.

Definition (Vidur-Search's, reference/serving.md §6, generalised to any SLO set): capacity is the highest
Poisson arrival rate whose probe meets every SLO, found by bisection on the rate axis under the assumption
that the SLO metrics do not decrease as the rate grows. An SLO limits one statistic (P50, P90, P99 or
mean over the requests; TBT over all token gaps) of TTFT, TBT, TPOT, E2E latency or scheduling delay;
Vidur's default is P99 scheduling delay <= 5 s. Spelling: `p99:scheduling_delay<=5`, `p90:ttft<=2`,
`p99:tbt<=200ms` (seconds unless `ms`).

Search (`find_capacity`), each probe being `probe(rate) -> {"p99:ttft": seconds, ...}`:
  1. probe the first guess g; while the SLOs hold, double (ceiling: g x 2^8; a deployment still meeting
     them there is reported `bounded=False`: the request stream is too short to load it);
  2. if g fails, halve up to 3 times, then probe the floor g x 2^-10; failing there too -> capacity 0;
  3. geometric bisection while upper / lower > 2, then arithmetic bisection until
     upper - lower <= rel_tol x lower (default 2.5 %, Vidur's stopping rule);
  capacity = lower (the highest rate that passed); the binding SLO is the most violated one
  (largest value / limit) at the upper bracket, the lowest rate that failed.
Probed rates are rounded to 6 significant digits so that a result's `--qps` reproduces the probe exactly.
The serving search calls a full simulation with the same seed at every rate (common random numbers:
Poisson gaps scale as 1/rate, request lengths do not change), which keeps the metrics close to monotone;
a non-monotone engine can make bisection settle on any crossing, within the tolerance.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from sim.errors import SimError

# SLO metric name -> key of sim.serve.metrics.summarize()["metrics"]
METRICS = {"ttft": "ttft_s", "tbt": "tbt_s", "tpot": "tpot_s", "e2e": "e2e_s", "scheduling_delay": "scheduling_delay_s"}
STATS = ("p50", "p90", "p99", "mean")
SLO_SYNTAX = "STAT:METRIC<=LIMIT[s|ms], STAT in p50|p90|p99|mean, METRIC in " + "|".join(METRICS)
CEILING_DOUBLINGS = 8
HALVINGS = 3
FLOOR_RATIO = 2.0 ** -10
DEFAULT_REL_TOL = 0.025

_SLO_RE = re.compile(r"^\s*([a-z0-9]+)\s*:\s*([a-z0-9_]+)\s*<=\s*([0-9.eE+-]+)\s*(ms|s)?\s*$")


@dataclass(frozen=True)
class SLOLimit:
    """stat(metric) <= limit_s, e.g. P99 scheduling delay <= 5 s."""
    stat: str
    metric: str
    limit_s: float

    @property
    def key(self) -> str:
        return f"{self.stat}:{self.metric}"

    @property
    def text(self) -> str:
        return f"{self.key}<={self.limit_s:g}"


DEFAULT_SLOS = (SLOLimit("p99", "scheduling_delay", 5.0),)


def parse_slo(text: str, flag: str = "--slo") -> SLOLimit:
    """'p99:scheduling_delay<=5' -> SLOLimit; SimError (one line) on anything else."""
    m = _SLO_RE.match(str(text).lower())
    if not m:
        raise SimError(f"{flag} '{text}': expected {SLO_SYNTAX} (e.g. p99:scheduling_delay<=5)")
    stat, metric, num, unit = m.groups()
    if stat not in STATS:
        raise SimError(f"{flag} '{text}': statistic '{stat}' unknown (expected one of {', '.join(STATS)})")
    if metric not in METRICS:
        raise SimError(f"{flag} '{text}': metric '{metric}' unknown (expected one of {', '.join(METRICS)})")
    try:
        v = float(num)
    except ValueError:
        raise SimError(f"{flag} '{text}': limit '{num}' is not a number") from None
    if not (math.isfinite(v) and v > 0):
        raise SimError(f"{flag} '{text}': limit must be a finite number > 0")
    return SLOLimit(stat, metric, v * (1e-3 if unit == "ms" else 1.0))


def parse_slos(texts) -> tuple[SLOLimit, ...]:
    """Every --slo given (None or empty: DEFAULT_SLOS); a metric/statistic given twice is an error."""
    if not texts:
        return DEFAULT_SLOS
    slos = tuple(parse_slo(t) for t in texts)
    seen = set()
    for s in slos:
        if s.key in seen:
            raise SimError(f"--slo: {s.key} given twice")
        seen.add(s.key)
    return slos


def flat_metrics(summary: dict) -> dict:
    """SLO metrics of a serving summary as {"p99:ttft": seconds, ...} plus load figures; None: no data."""
    out = {}
    for name, key in METRICS.items():
        m = summary["metrics"][key]
        for stat in STATS:
            out[f"{stat}:{name}"] = m.get(stat)
    t, c = summary["throughput"], summary["cluster"]
    out.update({"requests": summary["requests"], "duration_s": summary["duration_s"],
                "requests_per_s": t["requests_per_s"]["value"], "output_tokens_per_s": t["output_tokens_per_s"]["value"],
                "busy_pct": c["busy_pct"], "kv_use_mean_pct": c["kv_use_mean_pct"], "preemptions": c["preemptions"],
                "batches": c["batches"]})
    return out


def violations(slos, metrics: dict) -> list[tuple[SLOLimit, float]]:
    """SLOs whose metric exceeds the limit, most violated (value / limit) first; no data counts as met."""
    bad = []
    for s in slos:
        v = metrics.get(s.key)
        if v is not None and isinstance(v, (int, float)) and not math.isnan(v) and v > s.limit_s:
            bad.append((s, float(v)))
    return sorted(bad, key=lambda sv: -sv[1] / sv[0].limit_s)


@dataclass
class Probe:
    qps: float
    metrics: dict
    violated: list[tuple[str, float]]        # (SLO text, value), most violated first

    @property
    def ok(self) -> bool:
        return not self.violated


@dataclass
class CapacityResult:
    capacity_qps: float                      # 0.0: no rate tried meets the SLOs
    bounded: bool                            # an upper bracket (a failing rate) was found
    upper_qps: float | None                  # lowest failing rate (None when unbounded)
    binding_slo: str | None                  # most violated SLO at upper_qps
    binding_value: float | None
    metrics: dict                            # flat metrics of the probe at capacity ({} when capacity 0)
    probes: list[Probe] = field(default_factory=list)
    first_guess_qps: float = math.nan
    rel_tol: float = DEFAULT_REL_TOL
    note: str = ""


def _round_rate(r: float) -> float:
    return float(f"{r:.6g}")


def find_capacity(probe: Callable[[float], dict], slos, first_guess_qps: float,
                  rel_tol: float = DEFAULT_REL_TOL) -> CapacityResult:
    """Bracket and bisect the highest rate at which `probe(rate)` meets every SLO (module docstring)."""
    if not (math.isfinite(first_guess_qps) and first_guess_qps > 0):
        raise SimError(f"capacity search: first guess must be a rate > 0 (got {first_guess_qps!r})")
    if not (0 < rel_tol < 1):
        raise SimError(f"--tolerance: must be in (0, 1) (got {rel_tol!r})")
    slos = tuple(slos)
    probes: list[Probe] = []
    seen: dict[float, Probe] = {}

    def run(rate: float) -> Probe:
        rate = _round_rate(rate)
        if rate not in seen:
            m = probe(rate)
            p = Probe(rate, m, [(s.text, v) for s, v in violations(slos, m)])
            probes.append(p)
            seen[rate] = p
        return seen[rate]

    g = _round_rate(first_guess_qps)
    lo: Probe | None = None
    hi: Probe | None = None
    p = run(g)
    if p.ok:
        lo = p
        for k in range(1, CEILING_DOUBLINGS + 1):
            p = run(g * 2 ** k)
            if not p.ok:
                hi = p
                break
            lo = p
    else:
        hi = p
        for k in range(1, HALVINGS + 1):
            p = run(g / 2 ** k)
            if p.ok:
                lo = p
                break
            hi = p
        if lo is None:
            p = run(g * FLOOR_RATIO)
            if not p.ok:
                s, v = p.violated[0]
                return CapacityResult(0.0, True, p.qps, s, v, {}, probes, g, rel_tol,
                                      f"no rate down to {p.qps:.4g} req/s meets the SLOs")
            lo = p
    if hi is None:
        return CapacityResult(lo.qps, False, None, None, None, lo.metrics, probes, g, rel_tol,
                              f"SLOs still met at the ceiling {lo.qps:.4g} req/s (2^{CEILING_DOUBLINGS} x the "
                              "first guess): the request stream is too short to load this deployment")
    while hi.qps / lo.qps > 2.0:
        mid = run(math.sqrt(lo.qps * hi.qps))
        if mid.qps in (lo.qps, hi.qps):
            break
        lo, hi = (mid, hi) if mid.ok else (lo, mid)
    while hi.qps - lo.qps > rel_tol * lo.qps:
        mid = run(0.5 * (lo.qps + hi.qps))
        if mid.qps in (lo.qps, hi.qps):     # 6-digit rounding cannot split the interval further
            break
        lo, hi = (mid, hi) if mid.ok else (lo, mid)
    s, v = hi.violated[0]
    return CapacityResult(lo.qps, True, hi.qps, s, v, lo.metrics, probes, g, rel_tol)
