"""Compute slowed by communication in flight on the same GPU (SM share and HBM traffic).

Overlapped communication is not free: NCCL runs its collectives as CUDA kernels with one CTA (thread
block) per channel, and a CTA with NCCL's 512-640 threads and its FIFO shared memory holds an SM that
a GEMM's CTAs (one per SM, most of the shared memory) then cannot use; and every byte a collective
moves crosses HBM several times. While any communication of a rank is in flight, each compute kernel
of that rank therefore runs on fewer SMs and less HBM bandwidth. Model (a roofline on the resources
left over; no constant is fitted to an end-to-end time):

    t_c = FLOPs / peak(dtype),  t_m = bytes / HBM bandwidth          (the kernel's own FLOPs and bytes)
    slowdown = max(t_c / (1 - s), t_m / (1 - h)) / max(t_c, t_m)       (>= 1)

- s = SMs held by the communication kernels in flight / SMs of the GPU.
  NCCL: one CTA per channel; channels = the communicator's "coll channels" for the GPU (NCCL's
  topology search, reference/nccl_model.md 2.6 and 4.3: 24 on 8 x A100 and 8 x H100/H200/H20, 32 on
  8 x B200), reduced for small messages as NCCL's enqueue does (Simple protocol: one channel per
  512 threads x 64 B = 32 KiB, nccl_model.md 2.4). The same budget is assumed for p2p send/recv.
  Transformer Engine userbuffers (plan.tp_comm_overlap): TE's default `initialize_ub` configuration,
  1 SM for ring-exchange all-gathers (copy engines move the data) and 16 SMs for the pipelined and
  bulk reduce-scatters / all-gathers (transformer_engine.pytorch.module.base defaults).
- h = HBM bytes per second the communication in flight moves / HBM bandwidth of the GPU. An NCCL ring
  step lands each received byte in a FIFO (a write by the peer), reads it and reads or writes the
  local operand: 3 HBM bytes per byte received; a copy-engine exchange (TE ring-exchange) writes the
  received byte and reads the sent one: 2. Bytes arrive at most at the link's line rate (NVLink if the
  group stays in one NVLink domain, else the NIC; compute_db GPU table, one direction), or at the
  collective's own average rate when its duration is known (arithmetically timed collectives).
- SMs per GPU: vendor datasheets / whitepapers (A100 108, H100 SXM 132, H100 PCIe 114, H200 132,
  H20 78, L40S 142, B200 148). A GPU without an entry keeps only the HBM term (stated in reports).
Ignored: the reverse effect (GEMMs slowing NCCL: collective times come from netsim unchanged), L2
cache contention, wave quantisation when the free SM count does not divide a GEMM's tiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from netsim.api import bus_factor

# NCCL "coll channels" on an 8-GPU NVSwitch node (reference/nccl_model.md 4.3); GPUs not listed: unknown
# (no SM term). SMs per GPU come from the GPU table (compute_db/data/gpus.yaml sm_count).
_NCCL_CHANNELS: dict[str, int] = {
    "A100-40GB": 24, "A100-80GB": 24, "H100": 24, "H800": 24, "H200": 24, "H20": 24, "B200": 32, "GB200": 32,
}
NCCL_SIMPLE_BYTES_PER_CHANNEL = 512 * 64        # threads x per-thread threshold (nccl_model.md 2.4)
TE_UB_RING_EXCHANGE_SMS = 1                     # TE initialize_ub default num_sm, ring_exchange
TE_UB_PIPELINE_BULK_SMS = 16                    # TE initialize_ub default num_sm, pipeline / bulk
NCCL_HBM_BYTES_PER_LINK_BYTE = 3.0              # FIFO write by the peer + FIFO read + operand read/write
COPY_ENGINE_HBM_BYTES_PER_LINK_BYTE = 2.0       # received byte written + sent byte read
MAX_SHARE = 0.9                                 # never let the model take more than 90% of a resource


@dataclass(frozen=True)
class Footprint:
    """What one in-flight communication takes from its GPU."""
    sms: float              # streaming multiprocessors held by its kernel(s)
    hbm_Bps: float          # HBM traffic it causes (bytes/s)


class ContentionModel:
    """Per-GPU parameters of the model (module docstring) and the slowdown of one kernel."""

    def __init__(self, spec, tp_comm_overlap: bool = False) -> None:
        self.spec = spec
        arch = _lookup(spec)
        self.sm_count, self.nccl_channels = (arch if arch is not None else (None, None))
        self.tp_ub = bool(tp_comm_overlap)
        self._split: dict = {}

    @property
    def has_sm_term(self) -> bool:
        return self.sm_count is not None and self.nccl_channels is not None

    def describe(self) -> str:
        sm = (f"{self.nccl_channels} NCCL CTAs of {self.sm_count} SMs" if self.has_sm_term
              else "SM share unknown for this GPU (HBM term only)")
        return (f"{sm}; {NCCL_HBM_BYTES_PER_LINK_BYTE:g} HBM bytes per link byte of "
                f"{self.spec.hbm_Bps / 1e9:.0f} GB/s HBM")

    def footprint(self, op, group_size: int, nvlink_local: bool, duration_s: float | None = None) -> Footprint:
        """Footprint of CommOp `op` over a group of `group_size` ranks (see the module docstring)."""
        size = float(op.size_bytes)
        ub = self.tp_ub and op.group == "tp" and not op.blocking
        ring_exchange = ub and op.collective == "all_gather" and not (op.wait_op or "").endswith("_wgrad")
        if ub:
            sms = float(TE_UB_RING_EXCHANGE_SMS if ring_exchange else TE_UB_PIPELINE_BULK_SMS)
        elif self.has_sm_term:
            sms = float(max(1, min(self.nccl_channels, math.ceil(size / NCCL_SIMPLE_BYTES_PER_CHANNEL))))
        else:
            sms = 0.0
        n = 2 if op.collective in ("send", "recv") else max(1, group_size)
        line = self.spec.nvlink_Bps if nvlink_local and self.spec.nvlink_Bps > 0 else self.spec.nic_Bps
        rate = line
        wire = size * bus_factor(op.collective, n)
        if duration_s is not None and duration_s > 0 and wire > 0:
            rate = min(line, wire / duration_s) if line > 0 else wire / duration_s
        per = COPY_ENGINE_HBM_BYTES_PER_LINK_BYTE if ring_exchange else NCCL_HBM_BYTES_PER_LINK_BYTE
        return Footprint(sms, per * rate if wire > 0 else 0.0)

    def shares(self, footprints) -> tuple[float, float]:
        """(SM share s, HBM share h) of a set of footprints, each capped at MAX_SHARE."""
        sms = sum(f.sms for f in footprints)
        hbm = sum(f.hbm_Bps for f in footprints)
        s = min(MAX_SHARE, sms / self.sm_count) if self.sm_count else 0.0
        h = min(MAX_SHARE, hbm / self.spec.hbm_Bps) if self.spec.hbm_Bps > 0 else 0.0
        return s, h

    def split(self, op) -> tuple[float, float]:
        """(t_c, t_m) / max(t_c, t_m) of a ComputeOp from its FLOPs and bytes (1, 0 when it says neither:
        a kernel of unknown intensity is taken as compute-bound)."""
        key = id(op)
        hit = self._split.get(key)
        if hit is None:
            peak = self.spec.peak_flops.get(op.dtype) or self.spec.peak_flops.get("bf16", 0.0)
            tc = op.flops / peak if peak > 0 else 0.0
            tm = op.bytes / self.spec.hbm_Bps if self.spec.hbm_Bps > 0 else 0.0
            top = max(tc, tm)
            hit = (tc / top, tm / top) if top > 0 else (1.0, 0.0)
            self._split[key] = (hit, op)     # keep op alive: the key is its id
            return hit
        return hit[0]

    def factor(self, op, s: float, h: float) -> float:
        """Slowdown (>= 1) of compute op `op` while shares s (SMs) and h (HBM) are taken."""
        if s <= 0.0 and h <= 0.0:
            return 1.0
        a, b = self.split(op)
        return max(1.0, a / (1.0 - s), b / (1.0 - h))


def _lookup(spec):
    """(SM count, NCCL channels) of a GPU spec, or None when either is unknown. Not similar_to: a GPU whose
    kernel data stand in for another (MI300X -> H100) has its own SMs and NCCL topology."""
    sms = int(getattr(spec, "sms", 0) or 0)
    for n in (spec.name, *getattr(spec, "aliases", ())):
        if n in _NCCL_CHANNELS and sms > 0:
            return sms, _NCCL_CHANNELS[n]
    return None
