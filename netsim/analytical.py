"""Analytical collective times (no contention between collectives) and the automatic (algorithm,
protocol) choice.

t = launch + NCCL base latency + critical-path latency (per-hop latency of each hop's link class,
algorithm family and protocol, + propagation; x NCCL's ring-plateau factor where it applies)
  + fill factor x payload / B, B = min(protocol efficiency x B_phys, NCCL's LL cap)

with the protocol terms of netsim.protocol.NetModel (the same ones the flow backend applies) and
B_phys from the topology: the slowest member's effective NVLink port bandwidth and its share of its
NIC ports (a NIC shared by g group GPUs gives each 1/g). Closed forms: ring (one ring per local GPU
index across units), NVLS, direct all-to-all. Tree, chains, recursive halving-doubling, hierarchical,
pairwise and point-to-point are timed by running their flow schedules alone on the idle topology
(netsim.resolve.static_time_s: the exact fluid time). The closed forms assume no ECMP collisions
inside one collective; the flow backend shows those and every contention between collectives.
"""

from __future__ import annotations

import math

from netsim.protocol import fill_factor
from netsim.resolve import static_time_s
from netsim.schedules import GroupShape
from netsim.topoview import ARRAY_MIN_GROUP


class GroupFacts:
    """Per-group bandwidths (cached per group by the planner)."""

    def __init__(self, view, shape: GroupShape, bandwidths: tuple | None = None, ll128_ok: bool | None = None):
        # bandwidths, ll128_ok: the values computed for many groups at once (Planner._shape_pairs)
        self.b_nv, self.b_net = view.group_bandwidths(shape.gpus) if bandwidths is None else bandwidths
        self.units = shape.m
        self.one_per_unit = shape.k_max == 1 and shape.m > 1
        if ll128_ok is not None:
            self.ll128_ok = ll128_ok
            return
        # LL128 needs NVLink inside the units (NCCL's "intra path <= NVB" rule)
        multi = [g for s in shape.servers if len(s) > 1 for g in s]
        every = getattr(view, "nvlink_out_array", None)     # nvlink_out_Bps of every GPU at once
        self.ll128_ok = (bool((every()[multi] > 0).all()) if every is not None and len(multi) >= ARRAY_MIN_GROUP
                         else all(view.nvlink_out_Bps(g) > 0 for g in multi))


def ring_bandwidth_Bps(shape: GroupShape, facts: GroupFacts) -> float:
    """Aggregate ring bandwidth B (bytes/s over all channels) before the protocol's efficiency."""
    k = shape.k_max
    if shape.m == 1:
        return facts.b_nv
    # k channels; a server with k_s GPUs sends ceil(k / k_s) channels through one NIC and one GPU
    # there forwards k - floor(k / k_s) channels over its NVLink port
    per_channel = math.inf
    # each distinct unit size once (a minimum over the servers: equal sizes give equal terms), in
    # order of first appearance
    for ks in dict.fromkeys(map(len, shape.servers)):
        per_channel = min(per_channel, facts.b_net / math.ceil(k / ks))
        if ks > 1:
            per_channel = min(per_channel, facts.b_nv / (k - k // ks))
    return k * per_channel


def _data_s(plan, size: float, rate_Bps: float) -> float:
    """Payload time of the collective's (symmetric) flows at `rate_Bps` per flow, with fill and LL cap."""
    f = plan.flows[0]
    return f.payload_bytes(size) / min(rate_Bps, f.cap_Bps)


def closed_form_applies(algorithm: str, op: str) -> bool:
    """closed_form_s times this (algorithm, op) (it reads no channel of the plan's flows); the others
    are timed by running their flows (static_time_s)."""
    return (algorithm == "ring" and op != "all_to_all") or algorithm == "nvls" or (
        algorithm == "direct" and op == "all_to_all")


def closed_form_s(view, plan, size: float) -> float | None:
    """Closed-form time of ring, NVLS and direct all-to-all plans (None for the others)."""
    shape, facts, op = plan.shape, plan.facts, plan.op
    if not closed_form_applies(plan.algorithm, op):
        return None
    delay, mult = plan.timing(size)
    lat = max(f.latency_s for f in plan.flows) * mult
    if plan.algorithm == "ring" and op != "all_to_all":
        c_n = len(plan.flows)
        rate = plan.efficiency * ring_bandwidth_Bps(shape, facts) / c_n
        return delay + lat + _data_s(plan, size, rate)
    if plan.algorithm == "nvls":
        wmax = 1 + 1 / shape.n if op == "all_reduce" else ((shape.n - 1) / shape.n if op == "all_gather" else 1.0)
        return delay + lat + _data_s(plan, size, facts.b_nv / wmax)
    if plan.algorithm == "direct" and op == "all_to_all":
        n = shape.n
        per = size / n
        f = plan.flows[0]
        infl = fill_factor(f.frac, size, f.nch, f.fill_stages, f.fill_chunk)
        eff = plan.efficiency
        t_intra = max(len(s) - 1 for s in shape.servers) * per / (eff * facts.b_nv) if facts.b_nv < math.inf else 0.0
        t_inter = 0.0
        if shape.m > 1:
            t_inter = max(n - len(s) for s in shape.servers) * per / (eff * facts.b_net)
        return delay + lat + infl * max(t_intra, t_inter)
    return None


def estimate_s(view, plan, size: float) -> float:
    """Time of one collective alone (algorithm and protocol already resolved)."""
    if size <= 0 or plan.shape.n == 1 or not plan.flows:
        return 0.0
    got = closed_form_s(view, plan, size)
    if got is not None:
        return got
    delay, mult = plan.timing(size)
    return static_time_s(view, plan.flows, size, delay_s=delay, lat_mult=mult, compact=plan.compact(view.capacity_Bps))


def candidates(view, shape: GroupShape, op: str) -> tuple[str, ...]:
    """Algorithms the automatic choice considers (NCCL 2.1: ring / tree / NVLS for reductions)."""
    from netsim.calibration import supports_nvls

    if op in ("send", "recv"):
        return ("p2p",)
    if op == "all_to_all":
        return ("direct",)
    if op in ("broadcast", "reduce"):
        return ("ring",)
    out = ["ring"]
    if op == "all_reduce" and shape.m > 1:
        out.append("tree")          # NCCL's tree never wins inside one node (nccl_model.md 5.2)
    if shape.domains == 1 and shape.n >= 2 and supports_nvls(view.gpu_type) and view.switch_channels(shape.gpus[0])[0]:
        out.append("nvls")
    return tuple(out)
