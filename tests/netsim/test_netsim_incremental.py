"""Incremental max-min (netsim.engine): re-solving only the connected component of the flows that
started or finished gives the full re-solve's rates and completion times."""

from __future__ import annotations

import math

import numpy as np
import pytest

from netsim.engine import FlowEngine
from netsim.maxmin import component_mask, component_mask_python, maxmin_rates, numba_available


def _random_flows(rng, n_flows, n_links, max_len=4):
    paths = [rng.choice(n_links, size=int(rng.integers(1, max_len + 1)), replace=False) for _ in range(n_flows)]
    ptr = np.zeros(n_flows + 1, dtype=np.int64)
    ptr[1:] = np.cumsum([len(p) for p in paths])
    fl = np.concatenate(paths).astype(np.int64)
    fw = rng.choice([1.0, 2.0, 0.5], size=len(fl))
    return ptr, fl, fw


def _components_by_union_find(n_links, ptr, fl):
    parent = list(range(n_links))

    def root(x):
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for f in range(len(ptr) - 1):
        links = fl[ptr[f]:ptr[f + 1]].tolist()
        for lk in links[1:]:
            parent[root(lk)] = root(links[0])
    return [root(int(fl[ptr[f]])) for f in range(len(ptr) - 1)]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_component_mask_matches_union_find(seed):
    rng = np.random.default_rng(seed)
    n_links = 400
    ptr, fl, _ = _random_flows(rng, 150, n_links, max_len=3)
    comp = _components_by_union_find(n_links, ptr, fl)
    seed_links = rng.choice(n_links, size=3, replace=False)
    seed_flows = np.array([7], dtype=np.int64)
    roots = {comp[7]}
    for lk in seed_links.tolist():
        hit = [comp[f] for f in range(len(comp)) if lk in fl[ptr[f]:ptr[f + 1]].tolist()]
        roots.update(hit)
    expect = np.array([c in roots for c in comp])
    got_py = component_mask_python(n_links, ptr, fl, seed_links, seed_flows)
    assert got_py.tolist() == expect.tolist()
    assert 1 < expect.sum() < len(expect)          # the instance has several components
    if numba_available():
        got_nb = component_mask(n_links, ptr, fl, seed_links, seed_flows, use_numba=True)
        assert got_nb.tolist() == expect.tolist()


@pytest.mark.parametrize("use_numba", [False, True] if numba_available() else [False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_component_solve_equals_full_solve(seed, use_numba):
    """Rates of a component solved alone equal its rates in the full solve (to 1e-12 relative)."""
    rng = np.random.default_rng(100 + seed)
    n_links = 300
    ptr, fl, fw = _random_flows(rng, 200, n_links, max_len=3)
    cap = rng.uniform(1.0, 50.0, n_links)
    fcap = np.where(rng.random(200) < 0.1, rng.uniform(0.5, 5.0, 200), np.inf)
    full = maxmin_rates(cap, ptr, fl, fw, fcap, use_numba=use_numba)
    mask = component_mask_python(n_links, ptr, fl, fl[ptr[3]:ptr[4]], np.zeros(0, dtype=np.int64))
    idx = np.flatnonzero(mask)
    lens = np.diff(ptr)[idx]
    sptr = np.zeros(len(idx) + 1, dtype=np.int64)
    sptr[1:] = np.cumsum(lens)
    entry = np.repeat(mask, np.diff(ptr))
    part = maxmin_rates(cap, sptr, fl[entry], fw[entry], fcap[idx], use_numba=use_numba)
    np.testing.assert_allclose(part, full[idx], rtol=1e-12, atol=0)


def _run_scenario(seed, incremental, use_numba):
    """Random flows arriving over time (some added from completion callbacks); returns
    (flow id, start, end) per flow and the link byte totals."""
    rng = np.random.default_rng(seed)
    n_links = 120
    eng = FlowEngine(rng.uniform(10.0, 100.0, n_links), use_numba=use_numba, check_invariants=True,
                     record_flows=True, incremental=incremental)
    chained = {"left": 60}

    def add(t_next=None):
        k = int(rng.integers(1, 4))
        links = rng.choice(n_links, size=k, replace=False)
        cap = float(rng.uniform(1.0, 30.0)) if rng.random() < 0.1 else np.inf
        eng.add_flow(links, float(rng.uniform(1.0, 500.0)), weights=rng.choice([1.0, 2.0], size=k),
                     latency_s=float(rng.uniform(0.0, 2.0)), cap_Bps=cap, on_done=on_done)

    def on_done(_f, _t):
        if chained["left"] > 0:
            chained["left"] -= 1
            add()

    for step in range(8):
        for _ in range(25):
            add()
        eng.advance(step * 3.0)
    eng.run()
    eng.check_all_done()
    recs = sorted((r.flow_id, r.start_s, r.end_s) for r in eng.flow_records)
    return recs, eng.link_bytes.copy(), eng


@pytest.mark.parametrize("use_numba", [False, True] if numba_available() else [False])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_engine_incremental_equals_full(seed, use_numba):
    inc, inc_bytes, e_inc = _run_scenario(seed, True, use_numba)
    full, full_bytes, e_full = _run_scenario(seed, False, use_numba)
    assert len(inc) == len(full) == e_inc.num_flows
    assert [r[0] for r in inc] == [r[0] for r in full]
    np.testing.assert_allclose([r[2] for r in inc], [r[2] for r in full], rtol=1e-12, atol=0)
    np.testing.assert_allclose([r[1] for r in inc], [r[1] for r in full], rtol=1e-12, atol=0)
    np.testing.assert_allclose(inc_bytes, full_bytes, rtol=1e-12, atol=1e-9)
    assert e_inc.recomputes == e_full.recomputes
    # the point of it: fewer flows re-solved (120 links, few links per flow: many components)
    assert e_inc.resolved_flows < e_full.resolved_flows


def test_submit_many_equals_one_submit_per_request():
    """A batch (pipeline sends plus collectives) gives the same completion times and records as
    one submit per request, with the engine's reference (full re-solve) path."""
    topo = pytest.importorskip("topo")
    import netsim
    from netsim import CollectiveRequest as Req

    t = topo.build("spectrum-x", gpus=32, nvlink_bandwidth_Bps=450e9)
    reqs = [Req("send", (g, g + 8), 48 << 20, tag=f"pp{g}") for g in range(8)]
    reqs += [Req("send", (g + 16, g + 8), 48 << 20, tag=f"pp-back{g}") for g in range(8)]
    reqs += [Req("all_reduce", (0, 8, 16, 24), 64 << 20, tag="dp"),
             Req("all_gather", tuple(range(8)), 16 << 20, tag="tp"),
             Req("send", (3, 3 + 24), 0, tag="empty")]

    def run(batch: bool, incremental: bool):
        net = netsim.make_backend("flow", t, check_invariants=True)
        net.engine.incremental = incremental
        ends: list[float] = []
        if batch:
            net.submit_many(reqs[:10], 0.0, ends.append)
            net.submit_many(reqs[10:], 1e-4, ends.append)
        else:
            for r in reqs[:10]:
                net.submit(r, 0.0, ends.append)
            for r in reqs[10:]:
                net.submit(r, 1e-4, ends.append)
        net.run_until_idle()
        recs = sorted((r.tag, r.algorithm, r.start_s, r.end_s) for r in net.records)
        return ends, recs

    ref_ends, ref_recs = run(False, False)
    assert len(ref_recs) == len(reqs) and all(math.isfinite(r[3]) for r in ref_recs)
    for batch, inc in ((True, False), (True, True), (False, True)):
        ends, recs = run(batch, inc)
        assert ends == ref_ends          # bit for bit, same order
        assert recs == ref_recs


def test_submit_many_validates_before_starting_any():
    topo = pytest.importorskip("topo")
    import netsim
    from netsim import CollectiveRequest as Req
    from netsim.errors import NetsimError

    net = netsim.make_backend("flow", topo.build("spectrum-x", gpus=16, nvlink_bandwidth_Bps=450e9))
    with pytest.raises(NetsimError):
        net.submit_many([Req("send", (0, 8), 1 << 20), Req("send", (0, 99), 1 << 20)], 0.0, lambda t: None)
    assert net.engine.num_flows == 0


def test_keep_records_off_keeps_no_records_and_same_times():
    topo = pytest.importorskip("topo")
    import netsim
    from netsim import CollectiveRequest as Req

    t = topo.build("spectrum-x", gpus=16, nvlink_bandwidth_Bps=450e9)
    reqs = [Req("send", (g, g + 8), 8 << 20) for g in range(8)] + [Req("all_reduce", (0, 8), 8 << 20)]
    ends = {}
    for keep in (True, False):
        net = netsim.make_backend("flow", t, keep_records=keep)
        got: list[float] = []
        net.submit_many(reqs, 0.0, got.append)
        net.run_until_idle()
        ends[keep] = got
        assert len(net.records) == (len(reqs) if keep else 0)
    assert ends[True] == ends[False] and len(ends[False]) == len(reqs)
