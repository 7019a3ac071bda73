"""Alpha-beta model of collectives (no contention between collectives) and the automatic algorithm choice.

t = latency + factor x S / B_eff, per (collective, algorithm, span, NIC sharing):
- latency: the critical path of the first piece, each hop paying its per-step alpha + propagation
  (a ring of n GPUs over m units: 2(n-1) all-reduce steps of which about 2m leave a unit and pay the
  network alpha, the rest the NVLink alpha);
- B_eff from the topology: effective NVLink port bandwidth B_nv and effective NIC share B_net of the
  slowest GPU in the group (a NIC shared by g GPUs gives each 1/g), with the link efficiencies of
  netsim.calibration;
- the message-size efficiency curve is the alpha-beta curve itself: busbw(S) = busbw_max x S / (S + S_half),
  S_half = latency x B_eff / factor (half of peak at S_half).
Closed forms: ring (multi-channel, one ring per local GPU across servers), NVLS, hierarchical,
direct all-to-all, send. Tree, recursive halving-doubling and pairwise all-to-all are timed by
running their flow schedules alone on the idle topology (netsim.resolve.static_time_s).
Assumes full bisection in the fabric: use the flow backend for oversubscribed fabrics.
"""

from __future__ import annotations

import math

from netsim import calibration as cal
from netsim.resolve import resolve, ring_window_s, static_time_s
from netsim.schedules import GroupShape, build_specs


class GroupFacts:
    """Per-group bandwidths and step latencies (cached per group by the backends)."""

    def __init__(self, view, shape: GroupShape):
        self.flows: dict = {}   # (op, algorithm) -> resolved flow schedule (unit size)
        self._view, self._shape = view, shape
        self._ring_hops: list[tuple[list[float], int]] | None = None
        self._ring_lat: dict[tuple[int, bool], float] = {}
        self.b_nv, self.b_net = view.group_bandwidths(shape.gpus)
        order = shape.ring_order(0)
        intra = next(((a, b) for a, b in zip(order, order[1:]) if view.unit_of(a) == view.unit_of(b)), None)
        inter = [(a, b) for a, b in zip(order, order[1:] + order[:1]) if view.unit_of(a) != view.unit_of(b)]
        self.lat_intra = self._step(view, intra)
        # a lock-step ring step waits for its slowest hop (e.g. the rail-changing closing hop)
        self.lat_inter = max((self._step(view, p) for p in inter), default=self.lat_intra)
        # hierarchical stage 2 rings join GPUs of one local index (one rail)
        self.lat_rail = (self._step(view, (shape.servers[0][0], shape.servers[1][0]))
                         if shape.m > 1 else self.lat_intra)
        up, down = view.switch_channels(shape.gpus[0])
        self.nvls_line = float(sum(view.line_Bps[c] for c in up)) if up else 0.0
        self.nvls_lat = cal.NVLS_PHASE_ALPHA_S + 2 * (view.path_latency_s(up[:1]) if up else 0.0)

    def ring_latency_s(self, steps: int, chain: bool = False) -> float:
        """Latency of the multi-channel ring: a piece crosses `steps` consecutive hops, each paying
        its per-step alpha + propagation (network alpha only on the hops that leave a unit); the
        slowest channel counts. chain: broadcast/reduce, a path from group rank 0 along the ring."""
        key = (steps, chain)
        got = self._ring_lat.get(key)
        if got is not None:
            return got
        shape, view = self._shape, self._view
        if self._ring_hops is None:
            self._ring_hops = []
            for c in range(shape.k_max if shape.m > 1 else 1):
                order = shape.ring_order(c)
                hops = [self._step(view, p) for p in zip(order, order[1:] + order[:1])]
                self._ring_hops.append((hops, order.index(shape.gpus[0])))
        if chain:   # hops from the root's position, without the one closing the ring
            got = max(math.fsum(h[(i0 + j) % len(h)] for j in range(min(steps, len(h) - 1)))
                      for h, i0 in self._ring_hops)
        else:
            got = max(ring_window_s(h, steps) for h, _ in self._ring_hops)
        self._ring_lat[key] = got
        return got

    @staticmethod
    def _step(view, pair) -> float:
        if pair is None:
            return 0.0
        path = view.path(pair[0], pair[1], 0)
        return view.path_alpha_s(path) + view.path_latency_s(path)


def ring_time_s(shape: GroupShape, facts: GroupFacts, op: str, size: float) -> float:
    n, k = shape.n, shape.k_max
    if n == 1:
        return 0.0
    if shape.m == 1:
        bw = facts.b_nv
    else:
        # k channels; a server with k_s GPUs sends ceil(k / k_s) channels through one NIC and one
        # GPU there forwards k - floor(k / k_s) channels over its NVLink port
        per_channel = math.inf
        for s in shape.servers:
            ks = len(s)
            per_channel = min(per_channel, facts.b_net / math.ceil(k / ks))
            if ks > 1:
                per_channel = min(per_channel, facts.b_nv / (k - k // ks))
        bw = k * per_channel
    if op == "all_reduce":
        factor, steps = 2 * (n - 1) / n, 2 * (n - 1)
    elif op in ("all_gather", "reduce_scatter"):
        factor, steps = (n - 1) / n, n - 1
    else:
        factor, steps = 1.0, n - 1
    lat = facts.ring_latency_s(steps, chain=op in ("broadcast", "reduce"))
    return lat + factor * size / bw


def nvls_time_s(shape: GroupShape, facts: GroupFacts, op: str, size: float) -> float:
    n = shape.n
    if n == 1:
        return 0.0
    if op == "all_reduce":
        wmax, steps = 1 + 1 / n, 2
    elif op == "all_gather":
        wmax, steps = (n - 1) / n, 1
    else:
        wmax, steps = 1.0, 1
    rate = min(facts.b_nv / wmax, cal.NVLS_PORT_EFFICIENCY * facts.nvls_line / wmax)
    return steps * facts.nvls_lat + size / rate


def hierarchical_time_s(shape: GroupShape, facts: GroupFacts, op: str, size: float) -> float:
    k, m, n = shape.k_max, shape.m, shape.n
    t_intra = (k - 1) * facts.lat_intra + (k - 1) / k * size / facts.b_nv if k > 1 else 0.0
    if op == "all_reduce":
        t_inter = 2 * (m - 1) * facts.lat_rail + 2 * (m - 1) / m * (size / k) / facts.b_net if m > 1 else 0.0
        return 2 * t_intra + t_inter
    t_inter = (m - 1) * facts.lat_rail + (m - 1) * size / n / facts.b_net if m > 1 else 0.0
    return t_intra + t_inter


def a2a_direct_time_s(shape: GroupShape, facts: GroupFacts, size: float) -> float:
    n = shape.n
    if n == 1:
        return 0.0
    per = size / n
    t_intra = max((len(s) - 1) for s in shape.servers) * per / facts.b_nv
    t_inter = 0.0
    if shape.m > 1:
        t_inter = max(n - len(s) for s in shape.servers) * per / facts.b_net
    lat = facts.lat_inter if shape.m > 1 else facts.lat_intra
    return lat + max(t_intra, t_inter)


def estimate_s(view, shape: GroupShape, facts: GroupFacts, op: str, algorithm: str, size: float) -> float:
    """Alpha-beta time of one collective alone (algorithm already resolved, never 'auto')."""
    if size <= 0 or shape.n == 1:
        return 0.0
    if op in ("send", "recv"):
        src, dst = shape.gpus
        path = view.path(src, dst, 0)
        if not path:
            return 0.0
        bw = min(view.capacity_Bps[c] for c in path)
        return view.path_alpha_s(path) + view.path_latency_s(path) + size / bw
    if algorithm == "ring":
        return ring_time_s(shape, facts, op, size)
    if algorithm == "nvls":
        return nvls_time_s(shape, facts, op, size)
    if algorithm == "hierarchical":
        return hierarchical_time_s(shape, facts, op, size)
    if algorithm == "direct" and op == "all_to_all":
        return a2a_direct_time_s(shape, facts, size)
    key = (op, algorithm)
    flows = facts.flows.get(key)
    if flows is None:
        specs = build_specs(shape, op, algorithm, 1.0)
        flows = facts.flows[key] = [resolve(view, s, i) for i, s in enumerate(specs)]
    return static_time_s(view, flows, size)


def candidates(view, shape: GroupShape, op: str) -> tuple[str, ...]:
    """Algorithms the automatic choice considers (NCCL-like: ring / tree / NVLS for reductions)."""
    if op in ("send", "recv"):
        return ("p2p",)
    if op == "all_to_all":
        return ("direct",)
    if op in ("broadcast", "reduce"):
        return ("ring",)
    out = ["ring"]
    if op == "all_reduce" and shape.m > 1:
        out.append("tree")          # NCCL uses trees only across nodes
    if (shape.domains == 1 and shape.n >= 4 and cal.supports_nvls(view.gpu_type)
            and view.switch_channels(shape.gpus[0])[0]):
        out.append("nvls")          # below 4 GPUs NVLS loses to the ring (hardware.md: ~370 at 2-4)
    return tuple(out)


def choose_algorithm(view, shape: GroupShape, facts: GroupFacts, op: str, size: float) -> str:
    """Automatic choice: the fastest candidate by the alpha-beta estimate; ties -> earlier candidate."""
    cands = candidates(view, shape, op)
    if len(cands) == 1:
        return cands[0]
    best, best_t = cands[0], math.inf
    for alg in cands:
        t = estimate_s(view, shape, facts, op, alg, max(size, 1.0))
        if t < best_t * (1 - 1e-9):
            best, best_t = alg, t
    return best
