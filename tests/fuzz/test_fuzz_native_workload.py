"""Fuzz the native workload JSON reader through `clustersim run -w FILE`: each mutation of a valid
document breaks a type, range, finiteness or structure rule (field types, NaN/inf times, null sizes,
fractional ids, duplicate stages, out-of-range plans), so each must be refused with the file and key,
exit 2, and no results folder."""

from __future__ import annotations

import dataclasses
import json

import pytest
from fuzzkit import CORPUS, refused, refused_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
NAN, INF = float("nan"), float("inf")

BAD_POSITIVE = (-4096, 0, -1, "4096", 4096.5, None, True, 10**30, NAN, INF, [8], {"v": 8})
MODEL_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "ffn_hidden_size", "vocab_size", "seq_length")
PLAN_FIELDS = ("world_size", "tp", "pp", "cp", "ep", "vpp", "micro_batch_size", "global_batch_size", "seq_length")
BAD_LAYER = (-2, 1.5, "0", 10**6, True, NAN)
COMPUTE_BAD = {
    "flops": (-1, None, "1", NAN, INF, True, [1]), "bytes": (-1, None, "1", NAN, INF, False),
    "time_s": (-1, NAN, INF, "1", True, [0.1]), "kind": ("warp", None, 3), "dtype": ("fp64", None, 16),
    "variant": ("sideways", 1), "layer": BAD_LAYER, "saved_bytes": (-1, 0.5, None, "0"),
    "phase": ("sideways", None), "microbatch": ("some", 0), "causal": ("yes", 1, None), "bogus": (1,),
    "name": (None, 7, ["x"]),
}
COMM_BAD = {
    "size_bytes": (None, -1, 1.5, "8", NAN, True, INF, 1 << 70), "collective": ("allreduce", None, 0),
    "group": ("world", None), "blocking": ("true", 1, None), "wait_op": (3, [], True), "peer": ("up", 1),
    "layer": BAD_LAYER, "dtype": ("fp64", 8), "phase": ("sideways",), "microbatch": ("last2",), "bogus": (0,),
}
SHAPE_BAD = (0, -1, 1.5, None, "8", True, 1 << 70, NAN)


@pytest.fixture(scope="module")
def base_text(tmp_path_factory):
    from workload_gen.generator import generate
    from workload_gen.native_io import save_workload
    from workload_gen.plan import ParallelPlan
    from workload_gen.zoo import get_model
    model = dataclasses.replace(get_model("llama3-8b"), num_layers=4)
    plan = ParallelPlan(world_size=8, tp=2, pp=2, global_batch_size=8, micro_batch_size=1, seq_length=2048,
                        sequence_parallel=True)
    p = tmp_path_factory.mktemp("wl") / "base.json"
    save_workload(generate(model, plan), p)
    return p.read_text()


def _run_refused(tmp_path, doc_or_text) -> str:
    p = tmp_path / "bad.json"
    p.write_text(doc_or_text if isinstance(doc_or_text, str) else json.dumps(doc_or_text))
    out = tmp_path / "res"
    return refused("native-workload", ["run", "-w", str(p), "--out", str(out), "-q"], out=out, must_mention=str(p))


def test_base_document_runs(tmp_path, base_text):
    from workload_gen.native_io import load_workload
    p = tmp_path / "w.json"
    p.write_text(base_text)
    assert load_workload(p).plan.pp == 2


@FUZZ
@given(data=st.data())
def test_bad_model_or_plan_field(tmp_path, base_text, data):
    doc = json.loads(base_text)
    part = data.draw(st.sampled_from(["model", "plan"]))
    field = data.draw(st.sampled_from(MODEL_FIELDS if part == "model" else PLAN_FIELDS))
    doc[part][field] = data.draw(st.sampled_from(BAD_POSITIVE))
    line = _run_refused(tmp_path, doc)
    assert f"'{part}" in line


def _ops(doc):
    out = []
    for si, stg in enumerate(doc["stages"]):
        for k in ("iteration_start", "iteration_end"):
            out += [(f"stages[{si}].{k}[{i}]", op) for i, op in enumerate(stg[k])]
        for ci, ch in enumerate(stg["chunks"]):
            for k in ("forward", "backward"):
                out += [(f"stages[{si}].chunks[{ci}].{k}[{i}]", op) for i, op in enumerate(ch[k])]
    return out


@settings(FUZZ, max_examples=120)
@given(data=st.data())
def test_bad_op_field(tmp_path, base_text, data):
    doc = json.loads(base_text)
    where, op = data.draw(st.sampled_from(_ops(doc)))
    if op["op"] == "compute" and data.draw(st.booleans()):
        dim = data.draw(st.sampled_from(sorted(op["shape"])))
        op["shape"][dim] = data.draw(st.sampled_from(SHAPE_BAD))
        field = "shape"
    else:
        table = COMPUTE_BAD if op["op"] == "compute" else COMM_BAD
        field = data.draw(st.sampled_from(sorted(table)))
        op[field] = data.draw(st.sampled_from(table[field]))
    line = _run_refused(tmp_path, doc)
    assert f"key '{where}.{field}" in line


@FUZZ
@given(data=st.data())
def test_bad_structure(tmp_path, base_text, data):
    doc = json.loads(base_text)
    how = data.draw(st.sampled_from(["dup_stage", "frac_stage", "chunk_id", "frac_layer", "dup_layer", "lost_layer",
                                     "stages_len", "microbatches", "schedule", "meta", "pp_send", "format",
                                     "version", "model_type", "plan_type", "stages_type"]))
    s = data.draw(st.integers(0, 1))
    stage = doc["stages"][s]
    if how == "dup_stage":
        stage["stage"] = 1 - s
    elif how == "frac_stage":
        stage["stage"] = data.draw(st.sampled_from([s + 0.5, float(s), str(s), None]))
    elif how == "chunk_id":
        stage["chunks"][0]["chunk"] = data.draw(st.sampled_from([1, -1, 0.0, "0", None]))
    elif how == "frac_layer":
        stage["chunks"][0]["layers"][0] = data.draw(st.sampled_from([0.5, -1, 99, "0", None, True]))
    elif how == "dup_layer":
        stage["chunks"][0]["layers"].append(doc["stages"][1 - s]["chunks"][0]["layers"][0])
    elif how == "lost_layer":
        stage["chunks"][0]["layers"].pop()
    elif how == "stages_len":
        doc["stages"] = doc["stages"][:1] if data.draw(st.booleans()) else doc["stages"] + [stage]
    elif how == "microbatches":
        doc["num_microbatches"] = data.draw(st.sampled_from([0, -1, 1.5, None, "4", 10**9, NAN]))
    elif how == "schedule":
        doc["schedule"] = data.draw(st.sampled_from(["zigzag", None, 1]))
    elif how == "meta":
        doc["meta"] = data.draw(st.sampled_from([[], "x", 3]))
    elif how == "pp_send":
        stage["pp_send_bytes"] = data.draw(st.sampled_from([-1, None, 1.5, "8", NAN]))
    elif how == "format":
        doc["format"] = data.draw(st.sampled_from(["clustersim", None, 1]))
    elif how == "version":
        doc["version"] = data.draw(st.sampled_from([2, "1", None, 1.5]))
    elif how == "model_type":
        doc["model"] = data.draw(st.sampled_from([[], "llama", None]))
    elif how == "plan_type":
        doc["plan"] = data.draw(st.sampled_from([[], "tp2", None]))
    elif how == "stages_type":
        doc["stages"] = data.draw(st.sampled_from([{}, "s", None, [None, None]]))
    _run_refused(tmp_path, doc)


@FUZZ
@given(cut=st.integers(1, 2000), junk=st.sampled_from([b"\xff", b"\xc3\x28", b"\x80"]))
def test_truncated_or_not_utf8(tmp_path, base_text, cut, junk):
    raw = base_text.encode()
    p = tmp_path / "bad.json"
    p.write_bytes(raw[:-cut] if cut % 2 else raw[:cut] + junk + raw[cut:])
    out = tmp_path / "res"
    refused("native-workload", ["run", "-w", str(p), "--out", str(out), "-q"], out=out, must_mention=str(p))


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"format": ' * 50_000, "{}", "null", '"x"'])
def test_deep_or_empty_json(tmp_path, text):
    _run_refused(tmp_path, text)


@pytest.mark.parametrize("path", sorted((CORPUS / "native").glob("*.json")), ids=lambda p: p.name)
def test_corpus(tmp_path, path):
    out = tmp_path / "res"
    refused("native-workload", ["run", "-w", str(path), "--out", str(out), "-q"], out=out, must_mention=str(path))


@pytest.mark.parametrize("part,field,value", [
    ("plan", "world_size", 10**9), ("plan", "global_batch_size", 800_000_000), ("model", "num_layers", 10**8),
    ("plan", "pp", 10**8), ("", "num_microbatches", 10**9),
])
def test_size_bombs_bounded(tmp_path, base_text, part, field, value):
    doc = json.loads(base_text)
    (doc[part] if part else doc)[field] = value
    p = tmp_path / "bomb.json"
    p.write_text(json.dumps(doc))
    out = tmp_path / "res"
    line = refused_bounded("native-workload", ["run", "-w", str(p), "--out", str(out), "-q"], out=out,
                           must_mention=str(p))
    assert "exceeds the limit" in line or "must be" in line
