"""Output-file helpers: the user's usual file mode for files made by mkstemp; atomic figures (via topo)."""

from __future__ import annotations

import os


def user_mode(path: str) -> None:
    """mkstemp creates 0600; give the file 0666 minus the umask, as open() would."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)


def save_figure(fig, path: str, dpi: int, prefix: str) -> None:
    """Save a matplotlib figure to `path` atomically (topo.draw.save_png, cropped to its content)."""
    from topo.draw import save_png
    save_png(fig, path, dpi=dpi, prefix=prefix, bbox_inches="tight")
