"""Shared checks of the fuzz suite: a bad input is refused by `clustersim` with exit 2, exactly one
stderr line `clustersim: error: ...`, no traceback, and nothing at the output path.

`refused` runs sim.cli.main in-process (fast, used for every generated input); `refused_bounded` runs
a subprocess under RLIMIT_AS and a timeout (size bombs: memory and time stay bounded before the error).
COUNTS tallies the refused inputs per reader (printed at the end of the run by conftest).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import resource
import subprocess
import sys
from collections import Counter
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"
COUNTS: Counter[str] = Counter()
MEMORY_LIMIT_BYTES = 1 << 30
TIME_LIMIT_S = 10.0

# values no numeric field may take (each fails a type, range or finiteness rule)
BAD_NUMBERS = ("nan", "NaN", "inf", "-inf", "1e400", "-1", "-0.5", "x", "", "1.5e", "9" * 400, "0x10", "1,5")


def _check(rc: int, err: str, out: Path | None, what: str, must_mention: str | None = None) -> str:
    lines = err.splitlines()
    assert "Traceback" not in err, f"{what}: traceback\n{err}"
    assert rc == 2, f"{what}: exit {rc}, stderr {err!r}"
    assert len(lines) == 1, f"{what}: expected one stderr line, got {len(lines)}: {err!r}"
    assert re.match(r"clustersim( [\w-]+)*: error: ", lines[0]), f"{what}: {lines[0]!r}"
    if must_mention is not None:
        assert must_mention in lines[0], f"{what}: {lines[0]!r} does not name {must_mention!r}"
    if out is not None:
        assert not out.exists(), f"{what}: {out} was written"
        leftovers = [p.name for p in out.parent.iterdir() if p.name.startswith(f".{out.name}")]
        assert not leftovers, f"{what}: temporary files left: {leftovers}"
    return lines[0]


def refused(reader: str, argv: list[str], out: Path | None = None, must_mention: str | None = None) -> str:
    """Run `clustersim argv` in-process; assert the one-line refusal; return the line."""
    from sim.cli import main
    err, so = io.StringIO(), io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(so):
        try:
            rc = main(argv)
        except SystemExit as exc:   # argparse errors exit through SystemExit
            rc = exc.code
    line = _check(rc, err.getvalue(), out, f"clustersim {' '.join(argv)[:200]}", must_mention)
    COUNTS[reader] += 1
    return line


def _limit():
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT_BYTES, MEMORY_LIMIT_BYTES))


def refused_bounded(reader: str, argv: list[str], out: Path | None = None, must_mention: str | None = None,
                    env: dict | None = None) -> str:
    """Run `python -m sim.cli argv` with a 1 GiB address-space limit and a 10 s timeout (a size bomb that
    allocates first would die with MemoryError or time out)."""
    full_env = dict(os.environ)
    full_env.pop("CLUSTERSIM_ALLOW_HUGE", None)
    full_env.update(env or {})
    p = subprocess.run([sys.executable, "-m", "sim.cli", *argv], capture_output=True, text=True, cwd=REPO,
                       preexec_fn=_limit, timeout=TIME_LIMIT_S, env=full_env)
    line = _check(p.returncode, p.stderr, out, f"clustersim {' '.join(argv)[:200]} (subprocess)", must_mention)
    COUNTS[reader] += 1
    return line
