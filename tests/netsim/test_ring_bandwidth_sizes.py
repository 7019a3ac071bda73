"""netsim.analytical.ring_bandwidth_Bps (each distinct unit size once) against the per-server minimum
written out here, on groups whose units have mixed sizes."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest

from netsim.analytical import ring_bandwidth_Bps
from netsim.schedules import GroupShape


def _per_server(shape: GroupShape, b_nv: float, b_net: float) -> float:
    k = max(len(s) for s in shape.servers)
    per = math.inf
    for s in shape.servers:
        per = min(per, b_net / math.ceil(k / len(s)))
        if len(s) > 1:
            per = min(per, b_nv / (k - k // len(s)))
    return k * per


@pytest.mark.parametrize("sizes", [(8, 8, 8), (3, 1, 2, 3), (1, 4, 4, 1, 2), (5, 3), (2, 2, 7, 2)])
@pytest.mark.parametrize("b_nv,b_net", [(150e9, 50e9), (20e9, 400e9), (math.inf, 25e9)])
def test_ring_bandwidth_is_the_minimum_over_every_server(sizes, b_nv, b_net):
    servers, g = [], 0
    for n in sizes:
        servers.append(list(range(g, g + n)))
        g += n
    shape = GroupShape(tuple(range(g)), servers, len(sizes))
    facts = SimpleNamespace(b_nv=b_nv, b_net=b_net)
    assert ring_bandwidth_Bps(shape, facts) == _per_server(shape, b_nv, b_net)


def test_ring_bandwidth_of_mixed_units_by_hand():
    # k = 3; a 1-GPU server sends 3 channels through its NIC: 30e9 / 3; a 3-GPU one forwards 3 - 1 = 2
    # channels over NVLink (60e9 / 2) and sends 1 through its NIC (30e9): minimum 10e9 per channel
    shape = GroupShape((0, 1, 2, 3), [[0, 1, 2], [3]], 2)
    assert ring_bandwidth_Bps(shape, SimpleNamespace(b_nv=60e9, b_net=30e9)) == 3 * 10e9
