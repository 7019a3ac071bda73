"""topo's per-GPU route tables and whole-topology passes (filled from link columns or in one pass)
against the plain per-object computations they replace, written here."""

from __future__ import annotations

import random

import numpy as np
import pytest

from topo.analysis import is_rail_optimized
from topo.model import DisjointSets, Link, Node, Topology, _nvlink_domains
from topo.routing import Router
from topo.templates import build

CASES = [("spectrum-x", {"gpus": 64}), ("dcn+", {"gpus": 32}), ("alibaba-hpn", {"gpus": 64}), ("nvl72", {}),
         ("pcie", {"gpus": 16}), ("fat-tree", {"gpus": 64}), ("multi-pod", {"gpus": 4608})]


def _parallel_links() -> Topology:
    """4 GPUs on one NVSwitch (GPU 0 with two parallel NVLink and two parallel network cables) and a
    network switch: the tables must keep the lowest link id of parallel links, as a scan does."""
    nodes = tuple([Node(i, "gpu", "gpu") for i in range(4)] + [Node(4, "nvswitch", "nvswitch"),
                                                               Node(5, "switch", "asw")])
    ends = [(0, 4, "nvlink"), (0, 4, "nvlink"), (1, 4, "nvlink"), (2, 4, "nvlink"), (3, 4, "nvlink"),
            (0, 5, "network"), (0, 5, "network"), (1, 5, "network"), (2, 5, "network"), (3, 5, "network")]
    links = []
    for a, b, kind in ends:
        links += [Link(len(links), a, b, 1e9, 1e-6, kind), Link(len(links) + 1, b, a, 1e9, 1e-6, kind)]
    return Topology(4, 4, "H100", 4, nodes, tuple(links), name="parallel")


def _first_link(t: Topology, a: int, b: int) -> int:
    return min(lk.id for lk in t.links if lk.src == a and lk.dst == b)


def _topologies():
    return [(name, build(name, **kw)) for name, kw in CASES] + [("parallel", _parallel_links())]


@pytest.mark.parametrize("name,t", _topologies(), ids=lambda x: x if isinstance(x, str) else "")
def test_router_port_tables_match_link_scans(name, t):
    r = Router(t)
    gpus = range(t.num_gpus) if t.num_gpus <= 64 else range(0, t.num_gpus, 97)
    for g in gpus:
        want = [(tuple(_first_link(t, x, y) for x, y in zip(p, p[1:])), p[-1]) for p in t.gpu_ports(g)]
        assert r._src_ports(g) == want
        back = [(tuple(_first_link(t, y, x) for x, y in reversed(list(zip(p, p[1:])))), p[-1])
                for p in t.gpu_ports(g)]
        assert r._dst_ports(g) == back
        # host side in: per host switch of g, its lowest link to g
        hin = {}
        for lk in t.links:
            if lk.src == g and r._is_hostsw[lk.dst]:
                hin.setdefault(lk.dst, _first_link(t, lk.dst, g))
        assert r._hin(g) == hin


@pytest.mark.parametrize("name,t", _topologies(), ids=lambda x: x if isinstance(x, str) else "")
def test_path_key_free_is_path_and_key_freedom(name, t):
    r = Router(t)
    rng = random.Random(7)
    pairs = [(a, b) for a in range(min(t.num_gpus, 16)) for b in range(min(t.num_gpus, 16))]
    pairs += [(rng.randrange(t.num_gpus), rng.randrange(t.num_gpus)) for _ in range(40)]
    for a, b in pairs:
        key = rng.randrange(1 << 20)
        free = r.host_route_is_key_free(a, b)
        assert r.path_key_free(a, b, key) == (r.path(a, b, 0 if free else key), free)


def test_nvlink_domains_match_union_find_on_random_graphs():
    rng = random.Random(3)
    for _ in range(200):
        n = rng.randint(1, 40)
        g = rng.randint(1, n)
        nodes = tuple(Node(i, "gpu" if i < g else "nvswitch", "gpu" if i < g else "nvswitch") for i in range(n))
        links = tuple(Link(i, rng.randrange(n), rng.randrange(n), 1.0, 0.0, rng.choice(["nvlink", "nvlink", "network"]))
                      for i in range(rng.randint(0, 60)))
        t = Topology(g, 1, "H100", 1, nodes, links)
        sets = DisjointSets(n)
        for lk in links:
            if lk.kind == "nvlink":
                sets.union(lk.src, lk.dst)
        number: dict[int, int] = {}
        assert _nvlink_domains(t) == [number.setdefault(sets.find(x), len(number)) for x in range(g)]


@pytest.mark.parametrize("name,t", _topologies(), ids=lambda x: x if isinstance(x, str) else "")
def test_is_rail_optimized_matches_per_gpu_definition(name, t):
    by_tor: dict[int, set[int]] = {}
    servers: dict[int, set[int]] = {}
    for g in range(t.num_gpus):
        for tor in t.tors_of(g):
            by_tor.setdefault(tor, set()).add(t.rail_of(g))
            servers.setdefault(tor, set()).add(t.server_of(g))
    multi = [tor for tor, s in servers.items() if len(s) > 1]
    assert is_rail_optimized(t) == (bool(multi) and all(len(by_tor[tor]) == 1 for tor in multi))


@pytest.mark.parametrize("name,kw,depth", [("multi-pod", {"gpus": 512, "nics_per_asw": 8, "segments_per_pod": 2,
                                                           "psw_count": 4}, 4),
                                            ("alibaba-hpn", {"gpus": 64}, 2), ("dcn+", {"gpus": 64}, 2)])
def test_bfs_of_many_switches_equals_one_by_one(name, kw, depth):
    from topo.routing import Router
    from topo.templates import build
    t = build(name, **kw)
    one, many = Router(t), Router(t)
    switches = one._sw_ids.tolist()
    many._bfs_many(switches[::-1], max_cells=5 * len(switches))     # several batches
    for sw in switches:
        d = one.dist_to(sw)
        assert d.dtype == many._dist[sw].dtype and np.array_equal(d, many._dist[sw])
    assert max(int(d.max()) for d in many._dist.values()) == depth    # multi-pod: through the core tier


def test_hop_distances_of_bfs_stopped_early_equal_full_bfs():
    # net_hop_parts searches towards each destination switch only as deep as its pairs need; the
    # distances (and any row kept from such a search) equal full searches, in any order of queries
    from topo.routing import Router
    from topo.templates import build
    t = build("multi-pod", gpus=1024, nics_per_asw=8, segments_per_pod=2, psw_count=4)
    fast, full = Router(t), Router(t)
    sw = fast._net_tab()[2]
    rng = random.Random(4)
    for n_pairs, span in ((3, 128), (40, 128), (200, 1024)):    # inside a pod first, then anywhere
        src = np.array([rng.randrange(span) for _ in range(n_pairs)], dtype=np.int64)
        dst = np.array([rng.randrange(span) for _ in range(n_pairs)], dtype=np.int64)
        ok, _first, _last, dist = fast.net_hop_parts(src, dst)
        want = [full.dist_to(int(sw[b]))[full._sw_index[sw[a]]] if k else -1 for a, b, k in zip(src, dst, ok)]
        assert dist[ok].tolist() == [w for w, k in zip(want, ok) if k]
    rows = fast._rows
    partial = [int(sw) for sw in np.flatnonzero(rows.slot >= 0) if not rows.done[rows.slot[sw]]]
    assert partial                          # some searches stopped early (pairs inside a pod)
    for sw in np.flatnonzero(rows.slot >= 0).tolist():
        row, known = rows.rows[rows.slot[sw]], rows.rows[rows.slot[sw]] >= 0
        assert np.array_equal(row[known], full.dist_to(sw)[known])
        assert rows.done[rows.slot[sw]] or not known.all()     # fully known implies done
    assert all(np.array_equal(d, full.dist_to(sw)) for sw, d in fast._dist.items())
