"""`clustersim` console script: one parser, each package registers the subcommands of its domain.

Every package exposes `cli.register(subparsers)`; a subcommand sets `func(args) -> int`. User errors
(the packages' *Error classes, missing files) print one line `clustersim: error: ...` and exit 2.
"""

from __future__ import annotations

import argparse
import atexit
import difflib
import gc
import os
import signal
import sys
import warnings


def version() -> str:
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version
    try:
        return dist_version("clustersim")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


class _VersionAction(argparse.Action):
    """--version anywhere on the command line: the installed version, looked up only when asked
    (importlib.metadata costs ~15 ms of every run's start-up)."""

    def __init__(self, option_strings, dest=argparse.SUPPRESS, default=argparse.SUPPRESS,
                 help="show program's version number and exit"):
        super().__init__(option_strings=option_strings, dest=dest, default=default, nargs=0, help=help)

    def __call__(self, parser, namespace, values, option_string=None):
        print(f"clustersim {version()}")
        parser.exit()


def user_errors() -> tuple[type[BaseException], ...]:
    from compute_db.errors import ComputeDBError
    from netsim.errors import NetsimError
    from sim.errors import SimError
    from topo.errors import TopoError
    from workload_gen.errors import WorkloadError
    return (WorkloadError, TopoError, NetsimError, ComputeDBError, SimError,
            FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError)


class OneLineParser(argparse.ArgumentParser):
    """argparse with usage errors as one line (not the whole usage block) naming the closest real flag of
    an unknown one; never prefix-matches (`-nv` is not `-n v`); subparsers inherit it."""

    def __init__(self, *args, **kwargs) -> None:
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _parse_optional(self, arg_string):
        # argparse reads `-nv` as `-n v` and `-g_type` as `-g _type`: a single-dash word glued to a letter
        # is a different flag (SimAI's spelling), never a short option with its value (`-j2` still is)
        found = super()._parse_optional(arg_string)
        if (isinstance(found, tuple) and len(found) == 3 and found[0] is not None and found[2]
                and not arg_string.startswith("--") and "=" not in arg_string
                and not (found[2][0].isdigit() or found[2][0] in ".-")):
            return None, arg_string, None
        return found

    def error(self, message: str):
        self.exit(2, f"{self.prog}: error: {message}{self._closest(message)} (see '{self.prog} --help')\n")

    def _closest(self, message: str) -> str:
        if not message.startswith("unrecognized arguments:"):
            return ""
        known = [s for a in self._actions for s in a.option_strings]
        for word in message.split(":", 1)[1].split():
            flag = word.split("=", 1)[0]
            if flag.startswith("-"):
                near = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
                if near:
                    return f"; did you mean {near[0]}?"
        return ""


# subcommand -> the module whose register() adds it (tests/test_cli_entry.py checks this against a full
# registration); a command line naming one of them imports only that module's CLI
COMMAND_MODULES = {
    "run": "sim.commands", "compare": "sim.commands", "sweep": "sim.commands", "cluster": "sim.commands",
    "simai": "sim.commands", "aicb": "sim.commands", "serve": "sim.serve.cli",
    "serve-search": "sim.serve.search_cli", "memory": "sim.analysis.cli", "search": "sim.analysis.cli",
    "workload": "workload_gen.cli", "topo": "topo.cli", "collective": "netsim.cli",
    "compute-db": "compute_db.cli", "measure": "compute_db.cli",
}
ALL_CLI_MODULES = ("sim.commands", "sim.serve.cli", "sim.serve.search_cli", "sim.analysis.cli", "workload_gen.cli",
                   "topo.cli", "netsim.cli", "compute_db.cli")


def build_parser(argv: list[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (argv naming a subcommand first) only that subcommand's module's parsers:
    `clustersim run` need not import serving, measurement or Chakra code."""
    import importlib
    command = argv[0] if argv else None
    modules = (COMMAND_MODULES[command],) if command in COMMAND_MODULES else ALL_CLI_MODULES
    parser = OneLineParser(
        prog="clustersim",
        description="Simulate large-model training iterations and inference serving on GPU clusters.")
    parser.add_argument("--version", action=_VersionAction)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in modules:
        importlib.import_module(name).register(sub)
    if "workload" in sub.choices:
        # `workload --chakra` writes traces in the simulator's schedule order with compute_db times: sim
        # supplies that writer (workload_gen may not import sim)
        from sim.chakra import run_workload_command
        sub.choices["workload"].set_defaults(func=run_workload_command)
    return parser


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised like Ctrl-C so that every cleanup path (temp files and folders) runs."""


def _on_sigterm(signum, frame):
    raise Terminated()


def _one_line_warnings(default):
    """A warnings.showwarning printing compatibility notes (a file key read differently, inert or not
    modelled) as one `warning:` line, other warnings as `default` does."""
    def show(message, category, filename, lineno, file=None, line=None):
        if category.__name__ == "CompatibilityWarning":
            print(f"clustersim: warning: {message}", file=sys.stderr)
        else:
            default(message, category, filename, lineno, file, line)
    return show


def _handle_sigterm():
    """Install the SIGTERM handler (main thread only: signal.signal refuses elsewhere); the old handler."""
    import threading
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _on_sigterm)


def _innermost(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser of the command named in argv, so an unknown flag is matched against its own flags."""
    words = [w for w in argv if not w.startswith("-")]
    while True:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        nxt = next((subs[0].choices[w] for w in words if subs and w in subs[0].choices), None)
        if nxt is None:
            return parser
        parser = nxt


def _single_thread_blas(argv: list[str], environ) -> None:
    """One OpenBLAS thread for the simulator's commands (argv[0] one of sim.commands') unless the user
    chose otherwise (set in `environ` before numpy is first imported; no effect after). Starting numpy's OpenBLAS thread pool is ~60 ms of every run's
    start-up on a 2-core machine (issue 16), and these commands make only small matrix-vector products
    (compute_db interpolation), where threads buy nothing; one thread also makes their sums independent
    of the machine's core count. Sweep workers inherit the setting (no pool x BLAS oversubscription)."""
    if argv and COMMAND_MODULES.get(argv[0]) == "sim.commands":
        environ.setdefault("OPENBLAS_NUM_THREADS", "1")


def _cheap_exit() -> None:
    """Freeze the cyclic collector's objects when the interpreter exits (gc.freeze as an atexit
    handler, registered once however often main() runs): the interpreter's final collections then skip
    every object still alive (~30 ms of a run's exit with numpy and the simulator loaded, issue 16).

    What it changes: only garbage that sits in reference cycles at exit is no longer collected, so
    finalizers (__del__, weakref callbacks) of such objects do not run. Nothing of a command's output
    depends on that: results are written and closed (atomic renames) before main() returns, stdout and
    stderr are flushed by the interpreter itself, atexit handlers (weakref.finalize's included) still
    run, sqlite3 writes commit and close explicitly, and the exit status is main()'s. No class of the
    project defines __del__."""
    atexit.unregister(gc.freeze)
    atexit.register(gc.freeze)


def _exit_now(status: int) -> None:
    """End the process with `status` without the interpreter's teardown, which frees every object a
    command made one by one (~15-20 ms after a run of SimAI's 9,216-GPU example, issue 16).

    What of the teardown anything depends on is done first: stdout and stderr are flushed and the
    atexit handlers run (logging's, multiprocessing's, weakref.finalize's, _cheap_exit's), then
    os._exit. The commands close every file they write before main() returns (context managers,
    atomic renames), and no class of the project defines __del__. Returns instead, leaving the exit to
    the interpreter, while another thread runs (the interpreter would wait for it) or when flushing
    fails (the interpreter reports it); a flush failing after the handlers ran exits with 120, the
    status the interpreter gives then."""
    import threading
    if threading.active_count() > 1:
        return
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        return
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        os._exit(120)
    os._exit(status)


def main(argv: list[str] | None = None) -> int:
    """The CLI. Called without `argv` (the console script, `python -m sim.cli`) it owns the process: it
    then also sets the process-wide start-up and exit choices (_single_thread_blas, _cheap_exit, and
    for an analytical `run` the collector off and _exit_now), which an in-process caller passing argv
    (tests, scripts) keeps out of its own interpreter."""
    whole_process = argv is None
    argv = sys.argv[1:] if argv is None else argv
    if whole_process:
        _single_thread_blas(argv or ["run"], os.environ)
        _cheap_exit()
        analytical_run: list = []
        status = _main(argv, analytical_run)
        # the analytical run only (its teardown is what is measured), and never under mpiexec: mpi4py
        # finalises MPI at the interpreter's C-level exit, which os._exit skips
        if analytical_run and "mpi4py" not in sys.modules:
            _exit_now(status)
        return status
    return _main(argv)


def _collector_off_for(args) -> bool:
    """Whether a process running `args` alone keeps the cyclic garbage collector off for good: `run` of
    one job on the analytical backend. Its bulk (the simulation, the outputs) already runs with the
    collector paused (sim.simulation, sim.report), and the collection due when the simulation resumes
    it scans every record and trace slice just made, all alive until the process ends (~40 ms of
    SimAI's 9,216-GPU example, issue 16); what runs around them makes no cyclic garbage to speak of
    (same peak memory either way). Flow runs and every other command keep the collector."""
    return (getattr(args, "command", None) == "run" and getattr(args, "network", None) == "analytical"
            and not getattr(args, "jobs", None))


def _main(argv: list[str], analytical_run: list | None = None) -> int:
    """main()'s work. analytical_run (given by the process owner): True is appended to it when the
    command is an analytical `run` (_collector_off_for), whose process keeps the collector off."""
    if argv in (["--version"], ["-V"]):  # answered before the subcommands' imports
        print(f"clustersim {version()}")
        return 0
    if not argv:
        argv = ["run"]  # the built-in example is the default job
    parser = build_parser(argv)
    args, extra = parser.parse_known_args(argv)
    if extra:
        _innermost(parser, argv).error(f"unrecognized arguments: {' '.join(extra)}")
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    errors = user_errors()
    if analytical_run is not None and _collector_off_for(args):
        analytical_run.append(True)
        gc.disable()      # not turned back on: the process ends with the command (_exit_now)
    previous = _handle_sigterm()
    shown = warnings.showwarning
    warnings.showwarning = _one_line_warnings(shown)
    try:
        return int(args.func(args) or 0)
    except errors as exc:
        msg = str(exc) if not isinstance(exc, OSError) else f"{exc.filename}: {exc.strerror}"
        print(f"clustersim: error: {msg}", file=sys.stderr)
        return 2
    except BrokenPipeError:
        # output piped into e.g. `head`: stop quietly, as Unix tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Terminated:
        print("clustersim: terminated (nothing half-written was kept)", file=sys.stderr)
        return 143
    except KeyboardInterrupt:
        print("clustersim: interrupted", file=sys.stderr)
        return 130
    finally:
        warnings.showwarning = shown
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


if __name__ == "__main__":
    sys.exit(main())
