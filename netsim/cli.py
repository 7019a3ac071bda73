"""`clustersim collective` — an nccl-tests-like benchmark of one collective on a simulated topology.

    clustersim collective --op all_reduce -t spectrum-x -g 16 -b 1M -e 1G -f 4
    clustersim collective --op all_gather -t spectrum-x -g 64 --ranks 16 --servers 4 --png ag.png
    clustersim collective --op all_reduce -t spectrum-x -g 32 --rail 0
    clustersim collective --micro micro.txt -t topo.txt          # SimAI MICRO workload, all GPUs
    clustersim collective --micro microAllReduce.txt -g 8         # SimAI's smoke test (training file)
    clustersim collective -g 8 -p LL128 --gpus-per-process 8      # NCCL_PROTO, nccl-tests -g 8
    clustersim collective calibrate all_reduce_perf.txt -o calib.yaml   # fit to measured nccl-tests output
    clustersim collective -g 8 --net-calibration calib.yaml

Columns: size (bytes, nccl-tests S), algorithm/protocol, then per backend time (us), algbw = S / t and
busbw = algbw x factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all (n-1)/n;
broadcast, reduce, send 1), in GB/s (1e9).
"""

from __future__ import annotations

import argparse
import os
import re

from netsim.api import bus_factor
from netsim.errors import NetsimError
from netsim.outfile import save_figure

OP_ALIASES = {"allreduce": "all_reduce", "all_reduce": "all_reduce", "all-reduce": "all_reduce",
              "allgather": "all_gather", "all_gather": "all_gather", "all-gather": "all_gather",
              "reducescatter": "reduce_scatter", "reduce_scatter": "reduce_scatter",
              "reduce-scatter": "reduce_scatter", "alltoall": "all_to_all", "all_to_all": "all_to_all",
              "all-to-all": "all_to_all", "broadcast": "broadcast", "bcast": "broadcast",
              "reduce": "reduce", "sendrecv": "send", "send": "send"}


def parse_size(text: str, flag: str) -> int:
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)(i?B?)\s*", str(text), re.IGNORECASE)
    if not m:
        raise NetsimError(f"{flag}: cannot read size {text!r} (examples: 8, 64K, 128M, 1G)")
    mult = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}[m.group(2).upper()]
    return int(float(m.group(1)) * mult)


def add_topology_flags(p, default_template: str = "spectrum-x") -> None:
    """Topology flags shared by `collective` and `collective calibrate`."""
    p.add_argument("-t", "--topology", default=default_template,
                   help=f"topology template name or SimAI topology file (default {default_template})")
    p.add_argument("-g", "--gpus", type=int, help="template: number of GPUs (default 8 * servers or 8)")
    p.add_argument("-gps", "--gpus-per-server", type=int, help="template: GPUs per server")
    p.add_argument("-gt", "--gpu-type", help="template: GPU type (H100)")
    p.add_argument("-nvbw", "--nvlink-bw", help="template: GPU-NVSwitch rate per direction, e.g. 3600Gbps")
    p.add_argument("-bw", "--nic-bw", help="template: NIC rate, e.g. 400Gbps")
    p.add_argument("--topo-param", action="append", default=[], metavar="KEY=VALUE",
                   help="extra topo.build parameter (repeatable), e.g. psw_count=4")


def register(subparsers) -> None:
    """Add this package's subcommands to the clustersim parser."""
    from netsim import calibrate

    p = subparsers.add_parser(
        "collective", allow_abbrev=False,
        help="nccl-tests-like benchmark of a collective on a simulated topology (flow + analytical)",
        description="Simulate one collective over a size sweep on a topology and print time, algbw "
                    "and busbw for the flow and analytical network backends. `collective calibrate` fits "
                    "the network constants to measured nccl-tests output.",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--op", default="all_reduce", help="all_reduce | all_gather | reduce_scatter | "
                   "all_to_all | broadcast | reduce | send (nccl-tests names such as allreduce accepted)")
    add_topology_flags(p)
    g = p.add_argument_group("group (default: all GPUs)")
    g.add_argument("--ranks", type=int, help="first N GPUs (with --servers: N GPUs over M servers)")
    g.add_argument("--servers", type=int, help="spread --ranks evenly over the first M servers")
    g.add_argument("--rail", type=int, help="every GPU on this rail (local index / NIC)")
    p.add_argument("-b", "--minbytes", default="8", help="smallest size (nccl-tests -b; default 8)")
    p.add_argument("-e", "--maxbytes", default="1G", help="largest size (nccl-tests -e; default 1G)")
    p.add_argument("-f", "--stepfactor", type=int, default=2, help="size multiplication factor (2)")
    p.add_argument("-a", "--algorithm", default="auto",
                   help="auto | ring | tree | nvls | rhd | hierarchical | direct | pairwise | pxn")
    p.add_argument("-p", "--protocol", default="auto", help="auto | LL | LL128 | Simple (NCCL_PROTO)")
    p.add_argument("--backend", choices=("both", "flow", "analytical"), default="both")
    p.add_argument("--pxn", action="store_true", help="route inter-node traffic with PXN")
    p.add_argument("--routing", choices=("auto", "rail", "ecmp"), default="auto",
                   help="auto (default): rail on rail-optimized fabrics, else ecmp; rail: NCCL-like rail-aligned "
                        "routes for same-rail traffic; ecmp: the switches hash every flow")
    p.add_argument("--net-calibration", metavar="FILE",
                   help="network calibration YAML (from `clustersim collective calibrate`)")
    p.add_argument("--gpus-per-process", type=int, default=1,
                   help="GPUs one process drives (nccl-tests -g): host launch cost per call x this (default 1)")
    p.add_argument("--no-launch-overhead", action="store_true",
                   help="drop the host launch cost per call (CUDA graphs)")
    p.add_argument("--micro", metavar="FILE", help="run the collectives of a SimAI MICRO workload file")
    p.add_argument("--png", metavar="FILE", help="write a chart of busbw vs size")
    p.add_argument("--check", action="store_true", help="debug: check engine invariants while running")
    p.set_defaults(func=main)
    sub = p.add_subparsers(dest="collective_command", metavar="{calibrate}",
                           title="subcommands (optional)")
    calibrate.register(sub)


def topology_from_args(args):
    import topo
    from netsim.calibration import nvlink_line_Bps
    from topo.templates import SIMAI_BASE, canonical_template

    params: dict = {}
    for kv in args.topo_param:
        if "=" not in kv:
            raise NetsimError(f"--topo-param: expected KEY=VALUE, got {kv!r}")
        k, v = kv.split("=", 1)
        try:
            params[k.strip()] = int(v) if re.fullmatch(r"-?\d+", v.strip()) else float(v)
        except ValueError:
            params[k.strip()] = v.strip()
    if os.path.isfile(args.topology):
        if any(x is not None for x in (args.gpus, args.gpus_per_server, args.gpu_type, args.nvlink_bw,
                                       args.nic_bw)) or params:
            raise NetsimError("--topology: template flags (-g, -gps, -gt, -nvbw, -bw, --topo-param) "
                              "do not apply to a topology file")
        return topo.read_simai_topology(args.topology)
    for name, val in (("gpus", args.gpus), ("gpus_per_server", args.gpus_per_server),
                      ("gpu_type", args.gpu_type), ("nvlink_bandwidth_Bps", args.nvlink_bw),
                      ("nic_bandwidth_Bps", args.nic_bw)):
        if val is not None:
            params[name] = val
    if "gpus" not in params:
        per = params.get("gpus_per_server", 8)
        params["gpus"] = max(int(per) * (getattr(args, "servers", None) or 1), getattr(args, "ranks", None) or 0)
    template = canonical_template(args.topology)
    if "nvlink_bandwidth_Bps" not in params and template not in ("nvl72", "nvl36", "pcie"):
        # SimAI's template default NVLink rate (2880 Gbps) is an effective H100 figure; netsim applies
        # its calibrated efficiency to the line rate, so start from the GPU's datasheet rate
        gpu_type = str(params.get("gpu_type", SIMAI_BASE["gpu_type"]))
        line = nvlink_line_Bps(gpu_type)
        if line is not None:
            params["nvlink_bandwidth_Bps"] = line
            args.nvlink_note = (f"NVLink {line / 1e9:g} GB/s per direction ({gpu_type} datasheet line rate; "
                                "-nvbw to change)")
    return topo.build(args.topology, **params)


def select_group(t, ranks: int | None, servers: int | None, rail: int | None) -> tuple[int, ...]:
    n_all = t.num_gpus
    if rail is not None:
        if ranks is not None or servers is not None:
            raise NetsimError("--rail cannot be combined with --ranks / --servers")
        group = tuple(g for g in range(n_all) if t.rail_of(g) == rail)
        if not group:
            raise NetsimError(f"--rail {rail}: no GPU on that rail")
        return group
    if servers is not None:
        if ranks is None:
            raise NetsimError("--servers needs --ranks (N GPUs over M servers)")
        if servers <= 0 or ranks % servers:
            raise NetsimError(f"--ranks {ranks} must be a positive multiple of --servers {servers}")
        per = ranks // servers
        if servers > t.num_servers or per > t.gpus_per_server:
            raise NetsimError(f"--ranks {ranks} over --servers {servers}: topology has {t.num_servers} "
                              f"servers of {t.gpus_per_server} GPUs")
        return tuple(s * t.gpus_per_server + i for s in range(servers) for i in range(per))
    if ranks is not None:
        if ranks <= 0 or ranks > n_all:
            raise NetsimError(f"--ranks {ranks}: topology has {n_all} GPUs")
        return tuple(range(ranks))
    return tuple(range(n_all))


def _sizes(args) -> list[int]:
    lo, hi = parse_size(args.minbytes, "-b/--minbytes"), parse_size(args.maxbytes, "-e/--maxbytes")
    if args.stepfactor < 2:
        raise NetsimError("-f/--stepfactor must be >= 2")
    if lo <= 0 or hi < lo:
        raise NetsimError(f"-b/-e: need 0 < minbytes <= maxbytes (got {lo}, {hi})")
    out = []
    s = lo
    while s <= hi:
        out.append(s)
        s *= args.stepfactor
    return out


def _check_png_path(path: str) -> None:
    """Fail before simulating when the chart cannot be written."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        raise NetsimError(f"--png {path}: is a directory; give a file name")
    if not os.path.isdir(folder):
        raise NetsimError(f"--png {path}: cannot write (folder {folder} does not exist)")


def main(args) -> int:
    import netsim
    from netsim.micro import read_micro_file

    op = OP_ALIASES.get(args.op.lower())
    if op is None:
        raise NetsimError(f"--op: unknown collective {args.op!r} (known: {', '.join(sorted(set(OP_ALIASES.values())))})")
    if args.png:
        _check_png_path(args.png)
    args.nvlink_note = ""
    t = topology_from_args(args)
    group = select_group(t, args.ranks, args.servers, args.rail)
    if op == "send":
        group = group[:1] + group[-1:]
    cal = netsim.load_net_calibration(args.net_calibration) if args.net_calibration else None
    if args.gpus_per_process < 1:
        raise NetsimError(f"--gpus-per-process must be >= 1, got {args.gpus_per_process}")
    from netsim.protocol import parse_protocol
    parse_protocol(args.protocol)
    opts = dict(pxn=args.pxn, net_calibration=cal, launch_overhead=not args.no_launch_overhead,
                gpus_per_process=args.gpus_per_process, routing=args.routing)
    backends = {}
    if args.backend in ("both", "flow"):
        backends["flow"] = netsim.make_backend("flow", t, check_invariants=args.check, **opts)
    if args.backend in ("both", "analytical"):
        backends["analytical"] = netsim.make_backend("analytical", t, **opts)
    micro_note = ""
    if args.micro:
        micro = read_micro_file(args.micro)
        jobs = [(m.name, m.op, m.size_bytes) for m in micro.ops]
        micro_note = micro.note
    else:
        jobs = [("", op, s) for s in _sizes(args)]
    reqs = [(name, netsim.CollectiveRequest(jop, group if jop != "send" else group[:1] + group[-1:], size,
                                            args.algorithm, protocol=args.protocol)) for name, jop, size in jobs]
    planner = next(iter(backends.values())).planner
    for _name, req in reqs:     # bad group / algorithm: one error line before any output
        planner.prepare(req)
    n = len(group)
    print(f"# {getattr(t, 'name', '') or args.topology}: {t.num_gpus} GPUs; group of {n} GPUs "
          f"over {len({t.server_of(g) for g in group})} servers; op {op if not args.micro else 'MICRO file'}")
    if cal is not None:
        print(f"# network calibration: {cal.label()} ({', '.join(f'{k}={v:.4g}' if isinstance(v, float) else f'{k}={v}' for k, v in cal.constants().items()) or 'no constants'})")
    for note in (args.nvlink_note, micro_note):
        if note:
            print(f"# {note}")
    name_w = max([16] + [len(name) + 1 for name, _ in reqs])
    head = f"{'name':<{name_w}s}" if args.micro else ""
    head += f"{'op':<15s}{'size_B':>12s} {'algo/proto':<18s}"
    for name in backends:
        head += f"{name + ' us':>14s}{'algbw':>9s}{'busbw':>9s}"
    print(head)
    rows = []
    for name, req in reqs:
        jop, size = req.op, req.size_bytes
        line = f"{name:<{name_w}s}" if args.micro else ""
        times = {}
        alg = ""
        for bname, net in backends.items():
            done: list[float] = []
            start = net.now_s if hasattr(net, "now_s") else 0.0
            net.submit(req, start, done.append)
            net.advance(start)
            while not done:
                net.advance(net.next_event_time())
            times[bname] = done[0] - start
            alg = f"{net.records[-1].algorithm}/{net.records[-1].protocol}"
        line += f"{jop:<15s}{size:>12d} {alg:<18s}"
        row = {"name": name, "op": jop, "size": size, "algorithm": alg}
        for bname, tt in times.items():
            algbw = size / tt / 1e9 if tt > 0 else (0.0 if size == 0 else float("inf"))
            bus = algbw * bus_factor(jop, len(req.gpus))
            line += f"{tt * 1e6:14.2f}{algbw:9.2f}{bus:9.2f}"
            row[bname] = bus
        rows.append(row)
        print(line, flush=True)
    launch = "off" if args.no_launch_overhead else f"{args.gpus_per_process} GPU(s) per process"
    print("# GB/s = 1e9 B/s; busbw factors as nccl-tests; flow: max-min flows on the topology, "
          f"analytical: NCCL-like alpha-beta (netsim.analytical); host launch overhead: {launch}")
    if args.png:
        _plot(rows, backends, args.png, n)
        print(f"# chart: {args.png}")
    return 0


def _plot(rows, backends, path: str, n: int) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5))
    ops = list(dict.fromkeys(r["op"] for r in rows))
    styles = {"flow": dict(marker="o", linestyle="-"), "analytical": dict(marker="x", linestyle="--")}
    for o in ops:
        pts = [r for r in rows if r["op"] == o and r["size"] > 0]
        for bname in backends:
            ax.plot([r["size"] for r in pts], [r[bname] for r in pts],
                    label=f"{o} {bname}" if len(ops) > 1 else bname, **styles.get(bname, {}))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size S (bytes)")
    ax.set_ylabel("busbw (GB/s)")
    algs = ", ".join(dict.fromkeys(r["algorithm"] for r in rows))
    ax.set_title(f"{', '.join(ops)}, {n} GPUs ({algs})")
    ax.grid(True, alpha=0.3)
    ax.legend()
    try:
        save_figure(fig, path, 110, ".busbw-")
    except OSError as exc:
        raise NetsimError(f"--png {path}: cannot write ({exc.strerror})") from None
    finally:
        plt.close(fig)
