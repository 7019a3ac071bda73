"""Fit a system's network constants to its measured collectives: `clustersim collective calibrate`.

    clustersim collective calibrate all_reduce.txt all_gather.txt -o calib.yaml
    clustersim collective calibrate ar_2nodes.txt --simai-busbw busbw.yaml -t spectrum-x -bw 400Gbps -o calib.yaml

Inputs: nccl-tests output files (netsim.nccltests) and/or SimAI's busbw file. Each measured series
becomes a group on the topology (n GPUs over the files' hosts, first servers first); the model is the
analytical backend (the flow backend agrees with it uncontended). Fitted, in physical stages:
1. bandwidth: the efficiency of each series' bottleneck at its largest sizes (the constant whose
   change moves the model most there: nvlink_efficiency, nvls_efficiency or network_efficiency);
2. latency: nvlink_hop_scale from single-node series and network_latency_s from multi-node series,
   at sizes <= 64 KiB (median error to zero);
3. pipeline fill: fill_scale at 1-256 MiB (least squares in log time);
then stage 1 and 2 once more, and a coordinate descent of all fitted constants on the total absolute
log error. With multi-node series the fit also tries LL128 off across the network (ll128_over_network) and
keeps the better. A constant without data stays netsim's own (left out of the file).
"""

from __future__ import annotations

import math
import os
import statistics
from dataclasses import dataclass

from netsim.api import bus_factor
from netsim.errors import NetsimError
from netsim.netcal import _RANGES, NetCalibration

KiB, MiB = 1 << 10, 1 << 20
BANDWIDTH = ("nvlink_efficiency", "nvls_efficiency", "network_efficiency")


@dataclass
class Series:
    """Measured times of one collective on one group."""
    label: str
    op: str
    gpus: tuple[int, ...]
    points: list[tuple[int, float, str]]          # (size B, time s, "file:line")
    gpus_per_process: int = 1
    cuda_graphs: bool = False
    units: int = 1


def table_series(table, topology, ranks: int | None = None) -> Series:
    """A PerfTable as a group of the topology: its ranks (the file's, else `ranks`: --gpus) over its hosts."""
    gps = topology.gpus_per_server
    n = table.ranks or ranks
    if n is None:
        raise NetsimError(f"{table.path}:1: cannot tell how many GPUs ran (no '#  Rank ...' lines): give --gpus")
    hosts = table.hosts or max(1, math.ceil(n / gps))
    if n % hosts:
        raise NetsimError(f"{table.path}:1: {n} ranks do not split evenly over {hosts} hosts")
    per = n // hosts
    if hosts > topology.num_servers or per > gps:
        raise NetsimError(f"{table.path}:1: {n} GPUs on {hosts} node(s) do not fit the topology "
                          f"({topology.num_servers} servers of {gps} GPUs): give -g/-gps")
    gpus = tuple(s * gps + i for s in range(hosts) for i in range(per))
    if table.op == "send":
        gpus = (gpus[0], gpus[-1])
    pts = [(size, t, f"{table.path}:{line}") for size, t, line in table.rows]
    return Series(os.path.basename(table.path), table.op, gpus, pts, table.gpus_per_process, table.cuda_graphs,
                  hosts)


def simai_series(busbw: dict, path: str, topology) -> tuple[list[Series], list[str]]:
    """SimAI busbw entries as points at 8 GiB (a bandwidth figure is a plateau value; nccl-tests sweeps
    end there): TP on one server's GPUs, DP and DP_EP on one GPU per server (rail 0) over up to 8
    servers, EP all-to-all on one server, PP a send between two servers."""
    gps, servers = topology.gpus_per_server, topology.num_servers
    size = 8 << 30
    out, notes = [], []
    nic_line = _nic_line_per_gpu(topology)
    for group, entries in busbw.items():
        for op, (bw, line) in entries.items():
            where = f"{path}:{line}"
            if group in ("TP", "EP"):
                gpus = tuple(range(gps))
                units = 1
            else:
                if servers < 2:
                    notes.append(f"{where}: {group} needs a topology of >= 2 servers; entry ignored")
                    continue
                m = min(servers, 8)
                gpus = (0, gps) if group == "PP" else tuple(s * gps for s in range(m))
                units = 2 if group == "PP" else m
                if nic_line and bw > 1.05 * nic_line and group != "PP":
                    notes.append(f"{where}: {group} {op} busbw {bw / 1e9:g} GB/s is above one GPU's NIC line rate "
                                 f"({nic_line / 1e9:g} GB/s): read as a per-server figure / {gps} GPUs")
                    bw /= gps
            n = len(gpus)
            t = size * bus_factor(op, n) / bw
            out.append(Series(f"{os.path.basename(path)} {group} {op}", op, gpus, [(size, t, where)], 1, False, units))
    return out, notes


def _nic_line_per_gpu(topology) -> float:
    try:
        return float(topology.network_bandwidth_of(0))
    except Exception:   # noqa: BLE001 - a topology without network links
        return 0.0


class _Model:
    """Analytical times of every point under a candidate calibration."""

    def __init__(self, topology, series: list[Series]):
        self.topology = topology
        self.series = series
        # the last view: candidates that change only latencies or fill (most of a fit) reuse it
        self._view_key: tuple | None = None
        self._view = None

    def times(self, cal: NetCalibration) -> list[list[float]]:
        import netsim
        from netsim.backend import Planner
        from netsim.topoview import TopoView

        key = (cal.nvlink_efficiency, cal.network_efficiency, cal.pcie_efficiency)   # what TopoView reads
        if key != self._view_key:
            self._view_key, self._view = key, TopoView(self.topology, calibration=cal)
        view = self._view
        out = []
        planners: dict[tuple, Planner] = {}
        for s in self.series:
            key = (s.gpus_per_process, s.cuda_graphs)
            pl = planners.get(key)
            if pl is None:
                pl = planners[key] = Planner(None, view=view, net_calibration=cal, gpus_per_process=s.gpus_per_process,
                                             launch_overhead=not s.cuda_graphs)
            out.append([pl.analytical_s(netsim.CollectiveRequest(s.op, s.gpus, size))[0] for size, _t, _w in s.points])
        return out


def _log_errors(model_t: list[list[float]], series: list[Series], select) -> list[float]:
    errs = []
    for s, ts in zip(series, model_t):
        for (size, meas, _w), t in zip(s.points, ts):
            if select(s, size) and t > 0:
                errs.append(math.log(t / meas))
    return errs


def _with(cal: NetCalibration, **changes) -> NetCalibration:
    from dataclasses import replace
    return replace(cal, **changes)


def _clamp(name: str, v: float) -> float:
    lo, hi = _RANGES[name]
    return min(max(v, lo), hi)


def _default(name: str, topology) -> float:
    from netsim import calibration as c
    from netsim.protocol import NetModel

    gt = topology.gpu_type
    if name == "nvlink_efficiency":
        return c.nvlink_efficiency(gt)
    if name == "nvls_efficiency":
        return NetModel(gt).nvls_efficiency
    if name == "network_efficiency":
        bw = _nic_line_per_gpu(topology)
        return c.link_efficiency("network", bw, gt)
    return {"nvlink_hop_scale": 1.0, "network_latency_s": 0.0, "fill_scale": 1.0}[name]


def _solve_monotone(f, lo: float, hi: float, iters: int = 30) -> float:
    """Root of a monotone f on [lo, hi] by bisection (clamped to an end when there is no sign change)."""
    flo, fhi = f(lo), f(hi)
    if flo == 0:
        return lo
    if (flo > 0) == (fhi > 0):
        return lo if abs(flo) < abs(fhi) else hi
    for _ in range(iters):
        mid = 0.5 * (lo + hi)
        fm = f(mid)
        if (fm > 0) == (flo > 0):
            lo, flo = mid, fm
        else:
            hi = mid
    return 0.5 * (lo + hi)


def _golden(f, lo: float, hi: float, iters: int = 18) -> float:
    g = (math.sqrt(5) - 1) / 2
    a, b = lo, hi
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(c), f(d)
    for _ in range(iters):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(d)
    return (a + b) / 2


def _objective(model: _Model, cal: NetCalibration) -> float:
    """Sum of absolute log errors over every measured point (robust: a few outlying points, such as a
    measured plateau the model does not have, do not pull every constant)."""
    return sum(abs(e) for e in _log_errors(model.times(cal), model.series, lambda s, size: True))


def _fit_stages(model: _Model, topology, start: NetCalibration) -> tuple[NetCalibration, set[str]]:
    series = model.series
    cal = start

    def large(s, size):
        sizes = [p[0] for p in s.points]
        return size >= max(16 * MiB, max(sizes) / 16) or len(sizes) == 1

    def small(s, size):
        return size <= 64 * KiB

    def mid(s, size):
        return MiB <= size <= 256 * MiB and not large(s, size)

    fitted: set[str] = set()

    def bandwidth_stage():
        nonlocal cal
        for _ in range(4):
            base = model.times(cal)
            groups: dict[str, list] = {}
            for pname in BANDWIDTH:
                cur = getattr(cal, pname) or _default(pname, topology)
                probe = model.times(_with(cal, **{pname: _clamp(pname, cur * 1.05)}))
                for si, s in enumerate(series):
                    for pi, (size, meas, _w) in enumerate(s.points):
                        if not large(s, size):
                            continue
                        sens = math.log(base[si][pi] / probe[si][pi]) if probe[si][pi] > 0 else 0.0
                        if sens > 0.01:
                            groups.setdefault(pname, []).append((sens, (si, pi), math.log(base[si][pi] / meas)))
            # every point goes to the constant it is most sensitive to
            owner: dict = {}
            for pname, items in groups.items():
                for sens, key, err in items:
                    if key not in owner or sens > owner[key][0]:
                        owner[key] = (sens, pname, err)
            moved = False
            for pname in BANDWIDTH:
                # d ln t / d ln p = -sens / ln 1.05: the step that zeroes a point's log error
                errs = [err * math.log(1.05) / sens for sens, p, err in owner.values() if p == pname]
                if not errs:
                    continue
                cur = getattr(cal, pname) or _default(pname, topology)
                new = _clamp(pname, cur * math.exp(statistics.median(errs)))
                if abs(new / cur - 1) > 1e-4:
                    moved = True
                cal = _with(cal, **{pname: new})
                fitted.add(pname)
            if not moved:
                break

    def latency_stage():
        nonlocal cal
        for pname, sel in (("nvlink_hop_scale", lambda s, size: small(s, size) and s.units == 1),
                           ("network_latency_s", lambda s, size: small(s, size) and s.units > 1)):
            if not _log_errors(model.times(cal), series, sel):
                continue
            lo, hi = _RANGES[pname]
            hi = min(hi, 20.0 if pname == "nvlink_hop_scale" else 2e-3)

            def med(v, pname=pname, sel=sel, start=cal):
                return statistics.median(_log_errors(model.times(_with(start, **{pname: v})), series, sel))

            cal = _with(cal, **{pname: _solve_monotone(med, lo, hi)})
            fitted.add(pname)

    def fill_stage():
        nonlocal cal
        if not _log_errors(model.times(cal), series, mid):
            return

        def sq(v):
            return sum(e * e for e in _log_errors(model.times(_with(cal, fill_scale=v)), series, mid))

        cal = _with(cal, fill_scale=_golden(sq, 0.0, 8.0))
        fitted.add("fill_scale")

    def refine():
        """Coordinate descent on the total absolute log error, each constant within x/÷ 2 of its stage
        value (the stages fit subsets of sizes; this settles their interplay)."""
        nonlocal cal
        for _ in range(2):
            for pname in sorted(fitted):
                cur = getattr(cal, pname)
                if not cur:
                    continue
                lo, hi = _RANGES[pname]

                def total(u, pname=pname, start=cal, cur=cur):
                    return _objective(model, _with(start, **{pname: _clamp(pname, cur * math.exp(u))}))

                u = _golden(total, -math.log(2), math.log(2), iters=14)
                if total(u) < total(0.0):
                    cal = _with(cal, **{pname: _clamp(pname, cur * math.exp(u))})

    bandwidth_stage()
    latency_stage()
    fill_stage()
    bandwidth_stage()
    latency_stage()
    refine()
    return cal, fitted


def fit(topology, series: list[Series], name: str = "", fitted_from: tuple[str, ...] = ()) -> tuple[NetCalibration, dict]:
    """Fit a NetCalibration to measured series (module docstring). Returns (calibration, report).

    With multi-node series the fit runs twice, with LL128 across the network allowed (NCCL's default on
    RDMA networks) and not (e.g. TCP-based GPUDirect), and keeps the better: whether NCCL could run
    LL128 there shows in the data."""
    if not series:
        raise NetsimError("calibrate: no measured points")
    model = _Model(topology, series)
    before = model.times(NetCalibration())
    starts = [NetCalibration()]
    if any(s.units > 1 for s in series):
        starts.append(NetCalibration(ll128_over_network=False))
    best = None
    for start in starts:
        cal, fitted = _fit_stages(model, topology, start)
        obj = _objective(model, cal)
        if best is None or obj < best[0] * (1 - 1e-6):
            best = (obj, cal, fitted)
    _obj, cal, fitted = best
    after = model.times(cal)
    keep = {k: float(getattr(cal, k)) for k in fitted}
    if cal.ll128_over_network is False:
        keep["ll128_over_network"] = False
    result = NetCalibration(name=name, fitted_from=fitted_from, **keep)
    report = {}
    for s, tb, ta in zip(series, before, after):
        entry = report.setdefault(s.label, {"points": 0, "before": {}, "after": {}})
        entry["points"] += len(s.points)
        for tag, ts in (("before", tb), ("after", ta)):
            for band, sel in (("median_abs_error_ge_1MiB", lambda z: z >= MiB), ("median_abs_error_lt_1MiB", lambda z: z < MiB)):
                errs = [abs(t / meas - 1) for (size, meas, _w), t in zip(s.points, ts) if sel(size)]
                if errs:
                    entry[tag][band] = round(float(statistics.median(errs)), 4)
    return _with(result, fit=report), {"series": series, "before": before, "after": after}


# ------------------------------------------------------------------ CLI
def register(subparsers) -> None:
    """`clustersim collective calibrate` (added under the collective parser)."""
    from netsim.cli import add_topology_flags

    p = subparsers.add_parser(
        "calibrate", allow_abbrev=False,
        help="fit netsim's network constants to nccl-tests output / SimAI busbw (writes a calibration YAML)",
        description="Fit link efficiencies, per-hop latencies and the pipeline-fill scale of netsim's "
                    "collective model to measured nccl-tests tables (and/or a SimAI busbw file); write a "
                    "calibration YAML for --net-calibration.")
    p.add_argument("files", nargs="*", metavar="FILE", help="nccl-tests output files (*_perf tables)")
    p.add_argument("--simai-busbw", metavar="FILE", help="SimAI busbw file (TP/DP/EP/PP bus bandwidths)")
    p.add_argument("-o", "--output", required=True, metavar="FILE", help="calibration YAML to write")
    p.add_argument("--op", help="collective of the files when they do not say (all_reduce, all_gather, ...)")
    p.add_argument("--in-place", action="store_true", help="use the in-place columns (default out-of-place)")
    p.add_argument("--name", default="", help="name stored in the calibration (default: the output file name)")
    add_topology_flags(p, default_template="spectrum-x")
    p.set_defaults(func=main)


def main(args) -> int:
    from netsim.cli import OP_ALIASES, topology_from_args
    from netsim.nccltests import read_nccl_tests, read_simai_busbw
    from netsim.netcal import save_net_calibration

    if not args.files and not args.simai_busbw:
        raise NetsimError("calibrate: give nccl-tests files and/or --simai-busbw FILE")
    op = None
    if args.op:
        op = OP_ALIASES.get(args.op.lower())
        if op is None:
            raise NetsimError(f"--op: unknown collective {args.op!r}")
    folder = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(folder):
        raise NetsimError(f"-o {args.output}: cannot write (folder {folder} does not exist)")
    if os.path.isdir(args.output):
        raise NetsimError(f"-o {args.output}: is a directory; give a file name (before the fit, not after)")
    tables = [read_nccl_tests(f, op=op, in_place=args.in_place) for f in args.files]
    busbw = read_simai_busbw(args.simai_busbw) if args.simai_busbw else None
    # defaults from the data: GPU model, GPUs and GPUs per server
    gtypes = {t.gpu_type for t in tables if t.gpu_type}
    if args.gpu_type is None and len(gtypes) == 1 and not os.path.isfile(args.topology):
        args.gpu_type = gtypes.pop()
    if args.gpus is None and not os.path.isfile(args.topology):
        ranks = [t.ranks for t in tables if t.ranks]
        if ranks:
            args.gpus = max(ranks)
            hosts = [t.hosts for t in tables if t.ranks == args.gpus and t.hosts]
            if args.gpus_per_server is None and hosts:
                args.gpus_per_server = max(1, args.gpus // hosts[0])
    topology = topology_from_args(args)
    series = [table_series(t, topology, args.gpus) for t in tables]
    notes: list[str] = []
    if busbw:
        extra, notes = simai_series(busbw, args.simai_busbw, topology)
        series += extra
    name = args.name or os.path.splitext(os.path.basename(args.output))[0]
    sources = tuple(os.path.basename(f) for f in args.files) + ((os.path.basename(args.simai_busbw),)
                                                                  if args.simai_busbw else ())
    cal, detail = fit(topology, series, name=name, fitted_from=sources)
    print(f"# {getattr(topology, 'name', '') or args.topology}: {topology.num_gpus} GPUs ({topology.gpu_type})")
    for t in tables:
        print(f"# {t.describe()}; {t.gpus_per_process} GPU(s) per process"
              + ("; CUDA graphs (no launch overhead)" if t.cuda_graphs else ""))
    for note in notes:
        print(f"# {note}")
    print(f"{'series':<28s}{'size_B':>12s}{'measured us':>13s}{'before us':>11s}{'after us':>10s}{'err':>7s}")
    for s, tb, ta in zip(detail["series"], detail["before"], detail["after"]):
        for (size, meas, _w), b, a in zip(s.points, tb, ta):
            print(f"{s.label[:27]:<28s}{size:>12d}{meas * 1e6:13.2f}{b * 1e6:11.2f}{a * 1e6:10.2f}"
                  f"{100 * (a / meas - 1):+6.0f}%")
    for k, v in cal.constants().items():
        print(f"# fitted {k} = {str(v).lower() if isinstance(v, bool) else f'{v:.6g}'}")
    def pct(d: dict) -> str:
        return ", ".join(f"{'>=' if k.endswith('ge_1MiB') else '<'} 1 MiB {100 * v:.1f}%" for k, v in d.items())

    for label, rep in cal.fit.items():
        print(f"# {label}: median |error| before: {pct(rep['before'])}; after: {pct(rep['after'])}")
    system = {"topology": getattr(topology, "name", "") or str(args.topology), "gpu_type": topology.gpu_type,
              "gpus": topology.num_gpus, "gpus_per_server": topology.gpus_per_server}
    save_net_calibration(cal, args.output, system=system)
    print(f"# wrote {args.output}")
    return 0
