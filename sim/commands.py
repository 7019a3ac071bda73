"""`clustersim run | compare | sweep | memory | search` subcommands (owned by sim)."""

from __future__ import annotations


def register(subparsers) -> None:
    """Add sim's subcommands to the clustersim parser."""
