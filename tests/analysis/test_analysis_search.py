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
