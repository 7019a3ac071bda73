"""Routes between GPUs: equal-cost shortest paths with deterministic ECMP (SimAI semantics).

- GPUs never forward (hosts are endpoints); NICs forward only between their host side and the
  network; switches forward.
- Inside one NVLink domain / PCIe server (GPUs joined by NVSwitch or PCIe switches) the route stays
  there: NVLink (or PCIe P2P) is preferred, as SimAI and NCCL do.
- Between domains: a GPU leaves through its nearest NIC(s)/ToR(s); among all shortest
  switch-level paths one is chosen per hop by a hash of (src, dst, flow_key, hop), so a given flow
  always takes the same path and different flow keys spread over the equal-cost paths.
- Optional PXN (NCCL's PCIe x NVLink): when the destination sits on another rail, first move over
  NVLink to the source-domain GPU on the destination's rail, then cross the network on that rail.
- Optional rail-aligned routing (`rail_aligned=True`, NCCL-like for collectives): traffic between two
  GPUs of the same rail (NIC index) picks its equal-cost next hops by the destination NIC endpoint
  (D-mod-k: the i-th multi-way choice takes index (e // product of the earlier fan-outs) mod fan-out,
  e = server x rails + rail) instead of a hash, so a rail's traffic stays in its plane (a k-ary fat
  tree's edge switch sends rail r up to aggregation switch r) and the flows of a ring or tree, whose
  destinations differ, never share an up-link. Traffic between rails keeps the per-flow hash (ECMP).

Memory/speed: nothing is computed for all pairs. Distances towards a destination switch are one
vectorised BFS over the switch graph (cached per destination ToR); next-hop candidate sets are
cached per (switch, destination ToR).
"""

from __future__ import annotations

from array import array

import numpy as np

from topo.errors import TopoError
from topo.model import (
    Topology,
    direct_gpu_links,
    is_network_switch,
    link_arrays_of,
    link_kind_mask,
    link_order,
    network_switch_mask,
    stable_order,
)

_M64 = (1 << 64) - 1


def _mix(a: int, b: int, c: int, d: int) -> int:
    """Deterministic 64-bit hash (splitmix64 finaliser over a combined word)."""
    h = (a * 0x9E3779B97F4A7C15 + b * 0xC2B2AE3D27D4EB4F + c * 0x165667B19E3779F9 + d * 0x27D4EB2F165667C5) & _M64
    h ^= h >> 30
    h = (h * 0xBF58476D1CE4E5B9) & _M64
    h ^= h >> 27
    h = (h * 0x94D049BB133111EB) & _M64
    return h ^ (h >> 31)


_C_A, _C_B, _C_C = (np.uint64(c) for c in (0x9E3779B97F4A7C15, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9))
_C_X, _C_MIX1, _C_MIX2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def _mix_arr(a: np.ndarray, b: np.ndarray, c: np.ndarray, d: int) -> np.ndarray:
    """_mix over arrays of non-negative ints (uint64: numpy's wrap-around is the mask to 64 bits)."""
    h = (a.astype(np.uint64) * _C_A + b.astype(np.uint64) * _C_B + c.astype(np.uint64) * _C_C
         + np.uint64((d * 0x27D4EB2F165667C5) & _M64))
    h ^= h >> np.uint64(30)
    h *= _C_MIX1
    h ^= h >> np.uint64(27)
    h *= _C_MIX2
    return h ^ (h >> np.uint64(31))


class _Grow:
    """An int64 array appended to in blocks (capacity doubled when full)."""

    __slots__ = ("buf", "n")

    def __init__(self) -> None:
        self.buf = np.zeros(1024, dtype=np.int64)
        self.n = 0

    def add(self, a: np.ndarray) -> None:
        end = self.n + len(a)
        if end > len(self.buf):
            buf = np.zeros(max(2 * len(self.buf), end), dtype=np.int64)
            buf[:self.n] = self.buf[:self.n]
            self.buf = buf
        self.buf[self.n:end] = a
        self.n = end

    def view(self) -> np.ndarray:
        return self.buf[:self.n]


class _DistRows:
    """Hop counts towards switches as rows of one matrix (grown by doubling), found by switch node id:
    complete BFS rows (dist_to's) and rows of searches stopped early (_bfs_many: -1 = not known)."""

    __slots__ = ("slot", "rows", "done", "n")

    def __init__(self, n_nodes: int, m: int) -> None:
        self.slot = np.full(n_nodes, -1, dtype=np.int64)
        self.rows = np.full((16, m), -1, dtype=np.int32)
        self.done = np.zeros(16, dtype=bool)
        self.n = 0

    def put(self, switch: int, row: np.ndarray, done: bool) -> None:
        i = int(self.slot[switch])
        if i < 0:
            if self.n == len(self.done):
                grow = len(self.done)
                self.rows = np.concatenate((self.rows, np.full((grow, self.rows.shape[1]), -1, dtype=np.int32)))
                self.done = np.concatenate((self.done, np.zeros(grow, dtype=bool)))
            i = self.n
            self.slot[switch] = i
            self.n += 1
        elif not done and not self.done[i]:       # two partial searches: both exact where known
            row = np.where(row >= 0, row, self.rows[i])
        if done or not self.done[i]:
            self.rows[i] = row
            self.done[i] = done

    def get(self, switches: np.ndarray, cols: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(hop count from each column switch towards each switch, -1 = not known; whether that row
        is complete)."""
        i = self.slot[switches]
        has = i >= 0
        j = np.where(has, i, 0)
        return np.where(has, self.rows[j, cols], -1), has & self.done[j]


class Router:
    """`Router(topology, pxn=False, rail_aligned=False).path(src_gpu, dst_gpu, flow_key=0) -> link ids`."""

    def __init__(self, topology: Topology, pxn: bool = False, rail_aligned: bool = False) -> None:
        t = topology
        self.topology = t
        self.pxn = pxn
        self.rail_aligned = rail_aligned
        self._rails_per_server = 0
        self._rail_list: list[int] | None = None    # rail_of per GPU, read on the first rail-aligned route
        n = len(t.nodes)
        if isinstance(t, Topology):
            self._is_net = network_switch_mask(t).copy()
            hostsw = t.node_arrays().host_switches()
        else:
            self._is_net = np.array([is_network_switch(x) for x in t.nodes], dtype=bool)
            hostsw = np.array([x.kind == "nvswitch" or x.tier == "pcie" for x in t.nodes], dtype=bool)
        self._is_hostsw = hostsw.tolist()     # by node id; list: read with Python ints
        # compact index over network switches
        sw_ids = np.flatnonzero(self._is_net)
        self._sw_index = np.full(n, -1, dtype=np.int64)
        self._sw_index[sw_ids] = np.arange(len(sw_ids))
        self._sw_ids = sw_ids
        la = link_arrays_of(t)
        src, dst = la.src, la.dst
        self._la = la
        n_l = len(src)
        self._paired = n_l % 2 == 0 and bool(np.array_equal(src[0::2], dst[1::2])) and \
            bool(np.array_equal(dst[0::2], src[1::2]))
        both = self._is_net[src] & self._is_net[dst]
        lid = np.flatnonzero(both)
        s_c = self._sw_index[src[lid]]
        d_c = self._sw_index[dst[lid]]
        m = len(sw_ids)
        # reverse CSR (into each switch) for BFS towards a destination
        order = stable_order(d_c)
        self._in_ptr = np.searchsorted(d_c[order], np.arange(m + 1))
        self._in_src = s_c[order]
        # forward CSR (out of each switch) for walking
        order = stable_order(s_c)
        self._out_ptr = np.searchsorted(s_c[order], np.arange(m + 1))
        self._out_dst = d_c[order]
        self._out_lid = lid[order]
        self._out_src = s_c[order]
        self._dist: dict[int, np.ndarray] = {}
        self._twins: dict[tuple, int] = {}        # _twin_of: in-neighbour set -> first switch seen with it
        self._twin: dict[int, int] = {}           # _twin_of's answers by switch
        self._rows: _DistRows | None = None       # net_hop_parts' distance rows, on first use
        self._route: dict[int, tuple[array, array, array, array]] = {}
        self._idx = self._sw_index.tolist()
        self._ports: dict[int, list[tuple[tuple[int, ...], int]]] = {}
        self._rports: dict[int, list[tuple[tuple[int, ...], int]]] = {}
        self._host_out: dict[int, list[tuple[int, int]]] = {}
        self._host_in: dict[int, dict[int, int]] = {}
        self._sw_down: dict[int, dict[int, int]] = {}
        # read only (never changed here): the topology's cached list
        self._comp = t.host_components() if isinstance(t, Topology) else _host_components(t, hostsw)
        self._rail_tab: tuple | None = None       # net_paths' per-GPU arrays, on first use
        self._walk: tuple | None = None           # net_paths' next-hop tables (_walk_tables)
        self._csr: tuple | None = None            # _out's link CSR, on first use

    # ---------------------------------------------------------------------------------------
    def path(self, src_gpu: int, dst_gpu: int, flow_key: int = 0) -> tuple[int, ...]:
        """Link ids from src_gpu to dst_gpu (empty for src == dst)."""
        t = self.topology
        if not (0 <= src_gpu < t.num_gpus and 0 <= dst_gpu < t.num_gpus):
            raise IndexError(f"GPU pair ({src_gpu}, {dst_gpu}) out of range 0..{t.num_gpus - 1}")
        if src_gpu == dst_gpu:
            return ()
        if self._comp[src_gpu] == self._comp[dst_gpu] and self._comp[src_gpu] >= 0:
            hp = self._host_path(src_gpu, dst_gpu, flow_key)
            if hp is not None:
                return hp
        if self.pxn:
            proxy = self._pxn_proxy(src_gpu, dst_gpu)
            if proxy is not None:
                first = self._host_path(src_gpu, proxy, flow_key)
                if first is not None:
                    return first + self._net_path(proxy, dst_gpu, flow_key, src_gpu)
        return self._net_path(src_gpu, dst_gpu, flow_key, src_gpu)

    def ecmp_paths(self, src_gpu: int, dst_gpu: int, limit: int = 64) -> list[tuple[int, ...]]:
        """Up to `limit` distinct equal-cost paths (without PXN), in a deterministic order; e.g. to
        split one transfer over NVSwitch chips or spines."""
        if src_gpu == dst_gpu:
            return [()]
        if self.same_nvlink_domain(src_gpu, dst_gpu):
            hin = self._hin(dst_gpu)
            two = [(l1, hin[sw]) for l1, sw in self._hout(src_gpu) if sw in hin]
            if two:
                return two[:limit]
            p = self._host_bfs(src_gpu, dst_gpu, 0)
            if p is not None:
                return [p]
        sp, dp = self._src_ports(src_gpu), self._dst_ports(dst_gpu)
        idx = self._idx
        combos = []
        for pre, s_sw in sp:
            for suf, d_sw in dp:
                dd = self._towards(d_sw)[0][idx[s_sw]]
                if dd >= 0:
                    combos.append((len(pre) + dd + len(suf), pre, s_sw, suf, d_sw))
        if not combos:
            raise TopoError(f"no route from GPU {src_gpu} to GPU {dst_gpu}")
        best = min(c[0] for c in combos)
        out: list[tuple[int, ...]] = []
        for cost, pre, s_sw, suf, d_sw in combos:
            if cost != best:
                continue
            _, ptr, nlid, ndst = self._towards(d_sw)
            y = idx[d_sw]
            stack = [(idx[s_sw], list(pre))]
            while stack and len(out) < limit:
                x, acc = stack.pop()
                if x == y:
                    out.append(tuple(acc) + suf)
                    continue
                for k in range(ptr[x + 1] - 1, ptr[x] - 1, -1):
                    stack.append((ndst[k], acc + [nlid[k]]))
        return out[:limit]

    def host_route_is_key_free(self, a: int, b: int) -> bool:
        """True when path(a, b, key) is the same for every flow key: a and b are in one host component
        and exactly one host switch joins them directly (no ECMP choice between switches)."""
        if a == b or self._comp[a] != self._comp[b] or self._comp[a] < 0:
            return False
        hin = self._hin(b)
        return sum(1 for _l1, sw in self._hout(a) if sw in hin) == 1

    def path_key_free(self, a: int, b: int, flow_key: int = 0) -> tuple[tuple[int, ...], bool]:
        """(path(a, b, key), host_route_is_key_free(a, b)) with key = 0 when the route is key-free, in one
        pass over the host switches."""
        comp = self._comp
        if a != b and comp[a] == comp[b] and comp[a] >= 0 and 0 <= a < len(comp) and 0 <= b < len(comp):
            hin = self._hin(b)
            cands = [(l1, hin[sw]) for l1, sw in self._hout(a) if sw in hin]
            if len(cands) == 1:
                return cands[0], True      # path(a, b, 0): _host_path with its single candidate
        return self.path(a, b, flow_key), False

    def hops(self, src_gpu: int, dst_gpu: int) -> int:
        return len(self.path(src_gpu, dst_gpu))

    def same_nvlink_domain(self, a: int, b: int) -> bool:
        return self._comp[a] == self._comp[b] and self._comp[a] >= 0

    # ---- inside a server / NVLink domain ----------------------------------------------------
    def _hout(self, g: int) -> list[tuple[int, int]]:
        got = self._host_out.get(g)
        if got is None:
            got = [(lid, d) for lid, d in self._out(g) if self._is_hostsw[d]]
            self._host_out[g] = got
        return got

    def _out(self, node: int) -> list[tuple[int, int]]:
        """(link id, peer) of every link out of a node in link id order: Topology.out_links without
        building Link objects' adjacency (a CSR of the link columns, on first use)."""
        csr = self._csr
        if csr is None:
            src = self._la.src
            order = link_order(self.topology) if isinstance(self.topology, Topology) else np.argsort(src, kind="stable")
            ptr = np.searchsorted(src[order], np.arange(len(self._is_hostsw) + 1))
            csr = self._csr = (ptr, order, self._la.dst[order])
        ptr, ids, dst = csr
        lo, hi = int(ptr[node]), int(ptr[node + 1])
        return list(zip(ids[lo:hi].tolist(), dst[lo:hi].tolist()))

    def _hin(self, g: int) -> dict[int, int]:
        got = self._host_in.get(g)
        if got is None:
            got = {}
            for _lid, sw in self._hout(g):
                down = self._sw_down.get(sw)
                if down is None:      # peer -> first link sw -> peer, once per host switch
                    down = self._sw_down[sw] = {}
                    for lid, d in self._out(sw):
                        down.setdefault(d, lid)
                lid = down.get(g)
                if lid is not None:
                    got.setdefault(sw, lid)
            self._host_in[g] = got
        return got

    def _host_path(self, a: int, b: int, key: int) -> tuple[int, ...] | None:
        hin = self._hin(b)
        cands = [(l1, hin[sw]) for l1, sw in self._hout(a) if sw in hin]
        if cands:
            l1, l2 = cands[_mix(a, b, key, 1) % len(cands)] if len(cands) > 1 else cands[0]
            return (l1, l2)
        return self._host_bfs(a, b, key)

    def _host_bfs(self, a: int, b: int, key: int) -> tuple[int, ...] | None:
        """Shortest path through host-side switches only (e.g. PCIe switch -> CPU -> PCIe switch)."""
        t = self.topology
        preds: dict[int, list[tuple[int, int]]] = {a: []}
        frontier = [a]
        found = False
        while frontier and not found:
            layer: dict[int, list[tuple[int, int]]] = {}
            for u in frontier:
                for lk in t.out_links(u):
                    v = lk.dst
                    if v in preds:
                        continue
                    if v == b or self._is_hostsw[v]:
                        layer.setdefault(v, []).append((lk.id, u))
            preds.update(layer)
            found = b in layer
            frontier = [v for v in layer if v != b]
        if not found:
            return None
        out: list[int] = []
        v = b
        hop = 0
        while v != a:
            ps = preds[v]
            lid, u = ps[_mix(a, b, key, 100 + hop) % len(ps)] if len(ps) > 1 else ps[0]
            out.append(lid)
            v = u
            hop += 1
        return tuple(reversed(out))

    # ---- across the network ------------------------------------------------------------------
    def _first_link(self, a: int, b: int) -> int:
        """Lowest link id a -> b, from the link CSR (_out: link id order)."""
        for lid, d in self._out(a):
            if d == b:
                return lid
        raise KeyError((a, b))

    def _src_ports(self, g: int) -> list[tuple[tuple[int, ...], int]]:
        got = self._ports.get(g)
        if got is None:
            got = []
            for nodes in self.topology.gpu_ports(g):
                # the first hop leaves the GPU (link CSR); later hops (NIC, PCIe switch) by search
                lids = (self._first_link(nodes[0], nodes[1]),)
                if len(nodes) > 2:
                    lids += tuple(self._first_link(x, y) for x, y in zip(nodes[1:], nodes[2:]))
                got.append((lids, nodes[-1]))
            self._ports[g] = got
        return got

    def _dst_ports(self, g: int) -> list[tuple[tuple[int, ...], int]]:
        got = self._rports.get(g)
        if got is None and self._paired:
            # cables are link pairs (2k, 2k+1): the reverse of link L is L ^ 1
            got = [((pre[0] ^ 1,) if len(pre) == 1 else tuple(lid ^ 1 for lid in reversed(pre)), sw)
                   for pre, sw in self._src_ports(g)]
            self._rports[g] = got
        elif got is None:
            got = []
            for nodes in self.topology.gpu_ports(g):
                rev = nodes[::-1]
                got.append((tuple(self._first_link(x, y) for x, y in zip(rev, rev[1:])), nodes[-1]))
            self._rports[g] = got
        return got

    def _twin_of(self, switch: int) -> int:
        """A switch with the same in-neighbours as `switch` (the first one asked for; `switch` itself when
        it is the first), when the switch graph is symmetric (paired cables), else `switch`. Twins t, s
        (the ToRs of one pod of a Clos) have the same distances from every other switch x:
        dist(x, s) = 1 + min over in-neighbours v of dist(x, v) = dist(x, t); and dist(t, s) = dist(s, t)
        by symmetry: s's row is t's with the entries of t and s swapped (_swapped)."""
        if not self._paired:
            return switch
        got = self._twin.get(switch)
        if got is None:
            c = int(self._sw_index[switch])
            ptr = self._in_ptr
            key = tuple(sorted(set(self._in_src[ptr[c]:ptr[c + 1]].tolist())))
            got = self._twin[switch] = self._twins.setdefault(key, switch)
        return got

    def _swapped(self, row: np.ndarray, a: int, b: int) -> np.ndarray:
        """Twin b's distance row from twin a's (a, b switch node ids): entries of a and b exchanged."""
        if a == b:
            return row
        i, j = int(self._sw_index[a]), int(self._sw_index[b])
        out = row.copy()
        out[i], out[j] = row[j], row[i]
        return out

    def dist_to(self, switch: int) -> np.ndarray:
        """Hop counts from every network switch (compact index) to `switch`; -1 = unreachable."""
        d = self._dist.get(switch)
        if d is not None:
            return d
        twin = self._twin_of(switch)
        if twin != switch:
            dist = self._dist[switch] = self._swapped(self.dist_to(twin), twin, switch)
            if self._rows is not None:
                self._rows.put(switch, dist, True)
            return dist
        m = len(self._sw_ids)
        dist = np.full(m, -1, dtype=np.int32)
        c = int(self._sw_index[switch])
        dist[c] = 0
        frontier = np.array([c], dtype=np.int64)
        level = 0
        ptr, src = self._in_ptr, self._in_src
        while frontier.size:
            level += 1
            starts = ptr[frontier]
            counts = ptr[frontier + 1] - starts
            total = int(counts.sum())
            if total == 0:
                break
            offs = np.repeat(starts - np.concatenate(([0], np.cumsum(counts)[:-1])), counts)
            mark = np.zeros(m, dtype=bool)
            mark[src[offs + np.arange(total)]] = True
            nb = np.flatnonzero(mark & (dist < 0))
            dist[nb] = level
            frontier = nb
        self._dist[switch] = dist
        if self._rows is not None:
            self._rows.put(switch, dist, True)
        return dist

    def _bfs_many(self, switches: list[int], want: np.ndarray | None = None, max_cells: int = 1 << 22) -> None:
        """dist_to of several switches at once: one BFS over (destination, switch) cells per level for
        all of them (at most `max_cells` cells per batch), the same hop counts as one dist_to per
        switch. want: None, or per switch (row) the switches (compact index, columns) whose distance
        is needed: a batch stops once they are all known. A finished BFS goes to dist_to's cache;
        every row to net_hop_parts' (_DistRows; a row stopped early: its known cells exact).
        Twins (_twin_of) are searched once: the first of them, asked for or not, with the cells any of
        them wants; the others' rows are its row with two entries swapped."""
        twins = [self._twin_of(sw) for sw in switches]
        if twins != switches:
            firsts = [tw for tw in dict.fromkeys(twins) if tw not in self._dist]
            if firsts:
                tw_want = None
                if want is not None:
                    slot = {tw: i for i, tw in enumerate(firsts)}
                    tw_want = np.zeros((len(firsts), want.shape[1]), dtype=bool)
                    idx = self._sw_index
                    for i, (sw, tw) in enumerate(zip(switches, twins)):
                        if tw in slot:
                            w = want[i]
                            if tw != sw:     # the twin's row holds sw's cells with tw's and sw's swapped
                                w = w.copy()
                                a, b = int(idx[tw]), int(idx[sw])
                                w[a], w[b] = want[i][b], want[i][a]
                            tw_want[slot[tw]] |= w
                self._bfs_many(firsts, tw_want, max_cells)
            rows = self._dist_table()
            for sw, tw in zip(switches, twins):
                if sw == tw:
                    continue
                full = self._dist.get(tw)
                if full is not None:
                    self._dist[sw] = self._swapped(full, tw, sw)
                    rows.put(sw, self._dist[sw], True)
                else:
                    i = int(rows.slot[tw])
                    rows.put(sw, self._swapped(rows.rows[i], tw, sw), bool(rows.done[i]))
            return
        m = len(self._sw_ids)
        step = max(1, max_cells // max(m, 1))
        ptr, src = self._in_ptr, self._in_src
        for lo in range(0, len(switches), step):
            batch = switches[lo:lo + step]
            k = len(batch)
            dist = np.full((k, m), -1, dtype=np.int32)
            flat = dist.reshape(-1)
            wanted = None if want is None else want[lo:lo + step].reshape(-1)
            row = np.arange(k, dtype=np.int64)
            node = self._sw_index[np.array(batch, dtype=np.int64)]
            flat[row * m + node] = 0
            level = 0
            while node.size:
                if wanted is not None and not (wanted & (flat < 0)).any():
                    break                               # every wanted cell known: the rest is not needed
                level += 1
                starts = ptr[node]
                counts = ptr[node + 1] - starts
                total = int(counts.sum())
                if total == 0:
                    node = node[:0]                     # nothing further: every search is complete
                    break
                offs = np.repeat(starts - (np.cumsum(counts) - counts), counts) + np.arange(total)
                mark = np.zeros(k * m, dtype=bool)
                mark[np.repeat(row, counts) * m + src[offs]] = True
                cells = np.flatnonzero(mark & (flat < 0))
                flat[cells] = level
                row, node = cells // m, cells % m
            stopped = set(row.tolist()) if node.size else set()     # rows whose frontier was left
            rows = self._dist_table()
            for i, sw in enumerate(batch):
                done = i not in stopped or not (dist[i] < 0).any()
                if done:
                    self._dist[sw] = dist[i]
                rows.put(sw, dist[i], done)

    def _towards(self, switch: int) -> tuple[array, array, array, array]:
        """Per destination switch: distances and the next-hop edges (CSR by switch) of all
        shortest paths towards it."""
        got = self._route.get(switch)
        if got is None:
            # array.array: indexing yields Python ints several times faster than numpy scalars
            got = tuple(array("l", a.astype(np.int64).tobytes()) for a in self._towards_arrays(switch))
            self._route[switch] = got
        return got

    def _towards_arrays(self, switch: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """_towards' tables as numpy arrays (distances, CSR pointers, next-hop links, next switches)."""
        dist = self.dist_to(switch)
        src_c = self._out_src
        ds = dist[src_c]
        sel = np.flatnonzero((dist[self._out_dst] == ds - 1) & (ds > 0))
        ptr = np.searchsorted(src_c[sel], np.arange(len(self._sw_ids) + 1))
        return dist, ptr, self._out_lid[sel], self._out_dst[sel]

    def _net_path(self, a: int, b: int, key: int, origin: int) -> tuple[int, ...]:
        sp = self._ports.get(a) or self._src_ports(a)
        dp = self._rports.get(b) or self._dst_ports(b)
        if not sp or not dp:
            raise TopoError(f"no route from GPU {a} to GPU {b}: "
                             f"{'source' if not sp else 'destination'} has no network link")
        idx = self._idx
        h = -1             # the flow's hash _mix(origin, b, key, 7), computed when a choice needs it
        endpoint = self._rail_endpoint(a, b) if self.rail_aligned else -1
        if len(sp) == 1 and len(dp) == 1:
            pre, s_sw = sp[0]
            suf, d_sw = dp[0]
            route = self._route.get(d_sw) or self._towards(d_sw)
            if route[0][idx[s_sw]] < 0:
                raise TopoError(f"no route from GPU {a} to GPU {b}: network not connected")
        else:
            best = None
            cands: list[tuple[tuple[int, ...], int, tuple[int, ...], int]] = []
            for pre, s_sw in sp:
                for suf, d_sw in dp:
                    dd = self._towards(d_sw)[0][idx[s_sw]]
                    if dd < 0:
                        continue
                    cost = len(pre) + dd + len(suf)
                    if best is None or cost < best:
                        best = cost
                        cands = [(pre, s_sw, suf, d_sw)]
                    elif cost == best:
                        cands.append((pre, s_sw, suf, d_sw))
            if not cands:
                raise TopoError(f"no route from GPU {a} to GPU {b}: network not connected")
            h = _mix(origin, b, key, 7)
            pre, s_sw, suf, d_sw = cands[h % len(cands)]
            route = self._towards(d_sw)
        out = list(pre)
        x, y = idx[s_sw], idx[d_sw]
        _, ptr, nlid, ndst = route
        div = 1
        while x != y:
            lo = ptr[x]
            n = ptr[x + 1] - lo
            if n > 1 and endpoint >= 0:
                lo += (endpoint // div) % n       # D-mod-k on the destination NIC endpoint
                div *= n
            elif n > 1:
                if h < 0:
                    h = _mix(origin, b, key, 7)
                # per-switch hash of the flow (as a switch hashes the 5-tuple), cheap mixing
                hh = ((h ^ (x * 0x9E3779B97F4A7C15)) * 0xBF58476D1CE4E5B9) & _M64
                lo += (hh >> 29) % n
            out.append(nlid[lo])
            x = ndst[lo]
        out.extend(suf)
        return tuple(out)

    def rail_paths(self, src: np.ndarray, dst: np.ndarray) -> list[tuple[int, ...] | None] | None:
        """path(a, b, key) of many same-rail GPU pairs at once (net_paths without flow keys: only the
        D-mod-k routes of a rail-aligned router, which no key changes). Per pair the link ids, or None
        where path() must be asked; None when the router is not rail-aligned or not of that kind."""
        if not self.rail_aligned:
            return None
        got = self.net_paths(src, dst, None)
        if got is None:
            return None
        sel, rows = got
        out: list[tuple[int, ...] | None] = [None] * len(src)
        for i, row in zip(sel.tolist(), rows.tolist()):
            out[i] = tuple(x for x in row if x >= 0)
        return out

    def net_paths(self, src: np.ndarray, dst: np.ndarray,
                  keys: np.ndarray | None) -> tuple[np.ndarray, np.ndarray] | None:
        """path(a, b, keys[i]) of many GPU pairs at once through the network, for a router without PXN
        whose GPUs each have one link straight to a network switch (SimAI's fabrics), as array walks
        towards each destination switch. Each multi-way choice is _net_path's: D-mod-k on the
        destination endpoint for same-rail pairs of a rail-aligned router, else the per-switch hash of
        the flow (_mix of (a, b, key, 7)), computed in uint64 arithmetic (the same bits as the Python
        ints masked to 64 bits). keys None: only the D-mod-k pairs are answered.
        Returns (indices of the pairs answered, their link ids: one row per pair in path order,
        padded with -1 anywhere after the first link), or None when the router is not of that kind.
        Pairs left to path(): several ports, one host component, no route, a == b."""
        tab = self._net_tab()
        if tab is None:
            return None
        t = self.topology
        count, first, sw, rails, comp = tab
        ok = ((count[src] == 1) & (count[dst] == 1) & (src != dst)
              & ((comp[src] != comp[dst]) | (comp[src] < 0)))
        dmk = rails[src] == rails[dst] if self.rail_aligned else np.zeros(len(src), dtype=bool)
        if keys is None:
            ok &= dmk
        sel = np.flatnonzero(ok)
        if not len(sel):
            return sel, np.zeros((0, 2), dtype=np.int64)
        a, b = src[sel], dst[sel]
        dmk = dmk[sel]
        endpoint = (b // t.gpus_per_server) * self._rails_per_server + rails[b]
        h = None
        if not dmk.all():
            h = _mix_arr(a, b, np.asarray(keys, dtype=np.int64)[sel], 7)
        idx = self._sw_index
        x, y = idx[sw[a]], idx[sw[b]]
        row, dist_all, ptr_all, nlid_all, ndst_all = self._walk_tables(sw[b])
        m = len(self._sw_ids)
        reach = dist_all[row * m + x] >= 0
        cols: list[np.ndarray] = [first[a]]
        div = np.ones(len(sel), dtype=np.int64)
        cur = x.copy()
        active = (cur != y) & reach
        for _ in range(m + 1):      # each step gets one switch closer: at most m steps
            if not active.any():
                break
            base = row * (m + 1) + cur
            lo = ptr_all[base]
            n = ptr_all[base + 1] - lo
            multi = active & (n > 1)
            n1 = np.maximum(n, 1)
            by_dst = multi & dmk
            lo = np.where(by_dst, lo + (endpoint // div) % n1, lo)      # D-mod-k
            div = np.where(by_dst, div * n1, div)
            if h is not None:
                by_hash = multi & ~dmk
                if by_hash.any():
                    # per-switch hash of the flow: ((h ^ (x * C1)) * C2) mod 2**64, then >> 29
                    hh = (h ^ (cur.astype(np.uint64) * _C_X)) * _C_MIX1
                    pick = ((hh >> np.uint64(29)) % n1.astype(np.uint64)).astype(np.int64)
                    lo = np.where(by_hash, lo + pick, lo)
            at = np.where(active, lo, 0)
            cols.append(np.where(active, nlid_all[at], -1))
            cur = np.where(active, ndst_all[at], cur)
            active = (cur != y) & reach
        reach &= ~active
        cols.append(first[b] ^ 1)     # paired cables: the reverse of link L is L ^ 1
        rows = np.column_stack(cols)
        return sel[reach], rows[reach]

    def net_hop_parts(self, src: np.ndarray, dst: np.ndarray):
        """For the GPU pairs net_paths answers, what their paths are made of without walking them:
        (mask of those pairs, first link, last link, number of switch-to-switch links between them
        (the hop distance of the two switches: net_paths' walk takes one shortest-path step per
        link)). None when net_paths would answer None. The links in between depend on the flow key;
        their count does not."""
        tab = self._net_tab()
        if tab is None:
            return None
        count, first, sw, _rails, comp = tab
        ok = ((count[src] == 1) & (count[dst] == 1) & (src != dst)
              & ((comp[src] != comp[dst]) | (comp[src] < 0)))
        dist = np.full(len(src), -1, dtype=np.int64)
        sel = np.flatnonzero(ok)
        if len(sel):
            idx = self._sw_index
            s_c, d_sw = idx[sw[src[sel]]], sw[dst[sel]]
            rows = self._dist_table()
            got, done = rows.get(d_sw, s_c)
            need = (got < 0) & ~done
            if need.any():
                # BFS towards the switches not known yet, each only as deep as its pairs need
                todo = sorted(set(d_sw[need].tolist()))      # (np.unique would import numpy.ma)
                want = np.zeros((len(todo), len(self._sw_ids)), dtype=bool)
                want[np.searchsorted(np.array(todo, dtype=np.int64), d_sw[need]), s_c[need]] = True
                self._bfs_many(todo, want)
                got[need] = rows.get(d_sw[need], s_c[need])[0]
            dist[sel] = got
        ok &= dist >= 0
        return ok, first[src], first[dst] ^ 1, dist

    def _dist_table(self) -> _DistRows:
        """net_hop_parts' distance rows (created on first use with the rows dist_to found so far)."""
        rows = self._rows
        if rows is None:
            rows = self._rows = _DistRows(len(self._sw_index), len(self._sw_ids))
            for sw, d in self._dist.items():
                rows.put(sw, d, True)
        return rows

    def inner_links(self) -> np.ndarray:
        """Ids of the links between network switches (the middle links of net_paths' routes)."""
        return self._out_lid

    def _net_tab(self):
        """(per GPU: its number of direct network links, the first one, its switch; rails; host
        components) for net_paths, or None when the router is not of that kind (cached)."""
        t = self.topology
        if self.pxn or not self._paired or not isinstance(t, Topology):
            return None
        tab = self._rail_tab
        if tab is None:
            g_links, g_sw, _ = direct_gpu_links(t)
            G = t.num_gpus
            if not len(g_links):
                return None
            la = self._la
            count = np.bincount(g_links, minlength=G)
            first = np.full(G, -1, dtype=np.int64)
            lids = np.flatnonzero((la.src < G) & self._is_net[la.dst])     # the links of direct_gpu_links
            first[la.src[lids]] = lids
            sw = np.full(G, -1, dtype=np.int64)
            sw[g_links] = g_sw
            rails = t.rail_array()
            if not self._rails_per_server:
                self._rails_per_server = 1 + max(int(rails[g]) for g in t.gpus_of_server(0))
            tab = self._rail_tab = (count, first, sw, rails, np.asarray(self._comp, dtype=np.int64))
        return tab

    def _walk_tables(self, d_sw: np.ndarray):
        """(slot of each destination switch, and the _towards tables of every destination switch seen
        so far, concatenated by slot: distances (m per slot), CSR pointers (m + 1 per slot, into the
        concatenated next-hop links and switches)); tables are appended as new destinations come
        (buffers grown by doubling)."""
        got = self._walk
        if got is None:
            got = self._walk = (np.full(len(self._sw_index), -1, dtype=np.int64), _Grow(), _Grow(), _Grow(), _Grow())
        slot, dist_all, ptr_all, nlid_all, ndst_all = got
        new = sorted(set(d_sw[slot[d_sw] < 0].tolist()))     # (np.unique would import numpy.ma)
        m1 = len(self._sw_ids) + 1
        for d in new:
            got = self._route.get(d)
            # (the int64 buffers take the tables' values whatever their integer type)
            dist, ptr, nlid, ndst = ([np.frombuffer(a, dtype=np.int64) for a in got] if got is not None
                                     else self._towards_arrays(d))
            slot[d] = ptr_all.n // m1
            dist_all.add(dist)
            ptr_all.add(ptr + nlid_all.n)
            nlid_all.add(nlid)
            ndst_all.add(ndst)
        return slot[d_sw], dist_all.view(), ptr_all.view(), nlid_all.view(), ndst_all.view()

    def _rail_endpoint(self, a: int, b: int) -> int:
        """Destination NIC endpoint index (server x rails + rail) when a and b share a rail, else -1."""
        t = self.topology
        rails = self._rail_list
        if rails is None:
            rails = self._rail_list = t.rails() if hasattr(t, "rails") else [t.rail_of(g) for g in range(t.num_gpus)]
        rail = rails[b]
        if rails[a] != rail:
            return -1
        if not self._rails_per_server:
            self._rails_per_server = 1 + max(rails[g] for g in t.gpus_of_server(0))
        return t.server_of(b) * self._rails_per_server + rail

    # ---- PXN ----------------------------------------------------------------------------------
    def _net_cost(self, a: int, b: int) -> int:
        """Links on the shortest network route a -> b (a large number if none)."""
        best = 1 << 30
        idx = self._idx
        for pre, s_sw in self._src_ports(a):
            for suf, d_sw in self._dst_ports(b):
                dd = self._towards(d_sw)[0][idx[s_sw]]
                if dd >= 0:
                    best = min(best, len(pre) + dd + len(suf))
        return best

    def _pxn_proxy(self, a: int, b: int) -> int | None:
        """The GPU of a's NVLink domain on b's rail, if its network route to b is shorter than a's
        (rail-optimized fabrics: it avoids the spine); None otherwise."""
        t = self.topology
        rail = t.rail_of(b)
        if t.rail_of(a) == rail or self._comp[a] < 0:
            return None
        for g in t.gpus_of_server(t.server_of(a)):
            if g != a and t.rail_of(g) == rail and self._comp[g] == self._comp[a]:
                return g if self._net_cost(g, b) < self._net_cost(a, b) else None
        return None


def _host_components(t: Topology, is_hostsw: np.ndarray) -> list[int]:
    """Per GPU: id of the set of GPUs joined through NVSwitch / PCIe switches (-1: none); is_hostsw: bool
    by node id. Min-label propagation over host links (converges in a few rounds: domains are shallow)."""
    G = t.num_gpus
    n = len(t.nodes)
    host_node = np.asarray(is_hostsw, dtype=bool)
    inside = host_node.copy()
    inside[:G] = True
    la = link_arrays_of(t)
    src, dst = la.src, la.dst
    kind_ok = ~link_kind_mask(t, "network")
    keep = kind_ok & inside[src] & inside[dst]
    src, dst = src[keep], dst[keep]
    label = np.arange(n, dtype=np.int64)
    while True:
        new = label.copy()
        np.minimum.at(new, dst, label[src])
        np.minimum.at(new, src, label[dst])
        if np.array_equal(new, label):
            break
        label = new
    has_host = np.zeros(n, dtype=bool)
    has_host[src[host_node[dst]]] = True
    out = np.where(has_host[:G], label[:G], -1)
    return out.tolist()
