"""netsim's view of a topo.Topology: directed channels, effective capacities, routes, GPU facts.

Channels are the directed links of the topology (topo models a cable as two directed links). The
engine sees channel capacities = line rate x calibrated efficiency of the link class.
"""

from __future__ import annotations

import math
from collections import defaultdict

import numpy as np

from netsim import calibration as cal
from netsim.errors import NetsimError


class TopoView:
    def __init__(self, topology, *, pxn: bool = False):
        import topo  # netsim -> topo is an allowed dependency; imported lazily for testability

        self.topology = topology
        self.gpu_type = str(getattr(topology, "gpu_type", "") or "")
        self.num_gpus = int(topology.num_gpus)
        self.gpus_per_server = int(getattr(topology, "gpus_per_server", 1) or 1)
        links = list(topology.links)
        nl = len(links)
        src = np.fromiter((lk.src for lk in links), dtype=np.int64, count=nl)
        dst = np.fromiter((lk.dst for lk in links), dtype=np.int64, count=nl)
        kind = [str(lk.kind) for lk in links]
        bw = np.fromiter((float(lk.bandwidth_Bps) for lk in links), dtype=np.float64, count=nl)
        lat = np.fromiter((float(lk.latency_s) for lk in links), dtype=np.float64, count=nl)
        pairs = {(int(a), int(b)): i for i, (a, b) in enumerate(zip(src.tolist(), dst.tolist()))}
        # topo.Topology links are directed (a cable = two links); a topology whose links have no
        # reverse twin is read as full duplex: channel 2L = link L forward, 2L + 1 = backward.
        self.directed = all((b, a) in pairs for (a, b) in pairs)
        if self.directed:
            self.ch_src, self.ch_dst, self.ch_kind = src, dst, kind
            ch_bw, ch_lat = bw, lat
            self._rev = np.array([pairs[(int(b), int(a))] for a, b in zip(src, dst)], dtype=np.int64)
        else:
            self.ch_src = np.stack([src, dst], axis=1).reshape(-1)
            self.ch_dst = np.stack([dst, src], axis=1).reshape(-1)
            self.ch_kind = [k for k in kind for _ in (0, 1)]
            ch_bw, ch_lat = np.repeat(bw, 2), np.repeat(lat, 2)
            self._rev = np.arange(2 * nl, dtype=np.int64) ^ 1
        self.link_src, self.link_dst = src, dst
        eff = np.array([cal.link_efficiency(k, b, self.gpu_type) for k, b in zip(self.ch_kind, ch_bw)])
        self.line_Bps = ch_bw
        self.capacity_Bps = ch_bw * eff
        self.latency_s = ch_lat
        self.node_kind = {n.id: str(n.kind) for n in topology.nodes}
        self._routers = {False: topo.Router(topology, pxn=False)}
        if pxn:
            self._routers[True] = topo.Router(topology, pxn=True)
        self._topo_mod = topo
        self._path_cache: dict[tuple[int, int, int, bool], tuple[int, ...]] = {}
        self._adj: dict[int, list[tuple[int, int]]] = defaultdict(list)  # node -> [(out channel, peer)]
        for ch, (a, b) in enumerate(zip(self.ch_src.tolist(), self.ch_dst.tolist())):
            self._adj[a].append((ch, b))
        self._server = [int(topology.server_of(g)) for g in range(self.num_gpus)]
        self._domain = [int(topology.nvlink_domain_of(g)) for g in range(self.num_gpus)]
        self._gpu_facts: dict[int, tuple[float, float]] = {}

    # ------------------------------------------------------------ structure
    def server_of(self, gpu: int) -> int:
        return self._server[gpu]

    def domain_of(self, gpu: int) -> int:
        return self._domain[gpu]

    def check_gpus(self, gpus) -> None:
        for g in gpus:
            if not isinstance(g, int | np.integer) or g < 0 or g >= self.num_gpus:
                raise NetsimError(f"rank {g} is not a GPU of the topology (GPU ids 0..{self.num_gpus - 1})")

    def switch_channels(self, gpu: int) -> tuple[list[int], list[int]]:
        """Channels GPU -> NVSwitch and NVSwitch -> GPU (NVLS traffic)."""
        up, down = [], []
        for ch, peer in self._adj[gpu]:
            if self.node_kind.get(peer) == "nvswitch":
                up.append(ch)
                down.append(int(self._rev[ch]))
        return up, down

    def channel_kind(self, ch: int) -> str:
        return self.ch_kind[ch]

    # ------------------------------------------------------------ routes
    def path(self, src: int, dst: int, key: int = 0, pxn: bool = False) -> tuple[int, ...]:
        ck = (src, dst, key, pxn)
        got = self._path_cache.get(ck)
        if got is not None:
            return got
        if src == dst:
            self._path_cache[ck] = ()
            return ()
        router = self._routers.get(pxn)
        if router is None:
            router = self._routers[pxn] = self._topo_mod.Router(self.topology, pxn=pxn)
        ids = router.path(src, dst, key)
        if self.directed:
            res = tuple(int(i) for i in ids)
        else:
            chans = []
            cur = src
            for lid in ids:
                lid = int(lid)
                if self.link_src[lid] == cur:
                    chans.append(2 * lid)
                    cur = int(self.link_dst[lid])
                else:
                    chans.append(2 * lid + 1)
                    cur = int(self.link_src[lid])
            res = tuple(chans)
        self._path_cache[ck] = res
        return res

    def path_latency_s(self, chans) -> float:
        return float(sum(self.latency_s[c] for c in chans))

    def path_alpha_s(self, chans) -> float:
        """Per-step software overhead of the slowest link class on the path."""
        if not chans:
            return 0.0
        return max(cal.ALPHA_S.get(self.channel_kind(c), cal.ALPHA_S["network"]) for c in chans)

    # ------------------------------------------------------------ per-GPU bandwidths
    def gpu_bandwidths(self, gpu: int) -> tuple[float, float]:
        """(effective NVLink out B/s, effective network out B/s share of this GPU's NIC)."""
        got = self._gpu_facts.get(gpu)
        if got is not None:
            return got
        nv = 0.0
        net = 0.0
        for ch, peer in self._adj[gpu]:
            kind = self.channel_kind(ch)
            if kind == "nvlink":
                nv += self.capacity_Bps[ch]
            elif kind == "network":
                net += self.capacity_Bps[ch]
            elif self.node_kind.get(peer) == "nic":
                nic_out = sum(self.capacity_Bps[c2] for c2, _ in self._adj[peer]
                              if self.channel_kind(c2) == "network")
                sharers = sum(1 for _, p2 in self._adj[peer] if self.node_kind.get(p2) == "gpu")
                net += min(self.capacity_Bps[ch], nic_out / max(1, sharers))
        if nv == 0.0:
            nv = math.inf if self.gpus_per_server <= 1 else self._pcie_bw(gpu)
        got = (nv, net)
        self._gpu_facts[gpu] = got
        return got

    def _pcie_bw(self, gpu: int) -> float:
        caps = [self.capacity_Bps[ch] for ch, _ in self._adj[gpu] if self.channel_kind(ch) == "pcie"]
        return min(caps) if caps else 1.0
