"""Validation and summary of a topology.

Bisection bandwidth is the tier-cut value of a hierarchical (Clos / fat-tree) fabric:
min(host injection, total uplink bandwidth of each switch tier) / 2 — the capacity a worst-case
half/half split of the GPUs can push across, when the split follows the hierarchy. A tier whose
switches (with those below) already connect every endpoint — e.g. the PSWs of a single pod under a
core tier — cuts nothing, so its uplinks are left out. For irregular hand-written fabrics it is an
upper estimate. Full bisection = injection / 2. NVLink / PCIe are not counted (scale-out network
only).
"""

from __future__ import annotations

from collections import Counter, deque

from topo.errors import TopoError
from topo.model import DisjointSets, Topology, direct_gpu_links, is_network_switch, tier_rank


def validate(t: Topology, radix: int | dict[str, int] | None = None) -> list[str]:
    """Problems found (empty list = valid): numbering, cable pairs, duplicates, connectivity,
    GPU links, switch port counts against `radix` (one value, or per tier name)."""
    problems: list[str] = []
    n = len(t.nodes)
    for i, node in enumerate(t.nodes):
        if node.id != i:
            problems.append(f"node {i}: id {node.id} != position")
            break
    if [x.kind for x in t.nodes[:t.num_gpus]].count("gpu") != t.num_gpus:
        problems.append(f"nodes 0..{t.num_gpus - 1} must all be GPUs")
    seen: set[tuple[int, int]] = set()
    degree = [0] * n
    adj: list[list[int]] = [[] for _ in range(n)]
    for i, lk in enumerate(t.links):
        if lk.id != i:
            problems.append(f"link {i}: id {lk.id} != position")
            break
        if not (0 <= lk.src < n and 0 <= lk.dst < n) or lk.src == lk.dst:
            problems.append(f"link {i}: bad endpoints {lk.src} -> {lk.dst}")
            continue
        if not lk.bandwidth_Bps > 0 or lk.latency_s < 0:
            problems.append(f"link {i}: bandwidth must be > 0 and latency >= 0")
        if (lk.src, lk.dst) in seen:
            problems.append(f"link {i}: duplicate link {lk.src} -> {lk.dst}")
        seen.add((lk.src, lk.dst))
        degree[lk.src] += 1
        adj[lk.src].append(lk.dst)
    for (a, b) in seen:
        if (b, a) not in seen:
            problems.append(f"link {a} -> {b} has no reverse direction")
            break
    # connectivity (undirected)
    if n:
        und = [set(x) for x in adj]
        for a, b in seen:
            und[b].add(a)
        mark = [False] * n
        mark[0] = True
        dq = deque([0])
        while dq:
            u = dq.popleft()
            for v in und[u]:
                if not mark[v]:
                    mark[v] = True
                    dq.append(v)
        lost = mark.count(False)
        if lost:
            problems.append(f"not connected: {lost} node(s) unreachable from GPU 0, e.g. node {mark.index(False)}")
    has_net = any(is_network_switch(x) for x in t.nodes)
    for g in range(t.num_gpus):
        if degree[g] == 0:
            problems.append(f"GPU {g} has no links")
            break
        if has_net and not t.gpu_ports(g):
            problems.append(f"GPU {g} has no path to a network switch")
            break
    if radix is not None:
        for node in t.nodes:
            if node.kind != "switch":
                continue
            limit = radix.get(node.tier) if isinstance(radix, dict) else radix
            if limit is not None and degree[node.id] > limit:
                problems.append(f"switch {node.id} ({node.tier}) uses {degree[node.id]} ports > radix {limit}")
                break
    return problems


def check(t: Topology, radix: int | dict[str, int] | None = None) -> None:
    """Raise TopoError with the first problem validate() finds."""
    problems = validate(t, radix)
    if problems:
        raise TopoError(f"topology {t.name or ''}: {problems[0]}".replace("topology : ", "topology: "))


def _tier_order(tier: str) -> tuple[int, str]:
    low = ("gpu", "nvswitch", "pcie", "nic")
    return (low.index(tier), "") if tier in low else (len(low) + tier_rank(tier), tier)


def _level(t: Topology) -> list[int]:
    return [tier_rank(x.tier) + 1 if is_network_switch(x) else 0 for x in t.nodes]


def summarize(t: Topology, router=None) -> dict:
    """Counts per tier, per-tier oversubscription, bisection bandwidth, max hops, rails."""
    from topo.routing import Router

    level = _level(t)
    tiers = Counter(x.tier for x in t.nodes)
    cables = Counter(lk.kind for lk in t.links[::2])
    down: Counter[int] = Counter()
    up: Counter[int] = Counter()
    ports: dict[str, int] = {}
    deg = Counter(lk.src for lk in t.links)
    for lk in t.links:
        a, b = level[lk.src], level[lk.dst]
        if a and b > a:
            up[a] += lk.bandwidth_Bps
        elif a and b < a:
            down[a] += lk.bandwidth_Bps
    injection = sum(lk.bandwidth_Bps for lk in t.links if level[lk.src] == 0 and level[lk.dst] == 1)
    for x in t.nodes:
        if x.kind == "switch":
            ports[x.tier] = max(ports.get(x.tier, 0), deg[x.id])
    net_tiers = t.network_tiers()
    over = {}
    for tier in net_tiers:
        lv = tier_rank(tier) + 1
        if up[lv]:
            over[tier] = down[lv] / up[lv]
    joined = _tiers_joining_all_endpoints(t, level)
    cut = [injection] + [up[tier_rank(tr) + 1] for tr in net_tiers
                         if up[tier_rank(tr) + 1] and tier_rank(tr) + 1 not in joined]
    bisection = min(cut) / 2 if injection else 0.0
    r = router or Router(t)
    max_hops = _max_hops(t, r)
    rails = sorted({t.rail_of(g) for g in range(t.num_gpus)}) if injection else []
    return {
        "name": t.name, "gpus": t.num_gpus, "gpu_type": t.gpu_type, "gpus_per_server": t.gpus_per_server,
        "servers": t.num_servers, "nvlink_domain_size": t.nvlink_domain_size,
        "nodes_per_tier": dict(sorted(tiers.items(), key=lambda kv: _tier_order(kv[0]))),
        "cables_per_kind": dict(cables), "max_ports_per_tier": ports,
        "oversubscription": over,
        "injection_Bps": injection, "injection_per_gpu_Bps": injection / t.num_gpus if t.num_gpus else 0.0,
        "full_bisection_Bps": injection / 2, "bisection_Bps": bisection,
        "max_hops": max_hops, "rails": len(rails), "rail_optimized": is_rail_optimized(t) if injection else False,
    }


def _tiers_joining_all_endpoints(t: Topology, level: list[int]) -> set[int]:
    """Network levels L at which the network links among levels <= L already connect every endpoint
    (GPU or NIC attached to a ToR): traffic between any two endpoints can turn around at or below
    L, so the uplinks of L and above cut nothing (e.g. one pod under an oversubscribed core)."""
    sets = DisjointSets(len(t.nodes))
    by_level: dict[int, list[tuple[int, int]]] = {}
    endpoints: set[int] = set()
    for lk in t.links[::2]:
        if lk.kind != "network":
            continue
        a, b = level[lk.src], level[lk.dst]
        if min(a, b) == 0:
            endpoints.add(lk.src if a == 0 else lk.dst)
        by_level.setdefault(max(a, b), []).append((lk.src, lk.dst))
    joined: set[int] = set()
    for lv in sorted(by_level):
        for a, b in by_level[lv]:
            sets.union(a, b)
        if lv > 0 and endpoints and len({sets.find(e) for e in endpoints}) == 1:
            joined.add(lv)
    return joined


def _max_hops(t: Topology, r) -> int:
    """Longest shortest GPU-to-GPU route (links), over network and inside NVLink/PCIe domains."""
    best = 0
    # inside a domain: probe the first domain's pairs (domains of one build are alike)
    first = [g for g in range(t.num_gpus) if r.same_nvlink_domain(0, g)][:16]
    for g in first[1:]:
        best = max(best, len(r.path(0, g)))
    if not any(is_network_switch(x) for x in t.nodes):
        return best
    pre = {}
    for g in range(t.num_gpus):
        for p in t.gpu_ports(g):
            pre[p[-1]] = max(pre.get(p[-1], 0), len(p) - 1)
    tors = sorted(pre)
    idx = r._idx
    far = 0
    for d in tors:
        dist = r.dist_to(d)
        for s in tors:
            v = int(dist[idx[s]])
            if v >= 0:
                far = max(far, pre[s] + v + pre[d])
    return max(best, far)


def is_rail_optimized(t: Topology) -> bool:
    """Every switch that serves GPUs of several servers serves one rail (NIC index) only: NCCL's rings and
    trees between servers can stay on a rail, with no spine crossing for same-rail traffic. Cached on the
    (immutable) topology."""
    cache = getattr(t, "_cache", None)
    if cache is not None and "rail_optimized" in cache:
        return cache["rail_optimized"]
    if isinstance(t, Topology) and direct_gpu_links(t)[2]:
        got = _rail_optimized_direct(t)
        if cache is not None:
            cache["rail_optimized"] = got
        return got
    by_tor: dict[int, set[int]] = {}
    servers_per_tor: dict[int, set[int]] = {}
    fast = isinstance(t, Topology)     # its tables read directly (rail_of, server_of, tors_of per GPU cost ~10 us)
    rails = t.rails() if fast else None
    gps = t.gpus_per_server if fast else 1
    for g in range(t.num_gpus):
        if fast:
            rail, server, tors = rails[g], g // gps, {port[-1] for port in t.gpu_ports(g)}
        else:
            rail, server, tors = t.rail_of(g), t.server_of(g), t.tors_of(g)
        for tor in tors:
            by_tor.setdefault(tor, set()).add(rail)
            servers_per_tor.setdefault(tor, set()).add(server)
    multi = [tor for tor, s in servers_per_tor.items() if len(s) > 1]
    got = bool(multi) and all(len(by_tor[tor]) == 1 for tor in multi)
    if cache is not None:
        cache["rail_optimized"] = got
    return got


def _rail_optimized_direct(t: Topology) -> bool:
    """is_rail_optimized when every GPU links straight to its ToRs (rail = local index): the same sets
    counted over the (GPU, ToR) link arrays."""
    import numpy as np
    g, tor, _ = direct_gpu_links(t)
    gps = t.gpus_per_server
    n_tor = int(tor.max()) + 1

    def distinct_per_tor(x: np.ndarray) -> np.ndarray:
        k = int(x.max()) + 1
        pairs = np.sort(tor * k + x)     # distinct (ToR, x) pairs: the first of each run (np.unique
        first = np.ones(len(pairs), dtype=bool)          # would import numpy.ma)
        first[1:] = pairs[1:] != pairs[:-1]
        return np.bincount(pairs[first] // k, minlength=n_tor)

    servers, rails = distinct_per_tor(g // gps), distinct_per_tor(g % gps)
    multi = servers > 1
    return bool(multi.any()) and bool((rails[multi] == 1).all())


def _ratio(v: float) -> str:
    """down:up as people write it: 2:1 oversubscribed, 1:15 when the uplinks exceed the downlinks."""
    if v >= 1 or v <= 0:
        return f"{v:g}:1"
    return f"1:{1 / v:.3g}"


def format_summary(s: dict) -> str:
    def gbps(x: float) -> str:
        return f"{x * 8 / 1e9:,.0f} Gbps ({x / 1e9:,.1f} GB/s)"

    lines = [f"topology     {s['name']}",
             f"GPUs         {s['gpus']} x {s['gpu_type']}, {s['servers']} servers of {s['gpus_per_server']}, "
             f"NVLink domain {s['nvlink_domain_size']}",
             "nodes        " + ", ".join(f"{k} {v}" for k, v in s["nodes_per_tier"].items()),
             "cables       " + ", ".join(f"{k} {v}" for k, v in s["cables_per_kind"].items()),
             "ports (max)  " + (", ".join(f"{k} {v}" for k, v in s["max_ports_per_tier"].items()) or "-"),
             "oversub      " + (", ".join(f"{k} {_ratio(v)}" for k, v in s["oversubscription"].items()) or "-")
             + "   (down / up bandwidth per tier)",
             f"injection    {gbps(s['injection_Bps'])} = {gbps(s['injection_per_gpu_Bps'])} per GPU"
             "   (GPU/NIC -> ToR, one direction)",
             f"bisection    {gbps(s['bisection_Bps'])} of full {gbps(s['full_bisection_Bps'])}"
             f" = {s['bisection_Bps'] / s['full_bisection_Bps']:.2f}   (tier-cut)" if s["full_bisection_Bps"]
             else "bisection    - (no scale-out network)",
             f"max hops     {s['max_hops']}   (links on the longest shortest GPU-GPU route)",
             f"rails        {s['rails']}" + (" (rail-optimized)" if s["rail_optimized"] else "")]
    return "\n".join(lines)
