"""Placement: training ranks -> topology GPUs, and every parallel group as a concrete GPU tuple.

Ranks are numbered by the plan's rank order (Megatron default "tp-cp-ep-dp-pp", first token varies
fastest). As in Megatron, dense groups (tp, cp, dp, dp_cp, pp, mp, embedding) come from the order with
ep removed, and expert groups (ep, etp, edp) from the same order with tp -> expert-tp, cp folded into
the expert data-parallel size, dp -> expert-dp. Rank r runs on GPU r (contiguous) unless a mapping is
given (a list of GPU ids, index = rank; file: JSON list or one id per line).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from sim.errors import SimError

# Dimensions each group kind varies (the others are fixed within one group).
_DENSE_KINDS = {"tp": ("tp",), "cp": ("cp",), "dp": ("dp",), "dp_cp": ("cp", "dp"), "pp": ("pp",),
                "mp": ("tp", "pp")}
_EXPERT_KINDS = {"ep": ("ep",), "etp": ("tp",), "edp": ("dp",)}
_ORDER_TOKENS = ("tp", "cp", "ep", "dp", "pp")


def parse_rank_order(order: str) -> tuple[str, ...]:
    tokens = tuple(t.strip().lower() for t in order.split("-") if t.strip())
    if sorted(tokens) != sorted(_ORDER_TOKENS):
        raise SimError(f"rank_order '{order}': must be a permutation of tp-cp-ep-dp-pp")
    return tokens


def _rank_grid(order: tuple[str, ...], sizes: dict[str, int]) -> tuple[np.ndarray, list[str]]:
    """Array of ranks indexed [slowest dim, ..., fastest dim] and the axis names in that order."""
    axes = list(reversed(order))
    total = int(np.prod([sizes[a] for a in axes]))
    grid = np.arange(total, dtype=np.int64).reshape([sizes[a] for a in axes])
    return grid, axes


def _groups_from_grid(grid: np.ndarray, axes: list[str], dims: tuple[str, ...]) -> np.ndarray:
    """Rows = groups (ranks in group-rank order, first order token fastest)."""
    varying = [i for i, a in enumerate(axes) if a in dims]        # slowest .. fastest
    fixed = [i for i, a in enumerate(axes) if a not in dims]
    size = int(np.prod([grid.shape[i] for i in varying])) if varying else 1
    return grid.transpose(fixed + varying).reshape(-1, size)


@dataclass
class Placement:
    """Ranks of one job on a topology. `gpus[rank]` is the topology GPU id of that rank."""
    world_size: int
    pp: int
    gpus: np.ndarray
    _rank_groups: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _stage_of_rank: np.ndarray | None = field(default=None, repr=False)

    def gpu_of(self, rank: int) -> int:
        return int(self.gpus[rank])

    def stage_of(self, rank: int) -> int:
        return int(self._stage_of_rank[rank])

    def stage_of_ranks(self) -> list[int]:
        """[stage_of(r) for r in range(world_size)]."""
        return self._stage_of_rank[:self.world_size].tolist()

    def rank_groups(self, kind: str) -> np.ndarray:
        """Groups of `kind` as a 2-D array of ranks (row = group)."""
        try:
            return self._rank_groups[kind]
        except KeyError:
            raise SimError(f"unknown group kind '{kind}'") from None

    def groups(self, kind: str) -> list[tuple[int, ...]]:
        """Every group of `kind` as a tuple of topology GPU ids, in group-rank order."""
        return [tuple(int(g) for g in row) for row in self.gpus[self.rank_groups(kind)]]

    def stage_ranks(self, stage: int) -> np.ndarray:
        return np.flatnonzero(self._stage_of_rank == stage)

    def groups_in_stage(self, kind: str, stage: int) -> np.ndarray:
        """Rank groups of `kind` whose first member lies in `stage` (2-D array of ranks)."""
        rows = self.rank_groups(kind)
        return rows[self._stage_of_rank[rows[:, 0]] == stage]

    def group_of(self, kind: str, rank: int) -> np.ndarray:
        rows = self.rank_groups(kind)
        hit = np.flatnonzero((rows == rank).any(axis=1))
        return rows[hit[0]]


def load_mapping(path: str | Path) -> list[int]:
    """Read a rank->GPU mapping file: a JSON list, or one GPU id per line (index = rank)."""
    p = Path(path)
    text = p.read_text()
    try:
        if text.lstrip().startswith("["):
            ids = json.loads(text)
            return [int(x) for x in ids]
        ids = []
        for lineno, line in enumerate(text.splitlines(), 1):
            line = line.split("#", 1)[0].strip()
            if line:
                try:
                    ids.append(int(line.split()[-1]))
                except ValueError:
                    raise SimError(f"{p}:{lineno}: expected a GPU id, got '{line}'") from None
        return ids
    except (json.JSONDecodeError, TypeError, ValueError) as exc:
        if isinstance(exc, SimError):
            raise
        raise SimError(f"{p}: not a list of GPU ids ({exc})") from None


def place(plan, topology, mapping=None) -> Placement:
    """Map the plan's ranks onto topology GPUs and build every group kind of workload_gen.GROUP_KINDS.

    mapping: None (rank r -> GPU r), a sequence of GPU ids (index = rank), or a path to a mapping file.
    """
    world = int(plan.world_size)
    num_gpus = int(topology.num_gpus)
    if world > num_gpus:
        raise SimError(f"workload needs {world} GPUs but the topology has only {num_gpus}")
    tp, cp, pp, ep = int(plan.tp), int(plan.cp), int(plan.pp), int(plan.ep)
    if tp * cp * pp <= 0 or world % (tp * cp * pp):
        raise SimError(f"world_size {world} is not divisible by tp*cp*pp = {tp * cp * pp}")
    dp = world // (tp * cp * pp)
    etp = int(plan.expert_tp)
    if (tp * cp * dp) % (ep * etp):
        raise SimError(f"tp*cp*dp = {tp * cp * dp} is not divisible by ep*etp = {ep * etp}")
    edp = (tp * cp * dp) // (ep * etp)
    order = parse_rank_order(plan.rank_order)

    if mapping is None:
        gpus = np.arange(world, dtype=np.int64)
    else:
        ids = load_mapping(mapping) if isinstance(mapping, (str, Path)) else [int(x) for x in mapping]
        if len(ids) < world:
            raise SimError(f"mapping lists {len(ids)} GPUs but the workload has {world} ranks")
        gpus = np.asarray(ids[:world], dtype=np.int64)
        if len(set(gpus.tolist())) != world:
            raise SimError("mapping assigns the same GPU to two ranks")
        bad = gpus[(gpus < 0) | (gpus >= num_gpus)]
        if bad.size:
            raise SimError(f"mapping names GPU {int(bad[0])}, topology GPUs are 0..{num_gpus - 1}")

    dense_sizes = {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp}
    grid, axes = _rank_grid(order, dense_sizes)
    groups: dict[str, np.ndarray] = {k: _groups_from_grid(grid, axes, d) for k, d in _DENSE_KINDS.items()}
    expert_sizes = {"tp": etp, "cp": 1, "ep": ep, "dp": edp, "pp": pp}
    egrid, eaxes = _rank_grid(order, expert_sizes)
    for k, d in _EXPERT_KINDS.items():
        groups[k] = _groups_from_grid(egrid, eaxes, d)
    ppg = groups["pp"]
    groups["embedding"] = ppg[:, [0, -1]] if pp > 1 else ppg[:, :1]

    stage_of = np.empty(world, dtype=np.int64)
    for s in range(pp):
        stage_of[ppg[:, s]] = s
    return Placement(world_size=world, pp=pp, gpus=gpus, _rank_groups=groups, _stage_of_rank=stage_of)
