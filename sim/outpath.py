"""Output paths of the sim commands: one-line errors before any work, atomic single-file writes."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from sim.errors import SimError


def check_parents_writable(path: str | Path) -> None:
    """SimError naming `path` when its nearest existing ancestor is not a writable directory."""
    for parent in Path(path).absolute().parents:
        if parent.exists():
            if not parent.is_dir():
                raise SimError(f"{path}: {parent} is not a directory")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise SimError(f"{path}: {parent} is not writable")
            return


def check_writable(path: str | Path, directory: bool = False, kind: str = "file") -> None:
    """One-line SimError (raised before any work) when `path` cannot be written as a file (or directory).

    kind: what a file name should be, for the message ("file", "CSV file").
    """
    p = Path(path)
    if directory and p.exists() and not p.is_dir():
        raise SimError(f"{path}: exists and is not a directory")
    if not directory and p.is_dir():
        raise SimError(f"{path}: is a directory; give a {kind} name")
    check_parents_writable(path)


def atomic_write(path: str | Path, data: bytes, kind: str = "file") -> None:
    """Write `data` to a temporary file beside `path`, then rename it into place."""
    check_writable(path, kind=kind)
    d = os.path.dirname(os.path.abspath(path)) or "."
    try:
        os.makedirs(d, exist_ok=True)
    except OSError as exc:
        raise SimError(f"{path}: cannot create {d} ({exc.strerror})") from None
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".tmp_", suffix=os.path.basename(path))
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)   # mkstemp creates 0600; give the file the user's usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
