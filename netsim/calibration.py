"""Physical constants of the network model, each with its source.

Link capacities come from the topology (line rate). The engine uses *effective* capacities:
line rate x efficiency of the link class, calibrated from collective-level figures in
shared/reference/hardware.md (large messages, where latency no longer matters):

- NVLink, H100 class: 8 x H100 ring all-reduce busbw ~370 GB/s against a 450 GB/s per-direction line
  rate. A ring all-reduce moves 2(n-1)/n x S over every GPU's NVLink port, so busbw equals the
  effective per-direction port bandwidth: 370 / 450 = 0.822.
- NVLink, A100 class: ~230 GB/s busbw against 12 x 25 = 300 GB/s per direction: 230 / 300 = 0.767.
- NVLS (NVLink SHARP) port throughput, H100: all-reduce busbw ~480 GB/s at n = 8. In the NVLS model each
  GPU sends S (1 + 1/n) bytes to the switch, so busbw = 2(n-1)/(n+1) x B_nvls and
  B_nvls = 480 x 9 / 14 = 308.6 GB/s = 0.686 x 450 GB/s. Check: n = 4 gives 1.2 x 308.6 = 370 GB/s,
  the ~370 GB/s hardware.md gives for 2-4 GPUs.
- Network (NIC) links: NDR 400 Gb/s (50 GB/s) reaches ~46-48 GB/s through NCCL: 47 / 50 = 0.94;
  HDR 200 Gb/s (25 GB/s) ~24 GB/s: 0.96 (used for links <= 25 GB/s).
- PCIe: no collective figure in hardware.md; 0.80 is an assumption (typical DMA efficiency).

Latencies (the alpha terms): a per-step software overhead per link class, added to the per-hop
propagation latencies of the topology. A piece pays each hop's alpha once along its path, so a ring
across servers pays the network alpha only on the hops that leave a server (netsim.resolve).
- NVLink step: 1.0 us. Source: hardware.md gives an 8 x H100 all-reduce floor of 13-20 us; a ring
  all-reduce on 8 GPUs has 2(n-1) = 14 steps -> 14 x (1.0 us + 2 x 25 ns hops) = 14.7 us.
- Network step: 5.0 us. Assumption (hardware.md has no inter-node latency figure): typical
  InfiniBand/RoCE send-receive round through NCCL proxies is a few microseconds.
- PCIe step: 2.0 us (assumption).
- NVLS phase: 8.0 us per phase (2 phases per all-reduce). Assumption chosen so that NVLS is not the
  small-message choice on 8 x H100 (hardware.md: NVLS needs large messages to pay off).
"""

from __future__ import annotations

NVLINK_EFFICIENCY_BY_GPU = {
    "A100": 230.0 / 300.0, "A800": 230.0 / 300.0,
    "H100": 370.0 / 450.0, "H800": 370.0 / 450.0, "H200": 370.0 / 450.0, "H20": 370.0 / 450.0,
}
NVLINK_EFFICIENCY_DEFAULT = 370.0 / 450.0     # newer NVLink generations: assumed like NVLink4
NVLS_PORT_EFFICIENCY = (480.0 * 9.0 / 14.0) / 450.0
NVLS_GPUS = ("H100", "H200", "H800", "H20", "B200", "GB200", "GB300", "B300")
NET_EFFICIENCY_FAST = 47.0 / 50.0             # links faster than 25 GB/s
NET_EFFICIENCY_SLOW = 24.0 / 25.0             # links up to 25 GB/s (HDR class)
PCIE_EFFICIENCY = 0.80

ALPHA_S = {"nvlink": 1.0e-6, "network": 5.0e-6, "pcie": 2.0e-6}
NVLS_PHASE_ALPHA_S = 8.0e-6


# NVLink line rate per GPU, one direction (hardware.md: datasheet per-GPU figures, both directions
# summed, halved). Used by `clustersim collective` for templates when -nvbw is not given, so that
# the efficiencies above are applied to a line rate (SimAI's template default, 2880 Gbps, is an
# effective H100 figure). Longest matching prefix of the topology's gpu_type wins.
NVLINK_LINE_BPS_BY_GPU = {
    "A100": 300e9, "H100": 450e9, "H200": 450e9, "H20": 450e9, "H800": 200e9,
    "B200": 900e9, "GB200": 900e9, "MI300X": 448e9,
}


def nvlink_line_Bps(gpu_type: str) -> float | None:
    """Datasheet NVLink rate per direction of a GPU type (None when unknown)."""
    key = (gpu_type or "").upper()
    best = max((name for name in NVLINK_LINE_BPS_BY_GPU if key.startswith(name)), key=len, default=None)
    return None if best is None else NVLINK_LINE_BPS_BY_GPU[best]


def nvlink_efficiency(gpu_type: str) -> float:
    key = (gpu_type or "").upper()
    for name, eff in NVLINK_EFFICIENCY_BY_GPU.items():
        if key.startswith(name):
            return eff
    return NVLINK_EFFICIENCY_DEFAULT


def link_efficiency(kind: str, bandwidth_Bps: float, gpu_type: str) -> float:
    if kind == "nvlink":
        return nvlink_efficiency(gpu_type)
    if kind == "network":
        return NET_EFFICIENCY_SLOW if bandwidth_Bps <= 25e9 * 1.0001 else NET_EFFICIENCY_FAST
    return PCIE_EFFICIENCY


def supports_nvls(gpu_type: str) -> bool:
    key = (gpu_type or "").upper()
    return any(key.startswith(g) for g in NVLS_GPUS)
