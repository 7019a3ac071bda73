"""The public measured collective curves of nccl_model.md section 6, each system described as a
topology, and the model's error on each (tables and PNG charts for docs/netsim.md).

    python -m netsim.validation                    # markdown tables: measured vs flow vs analytical
    python -m netsim.validation --png-dir docs/img # also one PNG per curve (docs/img/netsim_*.png)

Numbers are transcribed from shared/reference/nccl_model.md section 6 (tests check the transcription
against that file when it is present). Every system is a topology built from its published
description; measurement conditions that are not network properties (how many GPUs one nccl-tests
process drives, CUDA graphs) are backend options. Nothing in the model is specific to a curve.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
from dataclasses import dataclass, field

from netsim.outfile import save_figure

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30

# ---------------------------------------------------------------- measured data (nccl_model.md section 6)
SIZES_61 = [KiB << i for i in range(24)]            # 1 KiB .. 8 GiB
A100_61_US = [44.8, 44.8, 42.2, 43.4, 42.8, 41.9, 42.5, 44.5, 45.4, 47.7, 50.7, 68.5, 103, 163, 269, 442, 705,
              1348, 2197, 4240, 8238, 16324, 32611, 64911]
H100_61_US = [25.6, 25.6, 26.5, 27.0, 30.2, 33.5, 42.2, 42.5, 42.2, 43.0, 42.0, 44.8, 57.0, 85.3, 125, 199, 325,
              586, 1110, 2143, 4029, 7956, 15806, 31392]
H200_61_US = [29.9, 29.9, 31.2, 30.5, 30.8, 31.2, 30.8, 31.0, 31.1, 31.2, 34.6, 41.3, 53.0, 80.7, 122, 195, 319,
              569, 1087, 2122, 4019, 7952, 15744, 31319]
SIZES_62 = [8 << i for i in range(31)]              # 8 B .. 8 GiB
TCPXO_62_US = [135.8, 123.2, 123.3, 123.4, 123.0, 123.6, 126.6, 147.1, 125.8, 126.9, 131.6, 138.6, 155.2, 159.4,
               159.3, 167.1, 174.2, 203.2, 254.0, 364.6, 571.9, 977.6, 1059.9, 1261.6, 1652.2, 2360.9, 3817.5,
               6759.0, 12646, 24361, 47535]
RING_63_US = {2: 10.0, 3: 13.76, 4: 16.88, 5: 20.8, 6: 25.2, 7: 29.5, 8: 33.7}
RING_64_BUSBW = {n: 367.5e9 for n in range(2, 9)}   # "365-370 GB/s for 2 ... 8 GPUs"
NVLS_64_BUSBW = {2: 370e9, 3: 370e9, 4: 370e9, 5: 420e9, 6: 440e9, 7: 460e9, 8: 480e9}
SIZES_65 = [2 * MiB, 4 * MiB, 8 * MiB, 16 * MiB, 32 * MiB]
TREE_65_US = [113.2, 154.4, 231.4, 420.5, 812.3]


@dataclass
class Curve:
    """One public curve: a system (topology template + parameters), a group, measured points."""
    key: str
    title: str
    source: str
    template: str
    topo_params: dict
    op: str
    n: int                               # group: first n GPUs (over `servers` servers)
    points: list[tuple[int, float]]      # (size B, measured time s) or, metric busbw, (size, busbw B/s)
    servers: int = 1
    algorithm: str = "auto"
    protocol: str = "auto"
    options: dict = field(default_factory=dict)   # make_backend options (gpus_per_process, launch_overhead)
    calibration: dict = field(default_factory=dict)  # NetCalibration fields describing the host (cpu_vendor)
    metric: str = "time"                 # "time" | "busbw"
    note: str = ""
    # size range ("small" < 1 MiB, "big" >= 1 MiB) whose points set this curve's OWN system parameters
    # (`calibration`): it cannot test them, so the acceptance test holds the curve to the other range only
    fitted_range: str = ""

    def group(self, topology) -> tuple[int, ...]:
        per = self.n // self.servers
        return tuple(s * topology.gpus_per_server + i for s in range(self.servers) for i in range(per))


def _us(sizes, times_us):
    return [(s, t * 1e-6) for s, t in zip(sizes, times_us)]


_H100_NODE = dict(gpus=8, gpu_type="H100", nvlink_bandwidth_Bps=450e9, psw_count=1)
_ONE_PROCESS_8 = {"gpus_per_process": 8}

CURVES: list[Curve] = [
    Curve("6.1-a100", "8 x A100 all-reduce (Azure ND A100 v4, NCCL 2.18.5)",
          "nccl_model.md 6.1 (Azure AI-benchmarking-guide, in-place)", "spectrum-x",
          dict(gpus=8, gpu_type="A100", nvlink_bandwidth_Bps=300e9, nic_bandwidth_Bps="200Gbps", psw_count=1),
          "all_reduce", 8, _us(SIZES_61, A100_61_US), options=_ONE_PROCESS_8,
          note="NVLink3 12 x 25 GB/s per direction; one all_reduce_perf process drives the 8 GPUs"),
    Curve("6.1-h100", "8 x H100 all-reduce (Azure ND H100 v5, NCCL 2.18.5)",
          "nccl_model.md 6.1 (Azure AI-benchmarking-guide, in-place)", "spectrum-x", dict(_H100_NODE),
          "all_reduce", 8, _us(SIZES_61, H100_61_US), options=_ONE_PROCESS_8,
          note="NVLink4 18 links, 450 GB/s per direction; one process drives the 8 GPUs"),
    Curve("6.1-h200", "8 x H200 all-reduce (Azure ND H200 v5, NCCL 2.20.5)",
          "nccl_model.md 6.1 (Azure AI-benchmarking-guide, in-place)", "spectrum-x",
          dict(_H100_NODE, gpu_type="H200"), "all_reduce", 8, _us(SIZES_61, H200_61_US), options=_ONE_PROCESS_8,
          note="same NVLink4 fabric as H100; one process drives the 8 GPUs"),
    Curve("6.2-tcpxo", "2 x 8 H100 all-reduce over GPUDirect-TCPXO (GCP A3 Mega)",
          "nccl_model.md 6.2 (lessizzmore/create-a3mega-ztan-fork, out-of-place)", "spectrum-x",
          dict(gpus=16, gpu_type="H100", nvlink_bandwidth_Bps=450e9, nic_bandwidth_Bps="200Gbps", psw_count=1),
          "all_reduce", 16, _us(SIZES_62, TCPXO_62_US), servers=2,
          calibration={"network_latency_s": 50e-6, "ll128_over_network": False}, fitted_range="small",
          note="8 GPU NICs of 200 Gb/s per node (rail-aligned). GPUDirect-TCPXO is a property of that network, "
               "given as NIC parameters (NetCalibration): 50 us latency per network hop, the value that "
               "matches the ~123 us small-message floor; no LL128 across it (TCP, not RDMA: the 1-16 MiB slope "
               "is LL's 39 GB/s cap). -np 16, one GPU per process"),
    Curve("6.3-ring-latency", "DGX-A100 Ring latency vs GPU count (8-128 B, 1 channel)",
          "nccl_model.md 6.3 (nccl-tests #123)", "spectrum-x",
          dict(gpus=8, gpu_type="A100", nvlink_bandwidth_Bps=300e9, psw_count=1),
          "all_reduce", 0, [(64, RING_63_US[n] * 1e-6) for n in RING_63_US], algorithm="ring",
          note="x axis: GPUs (2..8), one process drives all (-g N): gpus_per_process = N"),
    Curve("6.4-ring-peak", "8 x H100 peak Ring busbw vs GPU count (4 GiB)", "nccl_model.md 6.4 (NVIDIA/nccl #1455)",
          "spectrum-x", dict(_H100_NODE), "all_reduce", 0, [(4 * GiB, RING_64_BUSBW[n]) for n in RING_64_BUSBW],
          algorithm="ring", metric="busbw", note="x axis: GPUs (2..8)"),
    Curve("6.4-nvls-peak", "8 x H100 peak NVLS busbw vs GPU count (4 GiB)", "nccl_model.md 6.4 (NVIDIA/nccl #1455)",
          "spectrum-x", dict(_H100_NODE), "all_reduce", 0, [(4 * GiB, NVLS_64_BUSBW[n]) for n in NVLS_64_BUSBW],
          algorithm="nvls", metric="busbw", note="x axis: GPUs (2..8)"),
    Curve("6.5-tree-2x1", "2 nodes x 1 H100 Tree all-reduce", "nccl_model.md 6.5 (nccl-tests #232, out-of-place)",
          "spectrum-x", dict(gpus=2, gpus_per_server=1, gpu_type="H100", nic_bandwidth_Bps="400Gbps", psw_count=1),
          "all_reduce", 2, _us(SIZES_65, TREE_65_US), servers=2, algorithm="tree",
          note="4 NICs per node, speed not printed: taken as 4 x 100 Gb/s = one 400 Gb/s port; one GPU per process"),
    Curve("6.6-h20-16", "2 x 8 H20 (16 x CX7 NDR) all-reduce floor, 4-512 B",
          "nccl_model.md 6.6 (NVIDIA/nccl #1244, NCCL 2.21.5, NVLSTree)", "spectrum-x",
          dict(gpus=16, gpu_type="H20", nvlink_bandwidth_Bps=450e9, nic_bandwidth_Bps="400Gbps", psw_count=1),
          "all_reduce", 16, [(64, 47e-6)], servers=2,
          note="measured with NVLSTree (not modelled: the automatic choice runs); one GPU per process"),
    Curve("6.6-a100-16", "2 x DGX-A100 Ring all-reduce floor, 8-512 B",
          "nccl_model.md 6.6 (NVIDIA/nccl #812, NCCL 2.16.5)", "spectrum-x",
          dict(gpus=16, gpu_type="A100", nvlink_bandwidth_Bps=300e9, nic_bandwidth_Bps="200Gbps", psw_count=1),
          "all_reduce", 16, [(64, 93e-6)], servers=2, algorithm="ring", calibration={"cpu_vendor": "amd"},
          note="8 HDR 200 Gb/s NICs per node, AMD EPYC hosts; one GPU per process"),
    Curve("6.6-h20-8", "8 x H20 one node all-reduce floor (4 B - 4 KiB)", "nccl_model.md 6.6 (deepseek-ai/DeepEP #303)",
          "spectrum-x", dict(_H100_NODE, gpu_type="H20"), "all_reduce", 8, [(16, 12.5e-6), (4096, 16.7e-6)],
          note="one GPU per process (torch.distributed)"),
]


@dataclass
class Point:
    x: float                 # size (B) or GPU count
    size: float              # message size (B)
    measured: float
    model: dict              # backend -> value (s or B/s)
    choice: str              # algorithm/protocol

    def error(self, backend: str) -> float:
        return self.model[backend] / self.measured - 1.0


def _busbw(op: str, n: int, size: float, t: float) -> float:
    from netsim.api import bus_factor
    return size / t * bus_factor(op, n) if t > 0 else math.inf


def evaluate(c: Curve, backends=("flow", "analytical"), topology=None) -> list[Point]:
    """The model's value at every measured point of a curve, per backend."""
    import netsim
    import topo

    t = topology or topo.build(c.template, **c.topo_params)
    cal = netsim.NetCalibration(**c.calibration) if c.calibration else None
    out: list[Point] = []
    by_n = c.n == 0
    for i, (x, meas) in enumerate(c.points):
        n = (sorted(RING_63_US) if c.key.startswith("6.3") else list(range(2, 9)))[i] if by_n else c.n
        size = x
        options = dict(c.options)
        if c.key.startswith("6.3"):
            options["gpus_per_process"] = n
        group = c.group(t) if not by_n else tuple(range(n))
        req = netsim.CollectiveRequest(c.op, group, size, c.algorithm, protocol=c.protocol)
        model, choice = {}, ""
        for kind in backends:
            net = netsim.make_backend(kind, t, net_calibration=cal, **options)
            got = net.estimate(req)
            model[kind] = _busbw(c.op, n, size, got) if c.metric == "busbw" else got
            _g, _s, _f, alg, proto = net.planner.choose(req)
            from netsim.calibration import PROTOCOL_NAMES
            choice = f"{alg}/{PROTOCOL_NAMES[proto]}"
        out.append(Point(n if by_n else size, size, meas, model, choice))
    return out


def medians(points: list[Point], backend: str = "flow") -> tuple[float | None, float | None]:
    """(median |error| for sizes >= 1 MiB, median |error| below; None where a curve has no point)."""
    big = [abs(p.error(backend)) for p in points if p.size >= MiB]
    small = [abs(p.error(backend)) for p in points if p.size < MiB]
    return (statistics.median(big) if big else None, statistics.median(small) if small else None)


def _fmt_size(x: float) -> str:
    for unit, div in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if x >= div:
            return f"{x / div:g} {unit}"
    return f"{x:g} B"


def markdown(c: Curve, points: list[Point]) -> str:
    busbw = c.metric == "busbw"
    unit = "GB/s" if busbw else "us"
    scale = 1e-9 if busbw else 1e6
    xname = "GPUs" if c.n == 0 else "size"
    lines = [f"**{c.key}: {c.title}** ({c.source}). {c.note}.", "",
             f"| {xname} | measured {unit} | flow {unit} | err | analytical {unit} | choice |", "|---|---|---|---|---|---|"]
    for p in points:
        x = f"{int(p.x)}" if c.n == 0 else _fmt_size(p.x)
        lines.append(f"| {x} | {p.measured * scale:,.1f} | {p.model['flow'] * scale:,.1f} | "
                     f"{100 * p.error('flow'):+.0f}% | {p.model['analytical'] * scale:,.1f} | {p.choice} |")
    big, small = medians(points)
    summ = []
    if big is not None:
        summ.append(f"median |error| >= 1 MiB: {100 * big:.1f}%")
    if small is not None:
        summ.append(f"below 1 MiB: {100 * small:.1f}%")
    agree = max(abs(p.model["analytical"] / p.model["flow"] - 1) for p in points)
    summ.append(f"flow vs analytical: max {100 * agree:.2f}%")
    lines += ["", "; ".join(summ) + "."]
    return "\n".join(lines)


def plot(c: Curve, points: list[Point], path: str) -> None:
    """Size curves: busbw vs size (nccl-tests' view, which shows the mid-size ramp) and model / measured
    time; GPU-count curves: the value vs GPUs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    styles = [("measured (nccl_model.md)", "ko-", {}), ("netsim flow", "s--", dict(color="tab:blue", mfc="none")),
              ("netsim analytical", "x:", dict(color="tab:orange"))]
    if c.n == 0:
        fig, ax = plt.subplots(figsize=(6.4, 4.0))
        scale = 1e-9 if c.metric == "busbw" else 1e6
        xs = [p.x for p in points]
        for (label, fmt, kw), ys in zip(styles, ([p.measured for p in points], [p.model["flow"] for p in points],
                                                 [p.model["analytical"] for p in points])):
            ax.plot(xs, [y * scale for y in ys], fmt, label=label, **kw)
        ax.set_xlabel("GPUs")
        ax.set_ylabel("busbw (GB/s)" if c.metric == "busbw" else "time (us)")
        ax.set_ylim(bottom=0)
        axes = [ax]
    else:
        fig, axes = plt.subplots(1, 2, figsize=(11, 4.0))
        n = c.n
        xs = [p.size for p in points]
        for (label, fmt, kw), key in zip(styles, ("measured", "flow", "analytical")):
            ts = [p.measured if key == "measured" else p.model[key] for p in points]
            axes[0].plot(xs, [_busbw(c.op, n, x, t) * 1e-9 for x, t in zip(xs, ts)], fmt, label=label, **kw)
            if key != "measured":
                axes[1].plot(xs, [t / p.measured for t, p in zip(ts, points)], fmt, label=label, **kw)
        axes[1].axhline(1.0, color="k", lw=0.8)
        for lim in (0.9, 1.1):
            axes[1].axhline(lim, color="0.6", lw=0.6, ls="--")
        axes[0].set_ylabel("busbw (GB/s)")
        axes[1].set_ylabel("model time / measured time")
        for ax in axes:
            ax.set_xscale("log", base=2)
            ax.set_xlabel("size S (bytes)")
    for ax in axes:
        ax.grid(True, alpha=0.3, which="both")
        ax.legend(fontsize=8)
    fig.suptitle(f"{c.key}: {c.title}", fontsize=10)
    try:
        save_figure(fig, path, 90, ".curve-")
    finally:
        plt.close(fig)


def png_name(c: Curve) -> str:
    return f"netsim_{c.key.replace('.', '_').replace('-', '_')}.png"


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def summary(results: list[tuple[Curve, list[Point]]]) -> str:
    lines = ["| curve | points | median abs error >= 1 MiB | below 1 MiB | flow vs analytical (max) |",
             "|---|---|---|---|---|"]
    for c, pts in results:
        big, small = medians(pts)
        agree = max(abs(p.model["analytical"] / p.model["flow"] - 1) for p in pts)
        lines.append(f"| {c.key} | {len(pts)} | {_pct(big)} | {_pct(small)} | {100 * agree:.2f}% |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m netsim.validation", description=__doc__.split("\n")[0])
    ap.add_argument("--png-dir", help="write one PNG per curve here (netsim_<key>.png)")
    ap.add_argument("--img-prefix", default="img/", help="image path prefix in the markdown (default img/)")
    ap.add_argument("curves", nargs="*", help="curve keys (default: all)")
    args = ap.parse_args(argv)
    unknown = sorted(set(args.curves) - {c.key for c in CURVES})
    if unknown:
        ap.error(f"unknown curve {unknown[0]!r} (known: {', '.join(c.key for c in CURVES)})")
    if args.png_dir and not os.path.isdir(args.png_dir):
        ap.error(f"--png-dir {args.png_dir}: not a directory")
    results = [(c, evaluate(c)) for c in CURVES if not args.curves or c.key in args.curves]
    print(summary(results))
    print()
    for c, pts in results:
        print(markdown(c, pts))
        print()
        if args.png_dir:
            plot(c, pts, os.path.join(args.png_dir, png_name(c)))
            print(f"![{c.key}]({args.img_prefix}{png_name(c)})")
            print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
