"""`clustersim` subcommands owned by topo."""

from __future__ import annotations


def register(subparsers) -> None:
    """Add this package's subcommands to the clustersim parser."""
