"""The serving cost model: stage time of a batch from the layer kernels, compute_db and netsim.

`ServingTimer.stage_cost(replica, stage, shape, now_s)` (the costs.BatchTimer protocol) adds up:
- compute: the kernels of workload_gen.inference for the batch, timed by compute_db (`lookup_many`),
  memoised in pieces: the token-level part by T (tokens in the batch), prefill attention per request
  by (chunk, KV offset) — exact, no bucketing —, decode attention by (#decodes, kv tokens) with kv
  tokens rounded to 9 significant bits (relative rounding <= 2^-9 = 0.2%; decode attention time grows
  at most proportionally to kv tokens — a fixed cost plus bytes read —, so its error is below that;
  test_serve_batch_time checks < 0.5%), the LM head / sampling by the rows that produce a
  token. Prefill attention of several requests is one varlen kernel: its fixed cost (the DB's time of
  a minimal 1 x 1 kernel with these heads) is charged once per batch, each request adds the rest.
  MoE: the routed-expert GEMMs and the EP all-to-alls are the hottest EP rank's (the step waits for
  it; workload_gen.expert_load, `ServingPlan.expert_skew`); `moe_report()` gives the imbalance factor.
- communication: every collective of those kernels (TP all-reduces, logits gather, EP all-to-alls) as
  a real collective on the replica's group through netsim (`estimate`, idle network, memoised by
  size); they block the stage (time_s = compute_s + comm_s). The PP activation send of every TP rank
  to its peer of the next stage (send_s) delays the batch, not the stage. A DB with measured
  collective curves (e.g. Vidur's all_reduce.csv / send_recv.csv) answers the collectives whose group has
  a curve's setting instead (`measured_collective_s`; sources in `collective_provenance_s`).
- contention (fair share at iteration granularity): units (replica, stage) whose communication crosses
  a common channel (sim.serve.replica.link_sharing) slow each other. A unit that shares nothing is
  exact and independent of every other replica (symmetry). Otherwise the timer remembers when each
  unit communicates, from its own answers: its collectives during [now_s, now_s + time_s), its PP
  sends during [now_s + time_s, + send_s). A collective started at t gets its bandwidth part divided
  by k = 1 + the most OTHER units communicating at t over one of its channels:
  t = t_idle + (k - 1)·b, b = t_idle(S) - t_idle(1 byte) (the part above the latency floor).
  Checked against netsim's flow backend in tests/serve/test_serve_batch_time_contention.py.
- host: `HostOverhead` (off by default) adds a GPU launch gap per kernel, charges a CPU cost per
  batch and makes a stage issue-bound when launching its kernels takes longer than running them (an
  eager engine without CUDA graphs).
- provenance: kernel time per compute_db source (measured / interpolated / modeled / given), weighted
  by use, from `provenance_s()`.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from compute_db.db import SOURCES
from sim.serve.costs import BatchShape, StageCost
from sim.serve.plan import ServingPlan
from sim.serve.replica import ServingPlacement, Unit, link_sharing, place_replicas
from workload_gen import inference as inf
from workload_gen.model import ModelSpec

KV_ROUND_BITS = 9
NETWORKS = ("analytical", "flow")
_SRC_INDEX = {s: i for i, s in enumerate(SOURCES)}


def round_kv_tokens(kv: int) -> int:
    """kv rounded to the nearest multiple of 2^(bits - 9) (9 significant bits; relative error <= 2^-9)."""
    b = kv.bit_length()
    if b <= KV_ROUND_BITS:
        return kv
    q = 1 << (b - KV_ROUND_BITS)
    return ((kv + (q >> 1)) // q) * q


@dataclass(frozen=True)
class HostOverhead:
    """CPU side of the serving engine (all zero: a runtime whose CPU work hides behind the GPU).

    per_iteration_s: CPU work between two batches during which the GPU idles (scheduling, input
                     preparation, reading back the sampled tokens); charged on the first stage.
    per_kernel_s:    host time to issue one kernel or collective (eager framework dispatch + launch).
                     The stage takes at least kernels x per_kernel_s: the CPU runs ahead of long
                     kernels and the GPU waits on it when kernels are shorter than their issue time.
    kernel_gap_s:    GPU-side gap between back-to-back kernels of a stream, added per kernel.
    `HostOverhead.eager()` takes the per-kernel constants of sim.overheads (training's host model,
    sources there: CUDA Graphs blog launch gap, PyTorch eager per-operator cost); no public figure
    gives a serving engine's per-iteration CPU time, so it stays a user option.
    """
    per_iteration_s: float = 0.0
    per_kernel_s: float = 0.0
    kernel_gap_s: float = 0.0

    def __post_init__(self):
        for name in ("per_iteration_s", "per_kernel_s", "kernel_gap_s"):
            v = getattr(self, name)
            if isinstance(v, bool) or not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                from sim.errors import SimError
                raise SimError(f"host overhead {name}: must be a finite number >= 0 (got {v!r})")

    @classmethod
    def eager(cls, per_iteration_s: float = 0.0) -> HostOverhead:
        """A Python engine without CUDA graphs: per-kernel host issue and launch gap of sim.overheads."""
        from sim.overheads import HOST_PER_KERNEL_S, KERNEL_GAP_S
        return cls(per_iteration_s=per_iteration_s, per_kernel_s=HOST_PER_KERNEL_S, kernel_gap_s=KERNEL_GAP_S)

    @classmethod
    def launch_gap_only(cls) -> HostOverhead:
        """A C++ runtime or CUDA graphs: no host-issue bound, the GPU launch gap per kernel remains."""
        from sim.overheads import KERNEL_GAP_S
        return cls(kernel_gap_s=KERNEL_GAP_S)


# a memoised compute piece: (kernel seconds, model FLOPs, HBM bytes, kernel launches, seconds per source)
_Piece = tuple[float, float, float, int, tuple[float, ...]]
# communication of a piece: ((collective, group, size_bytes, count), ...)
_CommList = tuple[tuple[str, str, int, int], ...]


class ServingTimer:
    """BatchTimer of one deployment (see the module docstring). Build it with `make_timer`."""

    def __init__(self, spec: inf.InferenceSpec, plan: ServingPlan, placement: ServingPlacement, gpu: str,
                 db, net, planner, host: HostOverhead | None = None):
        self.spec = spec
        self.plan = plan
        self.placement = placement
        self.gpu = gpu
        self.db = db
        self.net = net
        self.host = host or HostOverhead()
        self.num_stages = spec.pp
        self._layers = [len(ids) for ids in spec.stage_layer_ids]
        self._last = spec.pp - 1
        self._token: list[dict[int, list]] = [{} for _ in range(spec.pp)]
        self._prefill: dict[tuple[int, int], list] = {}
        self._prefill_floor: list | None = None
        self._decode: dict[tuple[int, int], list] = {}
        self._head: dict[int, list] = {}
        self._entries: list[list] = []
        self._coll: dict[tuple, float] = {}             # (op, gpus, size) -> idle seconds
        n_units = len(placement.replicas) * spec.pp
        self._unit_memo: list[dict[int, tuple[float, float]]] = [{} for _ in range(n_units)]
        self._head_memo: list[dict[int, float]] = [{} for _ in range(n_units)]
        self._busy: dict[tuple[Unit, str], tuple[float, float]] = {}   # (unit, class) -> [start, end)
        sharing = link_sharing(placement, planner) if planner is not None else None
        self.sharing = sharing
        self._conflicts: dict[Unit, dict[str, tuple]] = {}
        self._pp_self: dict[Unit, int] = {}
        self._tracked: set[Unit] = set()
        for u in placement.units():
            conf = {c: sharing.conflicts.get((u, c), ()) for c in ("tp", "pp")} if sharing else {}
            if any(conf.values()):
                self._conflicts[u] = conf
                for sets in conf.values():
                    for users in sets:
                        self._tracked.update(x[0] for x in users)
            self._pp_self[u] = self._pp_self_share(u, planner)

    # ------------------------------------------------------------------ compute pieces
    # Memo entries are lists [piece, comm list, uses]: the use count is bumped in place (provenance).
    def _time(self, ops_counts) -> _Piece:
        comp = [(op, n) for op, n in ops_counts if not op.is_comm]
        times = self.db.lookup_many([op for op, _ in comp], self.gpu)
        by_src = [0.0] * len(SOURCES)
        total = flops = nbytes = 0.0
        launches = 0
        for (op, n), kt in zip(comp, times):
            total += kt.time_s * n
            by_src[_SRC_INDEX[kt.source]] += kt.time_s * n
            flops += op.flops * n
            nbytes += op.bytes * n
            launches += n
        launches += sum(n for op, n in ops_counts if op.is_comm)
        return total, flops, nbytes, launches, tuple(by_src)

    @staticmethod
    def _comm_list(ops_counts) -> _CommList:
        acc: dict[tuple[str, str, int], int] = defaultdict(int)
        for op, n in ops_counts:
            if op.is_comm:
                acc[(op.collective, op.group, int(op.size_bytes))] += n
        return tuple((c, g, s, n) for (c, g, s), n in sorted(acc.items()))

    def _entry(self, piece: _Piece, comm: _CommList = ()) -> list:
        entry = [piece, comm, 0]
        self._entries.append(entry)
        return entry

    def _token_entry(self, stage: int, T: int) -> list:
        spec = self.spec
        dense, moe = spec.stage_layer_kinds(stage)
        ops: list = []
        if stage == 0:
            ops += [(op, 1) for op in inf.embedding_ops(spec, T)]
        if dense:
            ops += [(op, dense) for op in inf.layer_token_ops(spec, T, False)]
        if moe:
            ops += [(op, moe) for op in inf.layer_token_ops(spec, T, True)]
        if stage == spec.pp - 1:
            ops += [(op, 1) for op in inf.final_norm_ops(spec, T)]
        entry = self._token[stage][T] = self._entry(self._time(ops), self._comm_list(ops))
        return entry

    def _floor_entry(self) -> list:
        if self._prefill_floor is None:
            self._prefill_floor = self._entry(self._time([(op, 1) for op in inf.prefill_attention_ops(self.spec, 1, 0)]))
        return self._prefill_floor

    def _prefill_entry(self, chunk: int, offset: int) -> list:
        floor = self._floor_entry()[0]
        full = self._time([(op, 1) for op in inf.prefill_attention_ops(self.spec, chunk, offset)])
        scale = max(0.0, 1.0 - floor[0] / full[0]) if full[0] > 0 else 0.0
        # the request's time above the once-per-batch fixed cost, sources scaled alike
        piece = (max(0.0, full[0] - floor[0]), full[1], full[2], full[3] - 1, tuple(x * scale for x in full[4]))
        entry = self._prefill[(chunk, offset)] = self._entry(piece)
        return entry

    def _decode_entry(self, batch: int, kv: int) -> list:
        entry = self._decode[(batch, kv)] = self._entry(self._time([(inf.decode_attention_op(self.spec, batch, kv), 1)]))
        return entry

    def _head_entry(self, rows: int) -> list:
        ops = [(op, 1) for op in inf.head_ops(self.spec, rows)]
        entry = self._head[rows] = self._entry(self._time(ops), self._comm_list(ops))
        return entry

    # ------------------------------------------------------------------ communication
    def _collective_s(self, op: str, gpus: tuple[int, ...], size: float) -> float:
        key = (op, gpus, size)
        t = self._coll.get(key)
        if t is None:
            t = measured_collective_s(self, op, gpus, size)
            if t is None:
                from netsim.api import CollectiveRequest
                t = self.net.estimate(CollectiveRequest(op, gpus, size)) if size > 0 and len(gpus) > 1 else 0.0
            self._coll[key] = t
        return t

    def _bandwidth_part_s(self, op: str, gpus: tuple[int, ...], size: float) -> float:
        """Time above the collective's latency floor (its 1-byte time): the part link sharing stretches."""
        t = self._collective_s(op, gpus, size)
        return max(0.0, t - self._collective_s(op, gpus, 1))

    def _pp_self_share(self, unit: Unit, planner) -> int:
        """Most TP ranks of one unit whose PP sends cross one channel (1 when they never share)."""
        if planner is None:
            return 1
        pairs = self.placement.replicas[unit[0]].pp_pairs(unit[1])
        if len(pairs) < 2:
            return 1
        from sim.serve.replica import flow_channels
        count: dict[int, int] = defaultdict(int)
        for pair in pairs:
            for ch in flow_channels(planner, "send", pair):
                count[ch] += 1
        return max(count.values(), default=1)

    def _group_comm_s(self, unit: Unit, items: _CommList, factor: int) -> float:
        """Blocking collectives of `items` on the unit's TP/EP group, bandwidth parts x factor."""
        group = self.placement.replicas[unit[0]].tp_group(unit[1])
        comm = 0.0
        for op, _grp, size, n in items:
            t = self._collective_s(op, group, size)
            if factor > 1:
                t += (factor - 1) * self._bandwidth_part_s(op, group, size)
            comm += n * t
        return comm

    def _send_s(self, unit: Unit, T: int, factor: int) -> float:
        """PP activation send of every TP rank to its peer (concurrent; the slowest counts)."""
        pairs = self.placement.replicas[unit[0]].pp_pairs(unit[1])
        if not pairs:
            return 0.0
        size = inf.pp_send_bytes(self.spec, T)
        share = self._pp_self[unit] * factor
        send = 0.0
        for pair in pairs:
            t = self._collective_s("send", pair, size)
            if share > 1:
                t += (share - 1) * self._bandwidth_part_s("send", pair, size)
            send = max(send, t)
        return send

    def _factor(self, unit: Unit, cls: str, t_s: float) -> int:
        """1 + the most other (unit, class) users busy at t_s over one channel of (unit, cls)."""
        busy = self._busy
        k = 0
        for users in self._conflicts[unit][cls]:
            n = 0
            for use in users:
                iv = busy.get(use)
                if iv is not None and iv[0] <= t_s < iv[1]:
                    n += 1
            k = max(k, n)
        return 1 + k

    # ------------------------------------------------------------------ the protocol
    def stage_cost(self, replica: int, stage: int, shape: BatchShape, now_s: float) -> StageCost:
        prefill, decode = shape.prefill, shape.decode
        n_dec = len(decode)
        T = n_dec
        for c, _ in prefill:
            T += c
        if T <= 0:
            return StageCost(0.0)
        e = self._token[stage].get(T) or self._token_entry(stage, T)
        e[2] += 1
        tok_comm = e[1]
        p = e[0]
        compute, flops, nbytes, launches = p[0], p[1], p[2], p[3]
        n_layers = self._layers[stage]
        if prefill:
            e = self._prefill_floor or self._floor_entry()
            e[2] += n_layers
            compute += e[0][0] * n_layers
            launches += e[0][3] * n_layers
            for key in prefill:
                e = self._prefill.get(key) or self._prefill_entry(*key)
                e[2] += n_layers
                p = e[0]
                compute += p[0] * n_layers
                flops += p[1] * n_layers
                nbytes += p[2] * n_layers
                launches += p[3] * n_layers
        if n_dec:
            kv = sum(decode) + n_dec
            if kv >> KV_ROUND_BITS:
                kv = round_kv_tokens(kv)
            e = self._decode.get((n_dec, kv)) or self._decode_entry(n_dec, kv)
            e[2] += n_layers
            p = e[0]
            compute += p[0] * n_layers
            flops += p[1] * n_layers
            nbytes += p[2] * n_layers
            launches += p[3] * n_layers
        ui = replica * self.num_stages + stage
        memo = self._unit_memo[ui]
        rows = 0
        head_comm: _CommList = ()
        if stage == self._last:
            rows = n_dec + len(prefill)
            e = self._head.get(rows) or self._head_entry(rows)
            e[2] += 1
            p = e[0]
            compute += p[0]
            flops += p[1]
            nbytes += p[2]
            launches += p[3]
            head_comm = e[1]
        unit = (replica, stage)
        contended = bool(self._conflicts) and unit in self._conflicts
        if contended:
            ftp = self._factor(unit, "tp", now_s)
            comm = self._group_comm_s(unit, tok_comm, ftp) + self._group_comm_s(unit, head_comm, ftp)
        else:
            got = memo.get(T)
            if got is None:
                got = memo[T] = (self._group_comm_s(unit, tok_comm, 1), self._send_s(unit, T, 1))
            comm, send = got
            if head_comm:
                h = self._head_memo[ui].get(rows)
                if h is None:
                    h = self._head_memo[ui][rows] = self._group_comm_s(unit, head_comm, 1)
                comm += h
        host = self.host
        if host.kernel_gap_s > 0.0:
            compute += launches * host.kernel_gap_s
        if host.per_kernel_s > 0.0:
            issue = launches * host.per_kernel_s
            if issue > compute + comm:
                compute = issue - comm
        if stage == 0 and host.per_iteration_s > 0.0:
            compute += host.per_iteration_s
        time_s = compute + comm
        if contended:      # the send starts when the stage ends: contended at that time
            send = self._send_s(unit, T, self._factor(unit, "pp", now_s + time_s))
        if self._tracked and unit in self._tracked:
            self._busy[(unit, "tp")] = (now_s, now_s + time_s)
            self._busy[(unit, "pp")] = (now_s + time_s, now_s + time_s + send)
        return StageCost(time_s=time_s, compute_s=compute, comm_s=comm, send_s=send, flops=flops,
                         hbm_bytes=nbytes)

    # ------------------------------------------------------------------ reports
    def moe_report(self) -> dict | None:
        """The expert-load model of a MoE deployment and its derived imbalance factor (None: dense)."""
        load = self.spec.expert_load
        if load is None:
            return None
        return {"experts": load.experts, "top_k": load.top_k, "ep": load.ep, "expert_skew": load.skew,
                "placement": "popularity rank i on EP rank i mod ep",
                "imbalance_factor": load.imbalance, "hottest_rank_share": load.hot_share,
                "formula": "imbalance = hottest EP rank's token copies / mean = ep x sum over its experts of q_i "
                           "/ top_k; q_i = min(1, c p_i), p_i ~ (i+1)^-expert_skew, sum q_i = top_k"}

    def provenance_s(self) -> dict[str, float]:
        """Kernel seconds by compute_db source over every stage_cost answered so far (all units)."""
        out = dict.fromkeys(SOURCES, 0.0)
        for piece, _comm, n in self._entries:
            if n:
                for src, t in zip(SOURCES, piece[4]):
                    out[src] += n * t
        return out


# ---------------------------------------------------------------- measured collectives (compute_db curves)

def measured_collective_s(timer: ServingTimer, op: str, gpus: tuple[int, ...], size: float) -> float | None:
    """Idle time of a collective from the DB's measured curves (compute_db.collectives) when one fits the group
    (same GPU count and GPUs per server, size inside the measured range), else None (netsim answers)."""
    net = getattr(timer, "measured_net", None)
    if net is None or size <= 0 or len(gpus) < 2:
        return None
    got = net.time(op, gpus, size)
    return None if got is None else got.time_s


def collective_provenance_s(timer: ServingTimer) -> dict[str, float]:
    """Blocking collective and PP-send seconds by source ("measured" / "interpolated" curve points of the DB,
    "netsim") over every stage_cost answered so far, weighted by use. Each unit is counted with replica 0's
    groups (replicas are placed alike) at idle-network times (contention slow-downs not included)."""
    from compute_db.collectives import COLLECTIVE_SOURCES
    out = dict.fromkeys(COLLECTIVE_SOURCES, 0.0)
    net = getattr(timer, "measured_net", None)
    rep = timer.placement.replicas[0]

    def add(op: str, gpus: tuple[int, ...], size: float, weight: float) -> None:
        t = timer._collective_s(op, gpus, size)
        if t > 0.0 and weight > 0:
            got = net.time(op, gpus, size) if net is not None else None
            out[got.source if got is not None else "netsim"] += weight * t

    for stage in range(timer.num_stages):
        group = rep.tp_group(stage)
        pairs = rep.pp_pairs(stage)
        for T, (_piece, comm, uses) in timer._token[stage].items():
            for op, _grp, size, n in comm:
                add(op, group, size, uses * n)
            if pairs and uses:     # the slowest pair's send counts (as _send_s)
                size = inf.pp_send_bytes(timer.spec, T)
                add("send", max(pairs, key=lambda pr: timer._collective_s("send", pr, size)), size, uses)
        if stage == timer._last:
            for _rows, (_piece, comm, uses) in timer._head.items():
                for op, _grp, size, n in comm:
                    add(op, group, size, uses * n)
    return out


def make_timer(model: ModelSpec, plan: ServingPlan, topology, gpu: str | None = None, db=None,
               network: str = "analytical", net_calibration=None, host: HostOverhead | None = None,
               mapping=None) -> ServingTimer:
    """The BatchTimer of a deployment: `plan.replicas` replicas of `model` (tp x pp each) on `topology`.

    gpu: compute_db GPU name (None: the topology's GPU type); db: a compute_db.ComputeDB (None: the
    shipped one); network: netsim backend for the idle-network collective estimates ("analytical" |
    "flow"); net_calibration: a netsim NetCalibration for netsim.make_backend (None: netsim's
    constants); host: CPU-side
    overheads (default none); mapping: replica GPU ids (see sim.serve.replica.place_replicas)."""
    from compute_db import open_db
    from netsim import make_backend
    from netsim.backend import Planner
    from sim.errors import SimError
    from sim.inputs import default_gpu

    if network not in NETWORKS:
        raise SimError(f"network {network!r}: expected one of {', '.join(NETWORKS)}")
    gpu = default_gpu(topology, gpu)
    db = db if db is not None else open_db()
    db.gpu(gpu)                                            # unknown GPU: one-line ComputeDBError now
    spec = inf.inference_spec(model, tp=plan.tp, pp=plan.pp, ep=plan.ep, weight_dtype=plan.weight_dtype,
                              kv_dtype=plan.kv_cache_dtype, expert_skew=plan.expert_skew)
    placement = place_replicas(plan, topology, mapping)
    net = make_backend(network, topology, net_calibration=net_calibration)
    planner = getattr(net, "planner", None)
    if not isinstance(planner, Planner):
        planner = Planner(topology)
    timer = ServingTimer(spec, plan, placement, gpu, db, net, planner, host)
    from compute_db.collectives import measured_network
    timer.measured_net = measured_network(db, gpu, topology)     # None: every collective from netsim
    return timer
