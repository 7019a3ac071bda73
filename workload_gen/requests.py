"""Inference requests for the serving simulator: arrival processes, length distributions, trace replay.

Output: a `RequestSet` (open loop: every request's arrival time is fixed in advance) or a `ClosedLoop`
(N requests in flight; the serving engine issues the next request when one completes). Each request has
num_prefill_tokens >= 1 (prompt) and num_decode_tokens >= 1 (output tokens, including the first one,
which the prefill produces). Times in seconds.

Arrivals (`RequestConfig.arrival`):
  poisson  exact exponential gaps of mean 1/qps (Vidur clips each gap at 3/qps, which raises its
           effective rate by ~5%; we do not), first arrival one gap after t = 0;
  gamma    gaps ~ Gamma(shape 1/cv^2, scale 1/(qps * shape)) (mean 1/qps, coefficient of variation cv);
  static   all requests at t = 0;
  closed   closed loop with `concurrency` requests in flight (needs num_requests);
  trace    replay of a CSV's arrived_at column: arrival = (arrived_at - start_s) * time_scale for rows with
           start_s <= arrived_at < end_s.
Lengths (`RequestConfig.lengths`; default: the trace's own lengths for arrival "trace", else fixed):
  fixed    prefill_tokens / decode_tokens (Vidur's defaults 2048 / 512);
  uniform  total length uniform on the integers [min_tokens, max_tokens];
  zipf     total length min_tokens + k - 1 with P(k) ~ k^-zipf_theta, k = 1 .. max - min + 1
           (short requests most likely; theta 0.6 as Vidur);
           both split by pd_ratio = prefill/decode: decode = max(1, round(total / (1 + pd_ratio))),
           prefill = max(1, total - decode);
  trace    rows of a trace CSV (`trace`), lengths only, drawn as successive seeded permutations of its rows
           (every row once before any repeats);
  chat | summarization | code: the packaged example traces (workload_gen.traces) used the same way.
  Trace lengths may be scaled (prefill_scale, decode_scale; rounded, at least 1).
Count: num_requests, or duration_s (synthetic open-loop arrivals up to duration_s), or both (the first
limit reached). Over-long requests (prefill + decode > max_model_len) are trimmed proportionally:
prefill' = clamp(floor(prefill * L / (prefill + decode)), 1, L - 1), decode' = L - prefill'; every trimmed
request is listed in the result's `trimmed` (and summarised by `report_lines`), never silently.
Randomness: one numpy Generator per concern (arrivals, lengths) spawned from `seed`; no global RNG, so the
arrivals of a seed do not change when the length distribution does.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field, replace

import numpy as np

from workload_gen.errors import WorkloadError
from workload_gen.limits import ALLOW_HUGE_ENV, MAX_TRACE_REQUESTS, allow_huge
from workload_gen.traces import EXAMPLES, TraceRows, read_trace

ARRIVALS = ("poisson", "gamma", "static", "closed", "trace")
LENGTHS = ("fixed", "uniform", "zipf", "trace") + EXAMPLES


@dataclass
class Trimmed:
    """One request shortened to the max model length. `where`: trace file:line or `request <index>`."""
    index: int
    where: str
    prefill: int
    decode: int
    new_prefill: int
    new_decode: int


@dataclass
class RequestSet:
    """Open-loop requests sorted by arrival (request id = position)."""
    arrived_at_s: np.ndarray          # float64, non-decreasing
    num_prefill_tokens: np.ndarray    # int64 >= 1
    num_decode_tokens: np.ndarray     # int64 >= 1
    source: str = ""
    trimmed: list[Trimmed] = field(default_factory=list)
    max_model_len: int | None = None

    def __len__(self) -> int:
        return len(self.arrived_at_s)

    def report_lines(self) -> list[str]:
        return _report(self.trimmed, self.max_model_len)


@dataclass
class ClosedLoop:
    """`concurrency` requests in flight: requests 0..concurrency-1 arrive at t = 0 and each completion
    issues the next request (if any is left) at that instant. Request i has the i-th lengths."""
    concurrency: int
    num_prefill_tokens: np.ndarray
    num_decode_tokens: np.ndarray
    source: str = ""
    trimmed: list[Trimmed] = field(default_factory=list)
    max_model_len: int | None = None

    def __len__(self) -> int:
        return len(self.num_prefill_tokens)

    def report_lines(self) -> list[str]:
        return _report(self.trimmed, self.max_model_len)


def _report(trimmed: list[Trimmed], max_len: int | None) -> list[str]:
    if not trimmed:
        return []
    shown = ", ".join(f"{t.where} ({t.prefill}+{t.decode} -> {t.new_prefill}+{t.new_decode})" for t in trimmed[:5])
    more = f" and {len(trimmed) - 5} more" if len(trimmed) > 5 else ""
    return [f"trimmed {len(trimmed)} request(s) longer than the max model length {max_len} "
            f"(prefill and decode shortened proportionally): {shown}{more}"]


@dataclass
class RequestConfig:
    """Everything that defines a request stream; field names are the names in error messages."""
    num_requests: int | None = None
    duration_s: float | None = None
    arrival: str = "poisson"
    qps: float = 1.0
    cv: float = 1.0
    concurrency: int = 1
    lengths: str | None = None        # None: "trace" for arrival "trace" (the rows' own lengths), else "fixed"
    prefill_tokens: int = 2048
    decode_tokens: int = 512
    min_tokens: int = 1024
    max_tokens: int = 4096
    pd_ratio: float = 20.0
    zipf_theta: float = 0.6
    trace: str | None = None          # CSV path (or a packaged example name) for arrival/lengths "trace"
    time_scale: float = 1.0
    prefill_scale: float = 1.0
    decode_scale: float = 1.0
    start_s: float = 0.0
    end_s: float | None = None
    max_model_len: int | None = None
    seed: int = 0


# ---------------------------------------------------------------------------------------------- arrivals

def _positive(name: str, v, integer: bool = False) -> None:
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool) and math.isfinite(v) and v > 0
    if integer:
        ok = ok and float(v) == int(v)
    if not ok:
        raise WorkloadError(f"{name} must be a {'positive integer' if integer else 'number > 0'} (got {v!r})")


def poisson_arrivals(rng: np.random.Generator, qps: float, n: int | None = None,
                     duration_s: float | None = None) -> np.ndarray:
    """Poisson process at `qps`: exact exponential gaps (no clipping)."""
    _positive("qps", qps)
    return _renewal(lambda k: rng.exponential(1.0 / qps, k), qps, n, duration_s)


def gamma_arrivals(rng: np.random.Generator, qps: float, cv: float, n: int | None = None,
                   duration_s: float | None = None) -> np.ndarray:
    """Renewal process with Gamma gaps: shape 1/cv^2, scale 1/(qps * shape)."""
    _positive("qps", qps)
    _positive("cv", cv)
    shape = 1.0 / (cv * cv)
    return _renewal(lambda k: rng.gamma(shape, 1.0 / (qps * shape), k), qps, n, duration_s)


def _renewal(draw, qps: float, n: int | None, duration_s: float | None) -> np.ndarray:
    if n is not None and duration_s is None:
        return np.cumsum(draw(n))
    # draw in chunks until the horizon (or the count) is reached
    out: list[np.ndarray] = []
    t0, total = 0.0, 0
    chunk = max(64, int(qps * duration_s * 1.1) + 16)
    while True:
        t = t0 + np.cumsum(draw(chunk))
        out.append(t)
        total += chunk
        t0 = float(t[-1])
        if t0 > duration_s or (n is not None and total >= n):
            break
    t = np.concatenate(out)
    t = t[t <= duration_s]
    return t[:n] if n is not None else t


# ----------------------------------------------------------------------------------------------- lengths

def fixed_lengths(n: int, prefill_tokens: int = 2048, decode_tokens: int = 512) -> tuple[np.ndarray, np.ndarray]:
    _positive("prefill_tokens", prefill_tokens, integer=True)
    _positive("decode_tokens", decode_tokens, integer=True)
    return np.full(n, int(prefill_tokens), dtype=np.int64), np.full(n, int(decode_tokens), dtype=np.int64)


def _check_range(min_tokens: int, max_tokens: int, pd_ratio: float) -> None:
    _positive("min_tokens", min_tokens, integer=True)
    _positive("max_tokens", max_tokens, integer=True)
    _positive("pd_ratio", pd_ratio)
    if min_tokens < 2:
        raise WorkloadError(f"min_tokens must be >= 2 (a prefill and a decode token; got {min_tokens})")
    if max_tokens < min_tokens:
        raise WorkloadError(f"max_tokens ({max_tokens}) must be >= min_tokens ({min_tokens})")


def split_total(total: np.ndarray, pd_ratio: float) -> tuple[np.ndarray, np.ndarray]:
    """Split total lengths by prefill:decode ratio (both parts >= 1 when total >= 2)."""
    total = np.asarray(total, dtype=np.int64)
    decode = np.clip(np.rint(total / (1.0 + pd_ratio)), 1, total - 1).astype(np.int64)
    return total - decode, decode


def uniform_lengths(rng: np.random.Generator, n: int, min_tokens: int, max_tokens: int,
                    pd_ratio: float) -> tuple[np.ndarray, np.ndarray]:
    _check_range(min_tokens, max_tokens, pd_ratio)
    return split_total(rng.integers(int(min_tokens), int(max_tokens) + 1, n), pd_ratio)


def zipf_lengths(rng: np.random.Generator, n: int, min_tokens: int, max_tokens: int, pd_ratio: float,
                 theta: float = 0.6) -> tuple[np.ndarray, np.ndarray]:
    _check_range(min_tokens, max_tokens, pd_ratio)
    _positive("zipf_theta", theta)
    k = np.arange(1, int(max_tokens) - int(min_tokens) + 2, dtype=np.float64)
    w = k ** -float(theta)
    total = int(min_tokens) + rng.choice(len(k), size=n, p=w / w.sum())
    return split_total(total, pd_ratio)


def sample_trace_lengths(rng: np.random.Generator, rows: TraceRows, n: int, prefill_scale: float = 1.0,
                         decode_scale: float = 1.0) -> tuple[np.ndarray, np.ndarray, list[int]]:
    """n (prefill, decode) pairs from a trace's rows (successive seeded permutations); also the row indices."""
    reps = -(-n // len(rows))
    idx = np.concatenate([rng.permutation(len(rows)) for _ in range(reps)])[:n]
    p, d = scale_lengths(rows.num_prefill_tokens[idx], rows.num_decode_tokens[idx], prefill_scale, decode_scale)
    return p, d, idx.tolist()


def scale_lengths(prefill: np.ndarray, decode: np.ndarray, prefill_scale: float,
                  decode_scale: float) -> tuple[np.ndarray, np.ndarray]:
    _positive("prefill_scale", prefill_scale)
    _positive("decode_scale", decode_scale)
    if prefill_scale != 1.0:
        prefill = np.maximum(1, np.rint(prefill * prefill_scale)).astype(np.int64)
    if decode_scale != 1.0:
        decode = np.maximum(1, np.rint(decode * decode_scale)).astype(np.int64)
    return prefill, decode


def trim_to_max_len(prefill: np.ndarray, decode: np.ndarray, max_model_len: int,
                    where=lambda i: f"request {i}") -> tuple[np.ndarray, np.ndarray, list[Trimmed]]:
    """Shorten requests with prefill + decode > max_model_len proportionally (see module doc)."""
    _positive("max_model_len", max_model_len, integer=True)
    L = int(max_model_len)
    if L < 2:
        raise WorkloadError(f"max_model_len must be >= 2 (one prefill and one decode token; got {L})")
    over = np.nonzero(prefill + decode > L)[0]
    if len(over) == 0:
        return prefill, decode, []
    prefill, decode = prefill.copy(), decode.copy()
    trimmed = []
    for i in over.tolist():
        p, d = int(prefill[i]), int(decode[i])
        np_ = min(L - 1, max(1, (p * L) // (p + d)))
        trimmed.append(Trimmed(i, where(i), p, d, np_, L - np_))
        prefill[i], decode[i] = np_, L - np_
    return prefill, decode, trimmed


# ---------------------------------------------------------------------------------------------- assembly

def make_requests(cfg: RequestConfig) -> RequestSet | ClosedLoop:
    """Build the request stream described by `cfg` (one-line WorkloadError naming the bad field)."""
    if cfg.arrival not in ARRIVALS:
        raise WorkloadError(f"arrival must be one of {', '.join(ARRIVALS)} (got {cfg.arrival!r})")
    if cfg.lengths is None:
        cfg = replace(cfg, lengths="trace" if cfg.arrival == "trace" else "fixed")
    if cfg.lengths not in LENGTHS:
        raise WorkloadError(f"lengths must be one of {', '.join(LENGTHS)} (got {cfg.lengths!r})")
    if cfg.num_requests is not None:
        _positive("num_requests", cfg.num_requests, integer=True)
    if cfg.duration_s is not None:
        _positive("duration_s", cfg.duration_s)
    seq_arr, seq_len = np.random.SeedSequence(int(cfg.seed)).spawn(2)
    rng_arr, rng_len = np.random.default_rng(seq_arr), np.random.default_rng(seq_len)
    n = int(cfg.num_requests) if cfg.num_requests is not None else None
    where = lambda i: f"request {i}"   # noqa: E731
    source = ""
    rows: TraceRows | None = None

    if cfg.arrival == "trace":
        if not cfg.trace:
            raise WorkloadError("trace must name a CSV file (arrived_at,num_prefill_tokens,num_decode_tokens) "
                                "for arrival 'trace'")
        _positive("time_scale", cfg.time_scale)
        if not math.isfinite(cfg.start_s) or cfg.start_s < 0:
            raise WorkloadError(f"start_s must be >= 0 (got {cfg.start_s})")
        if cfg.end_s is not None and not cfg.end_s > cfg.start_s:
            raise WorkloadError(f"end_s ({cfg.end_s}) must be greater than start_s ({cfg.start_s})")
        rows = read_trace(cfg.trace, need_arrivals=True)
        keep = rows.arrived_at_s >= cfg.start_s
        if cfg.end_s is not None:
            keep &= rows.arrived_at_s < cfg.end_s
        sel = np.nonzero(keep)[0]
        if n is not None:
            sel = sel[:n]
        if len(sel) == 0:
            raise WorkloadError(f"{rows.path}: no request arrives in [start_s {cfg.start_s}, end_s {cfg.end_s})")
        arrivals = (rows.arrived_at_s[sel] - cfg.start_s) * cfg.time_scale
        count = len(sel)
        source = f"trace {rows.path} rows {len(sel)}/{len(rows)}"
        if cfg.time_scale != 1.0:
            source += f", time x{cfg.time_scale:g}"
    else:
        if cfg.arrival in ("static", "closed") and n is None:
            raise WorkloadError(f"num_requests is required for arrival {cfg.arrival!r}")
        if n is None and cfg.duration_s is None:
            raise WorkloadError("give num_requests or duration_s")
        expected = n if n is not None else cfg.qps * cfg.duration_s if cfg.arrival in ("poisson", "gamma") else 0
        if expected > MAX_TRACE_REQUESTS and not allow_huge():   # before the arrival arrays are allocated
            what = "num_requests" if n is not None else "qps x duration_s"
            raise WorkloadError(f"{what}: {expected:.12g} requests exceed the limit of {MAX_TRACE_REQUESTS:,} "
                                f"(set {ALLOW_HUGE_ENV}=1 to run it anyway)")
        if cfg.arrival == "poisson":
            arrivals = poisson_arrivals(rng_arr, cfg.qps, n, cfg.duration_s)
            source = f"poisson {cfg.qps:g} req/s"
        elif cfg.arrival == "gamma":
            arrivals = gamma_arrivals(rng_arr, cfg.qps, cfg.cv, n, cfg.duration_s)
            source = f"gamma {cfg.qps:g} req/s cv {cfg.cv:g}"
        elif cfg.arrival == "static":
            arrivals = np.zeros(n)
            source = "static (all at t = 0)"
        else:
            _positive("concurrency", cfg.concurrency, integer=True)
            arrivals = None
            source = f"closed loop, concurrency {int(cfg.concurrency)}"
        count = n if arrivals is None else len(arrivals)
        if count == 0:
            raise WorkloadError(f"duration_s {cfg.duration_s} is too short: no request arrives")

    # lengths
    if cfg.lengths == "fixed":
        prefill, decode = fixed_lengths(count, cfg.prefill_tokens, cfg.decode_tokens)
        source += f"; lengths fixed {int(cfg.prefill_tokens)}+{int(cfg.decode_tokens)}"
    elif cfg.lengths == "uniform":
        prefill, decode = uniform_lengths(rng_len, count, cfg.min_tokens, cfg.max_tokens, cfg.pd_ratio)
        source += f"; lengths uniform [{cfg.min_tokens}, {cfg.max_tokens}] p:d {cfg.pd_ratio:g}"
    elif cfg.lengths == "zipf":
        prefill, decode = zipf_lengths(rng_len, count, cfg.min_tokens, cfg.max_tokens, cfg.pd_ratio, cfg.zipf_theta)
        source += f"; lengths zipf theta {cfg.zipf_theta:g} [{cfg.min_tokens}, {cfg.max_tokens}] p:d {cfg.pd_ratio:g}"
    elif cfg.lengths == "trace" and cfg.arrival == "trace":
        prefill, decode = scale_lengths(rows.num_prefill_tokens[sel], rows.num_decode_tokens[sel],
                                        cfg.prefill_scale, cfg.decode_scale)
        where = lambda i: rows.where(sel[i])   # noqa: E731
    else:
        name = cfg.trace if cfg.lengths == "trace" else cfg.lengths
        if not name:
            raise WorkloadError("trace must name a CSV file (num_prefill_tokens,num_decode_tokens) for lengths 'trace'")
        lrows = read_trace(name)
        prefill, decode, idx = sample_trace_lengths(rng_len, lrows, count, cfg.prefill_scale, cfg.decode_scale)
        where = lambda i: f"{lrows.where(idx[i])} (request {i})"   # noqa: E731
        source += f"; lengths sampled from {lrows.path}"
    if cfg.lengths in ("trace",) + EXAMPLES and (cfg.prefill_scale != 1.0 or cfg.decode_scale != 1.0):
        source += f" (prefill x{cfg.prefill_scale:g}, decode x{cfg.decode_scale:g})"

    trimmed: list[Trimmed] = []
    if cfg.max_model_len is not None:
        prefill, decode, trimmed = trim_to_max_len(prefill, decode, cfg.max_model_len, where)
    if cfg.arrival == "closed":
        return ClosedLoop(int(cfg.concurrency), prefill, decode, source, trimmed, cfg.max_model_len)
    return RequestSet(np.asarray(arrivals, dtype=np.float64), prefill, decode, source, trimmed, cfg.max_model_len)


def main(argv: list[str] | None = None) -> int:
    """`python -m workload_gen.requests make-examples [OUT_DIR]`: (re)write the example traces."""
    from workload_gen.traces import make_examples
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] != "make-examples" or len(args) > 2:
        print("usage: python -m workload_gen.requests make-examples [OUT_DIR]", file=sys.stderr)
        return 2
    for p in make_examples(args[1] if len(args) == 2 else None):
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
