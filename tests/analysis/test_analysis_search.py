"""Strategy search: enumeration, pruning reasons, validity of every reported plan, outputs."""

from __future__ import annotations

import csv

import pytest

from sim.analysis.search import (
    CSV_FIELDS,
    SearchSpace,
    enumerate_plans,
    pareto_front,
    search,
    write_pareto_png,
    write_ranked_csv,
    write_rejections_csv,
)
from workload_gen.plan_validation import validate_plan
from workload_gen.zoo import get_model

GiB = 1024 ** 3


@pytest.fixture(scope="module")
def small_search():
    m = get_model("llama3-70b")
    space = SearchSpace(tp=(1, 2, 4, 8), pp=(1, 2, 4, 8), cp=(1,), micro_batch_size=(1,), sequence_parallel=(True,),
                        recompute=("none", "full"), full_recompute_fractions=(1.0,))
    return m, search(m, 64, 64, gpu="H100", seq_length=4096, space=space, gmi_error_GiB=6, confirm=False)


def test_enumeration_respects_sizes():
    m = get_model("llama3-70b")
    plans = enumerate_plans(m, 1024, 1024, 8192)
    assert len(plans) >= 1000
    for p in plans[::97]:
        assert p.world_size % (p.tp * p.cp * p.pp) == 0
        assert p.global_batch_size % (p.micro_batch_size * p.dp) == 0
        assert (p.vpp == 1 or p.pp > 1) and (not p.sequence_parallel or p.tp > 1)
    assert {p.recompute for p in plans} == {"none", "selective", "full"}
    assert any(p.distributed_optimizer for p in plans) and any(not p.distributed_optimizer for p in plans)


def test_every_reported_plan_is_valid_and_fits(small_search):
    m, res = small_search
    assert res.evaluated == len(res.candidates) > 50
    assert res.ranked, "some plan must fit"
    budget = 80 * GiB - 6 * GiB
    for c in res.ranked:
        validate_plan(m, c.plan)
        assert c.peak_mem_with_reserved_bytes <= budget
    times = [c.iteration_time_s for c in res.ranked]
    assert times == sorted(times)
    best = res.best
    assert best.tokens_per_s_per_gpu > 0 and 0 < best.mfu_6nd_with_attn < 1


def test_rejections_name_a_reason(small_search):
    m, res = small_search
    for c in res.candidates:
        if not c.feasible:
            assert c.reason.startswith(("memory:", "invalid:"))
    # tp=1 pp=1 of a 70B model cannot hold its model states on one GPU -> a rejected family
    fam = "tp=1 pp=1 cp=1"
    assert fam in res.rejected_families
    assert "over memory" in res.rejected_families[fam] and "GiB" in res.rejected_families[fam]


def test_pareto_front_is_non_dominated(small_search):
    _, res = small_search
    front = pareto_front(res.candidates)
    assert front
    for f in front:
        for c in res.ranked:
            dominated = (c.peak_mem_with_reserved_bytes < f.peak_mem_with_reserved_bytes
                         and c.iteration_time_s < f.iteration_time_s)
            assert not dominated


def test_outputs(small_search, tmp_path):
    _, res = small_search
    write_ranked_csv(res, str(tmp_path / "ranked.csv"))
    write_rejections_csv(res, str(tmp_path / "rej.csv"))
    write_pareto_png(res, str(tmp_path / "p.png"))
    rows = list(csv.DictReader((tmp_path / "ranked.csv").open()))
    assert tuple(rows[0].keys()) == CSV_FIELDS
    assert len(rows) == len(res.ranked) and rows[0]["rank"] == "1"
    assert (tmp_path / "p.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert (tmp_path / "rej.csv").read_text().startswith("family,reason\n")
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".tmp_")]


def test_moe_search_covers_expert_parallelism():
    m = get_model("mixtral-8x7b")
    space = SearchSpace(tp=(1, 2), pp=(1, 2, 4), cp=(1,), ep=(1, 2, 4, 8), etp=(1,), micro_batch_size=(1,),
                        recompute=("none", "full"), optimizer=("distributed",))
    res = search(m, 64, 64, gpu="H100", seq_length=4096, space=space, confirm=False)
    assert res.ranked
    for c in res.ranked[:20]:
        validate_plan(m, c.plan)
    assert {c.plan.ep for c in res.candidates} == {1, 2, 4, 8}


def test_pareto_png_draws_best_at_its_flow_time(small_search, tmp_path, monkeypatch):
    """The best plan is chosen by its flow time; the chart must place it there, not at its screen time."""
    import dataclasses

    import matplotlib.axes

    _, res = small_search
    best = dataclasses.replace(res.ranked[0], flow_iteration_time_s=res.ranked[0].iteration_time_s * 0.9)
    res2 = dataclasses.replace(res, ranked=[best, *res.ranked[1:]])
    calls = []
    orig = matplotlib.axes.Axes.scatter

    def spy(self, x, y, *a, **kw):
        calls.append((list(x), list(y), kw.get("label", "")))
        return orig(self, x, y, *a, **kw)
    monkeypatch.setattr(matplotlib.axes.Axes, "scatter", spy)
    write_pareto_png(res2, str(tmp_path / "p.png"))
    star = [c for c in calls if c[2].startswith("best:")]
    assert star and star[0][1] == [pytest.approx(best.iteration_time_s * 0.9)]
    assert "(flow " in star[0][2]
    assert any(c[2].startswith("top 1 re-timed by flow") for c in calls)


def test_uneven_pipeline_full_recompute_reaches_every_layer():
    """DeepSeek-V3's 61 layers on pp 16 -> [2, 14 x 4, 3]: 'full' must include recomputing all 4 layers
    of the middle stages, not only as many as the smallest stage holds."""
    from sim.analysis.memory import full_recompute_layers
    from sim.analysis.stagefacts import layer_assignment
    m = get_model("deepseek-v3")
    space = SearchSpace(tp=(1,), pp=(16,), cp=(1,), ep=(64,), micro_batch_size=(1,), sequence_parallel=(False,),
                        optimizer=("distributed",), recompute=("full",))
    plans = enumerate_plans(m, 2048, 4096, 4096, space)
    assert sorted(p.recompute_num_layers for p in plans) == [2, 4]
    full = next(p for p in plans if p.recompute_num_layers == 4)
    validate_plan(m, full)
    for stage in layer_assignment(m, full):
        for chunk in stage:
            assert full_recompute_layers(full, chunk) == set(chunk)


def test_fit_verdict_counts_the_cuda_context():
    """A plan whose reserved peak fits the device only without the CUDA context is rejected (with
    gmi_error 0 the search agrees with `clustersim memory`, which adds the context)."""
    import dataclasses

    from sim.analysis.memory import analyze_memory
    from sim.analysis.steptime import hardware_from_gpu
    from workload_gen.plan import ParallelPlan
    m = get_model("llama3-8b")
    plan = ParallelPlan(world_size=8, tp=2, pp=2, sequence_parallel=True, global_batch_size=8, seq_length=4096,
                        distributed_optimizer=True)
    rep = analyze_memory(m, plan)
    space = SearchSpace(tp=(2,), pp=(2,), vpp=(1,), cp=(1,), sequence_parallel=(True,), micro_batch_size=(1,),
                        recompute=("none",), optimizer=("distributed",))
    for hbm, fits in ((rep.peak_reserved_bytes + rep.cuda_context_bytes // 2, False),
                      (rep.peak_reserved_bytes + rep.cuda_context_bytes, True)):
        hw = dataclasses.replace(hardware_from_gpu("H100"), hbm_bytes=hbm)
        res = search(m, 8, 8, hw=hw, seq_length=4096, space=space, gmi_error_GiB=0, confirm=False)
        assert res.evaluated == 1 and res.candidates[0].plan == plan
        assert res.candidates[0].feasible is fits, res.candidates[0].reason
        assert res.memory_budget_bytes == hbm - rep.cuda_context_bytes
        if not fits:
            assert res.candidates[0].reason.startswith("memory:") and "CUDA context" in res.candidates[0].reason


def test_ranked_csv_rows_rebuild_valid_plans(small_search, tmp_path):
    """Every CSV row carries the whole plan: rebuilt from its columns alone it is the reported plan and
    passes validate_plan."""
    from workload_gen.plan import ParallelPlan
    m, res = small_search
    write_ranked_csv(res, str(tmp_path / "ranked.csv"))
    rows = list(csv.DictReader((tmp_path / "ranked.csv").open()))
    assert len(rows) == len(res.ranked)

    def opt_int(v):
        return int(v) if v else None
    for row, c in zip(rows, res.ranked):
        p = ParallelPlan(
            world_size=int(row["world_size"]), tp=int(row["tp"]), pp=int(row["pp"]), vpp=int(row["vpp"]),
            cp=int(row["cp"]), ep=int(row["ep"]), etp=opt_int(row["etp"]),
            sequence_parallel=row["sequence_parallel"] == "True",
            num_layers_first_stage=opt_int(row["num_layers_first_stage"]),
            num_layers_last_stage=opt_int(row["num_layers_last_stage"]), framework=row["framework"],
            distributed_optimizer=row["distributed_optimizer"] == "True", zero_stage=int(row["zero_stage"]),
            micro_batch_size=int(row["micro_batch_size"]), global_batch_size=int(row["global_batch_size"]),
            seq_length=int(row["seq_length"]), dtype=row["dtype"], recompute=row["recompute"],
            recompute_num_layers=opt_int(row["recompute_num_layers"]),
            flash_attention=row["flash_attention"] == "True", grad_reduce_dtype=row["grad_reduce_dtype"],
            overlap_grad_reduce=row["overlap_grad_reduce"] == "True",
            overlap_param_gather=row["overlap_param_gather"] == "True",
            overlap_p2p_comm=row["overlap_p2p_comm"] == "True")
        assert p == c.plan and p.dp == int(row["dp"])
        validate_plan(m, p)
        assert int(row["peak_mem_with_reserved_bytes"]) <= res.memory_budget_bytes


def test_pareto_front_is_complete(small_search):
    """Every feasible plan off the front is dominated (no faster, no smaller) by a front member."""
    _, res = small_search
    front = pareto_front(res.candidates)
    ids = {id(f) for f in front}
    for c in res.ranked:
        if id(c) in ids:
            continue
        assert any(f.peak_mem_with_reserved_bytes <= c.peak_mem_with_reserved_bytes
                   and f.iteration_time_s <= c.iteration_time_s for f in front)


def test_search_time_equals_the_estimate_with_the_chosen_selective_components():
    """The screen times a plan with the recompute components the user chose (as PerfLLM.run_estimate)."""
    from sim.analysis.memory import MemoryOptions
    from sim.analysis.search import _open_db
    from sim.analysis.steptime import estimate_step, hardware_from_gpu
    m = get_model("llama3-8b")
    space = SearchSpace(tp=(2,), pp=(2,), vpp=(1,), cp=(1,), sequence_parallel=(True,), micro_batch_size=(1,),
                        recompute=("selective",), optimizer=("distributed",))
    sel = ("attn", "mlp")
    res = search(m, 8, 8, seq_length=4096, space=space, confirm=False, mem_options=MemoryOptions(selective=sel))
    best = res.best
    hw = hardware_from_gpu("H100")
    want = estimate_step(m, best.plan, hw, db=_open_db(), selective=sel).iteration_time_s
    assert best.iteration_time_s == pytest.approx(want, rel=1e-12)
    assert want > estimate_step(m, best.plan, hw, db=_open_db(), selective=("attn",)).iteration_time_s


def test_moe_default_expert_tp_tries_one_and_tp():
    """Automatic expert-TP covers Megatron's default (etp = tp) as well as etp = 1; dense plans have none."""
    m = get_model("mixtral-8x7b")
    space = SearchSpace(tp=(1, 2, 4), pp=(2,), cp=(1,), ep=(1, 2), micro_batch_size=(1,), recompute=("none",),
                        optimizer=("distributed",))
    plans = enumerate_plans(m, 64, 64, 4096, space)
    assert {(p.tp, p.etp) for p in plans} == {(1, 1), (2, 1), (2, 2), (4, 1), (4, 4)}
    assert {p.etp for p in enumerate_plans(get_model("llama3-8b"), 16, 16, 4096,
                                           SearchSpace(tp=(2,), pp=(1,), cp=(1,)))} == {None}


def test_uneven_pipeline_with_vpp_in_the_search_space():
    """126 layers on pp 16: the plain uneven split (7, 8 x 14, 7) cannot take vpp 2; the search offers the
    megatron-core-valid uneven split with every stage divisible by vpp: (6, 8 x 14, 8)."""
    from sim.analysis.search import pipeline_split, pipeline_split_vpp
    from workload_gen.plan_validation import validate_plan
    assert pipeline_split(126, 16) == (7, 7, 8)
    assert pipeline_split_vpp(126, 16, 2) == (6, 8, 8)
    assert pipeline_split_vpp(126, 16, 4) is None           # 14 layers left cannot split in fours
    assert pipeline_split_vpp(128, 16, 4) == (None, None, 8)  # even split kept when it divides
    m = get_model("llama3-405b")
    space = SearchSpace(tp=(8,), pp=(16,), vpp=(1, 2), cp=(1,), sequence_parallel=(True,), micro_batch_size=(1,),
                        recompute=("none",), optimizer=("distributed",))
    plans = enumerate_plans(m, 1024, 1024, 8192, space)
    got = {(p.vpp, p.num_layers_first_stage, p.num_layers_last_stage) for p in plans}
    assert got == {(1, 7, 7), (2, 6, 8)}
    for p in plans:
        validate_plan(m, p)
