"""Stragglers (issue 14 item 3): slowed kernels of one rank, checked against hand calculations."""

from __future__ import annotations

import numpy as np
import pytest
from helpers_sim import FakeTopo, comp, model, single_stage

from sim.engine import Engine
from sim.errors import SimError
from sim.idealnet import IdealNetwork
from sim.placement import place
from sim.straggler import (
    exposed_straggler_s,
    make_spec,
    parse_straggler,
    parse_straggler_dist,
    rank_factors,
    stage_factors,
    straggler_section,
)
from workload_gen.plan import ParallelPlan
from workload_gen.workload import ChunkProgram, CommOp, StageProgram, Workload


def run(w, net=None, factors=None):
    topo = FakeTopo(max(64, w.plan.world_size))
    return Engine(w, place(w.plan, topo), topo, net or IdealNetwork(), lambda op: op.time_s,
                  stage_factors=factors).run()


def _dp_workload(m: int = 3):
    """pp = 1, tp = 1, dp = 2: forward 2 s, backward 3 s per micro-batch, then a blocking 0.5 s DP
    all-reduce and a 0.25 s optimizer step (no overlap of the gradient reduction)."""
    end = [CommOp("grad_ar", "all_reduce", "dp", 1000, phase="iteration_end"),
           comp("opt", 0.25, "iteration_end", variant="step")]
    return single_stage([comp("f", 2.0)], [comp("b", 3.0, "bwd", variant="dgrad")], end, dp=2, m=m)


def test_dp_straggler_adds_its_compute_share_exactly():
    # healthy: 3 x (2 + 3) + 0.5 + 0.25 = 15.75 s; rank 1 at 1.2x: every kernel on the critical path
    # (the healthy replica waits in the all-reduce) -> + 0.2 x (15 + 0.25) s
    w = _dp_workload()
    net = IdealNetwork(lambda req: 0.5)
    healthy = run(w, net)
    spec = make_spec(["1=1.2"])
    pl = place(w.plan, FakeTopo(64))
    f = stage_factors(rank_factors(spec, 2), pl)
    assert f == [1.2]
    slow = run(w, IdealNetwork(lambda req: 0.5), f)
    assert healthy.iteration_time_s == pytest.approx(15.75, rel=1e-12)
    compute = 3 * (2.0 + 3.0) + 0.25
    assert slow.iteration_time_s - healthy.iteration_time_s == pytest.approx(0.2 * compute, rel=1e-9)
    assert slow.stages[0].compute_s == pytest.approx(1.2 * compute, rel=1e-12)


def test_tp_peers_wait_for_the_slow_rank_at_each_tp_collective():
    # tp = 2: f (1 s) -> blocking TP all-reduce -> g (2 s) -> TP all-reduce; straggler 1.5x:
    # its peer waits 0.5 s at the first and 1 s at the second, per micro-batch (2 micro-batches)
    fwd = [comp("f", 1.0), CommOp("ar1", "all_reduce", "tp", 100), comp("g", 2.0), CommOp("ar2", "all_reduce", "tp", 100)]
    w = single_stage(fwd, [comp("b", 0.0, "bwd")], dp=1, tp=2, m=2)
    r = run(w, IdealNetwork(lambda req: 0.1), [1.5])
    assert r.stages[0].straggler_wait_s["TP"] == pytest.approx(2 * (0.5 + 1.0), rel=1e-12)
    assert r.iteration_time_s == pytest.approx(2 * (1.5 + 0.1 + 3.0 + 0.1), rel=1e-12)


def _uneven_pipeline(m: int, tf0: float, tb0: float, tf1: float, tb1: float) -> Workload:
    plan = ParallelPlan(world_size=2, pp=2, global_batch_size=m, micro_batch_size=1)
    times = [(tf0, tb0), (tf1, tb1)]
    stages = [StageProgram(stage=s, chunks=[ChunkProgram(0, (s,), [comp("f", tf)],
                                                         [comp("b", tb, "bwd", variant="dgrad")])])
              for s, (tf, tb) in enumerate(times)]
    return Workload(model=model(), plan=plan, stages=stages, schedule="1f1b", num_microbatches=m)


def test_pipeline_straggler_off_the_bottleneck_costs_less_than_its_compute():
    # 1F1B, 2 stages, stage 1 the bottleneck (1 + 2 s per micro-batch), stage 0 light (0.5 + 1 s).
    # Hand: T = tf0 + m (tf1 + tb1) + tb0 while stage 0 keeps up; stage 0 at 1.2x only lengthens the
    # fill and drain: + 0.2 (tf0 + tb0) = 0.3 s, far below its compute share 0.2 m (tf0 + tb0) = 2.4 s.
    m = 8
    w = _uneven_pipeline(m, 0.5, 1.0, 1.0, 2.0)
    healthy = run(w)
    slow = run(w, None, [1.2, 1.0])
    assert healthy.iteration_time_s == pytest.approx(0.5 + m * 3.0 + 1.0, rel=1e-12)
    assert slow.iteration_time_s - healthy.iteration_time_s == pytest.approx(0.2 * 1.5, rel=1e-9)
    assert slow.iteration_time_s - healthy.iteration_time_s < 0.2 * m * 1.5
    # the same slowdown on the bottleneck stage costs its whole compute share
    slow1 = run(w, None, [1.0, 1.2])
    dt = slow1.iteration_time_s - healthy.iteration_time_s
    assert dt == pytest.approx(0.2 * m * 3.0, rel=1e-9)
    # stage 0 computes the same 1.5 m s from 0 to T and otherwise waits for gradients: its pipeline
    # neighbour's straggling adds dt to that wait (exposed PP); dp = 1 leaves no replica to wait in DP
    e = exposed_straggler_s(healthy, slow1, dp=1)
    assert e["PP"] == pytest.approx(dt, rel=1e-9)
    assert e["DP"] == e["TP"] == 0.0


def test_approximation_named_by_where_the_slow_ranks_sit():
    # tp 2 x pp 2 x dp 2 (rank order tp-cp-ep-dp-pp): ranks 0-3 stage 0, replica = (rank // 2) % 2
    plan = ParallelPlan(world_size=8, tp=2, pp=2, global_batch_size=2, micro_batch_size=1)
    pl = place(plan, FakeTopo(64))
    w = _uneven_pipeline(2, 1.0, 1.0, 1.0, 1.0)
    r = run(w)
    for fixed, exact in ((["1=1.3", "5=1.1"], True), (["1=1.3", "7=1.1"], False), (["0=1.2", "1=1.3"], True)):
        f = rank_factors(make_spec(fixed), 8)
        sec = straggler_section(make_spec(fixed), f, stage_factors(f, pl), r, r, pl)
        assert sec["approximation"].startswith("exact" if exact else "upper bound"), fixed
    assert stage_factors(rank_factors(make_spec(["1=1.3", "7=1.1"]), 8), pl) == [1.3, 1.1]


def test_no_factor_is_bit_identical():
    w = _dp_workload()
    a = run(w, IdealNetwork(lambda req: 0.5))
    b = run(w, IdealNetwork(lambda req: 0.5), [1.0])
    assert a.iteration_time_s == b.iteration_time_s
    assert a.stages[0].straggler_wait_s == {}


def test_simulate_reports_exposed_straggler_time_by_kind():
    """A generated tiny model on a real fabric (analytical network, no overlap, no host model):
    T_slow - T_healthy = 0.2 x the kernel time of the iteration from compute_op_times."""
    from sim.inputs import make_topology
    from sim.simulation import _iter_counts, compute_op_times, simulate
    from workload_gen import generate
    from workload_gen.model import ModelSpec
    tiny = ModelSpec("tiny", num_layers=2, hidden_size=512, num_attention_heads=8, ffn_hidden_size=2048,
                     vocab_size=8192, seq_length=512)
    plan = ParallelPlan(world_size=2, tp=1, pp=1, global_batch_size=4, micro_batch_size=1, seq_length=512,
                        overlap_grad_reduce=False, overlap_param_gather=False)
    w = generate(tiny, plan)
    topo = make_topology("spectrum-x", gpus=8)
    spec = make_spec(["1=1.2"])
    rep = simulate(w, topo, gpu="H100", network="analytical", overheads=False, contention=False, stragglers=spec)
    times, _ = compute_op_times(w, "H100")
    kernel_s = sum(times[id(op)] * n for _, op, n in _iter_counts(w) if not op.is_comm)
    sec = rep.stragglers
    assert sec["iteration_time_s"] == rep.iteration_time_s
    assert sec["iteration_time_s"] - sec["healthy_iteration_time_s"] == pytest.approx(0.2 * kernel_s, rel=1e-9)
    e = sec["exposed_straggler_s"]
    assert e["DP"] == pytest.approx(0.2 * kernel_s, rel=1e-9)     # the healthy replica waits in DP
    assert e["TP"] == e["PP"] == 0.0
    assert sec["stage_factors"] == [1.2]
    assert sec["approximation"].startswith("exact")
    assert rep.to_dict()["stragglers"]["slowest_ranks"] == [{"rank": 1, "factor": 1.2}]


def test_distribution_is_seeded_and_half_lognormal():
    spec = make_spec(dist="lognormal:sigma=0.05,seed=7")
    a, b = rank_factors(spec, 64), rank_factors(spec, 64)
    assert np.array_equal(a, b)
    z = np.random.default_rng(7).standard_normal(64)
    assert np.allclose(a, np.exp(0.05 * np.abs(z)), rtol=0, atol=0)
    assert (a >= 1.0).all()
    fixed = rank_factors(make_spec(["3=2"], "lognormal:sigma=0.05,seed=7"), 64)
    assert fixed[3] == 2.0 and fixed[4] == a[4]


@pytest.mark.parametrize("text,msg", [
    ("3", "expected RANK=FACTOR"), ("x=1.2", "rank 'x' is not an integer"), ("3=0.9", "factor must be"),
    ("3=abc", "is not a number"), ("-1=1.2", "rank must be >= 0")])
def test_bad_straggler_flags(text, msg):
    with pytest.raises(SimError, match=msg):
        parse_straggler(text)


@pytest.mark.parametrize("text,msg", [("normal:sigma=1", "unknown distribution"), ("lognormal:seed=1", "sigma=S is required"),
                                      ("lognormal:sigma=-1", "finite and >= 0"), ("lognormal:sigma=0.1,mu=2", "expected sigma")])
def test_bad_distribution(text, msg):
    with pytest.raises(SimError, match=msg):
        parse_straggler_dist(text)


def test_rank_out_of_range_and_duplicates():
    with pytest.raises(SimError, match="rank out of range"):
        rank_factors(make_spec(["9=1.5"]), 8)
    with pytest.raises(SimError, match="rank 2 given twice"):
        make_spec(["2=1.5", "2=1.1"])
    with pytest.raises(SimError, match="need 1 finite factors >= 1"):
        run(_dp_workload(), None, [0.5])


# ---------------------------------------------------------------- compare / sweep flags
def test_straggler_variant_spec():
    from sim.straggler import parse_variant, with_straggler_variant
    assert parse_variant("healthy=") == ("healthy", {"fixed": [], "dist": None})
    assert parse_variant("two=3=1.2,9=1.5") == ("two", {"fixed": ["3=1.2", "9=1.5"], "dist": None})
    assert parse_variant("both=lognormal:sigma=0.05,seed=1;3=1.5") == (
        "both", {"fixed": ["3=1.5"], "dist": "lognormal:sigma=0.05,seed=1"})
    job = {"stragglers": {"fixed": ["1=1.1"], "dist": None}}
    assert with_straggler_variant(job, "two", {"fixed": ["3=1.2"], "dist": None})["stragglers"] == {
        "fixed": ["1=1.1", "3=1.2"], "dist": None}
    assert with_straggler_variant({"stragglers": None}, "healthy", {"fixed": [], "dist": None})["stragglers"] is None
    with pytest.raises(SimError, match=r"^--straggler-variant 'x': expected NAME=SPEC"):
        parse_variant("x")
    with pytest.raises(SimError, match=r"^--straggler-variant 'bad=3=0.5': --straggler '3=0.5': factor must be"):
        parse_variant("bad=3=0.5")
    with pytest.raises(SimError, match=r"^--straggler-variant two: --straggler: rank 1 given twice$"):
        with_straggler_variant(job, "two", {"fixed": ["1=1.3"], "dist": None})


TINY = "name: tiny\nnum_layers: 2\nhidden_size: 1024\nnum_attention_heads: 8\nffn_hidden_size: 4096\n" \
       "vocab_size: 32000\nseq_length: 1024\n"


def test_compare_straggler_variants(tmp_path, capsys):
    import csv

    from sim.cli import main
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "cmp"
    rc = main(["compare", "-m", str(tmp_path / "tiny.yaml"), "--tp", "4", "--dp", "2", "--global-batch", "4",
               "-t", "spectrum-x", "--gpus", "8", "--straggler-variant", "healthy=",
               "--straggler-variant", "slow=5=1.5", "-o", str(out), "-q"])
    assert rc == 0
    rows = list(csv.DictReader((out / "compare.csv").open()))
    assert [(r["fabric"], r["stragglers"]) for r in rows] == [("spectrum-x", "healthy"), ("spectrum-x", "slow")]
    healthy, slow = rows
    assert list(slow)[-1] == "error" and healthy["straggler_slowdown"] == ""
    # the straggler run's own healthy reference is the healthy variant's time
    assert float(slow["healthy_iteration_time_s"]) == pytest.approx(float(healthy["iteration_time_s"]), rel=1e-5)
    assert float(slow["iteration_time_s"]) > float(healthy["iteration_time_s"])
    assert float(slow["straggler_slowdown"]) == pytest.approx(
        float(slow["iteration_time_s"]) / float(healthy["iteration_time_s"]), rel=1e-5)
    capsys.readouterr()
    assert main(["compare", "--straggler-variant", "a=1=2", "--straggler-variant", "a=", "-o", "-", "-q"]) == 2
    assert capsys.readouterr().err.strip() == "clustersim: error: --straggler-variant: name 'a' given twice"


def test_sweep_with_a_straggler(tmp_path, capsys):
    import csv

    from sim.cli import main
    (tmp_path / "tiny.yaml").write_text(TINY)
    out = tmp_path / "sw.csv"
    rc = main(["sweep", "-m", str(tmp_path / "tiny.yaml"), "--tp", "4", "--global-batch", "4", "-t", "spectrum-x",
               "--grid", "dp=1,2", "--straggler", "0=1.5", "-j", "1", "-o", str(out)])
    assert rc == 0
    rows = list(csv.DictReader(out.open()))
    assert [r["dp"] for r in rows] == ["1", "2"] and all(r["error"] == "" for r in rows)
    for r in rows:
        assert float(r["straggler_slowdown"]) > 1.0
        assert float(r["iteration_time_s"]) > float(r["healthy_iteration_time_s"])
    assert main(["sweep", "-m", "aicb-7", "--straggler", "0=0.5", "-o", str(tmp_path / "x.csv")]) == 2
    assert "--straggler '0=0.5': factor must be" in capsys.readouterr().err
