"""NCCL-like protocol layer of the collective model: per (algorithm, protocol) latency terms, wire
efficiency, LL cap, pipeline fill, launch overhead and the candidates the automatic choice considers.

The constants and their sources are in netsim.calibration; a NetCalibration (netsim.netcal) overrides
them for one system. The same NetModel feeds both backends (netsim.backend), so the protocol, fill
and latency terms are identical; the flow engine adds only the sharing of bandwidth.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from netsim import calibration as cal
from netsim.errors import NetsimError
from netsim.netcal import NetCalibration

PROTOCOL_NAMES = ("auto", "ll", "ll128", "simple")


def parse_protocol(text: str) -> str:
    key = str(text).strip().lower()
    if key not in PROTOCOL_NAMES:
        raise NetsimError(f"unknown protocol {text!r} (known: auto, LL, LL128, Simple)")
    return key


def link_class(kinds) -> str:
    """The slowest link class of a hop: network > pcie > nvlink."""
    if "network" in kinds:
        return "network"
    if "pcie" in kinds:
        return "pcie"
    return "nvlink"


@dataclass(frozen=True)
class HopContext:
    """What a hop latency depends on besides its link class: the algorithm family, the protocol and
    the group's span (multi-unit rings pay NCCL's netOverhead on every step; a group with one GPU per
    unit uses NCCL's Tree network row for every algorithm)."""
    family: str
    proto: str
    multi_unit: bool
    one_per_unit: bool


class NetModel:
    """Protocol-level constants for one topology's GPU type, with a user calibration applied."""

    def __init__(self, gpu_type: str, calibration: NetCalibration | None = None, *,
                 launch_overhead: bool = True, gpus_per_process: int = 1):
        c = calibration or NetCalibration()
        if not isinstance(gpus_per_process, int) or isinstance(gpus_per_process, bool) or gpus_per_process < 1:
            raise NetsimError(f"gpus_per_process must be an integer >= 1, got {gpus_per_process!r}")
        self.calibration = c
        self.gpu_type = gpu_type
        self.arch = cal.gpu_arch(gpu_type)
        self.cpu = c.cpu_vendor or "intel"
        self.hop_scale = {
            "nvlink": cal.NVLINK_HOP_SCALE_BY_ARCH[self.arch] * _or(c.nvlink_hop_scale, 1.0),
            "pcie": _or(c.pcie_hop_scale, 1.0),
            "network": _or(c.network_hop_scale, 1.0),
        }
        self.network_latency_s = _or(c.network_latency_s, 0.0)
        self.launch_s = _or(c.launch_s_per_gpu, cal.LAUNCH_S_PER_GPU) * gpus_per_process if launch_overhead else 0.0
        self.fill_scale = _or(c.fill_scale, 1.0)
        self.nvls_efficiency = _or(c.nvls_efficiency, cal.NVLS_PORT_EFFICIENCY)
        self.comm_channels = cal.COMM_CHANNELS[self.arch]
        self.nvls_channels = cal.NVLS_CHANNELS.get(self.arch, 16)
        self.plateau = cal.RING_PLATEAU[self.arch]
        self._hop_cache: dict = {}

    # ------------------------------------------------------------ latency
    def hop_alpha_s(self, cls: str, ctx: HopContext) -> float:
        """Per-hop latency (without propagation) of a hop of link class `cls`."""
        key = (cls, ctx)
        got = self._hop_cache.get(key)
        if got is not None:
            return got
        i = cal.PROTOCOLS.index(ctx.proto)
        fam = "tree" if ctx.family == "tree" else "ring"
        row = "tree" if (cls == "network" and ctx.one_per_unit) else fam
        got = cal.HOP_LATENCY_S[(cls, row)][i] * self.hop_scale[cls]
        if cls == "network":
            got += self.network_latency_s
        elif ctx.multi_unit and ctx.family == "ring":
            over = cal.NET_OVERHEAD_S[self.cpu] * (cal.NET_OVERHEAD_SIMPLE_FACTOR if ctx.proto == "simple" else 1.0)
            got = max(got, over)
        self._hop_cache[key] = got
        return got

    def base_s(self, family: str, proto: str) -> float:
        """Launch overhead + NCCL base latency of one call (NVLS: its whole latency is per hop)."""
        if family == "nvls":
            return self.launch_s
        return self.launch_s + cal.BASE_LATENCY_S[(family, proto)]

    def nvls_latency_s(self) -> float:
        return cal.NVLS_LATENCY_S * self.hop_scale["nvlink"] / cal.NVLINK_HOP_SCALE_BY_ARCH[self.arch]

    def plateau_factor(self, family: str, proto: str, op: str, units: int, size: float, n: int) -> float:
        """NCCL's multi-node Ring/Simple all-reduce latency factor (size >= 64 B per channel and rank)."""
        if (family == "ring" and proto == "simple" and op == "all_reduce" and units > 1
                and size / (self.comm_channels * n) >= 64):
            return self.plateau
        return 1.0

    # ------------------------------------------------------------ bandwidth
    def efficiency(self, family: str, proto: str) -> float:
        return cal.PROTO_EFFICIENCY[(family, proto)]

    def ll_cap_algbw_Bps(self, family: str, proto: str, op: str, n: int, units: int) -> float:
        """NCCL's LL bus-bandwidth cap as an algorithm bandwidth (inf when it does not apply)."""
        if proto != "ll" or family not in ("ring", "tree") or n < 2:
            return float("inf")
        if units <= 1:
            bus = cal.LL_MAX_BUSBW_1NODE[self.arch]
        else:
            two, more = cal.LL_MAX_BUSBW_MULTI[self.cpu]
            bus = two if units == 2 else more
        if family == "tree":
            return bus * 0.5
        if op == "all_reduce":
            return bus * n / (2 * (n - 1))
        if op in ("all_gather", "reduce_scatter"):
            return bus * n / (n - 1)
        return bus

    # ------------------------------------------------------------ fill
    def fill_chunk_bytes(self, kind: str, proto: str) -> float:
        return cal.FILL_CHUNK_BYTES.get((kind, proto), 0.0) * self.fill_scale

    def channels(self, family: str, one_per_unit: bool = False, net_Bps: float = 0.0) -> int:
        """NCCL channels of a collective: NVLS channels, the communicator's channels, or for a group
        with one GPU per node 2 x ceil(network bandwidth / top inter-node channel speed)."""
        if family == "nvls":
            return self.nvls_channels
        if one_per_unit and 0 < net_Bps < float("inf"):
            return 2 * max(1, math.ceil(net_Bps / cal.INTER_CHANNEL_SPEED_BPS[self.arch] - 1e-9))
        return self.comm_channels

    # ------------------------------------------------------------ protocols
    def protocols(self, algorithm: str, op: str, ll128_ok: bool, units: int = 1) -> tuple[str, ...]:
        """Protocols an algorithm can run (NCCL 2.1/2.2): NVLS Simple only; point-to-point LL and
        Simple (NCCL's p2p kernels have no LL128); LL128 only where every intra-unit path is NVLink and,
        across units, where the network keeps 128-byte writes whole and ordered (the calibration's
        ll128_over_network, default yes: InfiniBand / RoCE with GPUDirect RDMA)."""
        fam = cal.FAMILY[algorithm]
        if units > 1 and self.calibration.ll128_over_network is False:
            ll128_ok = False
        if fam == "nvls":
            return ("simple",)
        if fam == "p2p":
            return ("ll", "simple")
        return ("ll", "ll128", "simple") if ll128_ok else ("ll", "simple")


def _or(v, default):
    return default if v is None else v


def fill_factor(frac: float, size: float, nch: float, stages: float, chunk: float) -> float:
    """Bytes multiplier of a flow for pipeline fill (netsim.calibration): 1 + D C / (s + C), s = payload
    bytes per channel."""
    if stages <= 0 or chunk <= 0 or size <= 0:
        return 1.0
    s = frac * size / max(nch, 1e-12)
    return 1.0 + stages * chunk / (s + chunk)
