"""PerfLLM-style API: config files (that tool's JSON and clustersim's), results as numbers, one-line errors."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from sim.analysis.perfllm import PerfLLM
from sim.cli import main as cli_main

REPO = Path(__file__).resolve().parents[2]
CFG = REPO / "examples" / "perfllm_configs"
GiB = 1024 ** 3


def _configured(strategy="strategy_llama3_70b_tp8_pp4_cp2.json", model="model_llama3_70b.json",
                system="system_h100.json") -> PerfLLM:
    return PerfLLM().configure(strategy_config=CFG / strategy, model_config=CFG / model, system_config=CFG / system)


def test_example_configs_end_to_end():
    pm = _configured()
    assert pm.plan.tp == 8 and pm.plan.pp == 4 and pm.plan.cp == 2 and pm.plan.vpp == 5
    assert pm.plan.distributed_optimizer and pm.plan.recompute == "selective"
    assert pm.plan.global_batch_size == 64 * 16       # mbs x micro_batch_num x dp
    assert pm.hw.peak_flops == pytest.approx(989.4e12) and pm.hw.hbm_bytes == 80 * GiB
    cost = pm.run_estimate()
    for key in ("duration_time_per_iter_s", "chunk_time_s", "all_tokens_per_iter", "mfu_6nd_with_attn", "mfu",
                "throughput_per_accelerator_tokens_per_s"):
        assert isinstance(cost[key], (int, float)) and cost[key] > 0 and math.isfinite(cost[key]), key
    assert cost["all_tokens_per_iter"] == 1024 * 8192
    assert 0 < cost["mfu_6nd_with_attn"] < 1
    assert cost["throughput_per_accelerator_tokens_per_s"] == pytest.approx(
        1024 * 8192 / cost["duration_time_per_iter_s"] / 1024)
    mem = pm.analysis_mem()
    assert set(mem) >= {"first_stage", "last_stage", "peak_stage"}
    first = mem["first_stage"]
    for key in ("fwd_activation_cache_per_micro_batch_bytes", "peak_activation_mem_in_1F1B_bytes",
                "fwd_peak_allocated_mem_bytes", "bwd_peak_allocated_mem_bytes", "peak_mem_bytes",
                "peak_mem_with_reserved_bytes"):
        assert isinstance(first[key], int) and first[key] > 0, key
    assert first["peak_mem_with_reserved_bytes"] >= first["peak_mem_bytes"]
    assert first["memory_reserved_ratio"] >= 1.0
    assert first["peak_path"].startswith("stage 0 ")
    json.dumps(cost), json.dumps(mem)   # plain numbers and strings only


def test_moe_strategy_with_uneven_stages_and_full_recompute():
    pm = _configured("strategy_mixtral_ep8.json", "model_mixtral_8x7b.json", "system_h100_clustersim.yaml")
    assert pm.plan.ep == 8 and pm.plan.num_layers_first_stage == 7 and pm.plan.recompute_num_layers == 2
    mem = pm.analysis_mem()
    assert mem["first_stage"]["model_mem_bytes"]["expert_params"] > 0
    assert pm.analysis_cost()["duration_time_per_iter_s"] > 0


def test_objects_and_names_accepted():
    from workload_gen.plan import ParallelPlan
    plan = ParallelPlan(world_size=8, tp=8, sequence_parallel=True, seq_length=8192, global_batch_size=8)
    pm = PerfLLM().configure(strategy_config=plan, model_config="llama3-8b", system_config="H100")
    assert pm.analysis_cost()["duration_time_per_iter_s"] > 0


def test_search_api_returns_numbers_and_fills_list(tmp_path):
    pm = PerfLLM().configure(model_config=CFG / "model_llama3_70b.json", system_config=CFG / "system_h100.json")
    allres: list = []
    best = pm.search_best_parallel_strategy_with_recompute(
        world_size=64, gmi_error=6, micro_batch_size=1, global_batch_size=64, all_search_result=allres,
        tp_search_list=[4, 8], pp_search_list=[2, 4], cp_search_list=[1], seq_len=4096,
        recompute_search_type=["no_recompute", "full_block"], dump_path=str(tmp_path / "s"))
    assert best["best_plan"] and best["evaluated"] == len(allres) > 0
    assert isinstance(best["duration_time_per_iter_s"], float) and best["peak_mem_bytes"] > 0
    assert (tmp_path / "s" / "ranked.csv").exists() and (tmp_path / "s" / "pareto.png").exists()


# ------------------------------------------------------------------------------ bad config files
def _write(tmp_path, name, data) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(data))
    return p


def _load(name):
    return json.loads((CFG / name).read_text())


def _error_of(**kw) -> str:
    with pytest.raises(ValueError) as ei:
        PerfLLM().configure(**kw)
    msg = str(ei.value)
    assert "\n" not in msg
    return msg


def test_missing_model_field(tmp_path):
    m = _load("model_llama3_70b.json")
    del m["hidden_size"]
    p = _write(tmp_path, "model.json", m)
    msg = _error_of(strategy_config=CFG / "strategy_llama3_70b_tp8_pp4_cp2.json", model_config=p,
                    system_config=CFG / "system_h100.json")
    assert str(p) in msg and "hidden_size" in msg


def test_wrong_type_strategy_field(tmp_path):
    s = _load("strategy_llama3_70b_tp8_pp4_cp2.json")
    s["tp_size"] = "8"
    p = _write(tmp_path, "strategy.json", s)
    msg = _error_of(strategy_config=p, model_config=CFG / "model_llama3_70b.json", system_config="H100")
    assert str(p) in msg and "tp_size" in msg


def test_wrong_type_selective_flag(tmp_path):
    s = _load("strategy_llama3_70b_tp8_pp4_cp2.json")
    s["attn_recompute"] = "yes"
    p = _write(tmp_path, "strategy.json", s)
    msg = _error_of(strategy_config=p, model_config=CFG / "model_llama3_70b.json", system_config="H100")
    assert str(p) in msg and "attn_recompute" in msg


def test_impossible_plan_names_file_and_field(tmp_path):
    s = _load("strategy_llama3_70b_tp8_pp4_cp2.json")
    s["tp_size"] = 3                                   # does not divide 64 heads
    s["world_size"] = 3 * 4 * 2 * 16
    p = _write(tmp_path, "strategy.json", s)
    msg = _error_of(strategy_config=p, model_config=CFG / "model_llama3_70b.json", system_config="H100")
    assert str(p) in msg and "'tp_size'" in msg and "heads" in msg


def test_bad_system_file(tmp_path):
    sysd = _load("system_h100.json")
    del sysd["accelerator"]["op"]["matmul"]["tflops"]
    p = _write(tmp_path, "system.json", sysd)
    msg = _error_of(strategy_config=CFG / "strategy_llama3_70b_tp8_pp4_cp2.json",
                    model_config=CFG / "model_llama3_70b.json", system_config=p)
    assert str(p) in msg and "tflops" in msg and "matmul" in msg
    sysd = _load("system_h100.json")
    sysd["networks"]["inter_node"]["bandwidth"]["gbps"] = "fast"
    p2 = _write(tmp_path, "system2.json", sysd)
    msg = _error_of(strategy_config=CFG / "strategy_llama3_70b_tp8_pp4_cp2.json",
                    model_config=CFG / "model_llama3_70b.json", system_config=p2)
    assert str(p2) in msg and "gbps" in msg and "inter_node" in msg


# ------------------------------------------------------------------------------ CLI
def test_cli_memory_prints_stages_and_fit(capsys, tmp_path):
    out = tmp_path / "mem.json"
    rc = cli_main(["memory", "--model", "llama3-8b", "--world-size", "16", "--tp", "4", "--sp", "--pp", "2",
                   "--gbs", "32", "--seq", "8192", "--dist-opt", "--json", str(out)])
    text = capsys.readouterr().out
    assert rc == 0 and "fits" in text and "stage 0" in text
    d = json.loads(out.read_text())
    assert len(d["stages"]) == 2 and d["source"] == "workload"   # the generated workload's saved_bytes


def test_cli_memory_impossible_plan_is_one_line(capsys):
    rc = cli_main(["memory", "--model", "llama3-8b", "--tp", "3"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "plan.tp" in err


def test_cli_search_writes_outputs(capsys, tmp_path):
    rc = cli_main(["search", "--model", "llama3-8b", "--world-size", "16", "--gbs", "32", "--seq", "4096",
                   "--tp", "2,4", "--pp", "1,2", "--cp", "1", "--mbs", "1", "--recompute", "none,full",
                   "--no-confirm", "--out", str(tmp_path)])
    text = capsys.readouterr().out
    assert rc == 0 and "evaluated" in text
    for name in ("ranked.csv", "rejected_families.csv", "pareto.png", "summary.json"):
        assert (tmp_path / name).exists()


def test_cli_search_bad_flag_is_one_line(capsys):
    rc = cli_main(["search", "--model", "llama3-8b", "--world-size", "16", "--gbs", "32", "--tp", "two"])
    err = capsys.readouterr().err.strip()
    assert rc == 2 and err.count("\n") == 0 and "--tp" in err


def test_cli_memory_plan_file_errors_name_file_and_key(capsys, tmp_path):
    bad = tmp_path / "plan.yaml"
    bad.write_text("tp: 3\nworld_size: 24\n")
    assert cli_main(["memory", "--model", "llama3-70b", "--plan", str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(bad) in err and "key 'tp'" in err
    s = _load("strategy_llama3_70b_tp8_pp4_cp2.json")
    s["pp_size"] = 3
    p = _write(tmp_path, "strategy.json", s)
    assert cli_main(["memory", "--model", "llama3-70b", "--plan", str(p)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and str(p) in err and "world_size" in err


@pytest.mark.parametrize("system", ["system_h100.json", "H100"])
def test_search_and_run_estimate_time_a_plan_alike(system):
    """The search's time for its best plan equals run_estimate() of that plan on the same system
    (that tool's system file: roofline of its efficiencies; a GPU name: compute_db kernels)."""
    sysc = CFG / system if system.endswith(".json") else system
    pm = PerfLLM().configure(model_config="llama3-8b", system_config=sysc)
    best = pm.search_best_parallel_strategy_with_recompute(
        world_size=16, global_batch_size=32, seq_len=4096, tp_search_list=[2], pp_search_list=[1, 2],
        cp_search_list=[1], recompute_search_type=["no_recompute"])
    again = PerfLLM().configure(strategy_config=pm.last_search.best.plan, model_config="llama3-8b",
                                system_config=sysc)
    assert again.run_estimate()["duration_time_per_iter_s"] == pytest.approx(best["duration_time_per_iter_s"],
                                                                              rel=1e-12)


def test_model_file_error_names_that_tools_key(tmp_path):
    m = _load("model_llama3_70b.json")
    m["kv_head_num"] = 7                               # does not divide 64 heads
    p = _write(tmp_path, "model.json", m)
    msg = _error_of(model_config=p, system_config="H100")
    assert msg.startswith(f"{p}: key 'kv_head_num': ") and "num_kv_heads" not in msg.split(":")[1]


def test_user_efficiencies_set_the_estimate(tmp_path):
    """That tool's matmul efficient_factor is honoured (roofline), not replaced by compute_db."""
    s = _load("system_h100.json")
    times = []
    for eff in (0.78, 0.39):
        s["accelerator"]["op"]["matmul"]["efficient_factor"] = eff
        pm = PerfLLM().configure(strategy_config=CFG / "strategy_llama3_70b_tp8_pp4_cp2.json",
                                 model_config=CFG / "model_llama3_70b.json",
                                 system_config=_write(tmp_path, f"sys{eff}.json", s))
        times.append(pm.run_estimate()["breakdown_result"]["compute_s"])
    assert times[1] > 1.5 * times[0]


def test_cli_search_short_out_flag(capsys, tmp_path):
    """`-o DIR` as in the README and the other subcommands."""
    rc = cli_main(["search", "--model", "llama3-8b", "--world-size", "8", "--gbs", "8", "--seq", "2048", "--tp", "2",
                   "--pp", "1", "--cp", "1", "--mbs", "1", "--recompute", "none", "--no-confirm", "-o", str(tmp_path)])
    assert rc == 0 and (tmp_path / "ranked.csv").exists()


def test_cli_search_confirmation_equals_clustersim_run(tmp_path):
    """The flow confirmation runs on the same fabric as `clustersim run` (datasheet NVLink rate)."""
    import csv

    from sim.commands import run_job
    rc = cli_main(["search", "--model", "aicb-7", "--world-size", "16", "--gbs", "16", "--seq", "2048",
                   "--tp", "4", "--pp", "2", "--vpp", "1", "--cp", "1", "--sp", "on", "--mbs", "1",
                   "--recompute", "none", "--optimizer", "distributed", "--top-k", "1", "--out", str(tmp_path)])
    assert rc == 0
    row = next(csv.DictReader(open(tmp_path / "ranked.csv")))
    assert (row["tp"], row["pp"], row["dp"]) == ("4", "2", "2")
    rep = run_job({"model": "aicb-7", "plan": {"tp": 4, "pp": 2, "dp": 2, "sequence_parallel": True,
                                               "global_batch_size": 16, "micro_batch_size": 1, "seq_length": 2048,
                                               "distributed_optimizer": True}, "fabric": "spectrum-x"})
    assert float(row["flow_iteration_time_s"]) == pytest.approx(rep.iteration_time_s, rel=1e-5)


@pytest.mark.parametrize("topology", [{"gpus": 64}, {"template": 3}, "spectrum-x"])
def test_system_topology_without_template_is_one_line(tmp_path, topology):
    from sim.errors import SimError
    p = _write(tmp_path, "system.json", {"gpu": "H100", "topology": topology})
    with pytest.raises(SimError) as e:
        PerfLLM().configure(model_config="llama3-8b", system_config=str(p))
    msg = str(e.value)
    assert msg.startswith(f"{p}: key 'topology': expected a mapping with 'template'") and "\n" not in msg


def test_system_topology_template_is_used(tmp_path):
    p = _write(tmp_path, "system.json", {"gpu": "H100", "topology": {"template": "dcn+", "gpus": 64}})
    m = PerfLLM().configure(model_config="llama3-8b", system_config=str(p))
    assert m.topology.num_gpus == 64 and "DCN+" in m.topology.name
