"""`clustersim` console script: one parser, each package registers the subcommands of its domain.

Every package exposes `cli.register(subparsers)`; a subcommand sets `func(args) -> int`. User errors
(the packages' *Error classes, missing files) print one line `clustersim: error: ...` and exit 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from compute_db import cli as compute_db_cli
from compute_db.errors import ComputeDBError
from netsim import cli as netsim_cli
from netsim.errors import NetsimError
from sim import commands as sim_commands
from sim.analysis import cli as analysis_cli
from sim.errors import SimError
from sim.serve import cli as serve_cli
from topo import cli as topo_cli
from topo.errors import TopoError
from workload_gen import cli as workload_cli
from workload_gen.errors import WorkloadError

USER_ERRORS = (WorkloadError, TopoError, NetsimError, ComputeDBError, SimError,
               FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


class OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors as one line (not the whole usage block); subparsers inherit it."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(
        prog="clustersim",
        description="Simulate large-model training iterations and inference serving on GPU clusters.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module in (sim_commands, serve_cli, analysis_cli, workload_cli, topo_cli, netsim_cli, compute_db_cli):
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = sys.argv[1:] if argv is None else argv
    if not argv:
        argv = ["run"]  # the built-in example is the default job
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        return int(args.func(args) or 0)
    except USER_ERRORS as exc:
        msg = str(exc) if not isinstance(exc, OSError) else f"{exc.filename}: {exc.strerror}"
        print(f"clustersim: error: {msg}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # output piped into e.g. `head`: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print("clustersim: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
