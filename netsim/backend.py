"""NetworkBackend implementations: "flow" (contention-aware flow engine) and "analytical" (alpha-beta).

Both share one Planner: the same validation, the same automatic (algorithm, protocol) choice (minimum
analytical time, Planner.choose) and the same protocol / latency / fill terms (netsim.protocol); the
flow engine adds only the sharing of bandwidth between flows. Both are deterministic.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from itertools import chain

import numpy as np

from netsim import analytical as ana
from netsim.api import CollectiveRequest
from netsim.calibration import FAMILY, PROTOCOL_NAMES
from netsim.errors import NetsimError
from netsim.netcal import NetCalibration
from netsim.protocol import HopContext, NetModel, parse_protocol
from netsim.resolve import (
    ResolveContext,
    ResolvedFlow,
    ScheduleRun,
    compact_flows,
    finish,
    resolve,
    route_spec,
    route_specs,
    route_specs_many,
)
from netsim.schedules import (
    FlowSpec,
    GroupShape,
    build_specs,
    check_algorithm,
    group_shape,
    validate_request,
)
from netsim.topoview import ROUTINGS, TopoView

# (op, algorithm) whose specs read of the group only its size and the sizes and positions of its units
# (ring_order, nccl_trees): a group's specs are those of the canonical group of the same unit sizes
# (GPU i = the i-th GPU of the units in order) with every GPU relabelled (Planner._build_specs)
_RELABELLED = frozenset({("all_reduce", "ring"), ("all_gather", "ring"), ("reduce_scatter", "ring"),
                         ("all_reduce", "tree")})


# From this many new two-GPU groups in one call_many / call_parts_many, their shapes and facts are
# computed with numpy arrays (Planner._shape_pairs); below, numpy's per-call overhead is more
_PAIR_ARRAY_MIN = 16

# From this many channel uses (all specs of a group), route_signature ranks channels with numpy arrays
_RANK_ARRAY_USES = 256

# From this many hops (all specs of a group), _build_specs relabels a template's hops with numpy
# arrays; below, numpy's per-call overhead is more than a plain list comprehension's
_RELABEL_ARRAY_HOPS = 64
# FlowNetwork.submit_many's memo of Planner.call per request object holds at most this many requests
_REQ_MEMO = 65536


def _canonical_specs(sizes: tuple[int, ...], domains: int, op: str, alg: str) -> list:
    """build_specs of the canonical group of these unit sizes (GPU i = the i-th GPU of the units in
    order), the template every group of the same unit sizes is relabelled from (_RELABELLED)."""
    canon, o = [], 0
    for k in sizes:
        canon.append(list(range(o, o + k)))
        o += k
    return build_specs(GroupShape(tuple(range(o)), canon, domains), op, alg, 1.0)


def _pair_shape(view, gpus: tuple[int, ...]) -> GroupShape:
    """group_shape of a group of two GPUs: one unit holding both (sorted), else one unit each in
    group order."""
    a, b = gpus
    return _pair_shape_of(gpus, view.unit_of(a) == view.unit_of(b), view.domain_of(a) == view.domain_of(b))


def _pair_shape_of(gpus: tuple[int, int], same_unit: bool, same_domain: bool) -> GroupShape:
    """_pair_shape of two GPUs whose unit and domain equality is known."""
    a, b = gpus
    return GroupShape(gpus, [[a, b] if a <= b else [b, a]] if same_unit else [[a], [b]], 1 if same_domain else 2)


def _fastest(timed) -> tuple[tuple | None, float]:
    """(candidate, time) of the fastest of (candidate, time) pairs given in NCCL's order (ring, tree,
    NVLS; LL, LL128, Simple): a tie (within 1e-9) keeps the earlier; (None, inf) when there are none."""
    best, best_t = None, math.inf
    for cand, t in timed:
        if t < best_t * (1 - 1e-9):
            best, best_t = cand, t
    return best, best_t


def _float_bytes(a: np.ndarray) -> bytes:
    """A float array's values as a key (route_signature): its float64 bytes."""
    if type(a) is np.ndarray and a.dtype == np.float64:     # (asarray's per-call cost, for the same bytes)
        return a.tobytes()
    return np.asarray(a, dtype=np.float64).tobytes()


def _flow_fields(flows) -> list[tuple]:
    """Per flow, what a route signature reads of it besides its channels (sim.engine.route_components):
    weights (tuple), frac, latency_s, cap_Bps, deps, after, nch, fill_stages, fill_chunk."""
    return [(tuple(f.weights.tolist()), f.frac, f.latency_s, f.cap_Bps, f.deps, f.after, f.nch, f.fill_stages,
             f.fill_chunk) for f in flows]


def _plan_parts(plan, alg: str, proto: str, size: float) -> tuple:
    """(header, flow fields) of a call of `size` on `plan` (Planner.call_parts_many)."""
    delay, mult = plan.timing(size)
    return (alg, proto, delay, mult, len(plan.flows)), _flow_fields(plan.flows)


@dataclass
class CollectiveRecord:
    """Statistics of one finished collective."""
    tag: str
    op: str
    algorithm: str
    n: int
    size_bytes: int
    start_s: float
    end_s: float
    protocol: str = ""

    @property
    def time_s(self) -> float:
        return self.end_s - self.start_s


@dataclass
class CollectivePlan:
    """One (op, algorithm, protocol, group): resolved unit-size flows and the per-call terms."""
    op: str
    algorithm: str
    protocol: str
    family: str
    shape: GroupShape
    facts: ana.GroupFacts
    flows: list[ResolvedFlow]
    base_s: float                 # launch + NCCL base latency
    efficiency: float
    model: NetModel

    _compact: tuple | None = field(default=None, repr=False, compare=False)

    def compact(self, capacity_Bps):
        """Flows renumbered over their own links (netsim.resolve.compact_flows), cached."""
        if self._compact is None:
            self._compact = compact_flows(capacity_Bps, self.flows)
        return self._compact

    def timing(self, size: float) -> tuple[float, float]:
        """(delay before the first flows, multiplier of the flows' latencies) for a call of `size`."""
        mult = self.model.plateau_factor(self.family, self.protocol, self.op, self.facts.units, size, self.shape.n)
        return self.base_s * mult, mult


class Planner:
    """Validation, (algorithm, protocol) choice and resolved flow schedules, cached per group.

    Options: pxn (PXN routes), net_calibration (netsim.NetCalibration), launch_overhead (host launch
    cost per call, default on), gpus_per_process (GPUs one process drives: nccl-tests -g), routing
    ("auto": rail on rail-optimized fabrics, else ecmp; "rail": rail-aligned routes for same-rail traffic,
    NCCL-like; "ecmp": hash every flow — netsim.topoview.resolve_routing).
    """

    def __init__(self, topology, *, pxn: bool = False, view: TopoView | None = None,
                 net_calibration: NetCalibration | None = None, launch_overhead: bool = True,
                 gpus_per_process: int = 1, routing: str = "auto"):
        if net_calibration is not None and not isinstance(net_calibration, NetCalibration):
            raise NetsimError("net_calibration must be a netsim.NetCalibration (netsim.load_net_calibration)")
        self.view = view if view is not None else TopoView(topology, pxn=pxn, calibration=net_calibration,
                                                           routing=routing)
        self.model = NetModel(self.view.gpu_type, net_calibration, launch_overhead=launch_overhead,
                              gpus_per_process=gpus_per_process)
        self._shapes: dict[tuple[int, ...], tuple] = {}
        self._plans: dict[tuple, CollectivePlan] = {}
        self._routed: dict[tuple, list] = {}
        self._est: dict[tuple, float] = {}
        self._auto: dict[tuple, tuple[str, str]] = {}
        self._calls: dict[tuple, tuple] = {}
        # reuse across groups (choice_key): interned route signatures -> ids; choices, estimates and plans by key
        self._sig_ids: dict[tuple, int] = {}
        self._alg_sig: dict[tuple, int] = {}
        self._choice: dict[tuple, tuple[str, str]] = {}
        self._est_by_key: dict[tuple, float] = {}
        self._templates: dict[tuple, CollectivePlan] = {}
        self._ckeys: dict[tuple, tuple] = {}        # choice_key by (op, algorithms, group)
        self._spec_tmpl: dict[tuple, list] = {}     # _build_specs: canonical specs by (op, alg, unit sizes)
        self._spec_idx: dict[tuple, tuple] = {}     # _build_specs: those specs with their hops as index arrays
        self._hop_ids: dict[tuple, int] = {}        # ids of distinct template hops (_template)
        self._hop_routes: dict[tuple, list] = {}    # _relabelled_routes: routed specs by (hops id, group)
        self._parts: dict[tuple, tuple] = {}        # call_parts_many: (template, header, flow fields) by (id, size)
        self._cap_list: list[float] | None = None
        self._cap_arr: np.ndarray | None = None
        self._quick: dict[tuple, tuple[float, str, str]] = {}     # analytical_s by quick_key
        self._quick_sigs: dict[tuple, tuple | None] = {}         # _quick_signature by (op, alg, group)
        self._quick_tmpl: dict[tuple, tuple] = {}                 # _quick_fields of canonical specs
        self._quick_tids: dict[tuple, int] = {}                   # ids of distinct canonical fields and hops
        self._quick_by_tmpl: dict[tuple, tuple | None] = {}       # _quick_signature by (template id, group)
        self._quick_routes: dict[tuple, list] = {}                # _quick_routed by (algorithm, signature)
        self._quick_content: dict[tuple, tuple] = {}              # _quick_routed by content: (routed, id)
        self._quick_plans: dict[tuple, CollectivePlan] = {}       # _quick_answer: plans by terms and content id
        self._contexts: dict[tuple, ResolveContext] = {}          # _plan_of: ResolveContexts by their terms
        self._quick_flows: dict[tuple, list] = {}                 # _plan_of: quick plans' flows by content and terms
        self._quick_hops: dict[tuple, tuple] = {}                 # _quick_routed: shared hop lists and memos
        self._fabric: list[bool] | None = None

    def shape(self, gpus: tuple[int, ...]):
        got = self._shapes.get(gpus)
        if got is None:
            shape = _pair_shape(self.view, gpus) if len(gpus) == 2 else group_shape(self.view, gpus)
            got = (shape, ana.GroupFacts(self.view, shape))
            self._shapes[gpus] = got
        return got

    def _shape_pairs(self, reqs) -> None:
        """shape() of the new two-GPU groups of `reqs` whose GPUs are distinct ints in range, all
        at once (TopoView.pair_facts_many: the values and types shape() computes pair by pair),
        into the shape cache; nothing when there are fewer than _PAIR_ARRAY_MIN of them. Groups
        that are not such pairs are left to shape() (and to validation's errors)."""
        pair_facts = getattr(self.view, "pair_facts_many", None)
        if pair_facts is None:
            return
        shapes, n_gpus = self._shapes, self.view.num_gpus
        pairs = [g for g in dict.fromkeys([tuple(r.gpus) for r in reqs])
                 if len(g) == 2 and g not in shapes and type(g[0]) is int and type(g[1]) is int
                 and g[0] != g[1] and 0 <= g[0] < n_gpus and 0 <= g[1] < n_gpus]
        if len(pairs) < _PAIR_ARRAY_MIN:
            return
        a = np.fromiter((g[0] for g in pairs), dtype=np.int64, count=len(pairs))
        b = np.fromiter((g[1] for g in pairs), dtype=np.int64, count=len(pairs))
        view, Facts = self.view, ana.GroupFacts
        for g, same, same_dom, bw, ll128 in zip(pairs, *pair_facts(a, b)):
            shape = _pair_shape_of(g, same, same_dom)
            shapes[g] = (shape, Facts(view, shape, bw, ll128))

    def choose(self, req: CollectiveRequest, checked: bool = False):
        """(gpus, shape, facts, algorithm, protocol) of a request: validated (unless `checked`: done
        by the caller), 'auto' resolved to the fastest candidate (analytical time; ties keep NCCL's
        order ring, tree, NVLS and LL, LL128, Simple)."""
        gpus = tuple(req.gpus)
        if not checked:
            validate_request(self.view, req.op, gpus, req.size_bytes)
        shape, facts = self.shape(gpus)
        check_algorithm(self.view, shape, req.op, req.algorithm)
        proto_req = parse_protocol(getattr(req, "protocol", "auto"))
        alg_req = "p2p" if req.op in ("send", "recv") else req.algorithm
        if alg_req != "auto" and proto_req != "auto":
            if proto_req not in self.model.protocols(alg_req, req.op, facts.ll128_ok, shape.m):
                raise NetsimError(f"protocol {PROTOCOL_NAMES[proto_req]} does not apply to {alg_req} "
                                  f"(use one of: {', '.join(PROTOCOL_NAMES[p] for p in self.model.protocols(alg_req, req.op, facts.ll128_ok, shape.m))})")
            return gpus, shape, facts, alg_req, proto_req
        ck = (req.op, gpus, float(req.size_bytes), alg_req, proto_req)
        got = self._auto.get(ck)
        if got is None:
            algs = ana.candidates(self.view, shape, req.op) if alg_req == "auto" else (alg_req,)
            # a group whose estimates read the same values as an earlier group's gets its choice
            # (choice_key: exact reuse, e.g. the translated groups of data-parallel replicas)
            key = (float(req.size_bytes), alg_req, proto_req, algs) + self.choice_key(req.op, algs, gpus)
            got = self._choice.get(key)
            if got is not None:
                self._auto[ck] = got
                return (gpus, shape, facts) + got
            def timed():
                for alg in algs:
                    protos = self.model.protocols(alg, req.op, facts.ll128_ok, shape.m)
                    if proto_req != "auto":
                        if proto_req not in protos:
                            continue
                        protos = (proto_req,)
                    for proto in protos:
                        yield (alg, proto), self.estimate_s(req.op, alg, proto, gpus, max(float(req.size_bytes), 1.0))

            best, _t = _fastest(timed())
            if best is None:
                raise NetsimError(f"protocol {PROTOCOL_NAMES[proto_req]} does not apply to any algorithm "
                                  f"of {req.op} on this group")
            got = self._auto[ck] = self._choice[key] = best
        return (gpus, shape, facts) + got

    def choice_key(self, op: str, algs: tuple[str, ...], gpus: tuple[int, ...]) -> tuple:
        """Everything analytical.estimate_s reads of the plans of `op` on `gpus` with each algorithm of
        `algs` (every candidate, not only the one chosen), so two groups with equal keys have equal
        estimates for every (algorithm, protocol, size) and hence the same choice:

        - the group's shape and facts: sizes of its units in order, domains, the facts' bandwidths,
          units, one-GPU-per-unit and LL128 flags (they fix the candidates' protocols, the
          ResolveContext of every protocol, the plateau factor and the closed forms' bandwidths);
        - per algorithm, the id of its route signature (route_signature).

        A plan is a function of its routed specs, shape, facts and the planner's model (Planner.plan:
        build_specs, route_spec, finish); analytical.estimate_s reads of the plan only its shape
        and facts (sizes and bandwidths above), its flows' payload share, latency, cap, fill terms,
        deps and order, and - through static_time_s, for algorithms without a closed form - the
        channels renumbered by rank over the schedule's channels (compact_flows), their weights and
        the capacities of those channels. All of these are in the key, and the planner's model,
        view and calibration are fixed, so an equal key gives bit-identical estimates (the flow
        engine is deterministic). Memoised per (op, algorithms, group): choose, plan and estimate_s
        of one group read it."""
        ck = (op, algs, gpus)
        got = self._ckeys.get(ck)
        if got is None:
            shape, facts = self.shape(gpus)
            got = self._ckeys[ck] = (
                (op, len(shape.gpus), shape.unit_sizes, shape.domains, facts.b_nv, facts.b_net,
                 facts.units, facts.one_per_unit, facts.ll128_ok)
                + tuple([self.route_signature(op, alg, gpus) for alg in algs]))
        return got

    def route_signature(self, op: str, alg: str, gpus: tuple[int, ...]) -> int:
        """Id of what the plans of (op, algorithm, group) read of its routed specs: per spec its fields
        other than the GPU hops (bytes, steps, deps, order, weights, NVLS/PXN flags, ring, latency
        stages, channel share, fill kind), per-hop link classes and propagation latencies, switch
        propagation, line rate up, channel weights (channel order) and - where the estimate runs the
        flows (no closed form) - the channels as ranks over the schedule's channels and those
        channels' capacities. Equal signatures are interned to one id. Float arrays are keyed by
        their bytes (equal bytes: equal values; only -0.0 and 0.0 differ, which merely forgoes a
        share), the ranks of several specs as one array with the specs' channel counts."""
        key = (op, alg, gpus)
        got = self._alg_sig.get(key)
        if got is None:
            routed = self._routed_specs(op, alg, gpus)
            parts = []
            for r in routed:
                s = r.spec
                parts.append((s.nbytes, s.steps, s.deps, None if s.weights is None else tuple(s.weights), s.nvls,
                              s.pxn, s.after, s.ring, s.lat_stages, s.share, s.fill, tuple(r.hop_class),
                              tuple(r.hop_prop_s), r.switch_prop_s, r.line_up_Bps, _float_bytes(r.weights)))
            if not ana.closed_form_applies(alg, op):
                if len(routed) == 1:
                    # one spec (a send): its channels are sorted and distinct, so their ranks are 0, 1, ...
                    used = routed[0].channels
                    parts.append((len(used),))
                elif sum(len(r.channels) for r in routed) < _RANK_ARRAY_USES:
                    chans = [r.channels.tolist() for r in routed]
                    used = sorted(set().union(*chans))
                    rank = {c: i for i, c in enumerate(used)}
                    parts.append(tuple(tuple(map(rank.__getitem__, c)) for c in chans))
                else:
                    # (more uses than _RANK_ARRAY_USES, which the count of uses in the key tells apart)
                    allc = np.concatenate([r.channels for r in routed])
                    used = np.sort(allc)
                    used = used[np.concatenate(([True], used[1:] != used[:-1]))]
                    parts.append((np.searchsorted(used, allc).astype(np.int64).tobytes(),
                                  tuple([len(r.channels) for r in routed])))
                parts.append(_float_bytes(self._cap_array()[used]))
            sig = tuple(parts)
            got = self._sig_ids.get(sig)
            if got is None:
                got = self._sig_ids[sig] = len(self._sig_ids)
            self._alg_sig[key] = got
        return got

    def _cap_array(self) -> np.ndarray:
        """The view's channel capacities (B/s) as a float64 array (cached)."""
        if self._cap_arr is None:
            self._cap_arr = np.asarray(self.view.capacity_Bps, dtype=np.float64)
        return self._cap_arr

    def capacity_list(self) -> list[float]:
        """The view's channel capacities (B/s) as Python floats (cached)."""
        if self._cap_list is None:
            self._cap_list = self.view.capacity_Bps.tolist()
        return self._cap_list

    def fabric_mask(self) -> list[bool]:
        """Per channel: it joins two network switches (shared by the traffic of many GPUs, unlike a
        GPU's own access links); cached."""
        if self._fabric is None:
            v = self.view
            sw = v.is_network_switch
            nodes = {int(x) for x in v.ch_src.tolist()} | {int(x) for x in v.ch_dst.tolist()}
            is_sw = {x: sw(x) for x in nodes}
            self._fabric = [is_sw[a] and is_sw[b] for a, b in zip(v.ch_src.tolist(), v.ch_dst.tolist())]
        return self._fabric

    def _routed_specs(self, op: str, alg: str, gpus: tuple[int, ...]) -> list:
        """Routed specs of (op, algorithm, group), shared by its protocols (cached)."""
        routed = self._routed.get((op, alg, gpus))
        if routed is None:
            specs = self._build_specs(self.shape(gpus)[0], op, alg)
            routed = self._routed[(op, alg, gpus)] = route_specs(self.view, specs)
        return routed

    def _build_specs(self, shape: GroupShape, op: str, alg: str) -> list:
        """build_specs(shape, op, alg, 1.0); for the (op, algorithm) of _RELABELLED, the canonical
        group's specs (built once per unit sizes) with its GPUs relabelled: equal specs, without
        rebuilding the rings and double binary trees of every translated group."""
        if (op, alg) not in _RELABELLED or shape.n < 2:
            return build_specs(shape, op, alg, 1.0)
        specs, src, dst, ends, _hid = self._template(shape, op, alg)
        if ends[-1] < _RELABEL_ARRAY_HOPS:
            flat = [g for s in shape.servers for g in s]
            return [FlowSpec([(flat[a], flat[b]) for a, b in t.hops], t.nbytes, t.steps, t.deps, t.weights, t.nvls,
                             t.pxn, t.after, t.ring, t.lat_stages, t.share, t.fill) for t in specs]
        flat = np.fromiter((g for s in shape.servers for g in s), dtype=np.int64, count=shape.n)
        hops = list(zip(flat[src].tolist(), flat[dst].tolist()))     # (GPU, GPU) tuples of Python ints
        return [FlowSpec(hops[ends[i]:ends[i + 1]], t.nbytes, t.steps, t.deps, t.weights, t.nvls, t.pxn, t.after,
                         t.ring, t.lat_stages, t.share, t.fill) for i, t in enumerate(specs)]

    def _template(self, shape: GroupShape, op: str, alg: str) -> tuple:
        """(canonical specs, every hop's source and destination canonical index (all specs end to
        end), the specs' hop bounds, id of the hops or None) of an (op, algorithm) of _RELABELLED on
        groups of shape's unit sizes, or of a point-to-point op (cached); canonical index i is the
        i-th GPU of the group's _template_row. The id is shared by templates with equal hops that
        _relabelled_routes can route as arrays (unweighted, non-PXN, every spec with hops): their
        routes are equal (the routing reads a spec's hops, index, weights and PXN flag)."""
        if alg == "p2p":
            tkey = (op, alg)
        else:
            tkey = (op, alg, shape.unit_sizes)
        tmpl = self._spec_idx.get(tkey)
        if tmpl is None:
            if alg == "p2p":
                # a point-to-point spec reads of its group only the GPUs in request order (_template_row)
                specs = build_specs(GroupShape((0, 1), [[0], [1]], 1), op, alg, 1.0)
            else:
                specs = self._spec_tmpl.get(tkey)
                if specs is None:
                    specs = self._spec_tmpl[tkey] = _canonical_specs(tkey[2], shape.domains, op, alg)
            ends = np.cumsum([0] + [len(t.hops) for t in specs]).tolist()
            idx = np.array([ab for t in specs for ab in t.hops], dtype=np.int64).reshape(-1, 2)
            src, dst = idx[:, 0].copy(), idx[:, 1].copy()
            hid = None
            if all(t.weights is None and not t.pxn and t.hops for t in specs):
                hid = self._hop_ids.setdefault((src.tobytes(), dst.tobytes(), tuple(ends)), len(self._hop_ids))
            tmpl = self._spec_idx[tkey] = (specs, src, dst, ends, hid)
        return tmpl

    @staticmethod
    def _template_row(alg: str, shape: GroupShape) -> tuple[int, ...]:
        """The GPUs a template's canonical indices stand for: the group's GPUs unit by unit
        (_RELABELLED), the request's order for a point-to-point op (p2p_specs)."""
        return shape.gpus if alg == "p2p" else tuple([g for s in shape.servers for g in s])

    def _relabelled_routes(self, jobs: list[tuple]) -> list[tuple]:
        """Route (op, algorithm, group) keys of _RELABELLED or point-to-point with their shapes (`jobs`), the groups of
        one template at once as GPU arrays (netsim.resolve.route_relabelled: no per-group specs
        built), into the route cache; groups of another (op, algorithm) with equal hops (a ring's
        reduce-scatter and all-gather) share the routes (copied with this template's specs).
        Returns the jobs left to the general path (a template with weights, PXN or switch ports,
        a group that route_relabelled does not answer)."""
        from netsim.resolve import RoutedSpec, route_relabelled
        left, by_tmpl = [], {}
        for key, shape in jobs:
            tmpl = self._template(shape, key[0], key[1])
            if tmpl[4] is None:
                left.append((key, shape))
                continue
            row = self._template_row(key[1], shape)
            got = self._hop_routes.get((tmpl[4], row))
            if got is not None:
                self._routed[key] = [RoutedSpec(sp, r.channels, r.weights, r.hop_class, r.hop_prop_s, r.switch_prop_s,
                                                r.line_up_Bps) for sp, r in zip(tmpl[0], got)]
                continue
            by_tmpl.setdefault(id(tmpl), (tmpl, []))[1].append((key, shape, row))
        for tmpl, group_jobs in by_tmpl.values():
            specs, src, dst, _ends, hid = tmpl
            flat = np.array([row for _, _, row in group_jobs], dtype=np.int64)
            for (key, shape, row), routed in zip(group_jobs, route_relabelled(self.view, specs, flat[:, src],
                                                                              flat[:, dst])):
                if routed is None:
                    left.append((key, shape))
                else:
                    self._routed[key] = self._hop_routes[(hid, row)] = routed
        return left

    def call_many(self, reqs) -> list[tuple]:
        """[call(req) for req in reqs], with the specs of every candidate algorithm of the groups not
        seen before built and routed together first (netsim.resolve.route_specs_many: one numpy
        batch for many small groups, e.g. every pipeline send pair of a stage pair). The routes are
        the ones call would compute one group at a time, so the results are the same; a bad request
        raises the error call would (of several bad ones, the first invalid group or size is named
        before any protocol error)."""
        calls = self._calls
        todo = [r for r in reqs if (r.op, tuple(r.gpus), float(r.size_bytes), r.algorithm,
                                    getattr(r, "protocol", "auto")) not in calls]
        checked = len(todo) > 1
        if checked:
            self._preroute(todo)     # validates every request not seen before
        return [self.call(r, checked) for r in reqs]

    def call_parts_many(self, reqs) -> list[tuple]:
        """What call_many(reqs)[i] tells of each request's flows, without building the plan of a
        group whose plan would be a copy of an earlier one (plan: same choice key): per request
        (header, fields, channels) with header = (algorithm, protocol, delay_s, lat_mult, number
        of flows), fields = per flow (weights as a tuple, frac, latency_s, cap_Bps, deps, after,
        nch, fill_stages, fill_chunk) and channels = per flow its channel array. header and
        fields are the template plan's objects, shared by every group of that plan (plan copies
        the template's fields and takes the group's routed channels; timing reads only what the
        key holds), so the values are call's. Validation, choice and errors as call_many."""
        calls = self._calls
        keys = [(r.op, tuple(r.gpus), float(r.size_bytes), r.algorithm, getattr(r, "protocol", "auto")) for r in reqs]
        todo = [r for r, k in zip(reqs, keys) if k not in calls]
        checked = len(todo) > 1
        if checked:
            self._preroute(todo)
        out = []
        parts = self._parts
        templates = self._templates
        for r, k in zip(reqs, keys):
            got = calls.get(k)
            if got is None:
                gpus, _shape, _facts, alg, proto = self.choose(r, checked)
                size = k[2]
                if size > 0 and len(gpus) > 1:
                    tmpl = templates.get((proto, alg) + self.choice_key(r.op, (alg,), gpus))
                    if tmpl is not None:
                        memo = parts.get((id(tmpl), size))
                        if memo is None:
                            memo = parts[(id(tmpl), size)] = (tmpl,) + _plan_parts(tmpl, alg, proto, size)
                        out.append((memo[1], memo[2], [x.channels for x in self._routed_specs(r.op, alg, gpus)]))
                        continue
                got = self.call(r, True)
            gpus, alg, proto, flows, delay, mult = got[:6]
            out.append(((alg, proto, delay, mult, len(flows)), _flow_fields(flows), [f.channels for f in flows]))
        return out

    def _preroute(self, reqs) -> None:
        """Route the specs of every candidate algorithm of `reqs` (what choose and plan will read)
        in one route_specs_many call, into the planner's route cache."""
        keys: list[tuple] = []
        spec_lists: list[list] = []
        seen: set = set()
        relabel: list[tuple] = []
        batched = hasattr(self.view, "one_switch_hops")
        self._shape_pairs(reqs)
        for req in reqs:
            gpus = tuple(req.gpus)
            validate_request(self.view, req.op, gpus, req.size_bytes)
            if len(gpus) < 2:
                continue
            shape = self.shape(gpus)[0]
            check_algorithm(self.view, shape, req.op, req.algorithm)
            if req.op in ("send", "recv"):
                algs = ("p2p",)
            elif req.algorithm == "auto":
                algs = ana.candidates(self.view, shape, req.op)
            else:
                algs = (req.algorithm,)
            for alg in algs:
                key = (req.op, alg, gpus)
                if key in self._routed or key in seen:
                    continue
                seen.add(key)
                if batched and ((req.op, alg) in _RELABELLED or alg == "p2p"):
                    relabel.append((key, shape))
                    continue
                keys.append(key)
                spec_lists.append(self._build_specs(shape, req.op, alg))
        for key, shape in self._relabelled_routes(relabel) if relabel else ():
            keys.append(key)
            spec_lists.append(self._build_specs(shape, key[0], key[1]))
        if keys:
            for key, routed in zip(keys, route_specs_many(self.view, spec_lists)):
                self._routed[key] = routed

    def call(self, req: CollectiveRequest, checked: bool = False):
        """(gpus, algorithm, protocol, flows, delay_s, lat_mult, one, one_bytes) of a request, cached per (op, group,
        size, requested algorithm and protocol): the validation, choice, routing and timing of a repeated
        call (every pipeline send of a stage pair, every micro-batch's collective) are done once.
        flows: resolved unit-size flows ([] for an empty call); one: the single dependency-free flow
        when the schedule is just that (a point-to-point send), else None; one_bytes: its payload.
        checked: the caller has validated the request (call_many)."""
        key = (req.op, tuple(req.gpus), float(req.size_bytes), req.algorithm, getattr(req, "protocol", "auto"))
        got = self._calls.get(key)
        if got is None:
            gpus, _shape, _facts, alg, proto = self.choose(req, checked)
            size = float(req.size_bytes)
            flows, delay, mult = [], 0.0, 1.0
            if size > 0 and len(gpus) > 1:
                plan = self.plan(req.op, alg, proto, gpus)
                flows = plan.flows
                delay, mult = plan.timing(size)
            one = flows[0] if len(flows) == 1 and not flows[0].deps and not flows[0].after else None
            one_bytes = one.payload_bytes(size) if one is not None else 0.0
            got = self._calls[key] = (gpus, alg, proto, flows, delay, mult, one, one_bytes)
        return got

    def prepare(self, req: CollectiveRequest):
        """(gpus, shape, facts, algorithm) of a request (see choose; the protocol is left out)."""
        return self.choose(req)[:4]

    def plan(self, op: str, alg: str, proto: str, gpus: tuple[int, ...]) -> CollectivePlan:
        """The CollectivePlan of (op, algorithm, protocol, group), cached. A group whose choice key
        (choice_key for this algorithm alone) equals an earlier group's gets that plan's flows with
        its own channels: finish() computes every other field of a flow from what the key holds (the
        spec fields, hop classes and latencies, weights, switch propagation, line rate, and the
        shape and facts that fix the ResolveContext), so they are the same values."""
        key = (op, alg, proto, gpus)
        got = self._plans.get(key)
        if got is None:
            shape, facts = self.shape(gpus)
            routed = self._routed_specs(op, alg, gpus)
            tkey = (proto, alg) + self.choice_key(op, (alg,), gpus)
            tmpl = self._templates.get(tkey)
            if tmpl is not None:
                flows = [ResolvedFlow(r.channels, f.weights, f.frac, f.latency_s, f.cap_Bps, f.deps, f.after,
                                      f.nch, f.fill_stages, f.fill_chunk) for r, f in zip(routed, tmpl.flows)]
                got = self._plans[key] = CollectivePlan(op, alg, proto, tmpl.family, shape, facts, flows,
                                                        tmpl.base_s, tmpl.efficiency, tmpl.model)
                return got
            got = self._plan_of(op, alg, proto, shape, facts, routed)
            self._plans[key] = self._templates[tkey] = got
        return got

    def flows(self, op: str, alg: str, gpus: tuple[int, ...], shape=None, proto: str = "simple") -> list[ResolvedFlow]:
        """Resolved unit-size flows of (op, algorithm, protocol, group); the channels do not depend on
        the protocol."""
        return self.plan(op, alg, proto, gpus).flows

    def estimate_s(self, op: str, alg: str, proto: str, gpus: tuple[int, ...], size: float) -> float:
        key = (op, alg, proto, gpus, size)
        t = self._est.get(key)
        if t is None:
            if len(gpus) > 1:
                # equal choice keys read equal values (choice_key): the estimate is shared
                skey = (proto, size, alg) + self.choice_key(op, (alg,), gpus)
                t = self._est_by_key.get(skey)
                if t is None:
                    t = self._est_by_key[skey] = ana.estimate_s(self.view, self.plan(op, alg, proto, gpus), size)
            else:
                t = 0.0
            self._est[key] = t
        return t

    def analytical_s(self, req: CollectiveRequest) -> tuple[float, str, str]:
        """(estimate s, algorithm, protocol) of a request. Requests with equal quick keys (quick_key)
        share the answer without routing the later group; a request with a quick key not seen
        before is answered from the key's hop rows (_quick_answer), also without routing."""
        qk = self.quick_key(req)
        if qk is not None:
            got = self._quick.get(qk)
            if got is None:
                got = self._quick[qk] = self._quick_answer(req, qk)
            return got
        gpus, _shape, _facts, alg, proto = self.choose(req, qk is not None)
        got = self.estimate_s(req.op, alg, proto, gpus, float(req.size_bytes)), alg, proto
        if qk is not None:
            self._quick[qk] = got
        return got

    def choice(self, req: CollectiveRequest) -> tuple[str, str]:
        """(algorithm, protocol) that choose picks for `req`: taken from an earlier analytical_s of a
        request with an equal quick key (the same choice, see quick_key) without routing the group,
        else choose's."""
        qk = self.quick_key(req) if self._quick else None
        if qk is not None:
            got = self._quick.get(qk)
            if got is not None:
                return got[1], got[2]
        got = self.choose(req, qk is not None)
        return got[3], got[4]

    def quick_key(self, req: CollectiveRequest) -> tuple | None:
        """A key of an automatic-choice request (validated here) that fixes its analytical_s without
        routing the group, or None (then analytical_s routes it). It holds the request's op and size,
        the choice_key part of the group's shape and facts, the candidate algorithms and, per
        candidate, _quick_signature: defined only when every candidate is timed by a closed form
        (analytical.closed_form_s), which reads of a plan its shape and facts, the flows' count,
        latencies, caps, payload shares and fill terms - functions of the spec fields and, per hop,
        the link class and propagation latency (resolve.finish), which the signature keys
        (TopoView.hop_keys). Equal keys give bit-identical estimates for every (algorithm,
        protocol), hence the same choice and estimate."""
        op, gpus = req.op, tuple(req.gpus)
        validate_request(self.view, op, gpus, req.size_bytes)
        shape, facts = self.shape(gpus)
        check_algorithm(self.view, shape, op, req.algorithm)
        if (req.algorithm != "auto" or parse_protocol(getattr(req, "protocol", "auto")) != "auto"
                or op in ("send", "recv") or shape.n < 2):
            return None
        algs = ana.candidates(self.view, shape, op)
        sigs = []
        for alg in algs:
            key = (op, alg, gpus)
            sig = self._quick_sigs.get(key, False)
            if sig is False:
                sig = self._quick_sigs[key] = self._quick_signature(op, alg, gpus, shape)
            if sig is None:
                return None
            sigs.append(sig)
        return ((op, float(req.size_bytes), shape.n, shape.unit_sizes, shape.domains,
                 facts.b_nv, facts.b_net, facts.units, facts.one_per_unit, facts.ll128_ok, algs)
                + tuple(sigs))

    def _quick_signature(self, op: str, alg: str, gpus: tuple[int, ...], shape: GroupShape) -> tuple | None:
        """The spec fields route_signature keys (no weights: the closed forms read none) and hop
        counts of every spec of (op, algorithm, group), and the TopoView.hop_keys rows of all their
        hops as bytes; None unless the algorithm has a closed form and every spec is an unweighted,
        non-NVLS, non-PXN list of GPU pairs that hop_keys answers (the specs _route_ring_like_many
        routes). For the (op, algorithm) of _RELABELLED the canonical specs' fields and hops
        relabelled (what _build_specs gives), without building the group's specs."""
        if not ana.closed_form_applies(alg, op) or not hasattr(self.view, "hop_keys"):
            return None
        if alg == "nvls":
            return self._nvls_signature(op, shape)
        if (op, alg) in _RELABELLED:
            fields, tsrc, tdst, tid = self._quick_template(op, alg, shape)
            if fields is None:
                return None
            memo = self._quick_by_tmpl.get((tid, gpus), False)
            if memo is not False:
                return memo
            flat = np.fromiter((g for s in shape.servers for g in s), dtype=np.int64, count=shape.n)
            hk = self.view.hop_keys(flat[tsrc], flat[tdst])
            memo = self._quick_by_tmpl[(tid, gpus)] = None if hk is None else (fields, hk.tobytes())
            return memo
        fields, src, dst = self._quick_fields(self._build_specs(shape, op, alg))
        if fields is None:
            return None
        hk = self.view.hop_keys(src, dst)
        return None if hk is None else (fields, hk.tobytes())

    def _quick_template(self, op: str, alg: str, shape: GroupShape) -> tuple:
        """(_quick_fields of the canonical specs, their id) of an (op, algorithm) of _RELABELLED on
        groups of shape's unit sizes (cached)."""
        sizes = shape.unit_sizes
        tk = (op, alg, sizes)
        got = self._quick_tmpl.get(tk)
        if got is None:
            fields, tsrc, tdst = self._quick_fields(_canonical_specs(sizes, shape.domains, op, alg))
            # templates with equal fields and hops (a ring's reduce-scatter and all-gather) share
            # one id: the signature is a function of the template and the group
            tid = None if fields is None else self._quick_tids.setdefault(
                (fields, tsrc.tobytes(), tdst.tobytes()), len(self._quick_tids))
            got = self._quick_tmpl[tk] = (fields, tsrc, tdst, tid)
        return got

    def prefetch_quick(self, op: str, groups) -> None:
        """_quick_signature of an automatic-choice `op` on many groups (GPU tuples) at once, into its
        caches: the hop rows of all groups of one canonical template come from one TopoView.hop_keys
        call over the groups' stacked hops (hop_keys is row by row: the same rows as one call per
        group); the groups with their own specs (all-to-all) share one more call. NVLS signatures
        are left to quick_key (no hop rows), as are groups that fail validation and groups of a
        batch hop_keys does not answer (quick_key raises the errors). A caller that knows the groups
        it will time (every pipeline stage's group of one kind) saves the per-group calls."""
        if not hasattr(self.view, "hop_keys"):
            return
        batches: dict[int, tuple] = {}
        own: list[tuple] = []       # (group, algorithm, fields, hop sources, hop destinations)
        for gpus in groups:
            gpus = tuple(gpus)
            try:
                validate_request(self.view, op, gpus, 0)
            except NetsimError:
                continue
            shape, _facts = self.shape(gpus)
            if shape.n < 2:
                continue
            for alg in ana.candidates(self.view, shape, op):
                if (op, alg, gpus) in self._quick_sigs or alg == "nvls" or not ana.closed_form_applies(alg, op):
                    continue
                if (op, alg) not in _RELABELLED:
                    fields, src, dst = self._quick_fields(self._build_specs(shape, op, alg))
                    if fields is not None:
                        own.append((gpus, alg, fields, src, dst))
                    continue
                fields, tsrc, tdst, tid = self._quick_template(op, alg, shape)
                if fields is None or (tid, gpus) in self._quick_by_tmpl:
                    continue
                batches.setdefault(tid, (fields, tsrc, tdst, {}))[3].setdefault(gpus, shape)
        for tid, (fields, tsrc, tdst, members) in batches.items():
            if len(members) < 2:
                continue            # quick_key's own call is as cheap
            flat = np.array([[g for s in shape.servers for g in s] for shape in members.values()], dtype=np.int64)
            hk = self.view.hop_keys(flat[:, tsrc].reshape(-1), flat[:, tdst].reshape(-1))
            if hk is None:
                continue
            rows = hk.reshape(len(members), len(tsrc), hk.shape[1])
            for i, gpus in enumerate(members):
                self._quick_by_tmpl[(tid, gpus)] = (fields, rows[i].tobytes())
        if len(own) > 1:            # groups with their own specs (all-to-all): one call, split per group
            hk = self.view.hop_keys(np.concatenate([j[3] for j in own]), np.concatenate([j[4] for j in own]))
            if hk is not None:
                o = 0
                for gpus, alg, fields, src, _dst in own:
                    self._quick_sigs[(op, alg, gpus)] = (fields, hk[o:o + len(src)].tobytes())
                    o += len(src)

    def _nvls_signature(self, op: str, shape: GroupShape) -> tuple | None:
        """_quick_signature of an NVLS collective: the fields of its one spec that finish reads and its
        route's two terms (switch propagation s, GPU-to-switch line rate: resolve._route_hops' minimum
        and maximum over the group's ports), the only values of the route an NVLS flow reads; None
        unless the spec is one NVLS spec of NVSwitch ports."""
        specs = build_specs(shape, op, "nvls", 1.0)
        if len(specs) != 1 or not specs[0].nvls or not all(h[0] in ("up", "down") for h in specs[0].hops):
            return None
        s = specs[0]
        r = route_spec(self.view, s, 0)
        fields = ("nvls", len(s.hops), s.nbytes, s.steps, tuple(s.weights or ()), tuple(s.deps), tuple(s.after),
                  s.ring, s.lat_stages, s.share, s.fill)
        return fields, (r.switch_prop_s, r.line_up_Bps)

    @staticmethod
    def _quick_fields(specs: list) -> tuple:
        """(spec fields and hop counts, sources, destinations of all hops) of specs _quick_signature
        can key, else (None, None, None)."""
        if not specs or not all(s.weights is None and not s.nvls and not s.pxn and s.hops for s in specs):
            return None, None, None
        total = sum(len(s.hops) for s in specs)
        try:
            flat = np.fromiter(chain.from_iterable(chain.from_iterable(s.hops for s in specs)), dtype=np.int64,
                               count=2 * total).reshape(-1, 2)
        except (TypeError, ValueError):         # ("up", gpu) / ("down", gpu) NVSwitch ports
            return None, None, None
        fields = tuple((len(s.hops), s.nbytes, s.steps, s.deps, s.after, s.ring, s.lat_stages, s.share, s.fill)
                       for s in specs)
        return fields, flat[:, 0].copy(), flat[:, 1].copy()

    def _quick_answer(self, req: CollectiveRequest, qk: tuple) -> tuple[float, str, str]:
        """analytical_s of a request with a quick key (quick_key), from what the key holds: choose's
        (algorithm, protocol) choice and estimate_s's time, over plans whose flows are finish() of
        each spec with the link class and propagation of its hops taken from the key's hop rows
        (TopoView.hop_key_routes) and no channels - every quick-key candidate is timed by a closed
        form, which reads no channel (analytical.closed_form_s). The same values in the same
        arithmetic as the routed plans, without routing the group."""
        op, gpus, size = req.op, tuple(req.gpus), float(req.size_bytes)
        shape, facts = self.shape(gpus)
        # a plan depends on the op, the key's shape and facts terms (qk[2:10]: all that _plan_of and
        # the closed forms read of a plan's shape and facts) and its routed specs' content: requests
        # of any size on groups with equal terms and hop lists share it
        base = (op,) + qk[2:10]
        plans = {}

        def timed():
            for alg, sig in zip(qk[10], qk[11:]):
                routed, rid = self._quick_routed(op, alg, shape, sig)
                for proto in self.model.protocols(alg, op, facts.ll128_ok, shape.m):
                    pkey = (base, alg, proto, rid)
                    plan = self._quick_plans.get(pkey)
                    if plan is None:
                        plan = self._quick_plans[pkey] = self._plan_of(op, alg, proto, shape, facts, routed, rid)
                    plans[(alg, proto)] = plan
                    yield (alg, proto), ana.estimate_s(self.view, plan, max(size, 1.0))

        best, best_t = _fastest(timed())      # choose's rule
        if best is None:      # no protocol applies: choose raises its error
            gpus, _shape, _facts, alg, proto = self.choose(req, True)
            return self.estimate_s(op, alg, proto, gpus, size), alg, proto
        if size >= 1.0:      # the best plan's time was computed at this very size
            return best_t, best[0], best[1]
        return ana.estimate_s(self.view, plans[best], size), best[0], best[1]

    def _quick_routed(self, op: str, alg: str, shape: GroupShape, sig: tuple) -> tuple[list, int]:
        """(RoutedSpecs of (op, algorithm, group) without channels, id of their content), cached by
        (algorithm, `sig`): stand-in specs holding the fields of `sig` (_quick_signature: every
        field finish reads of a spec) and per hop the class and propagation of its hop_keys row
        (an NVLS route: its two terms, _nvls_signature). Equal ids: equal spec fields and hop lists,
        hence equal plans under one ResolveContext (e.g. a ring's reduce-scatter and all-gather, a
        DP group and its translates). Equal hop lists share their tuples and LatencyMemo: finish
        computes each critical latency once per protocol."""
        key = (alg, sig)
        got = self._quick_routes.get(key)
        if got is not None:
            return got
        from netsim.resolve import RoutedSpec, new_latency_memo
        none_i, none_f = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float64)
        if alg == "nvls":
            # sig[0]: ("nvls", hop count, nbytes, steps, weights, deps, after, ring, lat_stages, share, fill)
            _tag, _n, nbytes, steps, weights, deps, after, ring, lat_stages, share, fill = sig[0]
            spec = FlowSpec((), nbytes, steps=steps, deps=deps, weights=list(weights) or None, nvls=True, after=after,
                            ring=ring, lat_stages=lat_stages, share=share, fill=fill)
            routed = [RoutedSpec(spec, none_i, none_f, (), (), *sig[1])]
            content = sig
        else:
            classes, props = self.view.hop_key_routes(np.frombuffer(sig[1], dtype=np.float64).reshape(-1, 6))
            hops = self._quick_hops
            routed, hop_ids, o = [], [], 0
            # sig[0]: per spec (hop count, nbytes, steps, deps, after, ring, lat_stages, share, fill)
            # of unweighted, non-NVLS, non-PXN specs (_quick_fields)
            for n, nbytes, steps, deps, after, ring, lat_stages, share, fill in sig[0]:
                spec = FlowSpec((), nbytes, steps=steps, deps=deps, after=after, ring=ring, lat_stages=lat_stages,
                                share=share, fill=fill)
                hk = (tuple(classes[o:o + n]), tuple(props[o:o + n]))
                o += n
                shared = hops.get(hk)
                if shared is None:
                    shared = hops[hk] = (*hk, new_latency_memo(hk[0]), len(hops))
                hc, hp, memo, hid = shared
                routed.append(RoutedSpec(spec, none_i, none_f, hc, hp, 0.0, math.inf, memo))
                hop_ids.append(hid)
            content = (sig[0], tuple(hop_ids))
        have = self._quick_content.get(content)
        if have is None:
            have = self._quick_content[content] = (routed, len(self._quick_content))
        self._quick_routes[key] = have
        return have

    def _plan_of(self, op: str, alg: str, proto: str, shape: GroupShape, facts, routed: list,
                 rid: int | None = None) -> CollectivePlan:
        """The CollectivePlan of routed specs under the protocol's terms (plan(); _quick_answer passes
        specs without channels, for closed forms only, and their content id `rid` (_quick_routed):
        the flows of equal content under equal terms are shared, e.g. by a ring's reduce-scatter
        and all-gather)."""
        m = self.model
        family = FAMILY[alg]
        cap = m.ll_cap_algbw_Bps(family, proto, op, shape.n, shape.m)
        channels = m.channels(family, facts.one_per_unit, facts.b_net)
        # every term of the context: the rest are functions of (family, protocol) and the model
        ckey = (alg, proto, shape.m > 1, facts.one_per_unit, cap, channels)
        ctx = self._contexts.get(ckey)
        if ctx is None:
            hop = HopContext(family, proto, multi_unit=shape.m > 1, one_per_unit=facts.one_per_unit)
            alphas: dict[str, float] = {}

            def hop_alpha_s(cls: str) -> float:      # read per spec: kept per class
                got = alphas.get(cls)
                if got is None:
                    got = alphas[cls] = m.hop_alpha_s(cls, hop)
                return got

            ctx = self._contexts[ckey] = ResolveContext(
                hop_alpha_s=hop_alpha_s, efficiency=m.efficiency(family, proto), cap_algbw_Bps=cap,
                channels=channels, chunk=lambda kind, proto=proto: m.fill_chunk_bytes(kind, proto),
                nvls_latency_s=m.nvls_latency_s(), nvls_efficiency=m.nvls_efficiency)
        if rid is None:
            flows = [finish(r, ctx) for r in routed]
        else:
            flows = self._quick_flows.get((rid, ckey))
            if flows is None:
                flows = self._quick_flows[(rid, ckey)] = [finish(r, ctx) for r in routed]
        return CollectivePlan(op, alg, proto, family, shape, facts, flows, m.base_s(family, proto), ctx.efficiency, m)


class AnalyticalNetwork:
    """Alpha-beta backend: each collective takes its idle-network estimate; no contention."""

    kind = "analytical"

    def __init__(self, topology, *, pxn: bool = False, planner: Planner | None = None, **model_options):
        self.planner = planner or Planner(topology, pxn=pxn, **model_options)
        self._events: list[tuple[float, int, Callable[[float], None]]] = []
        self._seq = 0
        self.now_s = 0.0
        self.records: list[CollectiveRecord] = []

    def estimate(self, req: CollectiveRequest) -> float:
        return self.planner.analytical_s(req)[0]

    def submit(self, req: CollectiveRequest, now_s: float, on_done: Callable[[float], None]) -> None:
        t, alg, proto = self.planner.analytical_s(req)
        start = max(now_s, self.now_s)
        end = start + t
        self.records.append(CollectiveRecord(req.tag, req.op, alg, len(req.gpus), int(req.size_bytes), start, end,
                                             PROTOCOL_NAMES[proto]))
        heapq.heappush(self._events, (end, self._seq, on_done))
        self._seq += 1

    def next_event_time(self) -> float:
        return self._events[0][0] if self._events else math.inf

    def advance(self, until_s: float) -> None:
        while self._events and self._events[0][0] <= until_s:
            t, _, cb = heapq.heappop(self._events)
            self.now_s = max(self.now_s, t)
            cb(t)
        self.now_s = max(self.now_s, until_s)


def _run_collective(net, flows: list[ResolvedFlow], size: float, on_done, record: CollectiveRecord, *,
                    delay_s: float = 0.0, lat_mult: float = 1.0) -> None:
    """Start one collective's schedule on the network's engine; record and report its completion."""
    def finish(t: float) -> None:
        record.end_s = t
        if net.keep_records:
            net.records.append(record)
        net._in_flight -= 1
        on_done(t)

    ScheduleRun(net.engine, flows, size, finish, delay_s=delay_s, lat_mult=lat_mult).start()


class FlowNetwork:
    """Contention-aware backend: every collective becomes flows on the shared flow engine.

    options: pxn (route inter-node traffic through the NVLink peer on the destination rail),
    use_numba (None: automatic), check_invariants (debug: capacity, byte conservation, completion),
    record_flows / record_link_timeline / record_link_changes (statistics; record_link_changes keeps only
    the links whose load changed at each rate recomputation, for netsim.linktrace); keep_records (default
    True): keep a CollectiveRecord per finished collective in `records` (the training simulator, which
    reads none, turns it off: millions of pipeline sends otherwise hold hundreds of MB).
    """

    kind = "flow"

    def __init__(self, topology, *, pxn: bool = False, use_numba: bool | None = None,
                 check_invariants: bool = False, record_flows: bool = False,
                 record_link_timeline: bool = False, record_link_changes: bool = False,
                 planner: Planner | None = None, keep_records: bool = True, **model_options):
        self.planner = planner or Planner(topology, pxn=pxn, **model_options)
        self.keep_records = keep_records
        self.options = dict(use_numba=use_numba, check_invariants=check_invariants,
                            record_flows=record_flows, record_link_timeline=record_link_timeline,
                            record_link_changes=record_link_changes)
        from netsim.engine import FlowEngine  # not imported by analytical runs
        self.engine = FlowEngine(self.planner.view.capacity_Bps, **self.options)
        self.records: list[CollectiveRecord] = []
        self._in_flight = 0
        self._est_cache: dict[tuple, float] = {}
        self._req_calls: dict[int, tuple] = {}    # id(request) -> (request, Planner.call(request))

    @property
    def now_s(self) -> float:
        return self.engine.now_s

    def submit(self, req: CollectiveRequest, now_s: float, on_done: Callable[[float], None]) -> None:
        self.submit_many((req,), now_s, on_done)

    def submit_many(self, reqs, now_s: float, on_done: Callable[[float], None]) -> None:
        """Submit several requests at `now_s`; on_done(t) fires once per request. Same result as one
        submit per request; dependency-free single-flow schedules (sends) go straight to the engine,
        a run of them in one FlowEngine.add_flows call."""
        # validate every request before any is started (a bad one leaves the network untouched);
        # Planner.call per request object seen before is a lookup by identity (requests are frozen)
        memo, call = self._req_calls, self.planner.call
        calls = []
        for req in reqs:
            got = memo.get(id(req))
            if got is None or got[0] is not req:
                if len(memo) >= _REQ_MEMO:   # bounded: callers that build fresh requests every time
                    memo.clear()
                c = call(req)
                one = c[6]
                # holds req (its id is not reused meanwhile); a send's arrays in the engine's dtypes
                got = memo[id(req)] = (req, c) + ((None, None) if one is None else (
                    np.asarray(one.channels, dtype=np.int64), np.asarray(one.weights, dtype=np.float64)))
            calls.append(got)
        if now_s > self.engine.now_s:
            self.advance(now_s)
        engine = self.engine
        now = engine.now_s
        keep = self.keep_records
        links: list = []
        weights: list = []
        nbytes: list = []
        lats: list = []
        caps: list = []
        cbs: list = []

        def one_done(_fid: int, t: float) -> None:     # a send when nothing is recorded
            self._in_flight -= 1
            on_done(t)

        for req, (_, (gpus, alg, proto, flows, delay, mult, one, one_bytes), one_links, one_w) in zip(reqs, calls):
            self._in_flight += 1
            if one is not None and not keep:
                done = one_done
            else:
                rec = CollectiveRecord(req.tag, req.op, alg, len(gpus), int(req.size_bytes), now, math.nan,
                                       PROTOCOL_NAMES[proto])
                if one is None:
                    if cbs:     # the sends before it get the lower flow ids, as one by one
                        engine.add_flows(links, weights, nbytes, lats, caps, cbs)
                        links, weights, nbytes, lats, caps, cbs = [], [], [], [], [], []
                    _run_collective(self, flows, float(req.size_bytes), on_done, rec, delay_s=delay, lat_mult=mult)
                    continue

                def done(_fid: int, t: float, rec=rec) -> None:
                    rec.end_s = t
                    if self.keep_records:
                        self.records.append(rec)
                    self._in_flight -= 1
                    on_done(t)

            links.append(one_links)
            weights.append(one_w)
            nbytes.append(one_bytes)
            # the latency as ScheduleRun computes it (ready time minus now), for bit-identical event times
            lats.append(max(0.0, now + delay + one.latency_s * mult - now))
            caps.append(one.cap_Bps)
            cbs.append(done)
        if cbs:
            engine.add_flows(links, weights, nbytes, lats, caps, cbs)

    def next_event_time(self) -> float:
        return self.engine.next_event_time()

    def advance(self, until_s: float) -> None:
        self.engine.advance(until_s)
        if self.engine.check_invariants and self.engine.idle() and self._in_flight:
            raise AssertionError(f"{self._in_flight} collectives unfinished on an idle network")

    def run_until_idle(self) -> float:
        return self.engine.run()

    def estimate(self, req: CollectiveRequest) -> float:
        """Seconds for `req` alone on an idle flow network (a private engine; no side effects)."""
        gpus, _shape, _facts, alg, proto = self.planner.choose(req)
        key = (req.op, alg, proto, gpus, float(req.size_bytes))
        got = self._est_cache.get(key)
        if got is None:
            private = FlowNetwork(None, planner=self.planner, use_numba=self.options["use_numba"])
            done: list[float] = []
            private.submit(req, 0.0, done.append)
            private.run_until_idle()
            got = done[0]
            self._est_cache[key] = got
        return got

    # ------------------------------------------------------------ statistics
    def link_utilization(self):
        """Mean utilization per link (topology link id; the capacity is the effective one) so far."""
        return self.engine.link_utilization()

    def link_utilization_timeline(self, link_ids=None):
        """(times_s, utilization[len(times), len(link_ids)]): step function, each row holds from its
        time to the next. Needs record_link_timeline=True."""
        import numpy as np

        if not self.engine.record_link_timeline:
            raise NetsimError("link utilization over time needs make_backend(..., record_link_timeline=True)")
        ids = np.arange(len(self.engine.capacity_Bps)) if link_ids is None else np.asarray(link_ids)
        times = np.array([t for t, _ in self.engine.link_timeline])
        cap = self.engine.capacity_Bps[ids]
        util = np.array([load[ids] / cap for _, load in self.engine.link_timeline]).reshape(len(times), len(ids))
        return times, util

    def flow_completion_times(self):
        """Per completed flow: (bytes, start_s, end_s). Needs record_flows=True."""
        return [(r.nbytes, r.start_s, r.end_s) for r in self.engine.flow_records]




def make_backend(kind: str, topology, *, net_calibration: NetCalibration | None = None, **options):
    """netsim.make_backend("flow" | "analytical", topology, *, net_calibration=None, **options) -> NetworkBackend.

    net_calibration: a NetCalibration (netsim.load_net_calibration) replacing netsim's constants for
    one system. Options of both backends: pxn, launch_overhead (host launch cost per call; default
    True), gpus_per_process (nccl-tests -g; default 1), routing ("auto" default: rail-aligned on rail-optimized fabrics, else ECMP | "rail" | "ecmp").
    "flow" only: use_numba, check_invariants, record_flows, record_link_timeline, record_link_changes,
    keep_records.
    """
    both = {"pxn", "launch_overhead", "gpus_per_process", "routing"}
    if kind == "flow":
        allowed = both | {"use_numba", "check_invariants", "record_flows", "record_link_timeline",
                          "record_link_changes", "keep_records"}
    elif kind == "analytical":
        allowed = both
    else:
        raise NetsimError(f"unknown network backend {kind!r} (known: flow, analytical)")
    bad = sorted(set(options) - allowed)
    if bad:
        raise NetsimError(f"{kind} backend: unknown option(s) {', '.join(bad)}")
    if options.get("routing", "auto") not in ROUTINGS:
        raise NetsimError(f"routing must be one of {', '.join(ROUTINGS)}, got {options['routing']!r}")
    cls = FlowNetwork if kind == "flow" else AnalyticalNetwork
    return cls(topology, net_calibration=net_calibration, **options)


def step_level_time_s(topology_or_planner, dag, gpus, *, protocol: str = "simple",
                      check_invariants: bool = False) -> float:
    """Run a step-level DAG (netsim.dag) through the flow engine, every transfer its own flow.

    For validating the bundled schedules on small groups: both must agree for large messages. The
    transfers pay the same per-hop latencies and per-call delay as the bundle of the same (algorithm,
    protocol) and group; the DAG pipelines its pieces explicitly, so no fill factor is applied (compare
    with a bundle whose calibration sets fill_scale=0).
    """
    from netsim.dag import dag_specs

    planner = topology_or_planner if isinstance(topology_or_planner, Planner) else Planner(topology_or_planner)
    gpus = tuple(gpus)
    specs = dag_specs(dag, gpus)
    m = planner.model
    shape, facts = planner.shape(gpus)
    family = FAMILY[dag.algorithm]
    hop = HopContext(family, protocol, multi_unit=shape.m > 1, one_per_unit=facts.one_per_unit)
    phases = 2 if dag.op == "all_reduce" else 1
    ctx = ResolveContext(hop_alpha_s=lambda cls: m.hop_alpha_s(cls, hop), efficiency=m.efficiency(family, protocol),
                         cap_algbw_Bps=math.inf, channels=1, chunk=lambda kind: 0.0,
                         nvls_latency_s=m.nvls_latency_s() / (2 * phases), nvls_efficiency=m.nvls_efficiency)
    flows = [resolve(planner.view, s, i, ctx) for i, s in enumerate(specs)]
    net = FlowNetwork(None, planner=planner, check_invariants=check_invariants)
    net._in_flight = 1
    done: list[float] = []
    rec = CollectiveRecord("dag", dag.op, dag.algorithm, dag.n, 0, 0.0, math.nan)
    _run_collective(net, flows, 1.0, done.append, rec, delay_s=m.base_s(family, protocol))
    net.engine.run()
    if check_invariants:
        net.engine.check_all_done()
    return done[0]
