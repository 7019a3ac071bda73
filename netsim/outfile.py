"""Output-file helper: files written atomically through mkstemp get the user's usual mode."""

from __future__ import annotations

import os


def user_mode(path: str) -> None:
    """mkstemp creates 0600; give the file 0666 minus the umask, as open() would."""
    mask = os.umask(0)
    os.umask(mask)
    os.chmod(path, 0o666 & ~mask)
