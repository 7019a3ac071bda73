"""Physical constants of the network model, each with its source.

Sources: shared/reference/nccl_model.md (NCCL 2.30.7 cost model: sections 1-4; public nccl-tests curves:
section 6) and shared/reference/hardware.md. "NCCL" below means a constant read from NCCL's source as
nccl_model.md quotes it; "fit" means a constant fitted to the public measured curves of nccl_model.md
section 6 (the fit and its residuals are in docs/netsim.md and tests/netsim/test_netsim_public_curves.py).
Nothing here is fitted to a training step time.

Bandwidth (link level). The engine uses *effective* link capacities: line rate x efficiency of the
link class, calibrated from collective-level figures at large messages (latency negligible):
- NVLink, H100 class: 8 x H100 ring all-reduce busbw ~370 GB/s against a 450 GB/s per-direction line
  rate (hardware.md; nccl_model.md 6.4 "Ring: 365-370 GB/s for 2 ... 8 GPUs"). A ring moves
  2(n-1)/n x S over every GPU's NVLink port, so busbw = effective port bandwidth: 370 / 450 = 0.822.
- NVLink, A100 class: ~230 GB/s busbw (hardware.md; 6.1 A100 plateau 228-232) over 12 x 25 = 300 GB/s
  per direction: 230 / 300 = 0.767.
- NVLS port throughput (Hopper): all-reduce busbw ~480 GB/s at n = 8 (6.1 H100/H200 plateau 479-480,
  6.4). NVLS moves S (1 + 1/n) through each GPU port, so busbw = 2(n-1)/(n+1) x B_nvls and
  B_nvls = 480 x 9/14 = 308.6 GB/s = 0.686 x 450 GB/s; it gives 411/441/463 GB/s at 5/6/7 GPUs
  (6.4: ~420/440/460).
- Network links: NDR 400 Gb/s reaches ~46-48 GB/s through NCCL (hardware.md, nccl-tests #290):
  47 / 50 = 0.94; HDR 200 Gb/s ~24 GB/s: 0.96 (links <= 25 GB/s).
- PCIe: no collective figure in the references; 0.80 is an assumption (typical DMA efficiency).

Protocols (NCCL LL / LL128 / Simple, nccl_model.md sections 1.3 and 3). Each protocol puts extra bytes on
the wire or runs less efficient kernels; the model divides the bytes a link carries by the protocol's
efficiency (NCCL's own factors: ring LL 0.5, LL128 0.92, Simple 1; tree all-reduce 0.92 x (LL 1/3.8,
LL128 120/128 across nodes), section 1.3 step C) and caps LL's bus bandwidth (llMaxBws, section 1.3).

Latency (the alpha terms), per collective call:
  launch (host, per GPU the calling process drives)           LAUNCH_S_PER_GPU
+ NCCL base latency of (algorithm, protocol)                  BASE_LATENCY_S
+ the critical path of the first piece: every hop it crosses in sequence pays the per-hop latency
  of its link class, algorithm family and protocol (HOP_LATENCY_S) plus the links' propagation delay
  (topology). A multi-node ring step pays at least NCCL's netOverhead (x3 for Simple).
NVLS pays NCCL's NVLS latency (25 us) instead. Multi-node Ring/Simple all-reduce multiplies its latency
by NCCL's "ring plateau" factor 1.4.

Pipeline fill (what the public curves show beyond NCCL's prediction between 1 and 64 MiB, section 5.5):
a channel's data moves in chunks; with a fenced protocol (LL128, Simple) a chunk must be complete
before the next stage forwards it, so the pipeline pays about one chunk time per stage beyond the
first before it is full (LL, flagged per 8-byte word, pays none). With s = payload
bytes per NCCL channel and chunk C, the message is cut into k = 1 + s / C pieces (continuous form of
ceil(s / C)), each c = s / k = s C / (s + C), and the fill is D x c at the channel's rate: the bytes a
flow moves are multiplied by 1 + D C / (s + C). D = 1 for rings, NVLS, point-to-point (all ranks inject
from the start: one chunk in flight), D = stages - 1 for chains and trees (a tree: up and down its
depth). This is one formula in both backends: the flow engine applies it as extra bytes, so under
contention the fill stretches with the shared rate.
"""

from __future__ import annotations

# ------------------------------------------------------------------ link efficiencies (large messages)
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

# NVLink line rate per GPU, one direction (hardware.md: datasheet per-GPU figures, both directions
# summed, halved). Used by `clustersim collective` for templates when -nvbw is not given, so that
# the efficiencies above are applied to a line rate (SimAI's template default, 2880 Gbps, is an
# effective H100 figure). Longest matching prefix of the topology's gpu_type wins.
NVLINK_LINE_BPS_BY_GPU = {
    "A100": 300e9, "H100": 450e9, "H200": 450e9, "H20": 450e9, "H800": 200e9,
    "B200": 900e9, "GB200": 900e9, "MI300X": 448e9,
}

# ------------------------------------------------------------------ GPU generations
# NCCL picks its caps by the minimum compute capability (nccl_model.md 1.3): Volta, Ampere (sm80-89),
# Hopper (sm90), Blackwell (sm100). Unknown GPU types are treated as Hopper (as NVLINK_EFFICIENCY_DEFAULT).
ARCH_BY_GPU = {
    "V100": "volta", "A100": "ampere", "A800": "ampere", "A10": "ampere", "A40": "ampere",
    "L40": "ampere", "L4": "ampere", "H100": "hopper", "H800": "hopper", "H200": "hopper",
    "H20": "hopper", "GH200": "hopper", "B200": "blackwell", "B300": "blackwell", "GB200": "blackwell",
    "GB300": "blackwell",
}

# ------------------------------------------------------------------ protocols and algorithm families
PROTOCOLS = ("ll", "ll128", "simple")
PROTOCOL_NAMES = {"ll": "LL", "ll128": "LL128", "simple": "Simple"}
# Algorithm -> NCCL latency/efficiency family. NCCL has no rhd / hierarchical / all-to-all entries in its
# tuning tables; they are chains of point-to-point steps and take the Ring rows (an assumption).
FAMILY = {"ring": "ring", "tree": "tree", "nvls": "nvls", "rhd": "ring", "hierarchical": "ring",
          "direct": "p2p", "pairwise": "p2p", "pxn": "p2p", "p2p": "p2p"}

# NCCL 2.30.7 baseLatencies, us (nccl_model.md 1.2). p2p: NCCL's tuning model has no point-to-point
# entry; a send/recv kernel is taken as one Ring step (assumption).
BASE_LATENCY_S = {
    ("tree", "ll"): 6.8e-6, ("tree", "ll128"): 14.0e-6, ("tree", "simple"): 8.4e-6,
    ("ring", "ll"): 6.6e-6, ("ring", "ll128"): 14.0e-6, ("ring", "simple"): 8.4e-6,
    ("p2p", "ll"): 6.6e-6, ("p2p", "ll128"): 14.0e-6, ("p2p", "simple"): 8.4e-6,
    ("nvls", "simple"): 0.0,
}
# NCCL 2.30.7 hwLatencies per hop, us (nccl_model.md 1.2): (LL, LL128, Simple) per link class and
# family. p2p takes the Ring rows.
HOP_LATENCY_S = {
    ("nvlink", "tree"): (0.6e-6, 1.25e-6, 4.0e-6), ("nvlink", "ring"): (0.6e-6, 1.9e-6, 3.4e-6),
    ("pcie", "tree"): (1.0e-6, 1.9e-6, 4.0e-6), ("pcie", "ring"): (1.0e-6, 2.5e-6, 5.7e-6),
    ("network", "tree"): (5.0e-6, 8.5e-6, 14.0e-6), ("network", "ring"): (2.7e-6, 4.0e-6, 14.0e-6),
}
# Measured per-hop latency on Ampere NVLink (fit): nccl_model.md 6.3 (DGX-A100 Ring LL, 2-8 GPUs, one
# process) gives ~2.0 us per ring step including one host launch per GPU; with LAUNCH_S_PER_GPU the LL
# hop that fits 6.3 best is 1.0 us (= "Demystifying NCCL": ~1 us per LL hop), 1.67 x NCCL's 0.6 us.
# The LL128 and Simple hops are NCCL's values scaled by the same measured factor. Hopper and newer keep
# NCCL's table (6.1 H100/H200 8-GPU floors: 25.6-29.9 us = NCCL's 15.0 us + 8 host launches).
NVLINK_HOP_SCALE_BY_ARCH = {"volta": 1.0 / 0.6, "ampere": 1.0 / 0.6, "hopper": 1.0, "blackwell": 1.0}
# NCCL netOverhead (multi-node rings, each intra-node step pays at least this), x3 for Simple; 1.0 us
# on Intel (and by default), 2.0 us on AMD hosts (nccl_model.md 1.2).
NET_OVERHEAD_S = {"intel": 1.0e-6, "amd": 2.0e-6}
NET_OVERHEAD_SIMPLE_FACTOR = 3.0
# NVLS (NVLink SHARP) latency: hwLat NVLink NVLS = 25 us, base 0 (NCCL 2.21+, nccl_model.md 1.2).
NVLS_LATENCY_S = 25.0e-6
# "Ring plateau": Ring + Simple + AllReduce on more than one node when S / (channels x n) >= 64 B:
# latency x 1.4 on sm80+, x 1.9 older (nccl_model.md 1.1).
RING_PLATEAU = {"volta": 1.9, "ampere": 1.4, "hopper": 1.4, "blackwell": 1.4}

# Host launch overhead of one collective call, per GPU the calling process drives (fit). nccl-tests
# without CUDA graphs times back-to-back calls, so host launches that outrun the GPU show in the time:
# 6.1 8-GPU one-process floors minus NCCL's Ring LL latency (15.0 us) over 8 launches: H100
# (25.6 - 15.0) / 8 = 1.3 us, H200 (29.9 - 15.0) / 8 = 1.9 us; 1.6 us. A training framework also
# launches one NCCL kernel per call and rank (one process per GPU): make_backend keeps 1 x 1.6 us per
# collective by default (launch_overhead=False drops it; gpus_per_process=N models nccl-tests -g N).
LAUNCH_S_PER_GPU = 1.6e-6

# Protocol efficiency on the wire / in the kernels (nccl_model.md 1.3 step C, 3).
PROTO_EFFICIENCY = {
    ("ring", "ll"): 0.5, ("ring", "ll128"): 0.92, ("ring", "simple"): 1.0,
    ("p2p", "ll"): 0.5, ("p2p", "ll128"): 0.92, ("p2p", "simple"): 1.0,
    # Tree all-reduce: min(0.92 x busBw, ...) for every protocol, then LL / 3.8, LL128 x 120/128 (multi-node;
    # 7/9 on one node: trees are only used across nodes here)
    ("tree", "ll"): 0.92 / 3.8, ("tree", "ll128"): 0.92 * 120.0 / 128.0, ("tree", "simple"): 0.92,
    ("nvls", "simple"): 1.0,     # NVLS throughput is NVLS_PORT_EFFICIENCY on the switch ports
}
# LL bus-bandwidth cap llMaxBws, B/s of busbw (nccl_model.md 1.3): one node by GPU generation; several
# nodes by host CPU (row "Intel" unless AMD), columns 2 nodes / 3 or more.
LL_MAX_BUSBW_1NODE = {"volta": 39.0e9, "ampere": 87.7e9, "hopper": 141.0e9, "blackwell": 282.0e9}
LL_MAX_BUSBW_MULTI = {"intel": (39.0e9, 20.4e9), "amd": (22.5e9, 19.0e9)}

# ------------------------------------------------------------------ channels and pipeline fill
# Collective channels of a communicator (NCCL logs "24 coll channels" on 8 x A100 / H100, 32 on B200;
# nccl_model.md 4.3) and NVLS channels (16 on sm90, 24 on sm100, 2.6). The fill uses the payload per
# channel.
COMM_CHANNELS = {"volta": 24, "ampere": 24, "hopper": 24, "blackwell": 32}
NVLS_CHANNELS = {"hopper": 16, "blackwell": 24}
# A group with one GPU per node sees no NVLink: NCCL's graph search then fits one channel per step of
# its top inter-node speed (4.2: 48 GB/s up to sm90, 96 on sm100) into the GPU's network bandwidth,
# and doubles the channels (2.6).
INTER_CHANNEL_SPEED_BPS = {"volta": 48e9, "ampere": 48e9, "hopper": 48e9, "blackwell": 96e9}
# Fill chunk per channel, payload bytes (nccl_model.md 3). A protocol that fences each send (LL128: one
# __threadfence per step; Simple: fence and flush per step) makes a stage forward a step only once it
# is complete: chunk-level fill. LL carries its flag in every 8-byte word and forwards word by word:
# no chunk-level fill (0). LL128 one step = 576,000 B payload; Simple ring all-reduce / all-gather /
# reduce-scatter one chunk = 4 steps x 512 KiB = 2 MiB, chains and trees 1 step = 512 KiB,
# point-to-point 512 KiB (NCCL's NVLink P2P chunk). NVLS: fit to 6.1 H100/H200 (8-GPU NVLS, 1-64 MiB):
# 1 MiB per channel = NCCL_STEPS (8) x the 128 KiB NVLS chunk, one full FIFO (the 128 KiB chunk alone
# leaves the 8-64 MiB times 10-20% low).
FILL_CHUNK_BYTES = {
    ("ring", "ll128"): 576000, ("chain", "ll128"): 576000, ("tree", "ll128"): 576000,
    ("ring", "simple"): 2 * 1024 * 1024, ("chain", "simple"): 512 * 1024, ("tree", "simple"): 512 * 1024,
    ("p2p", "simple"): 512 * 1024, ("nvls", "simple"): 1024 * 1024,
}


# ------------------------------------------------------------------ lookups
def _prefix_match(table: dict, gpu_type: str):
    key = (gpu_type or "").upper()
    best = max((name for name in table if key.startswith(name)), key=len, default=None)
    return None if best is None else table[best]


def nvlink_line_Bps(gpu_type: str) -> float | None:
    """Datasheet NVLink rate per direction of a GPU type (None when unknown)."""
    return _prefix_match(NVLINK_LINE_BPS_BY_GPU, gpu_type)


def gpu_arch(gpu_type: str) -> str:
    """NCCL generation row of a GPU type: volta | ampere | hopper | blackwell (unknown: hopper)."""
    return _prefix_match(ARCH_BY_GPU, gpu_type) or "hopper"


def nvlink_efficiency(gpu_type: str) -> float:
    got = _prefix_match(NVLINK_EFFICIENCY_BY_GPU, gpu_type)
    return NVLINK_EFFICIENCY_DEFAULT if got is None else got


def link_efficiency(kind: str, bandwidth_Bps: float, gpu_type: str) -> float:
    if kind == "nvlink":
        return nvlink_efficiency(gpu_type)
    if kind == "network":
        return NET_EFFICIENCY_SLOW if bandwidth_Bps <= 25e9 * 1.0001 else NET_EFFICIENCY_FAST
    return PCIE_EFFICIENCY


def supports_nvls(gpu_type: str) -> bool:
    key = (gpu_type or "").upper()
    return any(key.startswith(g) for g in NVLS_GPUS)
