"""Request trace CSV files: reading (Vidur's formats), the packaged example traces and their generator.

Formats (reference/serving.md §5):
  replay:       `arrived_at,num_prefill_tokens,num_decode_tokens` (arrival in seconds)
  lengths only: `num_prefill_tokens,num_decode_tokens`
The header names the columns (any order; other columns are ignored). num_decode_tokens counts the output
tokens including the first one, which the prefill produces; both counts must be integers >= 1. Arrival
times must be finite, >= 0 and non-decreasing. A malformed row is a one-line WorkloadError `file:line: ...`.

Packaged examples (workload_gen/data/traces/, written by `make_examples`, seeded and reproducible; the
project's own synthetic data, not downloaded datasets; shapes are our choices, documented below):
  chat.csv           1,000 rows, Poisson 1 req/s; prompt ~ lognormal (median 250, sigma 0.9) clipped to
                     [8, 4096]; output ~ lognormal (median 220, sigma 0.8) clipped to [4, 2048]
                     (ShareGPT-like shape: prompts of hundreds of tokens, outputs of a few hundred).
  summarization.csv    800 rows, Poisson 0.5 req/s; prompt ~ lognormal (sigma 0.5) clipped to
                     [256, 7168], output ~ lognormal (sigma 0.5) clipped to [16, 1024], each rescaled so
                     that its sample mean is the public arXiv-summarisation mean (2,588 prefill, 291 decode).
  code.csv           1,000 rows, gamma arrivals 2 req/s CV 2 (bursty); prompt ~ lognormal (median 1,500,
                     sigma 0.6) clipped to [64, 7168]; output ~ lognormal (median 60, sigma 0.9) clipped to
                     [1, 512] (code completion: long context, short completions; not fitted to a dataset).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import numpy as np

from workload_gen.errors import WorkloadError
from workload_gen.limits import ALLOW_HUGE_ENV, MAX_DIM, MAX_TRACE_REQUESTS, allow_huge

REPLAY_COLUMNS = ("arrived_at", "num_prefill_tokens", "num_decode_tokens")
LENGTH_COLUMNS = ("num_prefill_tokens", "num_decode_tokens")
EXAMPLES = ("chat", "summarization", "code")
EXAMPLES_SEED = 20240611            # fixed: the shipped files are reproducible byte for byte


@dataclass
class TraceRows:
    """Rows of a trace file. `lines` are 1-based file line numbers (for messages about a row)."""
    path: str
    lines: np.ndarray                     # int64
    num_prefill_tokens: np.ndarray        # int64
    num_decode_tokens: np.ndarray         # int64
    arrived_at_s: np.ndarray | None = None  # float64; None for a lengths-only file

    def __len__(self) -> int:
        return len(self.lines)

    def where(self, i: int) -> str:
        return f"{self.path}:{int(self.lines[i])}"


def example_path(name: str) -> Path:
    """Path of a packaged example trace (`chat`, `summarization`, `code`)."""
    return Path(str(resources.files("workload_gen") / "data" / "traces" / f"{name}.csv"))


def resolve_trace(name_or_path: str) -> Path:
    """A file path as given, or a packaged example name (when no such file exists)."""
    p = Path(name_or_path)
    if not p.exists() and name_or_path in EXAMPLES:
        return example_path(name_or_path)
    return p


def _int_field(text: str, col: str, where: str) -> int:
    t = text.strip()
    digits = t[1:] if t[:1] in "+-" else t
    if not (digits.isascii() and digits.isdigit()):   # int() would also take '1_000' and 400-digit numbers
        raise WorkloadError(f"{where}: {col} {t[:40]!r} is not an integer")
    if len(digits) > 12 or int(t) > MAX_DIM:
        if not allow_huge() or len(digits) > 18:   # int64 arrays hold the columns
            raise WorkloadError(f"{where}: {col} {t[:40]} exceeds the limit of {MAX_DIM:,} tokens "
                                f"(set {ALLOW_HUGE_ENV}=1 to read it anyway)")
    v = int(t)
    if v < 1:
        raise WorkloadError(f"{where}: {col} must be >= 1 (got {v})")
    return v


def _bad_utf8_line(p: Path) -> int:
    """1-based line of the first byte that is not UTF-8 (the text reader decodes in blocks, so its own
    line count may lag)."""
    data = p.read_bytes()
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return data.count(b"\n", 0, exc.start) + 1
    return 1


def read_trace(path: str | Path, need_arrivals: bool = False) -> TraceRows:
    """Read a replay or lengths-only trace; `need_arrivals` requires the arrived_at column."""
    p = resolve_trace(str(path))
    try:
        f = open(p, newline="", encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(f"{path}: cannot read the trace ({exc.strerror})") from None
    lines, pre, dec, arr = [], [], [], []
    with f:
        reader = csv.reader(f)
        try:
            header = next(reader, None)
            if header is None:
                raise WorkloadError(f"{p}:1: empty file; expected the header {','.join(REPLAY_COLUMNS)}")
            names = [h.strip() for h in header]
            missing = [c for c in (REPLAY_COLUMNS if need_arrivals else LENGTH_COLUMNS) if c not in names]
            if missing:
                raise WorkloadError(f"{p}:1: header lacks {', '.join(missing)} (expected "
                                    f"{','.join(REPLAY_COLUMNS if need_arrivals else LENGTH_COLUMNS)})")
            ip, idc = names.index("num_prefill_tokens"), names.index("num_decode_tokens")
            ia = names.index("arrived_at") if "arrived_at" in names else None
            ncol = len(names)
            prev = 0.0
            for row in reader:
                ln = reader.line_num
                if not row or all(not c.strip() for c in row):
                    continue
                where = f"{p}:{ln}"
                if len(lines) >= MAX_TRACE_REQUESTS and not allow_huge():
                    raise WorkloadError(f"{where}: more than {MAX_TRACE_REQUESTS:,} requests in the trace "
                                        f"(set {ALLOW_HUGE_ENV}=1 to read it anyway)")
                if len(row) != ncol:
                    raise WorkloadError(f"{where}: expected {ncol} columns ({','.join(names)}), got {len(row)}")
                pre.append(_int_field(row[ip], "num_prefill_tokens", where))
                dec.append(_int_field(row[idc], "num_decode_tokens", where))
                if ia is not None:
                    try:
                        t = float(row[ia])
                    except ValueError:
                        raise WorkloadError(f"{where}: arrived_at {row[ia].strip()!r} is not a number") from None
                    if not math.isfinite(t) or t < 0:
                        raise WorkloadError(f"{where}: arrived_at must be a finite time >= 0 s (got {t})")
                    if t < prev:
                        raise WorkloadError(f"{where}: arrived_at {t} is earlier than the previous row's {prev} "
                                            "(rows must be in arrival order)")
                    prev = t
                    arr.append(t)
                lines.append(ln)
        except csv.Error as exc:
            raise WorkloadError(f"{p}:{reader.line_num}: malformed CSV ({exc})") from None
        except UnicodeDecodeError:
            raise WorkloadError(f"{p}:{_bad_utf8_line(p)}: not UTF-8 text") from None
    if not lines:
        raise WorkloadError(f"{p}: the trace holds no requests")
    return TraceRows(str(p), np.asarray(lines, dtype=np.int64), np.asarray(pre, dtype=np.int64),
                     np.asarray(dec, dtype=np.int64), np.asarray(arr, dtype=np.float64) if ia is not None else None)


def format_trace(arrived_at_s, num_prefill_tokens, num_decode_tokens) -> str:
    """CSV text of a replay trace (arrival times with microsecond resolution)."""
    out = [",".join(REPLAY_COLUMNS)]
    out += [f"{t:.6f},{int(p)},{int(d)}" for t, p, d in zip(arrived_at_s, num_prefill_tokens, num_decode_tokens)]
    return "\n".join(out) + "\n"


def _lognormal_int(rng: np.random.Generator, n: int, median: float, sigma: float, lo: int, hi: int) -> np.ndarray:
    return np.clip(np.rint(rng.lognormal(math.log(median), sigma, n)), lo, hi).astype(np.int64)


def _with_mean(x: np.ndarray, target: float, lo: int, hi: int) -> np.ndarray:
    """Rescale integer samples so that their mean is `target` (within half a token), keeping [lo, hi]."""
    y = x.astype(np.float64)
    for _ in range(50):
        y = np.clip(y * (target / y.mean()), lo, hi)
        r = np.rint(y).astype(np.int64)
        if abs(r.mean() - target) <= 0.5:
            return r
    return np.rint(y).astype(np.int64)


def example_rows(name: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrived_at_s, prefill, decode) of a packaged example, from its fixed seed (see the module doc)."""
    seeds = np.random.SeedSequence([EXAMPLES_SEED, EXAMPLES.index(name)]).spawn(2)
    ta, tl = np.random.default_rng(seeds[0]), np.random.default_rng(seeds[1])
    if name == "chat":
        n = 1000
        t = np.cumsum(ta.exponential(1.0, n))
        p = _lognormal_int(tl, n, 250, 0.9, 8, 4096)
        d = _lognormal_int(tl, n, 220, 0.8, 4, 2048)
    elif name == "summarization":
        n = 800
        t = np.cumsum(ta.exponential(2.0, n))
        p = _with_mean(_lognormal_int(tl, n, 2400, 0.5, 256, 7168), 2588, 256, 7168)
        d = _with_mean(_lognormal_int(tl, n, 260, 0.5, 16, 1024), 291, 16, 1024)
    elif name == "code":
        n = 1000
        shape = 1.0 / 2.0 ** 2                                   # CV 2
        t = np.cumsum(ta.gamma(shape, 1.0 / (2.0 * shape), n))   # 2 req/s
        p = _lognormal_int(tl, n, 1500, 0.6, 64, 7168)
        d = _lognormal_int(tl, n, 60, 0.9, 1, 512)
    else:
        raise WorkloadError(f"unknown example trace {name!r} (choose from {', '.join(EXAMPLES)})")
    return t, p, d


def make_examples(out_dir: str | Path | None = None) -> list[Path]:
    """Write the example traces into `out_dir` (default: the package's data/traces) atomically."""
    import os
    import tempfile
    d = Path(out_dir) if out_dir is not None else example_path("chat").parent
    d.mkdir(parents=True, exist_ok=True)
    written = []
    for name in EXAMPLES:
        text = format_trace(*example_rows(name))
        fd, tmp = tempfile.mkstemp(dir=d, prefix=f".{name}.", suffix=".tmp")
        with os.fdopen(fd, "w", newline="") as f:
            f.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, d / f"{name}.csv")
        written.append(d / f"{name}.csv")
    return written
