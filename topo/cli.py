"""`clustersim topo` — generate, inspect and draw topologies.

    clustersim topo Spectrum-X -g 128                 # SimAI flags and defaults, SimAI file name
    clustersim topo -topo AlibabaHPN --dp -g 128      # the same with SimAI's -topo flag
    clustersim topo --ro -g 16 -gt H20 -bw 200Gbps    # SimAI custom rail-optimized
    clustersim topo multi-pod -g 16384 --core-oversubscription 2 -o fabric.txt
    clustersim topo info FILE|TEMPLATE [flags] [--json] [--radix N]
    clustersim topo draw FILE|TEMPLATE [flags] -o topo.png
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from topo.errors import TopoError

SIMAI_GPU_TYPES = ("A100", "A800", "H100", "H800")


def register(subparsers) -> None:
    """Add this package's subcommands to the clustersim parser."""
    p = subparsers.add_parser(
        "topo", allow_abbrev=False,
        help="generate / inspect / draw cluster topologies (SimAI-compatible files)",
        description="Generate a topology file (SimAI format) from a template, or `info` / `draw` one. "
                    "Templates: spectrum-x, alibaba-hpn, dcn+, rail-optimized, non-rail (SimAI's), "
                    "multi-pod, fat-tree, nvl72, nvl36, pcie (clustersim's).",
        formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("what", nargs="*", metavar="TEMPLATE | info FILE | draw FILE",
                   help="template name, or `info FILE`, or `draw FILE` (FILE may also be a template)")
    s = p.add_argument_group("SimAI generator flags (same names and defaults)")
    s.add_argument("-topo", "--topology", dest="topology", help="Spectrum-X | AlibabaHPN | DCN+")
    s.add_argument("--ro", action="store_true", help="rail-optimized (without -topo)")
    s.add_argument("--dt", action="store_true", help="dual ToR")
    s.add_argument("--dp", action="store_true", help="dual plane")
    s.add_argument("-g", "--gpu", dest="gpus", type=int, help="GPUs (32; template defaults apply)")
    s.add_argument("-er", "--error_rate", dest="error_rate", help="link error rate (0)")
    s.add_argument("-gps", "--gpu_per_server", dest="gpus_per_server", type=int, help="GPUs per server (8)")
    s.add_argument("-gt", "--gpu_type", dest="gpu_type", help="GPU type string (H100)")
    s.add_argument("-nsps", "--nv_switch_per_server", dest="nvswitch_per_server", type=int,
                   help="NVSwitch nodes per server, each linked to every GPU at -nvbw (1)")
    s.add_argument("-nvbw", "--nvlink_bw", dest="nvlink_bandwidth_Bps", help="GPU-NVSwitch rate (2880Gbps)")
    s.add_argument("-nl", "--nv_latency", dest="nvlink_latency_s", help="NVLink delay (0.000025ms)")
    s.add_argument("-l", "--latency", dest="latency_s", help="network link delay (0.0005ms)")
    s.add_argument("-bw", "--bandwidth", dest="nic_bandwidth_Bps", help="GPU/NIC-ASW rate (400Gbps)")
    s.add_argument("-asn", "-asw", "--asw_switch_num", dest="asw_count", type=int,
                   help="ASW count (8; corrected to what the wiring needs, with a warning)")
    s.add_argument("-npa", "-nps", "--nics_per_aswitch", dest="nics_per_asw", type=int,
                   help="NICs (GPUs) per ASW (64)")
    s.add_argument("-psn", "--psw_switch_num", dest="psw_count", type=int, help="PSWs per pod (64)")
    s.add_argument("-apbw", "--ap_bandwidth", dest="asw_psw_bandwidth_Bps", help="ASW-PSW rate (400Gbps)")
    s.add_argument("-app", "--asw_per_psw", dest="asw_per_psw", type=int, help="ASW ports per PSW (64)")
    c = p.add_argument_group("clustersim options")
    c.add_argument("-o", "--output", "--out", dest="output", help="output file or directory (default: SimAI's file name in .)")
    c.add_argument("--pods", type=int, help="multi-pod: number of pods (default: as needed)")
    c.add_argument("--segments-per-pod", type=int, help="multi-pod: segments per pod")
    c.add_argument("--tor-oversubscription", type=float, help="multi-pod: ASW down/up bandwidth (sets PSWs per pod)")
    c.add_argument("--core-oversubscription", dest="core_oversubscription", type=float,
                   help="multi-pod: PSW down/up bandwidth towards the core (1)")
    c.add_argument("--oversubscription", type=float,
                   help="multi-pod: = --core-oversubscription; other templates: = --tor-oversubscription")
    c.add_argument("--core-radix", type=int, help="multi-pod: ports per core switch (64)")
    c.add_argument("-k", "--k", dest="k", type=int, help="fat-tree arity (16)")
    c.add_argument("--nvswitch-chips", type=int,
                   help="faithful NVSwitch: chips per NVLink domain, GPU bandwidth split over them")
    c.add_argument("--nvswitch-chip-links", help="NVLink ports per GPU to each chip, e.g. 5,4,4,5 (HGX H100)")
    c.add_argument("--nvlink-domain", dest="nvlink_domain_size", type=int, help="GPUs per NVLink domain")
    c.add_argument("--nics", action="store_true", help="model NICs as nodes (GPU -PCIe- NIC - ToR)")
    c.add_argument("--nic-bw-per-gpu", dest="nic_bandwidth_per_gpu_Bps",
                   help="scale-out bandwidth per GPU (instead of -bw); port rate = this x GPUs per NIC / ToRs")
    c.add_argument("--gpus-per-nic", type=int, help="GPUs sharing one NIC (1; pcie template 2)")
    c.add_argument("--pcie-bw", dest="pcie_bandwidth_Bps", help="PCIe link rate (512Gbps Gen5 x16)")
    c.add_argument("--no-network", dest="network", action="store_false", default=None,
                   help="servers / NVLink domains only, no scale-out network")
    c.add_argument("--radix", type=int, help="info: check switch port counts against this radix")
    c.add_argument("--json", action="store_true", help="info: print the summary as JSON")
    p.set_defaults(func=main)
    p.parse_known_args = _positionals_anywhere(p.parse_known_args)


def _positionals_anywhere(parse):
    """Let `info FILE` / `draw FILE` words follow flags (`topo info --json FILE`, `topo draw -o x.png T`).

    argparse fills a `*` positional from the first run of words only and reports later words as
    unrecognized; those words belong to `what`. Unknown options stay unrecognized (error as before)."""
    def parse_known_args(args=None, namespace=None):
        ns, extras = parse(args, namespace)
        words = [a for a in extras if not a.startswith("-")]
        if words and not any(a.startswith("-") for a in extras):
            ns.what = list(ns.what or []) + words
            extras = []
        return ns, extras
    return parse_known_args


_PARAMS = ("gpus", "gpus_per_server", "gpu_type", "nvswitch_per_server", "nvlink_bandwidth_Bps",
           "nvlink_latency_s", "latency_s", "nic_bandwidth_Bps", "asw_count", "nics_per_asw", "psw_count",
           "asw_psw_bandwidth_Bps", "asw_per_psw", "error_rate", "pods", "segments_per_pod",
           "tor_oversubscription", "core_oversubscription", "oversubscription", "core_radix", "k", "nvswitch_chips",
           "nvswitch_chip_links", "nvlink_domain_size", "gpus_per_nic", "pcie_bandwidth_Bps", "network",
           "nic_bandwidth_per_gpu_Bps")


def _template_of(args, name: str | None) -> str:
    from topo.templates import canonical_template

    if name and args.topology:
        raise TopoError(f"-topo: give the template either as TEMPLATE or as -topo, not both ({name}, {args.topology})")
    name = name or args.topology
    if name:
        return canonical_template(name)
    return "rail-optimized" if args.ro else "non-rail"


def _build(args, name: str | None):
    from topo.templates import build

    template = _template_of(args, name)
    params = {k: getattr(args, k) for k in _PARAMS if getattr(args, k, None) is not None}
    if args.dt:
        params["dual_tor"] = True
    if args.dp:
        params["dual_plane"] = True
        params["dual_tor"] = True
    if args.nics:
        params["nics"] = True
    if args.ro and template not in ("rail-optimized", "non-rail"):
        params["rail_optimized"] = True
    return build(template, flag_names=True, **params)


def _load(args, target: str):
    """A file path, or a template name built with the flags given."""
    from topo.simai_file import read_simai_topology

    if os.path.exists(target):
        return read_simai_topology(target)
    try:
        return _build(args, target)
    except TopoError as exc:
        if str(exc).startswith("template: unknown template"):
            raise TopoError(f"{target}: no such file and not a template name") from None
        raise


def _output_path(out: str, default_name: str) -> str:
    """`-o FILE|DIR`: an existing directory (or a path ending in '/') gets `default_name` inside it."""
    if os.path.isdir(out) or out.endswith(("/", os.sep)):
        out = os.path.join(out, default_name)
    d = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(d):
        raise TopoError(f"-o: {d} is not a directory" if os.path.exists(d) else f"-o: directory {d} does not exist")
    return out


def main(args) -> int:
    what = list(args.what)
    if what and what[0] in ("info", "draw"):
        cmd = what[0]
        if len(what) != 2:
            raise TopoError(f"topo {cmd}: expected exactly one FILE or template, got {len(what) - 1}")
        t = _load(args, what[1])
        return _info(args, t) if cmd == "info" else _draw(args, t)
    if len(what) > 1:
        raise TopoError(f"topo: expected one template name, got {' '.join(what)}")
    t = _build(args, what[0] if what else None)
    from topo.simai_file import write_simai_topology

    out = _output_path(args.output or t.name, t.name)
    from topo.templates import NVLINK_DEFAULT_NOTE
    for note in t.notes:
        if note != NVLINK_DEFAULT_NOTE:   # SimAI's own default, written as SimAI writes it
            print(f"warning: {note}", file=sys.stderr)
    for w in write_simai_topology(t, out):
        print(f"warning: {w}", file=sys.stderr)
    if t.gpu_type not in SIMAI_GPU_TYPES:
        print(f"note: SimAI knows GPU types {' '.join(SIMAI_GPU_TYPES)}; it reads '{t.gpu_type}' as NONE",
              file=sys.stderr)
    print(f"wrote {out}: {len(t.nodes)} nodes ({t.num_gpus} GPUs), {t.num_cables} links")
    return 0


def _info(args, t) -> int:
    from topo.analysis import format_summary, summarize, validate

    s = summarize(t)
    problems = validate(t, radix=args.radix)
    if args.json:
        s["valid"] = not problems
        s["problems"] = problems
        print(json.dumps(s, indent=2))
    else:
        print(format_summary(s))
        print("valid        " + ("yes" if not problems else "NO: " + "; ".join(problems[:5])))
    return 0 if not problems else 1


def _draw(args, t) -> int:
    from topo.draw import draw_topology

    out = _output_path(args.output or "topology.png", "topology.png")
    draw_topology(t, out)
    print(f"wrote {out}")
    return 0
