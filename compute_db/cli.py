"""`clustersim` subcommands owned by compute_db."""

from __future__ import annotations


def register(subparsers) -> None:
    """Add this package's subcommands to the clustersim parser."""
