"""netsim.topoview._Adjacency: a node's out-channels and peers in channel order, the same whether its
row is sliced from the sorted arrays (the first nodes asked for) or from the Python lists (later)."""

from __future__ import annotations

import numpy as np

from netsim.topoview import TopoView, _Adjacency
from topo.templates import build


def _plain(src: np.ndarray, dst: np.ndarray, node: int) -> list[tuple[int, int]]:
    return [(ch, int(dst[ch])) for ch in range(len(src)) if int(src[ch]) == node]


def test_rows_are_the_channels_in_order_in_both_modes():
    view = TopoView(build("spectrum-x", gpus=256))
    src, dst = view.ch_src, view.ch_dst
    n_nodes = int(max(src.max(), dst.max())) + 1
    nodes = list(range(n_nodes)) + [n_nodes + 5, -1]          # beyond the ids: no channels
    adj = _Adjacency(src, dst)
    assert n_nodes > _Adjacency._LIST_AFTER                     # both modes are used below
    got = [adj[v] for v in nodes]
    assert adj._lists is not None
    for v, row in zip(nodes, got):
        assert row == _plain(src, dst, v), v
        assert all(type(c) is int and type(p) is int for c, p in row)
    # asked in reverse order, the late nodes come from the arrays: the same rows
    again = _Adjacency(src, dst)
    assert [again[v] for v in reversed(nodes)] == got[::-1]
    assert again[3] is again[3]                                 # one row per node


def test_numpy_node_ids_and_an_empty_topology():
    src = np.array([2, 0, 2, 1], dtype=np.int64)
    dst = np.array([0, 2, 1, 2], dtype=np.int64)
    adj = _Adjacency(src, dst)
    assert adj[np.int64(2)] == [(0, 0), (2, 1)] and adj[0] == [(1, 2)] and adj[5] == []
    empty = _Adjacency(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
    assert empty[0] == []
