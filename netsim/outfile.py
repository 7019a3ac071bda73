"""Output-file helpers: figures written atomically (temp file + rename) with the user's usual mode."""

from __future__ import annotations

import os
import tempfile


def user_mode(path: str) -> None:
    """mkstemp creates 0600; give the file 0666 minus the umask, as open() would."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def save_figure(fig, path: str, dpi: int, prefix: str) -> None:
    """Save a matplotlib figure to `path` through a temporary file beside it (never half-written)."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=prefix, suffix=".png", dir=folder)
    os.close(fd)
    try:
        fig.savefig(tmp, dpi=dpi, bbox_inches="tight")
        user_mode(tmp)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
