"""Rule (5) of sim.engine: congruent groups that share fabric links run as one quotient copy.

When the groups of one call (one collective of a kind in a stage, e.g. the all-to-alls of the 48
expert-parallel groups of a stage) share switch-to-switch links through ECMP, rule (4) cannot split
them into independent copies and every group is submitted: 48 x 15 lock-step flows per call that
finish at slightly different times (about 1.8 M flow events per iteration of SimAI's 9,216-GPU MoE
example). Instead, one representative group per class of congruent groups is submitted, with the
load of the other copies folded into its flows (a quotient network):

- congruent: the same algorithm, protocol and timing terms, and flow by flow the same payload share,
  latency, cap, dependencies, pipeline-fill terms and (weight, capacity) multiset on the links that
  are not switch-to-switch (a GPU's own NVLink and NIC links, which disjoint groups never share);
- quotient flow i = the representative's flow i on its own links (their weights unchanged: every
  copy's own links are translates of them and carry the same constraint), plus every
  switch-to-switch link that flow i of any copy crosses, weighted by the sum over the copies
  (weighted max-min: a flow of weight w uses w x rate of a link). A spine link that c copies' flow i
  cross carries c x the rate; every fabric link the call loads is loaded, so other calls sharing it
  see the copies' traffic.

Modelled: the copies run at one rate per flow index (that of the slowest copy's bottleneck), so the
call ends when its slowest copy would. Ignored (the approximation): in the full simulation the
copies' flows get different rates (ECMP makes some copies luckier; a lucky copy finishes early and
frees its spine links for other traffic); other calls' traffic on a copy's own links (NIC, NVLink)
is not seen by the quotient, as for rules (1)-(4). Applied to the kinds in QUOTIENT_KINDS (expert
parallelism) under `--sampling auto` on the flow backend; `--sampling full` submits every group.
The measured error against the full simulation is in docs/sim.md (Symmetry, "Congruent groups
sharing fabric links"); tests/sim/test_ep_symmetry.py asserts the bound.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace

import numpy as np

from netsim.api import CollectiveRequest

# group kinds rule (5) applies to: expert-parallel all-to-alls (measured, docs/sim.md)
QUOTIENT_KINDS = frozenset({"ep"})


@dataclass(frozen=True)
class QuotientPlan:
    """One class of congruent groups submitted as its representative's quotient flows."""
    algorithm: str
    protocol: str
    flows: list              # netsim.resolve.ResolvedFlow at unit size, weights folded over the class
    delay_s: float
    lat_mult: float
    copies: int              # groups of the class (representative included)


class QuotientGroup(tuple):
    """The representative's GPUs (a plain tuple everywhere else) carrying its QuotientPlan."""

    plan: QuotientPlan

    def __new__(cls, gpus, plan: QuotientPlan):
        obj = super().__new__(cls, gpus)
        obj.plan = plan
        return obj


def _signature(planner, call) -> tuple:
    """What two groups must share to be copies (everything but the links themselves): the call's
    algorithm, protocol and timing terms; per flow its terms and the (weight, capacity) multiset on
    its links that are not switch-to-switch."""
    _gpus, alg, proto, flows, delay, mult, _one, _ob = call
    cap = planner.capacity_list()
    fabric = planner.fabric_mask()
    sig = [alg, proto, delay, mult, len(flows)]
    for f in flows:
        chans = f.channels.tolist()
        own = sorted((w, cap[c]) for c, w in zip(chans, f.weights.tolist()) if not fabric[c])
        sig.append((f.frac, f.latency_s, f.cap_Bps, f.deps, f.after, f.nch, f.fill_stages, f.fill_chunk,
                    tuple(own)))
    return tuple(sig)


def fold_flows(fabric: list[bool], calls: list, rep: int) -> list:
    """Quotient flows of a class (`calls`: Planner.call results of its groups, `rep` the index of the
    representative; `fabric`: Planner.fabric_mask()): flow i on the representative's own links with
    its weights, plus every switch-to-switch link of any member's flow i with the members' weights
    summed."""
    out = []
    for i, f in enumerate(calls[rep][3]):
        acc: dict = defaultdict(float)
        for k, c in enumerate(calls):      # member order: the sums do not depend on the representative
            g = c[3][i]
            for ch, w in zip(g.channels.tolist(), g.weights.tolist()):
                if fabric[ch] or k == rep:
                    acc[ch] += w
        chans = np.fromiter(sorted(acc), dtype=np.int64, count=len(acc))
        weights = np.fromiter((acc[ch] for ch in chans.tolist()), dtype=np.float64, count=len(acc))
        out.append(replace(f, channels=chans, weights=weights))
    return out


def _own_links_disjoint(fabric: list[bool], calls: list) -> bool:
    """No link other than switch-to-switch is used by two members (a NIC shared by two GPUs of
    different groups would be: such a class is not folded)."""
    seen: set = set()
    for c in calls:
        own = set()
        for f in c[3]:
            own.update(ch for ch in f.channels.tolist() if not fabric[ch])
        if not seen.isdisjoint(own):
            return False
        seen |= own
    return True


def quotient_groups(planner, groups: list, collective: str, size: int, rep_gpu: int) -> list:
    """`groups` (one call) with every class of two or more congruent groups replaced by one
    QuotientGroup (its representative: the member holding `rep_gpu`, else the first); a group alone
    in its class, or without flows, stays as it is, and so do the members of a class whose own links
    are not disjoint. Order: the input order, a folded class at its first member's place."""
    calls = [planner.call(CollectiveRequest(collective, g, size)) for g in groups]
    classes: dict = defaultdict(list)
    for i, c in enumerate(calls):
        if c[3]:
            classes[_signature(planner, c)].append(i)
    fabric = planner.fabric_mask()
    folded: dict = {}      # first member -> QuotientGroup of its class
    omitted: set = set()
    for members in classes.values():
        mc = [calls[m] for m in members]
        if len(members) == 1 or not _own_links_disjoint(fabric, mc):
            continue
        rep = next((k for k, m in enumerate(members) if rep_gpu in groups[m]), 0)
        _gpus, alg, proto, _flows, delay, mult, _one, _ob = mc[rep]
        plan = QuotientPlan(alg, proto, fold_flows(fabric, mc, rep), delay, mult, len(members))
        folded[members[0]] = QuotientGroup(groups[members[rep]], plan)
        omitted.update(members[1:])
    out = []
    for i, g in enumerate(groups):
        if i in folded:
            out.append(folded[i])
        elif i not in omitted:
            out.append(g)
    return out


def submit_quotient(net, req: CollectiveRequest, now_s: float, on_done) -> None:
    """Start a QuotientGroup's request on a flow network (netsim.backend.FlowNetwork), as its
    submit_many starts a collective's schedule: on_done(t) when the last quotient flow finishes."""
    from netsim.backend import CollectiveRecord, _run_collective
    from netsim.calibration import PROTOCOL_NAMES
    plan = req.gpus.plan
    if now_s > net.engine.now_s:
        net.advance(now_s)
    now = net.engine.now_s
    rec = CollectiveRecord(req.tag, req.op, plan.algorithm, len(req.gpus), int(req.size_bytes), now, math.nan,
                           PROTOCOL_NAMES[plan.protocol])
    net._in_flight += 1
    _run_collective(net, plan.flows, float(req.size_bytes), on_done, rec, delay_s=plan.delay_s,
                    lat_mult=plan.lat_mult)
