"""Symbolic verification of the step-level collective DAGs.

Each rank's buffer holds, per chunk, a vector counting how often each rank's input is folded in.
A transfer sends the sender's value computed ONLY from transfers that are ancestors of it in the DAG
(plus the sender's initial data): a missing dependency therefore shows up as an incomplete or
missing value at the end. "reduce" adds, "copy" replaces. After all transfers every rank must hold
exactly what the collective promises (each contribution exactly once).
"""

from __future__ import annotations

import random

import pytest

from netsim.dag import build_dag
from netsim.errors import NetsimError

REDUCTIONS = ("all_reduce", "reduce_scatter", "reduce")


def _initial(dag, rank: int, c: int, n: int):
    if dag.op in REDUCTIONS:
        if rank >= n:
            return None
        v = [0] * n
        v[rank] = 1
        return tuple(v)
    if dag.chunk_owner[c] == rank:
        v = [0] * n
        v[rank] = 1
        return tuple(v)
    return None


def _apply(cur, op, val):
    if op == "copy":
        return val
    if cur is None:
        return val
    return tuple(a + b for a, b in zip(cur, val))


def execute(dag):
    n = dag.n
    transfers = dag.transfers
    anc = [0] * len(transfers)
    incoming: dict[tuple[int, int], list[tuple[int, str, tuple]]] = {}
    for t, tr in enumerate(transfers):
        bits = 0
        for d in tr.deps + tr.after:   # data dependencies and same-connection order
            assert d < t, f"transfer {t} depends on later transfer {d}"
            bits |= anc[d] | (1 << d)
        anc[t] = bits
        sent = []
        for c in tr.chunks:
            val = _initial(dag, tr.src, c, n)
            for idx, op, v in incoming.get((tr.src, c), ()):
                if bits >> idx & 1:
                    val = _apply(val, op, v)
            assert val is not None, f"transfer {t}: rank {tr.src} sends chunk {c} it does not hold yet"
            sent.append(val)
        for c, val in zip(tr.chunks, sent):
            incoming.setdefault((tr.dst, c), []).append((t, tr.op, val))
    final = {}
    for r in range(n):
        for c in range(len(dag.chunk_bytes)):
            val = _initial(dag, r, c, n)
            for _idx, op, v in incoming.get((r, c), ()):
                val = _apply(val, op, v)
            final[(r, c)] = val
    return final


def check(dag, size: float):
    n = dag.n
    final = execute(dag)
    full = tuple([1] * n)
    chunks = range(len(dag.chunk_bytes))
    assert sum(dag.chunk_bytes) == pytest.approx(size if dag.op != "all_to_all" else size * n)

    def one_hot(i):
        return tuple(1 if j == i else 0 for j in range(n))

    if dag.op == "all_reduce":
        for r in range(n):
            for c in chunks:
                assert final[(r, c)] == full, f"rank {r} chunk {c}: {final[(r, c)]}"
    elif dag.op == "reduce_scatter":
        owned = [0.0] * n
        for c in chunks:
            o = dag.chunk_owner[c]
            owned[o] += dag.chunk_bytes[c]
            assert final[(o, c)] == full
        assert owned == pytest.approx([size / n] * n)
    elif dag.op == "reduce":
        for c in chunks:
            assert final[(0, c)] == full
    elif dag.op in ("all_gather", "broadcast"):
        owned = [0.0] * n
        for c in chunks:
            o = dag.chunk_owner[c]
            owned[o] += dag.chunk_bytes[c]
            for r in range(n):
                assert final[(r, c)] == one_hot(o), f"rank {r} chunk {c}"
        if dag.op == "all_gather":
            assert owned == pytest.approx([size / n] * n)
        else:
            assert owned[0] == pytest.approx(size)
    elif dag.op in ("all_to_all", "send"):
        for c in chunks:
            assert final[(dag.chunk_dest[c], c)] == one_hot(dag.chunk_owner[c])
        if dag.op == "all_to_all":
            pairs = sorted((dag.chunk_owner[c], dag.chunk_dest[c]) for c in chunks)
            assert pairs == [(i, j) for i in range(n) for j in range(n)]


def servers_of(n: int, per_server: int) -> list[list[int]]:
    return [list(range(i, min(i + per_server, n))) for i in range(0, n, per_server)]


SIZES = [2, 3, 4, 5, 7, 8, 12, 16, 17, 31, 64]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"])
def test_ring(op, n):
    size = 1.0 * n * 6
    per = 8 if n > 8 else n
    dag = build_dag(op, "ring", servers_of(n, per), size, pieces=2 if n <= 16 else 1)
    check(dag, size)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("op", ["all_reduce", "broadcast", "reduce"])
def test_tree(op, n):
    dag = build_dag(op, "tree", servers_of(n, 8), 64.0, pieces=2)
    check(dag, 64.0)


@pytest.mark.parametrize("n", [2, 3, 4, 7, 8, 17, 64])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_nvls(op, n):
    dag = build_dag(op, "nvls", [list(range(n))], 96.0, pieces=2 if n <= 8 else 1)
    assert dag.n_participants == n + 1
    check(dag, 96.0)


@pytest.mark.parametrize("n", [2, 3, 5, 6, 8, 13, 16, 33, 64])
def test_rhd_all_reduce(n):
    check(build_dag("all_reduce", "rhd", servers_of(n, 8), 128.0), 128.0)


@pytest.mark.parametrize("n", [2, 4, 8, 16, 32, 64])
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter"])
def test_rhd_power_of_two(op, n):
    check(build_dag(op, "rhd", servers_of(n, 8), 64.0 * n), 64.0 * n)


def test_rhd_rejects_non_power_of_two_all_gather():
    with pytest.raises(NetsimError, match="power-of-two"):
        build_dag("all_gather", "rhd", servers_of(6, 8), 1.0)


@pytest.mark.parametrize("n", [2, 3, 8, 13, 64])
@pytest.mark.parametrize("alg", ["direct", "pairwise"])
def test_all_to_all(alg, n):
    check(build_dag("all_to_all", alg, servers_of(n, 8), 8.0 * n), 8.0 * n)


@pytest.mark.parametrize("m,k", [(2, 2), (2, 8), (3, 4), (4, 8), (5, 3), (8, 8), (1, 4), (4, 1)])
@pytest.mark.parametrize("op", ["all_reduce", "all_gather", "reduce_scatter"])
def test_hierarchical(op, m, k):
    dag = build_dag(op, "hierarchical", servers_of(m * k, k), 1.0 * m * k)
    check(dag, 1.0 * m * k)


def test_send():
    check(build_dag("send", "p2p", [[0], [1]], 10.0), 10.0)


def test_missing_dependency_is_caught():
    """The verifier must fail when a DAG forgets a dependency (guards against a vacuous check)."""
    import dataclasses

    dag = build_dag("all_reduce", "ring", [list(range(4))], 16.0, pieces=1)
    victim = next(i for i, t in enumerate(dag.transfers) if t.deps and t.op == "reduce")
    dag.transfers[victim] = dataclasses.replace(dag.transfers[victim], deps=(), after=())
    with pytest.raises(AssertionError):
        check(dag, 16.0)


def test_shuffled_server_grouping_ring():
    """Group ranks spread over servers out of order (rank order != server order) still verify."""
    rng = random.Random(7)
    ranks = list(range(12))
    rng.shuffle(ranks)
    servers = [sorted(ranks[0:5]), sorted(ranks[5:9]), sorted(ranks[9:])]
    for op in ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "reduce"):
        check(build_dag(op, "ring", servers, 72.0), 72.0)


def test_fifo_order_is_per_connection():
    dag = build_dag("all_reduce", "ring", [list(range(4))], 64.0, pieces=3)
    last: dict = {}
    for i, t in enumerate(dag.transfers):
        key = (t.src, t.dst)
        if key in last:
            assert last[key] in t.after + t.deps
        last[key] = i
