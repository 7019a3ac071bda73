"""Event-driven executor of one training iteration.

Model (what is simulated):
- One representative rank per pipeline stage executes the stage's program (all ranks of a stage run
  the same program and are assumed to stay in lock-step: a collective of a stage completes when the
  collectives of ALL its submitted groups have completed, i.e. the slowest group sets the pace).
- Each representative rank has one compute stream and one communication stream per group kind
  (NCCL orders the operations of one communicator on one stream): operations of one kind run in
  issue order, different kinds run concurrently and contend on the network backend.
- A blocking CommOp stalls the compute stream until it completes. A non-blocking one runs on its
  stream; the op named by `wait_op` (same list) waits for it; with wait_op None it is waited at the
  end of its list, except gradient-reduction ops of the last micro-batch (microbatch == "last"), which
  are waited only before the iteration_end ops (Megatron's finish_grad_sync before the optimizer).
- Pipeline: tasks follow sim.schedule; after a forward (backward) of virtual stage k the activation
  (gradient) is sent as point-to-point flows from every rank of the stage to its pipeline peer; the
  consumer task starts when its data has arrived. Sends are asynchronous for the sender (two streams,
  towards the next and the previous stage).
- Cross-stage collectives ("mp", "embedding") start when every participating stage has reached them.
- Stragglers (optional, `stage_factors`, sim.straggler): a stage representative's kernels take its
  factor times as long; its extra kernel time since its last TP/CP/EP collective is what its healthy
  group peers wait at the next one (StageStats.straggler_wait_s).
- Several engines can share one backend (sim.cluster): `start(t0)`, `next_time`/`step_one` and `finish`
  let a driver interleave their events with the backend's; `run` is the same loop for one engine alone.
- Launches and the host (optional, `host`: sim.overheads.HostOverheads): every op is issued by the
  rank's host in program order; a kernel starts no earlier than its issue time plus the launch gap; the
  host catches up with the GPU after `.item()` reads and, with megatron-core's batched p2p, at every
  pipeline task boundary that sends or receives, where the rank also waits for all its communication
  in flight (torch.cuda.synchronize). Compute-stream idle time for launches/host is "overhead".
- Contention (optional, `contention`: sim.contention.ContentionModel): a kernel running while
  communication of its rank is in flight is slowed by the SM share and HBM traffic of that
  communication. Beside arithmetically timed communication (known start and end) the kernel's end is
  computed piecewise; beside event-driven communication the kernel runs as an event, re-timed whenever
  a collective of the rank starts or ends.

Which groups are submitted to the network (symmetry; tests/sim/test_sim_symmetry.py compares with
sampling "full", where every group of every kind is submitted):
- A kind's groups in a stage are congruent translates running identical programs. In "auto" mode a
  subset is submitted when the omitted groups' flows use only links no submitted group of that kind
  uses and no ECMP choice:
  (1) every group inside one NVLink domain -> only the representative's group (it uses only its own
      GPUs' NVLink/NVSwitch links);
  (2) every member a single-homed NIC endpoint (SimAI model) under the same first-hop switch -> only
      the representative's group (only its members' own access links are used).
  Otherwise every group of the stage is submitted. Flows of OTHER kinds crossing the links of an
  omitted copy miss that copy's load; the submitted copy carries the full load and a collective ends
  with its slowest flow, so stage timing is unchanged - exactly when those other flows are symmetric
  too, and up to ECMP-hash luck when they are hashed over spines (which copy is unluckiest; measured
  <= 0.03% in the tests).
  (3) sampling "rail" (opt-in, approximate) also lets the representative's rail stand for all rails of
      a rail-optimized fabric when groups stay within one rail and pod; rails use disjoint links but
      ECMP hashing makes them unequally lucky, so this can be optimistic by several percent.
  (4) "auto" on a routing backend (flow; Engine._submitted), per call (kind, stage, collective,
      size) on what (1)/(2) left: the groups are joined into components by the network channels
      their flows take as the backend routes them (ECMP hash / D-mod-k choice included), so no flow
      of a component shares a channel with another component of the call (route_components).
      Components with the same signature (algorithm, protocol, timing terms; flow by flow payload
      share, latency, cap and weights on an isomorphic channel pattern; the channels' capacities)
      are copies: alone, each finishes at the same time as the others. One copy of a class is
      submitted (the representative rank's when it is one) when the call has a single class or when
      the class uses only its GPUs' own access links (reduce_components); a class crossing the
      fabric (switch-to-switch channels) beside other classes is submitted whole: in a stage pair
      split by a leaf boundary, every pair over the spine and one local pair. A pipeline send whose
      omitted copies would use a fabric channel of a component submitted whole by another pipeline
      send is submitted whole too (Engine._pp_plan, every stage pair at once, to a fixed point):
      without this the whole component's flows miss those copies' load (4e-6 of the 1T
      benchmark's iteration). (1) and (2) are special cases (one-group components); (4) also
      reduces stage pairs that all cross a leaf or pod boundary, groups of dual-homed GPUs whose
      routes happen to be disjoint, and servers shuffled across leaves. Same caveat as above for the
      rest: flows of other calls crossing an omitted copy's channels miss its load (exact when those
      loads are symmetric, as between the translated pipelines of DP replicas). Every group is
      routed once for this; its algorithm/protocol choice and plan are shared with earlier groups of
      equal key (netsim.backend.Planner.choice_key, exact).
  (5) "auto" on a routing backend, EP calls that (4) leaves with several groups (they share fabric
      links through ECMP): each class of congruent groups is submitted as one quotient copy, the
      representative's flows carrying every copy's switch-to-switch load (sim.ep_symmetry).
      Approximate (copies forced to one rate per flow); measured error in docs/sim.md.
- Isolated kinds: when all groups of a kind lie inside NVLink domains and no other kind used in the
  forward/backward lists (nor a pipeline send) has two members in one domain, that kind's
  per-micro-batch collectives can never share a link with other traffic; they are timed with
  backend.estimate (the idle-network time) without events. Same for every collective on a
  contention-free backend ("analytical"), using the slowest of the stage's groups (one representative
  when all groups are congruent).
- PP sends use the same rules on (stage GPU, next-stage GPU) pairs.
- The reductions change which copies are submitted, never how a submitted one is timed: sampling
  "full" is the reference, and tests/sim/test_sim_symmetry.py bounds the difference (docs/sim.md).

Time accounting of each representative rank (sums to the iteration time exactly):
compute (incl. the contention slowdown) + exposed comm per report group (TP, CP, EP, DP, PP) + overhead
+ bubble. Waiting for pipeline data is
split: the part during which the data was in flight is exposed PP, the rest (and idle time before the
first and after the last op) is bubble.
"""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from netsim.api import CollectiveRequest
from sim.ep_symmetry import QUOTIENT_KINDS, QuotientGroup, quotient_groups, submit_quotient
from sim.errors import SimError
from sim.schedule import stage_tasks
from workload_gen.workload import REPORT_GROUP, CommOp

REPORT_KEYS = ("TP", "CP", "EP", "DP", "PP")
_CROSS_STAGE = ("mp", "embedding")
_DP_KINDS = ("dp", "dp_cp", "edp", "embedding", "mp")
_LOCKSTEP_KINDS = ("tp", "cp", "ep", "etp")   # groups inside one stage of one model replica (or its EP peers)


def report_group(kind: str) -> str:
    return REPORT_GROUP.get(kind, "DP")


def column_of(op) -> str:
    """SimAI EndToEnd column of an op: 'fwd', 'ig' (input grad) or 'wg' (weight grad / DP)."""
    if op.is_comm:
        if op.group in _DP_KINDS and op.phase != "fwd":
            return "wg"
        return "fwd" if op.phase in ("fwd", "iteration_start") else "ig"
    if op.variant == "wgrad" or op.phase == "iteration_end" or op.kind == "optimizer":
        return "wg"
    return "fwd" if op.phase in ("fwd", "iteration_start") else "ig"


@dataclass(slots=True)      # hundreds of thousands per run (pipeline sends, isolated collectives)
class Handle:
    """A communication operation of one stage (possibly many network collectives)."""
    kind: str
    name: str
    start_s: float = math.nan
    done_s: float = math.nan
    done: bool = False
    waiters: list = field(default_factory=list)
    rdv_s: float = math.nan      # cross-stage collectives: time the last participant arrived
    fast: bool = False           # timed arithmetically (done_s known at issue; no events)
    op: object = None            # the CommOp (exposed time is attributed to its per-layer row)
    owner: object = None         # _StageRun that issued it (contention model: in-flight comm)
    fp: object = None            # contention.Footprint while in flight
    # per-collective record of a stage representative's operation (StepReport.collectives)
    stage: int = -1              # issuing stage; -1: not an operation of a representative rank
    collective: str = ""
    size_bytes: int = 0
    group_size: int = 0
    peer_stage: int = -1         # pipeline sends: the receiving stage
    exposed_s: float = 0.0       # compute-stream wait charged to it as exposed communication


class FastOp:
    """What every execution of one arithmetically timed op of one stage shares (made once per op): its
    idle-network time `est` (s), group size, contention footprint, and stage 0's layer row and column.

    A blocking one that the run loop times without a Handle (_StageRun._compute_run) is logged in
    Engine.comm_log as the tuple (FastOp, start_s, done_s, exposed_s)."""

    __slots__ = ("op", "stage", "kind", "report_group", "est", "group_size", "size_bytes", "fp", "row", "col",
                 "host_sync")

    def __init__(self, op, stage: int, est: float, group_size: int, fp, row, col, host_sync: bool) -> None:
        self.op = op                 # the CommOp (lives as long as the workload)
        self.stage = stage
        self.kind = op.group
        self.report_group = report_group(op.group)
        self.est = est
        self.group_size = group_size
        self.size_bytes = int(op.size_bytes)
        self.fp = fp
        self.row = row               # per-layer row key and column (None off stage 0)
        self.col = col
        self.host_sync = host_sync   # the host reads its result (sim.overheads: .item() after it)


@dataclass
class StageStats:
    compute_s: float = 0.0
    exposed_s: dict = field(default_factory=lambda: dict.fromkeys(REPORT_KEYS, 0.0))
    bubble_s: float = 0.0
    end_s: float = 0.0
    exposed_kind_s: dict = field(default_factory=dict)   # raw group kind (tp, dp, edp, ...) -> s
    overhead_s: float = 0.0       # compute stream idle waiting for kernel launches / the host
    slowdown_s: float = 0.0       # part of compute_s added by communication in flight (contention)
    pp_wait_s: float = 0.0        # compute stream waiting for pipeline data (exposed PP + its bubble part)
    # stragglers (stage_factors): extra kernel time of this stage's slowest rank charged to the next
    # TP/CP/EP collective of its groups = time its healthy group peers wait there (report group -> s)
    straggler_wait_s: dict = field(default_factory=dict)


@dataclass
class LayerStats:
    """Per-row accumulators for the EndToEnd-style CSV (seconds and bytes, whole iteration)."""
    compute_s: dict = field(default_factory=lambda: {"fwd": 0.0, "ig": 0.0, "wg": 0.0})
    exposed_s: dict = field(default_factory=lambda: {"fwd": 0.0, "ig": 0.0, "wg": 0.0})
    comm_s: dict = field(default_factory=lambda: {"fwd": 0.0, "ig": 0.0, "wg": 0.0})
    comm_bytes: dict = field(default_factory=lambda: {"fwd": 0.0, "ig": 0.0, "wg": 0.0})
    comm_kind: dict = field(default_factory=dict)      # column -> (collective, group size)


@dataclass
class EngineResult:
    iteration_time_s: float
    stages: list[StageStats]
    layers: dict            # row key -> LayerStats (stage 0 representative)
    trace: list             # (stage, thread, name, start_s, dur_s, category) when tracing
    comm_count: int         # network collectives submitted
    rep_ranks: list[int]
    bypassed: int = 0       # collectives timed by backend.estimate (isolated NVLink kinds)
    isolated: tuple = ()
    # every stage representative's communication in issue order: Handles, and (FastOp, start_s, done_s,
    # exposed_s) tuples of blocking arithmetically timed ops (sim.simulation._collective_rows reads both)
    comm_log: list = field(default_factory=list)
    collective_rows: object = None     # a fast run's rows: sim.fastpath.CollectiveRows (built on first read)


@dataclass
class _RunningKernel:
    """A compute kernel running while event-driven communication of its rank is in flight."""
    op: object
    dur: float           # its time alone (s)
    t_start: float
    work: float          # seconds of work (at full speed) left at t_last
    t_last: float
    f: float = 1.0       # current slowdown factor (sim.contention)
    ver: int = 0         # version of its pending end / re-time event


class _Stream:
    """FIFO of communication operations of one kind on one stage. release: the waiter that starts the
    next queued operation when one completes (untraced runs; made once per stream, not per operation)."""
    __slots__ = ("busy", "queue", "release")

    def __init__(self) -> None:
        self.busy = False
        self.queue: list = []
        self.release = None


class Engine:
    """Runs one iteration. `op_time_s(op)` gives each ComputeOp's duration in seconds."""

    def __init__(self, workload, placement, topology, backend, op_time_s: Callable,
                 sampling: str = "auto", trace: bool = False, row_key: Callable | None = None,
                 progress: bool = False, host=None, contention=None, stage_factors=None) -> None:
        """host: sim.overheads.HostOverheads (None: kernels start back to back, no host);
        contention: sim.contention.ContentionModel (None: overlapped communication is free);
        stage_factors: per pipeline stage, the kernel-time multiplier (>= 1) of the representative
        rank (sim.straggler: the slowest rank of the stage); None: every rank at nominal speed."""
        if sampling not in ("auto", "full", "rail"):
            raise SimError(f"sampling '{sampling}': use auto, full or rail")
        self.w = workload
        self.plan = workload.plan
        self.pl = placement
        self.topo = topology
        self.net = backend
        self.op_time_s = op_time_s
        self.sampling = sampling
        self.tracing = trace
        self.row_key = row_key or default_row_key
        self.progress = progress
        self.p = int(self.plan.pp)
        self.v = max(1, int(self.plan.vpp))
        self.m = int(workload.num_microbatches)
        if len(workload.stages) != self.p:
            raise SimError(f"workload has {len(workload.stages)} stage programs but pp = {self.p}")
        for st in workload.stages:
            if len(st.chunks) != self.v:
                raise SimError(f"stage {st.stage} has {len(st.chunks)} chunks but vpp = {self.v}")
        self._heap: list = []
        self._seq = 0
        self._now = 0.0
        self._group_cache: dict = {}
        self._domain_cache: dict = {}
        self._rendezvous: dict = {}
        self._avail: dict = {}
        self.comm_count = 0
        self.bypassed = 0
        # contention-free backend (analytical): every collective takes its idle-network time, so
        # the slowest group's estimate is exact and nothing needs to be submitted
        self.contention_free = getattr(backend, "kind", "") == "analytical"
        self._est_cache: dict = {}
        self._sub_cache: dict = {}
        self._quotients = False       # a QuotientGroup was submitted (rule 5; _submitted sets it)
        self._solo = False            # driven by run() alone (not sim.cluster): _jump may move the clock
        # pipeline sends' request lists per (pp, stage, peer stage, size), when the backend keeps no
        # per-collective records: the tag (which names the send) is then read by nothing
        self._send_reqs: dict | None = None if getattr(backend, "keep_records", True) else {}
        self.trace: list = []
        self.comm_log: list = []
        self.trace_slots = None     # sim.fastpath: (trace, shared argument dicts) for sim.trace_args.annotate
        self.layers: dict = defaultdict(LayerStats)
        self.host = host
        self.contention = contention
        self._fp_cache: dict = {}
        self._fp_model: dict = {}         # footprint(): ContentionModel.footprint's inputs -> its Footprint
        self._factor_cache: dict = {}     # _StageRun._factor memo
        if stage_factors is None:
            stage_factors = [1.0] * self.p
        stage_factors = [float(f) for f in stage_factors]
        if len(stage_factors) != self.p or not all(math.isfinite(f) and f >= 1.0 for f in stage_factors):
            raise SimError(f"stage_factors {stage_factors}: need {self.p} finite factors >= 1 (one per stage)")
        self.stage_factors = stage_factors

    # ---------------- event queue ----------------
    def _push(self, t: float, fn, *args) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn, args))

    # ---------------- groups & sampling ----------------
    def _domain(self, gpu: int):
        d = self._domain_cache.get(gpu)
        if d is None:
            d = self.topo.nvlink_domain_of(gpu)
            self._domain_cache[gpu] = d
        return d

    def _rail_pure(self) -> bool:
        """True when every first-hop switch serves GPUs of one rail only (rail-optimized fabric)."""
        hit = self._group_cache.get("rail_pure")
        if hit is None:
            topo = self.topo
            hit = False
            if all(hasattr(topo, a) for a in ("tors_of", "rail_of", "out_links", "nodes")):
                rails_of_tor: dict[int, int] = {}
                hit = True
                for g in range(int(topo.num_gpus)):
                    r = topo.rail_of(g)
                    for t in topo.tors_of(g):
                        if rails_of_tor.setdefault(t, r) != r:
                            hit = False
                            break
                    if not hit:
                        break
            self._group_cache["rail_pure"] = hit
        return hit

    def _pod(self, gpu: int):
        """Switches one tier above the GPU's first-hop switches. GPUs with equal keys reach each
        other through first-hop -> second-tier -> first-hop paths, never through higher tiers."""
        key = ("pod", gpu)
        r = self._domain_cache.get(key)
        if r is None:
            topo = self.topo
            nodes = topo.nodes
            ups = set()
            for t in topo.tors_of(gpu):
                for link in topo.out_links(t):
                    n = nodes[link.dst]
                    if n.kind == "switch" and n.tier not in ("pcie", nodes[t].tier):
                        ups.add(link.dst)
            r = tuple(sorted(ups))
            self._domain_cache[key] = r
        return r

    def _direct_ports(self) -> bool:
        """True when every GPU links straight to its first-hop switches (its own NIC endpoint, as in
        SimAI): then a group whose members share their first-hop switches uses only its members'
        own access links."""
        hit = self._group_cache.get("direct_ports")
        if hit is None:
            topo = self.topo
            hit = hasattr(topo, "gpu_ports") and hasattr(topo, "tors_of") and all(
                len(path) == 2 for g in range(int(topo.num_gpus)) for path in topo.gpu_ports(g))
            self._group_cache["direct_ports"] = hit
        return hit

    def _tors(self, gpu: int):
        key = ("tors", gpu)
        r = self._domain_cache.get(key)
        if r is None:
            r = tuple(self.topo.tors_of(gpu))
            self._domain_cache[key] = r
        return r

    def _rail(self, gpu: int) -> int:
        key = ("rail", gpu)
        r = self._domain_cache.get(key)
        if r is None:
            r = self.topo.rail_of(gpu)
            self._domain_cache[key] = r
        return r

    def _select(self, groups: list[tuple[int, ...]], rep_gpu: int) -> list[tuple[int, ...]]:
        """Groups (GPU tuples) to submit on a backend with contention (contention-free: _select_rows);
        see the module docstring for the symmetry argument."""
        if self.sampling == "full" or len(groups) <= 1:
            return groups
        dom = self._domain
        if all(all(dom(g) == dom(grp[0]) for g in grp[1:]) for grp in groups):
            return [grp for grp in groups if rep_gpu in grp][:1]
        if self._direct_ports():
            tors = self._tors
            if all(len(tors(grp[0])) == 1 and all(tors(g) == tors(grp[0]) for g in grp[1:]) for grp in groups):
                return [grp for grp in groups if rep_gpu in grp][:1]
        if self.sampling != "rail":
            return groups
        rail, pod = self._rail, self._pod
        if self._rail_pure() and all(all(rail(g) == rail(grp[0]) and pod(g) == pod(grp[0]) for g in grp[1:])
                                     for grp in groups):
            r = rail(rep_gpu)
            return [grp for grp in groups if rail(grp[0]) == r]
        return groups

    def _congruent_rep(self, g, rep_gpu: int, congruent: bool = False) -> list[tuple[int, ...]] | None:
        """The contention-free selection rule on groups given as the rows of an integer array: congruent
        groups (same member offsets, same NVLink-domain pattern) have equal idle-network times, so
        the representative's group (first row holding rep_gpu; [] if none) stands for all of them;
        None when they are not congruent. `congruent`: known to be (_kind_congruent), not checked."""
        if not (congruent or self._congruent(g)):
            return None
        hit = (g == rep_gpu).any(axis=1).nonzero()[0]
        return [tuple(g[hit[0]].tolist())] if len(hit) else []

    def _congruent(self, g) -> bool:
        """Whether the rows of GPU array `g` are congruent (_congruent_rep)."""
        d = self._dom_array()[g]
        return bool(((g - g[:, :1]) == (g[0] - g[0, 0])).all() and ((d - d[:, :1]) == (d[0] - d[0, 0])).all())

    def _kind_congruent(self, kind: str) -> bool:
        """Whether all groups of `kind` are congruent (cached): then so are any of its groups (one
        stage's) and any of its columns (a pipeline stage pair's), so _groups_for and _pp_pairs need
        not check each stage's."""
        key = ("congruent", kind)
        hit = self._group_cache.get(key)
        if hit is None:
            hit = self._group_cache[key] = self._congruent(self.pl.gpus[self.pl.rank_groups(kind)])
        return hit

    def _select_rows(self, g, rep_gpu: int, kind: str | None = None) -> list[tuple[int, ...]]:
        """Groups to submit, of the groups given as the rows of an integer array: on a contention-free
        backend the representative's group when congruent groups stand for all (_congruent_rep, without
        making every group's tuple; not checked when all groups of `kind` are: _kind_congruent; None: a
        cross-stage kind's groups, checked), else every group; with contention, _select's rules."""
        if self.contention_free and self.sampling != "full" and len(g) > 1:
            one = self._congruent_rep(g, rep_gpu, kind is not None and self._kind_congruent(kind))
            if one is not None:
                return one
            return list(map(tuple, g.tolist()))
        return self._select(list(map(tuple, g.tolist())), rep_gpu)

    def _groups_for(self, kind: str, stage: int) -> list[tuple[int, ...]]:
        """GPU tuples submitted for one collective of `kind` issued by `stage`."""
        key = (kind, stage)
        hit = self._group_cache.get(key)
        if hit is not None:
            return hit
        if kind in _CROSS_STAGE:
            rows = self.pl.rank_groups(kind)
            rep_rank = self.rep_ranks[0]
        else:
            rows = self.pl.groups_in_stage(kind, stage)
            rep_rank = self.rep_ranks[stage]
        if len(rows) == 0:
            raise SimError(f"no '{kind}' group found for stage {stage}")
        gpus = self.pl.gpus
        out = self._select_rows(gpus[rows], int(gpus[rep_rank]), None if kind in _CROSS_STAGE else kind)
        self._group_cache[key] = out
        return out

    def _pp_pairs(self, src_stage: int, dst_stage: int) -> list[tuple[int, int]]:
        key = ("pp", src_stage, dst_stage)
        hit = self._group_cache.get(key)
        if hit is not None:
            return hit
        rows = self.pl.rank_groups("pp")
        gpus = self.pl.gpus
        pairs = self._select_rows(gpus[rows[:, [src_stage, dst_stage]]], int(gpus[self.rep_ranks[src_stage]]),
                                  "pp")
        self._group_cache[key] = pairs
        return pairs

    def _submitted(self, key, groups, collective: str, size: int, rep_gpu: int) -> list:
        """Groups (of two or more GPUs) whose `collective` of `size` bytes goes to the flow network;
        cached per key. "auto" on a routing backend: rule (4) of the module docstring."""
        hit = self._sub_cache.get(key)
        if hit is None:
            hit = [g for g in groups if len(g) > 1]
            if self.sampling == "auto" and not self.contention_free and len(hit) > 1:
                planner = getattr(self.net, "planner", None)
                if planner is not None and hasattr(planner, "call"):
                    if key[0] == "pp":
                        keep = self._pp_plan(size)[(key[1], key[2])]
                    else:
                        comps = route_components(planner, hit, collective, size)
                        keep = reduce_components(planner, comps, _index_of(hit, rep_gpu))[0]
                    hit = [g for i, g in enumerate(hit) if i in keep]
                    if key[0] in QUOTIENT_KINDS and len(hit) > 1:   # rule (5): sim.ep_symmetry
                        hit = quotient_groups(planner, hit, collective, size, rep_gpu)
                        self._quotients = self._quotients or any(type(g) is QuotientGroup for g in hit)
            self._sub_cache[key] = hit
        return hit

    def _route_classes(self, groups: list, collective: str, size: int, rep_gpu: int) -> list:
        """Rule (4) on one call taken alone: the groups submitted (list order)."""
        planner = getattr(self.net, "planner", None)
        if planner is None or not hasattr(planner, "call"):
            return groups
        comps = route_components(planner, groups, collective, size)
        keep = reduce_components(planner, comps, _index_of(groups, rep_gpu))[0]
        return [g for i, g in enumerate(groups) if i in keep]

    def _pp_plan(self, size: int) -> dict:
        """(src stage, dst stage) -> indices into _pp_pairs kept by rule (4) for sends of `size` bytes,
        over every stage pair of the schedule at once: a call whose omitted copies use a fabric channel
        (switch to switch) of a component submitted whole in another PP call is submitted whole too,
        else that component's flows would miss those copies' load (4e-6 of the 1T benchmark's
        iteration without this); repeated until no call changes."""
        key = ("pp_plan", size)
        hit = self._group_cache.get(key)
        if hit is None:
            planner = self.net.planner
            links = {(s, s + 1) for s in range(self.p - 1)}
            if self.v > 1 and self.p > 1:
                links.add((self.p - 1, 0))
            calls = {}
            for a, b in sorted(links | {(b, a) for a, b in links}):
                pairs = [q for q in self._pp_pairs(a, b) if len(q) > 1]
                rep = _index_of(pairs, int(self.pl.gpus[self.rep_ranks[a]]))
                comps = route_components(planner, pairs, "send", size) if len(pairs) > 1 else []
                red = reduce_components(planner, comps, rep) if comps else (set(range(len(pairs))), [], set())
                all_fabric = fabric_channels(planner, set().union(*(chans for _, _, chans in comps)))
                calls[(a, b)] = (len(pairs), red, all_fabric)
            forced: set = set()
            while True:
                # fabric channels of what is submitted whole: whole classes, and whole calls
                avoid = set().union(*(all_fab if ab in forced else red[2] for ab, (_, red, all_fab) in calls.items()))
                more = {ab for ab, (_, red, _) in calls.items()
                        if ab not in forced and any(not avoid.isdisjoint(chans) for chans in red[1])}
                if not more:
                    break
                forced |= more
            hit = {ab: (set(range(n)) if ab in forced else red[0]) for ab, (n, red, _) in calls.items()}
            self._group_cache[key] = hit
        return hit

    def _dom_array(self):
        dom = self._group_cache.get("dom_array")
        if dom is None:
            import numpy as np
            every = getattr(self.topo, "nvlink_domains", None)     # topo.Topology: all GPUs' at once
            dom = np.array(every() if every is not None
                           else [self.topo.nvlink_domain_of(g) for g in range(int(self.topo.num_gpus))])
            self._group_cache["dom_array"] = dom
        return dom

    def _find_isolated(self) -> set:
        """Group kinds whose per-micro-batch collectives never share a link with other traffic.

        A kind qualifies when all its groups lie inside NVLink domains and no other kind used in the
        forward/backward lists (nor a pipeline send) has two members in one NVLink domain: its traffic
        then stays on NVLink links that only its own (stream-serialised) collectives use, so each
        collective takes exactly its idle-network time (backend.estimate). Once-per-iteration ops
        (iteration_start/end) always go through the network backend.
        """
        if self.sampling == "full" or not hasattr(self.topo, "nvlink_domain_of"):
            return set()
        import numpy as np
        kinds = {op.group for st in self.w.stages for ch in st.chunks for op in list(ch.forward) + list(ch.backward)
                 if op.is_comm and op.group != "pp"}
        dom = self._dom_array()
        shared: set = set()
        all_intra: set = set()
        for k in kinds:
            rows = self.pl.rank_groups(k)
            if rows.shape[1] < 2:
                continue
            d = dom[self.pl.gpus[rows]]
            ds = np.sort(d, axis=1)
            if (ds[:, 1:] == ds[:, :-1]).any():
                shared.add(k)
            if (d == d[:, :1]).all():
                all_intra.add(k)
        if self.p > 1:
            rows = self.pl.rank_groups("pp")
            d = dom[self.pl.gpus[rows]]
            if (d == np.roll(d, -1, axis=1)).any():
                shared.add("pp")
        if len(shared) == 1 and shared <= all_intra:
            return set(shared)
        return set()

    def _send_requests(self, h: Handle, key, pairs, size: int, rep_gpu: int) -> list:
        """The requests of pipeline send `h` (est_key `key`) to submit; the list is shared by every send
        of `key` when the backend records no tags (else each is tagged with its send's name)."""
        cache = self._send_reqs
        if cache is not None:
            reqs = cache.get(key)
            if reqs is None:
                reqs = cache[key] = [CollectiveRequest("send", pair, size, tag="pp")
                                     for pair in self._submitted(key, pairs, "send", size, rep_gpu)]
            return reqs
        return [CollectiveRequest("send", pair, size, tag=f"pp:{h.name}")
                for pair in self._submitted(key, pairs, "send", size, rep_gpu)]

    def _bypass(self, handle: Handle, reqs, now: float, key=None) -> None:
        """Complete `handle` after the slowest of `reqs` on an idle network (backend.estimate).
        `reqs`: a list of requests or a function returning it (called only on a cache miss)."""
        if key is None:
            key = tuple((r.op, r.gpus, r.size_bytes) for r in reqs)
        est = self._est_cache.get(key)
        if est is None:
            reqs = reqs() if callable(reqs) else reqs
            est = max((float(self.net.estimate(r)) for r in reqs), default=0.0)
            self._est_cache[key] = est
        handle.start_s = now
        self.bypassed += 1
        self._push(now + est, self._finish, handle, True)

    def _submit_or_estimate(self, handle: Handle, make_list, now: float, key) -> None:
        if self.contention_free:
            self._bypass(handle, make_list, now, key)
        else:
            self._submit(handle, make_list(), now)

    # ---------------- network submission ----------------
    def _submit(self, handle: Handle, reqs: list[CollectiveRequest], now: float) -> None:
        handle.start_s = now
        if not reqs:
            self._push(now, self._finish, handle)
            return
        left = [len(reqs)]
        latest = [now]

        def on_done(t: float) -> None:
            left[0] -= 1
            latest[0] = max(latest[0], t)
            if left[0] == 0:
                self._push(latest[0], self._finish, handle, True)

        self.comm_count += len(reqs)
        if self._quotients and any(type(r.gpus) is QuotientGroup for r in reqs):    # rule (5): sim.ep_symmetry
            for r in reqs:
                if type(r.gpus) is QuotientGroup:
                    submit_quotient(self.net, r, now, on_done)
            reqs = [r for r in reqs if type(r.gpus) is not QuotientGroup]
            if not reqs:
                return
        many = getattr(self.net, "submit_many", None)
        if many is not None:      # one call: validation, choice and routing cached per group shape
            many(reqs, now, on_done)
            return
        for req in reqs:
            self.net.submit(req, now, on_done)

    def _finish(self, handle: Handle, owned: bool = False) -> None:
        """Complete `handle` at engine time and call its waiters in order. owned: this call is the
        whole event (pushed by the engine), so a stage resumed by the last waiter owns the rest of
        it (_StageRun.step)."""
        handle.done = True
        handle.done_s = self._now
        if handle.owner is not None and handle.owner.kernel is not None:
            handle.owner.comm_changed()
        waiters, handle.waiters = handle.waiters, []
        if owned and waiters and getattr(waiters[-1], "__func__", None) is _StageRun._resume:
            last = waiters.pop()
            for fn in waiters:
                fn()
            last(True)
            return
        for fn in waiters:
            fn()

    def _jump(self, t: float) -> bool:
        """Move the engine clock to `t` now when, in run() alone, the event a push at `t` would
        make is the next one anyway: nothing in the queue at or before `t` (entries pushed earlier
        win ties) and no network event at or before `t` (the network wins ties). The caller must
        own the rest of the current event (nothing else runs in it after the caller returns)."""
        if not self._solo:
            return False
        heap = self._heap
        if (heap and heap[0][0] <= t) or self.net.next_event_time() <= t:
            return False
        self._now = t
        return True

    def _stream_issue(self, st: _StageRun, kind: str, handle: Handle, make_reqs) -> None:
        stream = st.streams[kind]
        stream.queue.append((handle, make_reqs))
        if not stream.busy:
            free = st.fast_free.get(kind, 0.0)
            if free > self._now:
                # an arithmetically timed op still occupies this stream
                stream.busy = True
                self._push(free, self._stream_release, st, kind)
            else:
                self._stream_next(st, kind)

    def _direct(self, st: _StageRun, kind: str, stream: _Stream) -> bool:
        """A pipeline send can go straight to the network (_StageRun._send): its stream is idle, and
        nothing arithmetically timed occupies it, on a backend that is not contention-free."""
        return not (stream.busy or stream.queue or self.contention_free) and st.fast_free.get(kind, 0.0) <= self._now

    def _stream_release(self, st: _StageRun, kind: str) -> None:
        st.streams[kind].busy = False
        self._stream_next(st, kind)

    def _stream_next(self, st: _StageRun, kind: str) -> None:
        stream = st.streams[kind]
        if not stream.queue:
            stream.busy = False
            return
        stream.busy = True
        handle, make_reqs = stream.queue.pop(0)
        handle.waiters.insert(0, self._after(st, kind, stream, handle))
        make_reqs(handle, self._now)
        if st.kernel is not None and handle.fp is not None:
            st.comm_changed()

    def _after(self, st: _StageRun, kind: str, stream: _Stream, handle: Handle):
        """The waiter of `handle` (first in its list) that traces it and starts the stream's next operation."""
        if not self.tracing:
            after = stream.release
            if after is None:
                def after() -> None:
                    self._stream_next(st, kind)
                stream.release = after
            return after

        def after() -> None:
            self.trace.append((st.stage, f"comm:{kind}", handle.name, handle.start_s,
                               handle.done_s - handle.start_s, "comm", handle))
            self._stream_next(st, kind)
        return after

    # ---------------- contention ----------------
    def footprint(self, stage: int, op, groups, duration_s: float | None = None):
        """contention.Footprint of CommOp `op` of `stage` over `groups` (None without the model).

        Its HBM rate uses the collective's idle-network time (backend.estimate of the first group;
        `duration_s` when the caller has it), the same for event-driven and arithmetically timed ops."""
        cm = self.contention
        if cm is None:
            return None
        wgrad = (op.wait_op or "").endswith("_wgrad")
        key = (stage, op.group, op.collective, int(op.size_bytes), op.blocking, wgrad)
        fp = self._fp_cache.get(key)
        if fp is None:
            g = tuple(groups[0]) if groups else ()
            local = len(g) > 0 and self._one_domain(g)
            if duration_s is None and len(g) > 1 and op.size_bytes > 0:
                duration_s = float(self.net.estimate(CollectiveRequest(op.collective, g, int(op.size_bytes))))
            # ContentionModel.footprint reads of op only these fields: stages whose ops agree on them
            # and on (group size, NVLink-local, duration) share one Footprint
            mkey = (op.group, op.collective, op.size_bytes, op.blocking, wgrad, len(g), local, duration_s)
            fp = self._fp_model.get(mkey)
            if fp is None:
                fp = self._fp_model[mkey] = cm.footprint(op, len(g), local, duration_s)
            self._fp_cache[key] = fp
        return fp

    def _one_domain(self, g: tuple) -> bool:
        """Whether every GPU of `g` is in g[0]'s NVLink domain (large groups, e.g. 384 data-parallel
        ranks: one comparison on the domain array instead of a look-up per GPU)."""
        if len(g) < 8:
            dom = self._domain
            return all(dom(x) == dom(g[0]) for x in g[1:])
        d = self._dom_array()[list(g)]
        return bool((d == d[0]).all())

    # ---------------- stage execution ----------------
    def start(self, t0_s: float = 0.0) -> None:
        """Set up the stage runs; the iteration starts at t0_s (absolute time of the backend's clock)."""
        p = self.p
        self.t0_s = float(t0_s)
        self._now = self.t0_s
        self.rep_ranks = [int(self.pl.stage_ranks(s)[0]) for s in range(p)]
        self.isolated = self._find_isolated()
        self.fast_kinds = frozenset(self.isolated).difference(_CROSS_STAGE, ("pp",))
        kind = self.w.schedule if p > 1 or self.v > 1 else "1f1b"
        if kind == "none":
            kind = "1f1b"
        self.runs = [_StageRun(self, s, stage_tasks(kind, s, p, self.m, self.v)) for s in range(p)]
        for r in self.runs:
            r.clock = r.host = self.t0_s     # the host starts issuing at the start too
        bar = None
        if self.progress:
            try:
                from tqdm import tqdm
                bar = tqdm(total=sum(len(r.segments) for r in self.runs), desc="simulating", unit="task",
                           leave=False)
            except ImportError:  # pragma: no cover
                bar = None
        self._bar = bar
        # a flow backend's engine: each pipeline send starts and ends its flows (two events); a long
        # pipeline makes the compiled kernels worth loading from the start (netsim.engine.expect_events)
        expect = getattr(getattr(self.net, "engine", None), "expect_events", None)
        if expect is not None and not self.contention_free:
            expect(4 * max(0, p * self.v - 1) * self.m)
        for r in self.runs:
            self._push(self.t0_s, r.step)

    def next_time(self) -> float:
        """Time of this engine's next own event (math.inf when none)."""
        return self._heap[0][0] if self._heap else math.inf

    def step_one(self) -> None:
        """Run this engine's earliest event (a driver sharing the backend interleaves engines)."""
        t, _, fn, args = heapq.heappop(self._heap)
        self._now = max(self._now, t)
        fn(*args)

    @property
    def all_finished(self) -> bool:
        return all(r.finished for r in self.runs)

    def run(self) -> EngineResult:
        """Simulate one iteration alone on the backend: start, events to exhaustion, finish."""
        self.start(0.0)
        self._solo = True
        heap = self._heap
        net = self.net
        net_next, pop, inf = net.next_event_time, heapq.heappop, math.inf
        while True:
            t_net = net_next()
            t_heap = heap[0][0] if heap else inf
            if t_net == inf and t_heap == inf:
                break
            if t_net <= t_heap:
                if t_net < self._now - 1e-12:
                    raise SimError(f"network backend went back in time ({t_net} < {self._now})")
                if t_net > self._now:
                    self._now = t_net
                net.advance(t_net)
            else:
                t, _, fn, args = pop(heap)
                if t > self._now:           # max(self._now, t) without the call (per event)
                    self._now = t
                fn(*args)
        return self.finish()

    def finish(self) -> EngineResult:
        """Result once every stage finished; times relative to the start t0_s."""
        if self._bar is not None:
            self._bar.close()
            self._bar = None
        stuck = [r.stage for r in self.runs if not r.finished]
        if stuck:
            raise SimError(f"simulation deadlocked: stage(s) {stuck} never finished (inconsistent workload)")
        end = max(r.stats.end_s for r in self.runs)
        for r in self.runs:
            r.stats.bubble_s += end - r.stats.end_s
            r.stats.end_s -= self.t0_s
        return EngineResult(iteration_time_s=end - self.t0_s, stages=[r.stats for r in self.runs],
                            layers=dict(self.layers), trace=self.trace, comm_count=self.comm_count,
                            rep_ranks=self.rep_ranks, bypassed=self.bypassed, isolated=tuple(sorted(self.isolated)),
                            comm_log=self.comm_log)


_ROW_PREFIXES = (("embedding", "embedding_layer"), ("final_norm", "final_layer"), ("lm_head", "final_layer"),
                 ("cross_entropy", "cross_entropy"), ("dp_param", "grad_param_comm"),
                 ("dp_grad", "grad_param_comm"), ("edp", "grad_param_comm"), ("grad_norm", "grad_norm"),
                 ("tp_replicated", "grad_norm"), ("optimizer", "optimizer"))


def route_components(planner, groups: list, collective: str, size: int):
    """[(group indices, signature, channels)] of one call: groups joined into components by the
    network channels their flows use as the backend routes them (ECMP choice included), so no flow
    of a component shares a channel with another. The signature (per group in list order:
    algorithm, protocol, timing terms; per flow: payload share, latency, cap, weights on an
    isomorphic channel pattern; the channels' capacities) is equal for copies that finish at the
    same time when nothing else crosses them. Components are listed by their first group, groups
    in list order; a component's channels are numbered (and returned) in order of first use.
    The channel bookkeeping is done with numpy on all uses at once (_components_of, _channel_labels;
    whole components, about _LABEL_CHUNK uses at a time) and the per-flow fields come from
    Planner.call_parts_many (shared by the groups of one plan template); the result is that of a
    scan flow by flow over Planner.call (tests/netsim/test_route_components.py compares the two)."""
    import numpy as np

    cap = planner.capacity_list()
    parts = planner.call_parts_many([CollectiveRequest(collective, g, size) for g in groups])
    n = len(groups)
    arrs = [ch for p in parts for ch in p[2]]
    counts = np.fromiter((sum(map(len, p[2])) for p in parts), dtype=np.int64, count=n)
    chans = np.concatenate(arrs).astype(np.int64, copy=False) if arrs else np.zeros(0, dtype=np.int64)
    gid = np.repeat(np.arange(n, dtype=np.int64), counts)
    comp_of = _components_of(chans, gid, n)          # component number of each group
    ncomp = int(comp_of.max()) + 1 if n else 0
    comp = comp_of[gid]
    del gid
    if len(comp) > 1 and (comp[1:] < comp[:-1]).any():
        order = np.argsort(comp, kind="stable")      # uses by component; a component's uses keep their order
        chans, comp = chans[order], comp[order]
        del order
    use_at = np.searchsorted(comp, np.arange(ncomp + 1)).tolist()
    members: list = [[] for _ in range(ncomp)]
    for i, c in enumerate(comp_of.tolist()):
        members[c].append(i)
    ints: list = []          # one int object per label value: the signatures of large components hold many
    out = []
    k = 0
    while k < ncomp:
        # components k .. k2 - 1, about _LABEL_CHUNK uses at a time (bounded temporary arrays)
        k2 = k + 1
        while k2 < ncomp and use_at[k2 + 1] - use_at[k] <= _LABEL_CHUNK:
            k2 += 1
        a, b = use_at[k], use_at[k2]
        lab, comp_chans, chan_at = _channel_labels(chans[a:b], comp[a:b] - k, k2 - k, len(cap))
        top = int(lab.max(initial=-1))
        lab = lab.tolist()
        if top > 256:       # beyond CPython's cached small ints
            if len(ints) <= top:
                ints = list(range(top + 1))
            lab = list(map(ints.__getitem__, lab))
        comp_chans = comp_chans.tolist()
        for j in range(k, k2):
            o = use_at[j] - a
            used = comp_chans[chan_at[j - k]:chan_at[j - k + 1]]
            sig = []
            for i in members[j]:
                header, fields, flow_chans = parts[i]
                sig.append(header)
                for fl, ch in zip(fields, flow_chans):
                    m = len(ch)
                    sig.append((tuple(lab[o:o + m]),) + fl)
                    o += m
            sig.append(tuple(map(cap.__getitem__, used)))
            out.append((members[j], tuple(sig), used))
        k = k2
    return out


# route_components labels the channel uses of about this many at a time (whole components)
_LABEL_CHUNK = 1 << 16


def _components_of(chans, gid, n: int):
    """Per group (0 .. n-1), the number of its component, components numbered by their first group:
    groups joined when a channel use of one (chans[u], group gid[u]) and of the other share a
    channel. Union-find over the distinct pairs of groups meeting on a channel, in plain Python
    (in the usual case few or none), then the roots numbered in order."""
    import numpy as np

    parent = np.arange(n, dtype=np.int64)
    if len(chans) > 1:
        order = np.argsort(chans, kind="stable")
        cs = chans[order]
        meet = cs[1:] == cs[:-1]
        del cs
        gs = gid[order]
        del order
        u, v = gs[:-1][meet], gs[1:][meet]
        del gs
        cross = u != v
        if cross.any():
            code = np.unique(np.minimum(u[cross], v[cross]) * n + np.maximum(u[cross], v[cross]))
            par = parent.tolist()

            def root(i: int) -> int:
                while par[i] != i:
                    par[i] = par[par[i]]
                    i = par[i]
                return i

            for a, b in zip((code // n).tolist(), (code % n).tolist()):
                ra, rb = root(a), root(b)
                if ra != rb:
                    par[max(ra, rb)] = min(ra, rb)     # a root is its component's first group
            parent = np.array(par, dtype=np.int64)
            while True:
                up = parent[parent]
                if (up == parent).all():
                    break
                parent = up
    first = parent == np.arange(n)
    return (np.cumsum(first) - 1)[parent]


def _channel_labels(chans, comp, ncomp: int, nchan: int):
    """Channel labels of uses sorted by component (chans[u] used in component comp[u]; a
    component's uses in their order): (label of every use, every component's distinct channels in
    label order, per component the start of its channels there) - what numbering each component's
    channels 0, 1, ... as they first appear gives."""
    import numpy as np

    if not len(chans):
        return chans, chans, [0] * (ncomp + 1)
    key = comp * nchan + chans
    o2 = np.argsort(key, kind="stable")                    # runs of one (component, channel), use order kept
    key = key[o2]
    new = np.empty(len(key), dtype=bool)
    new[0] = True
    np.not_equal(key[1:], key[:-1], out=new[1:])
    del key
    run = np.cumsum(new) - 1
    firstpos = o2[new]                                     # first use of each run
    by_pos = np.argsort(firstpos)
    rank = np.empty(len(firstpos), dtype=np.int64)
    rank[by_pos] = np.arange(len(firstpos), dtype=np.int64)
    run_comp = comp[firstpos]
    chan_at = np.concatenate(([0], np.cumsum(np.bincount(run_comp, minlength=ncomp))))
    lab = np.empty(len(chans), dtype=np.int64)
    lab[o2] = (rank - chan_at[run_comp])[run]
    return lab, chans[firstpos[by_pos]], chan_at.tolist()


def _index_of(groups: list, gpu: int) -> int:
    """Index of the first group holding `gpu` (0 when none does)."""
    return next((i for i, g in enumerate(groups) if gpu in g), 0)


def fabric_channels(planner, chans) -> set:
    """The channels among `chans` that join two network switches (shared by the traffic of many
    GPUs, unlike a GPU's own access links; Planner.fabric_mask)."""
    mask = planner.fabric_mask()
    return {ch for ch in chans if mask[ch]}


def reduce_components(planner, comps, rep: int):
    """Rule (4) on one call's route components (route_components): (kept group indices, channel sets
    of the omitted components, fabric channels of the components kept because their class is kept
    whole). Copies of one signature are reduced to one (the component holding group `rep`, else the
    first) when the call has a single class, or when the class uses no fabric channel (a GPU's own
    access links only, as rule (2)); a class that crosses the fabric beside other classes (a stage
    pair split by a leaf boundary: its pairs over the spine) is kept whole."""
    by_sig: dict = defaultdict(list)
    for comp, sig, chans in comps:
        by_sig[sig].append((comp, chans))
    keep: set = set()
    omitted: list = []
    whole_fabric: set = set()
    for members in by_sig.values():
        fab = [fabric_channels(planner, chans) for _, chans in members]
        if len(by_sig) > 1 and any(fab):
            for comp, _ in members:
                keep.update(comp)
            whole_fabric.update(*fab)
            continue
        pick = next((k for k, (comp, _) in enumerate(members) if rep in comp), 0)
        for k, (comp, chans) in enumerate(members):
            if k == pick:
                keep.update(comp)
            else:
                omitted.append(set(chans))
    return keep, omitted, whole_fabric


def default_row_key(op) -> str:
    """Per-layer CSV row of a native-workload op: transformer layers by index, the rest by part
    (SimAI-like names: embedding_layer, final_layer, grad_param_comm, grad_norm, optimizer)."""
    if op.layer >= 0:
        return f"layer_{op.layer}"
    name = op.name or "other"
    for prefix, row in _ROW_PREFIXES:
        if name.startswith(prefix):
            return row
    return name.rstrip("0123456789").rstrip("_") or "other"


def send_target(eng, prog, vs: int, direction: str, mb: int, size: int | None):
    """A pipeline send of virtual stage `vs`: (destination virtual stage, bytes, the key its receiver
    waits on, the sender's stream). Activations ('fwd') go to vs + 1 with the sender's pp_send_bytes,
    gradients ('bwd') to vs - 1 with the receiver's (its activation size)."""
    if direction == "fwd":
        dst_vs = vs + 1
        size = int(prog.pp_send_bytes) if size is None else size
        return dst_vs, size, ("act", dst_vs, mb), "pp_next"
    dst_vs = vs - 1
    size = int(eng.w.stages[dst_vs % eng.p].pp_send_bytes) if size is None else size
    return dst_vs, size, ("grad", dst_vs, mb), "pp_prev"


def awaited_transfer(eng, avail: dict, seg, vs: int) -> Handle | None:
    """The pipeline transfer segment `seg` = (direction, chunk, micro-batch) of virtual stage `vs`
    waits for (the activation into it for 'fwd', the gradient back into it for 'bwd'; None for the
    first virtual stage's forward, the last one's backward and other segments): its Handle in `avail`,
    made there the first time either side asks."""
    d, _c, mb = seg
    if d == "fwd" and vs > 0:
        key = ("act", vs, mb)
    elif d == "bwd" and vs < eng.p * eng.v - 1:
        key = ("grad", vs, mb)
    else:
        return None
    return transfer_handle(avail, key)


def transfer_handle(avail: dict, key: tuple) -> Handle:
    """The Handle of pipeline transfer `key` = ("act" | "grad", receiving virtual stage, micro-batch)
    in `avail`, made there the first time its sender or receiver asks."""
    h = avail.get(key)
    if h is None:
        h = avail[key] = Handle(kind="pp", name=f"{key[0]} vs{key[1]} mb{key[2]}")
    return h


def segment_list(eng, prog, cache: dict, seg) -> tuple[list, bool]:
    """(ops of one segment (direction, chunk, micro-batch) of a stage program, whether it carries explicit
    pipeline markers), cached in `cache`: the lists differ only for the first and last micro-batch.
    Shared by the event engine (segment_ops) and sim.fastpath (which times ops one by one, once per
    op) so both replay exactly the same ops."""
    d, c, mb = seg
    m = eng.m
    key = (d, c, mb == 0, mb == m - 1)
    hit = cache.get(key)
    if hit is not None:
        return hit
    if d == "start":
        ops = list(prog.iteration_start)
    elif d == "end":
        ops = list(prog.iteration_end)
    else:
        chunk = prog.chunks[c]
        src = chunk.forward if d == "fwd" else chunk.backward
        ops = [op for op in src if op.microbatch == "all" or (op.microbatch == "first" and mb == 0)
               or (op.microbatch == "last" and mb == m - 1)]
    hit = cache[key] = (ops, any(op.is_comm and op.group == "pp" for op in ops))
    return hit


def segment_ops(eng, prog, cache: dict, seg, record: bool, factor: float = 1.0):
    """(ops, durations (s, times `factor`), layer-row keys (when `record`), explicit pipeline markers) of
    one segment (segment_list), cached in `cache` per segment list."""
    ops, explicit = segment_list(eng, prog, cache, seg)
    key = ("timed", id(ops))     # (the lists live in the cache: their ids stay unique)
    hit = cache.get(key)
    if hit is None:
        durs = [0.0 if op.is_comm else float(eng.op_time_s(op)) for op in ops]
        if factor != 1.0:
            durs = [d * factor for d in durs]
        rows = [(eng.row_key(op), column_of(op)) for op in ops] if record else None
        hit = cache[key] = (ops, durs, rows, explicit)
    return hit


class _StageRun:
    """State machine of one stage's representative rank."""

    def __init__(self, eng: Engine, stage: int, tasks) -> None:
        self.eng = eng
        self.stage = stage
        self.stats = StageStats()
        self.streams: dict[str, _Stream] = defaultdict(_Stream)
        prog = eng.w.stages[stage]
        self.prog = prog
        self.segments: list = [("start", -1, -1)] + [(d, c, mb) for c, mb, d in tasks] + [("end", -1, -1)]
        self.seg = 0
        self.ops: list = []
        self.idx = -1          # -1: segment not yet entered
        self.finished = False
        self.clock = 0.0       # time this stage has reached (>= engine now when running)
        self.pending: dict[str, list[Handle]] = defaultdict(list)   # wait_op name -> handles
        self.seg_outstanding: list[Handle] = []
        self.deferred: list[Handle] = []
        self.blocked_since = None
        self.blocked_on = None
        self.record = stage == 0
        self.rdv_counts: dict = {}
        self.explicit_pp = False
        self.fast_free: dict[str, float] = {}   # kind -> end of the last arithmetically timed op
        self.seg_cache: dict = {}
        self.runs_cache: dict = {}     # id(op list) -> (op list, _kernel_runs stops)
        self.opinfo: dict = {}     # id(CommOp) -> FastOp (the op object lives as long as the workload)
        self.durs: list = []
        self.rows = None
        # host issue model (sim.overheads) and communication in flight (sim.contention)
        self.host = 0.0            # time the host has issued up to
        self.prepped_seg = -1      # (seg, idx) whose launch cost is already charged
        self.prepped_idx = -1
        self.pending_host_sync = False
        self.sent = False          # this task sent pipeline data (a batched p2p follows)
        self.live: list[Handle] = []   # handles with a footprint, issued by this stage, maybe in flight
        self.kernel = None         # running kernel while event-driven communication is in flight
        self.sent_handles: list[Handle] = []   # pipeline sends since the last device sync
        self.kver = 0              # version of the running kernel's pending end/re-time event
        # quiet window (_contended): from q_t until q_nxt no tracked communication is in flight and
        # none is event-driven, as long as no handle is tracked after the q_ntrack-th (_track keeps
        # it for arithmetically timed handles)
        self.ntrack = 0
        self.q_ntrack = -1
        self.q_t = 0.0
        self.q_nxt = 0.0
        self.factor = eng.stage_factors[stage]   # kernel-time multiplier of this stage's slowest rank
        self.lag = 0.0             # its extra kernel time since its last TP/CP/EP collective

    # ---------------- contention: compute kernels beside communication in flight ----------------
    def _track(self, h: Handle, fp) -> None:
        if fp is None:
            return
        h.owner = self
        h.fp = fp
        self.live.append(h)
        valid = self.q_ntrack == self.ntrack
        self.ntrack += 1
        if valid and h.fast:
            # known start and end: the quiet window resumes after its end (a start at or after
            # q_nxt leaves _live_state's answer inside the window unchanged)
            if h.start_s < self.q_nxt and h.done_s > self.q_t:
                self.q_t = h.done_s
            self.q_ntrack = self.ntrack

    def _live_state(self, t: float):
        """(footprints in flight at t, next known change after t, event-driven comm not yet done).
        Drops handles finished by t (a stage's clock never goes back)."""
        fps = []
        nxt = math.inf
        pending_event = False
        stale = False
        live = self.live
        for h in live:
            done = h.done
            if done and h.done_s <= t:
                stale = True
                continue
            if h.fast:
                if h.start_s <= t < h.done_s:
                    fps.append(h.fp)
                    nxt = min(nxt, h.done_s)
                elif h.start_s > t:
                    nxt = min(nxt, h.start_s)
            elif not done:
                pending_event = True
                if h.start_s == h.start_s and h.start_s <= t:
                    fps.append(h.fp)
        if stale:
            self.live = [h for h in live if not (h.done and h.done_s <= t)]
        return fps, nxt, pending_event

    def _contended(self, t: float, dur: float):
        """None when a kernel of `dur` s started at t runs at full speed (_live_state(t) has no
        footprint, no event-driven communication and no change before t + dur), else _live_state(t).

        Exact shortcut of that test: with nothing in flight and every event-driven handle done at
        q_t, _live_state(t') for q_t <= t' < q_nxt returns ([], q_nxt, False) until a handle is
        tracked (fast handles have fixed start/end; done handles never come back)."""
        if self.ntrack == self.q_ntrack and self.q_t <= t < self.q_nxt and t + dur <= self.q_nxt:
            return None
        got = self._live_state(t)
        fps, nxt, pending_event = got
        if fps or pending_event:
            return got
        self.q_t, self.q_nxt, self.q_ntrack = t, nxt, self.ntrack
        return None if t + dur <= nxt else got

    def _factor(self, op, fps) -> float:
        if not fps:
            return 1.0
        # memo by identity: ops live as long as the workload and footprints are cached per engine
        # (Engine.footprint, _issue_fast, _send), and shares/factor read only them
        key = (id(op), id(fps[0])) if len(fps) == 1 else (id(op), *map(id, fps))
        cache = self.eng._factor_cache
        got = cache.get(key)
        if got is None:
            cm = self.eng.contention
            sh, hb = cm.shares(fps)
            got = cache[key] = cm.factor(op, sh, hb)
        return got

    def _arith_end(self, op, t0: float, work: float, state=None) -> float:
        """End of a kernel of `work` seconds started at t0 when only arithmetically timed
        communication (known start and end) can be in flight: piecewise constant slowdown.
        state: _live_state(t0) when the caller has it (nothing can change in between)."""
        t = t0
        for _ in range(10_000):
            fps, nxt, _ = state if state is not None else self._live_state(t)
            state = None
            f = self._factor(op, fps) if fps else 1.0
            end = t + work * f
            if end <= nxt:
                return end
            work -= (nxt - t) / f
            t = nxt
        return t + work   # pragma: no cover - bounded by the number of live handles

    def comm_changed(self) -> None:
        """A communication of this stage started or finished while a kernel runs: re-time it."""
        k = self.kernel
        if k is None:
            return
        now = self.eng._now
        k.work = max(0.0, k.work - (now - k.t_last) / k.f)
        k.t_last = now
        fps, nxt, _ = self._live_state(now)
        k.f = self._factor(k.op, fps)
        self.kver += 1            # stage-wide: an old kernel's pending event never matches a new one
        k.ver = self.kver
        end = now + k.work * k.f
        if nxt < end:
            self.eng._push(nxt, self._kernel_event, k.ver, False)
        else:
            self.eng._push(end, self._kernel_event, k.ver, True)

    def _kernel_event(self, ver: int, final: bool) -> None:
        k = self.kernel
        if k is None or ver != k.ver:
            return
        if not final:
            self.comm_changed()
            return
        self.kernel = None
        self._kernel_done(k.op, k.dur, k.t_start, self.eng._now)
        self.step()

    def _kernel_done(self, op, dur: float, t0: float, t1: float) -> None:
        eng = self.eng
        if eng.tracing:
            eng.trace.append((self.stage, "compute", op.name, t0, t1 - t0, op.phase, op))
        if self.record:
            row, col = self.rows[self.idx]
            eng.layers[row].compute_s[col] += t1 - t0
        self.clock = t1
        self.stats.compute_s += t1 - t0
        self.stats.slowdown_s += max(0.0, (t1 - t0) - dur)
        if self.factor != 1.0:
            self.lag += dur - dur / self.factor
        self.idx += 1

    def _charge_lag(self, op) -> None:
        """A collective of a group that runs in lock-step inside the stage (TP/CP/EP): its healthy
        members waited there for the slow rank's extra kernel time since its previous such collective."""
        groups = self.eng._groups_for(op.group, self.stage)
        if groups and len(groups[0]) > 1:
            key = report_group(op.group)
            self.stats.straggler_wait_s[key] = self.stats.straggler_wait_s.get(key, 0.0) + self.lag
            self.lag = 0.0

    # ---------------- host issue (sim.overheads) ----------------
    def _device_sync(self) -> bool:
        """torch.cuda.synchronize after a batched pipeline p2p: wait for every collective this rank
        has in flight (exposed time per kind). Returns True when blocked."""
        t = self.clock    # what _live_state(t) drops: finished by now, nothing to wait for
        self.live = [h for h in self.live if not (h.done and h.done_s <= t)]
        for h in self._outstanding():
            if h.fast:
                self._fast_wait(h, h.op)
                continue
            if not h.done:
                what = ("PP", h, None) if h.kind == "pp" else (report_group(h.kind), h, h.op)
                if self._wait(h, what):
                    return True
        return False

    def _outstanding(self) -> list:
        """Every communication this rank may wait for at a device sync, each once (first place)."""
        if self.pending or self.seg_outstanding or self.deferred:
            hs = (self.live + [h for w in self.pending.values() for h in w] + [h for h, _ in self.seg_outstanding]
                  + [h for h, _ in self.deferred] + self.sent_handles)
        else:       # the usual task boundary: only tracked handles and pipeline sends
            hs = self.live + self.sent_handles
        return list({id(h): h for h in hs}.values()) if len(hs) > 1 else hs

    def _segment_ops(self, seg):
        """(ops, durations, layer-row keys or None, explicit pipeline markers present)."""
        return segment_ops(self.eng, self.prog, self.seg_cache, seg, self.record, self.factor)

    def _vstage(self, c: int) -> int:
        return c * self.eng.p + self.stage

    def _hold(self, h: Handle, op, seg) -> None:
        """Keep a non-blocking op's handle until its wait point: the named wait_op; the end of the
        iteration for last-micro-batch ops issued inside a forward/backward segment (gradient buckets);
        otherwise the end of the current op list."""
        if op.wait_op:
            self.pending[op.wait_op].append(h)
        elif op.microbatch == "last" and seg[0] in ("fwd", "bwd"):
            self.deferred.append((h, op))
        else:
            self.seg_outstanding.append((h, op))

    def _wait(self, handle: Handle, what) -> bool:
        """Block on `handle` if not done. Returns True when blocked (step() will be re-entered)."""
        if handle.fast:
            self._fast_wait(handle, what[2])
            return False
        if handle.done:
            return False
        if self.clock > self.eng._now:
            # arithmetic waits (fast handles) moved this stage past the engine's event time: block from
            # there, not from now (else the overlap is charged twice and the clock set back on resume)
            self.eng._push(self.clock, self.step)
            return True
        self.blocked_since = self.eng._now
        self.blocked_on = what
        handle.waiters.append(self._resume)
        return True

    def _resume(self, owned: bool = False) -> None:
        eng = self.eng
        t0, what = self.blocked_since, self.blocked_on
        dt = eng._now - t0
        kind, handle, op = what
        if kind == "PP":
            inflight = max(0.0, eng._now - max(t0, handle.start_s)) if handle.start_s == handle.start_s else 0.0
            inflight = min(inflight, dt)
            self.stats.exposed_s["PP"] += inflight
            handle.exposed_s += inflight
            self.stats.exposed_kind_s["pp"] = self.stats.exposed_kind_s.get("pp", 0.0) + inflight
            self.stats.bubble_s += dt - inflight
            self.stats.pp_wait_s += dt
            if eng.tracing and dt > 0:
                eng.trace.append((self.stage, "compute", "wait pipeline", t0, dt, "wait", handle))
        else:
            # waiting for the other stages to reach a cross-stage collective is pipeline imbalance
            early = min(max(0.0, handle.rdv_s - t0), dt) if handle.rdv_s == handle.rdv_s else 0.0
            self.stats.bubble_s += early
            dt -= early
            self.stats.exposed_s[kind] += dt
            self.stats.exposed_kind_s[handle.kind] = self.stats.exposed_kind_s.get(handle.kind, 0.0) + dt
            handle.exposed_s += dt
            op = handle.op if handle.op is not None else op
            if op is not None and self.record:
                eng.layers[eng.row_key(op)].exposed_s[column_of(op)] += dt
            if eng.tracing and dt > 0:
                eng.trace.append((self.stage, "compute", f"wait {handle.name}", t0, dt, "wait", handle))
        self.blocked_since = None
        self.clock = eng._now
        self.step(owned)

    def _fast_op(self, op) -> FastOp:
        """The FastOp of an arithmetically timed op of this stage (idle-network time of the slowest
        submitted group, or of the representative's group on a contended backend)."""
        eng = self.eng
        groups = eng._groups_for(op.group, self.stage)
        if not eng.contention_free and len(groups) != 1:
            groups = groups[:1]
        key = (op.group, self.stage, op.collective, int(op.size_bytes))
        est = eng._est_cache.get(key)
        if est is None:
            reqs = [CollectiveRequest(op.collective, g, int(op.size_bytes), tag=f"{op.group}:{op.name}")
                    for g in groups if len(g) > 1]
            est = max((float(eng.net.estimate(r)) for r in reqs), default=0.0)
            eng._est_cache[key] = est
        fp = eng.footprint(self.stage, op, groups, est) if eng.contention is not None else None
        row, col = (eng.row_key(op), column_of(op)) if self.record else (None, None)
        host_sync = eng.host is not None and op.name.startswith(eng.host.host_sync_ops)
        info = self.opinfo[id(op)] = FastOp(op, self.stage, est, len(groups[0]) if groups else 1, fp, row, col,
                                            host_sync)
        return info

    def _issue_fast(self, op, rc=None, track: bool = True) -> Handle:
        """An arithmetically timed op (start and end known now). track=False: a blocking op waited at
        once; the compute stream idles until its end, so no kernel of this rank runs beside it and
        every later _live_state query (at the stage clock, never before its end) would drop it."""
        eng = self.eng
        info = self.opinfo.get(id(op)) or self._fast_op(op)
        est, gsize, fp = info.est, info.group_size, info.fp
        g = op.group
        free = self.fast_free.get(g, 0.0)
        clock = self.clock
        start = free if free > clock else clock
        done = start + est
        self.fast_free[g] = done
        eng.bypassed += 1
        # positional (hundreds of thousands per run): kind, name, start_s, done_s, done, waiters, rdv_s,
        # fast, op, owner, fp, stage, collective, size_bytes, group_size
        # waiters: an empty tuple (nothing waits on a fast handle through it; no list per op)
        h = Handle(g, op.name, start, done, True, (), math.nan, True, op, None, None, self.stage,
                   op.collective, info.size_bytes, gsize)
        eng.comm_log.append(h)
        if fp is not None and track:
            self._track(h, fp)
        if self.record:
            row, col = rc if rc is not None else (info.row, info.col)
            st = eng.layers[row]
            st.comm_s[col] += est
            st.comm_bytes[col] += op.size_bytes
            st.comm_kind[col] = (op.collective, gsize)
        if eng.tracing:
            eng.trace.append((self.stage, f"comm:{op.group}", op.name, start, est, "comm", h))
        return h

    def _fast_wait(self, h: Handle, op, rc=None) -> None:
        dt = h.done_s - self.clock
        if dt <= 0:
            return
        eng = self.eng
        self.stats.exposed_s[report_group(h.kind)] += dt
        self.stats.exposed_kind_s[h.kind] = self.stats.exposed_kind_s.get(h.kind, 0.0) + dt
        h.exposed_s += dt
        if self.record and (h.op is not None or op is not None):
            if h.op is not None and h.op is not op:
                rc = None
                op = h.op
            row, col = rc if rc is not None else (eng.row_key(op), column_of(op))
            eng.layers[row].exposed_s[col] += dt
        if eng.tracing:
            eng.trace.append((self.stage, "compute", f"wait {h.name}", self.clock, dt, "wait", h))
        self.clock = h.done_s

    def _issue(self, op, now: float) -> Handle:
        eng = self.eng
        my_groups = eng._groups_for(op.group, self.stage)
        handle = Handle(kind=op.group, name=op.name, op=op, stage=self.stage, collective=op.collective,
                        size_bytes=int(op.size_bytes), group_size=len(my_groups[0]) if my_groups else 1)
        eng.comm_log.append(handle)
        record = self.record
        row = eng.row_key(op) if record else None
        col = column_of(op) if record else None

        if op.group in _CROSS_STAGE:
            participants = (range(eng.p) if op.group == "mp"
                            else sorted({0, eng.p - 1}))
            count_key = (op.group, op.name)
            n = self.rdv_counts.get(count_key, 0)
            self.rdv_counts[count_key] = n + 1
            rkey = (op.group, op.name, n)
            rdv = eng._rendezvous.setdefault(rkey, {"arrived": 0, "handles": [], "need": len(participants)})

            def make_reqs(h: Handle, t: float) -> None:
                rdv["arrived"] += 1
                rdv["handles"].append(h)
                if rdv["arrived"] == rdv["need"]:
                    groups = eng._groups_for(op.group, self.stage)
                    master = Handle(kind=op.group, name=op.name)
                    def reqs():
                        return [CollectiveRequest(op.collective, g, int(op.size_bytes), tag=f"{op.group}:{op.name}")
                                for g in eng._submitted(("x", op.group, op.collective, int(op.size_bytes)), groups,
                                                        op.collective, int(op.size_bytes),
                                                        int(eng.pl.gpus[eng.rep_ranks[0]]))]
                    for hh in rdv["handles"]:
                        hh.start_s = t
                        hh.rdv_s = t
                        if hh.owner is not None and hh.owner.kernel is not None:
                            hh.owner.comm_changed()
                    def fan_out(hs=tuple(rdv["handles"])) -> None:
                        for hh in hs:
                            eng._finish(hh)
                    master.waiters.append(fan_out)
                    eng._submit_or_estimate(master, reqs, t, ("x", op.group, op.collective, int(op.size_bytes)))
        else:
            groups = eng._groups_for(op.group, self.stage)
            est_key = (op.group, self.stage, op.collective, int(op.size_bytes))

            def reqs():
                return [CollectiveRequest(op.collective, g, int(op.size_bytes), tag=f"{op.group}:{op.name}")
                        for g in eng._submitted(est_key, groups, op.collective, int(op.size_bytes),
                                                int(eng.pl.gpus[eng.rep_ranks[self.stage]]))]

            def make_reqs(h: Handle, t: float) -> None:
                eng._submit_or_estimate(h, reqs, t, est_key)

        if eng.contention is not None:
            self._track(handle, eng.footprint(self.stage, op, eng._groups_for(op.group, self.stage)))
        if record:
            def account() -> None:
                st = eng.layers[row]
                st.comm_s[col] += handle.done_s - handle.start_s
                st.comm_bytes[col] += op.size_bytes
                st.comm_kind[col] = (op.collective, len(eng._groups_for(op.group, self.stage)[0]))
            handle.waiters.append(account)
        eng._stream_issue(self, op.group, handle, make_reqs)
        return handle

    def _sends_allowed(self, seg) -> bool:
        d, c, _ = seg
        vs = self._vstage(c)
        return (d == "fwd" and vs < self.eng.p * self.eng.v - 1) or (d == "bwd" and vs > 0)

    def _send(self, direction: str, c: int, mb: int, now: float, size: int | None = None) -> None:
        """Send activation ('fwd') or gradient ('bwd') of virtual chunk c, micro-batch mb."""
        eng = self.eng
        p = eng.p
        dst_vs, size, key, stream = send_target(eng, self.prog, self._vstage(c), direction, mb, size)
        dst_stage = dst_vs % p
        handle = transfer_handle(eng._avail, key)
        if size <= 0 or dst_stage == self.stage:
            handle.start_s = now
            eng._push(now, eng._finish, handle)
            return
        pairs = eng._pp_pairs(self.stage, dst_stage)
        self.sent = True
        handle.stage, handle.peer_stage, handle.collective = self.stage, dst_stage, "send"
        handle.size_bytes, handle.group_size = size, 2
        eng.comm_log.append(handle)
        if eng.host is not None and eng.host.sync_on_pipeline_p2p:   # only a device sync clears the list
            self.sent_handles.append(handle)
        est_key = ("pp", self.stage, dst_stage, size)
        if eng.contention is not None:
            fp = eng._fp_cache.get(est_key)     # footprint() keys on stage, kind, op and size only
            if fp is None:
                fp = eng._fp_cache[est_key] = eng.footprint(self.stage, CommOp(handle.name, "send", "pp", size), pairs)
            self._track(handle, fp)

        rep_gpu = int(eng.pl.gpus[eng.rep_ranks[self.stage]])
        q = self.streams[stream]
        if eng._direct(self, stream, q):
            # what _stream_issue, _stream_next and make_reqs below do, in the same order, without the
            # chain of calls
            q.busy = True
            handle.waiters.insert(0, eng._after(self, stream, q, handle))
            eng._submit(handle, eng._send_requests(handle, est_key, pairs, size, rep_gpu), eng._now)
            if self.kernel is not None and handle.fp is not None:
                self.comm_changed()
            return

        def make_reqs(h: Handle, t: float) -> None:
            eng._submit_or_estimate(h, lambda: eng._send_requests(h, est_key, pairs, size, rep_gpu), t, est_key)

        eng._stream_issue(self, stream, handle, make_reqs)

    def _needs(self, seg) -> Handle | None:
        if seg[0] not in ("fwd", "bwd"):
            return None
        return awaited_transfer(self.eng, self.eng._avail, seg, self._vstage(seg[1]))

    def _kernel_runs(self, ops: list) -> list:
        """Per op of the list: the index of the first op from it on that is communication or that a
        held non-blocking op may wait for (its name is a wait_op of the list); cached per list (the
        lists live in seg_cache as long as this run)."""
        hit = self.runs_cache.get(id(ops))
        if hit is None:
            targets = {op.wait_op for op in ops if op.is_comm and op.wait_op}
            stops = [0] * len(ops)
            nxt = len(ops)
            for i in range(len(ops) - 1, -1, -1):
                op = ops[i]
                if op.is_comm or op.name in targets:
                    nxt = i
                stops[i] = nxt
            hit = self.runs_cache[id(ops)] = (ops, stops)
        return hit[1]

    def _compute_run(self, seg_no: int) -> None:
        """The ops following self.idx in the current op list that need no event: compute kernels and
        communication timed arithmetically (step()'s fast kinds on an idle stream), up to the first
        other communication op, the first op waiting for an event-driven handle not yet done, or the
        first kernel that event-driven communication may slow (_contended). Exactly step()'s per-op
        arithmetic, in the same order, on local variables (no tracing); a blocking arithmetically
        timed op is logged as a (FastOp, start_s, done_s, exposed_s) tuple, not a Handle. Stops
        before an op with its launch cost charged (prepped) only at such a kernel."""
        ops, durs = self.ops, self.durs
        nops = len(ops)
        idx = self.idx
        if idx >= nops:
            return
        eng = self.eng
        hm = eng.host
        if hm is not None:
            if self.prepped_idx == idx and self.prepped_seg == seg_no:
                return          # step() charged this op's launch; it goes on from there
            per_kernel, gap = hm.host_per_kernel_s, hm.kernel_gap_s
        stats = self.stats
        pending = self.pending
        cm = eng.contention
        record = self.record
        rows = self.rows if record else None
        layers = eng.layers
        factor = self.factor
        slow = factor != 1.0
        # step()'s test of an arithmetically timed kind (its stream must be idle too)
        fast_kinds = None if eng.contention_free else (
            eng.fast_kinds if self.segments[seg_no][0] in ("fwd", "bwd") else ())
        streams = self.streams
        opinfo = self.opinfo
        fast_free = self.fast_free
        log = eng.comm_log
        exposed, exposed_kind = stats.exposed_s, stats.exposed_kind_s
        nfast = 0
        sync = self.pending_host_sync
        clock, host, comp, ovh, lag = self.clock, self.host, stats.compute_s, stats.overhead_s, self.lag
        # contention: _contended's quiet-window test on locals, re-read after every call that may change
        # it (_live_state, _arith_end, the inline _track)
        watch = cm is not None
        live, q_ok, q_t, q_nxt = self.live, self.ntrack == self.q_ntrack, self.q_t, self.q_nxt
        # kernel runs with the host model on, off stage 0's rows and without a straggler factor: the loop
        # below's arithmetic for kernels that no held handle waits for (stops: _kernel_runs), with no
        # host catch-up pending, while _contended's quiet window holds (else the loop below takes the
        # kernel, with the same arithmetic)
        stops = self._kernel_runs(ops) if hm is not None and rows is None and not slow else None
        while idx < nops:
            if stops is not None and not sync:
                j = stops[idx]
                while idx < j:
                    dur = durs[idx]
                    h2 = host + per_kernel
                    t = (clock if clock >= h2 else h2) + gap
                    c2 = t if t > clock else clock
                    if watch and live and not (q_ok and q_t <= c2 < q_nxt and c2 + dur <= q_nxt):
                        break
                    host = h2
                    if t > clock:
                        ovh += t - clock
                    clock = c2 + dur
                    comp += dur
                    idx += 1
                if idx >= nops:
                    break
            op = ops[idx]
            comm = op.is_comm
            if comm:
                g = op.group
                if not ((g in fast_kinds) if fast_kinds is not None else (g not in _CROSS_STAGE and g != "pp")):
                    break
                stream = streams.get(g)
                if stream is not None and (stream.busy or stream.queue):
                    break
            if pending:
                waits = pending.get(op.name)
                if waits:
                    if not all(h.fast or h.done for h in waits):
                        break
                    if sync:
                        if clock > host:
                            host = clock
                        sync = False
                    self.clock = clock
                    for h in waits:
                        if h.fast:
                            self._fast_wait(h, op)
                    clock = self.clock
                    del pending[op.name]
            if sync:        # the host read a result (.item()): it catches up with the GPU
                if clock > host:
                    host = clock
                sync = False
            if hm is not None:
                host = host + per_kernel
                t = clock if clock >= host else host
                if not comm:
                    t += gap
                if t > clock:
                    ovh += t - clock
                    clock = t
            if not comm:
                dur = durs[idx]
                if watch and live and not (q_ok and q_t <= clock < q_nxt and clock + dur <= q_nxt):
                    # _contended(clock, dur) past its quick test (the one just made on the locals)
                    fps, nxt, pending_event = self._live_state(clock)
                    if not fps and not pending_event:
                        self.q_t, self.q_nxt, self.q_ntrack = clock, nxt, self.ntrack
                    live, q_ok, q_t, q_nxt = self.live, self.ntrack == self.q_ntrack, self.q_t, self.q_nxt
                    if fps or pending_event or nxt < clock + dur:
                        if pending_event:       # step() runs it as an event
                            if hm is not None:
                                self.prepped_seg, self.prepped_idx = seg_no, idx
                            break
                        # only arithmetically timed communication beside it: step()'s _kernel_done;
                        # _arith_end's first piece here, the rest (from the next change) by it
                        f = self._factor(op, fps) if fps else 1.0
                        t1 = clock + dur * f
                        if t1 > nxt:
                            t1 = self._arith_end(op, nxt, dur - (nxt - clock) / f)
                        live = self.live
                        if rows is not None:
                            row, col = rows[idx]
                            layers[row].compute_s[col] += t1 - clock
                        comp += t1 - clock
                        stats.slowdown_s += max(0.0, (t1 - clock) - dur)
                        if slow:
                            lag += dur - dur / factor
                        clock = t1
                        idx += 1
                        continue
                if rows is not None:
                    row, col = rows[idx]
                    layers[row].compute_s[col] += dur
                clock += dur
                comp += dur
                if slow:
                    lag += dur - dur / factor
                idx += 1
                continue
            if lag and g in _LOCKSTEP_KINDS:
                self.lag = lag
                self._charge_lag(op)
                lag = self.lag
            # _issue_fast's timing: after the group's previous arithmetically timed operation
            info = opinfo.get(id(op)) or self._fast_op(op)
            est = info.est
            free = fast_free.get(g, 0.0)
            start = free if free > clock else clock
            done = start + est
            fast_free[g] = done
            nfast += 1
            if op.blocking:
                # _issue_fast + _fast_wait without a Handle: nothing waits on it later
                if record:
                    st = layers[info.row]
                    col = info.col
                    st.comm_s[col] += est
                    st.comm_bytes[col] += op.size_bytes
                    st.comm_kind[col] = (op.collective, info.group_size)
                dt = done - clock
                if dt > 0:
                    exposed[info.report_group] += dt
                    exposed_kind[g] = exposed_kind.get(g, 0.0) + dt
                    if record:
                        st.exposed_s[col] += dt
                    clock = done
                    log.append((info, start, done, dt))
                else:
                    log.append((info, start, done, 0.0))
                if info.host_sync:
                    sync = True
            else:
                # the rest of _issue_fast (tracked, untraced) and _hold, inline
                h = Handle(g, op.name, start, done, True, (), math.nan, True, op, None, None, self.stage,
                           op.collective, info.size_bytes, info.group_size)
                log.append(h)
                fp = info.fp
                if fp is not None:      # _track
                    h.owner = self
                    h.fp = fp
                    self.live.append(h)
                    valid = self.q_ntrack == self.ntrack
                    self.ntrack += 1
                    if valid:
                        if start < self.q_nxt and done > self.q_t:
                            self.q_t = done
                        self.q_ntrack = self.ntrack
                if record:
                    row, col = rows[idx]
                    st = layers[row]
                    st.comm_s[col] += est
                    st.comm_bytes[col] += op.size_bytes
                    st.comm_kind[col] = (op.collective, info.group_size)
                if op.wait_op:
                    pending[op.wait_op].append(h)
                elif op.microbatch == "last" and self.segments[seg_no][0] in ("fwd", "bwd"):
                    self.deferred.append((h, op))
                else:
                    self.seg_outstanding.append((h, op))
                live, q_ok, q_t, q_nxt = self.live, self.ntrack == self.q_ntrack, self.q_t, self.q_nxt
            idx += 1
        self.clock, self.host, stats.compute_s, stats.overhead_s, self.lag = clock, host, comp, ovh, lag
        self.idx = idx
        self.pending_host_sync = sync
        eng.bypassed += nfast

    def step(self, owned: bool = False) -> None:
        """Run as far as possible from engine time; re-entered by events. owned: this call is the rest
        of the current event (Engine._jump): where the stage must wait for engine time to reach its
        clock and nothing else is due by then, it moves the clock itself instead of re-pushing."""
        eng = self.eng
        now = eng._now
        if self.kernel is not None:
            return                      # a kernel runs beside communication; its end re-enters
        if self.clock < now:
            self.clock = now
        hm = eng.host
        cm = eng.contention
        while True:
            if self.finished:
                return
            seg = self.segments[self.seg]
            if self.idx < 0:
                self.ops, self.durs, self.rows, explicit = self._segment_ops(seg)
                if seg[0] == "end":
                    # gradient reductions deferred to the end of the iteration (finish_grad_sync)
                    while self.deferred:
                        h, op = self.deferred[0]
                        if self._wait(h, (report_group(h.kind), h, op)):
                            return
                        self.deferred.pop(0)
                needs = self._needs(seg)
                need = None if explicit else needs
                sync = (hm is not None and hm.sync_on_pipeline_p2p and seg[0] in ("fwd", "bwd")
                        and (self.sent or needs is not None))
                if need is not None and self._wait(need, ("PP", need, None)):
                    return
                if sync:
                    # batched p2p + torch.cuda.synchronize: the host waits for the whole device
                    if self._device_sync():
                        return
                    self.host = max(self.host, self.clock)
                    self.sent_handles.clear()
                self.sent = False
                self.explicit_pp = explicit
                self.idx = 0
                self.seg_outstanding = []
            # run the ops of the segment (hot loop: one pass per op; locals instead of attributes)
            ops = self.ops
            durs = self.durs
            nops = len(ops)
            pending = self.pending
            stats = self.stats
            tracing = eng.tracing
            record = self.record
            slow = self.factor != 1.0
            seg_no = self.seg
            if hm is not None:
                per_kernel, gap = hm.host_per_kernel_s, hm.kernel_gap_s
            # kinds whose ops are timed without events (their traffic never contends: isolated NVLink
            # kinds inside forward/backward lists, or anything on a contention-free backend) when their
            # stream holds no event-driven operation
            fast_kinds = None if eng.contention_free else (eng.fast_kinds if seg[0] in ("fwd", "bwd") else ())
            streams = self.streams
            while self.idx < nops:
                idx = self.idx
                op = ops[idx]
                if self.pending_host_sync:
                    self.host = max(self.host, self.clock)     # the host read a result (.item())
                    self.pending_host_sync = False
                if pending:
                    waits = pending.get(op.name)
                    if waits:
                        while waits:
                            h = waits[0]
                            if h.fast:
                                self._fast_wait(h, op)
                            elif not h.done:
                                if self.clock > now:
                                    eng._push(self.clock, self.step)
                                    return
                                if self._wait(h, (report_group(h.kind), h, op)):
                                    return
                            waits.pop(0)
                        del pending[op.name]
                if hm is not None and (self.prepped_idx != idx or self.prepped_seg != seg_no):
                    # host issue and launch gap, charged once per op: it starts no earlier than the
                    # host issued it (sim.overheads)
                    self.prepped_seg, self.prepped_idx = seg_no, idx
                    host = self.host + per_kernel
                    self.host = host
                    clock = self.clock
                    t = (clock if clock >= host else host) + (0.0 if op.is_comm else gap)
                    if t > clock:
                        if tracing and t - clock > gap * 1.5:
                            eng.trace.append((self.stage, "compute", "host issue", clock, t - clock, "overhead",
                                              None))
                        stats.overhead_s += t - clock
                        self.clock = t
                if not op.is_comm:
                    dur = durs[idx]
                    if cm is not None and self.live and (got := self._contended(self.clock, dur)) is not None:
                        fps, nxt, pending_event = got
                        if pending_event:
                            # event-driven communication may start or end during the kernel: run it
                            # at engine time and re-time it when the communication changes
                            if self.clock > now:
                                eng._push(self.clock, self.step)
                                return
                            self.kernel = _RunningKernel(op, dur, now, dur, now)
                            self.comm_changed()
                            return
                        if fps or nxt < self.clock + dur:
                            self._kernel_done(op, dur, self.clock, self._arith_end(op, self.clock, dur, got))
                            continue
                    if tracing:
                        eng.trace.append((self.stage, "compute", op.name, self.clock, dur, op.phase, op))
                    if record:
                        row, col = self.rows[idx]
                        eng.layers[row].compute_s[col] += dur
                    self.clock += dur
                    stats.compute_s += dur
                    if slow:
                        self.lag += dur - dur / self.factor
                    self.idx = idx + 1
                    if not tracing:
                        self._compute_run(seg_no)
                    continue
                if self.lag and op.group in _LOCKSTEP_KINDS:
                    self._charge_lag(op)
                g = op.group
                if ((g in fast_kinds) if fast_kinds is not None else (g not in _CROSS_STAGE and g != "pp")) and (
                        (stream := streams.get(g)) is None or (not stream.busy and not stream.queue)):
                    rc = self.rows[self.idx] if self.record else None
                    h = self._issue_fast(op, rc, not op.blocking)
                    self.idx += 1
                    if op.blocking:
                        self._fast_wait(h, op, rc)
                        if hm is not None and op.name.startswith(hm.host_sync_ops):
                            self.pending_host_sync = True
                    else:
                        self._hold(h, op, seg)
                    if not tracing:
                        self._compute_run(seg_no)
                    continue
                # communication: must be issued at the engine's current time
                if self.clock > now:
                    if not (owned and eng._jump(self.clock)):
                        eng._push(self.clock, self.step, True)
                        return
                    now = self.clock
                if op.group == "pp":
                    # explicit pipeline recv/send markers of the generator (sizes from the op)
                    self.idx += 1
                    if op.collective == "recv":
                        need = self._needs(seg)
                        if need is not None and hm is not None and hm.sync_on_pipeline_p2p:
                            self.pending_host_sync = True     # the host waited for the receive
                        if need is not None and self._wait(need, ("PP", need, None)):
                            return
                    elif op.collective == "send" and self._sends_allowed(seg):
                        self._send(seg[0], seg[1], seg[2], now, int(op.size_bytes))
                    continue
                h = self._issue(op, now)
                self.idx += 1
                if op.blocking:
                    if hm is not None and op.name.startswith(hm.host_sync_ops):
                        self.pending_host_sync = True
                    if self._wait(h, (report_group(op.group), h, op)):
                        return
                else:
                    self._hold(h, op, seg)
            # end of segment: outstanding non-blocking ops of this list
            if self.clock > now:
                if not (owned and eng._jump(self.clock)):
                    eng._push(self.clock, self.step, True)
                    return
                now = self.clock
            # non-blocking ops whose wait_op did not follow them in this list: waited here
            for hs in self.pending.values():
                self.seg_outstanding.extend((h, None) for h in hs)
            self.pending.clear()
            while self.seg_outstanding:
                h, op = self.seg_outstanding[0]
                if self._wait(h, (report_group(h.kind), h, op)):
                    return
                self.seg_outstanding.pop(0)
            d, c, mb = seg
            if not self.explicit_pp and self._sends_allowed(seg):
                self._send(d, c, mb, now)
            self.seg += 1
            self.idx = -1
            if eng._bar is not None:
                eng._bar.update(1)
            if self.seg >= len(self.segments):
                self.finished = True
                self.stats.end_s = self.clock
                return
