"""SimAI's command lines, with SimAI's meanings: `clustersim simai {analytical,simulator,run} ARGS`.

scripts/SimAI_analytical, scripts/SimAI_simulator and scripts/run.sh call it. The SimAI flags
(reference/simai_formats.md §8; SimAI v1.6 AstraParamParse) are parsed as whole tokens (`-nv` is never
`-n v`) and translated into a `clustersim run`; every other argument goes to `clustersim run` as is.

Honoured:
  -w/--workload FILE       the workload (SimAI text, clustersim JSON, AICB CSV)
  -n/--network-topo FILE   a SimAI topology file (simulator; analytical: a file or template too)
  -g/--gpus N              GPUs of the template fabric; -g_p_s/--gpus-per-server N its GPUs per server
  -g_type/--gpu_type NAME  GPU (compute, memory, NVLink line rate)
  -r/--result PREFIX       run name (EndToEnd.csv's "File name"); results in
                           <-r_f/--result_folder, default ./results>/<PREFIX without trailing - or _>/
  -nv/--nvlink GB/s        NVLink bus bandwidth: netsim's NVLink efficiency = GB/s / NVLink line rate
  -nic/--nic_busbw GB/s    bus bandwidth of one NIC; with -n_p_s/--nic_per_server N (default: one NIC per
                           GPU) each GPU gets GB/s x N / GPUs-per-server: netsim's network efficiency = that
                           / the GPU's scale-out line rate (an error when above it)
  -busbw FILE              SimAI's bus-bandwidth table: netsim's constants are fitted to it (as
                           `clustersim collective calibrate --simai-busbw`); -nv / -nic win for their class
  -c/--config SimAI.conf   read and checked (file:line errors); its packet-level ns-3 settings have no
                           counterpart in a flow-level model (one note per group); LINK_DOWN is refused
  AS_PXN_ENABLE=1          inter-node traffic through the rail-matched GPU (netsim's PXN)
Noted, changing nothing (one line each): -t/--thread, -v/--visual, -nic_t/--nic_type, -l/--lang, the overlap
ratios -dp_o -tp_o -ep_o -pp_o (clustersim simulates overlap), AS_SEND_LAT, AS_NVLS_ENABLE, other AS_*.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os
import re
import sys
from pathlib import Path

from sim.errors import SimError

MODES = {"analytical": "SimAI_analytical", "simulator": "SimAI_simulator", "run": "run.sh"}
ETHERNET_RATES_GBPS = (100, 200, 400, 800, 1600)


# ------------------------------------------------------------------------------------------ run options
def add_run_arguments(p: argparse.ArgumentParser) -> None:
    """`clustersim run` flags for SimAI's network inputs (set by `clustersim simai`, usable directly)."""
    g = p.add_argument_group("SimAI network inputs (`clustersim simai` / scripts/SimAI_* set these)")
    g.add_argument("--nvlink-busbw", type=float, metavar="GB/s",
                   help="SimAI -nv: NVLink bus bandwidth; sets netsim's NVLink efficiency")
    g.add_argument("--nic-busbw", type=float, metavar="GB/s",
                   help="SimAI -nic: bus bandwidth of one NIC; sets netsim's network efficiency")
    g.add_argument("--nics-per-server", type=int, metavar="N", help="SimAI -n_p_s (with --nic-busbw)")
    g.add_argument("--simai-busbw", metavar="FILE", help="SimAI -busbw table: fit netsim's constants to it")
    g.add_argument("--simai-conf", metavar="FILE", help="SimAI.conf: read and checked (notes what has no "
                                                        "counterpart here)")
    g.add_argument("--pxn", action="store_true", default=None,
                   help="route inter-node traffic through the rail-matched GPU (NCCL PXN; SimAI AS_PXN_ENABLE=1)")


def job_options(args) -> dict | None:
    """The job's SimAI network inputs (None when no flag of add_run_arguments was given)."""
    keys = ("nvlink_busbw", "nic_busbw", "nics_per_server", "simai_busbw", "simai_conf", "pxn")
    opts = {k: getattr(args, k, None) for k in keys}
    opts = {k: v for k, v in opts.items() if v is not None}
    return opts or None


def check_options(opts: dict | None) -> None:
    """Validate before any simulation: numbers in range, files readable (one-line errors); print one
    note line per group of SimAI.conf settings that changes nothing here."""
    if not opts:
        return
    for key, flag in (("nvlink_busbw", "--nvlink-busbw"), ("nic_busbw", "--nic-busbw")):
        v = opts.get(key)
        if v is not None and not (math.isfinite(v) and 0 < v <= 1e5):
            raise SimError(f"{flag}: expected a bus bandwidth in GB/s above 0 and at most 100000 (got {v:g})")
    n = opts.get("nics_per_server")
    if n is not None and not 1 <= n <= 1024:
        raise SimError(f"--nics-per-server: expected 1..1024 NICs (got {n})")
    if opts.get("simai_busbw"):
        from netsim.nccltests import read_simai_busbw
        read_simai_busbw(opts["simai_busbw"])
    if opts.get("simai_conf"):
        for note in read_simai_conf(opts["simai_conf"]):
            print(f"clustersim run: note: {note}", file=sys.stderr)


def network_settings(opts: dict | None, topology, base_cal):
    """(net calibration, network options) of a job's SimAI inputs on its topology."""
    if not opts:
        return base_cal, None
    from netsim.netcal import NetCalibration
    cal = base_cal
    if opts.get("simai_busbw"):
        from netsim.calibrate import fit, simai_series
        from netsim.nccltests import read_simai_busbw
        path = opts["simai_busbw"]
        series, _notes = simai_series(read_simai_busbw(path), path, topology)
        if series:   # the table's figures replace the constants they determine (a --net-calibration keeps the rest)
            fitted, _ = fit(topology, series, name=os.path.basename(path), fitted_from=(os.path.basename(path),))
            cal = dataclasses.replace(cal, **fitted.constants()) if cal else fitted
    over: dict = {}
    if opts.get("nvlink_busbw") is not None:
        line = _nvlink_line_Bps(topology)
        want = opts["nvlink_busbw"] * 1e9
        if line <= 0:
            raise SimError("-nv/--nvlink-busbw: the topology has no NVLink links")
        if want > line * (1 + 1e-9):
            raise SimError(f"-nv/--nvlink-busbw {opts['nvlink_busbw']:g} GB/s: above the topology's NVLink line rate "
                           f"{line / 1e9:g} GB/s per GPU")
        over["nvlink_efficiency"] = max(0.05, want / line)
    if opts.get("nic_busbw") is not None:
        line = float(topology.network_bandwidth_of(0)) if _has_network(topology) else 0.0
        nics = opts.get("nics_per_server") or topology.gpus_per_server
        want = opts["nic_busbw"] * 1e9 * nics / topology.gpus_per_server
        if line <= 0:
            raise SimError("-nic/--nic-busbw: the topology has no scale-out network")
        if want > line * (1 + 1e-9):
            raise SimError(f"-nic/--nic-busbw {opts['nic_busbw']:g} GB/s x {nics} NICs / {topology.gpus_per_server} "
                           f"GPUs = {want / 1e9:g} GB/s per GPU: above the topology's {line / 1e9:g} GB/s per GPU; "
                           "give a faster fabric, e.g. --topology spectrum-x:nic_bandwidth_Bps=800Gbps")
        over["network_efficiency"] = max(0.05, want / line)
    if over:
        cal = dataclasses.replace(cal or NetCalibration(name="SimAI -nv/-nic"), **over)
    net_opts = {"pxn": True} if opts.get("pxn") else None
    return cal, net_opts


def _has_network(topology) -> bool:
    return any(link.kind == "network" for link in topology.links)


def _nvlink_line_Bps(topology) -> float:
    """NVLink bandwidth of GPU 0 (one direction): the sum of its NVLink link rates."""
    return sum(link.bandwidth_Bps for link in topology.links if link.src == 0 and link.kind == "nvlink")


# ------------------------------------------------------------------------------------------ SimAI.conf
_CONF_GROUPS = {
    "congestion control, ECN and flow control (ns-3 packet level; clustersim shares links max-min fairly)": (
        "ENABLE_QCN", "USE_DYNAMIC_PFC_THRESHOLD", "CC_MODE", "ALPHA_RESUME_INTERVAL", "RATE_DECREASE_INTERVAL",
        "CLAMP_TARGET_RATE", "RP_TIMER", "EWMA_GAIN", "FAST_RECOVERY_TIMES", "RATE_AI", "RATE_HAI", "MIN_RATE",
        "DCTCP_RATE_AI", "HAS_WIN", "GLOBAL_T", "VAR_WIN", "FAST_REACT", "U_TARGET", "MI_THRESH", "INT_MULTI",
        "MULTI_RATE", "SAMPLE_FEEDBACK", "PINT_LOG_BASE", "PINT_PROB", "RATE_BOUND", "ACK_HIGH_PRIO", "KMAX_MAP",
        "KMIN_MAP", "PMAX_MAP", "BUFFER_SIZE", "L2_CHUNK_SIZE", "L2_ACK_INTERVAL", "L2_BACK_TO_ZERO", "NIC_TOTAL_PAUSE_TIME"),
    "packet size (header overhead is inside netsim's link efficiency, calibrated on nccl-tests)": (
        "PACKET_PAYLOAD_SIZE",),
    "ns-3 input / output files (clustersim writes only its results folder)": (
        "FLOW_FILE", "TRACE_FILE", "TRACE_OUTPUT_FILE", "FCT_OUTPUT_FILE", "PFC_OUTPUT_FILE", "QLEN_MON_FILE",
        "BW_MON_FILE", "RATE_MON_FILE", "CNP_MON_FILE"),
    "tracing and monitoring (clustersim writes trace.json for Perfetto)": (
        "ENABLE_TRACE", "MON_START", "MON_END", "QP_MON_INTERVAL", "QLEN_MON_INTERVAL", "BW_MON_INTERVAL"),
    "simulation stop time (clustersim runs one iteration to its end)": ("SIMULATOR_STOP_TIME",),
}
_CONF_KEY = {k: g for g, keys in _CONF_GROUPS.items() for k in keys}
_CONF_PATHS = set(_CONF_GROUPS["ns-3 input / output files (clustersim writes only its results folder)"])
_NUM = re.compile(r"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")
_RATE = re.compile(r"(\d+\.?\d*|\.\d+)\s*([KMGT]?)(b|bps|b/s)", re.IGNORECASE)


def read_simai_conf(path: str) -> list[str]:
    """Read and check a SimAI.conf; returns one note per group of settings that changes nothing here.

    Lines are `KEY value...`; numbers must be finite, *_MAP lines `N` then N (rate, value) pairs,
    LINK_DOWN `time src dst` (all 0 = no failure; a failure is refused, it is not modelled). Errors name
    file:line."""
    try:
        with open(path, encoding="utf-8") as fh:
            raw = fh.read().splitlines()
    except FileNotFoundError:
        raise SimError(f"{path}: SimAI.conf not found") from None
    except UnicodeDecodeError:
        raise SimError(f"{path}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise SimError(f"{path}: cannot read ({exc.strerror})") from None
    seen: dict[str, list[str]] = {}
    unknown: list[str] = []
    for i, text in enumerate(raw, start=1):
        toks = text.split()
        if not toks or toks[0].startswith("#"):
            continue
        key, vals = toks[0], toks[1:]
        where = f"{path}:{i}"
        if not re.fullmatch(r"[A-Z][A-Z0-9_]*", key):
            raise SimError(f"{where}: expected 'KEY value' with an upper-case SimAI.conf key, got {text.strip()[:60]!r}")
        if not vals:
            raise SimError(f"{where}: {key} has no value")
        if key in _CONF_PATHS:
            if len(vals) != 1:
                raise SimError(f"{where}: {key}: expected one file path")
        elif key.endswith("_MAP"):
            _check_numbers(vals, where, key)
            n = float(vals[0])
            if n != int(n) or n < 0 or len(vals) != 1 + 2 * int(n):
                raise SimError(f"{where}: {key}: expected N then N (link rate, value) pairs, got {len(vals) - 1} "
                               f"numbers after N = {vals[0]}")
        elif key == "LINK_DOWN":
            _check_numbers(vals, where, key)
            if len(vals) != 3:
                raise SimError(f"{where}: LINK_DOWN: expected 'time src dst' (0 0 0 = none)")
            if any(float(v) != 0 for v in vals):
                raise SimError(f"{where}: LINK_DOWN {' '.join(vals)}: link failures are not modelled by clustersim")
        elif key in ("RATE_AI", "RATE_HAI", "MIN_RATE", "DCTCP_RATE_AI"):
            if len(vals) != 1 or not _RATE.fullmatch(vals[0]):
                raise SimError(f"{where}: {key}: expected a rate such as 50Mb/s, got {' '.join(vals)[:40]!r}")
        elif key == "ERROR_RATE_PER_LINK":
            _check_numbers(vals, where, key)
            if not 0 <= float(vals[0]) < 1:
                raise SimError(f"{where}: ERROR_RATE_PER_LINK must be in [0, 1), got {vals[0]}")
        else:
            _check_numbers(vals, where, key)
        if key in seen:
            raise SimError(f"{where}: {key} given twice")
        seen[key] = vals
        if key not in _CONF_KEY and key not in ("ERROR_RATE_PER_LINK", "LINK_DOWN"):
            unknown.append(key)
    if not seen:
        raise SimError(f"{path}:1: no settings (expected SimAI.conf 'KEY value' lines)")
    notes = []
    for group, keys in _CONF_GROUPS.items():
        got = [k for k in keys if k in seen]
        if got:
            notes.append(f"{path}: {', '.join(got[:4])}{' ...' if len(got) > 4 else ''} ({len(got)} setting(s)): "
                         f"ignored: {group}")
    loss = seen.get("ERROR_RATE_PER_LINK")
    if loss and float(loss[0]) > 0:
        notes.append(f"{path}: ERROR_RATE_PER_LINK {loss[0]}: ignored: packet loss is not modelled")
    if unknown:
        notes.append(f"{path}: {', '.join(unknown[:4])}{' ...' if len(unknown) > 4 else ''}: ignored: not a "
                     "SimAI v1.6 setting clustersim knows")
    return notes


def _check_numbers(vals: list[str], where: str, key: str) -> None:
    for v in vals:
        if not _NUM.fullmatch(v) or not math.isfinite(float(v)):
            raise SimError(f"{where}: {key}: expected numbers, got {v[:40]!r}")


# ------------------------------------------------------------------------------------------ clustersim simai
def register(subparsers) -> None:
    p = subparsers.add_parser(
        "simai", help="SimAI's command lines with SimAI's meanings (scripts/SimAI_analytical, SimAI_simulator)",
        description="Run a SimAI_analytical / SimAI_simulator command line: SimAI's flags with SimAI's "
                    "meanings; other arguments go to `clustersim run`. See sim/simai_compat.py.",
        add_help=False)
    p.add_argument("mode", choices=tuple(MODES), help="analytical (network backend analytical), simulator or "
                                                       "run (flow backend; run: --analytical switches)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="SimAI / clustersim run arguments")
    p.set_defaults(func=cmd_simai)


def _simai_parser(prog: str) -> argparse.ArgumentParser:
    from sim.cli import OneLineParser

    class WholeTokens(OneLineParser):
        """SimAI matches flags as whole tokens: `-nope` is unknown (argparse would read `-n ope`)."""

        def _get_option_tuples(self, option_string):
            return []

    p = WholeTokens(prog=prog, add_help=False)
    a = p.add_argument
    a("-h", "--help", action="store_true")
    a("-w", "--workload")
    a("-n", "--network-topo", "--topo", "--topology", dest="topo")
    a("-g", "--gpus", type=int)
    a("-g_p_s", "--gpus-per-server", dest="gps", type=int)
    a("-r", "--result", dest="result")
    a("-r_f", "--result_folder", dest="result_folder")
    a("-busbw", "--busbw", dest="busbw")
    a("-c", "--config", dest="conf")
    a("-t", "--thread", dest="thread")
    a("-nv", "--nvlink", dest="nv", type=float)
    a("-nic", "--nic_busbw", dest="nic", type=float)
    a("-n_p_s", "--nic_per_server", dest="nps", type=int)
    a("-nic_t", "--nic_type", dest="nic_type")
    a("-g_type", "--gpu_type", dest="gpu_type")
    a("-v", "--visual", dest="visual")
    for name in ("dp", "tp", "ep", "pp"):
        a(f"-{name}_o", f"--{name}_overlap", dest=f"{name}_o", type=float)
    a("-l", "--lang", dest="lang")
    a("--analytical", action="store_true")
    return p


_HELP = """usage: {prog} [SimAI flags] [clustersim run flags]

SimAI flags (SimAI's meanings):
  -w FILE  workload     -n FILE  SimAI topology file     -g N  GPUs     -g_p_s N  GPUs per server
  -g_type NAME  GPU     -r PREFIX  run name              -r_f DIR  results folder (default ./results)
  -nv GB/s  NVLink bus bandwidth    -nic GB/s  NIC bus bandwidth    -n_p_s N  NICs per server
  -busbw FILE  SimAI bus-bandwidth table (fitted)        -c FILE  SimAI.conf (read and checked)
  AS_PXN_ENABLE=1: PXN routing. Noted, no effect: -t, -v, -nic_t, -l, -dp_o -tp_o -ep_o -pp_o, AS_SEND_LAT,
  AS_NVLS_ENABLE, other AS_* variables.
Any other argument goes to `clustersim run` (e.g. --model NAME --tp 8, -o DIR, --no-charts, -q).
Results: <-r_f or ./results>/<PREFIX>/EndToEnd.csv (SimAI's layout), summary, trace and charts."""


def _note(prog: str, text: str) -> None:
    print(f"{prog}: note: {text}", file=sys.stderr)


def _world_of(workload: str | None) -> int | None:
    """all_gpus of a SimAI workload header (to pick the default fabric), else None."""
    if not workload or not os.path.isfile(workload):
        return None
    try:
        with open(workload, encoding="utf-8", errors="replace") as fh:
            toks = fh.readline(4096).split()
    except OSError:
        return None
    for i, t in enumerate(toks[:-1]):
        if t == "all_gpus:" and toks[i + 1].isdigit():
            return int(toks[i + 1])
    return None


def translate(mode: str, argv: list[str], env: dict[str, str],
              run_flags: set[str] | None = None) -> tuple[list[str], list[str]]:
    """(`clustersim run` argv, note lines) of a SimAI command line and environment.

    run_flags: the `clustersim run` option strings; a single-dash word that is neither a SimAI flag nor one
    of them is refused here (argparse would split `-nope` into `-n ope`)."""
    prog = MODES[mode]
    parser = _simai_parser(prog)
    ns, rest = parser.parse_known_args(argv)
    if run_flags is not None:
        for tok in rest:
            if (tok.startswith("-") and not tok.startswith("--") and len(tok) > 2 and tok not in run_flags
                    and not _NUM.fullmatch(tok)):
                import difflib
                known = sorted({f for a in parser._actions for f in a.option_strings} | run_flags)
                near = difflib.get_close_matches(tok, known, n=1, cutoff=0.6)
                raise SimError(f"{prog}: unrecognized argument {tok}" + (f"; did you mean {near[0]}?" if near else "")
                               + " (flags are whole tokens)")
    notes: list[str] = []
    out: list[str] = []
    if ns.help:
        raise _Help(_HELP.format(prog=prog))
    if ns.workload:
        out += ["--workload", ns.workload]
    network = "analytical" if mode == "analytical" or ns.analytical else "flow"
    if "--network" not in rest:
        out += ["--network", network]
    topo = ns.topo
    if ns.gps is not None and not 1 <= ns.gps <= 1024:
        raise SimError(f"-g_p_s: expected 1..1024 GPUs per server (got {ns.gps})")
    if topo and os.path.isfile(topo):
        if ns.gps is not None or ns.gpus is not None:
            from topo.simai_file import read_simai_topology
            t = read_simai_topology(topo)
            if ns.gps is not None and t.gpus_per_server != ns.gps:
                raise SimError(f"-g_p_s {ns.gps}: the topology file {topo} has {t.gpus_per_server} GPUs per server")
            if ns.gpus is not None and ns.gpus != t.num_gpus:
                notes.append(f"-g {ns.gpus}: ignored: the topology file {topo} has {t.num_gpus} GPUs")
    elif ns.gps is not None:
        if not topo:
            world = ns.gpus or _world_of(ns.workload) or 0
            topo = "multi-pod" if world > 4096 else "spectrum-x"   # one Spectrum-X pod holds 4,096 GPUs
        topo += ("," if ":" in topo else ":") + f"gpus_per_server={ns.gps}"
    elif topo and mode == "simulator" and not os.path.exists(topo):
        raise SimError(f"-n {topo}: topology file not found")
    if topo:
        out += ["--topology", topo]
    if ns.gpus is not None and not (topo and os.path.isfile(topo)):
        out += ["--gpus", str(ns.gpus)]
    if ns.gpu_type:
        out += ["--gpu-type", ns.gpu_type, "--gpu", ns.gpu_type]
    if ns.nv is not None:
        out += ["--nvlink-busbw", repr(ns.nv)]
    if ns.nic is not None:
        out += ["--nic-busbw", repr(ns.nic)]
        if ns.nps is not None:
            out += ["--nics-per-server", str(ns.nps)]
    elif ns.nps is not None:
        notes.append(f"-n_p_s {ns.nps}: NICs per server: ignored without -nic (NIC rates come from the topology)")
    if ns.busbw:
        out += ["--simai-busbw", ns.busbw]
    if ns.conf:
        out += ["--simai-conf", ns.conf]
    if ns.result is not None:   # EndToEnd.csv writes "<name>-", as SimAI writes its prefix
        out += ["--name", ns.result[:-1] if ns.result.endswith("-") else ns.result]
    if "-o" not in rest and "--out" not in rest and not any(a.startswith("--out=") for a in rest):
        if mode != "run" or ns.result is not None or ns.result_folder:
            name = (ns.result or "").rstrip("-_") or "SimAI"
            out += ["--out", str(Path(ns.result_folder or "results") / name)]
    elif ns.result_folder:
        notes.append(f"-r_f {ns.result_folder}: ignored: -o/--out names the results folder")
    if ns.thread is not None:
        notes.append(f"-t {ns.thread}: thread count: ignored (clustersim's flow engine runs in one process; "
                     "`clustersim sweep -j` runs jobs in parallel)")
    if ns.visual is not None:
        notes.append(f"-v {ns.visual}: SimAI's HTML chart: ignored (clustersim writes report.html, breakdown.svg, "
                     "timeline.svg and trace.json; --charts png: PNG charts, --charts none: none)")
    if ns.nic_type is not None:
        notes.append(f"-nic_t {ns.nic_type}: NIC type: ignored (it picks SimAI's default NIC busbw; here the "
                     "topology's NIC rate and netsim's calibrated efficiency, or -nic, apply)")
    if ns.lang is not None:
        notes.append(f"-l {ns.lang}: report language: ignored (reports are in English)")
    for name in ("dp", "tp", "ep", "pp"):
        v = getattr(ns, f"{name}_o")
        if v is not None:
            notes.append(f"-{name}_o {v:g}: overlap ratio: ignored (clustersim simulates the overlap of "
                         f"{name.upper()} communication with compute)")
    for key in sorted(k for k in env if k.startswith("AS_")):
        val = env[key]
        if key == "AS_PXN_ENABLE":
            if val.strip() not in ("0", "1"):
                raise SimError(f"AS_PXN_ENABLE={val}: expected 0 or 1")
            if val.strip() == "1":
                out += ["--pxn"]
        elif key == "AS_NVLS_ENABLE":
            notes.append(f"AS_NVLS_ENABLE={val}: ignored: NVLS follows NCCL's tuner (used for NVLink-domain "
                         "all-reduce on NVLS-capable GPUs such as H100/H800; never on A100)")
        elif key == "AS_SEND_LAT":
            notes.append(f"AS_SEND_LAT={val}: ignored: per-message latency is NCCL's base + per-hop model, "
                         "calibrated on nccl-tests (network_latency_s in a --net-calibration file adds latency)")
        elif key == "AS_LOG_LEVEL":
            notes.append(f"AS_LOG_LEVEL={val}: ignored (clustersim prints errors as one line; -q silences "
                         "progress)")
        else:
            notes.append(f"{key}={val}: ignored: not a SimAI setting clustersim knows")
    return out + rest, notes


class _Help(Exception):
    pass


def cmd_simai(args) -> int:
    from sim.cli import build_parser
    prog = MODES[args.mode]
    try:   # usage errors print their one line and exit 2 (SystemExit): returned, so main() callers see 2
        parser = build_parser(["run"])
        run_parser = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["run"]
        run_flags = {f for a in run_parser._actions for f in a.option_strings}
        run_argv, notes = translate(args.mode, list(args.args), dict(os.environ), run_flags)
        for n in notes:
            _note(prog, n)
        run_args = parser.parse_args(["run", *run_argv])
    except _Help as h:
        print(str(h))
        return 0
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 2
    return int(run_args.func(run_args) or 0)
