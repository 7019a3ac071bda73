"""sim.fastpath (the analytical backend without the event loop) against sim.engine, the reference.

Each case simulates one iteration twice, simulate(fast_path=False) (events) and the default (which
must take the fast path), and asserts the same iteration time, per-stage split, per-kind exposed
time, stage-0 layer rows, communication log and trace entries (rel 1e-9; quantities that are zero in
one run within 1e-12 of the iteration time)."""

from __future__ import annotations

import math

import pytest

from sim.commands import _row_key_for, build_inputs, open_job_db
from sim.simulation import simulate

REL = 1e-9


def _close(a: float, b: float, scale: float) -> bool:
    return math.isclose(a, b, rel_tol=REL, abs_tol=1e-12 * scale)


def _run_both(job: dict, **kw):
    workload, topology, gpu = build_inputs(job)
    db = open_job_db(job)
    args = dict(gpu=gpu, network="analytical", db=db, row_key=_row_key_for(workload), **kw)
    ref = simulate(workload, topology, fast_path=False, **args)
    fast = simulate(workload, topology, **args)
    return ref, fast


def _assert_split_sums(rep) -> None:
    """Each stage's compute + exposed + overhead + bubble is the iteration time (sim.engine's contract)."""
    T = rep.iteration_time_s
    for s in rep.stages:
        total = s["compute_s"] + sum(s["exposed_comm_s"].values()) + s["overhead_s"] + s["bubble_s"]
        assert _close(total, T, T), (s["stage"], total, T)


def _assert_same(ref, fast) -> None:
    assert ref.meta["engine"].startswith("events")
    assert fast.meta["engine"] == "arithmetic (sim.fastpath)"
    T = ref.iteration_time_s
    assert T > 0
    assert _close(fast.iteration_time_s, T, T)
    _assert_split_sums(fast)
    for key in ("compute_s", "bubble_s", "overhead_s", "overlap_slowdown_s"):
        assert _close(getattr(fast, key), getattr(ref, key), T), key
    _assert_split_sums(ref)
    assert set(fast.exposed_comm_s) == set(ref.exposed_comm_s)
    for k, v in ref.exposed_comm_s.items():
        assert _close(fast.exposed_comm_s[k], v, T), k
    assert set(fast.exposed_by_group_kind_s) == set(ref.exposed_by_group_kind_s)
    for k, v in ref.exposed_by_group_kind_s.items():
        assert _close(fast.exposed_by_group_kind_s[k], v, T), k
    assert len(fast.stages) == len(ref.stages)
    for a, b in zip(ref.stages, fast.stages):
        assert (a["stage"], a["rank"], a["gpu"]) == (b["stage"], b["rank"], b["gpu"])
        for key in ("compute_s", "overhead_s", "overlap_slowdown_s", "bubble_s", "busy_until_s"):
            assert _close(b[key], a[key], T), (a["stage"], key)
        for k, v in a["exposed_comm_s"].items():
            assert _close(b["exposed_comm_s"][k], v, T), (a["stage"], k)
    assert fast.meta["estimated_collectives"] == ref.meta["estimated_collectives"]
    assert fast.meta["network_collectives"] == ref.meta["network_collectives"] == 0
    assert fast.meta["isolated_kinds"] == ref.meta["isolated_kinds"]
    # EndToEnd.csv rows (stage 0's representative)
    assert set(fast.layers) == set(ref.layers)
    for row, a in ref.layers.items():
        b = fast.layers[row]
        for field in ("compute_s", "exposed_s", "comm_s", "comm_bytes"):
            for col, v in getattr(a, field).items():
                assert _close(getattr(b, field)[col], v, T), (row, field, col)
        assert b.comm_kind == a.comm_kind, row
    # every communication operation (the fast path logs them stage by stage, the engine by time)
    assert len(fast.collectives) == len(ref.collectives)

    def key(c):
        return (c["stage"], c["group"], c["name"], c["start_s"])
    for a, b in zip(sorted(ref.collectives, key=key), sorted(fast.collectives, key=key)):
        for f in ("stage", "rank", "group", "report_group", "name", "collective", "size_bytes", "group_size",
                  "peer_stage", "layer", "phase", "blocking", "timing"):
            assert a[f] == b[f], (f, a, b)
        for f in ("start_s", "end_s", "exposed_s"):
            assert _close(b[f], a[f], T), (f, a, b)


def _assert_same_trace(ref, fast) -> None:
    T = ref.iteration_time_s

    def key(e):
        return (e[0], e[1], round(e[3] / T, 9), e[2], e[5])
    a_ev, b_ev = sorted(ref.trace, key=key), sorted(fast.trace, key=key)
    assert len(a_ev) == len(b_ev) > 0
    for a, b in zip(a_ev, b_ev):
        assert a[:3] == b[:3] and a[5] == b[5] and a[6] == b[6], (a, b)
        assert _close(b[3], a[3], T) and _close(b[4], a[4], T), (a, b)


def _job(model: str, **plan) -> dict:
    base = {"micro_batch_size": 1, "seq_length": 1024}
    base.update(plan)
    return {"model": model, "plan": base, "fabric": "spectrum-x", "network": "analytical"}


NATIVE = {
    # 1F1B, GA 8, sequence parallel, distributed optimizer (the built-in example)
    "1f1b_tp4_pp2_dp4": _job("aicb-7", tp=4, pp=2, dp=4, global_batch_size=32, seq_length=4096,
                             sequence_parallel=True, distributed_optimizer=True),
    # interleaved 1F1B (vpp 2), uneven first/last stages, micro-batches not a multiple of pp,
    # no device sync after pipeline p2p (overlap_p2p_comm; see test_fast_path_device_sync_split)
    "vpp2_pp4_uneven": _job("aicb-7", tp=2, pp=4, vpp=2, dp=2, global_batch_size=20, num_layers_first_stage=8,
                            num_layers_last_stage=8, overlap_p2p_comm=True),
    # MoE: expert parallel 4 inside TP 2 x DP 4, pipeline 2
    "moe_ep4_pp2": _job("qwen3-30b-a3b", tp=2, ep=4, pp=2, dp=4, global_batch_size=16, sequence_parallel=True),
    # context parallel, no DP overlap at all
    "cp2_no_overlap": _job("llama3-8b", tp=2, cp=2, pp=2, dp=2, global_batch_size=8, overlap_grad_reduce=False,
                           overlap_param_gather=False),
    # TP communication overlap (the contention model's SM term), data parallel only across servers
    "tp_overlap_dp8": _job("llama2-7b", tp=8, dp=8, global_batch_size=32, sequence_parallel=True,
                           tp_comm_overlap=True),
    # deep pipeline, pp 8, many micro-batches
    "pp8_ga32": _job("gpt-1.7b", tp=1, pp=8, dp=2, global_batch_size=64),
    # DeepSpeed ZeRO-3 (parameter gathers waited by later ops), one stage: blocking cross-stage op of size 1
    "deepspeed_zero3": _job("llama2-7b", framework="deepspeed", zero_stage=3, tp=1, dp=8, global_batch_size=16),
    # DeepSpeed ZeRO-1 with a pipeline
    "deepspeed_zero1_pp2": _job("gpt-1.7b", framework="deepspeed", zero_stage=1, tp=2, pp=2, dp=2,
                                global_batch_size=8),
    # Mixtral, EP 8 across servers, full recompute, fp8
    "mixtral_ep8_recompute_fp8": _job("mixtral-8x7b", tp=2, ep=8, pp=2, dp=8, global_batch_size=32,
                                      sequence_parallel=True, distributed_optimizer=True, recompute="full",
                                      dtype="fp8"),
}


@pytest.mark.parametrize("name", sorted(NATIVE))
def test_fast_path_equals_engine_native(name):
    ref, fast = _run_both(NATIVE[name])
    _assert_same(ref, fast)


@pytest.mark.parametrize("overheads,contention", [(False, False), (True, False), (False, True)])
def test_fast_path_equals_engine_model_switches(overheads, contention):
    ref, fast = _run_both(NATIVE["vpp2_pp4_uneven"], overheads=overheads, contention=contention)
    _assert_same(ref, fast)


def test_fast_path_device_sync_split():
    """Interleaved schedule with megatron-core's batched p2p sync: at a device sync a deferred gradient
    bucket (arithmetically timed) ends after a pipeline send that is still in flight at the engine's
    event time. Both engines wait the bucket, then block on the send from the stage's own clock (the
    engine once blocked from the earlier event time, charging the overlap twice): the whole split
    equals, and sums to the iteration time in both."""
    job = _job("aicb-7", tp=2, pp=4, vpp=2, dp=2, global_batch_size=20, num_layers_first_stage=8,
               num_layers_last_stage=8)
    ref, fast = _run_both(job)
    _assert_same(ref, fast)


def test_fast_path_trace_equals_engine():
    ref, fast = _run_both(NATIVE["1f1b_tp4_pp2_dp4"], trace=True)
    _assert_same(ref, fast)
    _assert_same_trace(ref, fast)


@pytest.mark.parametrize("name", ["microAllReduce.txt", "aicb_gpt7b_128gpu_tp4_ga8.txt",
                                  pytest.param("workload_analytical.txt", marks=pytest.mark.slow)])
def test_fast_path_equals_engine_simai_files(shared_dir, name):
    job = {"workload": str(shared_dir / "data" / "simai_examples" / name), "network": "analytical"}
    ref, fast = _run_both(job, trace=name != "workload_analytical.txt")
    _assert_same(ref, fast)
    if name != "workload_analytical.txt":
        _assert_same_trace(ref, fast)


def test_fast_path_not_taken_where_events_are_needed():
    from types import SimpleNamespace

    from sim.fastpath import applies
    job = dict(_job("gpt-1.7b", tp=1, pp=2, dp=1, global_batch_size=2), network="flow")
    workload, topology, gpu = build_inputs(job)
    rep = simulate(workload, topology, gpu=gpu, network="flow")
    assert rep.meta["engine"] == ("events (sim.engine): the network backend has contention (events decide who "
                                  "shares a link)")
    slow = SimpleNamespace(contention_free=True, stage_factors=[1.0, 1.5])
    assert applies(slow) == "stragglers slow some stages"
    assert applies(SimpleNamespace(contention_free=True, stage_factors=[1.0, 1.0])) is None


def test_fast_path_known_iteration_time():
    """Independent totals: one stage, 2 micro-batches; per micro-batch a kernel f (1 ms), a non-blocking
    TP all-reduce A overlapping a kernel g (0.1 ms) and waited by kernel h (2 ms), a backward kernel
    (3 ms) and a blocking TP all-reduce B. T = 2 * (6.1 ms + max(0, t_A - 0.1 ms) + t_B) with t_A, t_B
    the analytical backend's idle-network times."""
    from helpers_sim import comp, model

    import netsim
    from sim.engine import Engine
    from sim.fastpath import run_fast
    from sim.inputs import make_topology
    from sim.placement import place
    from workload_gen.plan import ParallelPlan
    from workload_gen.workload import ChunkProgram, CommOp, StageProgram, Workload

    a = CommOp("A", "all_reduce", "tp", 64 << 20, blocking=False, wait_op="h")
    b = CommOp("B", "all_reduce", "tp", 1 << 20, phase="bwd")
    fwd = [comp("f", 1e-3), a, comp("g", 0.1e-3), comp("h", 2e-3)]
    bwd = [comp("k", 3e-3, phase="bwd", variant="dgrad"), b]
    plan = ParallelPlan(world_size=8, tp=8, global_batch_size=2, micro_batch_size=1)
    w = Workload(model=model(), plan=plan, stages=[StageProgram(0, [ChunkProgram(0, (0,), fwd, bwd)])],
                 schedule="none", num_microbatches=2)
    topo = make_topology("spectrum-x", gpus=8)
    net = netsim.make_backend("analytical", topo)
    gpus = tuple(range(8))
    t_a = net.estimate(netsim.CollectiveRequest("all_reduce", gpus, 64 << 20))
    t_b = net.estimate(netsim.CollectiveRequest("all_reduce", gpus, 1 << 20))
    assert t_a > 0.1e-3        # A is exposed past g
    res = run_fast(Engine(w, place(plan, topo, None), topo, net, lambda op: op.time_s))
    expected = 2 * (6.1e-3 + (t_a - 0.1e-3) + t_b)
    assert res.iteration_time_s == pytest.approx(expected, rel=1e-12)
    st = res.stages[0]
    assert st.compute_s == pytest.approx(2 * 6.1e-3, rel=1e-12)
    assert st.exposed_s["TP"] == pytest.approx(2 * (t_a - 0.1e-3 + t_b), rel=1e-12)
    assert st.bubble_s == 0.0 and st.overhead_s == 0.0
    # the non-blocking A is a record object, the blocking B sim.engine's (info, start, done, exposed) tuple
    assert [type(h) is tuple for h in res.comm_log] == [False, True, False, True]
    assert [_logged(h)[0] for h in res.comm_log] == ["A", "B", "A", "B"]
    starts = [_logged(h)[1] for h in res.comm_log]
    assert starts[0] == pytest.approx(1e-3, rel=1e-12)              # A: after f
    assert starts[1] == pytest.approx(6.1e-3 + t_a - 0.1e-3, rel=1e-12)   # B: after f, A, h, k
    assert [_logged(h)[3] for h in res.comm_log[:2]] == [pytest.approx(t_a - 0.1e-3, rel=1e-12),
                                                         pytest.approx(t_b, rel=1e-12)]
    assert res.bypassed == 4 and res.comm_count == 0


def test_fast_path_kernel_after_blocking_collective_is_timed_by_the_contention_model():
    """With the contention model, a blocking collective stays listed in flight until the next kernel
    starts (sim.engine's rule, which the fast path keeps without listing it): that kernel is timed by
    the model, its time is end - start ((t0 + d) - t0, which differs from d in the last bits for the
    durations chosen here); the kernel after it has nothing in flight and takes exactly d. One stage,
    one micro-batch: f, blocking TP all-reduce B, g, h; no host model."""
    from helpers_sim import comp, model

    import netsim
    from compute_db import open_db
    from sim.contention import ContentionModel
    from sim.engine import Engine
    from sim.fastpath import run_fast
    from sim.inputs import make_topology
    from sim.placement import place
    from workload_gen.plan import ParallelPlan
    from workload_gen.workload import ChunkProgram, CommOp, StageProgram, Workload

    topo = make_topology("spectrum-x", gpus=8)
    net = netsim.make_backend("analytical", topo)
    t_b = net.estimate(netsim.CollectiveRequest("all_reduce", tuple(range(8)), 1 << 20))
    d_f = 1e-3
    t0 = d_f + t_b                         # g starts when B is done

    def inexact(t: float) -> float:
        """A duration d (about 0.1 ms) with (t + d) - t != d."""
        d = next((k * 1e-4 / 7 for k in range(7, 200) if (t + k * 1e-4 / 7) - t != k * 1e-4 / 7), None)
        assert d is not None
        return d
    d_g = inexact(t0)
    t1 = t0 + d_g
    d_h = inexact(t1)
    fwd = [comp("f", d_f), CommOp("B", "all_reduce", "tp", 1 << 20), comp("g", d_g), comp("h", d_h)]
    plan = ParallelPlan(world_size=8, tp=8, global_batch_size=1, micro_batch_size=1)
    w = Workload(model=model(), plan=plan, stages=[StageProgram(0, [ChunkProgram(0, (0,), fwd, [])])],
                 schedule="none", num_microbatches=1)
    cm = ContentionModel(open_db().gpu("H100"))
    res = run_fast(Engine(w, place(plan, topo, None), topo, net, lambda op: op.time_s, trace=True, contention=cm))
    durs = {name: dur for _s, thread, name, _t, dur, _c, _a in res.trace if thread == "compute"}
    assert durs["f"] == d_f
    assert durs["g"] == t1 - t0 != d_g
    assert durs["h"] == d_h != (t1 + d_h) - t1
    assert res.iteration_time_s == t1 + d_h
    assert res.stages[0].compute_s == (d_f + (t1 - t0)) + d_h
    assert res.comm_log == [res.comm_log[0]] and res.comm_log[0][1:] == (d_f, t0, t0 - d_f)


def _logged(h) -> tuple:
    """(name, start_s, done_s, exposed_s) of a communication-log entry: a (info, start, done, exposed)
    tuple (a blocking arithmetically timed op) or a record / Handle with those fields."""
    if type(h) is tuple:
        return (h[0].name, *h[1:])
    return h.name, h.start_s, h.done_s, h.exposed_s


def _fast(h) -> bool:
    return type(h) is tuple or h.fast


def test_no_cyclic_gc_restores_the_collector_state():
    import gc

    from sim.fastpath import no_cyclic_gc
    assert gc.isenabled()
    with no_cyclic_gc():
        assert not gc.isenabled()
    assert gc.isenabled()
    gc.disable()
    try:
        with no_cyclic_gc():
            pass
        assert not gc.isenabled()      # a caller's disabled collector stays disabled
    finally:
        gc.enable()
    with pytest.raises(ValueError), no_cyclic_gc():
        raise ValueError("x")
    assert gc.isenabled()


def test_fewer_gc_passes_raises_the_threshold_and_restores_it_on_error():
    import gc

    from sim.fastpath import fewer_gc_passes
    before = gc.get_threshold()
    with pytest.raises(RuntimeError):
        with fewer_gc_passes(12_345):
            assert gc.get_threshold() == (12_345, *before[1:])
            assert gc.isenabled()            # still collecting, only less often
            raise RuntimeError("boom")
    assert gc.get_threshold() == before


@pytest.mark.parametrize("source", ["simai-gpt7b", "native-contention"])
def test_fast_path_rows_are_the_rows_of_its_log(shared_dir, monkeypatch, source):
    """The fast path builds StepReport.collectives itself (per-op fixed columns + times): the rows,
    their field order and values, are exactly sim.simulation._collective_rows of its communication log."""
    import sim.fastpath as fastpath
    from sim.simulation import _collective_rows
    got = {}
    run_fast = fastpath.run_fast

    def spy(eng):
        got["res"], got["eng"] = run_fast(eng), eng
        return got["res"]
    monkeypatch.setattr(fastpath, "run_fast", spy)
    if source == "simai-gpt7b":
        job = {"workload": str(shared_dir / "data" / "simai_examples" / "aicb_gpt7b_128gpu_tp4_ga8.txt"),
               "network": "analytical"}
    else:
        job = NATIVE["vpp2_pp4_uneven"]
    workload, topology, gpu = build_inputs(job)
    rep = simulate(workload, topology, gpu=gpu, network="analytical", db=open_job_db(job),
                   row_key=_row_key_for(workload))
    res, eng = got["res"], got["eng"]
    assert rep.meta["engine"] == "arithmetic (sim.fastpath)"
    want = _collective_rows(res.comm_log, res.rep_ranks, eng.row_key)
    assert len(want) == len(res.comm_log) > 0
    if source == "native-contention":     # pipeline sends and cross-stage collectives among them
        assert any(not _fast(h) for h in res.comm_log)
    assert [list(r.items()) for r in rep.collectives] == [list(r.items()) for r in want]
    assert rep.meta["estimated_collectives"] >= sum(1 for h in res.comm_log if _fast(h)) > 0
