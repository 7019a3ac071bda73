"""Fuzz the config readers: SimuMax (PerfLLM) model, strategy and system JSON, HuggingFace config.json
and clustersim plan YAML, through `clustersim memory --model M --plan P --gpu SYS` (and `run -m M
--plan-file P` for a few). Each mutation of a valid file (a shipped SimuMax v1.2 file, or a hand-written
HF config / plan) sets one field to a value no such field may take (nan, inf, 1e400, negative, zero,
huge, fractional counts, text, null, efficiency factors above 1), drops a required field, truncates the
file or inserts non-UTF-8 bytes; each must be refused in one line naming the file, exit 2, nothing
written. The unmutated files are accepted."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
import yaml
from fuzzkit import CORPUS, refused
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
OVERFLOW = "__1e400__"   # written as the JSON literal 1e400 (parsed as inf)
# (null is not here: every reader takes a null like an absent key, i.e. its default, or "missing")
NOT_NUMBER = (float("nan"), float("inf"), float("-inf"), OVERFLOW, "x", "12", [], {"v": 1}, True)
BAD_COUNT = NOT_NUMBER + (-1, 0, 0.5, 7.5, 10**30)
BAD_POSITIVE = NOT_NUMBER + (-1, 0, -0.5)
BAD_RATIO = NOT_NUMBER + (-1, 0, 1.5, 80)    # efficiency factors: 0 < f <= 1

SIMUMAX = "data/simumax_configs"
MODEL_FIELDS = {"hidden_size": BAD_COUNT, "head_num": BAD_COUNT, "kv_head_num": BAD_COUNT,
                "head_size": BAD_COUNT, "intermediate_size": BAD_COUNT, "layer_num": BAD_COUNT,
                "vocab_size": BAD_COUNT}
STRATEGY_FIELDS = {"seq_len": BAD_COUNT, "micro_batch_size": BAD_COUNT, "micro_batch_num": BAD_COUNT,
                   "world_size": BAD_COUNT, "tp_size": BAD_COUNT, "pp_size": BAD_COUNT, "ep_size": BAD_COUNT,
                   "interleaving_size": BAD_COUNT, "zero_state": (-1, 4, 0.5, "1", float("nan")),
                   "mem_factor": BAD_RATIO, "dtype": ("fp64", 16, ""),
                   "enable_sequence_parallel": ("yes", 2, [])}
SYSTEM_FIELDS = {("accelerator", "mem_gbs"): BAD_POSITIVE, ("num_per_node",): BAD_COUNT,
                 ("accelerator", "op", "matmul", "tflops"): BAD_POSITIVE,
                 ("accelerator", "op", "matmul", "efficient_factor"): BAD_RATIO,
                 ("accelerator", "bandwidth", "default", "gbps"): BAD_POSITIVE,
                 ("accelerator", "bandwidth", "default", "efficient_factor"): BAD_RATIO,
                 ("networks", "inter_node", "bandwidth", "gbps"): BAD_POSITIVE,
                 ("networks", "inter_node", "bandwidth", "efficient_factor"): BAD_RATIO,
                 ("networks", "intra_node_pcie_8x", "bandwidth", "gbps"): BAD_POSITIVE,
                 ("networks", "intra_node_pcie_8x", "bandwidth", "latency_us"): NOT_NUMBER + (-1,)}
HF = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
      "intermediate_size": 11008, "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
      "vocab_size": 32000, "max_position_embeddings": 4096}
HF_FIELDS = {k: BAD_COUNT for k in ("hidden_size", "intermediate_size", "num_attention_heads",
                                    "num_key_value_heads", "num_hidden_layers", "vocab_size")}
PLAN = {"world_size": 8, "tp": 2, "pp": 2, "micro_batch_size": 1, "global_batch_size": 8, "seq_length": 2048}
PLAN_FIELDS = {k: BAD_COUNT for k in PLAN} | {"sequence_parallel": ("yes", 2), "zero_stage": (-1, 4, 0.5, "1"),
                                              "recompute": ("most", 1), "dtype": ("fp64", 16)}


def _dump(doc, suffix: str) -> str:
    if suffix == ".yaml":
        return yaml.safe_dump(doc)
    return json.dumps(doc, indent=1).replace(f'"{OVERFLOW}"', "1e400")


def _memory(tmp_path, reader, model, plan, gpu=None, bad=None):
    argv = ["memory", "--model", str(model), "--plan", str(plan)] + (["--gpu", str(gpu)] if gpu else [])
    return refused(reader, argv, must_mention=str(bad) if bad else None)


def _run(tmp_path, reader, model, plan, bad):
    out = Path(tempfile.mkdtemp(dir=tmp_path)) / "res"
    return refused(reader, ["run", "-m", str(model), "--plan-file", str(plan), "--out", str(out), "-q"], out=out,
                   must_mention=str(bad))   # bad: the file, or the key where the message names the field only


@pytest.fixture(scope="module")
def base(shared_dir, tmp_path_factory):
    d = tmp_path_factory.mktemp("cfg")
    root = shared_dir / SIMUMAX
    # the shipped strategy with enable_recompute: false (true without a granularity warns, a second line)
    strategy = json.loads((root / "strategy" / "tp2_pp1_dp4_mbs1.json").read_text()) | {"enable_recompute": False}
    (d / "strategy.json").write_text(json.dumps(strategy, indent=1))
    files = {"model": root / "models" / "llama2-7b.json", "strategy": d / "strategy.json",
             "system": root / "system" / "a100_pcie.json", "hf": d / "config.json", "plan": d / "plan.yaml"}
    files["hf"].write_text(json.dumps(HF))
    files["plan"].write_text(yaml.safe_dump(PLAN))
    return files


def test_unmutated_files_are_accepted(base):
    from sim.analysis.perfllm import load_model_any, load_strategy, load_system
    from workload_gen.config_io import load_plan
    assert load_model_any(base["model"]).num_layers == 32
    assert load_model_any(base["hf"]).num_attention_heads == 32
    assert load_strategy(base["strategy"])[0].tp == 2
    assert load_system(base["system"])[0].hbm_bytes == 80 * 2**30
    assert load_plan(base["plan"]).pp == 2


def _mutate(doc: dict, keys: tuple, value):
    d = doc
    for k in keys[:-1]:
        d = d[k]
    d[keys[-1]] = value


def _write(tmp_path, name: str, doc, suffix: str) -> Path:
    p = Path(tempfile.mkdtemp(dir=tmp_path)) / f"{name}{suffix}"
    p.write_text(doc if isinstance(doc, str) else _dump(doc, suffix))
    return p


@settings(FUZZ, max_examples=50)
@given(data=st.data())
def test_simumax_model_and_strategy_fields(tmp_path, base, data):
    which = data.draw(st.sampled_from(["model", "strategy"]))
    fields = MODEL_FIELDS if which == "model" else STRATEGY_FIELDS
    doc = json.loads(base[which].read_text())
    key = data.draw(st.sampled_from(sorted(fields)))
    _mutate(doc, (key,), data.draw(st.sampled_from(fields[key])))
    p = _write(tmp_path, which, doc, ".json")
    model, plan = (p, base["strategy"]) if which == "model" else (base["model"], p)
    line = _memory(tmp_path, f"simumax-{which}", model, plan, bad=p)
    assert key in line


@settings(FUZZ, max_examples=50)
@given(data=st.data())
def test_simumax_system_fields(tmp_path, base, data):
    doc = json.loads(base["system"].read_text())
    keys = data.draw(st.sampled_from(sorted(SYSTEM_FIELDS)))
    _mutate(doc, keys, data.draw(st.sampled_from(SYSTEM_FIELDS[keys])))
    p = _write(tmp_path, "system", doc, ".json")
    line = _memory(tmp_path, "simumax-system", base["model"], base["strategy"], gpu=p, bad=p)
    assert keys[-1] in line


@FUZZ
@given(data=st.data())
def test_hf_config_fields(tmp_path, base, data):
    doc = dict(HF)
    key = data.draw(st.sampled_from(sorted(HF_FIELDS)))
    if key != "num_key_value_heads" and data.draw(st.integers(0, 5)) == 0:   # required keys only
        del doc[key]
    else:
        doc[key] = data.draw(st.sampled_from(HF_FIELDS[key]))
    p = _write(tmp_path, "config", doc, ".json")
    _memory(tmp_path, "hf-config", p, base["strategy"], bad=p)


@FUZZ
@given(data=st.data())
def test_plan_yaml_fields(tmp_path, base, data):
    doc = dict(PLAN)
    key = data.draw(st.sampled_from(sorted(PLAN_FIELDS)))
    doc[key] = data.draw(st.sampled_from([v for v in PLAN_FIELDS[key] if v != OVERFLOW]))
    p = _write(tmp_path, "plan", doc, ".yaml")
    line = _memory(tmp_path, "plan-yaml", "llama3-8b", p, bad=p)
    assert key in line


@FUZZ
@given(data=st.data())
def test_truncated_or_not_utf8(tmp_path, base, data):
    which = data.draw(st.sampled_from(["model", "strategy", "system", "hf", "plan"]))
    raw = base[which].read_bytes()
    at = data.draw(st.integers(1, min(len(raw) - 2, 4000)))
    how = data.draw(st.sampled_from(["truncate", "bytes"]))
    if how == "truncate" and which == "plan":   # a cut YAML file can still parse: leave a flow list open
        raw = raw + b"tp: [2\n"
    elif how == "truncate":
        raw = raw[:at]
    else:
        raw = raw[:at] + data.draw(st.sampled_from([b"\xff", b"\xc3\x28"])) + raw[at:]
    p = Path(tempfile.mkdtemp(dir=tmp_path)) / base[which].name
    p.write_bytes(raw)
    model = p if which in ("model", "hf") else base["model"]
    plan = p if which in ("strategy", "plan") else base["strategy"]
    _memory(tmp_path, f"config-bytes-{which}", model, plan, gpu=p if which == "system" else None, bad=p)


@pytest.mark.parametrize("which,key,value", [
    ("model", "layer_num", 0), ("model", "hidden_size", float("nan")), ("strategy", "tp_size", -2),
    ("strategy", "world_size", 10**9), ("strategy", "micro_batch_num", 1.5), ("hf", "num_hidden_layers", 10**8),
])
def test_run_plan_file(tmp_path, base, which, key, value):
    """The same readers through `clustersim run -m M --plan-file P`: nothing written."""
    doc = HF.copy() if which == "hf" else json.loads(base[which].read_text())
    doc[key] = value
    p = _write(tmp_path, which, doc, ".json")
    model = base["model"] if which == "strategy" else p
    plan = p if which == "strategy" else base["strategy"]
    _run(tmp_path, f"config-run-{which}", model, plan, key if value == 10**9 else p)


@pytest.mark.parametrize("path", sorted((CORPUS / "configs").iterdir()), ids=lambda p: p.name)
def test_corpus(tmp_path, base, path):
    """Hand-made bad files; the name's prefix says which argument reads it (model_/hf_: --model,
    strategy_/plan_: --plan, system_: --gpu)."""
    kind = path.name.split("_")[0]
    model = path if kind in ("model", "hf") else base["model"]
    plan = path if kind in ("strategy", "plan") else base["strategy"]
    _memory(tmp_path, f"config-corpus-{kind}", model, plan, gpu=path if kind == "system" else None, bad=path)
