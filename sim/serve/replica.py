"""Replicas of a serving deployment placed on a topology, their groups, and which of them share links.

Each replica holds one model copy on tp x pp GPUs. Default placement is contiguous: replica r, pipeline
stage s, TP rank i -> topology GPU r·tp·pp + s·tp + i (a replica's stages sit next to each other, so TP
groups stay inside a server whenever tp divides the GPUs per server). A mapping (list of GPU ids, or a
file as sim.placement.load_mapping reads it) overrides it with the same index order.

Groups are tuples of topology GPU ids in group-rank order: the TP group of a stage (also its EP group
when ep == tp), and the PP pairs (stage s rank i -> stage s+1 rank i) over which activations travel.

Link sharing (`link_sharing`): a "unit" is one (replica, stage); its communication classes are "tp"
(TP/EP collectives of the stage) and "pp" (its activation sends). The directed channels each class
uses are the flows netsim resolves for those collectives (netsim.backend.Planner) at a small and a
large message size (the algorithm may change with size). Two (unit, class) pairs share when a channel
carries traffic of both; replicas share when any of their units do.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sim.errors import SimError
from sim.serve.plan import ServingPlan

Unit = tuple[int, int]     # (replica, stage)
PROBE_SIZES_BYTES = (64 * 1024, 64 * 1024 * 1024)


@dataclass(frozen=True)
class ReplicaPlacement:
    """GPUs of one replica: stages[s][i] is the topology GPU of stage s, TP rank i."""

    replica: int
    stages: tuple[tuple[int, ...], ...]

    @property
    def gpus(self) -> tuple[int, ...]:
        return tuple(g for st in self.stages for g in st)

    def tp_group(self, stage: int) -> tuple[int, ...]:
        return self.stages[stage]

    def pp_pairs(self, stage: int) -> tuple[tuple[int, int], ...]:
        """(src, dst) per TP rank from `stage` to `stage + 1` (empty on the last stage)."""
        if stage + 1 >= len(self.stages):
            return ()
        return tuple(zip(self.stages[stage], self.stages[stage + 1]))


@dataclass(frozen=True)
class ServingPlacement:
    """All replicas of a deployment on one topology."""

    plan: ServingPlan
    num_gpus: int                       # GPUs of the topology
    replicas: tuple[ReplicaPlacement, ...]

    def ep_group(self, replica: int, stage: int) -> tuple[int, ...]:
        """EP group of a stage: its TP ranks when ep > 1 (ep == tp), else no group."""
        return self.replicas[replica].tp_group(stage) if self.plan.ep > 1 else ()

    def units(self) -> list[Unit]:
        return [(r, s) for r in range(len(self.replicas)) for s in range(self.plan.pp)]


def place_replicas(plan: ServingPlan, topology, mapping: Sequence[int] | str | Path | None = None) -> ServingPlacement:
    """Place `plan.replicas` replicas of tp x pp GPUs on `topology` (contiguous unless `mapping`)."""
    tp, pp, n = int(plan.tp), int(plan.pp), int(plan.replicas)
    if min(tp, pp, n) < 1:
        raise SimError(f"serving plan: tp, pp and replicas must be >= 1 (got tp={tp}, pp={pp}, replicas={n})")
    need = tp * pp * n
    have = int(topology.num_gpus)
    if need > have:
        raise SimError(f"serving plan needs {need} GPUs ({n} replicas x tp {tp} x pp {pp}) but the topology "
                       f"has only {have}")
    if mapping is None:
        ids = list(range(need))
    else:
        if isinstance(mapping, (str, Path)):
            from sim.placement import load_mapping
            ids = load_mapping(mapping)
        else:
            ids = [int(x) for x in mapping]
        if len(ids) < need:
            raise SimError(f"mapping lists {len(ids)} GPUs but the deployment needs {need}")
        ids = ids[:need]
        if len(set(ids)) != need:
            raise SimError("mapping assigns the same GPU to two replica ranks")
        bad = [g for g in ids if not 0 <= g < have]
        if bad:
            raise SimError(f"mapping names GPU {bad[0]}, topology GPUs are 0..{have - 1}")
    reps = []
    for r in range(n):
        base = r * tp * pp
        reps.append(ReplicaPlacement(r, tuple(tuple(ids[base + s * tp + i] for i in range(tp))
                                              for s in range(pp))))
    return ServingPlacement(plan=plan, num_gpus=have, replicas=tuple(reps))


# ---------------------------------------------------------------- link sharing

Use = tuple[Unit, str]     # (unit, communication class "tp" | "pp")


@dataclass(frozen=True)
class LinkSharing:
    """Directed channels per (unit, class) and, per (unit, class), the distinct sets of (unit, class) of
    OTHER units that use one of its channels (the users of each channel it shares; empty: none)."""

    channels: dict[Use, frozenset[int]]
    conflicts: dict[Use, tuple[frozenset[Use], ...]]

    def shares(self, unit: Unit) -> bool:
        return any(self.conflicts.get((unit, c)) for c in ("tp", "pp"))

    def replica_pairs(self) -> set[tuple[int, int]]:
        """Pairs (a < b) of replicas whose communication crosses a common channel."""
        out: set[tuple[int, int]] = set()
        for (unit, _), sets in self.conflicts.items():
            for users in sets:
                for other, _cls in users:
                    if other[0] != unit[0]:
                        out.add((min(unit[0], other[0]), max(unit[0], other[0])))
        return out


def flow_channels(planner, op: str, gpus: tuple[int, ...]) -> set[int]:
    """Directed channels netsim's flows of `op` on `gpus` cross (at PROBE_SIZES_BYTES)."""
    from netsim.api import CollectiveRequest

    out: set[int] = set()
    if len(gpus) < 2:
        return out
    for size in PROBE_SIZES_BYTES:
        req_gpus, shape, _facts, alg = planner.prepare(CollectiveRequest(op, gpus, size))
        for flow in planner.flows(op, alg, req_gpus, shape):
            out.update(int(c) for c in flow.channels)
    return out


def unit_channels(placement: ServingPlacement, planner) -> dict[tuple[Unit, str], frozenset[int]]:
    """Channels of every unit's TP/EP collectives ("tp") and PP sends ("pp"), from netsim's flows."""
    ops = ["all_reduce", "all_gather"] + (["all_to_all"] if placement.plan.ep > 1 else [])
    out: dict[tuple[Unit, str], frozenset[int]] = {}
    cache: dict[tuple, set[int]] = {}
    for r, s in placement.units():
        rep = placement.replicas[r]
        tp_ch: set[int] = set()
        for op in ops:
            key = (op, rep.tp_group(s))
            if key not in cache:
                cache[key] = flow_channels(planner, op, rep.tp_group(s))
            tp_ch |= cache[key]
        pp_ch: set[int] = set()
        for pair in rep.pp_pairs(s):
            key = ("send", pair)
            if key not in cache:
                cache[key] = flow_channels(planner, "send", pair)
            pp_ch |= cache[key]
        out[((r, s), "tp")] = frozenset(tp_ch)
        out[((r, s), "pp")] = frozenset(pp_ch)
    return out


def link_sharing(placement: ServingPlacement, planner) -> LinkSharing:
    """Which units communicate over common channels (see the module docstring). A unit's own two
    classes never count against each other: its sends follow its collectives."""
    channels = unit_channels(placement, planner)
    users: dict[int, set[Use]] = defaultdict(set)
    for use, chans in channels.items():
        for ch in chans:
            users[ch].add(use)
    conflicts: dict[Use, tuple[frozenset[Use], ...]] = {}
    for (unit, cls), chans in channels.items():
        sets = {frozenset(x for x in users[ch] if x[0] != unit) for ch in chans}
        sets.discard(frozenset())
        # a set contained in another never decides the maximum: keep the maximal ones
        maximal = [a for a in sets if not any(a < b for b in sets)]
        conflicts[(unit, cls)] = tuple(sorted(maximal, key=lambda x: sorted(x)))
    return LinkSharing(channels=channels, conflicts=conflicts)
