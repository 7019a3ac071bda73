"""Scheduler placement policies for `clustersim cluster` jobs: first-fit and rail-aligned.

Both see the GPUs already taken by earlier jobs (jobs are placed in the order given) and never use a
GPU that failed (topo.faults: gpu:N, server:N); a GPU that only lost its network link is not avoided
(sim.fabric_faults.check_placeable reports it). Servers are the topology's (GPU g on server
g // gpus_per_server); "first" means the lowest server id.

first-fit: a job that fits one server (world <= GPUs per server) takes the lowest free GPU ids of
the first server with at least `world` free GPUs; a larger job takes the first ceil(world / GPUs per
server) servers that are wholly free (the last one's lowest GPUs when world is not a multiple).

rail-aligned: a larger job takes whole free servers under as few leaves as possible. A leaf is the set
of network switches a server's GPUs reach first (topology.tors_of: one ToR, or the rail ToRs of one
rail-optimized segment). If one leaf has enough free servers, the one with the fewest that still holds
the job (ties: lowest server id); else leaves by decreasing free servers, the last one the smallest that
covers the rest. Ranks are laid out so that DP and PP neighbours (group members k and k+1) are on the
same server or on the same local GPU index (rail) of different servers (rail_layout). A job that fits
one server is placed as first-fit (no rails involved).
"""

from __future__ import annotations

import math

import numpy as np

from sim.errors import SimError

SCHEDULER_POLICIES = ("first-fit", "rail-aligned")


def rail_layout(plan, gpus_per_server: int) -> tuple[np.ndarray, np.ndarray]:
    """(server index 0..S-1, local GPU index) of every rank for a job on S = world / gpus_per_server
    whole servers.

    m = tp * cp ranks of one TP x CP group sit on consecutive local GPUs of one server (m a divisor of
    the GPUs per server) or span m / gpus_per_server whole servers at the same local indices (m a
    multiple). With b = gpus_per_server / m groups per server, b = bd * bp: bd DP replicas and bp
    pipeline stages share a server, each group in its own block of m local GPUs. Of dp and pp, the one
    varying faster in the plan's rank order fills a server first (Megatron's default tp-cp-ep-dp-pp:
    bd = gcd(b, dp), as contiguous ranks would). A group's block follows its replica / stage index
    back and forth (boustrophedon) across servers, so the DP or PP neighbour across a server boundary
    keeps its block, i.e. its rails; plain contiguous ranks change rails there.
    """
    from sim.placement import _rank_grid, parse_rank_order
    tp, cp, pp = int(plan.tp), int(plan.cp), int(plan.pp)
    world, gps = int(plan.world_size), int(gpus_per_server)
    m = tp * cp
    if m <= 0 or pp <= 0 or world % (m * pp):
        raise SimError(f"rail-aligned: world {world} is not divisible by tp*cp*pp = {m * pp}")
    if world % gps:
        raise SimError(f"rail-aligned: world {world} is not a multiple of the {gps} GPUs per server")
    dp = world // (m * pp)
    order = parse_rank_order(plan.rank_order)
    grid, axes = _rank_grid(order, {"tp": tp, "cp": cp, "ep": 1, "dp": dp, "pp": pp})
    co = dict(zip(axes, np.unravel_index(np.arange(world), grid.shape)))
    inner, d, p = co["tp"] + tp * co["cp"], co["dp"], co["pp"]
    if m >= gps:
        if m % gps:
            raise SimError(f"rail-aligned: tp*cp = {m} must divide or be a multiple of the {gps} GPUs per server")
        span = m // gps
        return inner // gps + span * (d + dp * p), inner % gps
    if gps % m:
        raise SimError(f"rail-aligned: tp*cp = {m} must divide or be a multiple of the {gps} GPUs per server")
    b = gps // m
    if order.index("dp") < order.index("pp"):     # the faster-varying of dp, pp fills servers first
        bd = math.gcd(b, dp)
        bp = b // bd                      # divides pp: b divides dp * pp and b / bd is coprime to dp / bd
    else:
        bp = math.gcd(b, pp)
        bd = b // bp
    p_lo, p_hi = p % bp, p // bp
    d_lo, d_hi = d % bd, d // bd
    snake_p = np.where(p_hi % 2 == 0, p_lo, bp - 1 - p_lo)
    snake_d = np.where(d_hi % 2 == 0, d_lo, bd - 1 - d_lo)
    block = snake_d + bd * snake_p
    server = d_hi + (dp // bd) * p_hi
    return server, block * m + inner


def _leaf_servers(topology, free: list[int]) -> list[list[int]]:
    """Free servers grouped by leaf (the set of first switches of their GPUs), groups by lowest id."""
    groups: dict[frozenset, list[int]] = {}
    for s in free:
        key = frozenset(x for g in topology.gpus_of_server(s) for x in topology.tors_of(g))
        groups.setdefault(key, []).append(s)
    return sorted(groups.values(), key=lambda g: g[0])


def pick_servers(topology, free: list[int], need: int) -> list[int] | None:
    """`need` free servers under as few leaves as possible (module docstring); None if too few."""
    if need > len(free):
        return None
    leaves = _leaf_servers(topology, free)
    fits = [g for g in leaves if len(g) >= need]
    if fits:
        return min(fits, key=lambda g: (len(g), g[0]))[:need]
    by_size = sorted(leaves, key=lambda g: (-len(g), g[0]))
    out: list[int] = []
    while need - len(out) > len(by_size[0]):
        out += by_size.pop(0)
    rest = need - len(out)
    last = min((g for g in by_size if len(g) >= rest), key=lambda g: (len(g), g[0]))
    return out + last[:rest]


def schedule(policy: str, world: int, plan, topology, used: np.ndarray, who: str) -> list[int]:
    """GPU ids (index = rank) of one job under a scheduler policy; `used` marks taken/failed GPUs."""
    gps = int(topology.gpus_per_server)
    n_servers = -(-int(topology.num_gpus) // gps)
    free_of = {s: [g for g in topology.gpus_of_server(s) if not used[g]] for s in range(n_servers)}
    if world <= gps:
        for s in range(n_servers):
            if len(free_of[s]) >= world:
                return free_of[s][:world]
        raise SimError(f"{who}: no server has {world} free GPU(s)")
    whole = [s for s in range(n_servers) if len(free_of[s]) == gps]
    need = -(-world // gps)
    if policy == "first-fit":
        if need > len(whole):
            raise SimError(f"{who}: needs {need} wholly free servers, {len(whole)} free")
        return [g for s in whole[:need] for g in free_of[s]][:world]
    picks = pick_servers(topology, whole, need)
    if picks is None:
        raise SimError(f"{who}: needs {need} wholly free servers, {len(whole)} free")
    server, local = rail_layout(plan, gps)
    base = np.asarray(picks, dtype=np.int64)[server] * gps
    return (base + local).astype(int).tolist()
