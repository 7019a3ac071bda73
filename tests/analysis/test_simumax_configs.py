"""SimuMax v1.2's shipped configuration files (../shared/data/simumax_configs) load and mean what they mean
there: every strategy, model and system file; recompute settings change time and memory; the seed API's
result keys and both search method names."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from sim.analysis.perfllm import PerfLLM, load_model_any, load_strategy, load_system
from sim.errors import SimError
from workload_gen.config_io import CompatibilityWarning
from workload_gen.errors import ConfigFileError
from workload_gen.params import count_params

GiB = 1024 ** 3
# notes are asserted through PerfLLM.notes / load_strategy(notes=...) and pytest.warns; the rest is noise
pytestmark = pytest.mark.filterwarnings("ignore::workload_gen.config_io.CompatibilityWarning")


@pytest.fixture(scope="module")
def cfg(shared_dir) -> Path:
    return shared_dir / "data" / "simumax_configs"


def _names(cfg: Path, kind: str) -> list[str]:
    return sorted(p.name for p in (cfg / kind).glob("*.json"))


def _quiet(fn, *a, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CompatibilityWarning)
        return fn(*a, **kw)


def test_folder_holds_12_strategies_28_models_2_systems(cfg):
    assert (len(_names(cfg, "strategy")), len(_names(cfg, "models")), len(_names(cfg, "system"))) == (12, 28, 2)


# ------------------------------------------------------------------------------------------ models
# No shipped model file is refused; a refusal would be listed here as {file: reason substring}.
REFUSED_MODELS: dict[str, str] = {}
# published totals / active parameters of reference/models.md (billions) for the files of the same models
MODELS_MD = {"llama2-7b.json": (6.74, None), "llama2-13b.json": (13.0, None), "llama2-70b.json": (68.98, None),
             "llama3-8b.json": (8.03, None), "llama3-70b.json": (70.55, None),
             "mixtral-8x7b.json": (46.70, 12.88), "deepseekv2.json": (235.7, 21.38),
             "deepseekv3.json": (671.0, 37.55)}


def test_every_model_file_loads_or_is_refused_with_a_reason(cfg):
    loaded = 0
    for name in _names(cfg, "models"):
        path = cfg / "models" / name
        if name in REFUSED_MODELS:
            with pytest.raises((SimError, ConfigFileError), match=REFUSED_MODELS[name]):
                load_model_any(path)
            continue
        m = _quiet(load_model_any, path)
        raw = json.loads(path.read_text())
        assert m.num_layers == raw["layer_num"] and m.hidden_size == raw["hidden_size"], name
        assert m.num_attention_heads == raw["head_num"] and m.kv_heads == raw.get("kv_head_num", raw["head_num"])
        assert m.is_moe == (raw.get("model_type") == "moe"), name        # no model_type: SimuMax's dense
        assert m.activation == ("swiglu" if raw["use_swiglu"] else "gelu"), name
        assert m.is_mla == (raw.get("attention_type") == "mla"), name
        if m.is_moe:
            assert m.num_experts == raw["expert_num"] and m.moe_top_k == raw["topk"], name
            # Mixtral files have no moe_ffn_hidden_size: each expert is intermediate_size wide
            assert m.expert_ffn_hidden_size == raw.get("moe_ffn_hidden_size", raw["intermediate_size"]), name
            assert m.shared_expert_total_ffn == raw.get("moe_shared_expert_intermediate_size", 0), name
            assert m.num_dense_layers == raw.get("dense_layers", 0), name
        c = count_params(m)
        if name in MODELS_MD:
            total, active = MODELS_MD[name]
            assert c.total / 1e9 == pytest.approx(total, rel=0.005), name
            if active:
                assert c.active / 1e9 == pytest.approx(active, rel=0.005), name
        loaded += 1
    assert loaded + len(REFUSED_MODELS) == 28


def test_model_details_of_files_without_model_type(cfg):
    gpt3 = load_model_any(cfg / "models" / "gpt3-175b.json")
    assert gpt3.name == "gpt3-175b" and not gpt3.is_moe and gpt3.activation == "gelu" and gpt3.head_size == 128
    mix = load_model_any(cfg / "models" / "mixtral-8x1b.json")
    assert (mix.num_layers, mix.num_experts, mix.moe_top_k, mix.expert_ffn_hidden_size) == (4, 8, 2, 14336)
    ds = load_model_any(cfg / "models" / "deepseek-16b.json")
    assert ds.is_mla and ds.q_lora_rank is None and ds.qk_nope_head_dim == 128 and ds.qk_rope_head_dim == 64


@pytest.mark.parametrize("change,key,what", [
    ({"expert_num": 8, "topk": 2}, "model_type", "is missing (SimuMax reads that as dense)"),
    ({"model_type": "dense", "expert_num": 8, "topk": 2}, "model_type", "is 'dense' but MoE keys expert_num"),
    ({"model_type": "sparse"}, "model_type", "expected 'dense' or 'moe'"),
    ({"attention_type": "linear"}, "attention_type", "expected 'mha'"),
    ({"model_type": "moe", "topk": 2}, "expert_num", "missing"),
])
def test_model_files_never_silently_drop_experts(cfg, tmp_path, change, key, what):
    raw = {**json.loads((cfg / "models" / "llama2-tiny.json").read_text()), **change}
    p = tmp_path / "model.json"
    p.write_text(json.dumps(raw))
    with pytest.raises(ConfigFileError) as e:
        load_model_any(p)
    msg = str(e.value)
    assert msg.startswith(f"{p}: key '{key}': ") and what in msg and "\n" not in msg


# ------------------------------------------------------------------------------------------ strategies
# file -> (tp, pp, ep, vpp, dp, sequence_parallel, recompute, recompute_num_layers, selective components,
#          notes naming these keys), from the files and SimuMax's rules: a granularity acts only with
# enable_recompute true and enable_recompute only through a granularity; SP is inert at tp 1.
STRATEGIES = {
    "ep4_pp2_dp4_mbs1.json": (1, 2, 4, 1, 4, False, "none", None, None,
                              ["enable_recompute", "enable_sequence_parallel"]),
    "ep4_pp2_dp4_mbs1_full_recompute.json": (1, 2, 4, 1, 4, False, "full", 2, None, ["enable_sequence_parallel"]),
    "ep4_pp2_dp4_mbs1_selective_recompute.json": (1, 2, 4, 1, 4, False, "selective", None, ("attn", "mlp", "norm"),
                                                  ["recompute_layer_num", "enable_sequence_parallel"]),
    "ep8_pp1_dp8_mbs1.json": (1, 1, 8, 1, 8, False, "none", None, None,
                              ["enable_recompute", "enable_sequence_parallel"]),
    "tp1_pp1_dp8_mbs1.json": (1, 1, 1, 1, 8, False, "none", None, None,
                              ["enable_recompute", "enable_sequence_parallel"]),
    "tp1_pp2_dp4_mbs1.json": (1, 2, 1, 1, 4, False, "none", None, None,
                              ["enable_recompute", "enable_sequence_parallel"]),
    "tp1_pp4_vp2_sync_mbs1_mbc8_no_ckpt.json": (1, 4, 1, 2, 2, False, "none", None, None,
                                                ["recompute_granularity", "enable_sequence_parallel", "tp_net"]),
    "tp2_pp1_dp4_mbs1.json": (2, 1, 1, 1, 4, True, "none", None, None, ["enable_recompute"]),
    "tp2_pp1_dp4_mbs1_full_recompute.json": (2, 1, 1, 1, 4, True, "full", 12, None, []),
    "tp2_pp1_dp4_mbs1_selective_recompute.json": (2, 1, 1, 1, 4, True, "selective", None, ("attn", "mlp"),
                                                  ["recompute_layer_num"]),
    "tp4_pp1_dp2_mbs1.json": (4, 1, 1, 1, 2, True, "none", None, None, ["enable_recompute"]),
    "tp8_pp1_dp1_mbs1.json": (8, 1, 1, 1, 1, True, "none", None, None, ["enable_recompute"]),
}


def test_strategy_table_covers_the_folder(cfg):
    assert sorted(STRATEGIES) == _names(cfg, "strategy")


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_file_loads_as_simumax_means_it(cfg, name):
    tp, pp, ep, vpp, dp, sp, rec, nrec, sel, noted = STRATEGIES[name]
    notes: list[str] = []
    plan, opts, where, raw = load_strategy(cfg / "strategy" / name, notes)
    assert (plan.tp, plan.pp, plan.ep, plan.vpp, plan.dp, plan.sequence_parallel) == (tp, pp, ep, vpp, dp, sp)
    assert (plan.recompute, plan.recompute_num_layers) == (rec, nrec)
    if sel:
        assert set(opts.selective) == set(sel)
    # micro_batch_num counts micro-batches per data-parallel rank: 1 x 8 x dp sequences
    assert plan.global_batch_size == 8 * dp and plan.num_microbatches == 8 and plan.seq_length == 4096
    assert plan.distributed_optimizer and plan.flash_attention and plan.grad_reduce_dtype == "fp32"
    assert opts.mem_factor == 0.94
    keys = [n.split("key '", 1)[1].split("'", 1)[0] for n in notes]
    assert keys == noted, notes
    assert all(n.startswith(f"{where}: key '") and "\n" not in n for n in notes)


def _model_for(name: str) -> str:
    if name.startswith("ep4"):
        return "mixtral-8x1b.json"                # 4 layers: 2 per stage at pp 2
    return "mixtral-8x7b.json" if name.startswith("ep8") else "llama2-7b.json"


def _run(cfg, strategy, model=None, system="a100_pcie.json") -> tuple[PerfLLM, dict, dict]:
    s = strategy if isinstance(strategy, Path) else cfg / "strategy" / strategy
    m = cfg / "models" / (model or _model_for(s.name))
    pm = _quiet(PerfLLM().configure, strategy_config=s, model_config=m, system_config=cfg / "system" / system)
    return pm, pm.run_estimate(), pm.analysis_mem()


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_every_strategy_runs_with_seed_keys_and_mem_factor(cfg, name):
    pm, cost, mem = _run(cfg, name)
    assert len(pm.notes) == len(STRATEGIES[name][-1])
    for seed, ours in (("duration_time_per_iter", "duration_time_per_iter_s"), ("chunk_time", "chunk_time_s"),
                       ("throughput_per_accelerator", "throughput_per_accelerator_tokens_per_s")):
        assert cost[seed] == cost[ours] > 0
    assert cost["throughput_per_accelerator"] == pytest.approx(
        cost["all_tokens_per_iter"] / cost["duration_time_per_iter"] / pm.plan.world_size)
    for key in ("comm_result", "compute_details", "breakdown_result", "mfu", "mfu_6nd_with_attn"):
        assert key in cost
    stages = ["first_stage", "last_stage", "peak_stage"] if pm.plan.pp > 1 else ["first_stage", "peak_stage"]
    assert [k for k in mem if k.endswith("_stage")] == stages
    for st in stages:
        s = mem[st]
        # SimuMax: the reserved peak is the allocated peak divided by mem_factor (0.94 in every file)
        assert s["peak_mem_with_reserved"] == int(s["peak_mem"] / 0.94)
        assert s["peak_mem"] == s["peak_mem_bytes"] and s["model_mem"] == s["model_mem_bytes"]["total_bytes"]
        for seed in ("fwd_activation_cache_per_micro_batch", "peak_activation_mem_in_1F1B", "fwd_peak_allocated_mem",
                     "bwd_peak_allocated_mem"):
            assert s[seed] == s[f"{seed}_bytes"] > 0
        assert s["peak_mem"] == max(s["fwd_peak_allocated_mem"], s["bwd_peak_allocated_mem"])
        assert s["memory_reserved_ratio"] == pytest.approx(1 / 0.94, rel=1e-6)
    json.dumps(cost), json.dumps(mem)


@pytest.mark.parametrize("prefix,model", [("tp2_pp1_dp4_mbs1", "llama2-7b.json"),
                                          ("ep4_pp2_dp4_mbs1", "mixtral-8x1b.json")])
def test_recompute_settings_change_time_and_memory(cfg, prefix, model):
    res = {}
    for variant in ("", "_full_recompute", "_selective_recompute"):
        pm, cost, mem = _run(cfg, f"{prefix}{variant}.json", model)
        res[variant] = (cost["duration_time_per_iter"], cost["hardware_flops_per_iter"], mem["peak_stage"]["peak_mem"],
                        mem["first_stage"]["fwd_activation_cache_per_micro_batch"])
    none, full, sel = res[""], res["_full_recompute"], res["_selective_recompute"]
    for rec in (full, sel):
        assert rec[0] > none[0]          # recompute re-runs forward work
        assert rec[1] > none[1]          # ... which the hardware FLOPs count
        assert rec[2] < none[2]          # and keeps fewer activations
        assert rec[3] < none[3]
    assert full[0] != sel[0] and full[2] != sel[2]


def test_granularity_without_enable_recompute_is_inert_and_said(cfg, tmp_path):
    base = cfg / "strategy" / "tp1_pp4_vp2_sync_mbs1_mbc8_no_ckpt.json"
    with pytest.warns(CompatibilityWarning, match=r"'recompute_granularity': 'full_block' is inert without"):
        pm = PerfLLM().configure(strategy_config=base, model_config=cfg / "models" / "llama2-7b.json",
                                 system_config=cfg / "system" / "b200_bf16_ceperm.json")
    assert pm.plan.recompute == "none"
    off = (pm.run_estimate()["duration_time_per_iter"], pm.analysis_mem()["peak_stage"]["peak_mem"])
    raw = json.loads(base.read_text())
    # enabled, but recompute_layer_num 0 recomputes no layer in SimuMax either
    p = tmp_path / "zero.json"
    p.write_text(json.dumps({**raw, "enable_recompute": True}))
    with pytest.warns(CompatibilityWarning, match=r"'recompute_layer_num': 0 recomputes no layer"):
        plan, *_ = load_strategy(p)
    assert plan.recompute == "none"
    p = tmp_path / "on.json"
    p.write_text(json.dumps({**raw, "enable_recompute": True, "recompute_layer_num": 2}))
    pm, cost, mem = _run(cfg, p, "llama2-7b.json", "b200_bf16_ceperm.json")
    assert (pm.plan.recompute, pm.plan.recompute_num_layers) == ("full", 2)
    assert [n.split("key ")[1].split(":")[0] for n in pm.notes] == ["'enable_sequence_parallel'", "'tp_net'"]
    assert cost["duration_time_per_iter"] > off[0] and mem["peak_stage"]["peak_mem"] < off[1]


def test_recompute_layer_num_above_a_chunk_means_every_layer(cfg):
    # 12 layers on a model of 8 (llama2-tiny): SimuMax recomputes the first 12 layers, i.e. all of them
    pm, _, _ = _run(cfg, "tp2_pp1_dp4_mbs1_full_recompute.json", "llama2-tiny.json")
    assert pm.plan.recompute_num_layers == 8
    assert "'recompute_layer_num': 12 is more than the 8 layers" in pm.notes[0]


def test_enable_dropout_sets_the_dropout_masks(cfg, tmp_path):
    raw = json.loads((cfg / "strategy" / "tp8_pp1_dp1_mbs1.json").read_text())
    acts = []
    for on in (False, True):
        p = tmp_path / f"s{on}.json"
        p.write_text(json.dumps({**raw, "enable_dropout": on}))
        pm, _, mem = _run(cfg, p, "megatron-22b.json")
        assert pm.model.extra["dropout"] is on
        acts.append(mem["first_stage"]["fwd_activation_cache_per_micro_batch"])
    # one byte per element of each of the two residual dropouts (s*b*h/t each with SP) per layer, and the
    # embedding dropout: flash attention keeps no attention-probability dropout mask
    s, h, t, layers = 4096, 6144, 8, 48
    assert acts[1] - acts[0] >= layers * 2 * s * h // t


@pytest.mark.parametrize("value,ok", [(0.94, True), (1, True), (1.25, False), (0, False), ("0.9", False)])
def test_mem_factor_is_allocated_over_reserved(cfg, tmp_path, value, ok):
    raw = json.loads((cfg / "strategy" / "tp8_pp1_dp1_mbs1.json").read_text())
    p = tmp_path / "s.json"
    p.write_text(json.dumps({**raw, "mem_factor": value}))
    if ok:
        assert _quiet(load_strategy, p)[1].mem_factor == value
        return
    with pytest.raises(SimError) as e:
        _quiet(load_strategy, p)
    assert str(e.value).startswith(f"{p}: key 'mem_factor': expected a number in (0, 1]")


# ------------------------------------------------------------------------------------------ systems
def test_system_files_load(cfg):
    pcie, extra = load_system(cfg / "system" / "a100_pcie.json")
    # intra-node traffic over PCIe: the node-wide level intra_node_pcie_8x (30 GB/s x 0.5, 10 us)
    assert (pcie.nvlink_Bps, pcie.nvlink_efficiency, pcie.intra_latency_s) == (30e9, 0.5, pytest.approx(10e-6))
    assert (pcie.nic_Bps, pcie.nic_efficiency, pcie.inter_latency_s) == (25e9, 0.6, pytest.approx(40e-6))
    assert (pcie.peak_flops, pcie.gemm_efficiency, pcie.hbm_bytes, pcie.gpus_per_server) == (312e12, 0.75, 80 * GiB, 8)
    assert extra["perfllm_system"] and pcie.name == "a100_pcie_bf16"
    b200, _ = load_system(cfg / "system" / "b200_bf16_ceperm.json")
    assert (b200.nvlink_Bps, b200.nic_Bps, b200.peak_flops) == (900e9, 200e9, 2250e12)


def test_pcie_system_without_a_fitting_level_is_one_line(cfg, tmp_path):
    raw = json.loads((cfg / "system" / "a100_pcie.json").read_text())
    raw["networks"] = {k: v for k, v in raw["networks"].items() if not k.startswith("intra_node_pcie")}
    p = tmp_path / "sys.json"
    p.write_text(json.dumps(raw))
    with pytest.raises(SimError) as e:
        load_system(p)
    assert str(e.value) == (f"{p}: networks: intra_with_pcie is true but no 'intra_node_pcie_<n>x' level "
                            f"with n <= num_per_node=8")


# ------------------------------------------------------------------------------------------ API names
def test_both_search_method_names(cfg):
    pm = PerfLLM().configure(model_config=cfg / "models" / "llama2-tiny.json",
                             system_config=cfg / "system" / "b200_bf16_ceperm.json")
    kw = dict(world_size=8, gmi_error=6, micro_batch_size=1, global_batch_size=16, seq_len=2048,
              tp_search_list=[1, 2], pp_search_list=[1], cp_search_list=[1],
              recompute_search_type=["no_recompute", "full_block"])
    a = pm.search_best_parallel_strategy(**kw)
    b = pm.search_best_parallel_strategy_with_recompute(**kw)
    assert a["best_plan"] == b["best_plan"] and a["evaluated"] == b["evaluated"] > 0
    assert a["duration_time_per_iter"] == a["duration_time_per_iter_s"] > 0
    assert a["peak_mem"] == a["peak_mem_bytes"] > 0 and a["peak_mem_with_reserved"] >= a["peak_mem"]
    with pytest.raises(SimError) as e:
        pm.search_best_parallel_strategy(world_size=8, tp_list=[1])
    assert str(e.value).startswith("search_best_parallel_strategy: ") and "tp_list" in str(e.value)


def test_cli_memory_prints_the_notes(cfg, capsys):
    from sim.cli import main as cli_main
    rc = cli_main(["memory", "--model", str(cfg / "models" / "llama2-7b.json"),
                   "--plan", str(cfg / "strategy" / "tp2_pp1_dp4_mbs1.json"),
                   "--gpu", str(cfg / "system" / "a100_pcie.json")])
    out = capsys.readouterr()
    assert rc == 0 and "recompute=none" in out.out and "fits" in out.out
    assert out.err.startswith("clustersim: warning: ") and "'enable_recompute': true without recompute_granularity" in out.err
