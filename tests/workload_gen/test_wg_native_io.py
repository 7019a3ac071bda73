"""Native JSON round trip, ops CSV and the AICB CSV export."""

from __future__ import annotations

import csv
import json

import pytest

from workload_gen import ModelSpec, ParallelPlan, generate
from workload_gen.aicb_csv import COLUMNS, write_aicb_csv
from workload_gen.errors import ConfigFileError
from workload_gen.native_io import load_workload, save_workload, write_ops_csv

MOE = ModelSpec(name="moe-small", num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=2,
                ffn_hidden_size=1024, vocab_size=8192, seq_length=1024, activation="swiglu", norm="rmsnorm",
                position_embedding="rope", tie_embeddings=False, add_bias_linear=False, num_experts=8, moe_top_k=2,
                num_shared_experts=1, num_dense_layers=1)


@pytest.fixture(scope="module")
def workload():
    plan = ParallelPlan(world_size=32, tp=2, pp=2, vpp=2, ep=4, sequence_parallel=True, distributed_optimizer=True,
                        global_batch_size=32, seq_length=1024, recompute="selective")
    return generate(MOE, plan)


def test_native_round_trip_is_exact(tmp_path, workload):
    p = tmp_path / "w.json"
    save_workload(workload, p)
    back = load_workload(p)
    assert back.model == workload.model and back.plan == workload.plan
    assert (back.schedule, back.num_microbatches, back.meta) == (workload.schedule, workload.num_microbatches,
                                                                 workload.meta)
    assert len(back.stages) == len(workload.stages) == 2
    for a, b in zip(workload.stages, back.stages):
        assert a.iteration_start == b.iteration_start and a.iteration_end == b.iteration_end
        assert a.pp_send_bytes == b.pp_send_bytes
        assert len(a.chunks) == len(b.chunks) == 2
        for ca, cb in zip(a.chunks, b.chunks):
            assert (ca.chunk, ca.layers, ca.forward, ca.backward) == (cb.chunk, cb.layers, cb.forward, cb.backward)
    doc = json.loads(p.read_text())
    assert doc["format"] == "clustersim-workload" and doc["version"] == 1


def test_native_round_trip_keeps_moe_layer_pattern(tmp_path):
    m = ModelSpec(name="pat", num_layers=4, hidden_size=256, num_attention_heads=4, ffn_hidden_size=512,
                  vocab_size=1024, activation="swiglu", norm="rmsnorm", position_embedding="rope",
                  tie_embeddings=False, add_bias_linear=False, num_experts=4, moe_top_k=1,
                  moe_layer_pattern=(0, 1, 0, 1))
    w = generate(m, ParallelPlan(world_size=1, global_batch_size=1, seq_length=256))
    p = tmp_path / "w.json"
    save_workload(w, p)
    doc = json.loads(p.read_text())
    assert doc["model"]["moe_layer_pattern"] == [0, 1, 0, 1]
    back = load_workload(p)
    assert back.model.moe_layer_pattern == (0, 1, 0, 1) and back.model == m and back.model.moe_layer_ids == (1, 3)
    # an older document that kept the pattern in extra still loads it into the field
    doc["model"]["moe_layer_pattern"] = None
    doc["model"]["extra"] = {"moe_layer_pattern": [0, 1, 0, 1]}
    p.write_text(json.dumps(doc))
    assert load_workload(p).model.moe_layer_pattern == (0, 1, 0, 1)


@pytest.mark.parametrize("mutate,msg", [
    (lambda d: d.update(version=99), "key 'version'"),
    (lambda d: d.update(format="x"), "key 'format'"),
    (lambda d: d["plan"].update(bogus=1), "key 'plan'"),
    (lambda d: d["stages"][1]["chunks"][0]["forward"][0].update(op="weird"),
     r"key 'stages\[1\]\.chunks\[0\]\.forward\[0\]\.op': must be one of compute, comm"),
])
def test_bad_documents_name_the_key(tmp_path, workload, mutate, msg):
    p = tmp_path / "w.json"
    save_workload(workload, p)
    d = json.loads(p.read_text())
    mutate(d)
    p.write_text(json.dumps(d))
    with pytest.raises(ConfigFileError, match=msg):
        load_workload(p)


def test_not_json(tmp_path):
    p = tmp_path / "w.json"
    p.write_text("{\n  nope")
    with pytest.raises(ConfigFileError, match=r"w.json:2: not valid JSON"):
        load_workload(p)


def test_ops_csv_has_every_op(tmp_path, workload):
    p = tmp_path / "ops.csv"
    write_ops_csv(workload, p)
    rows = list(csv.DictReader(p.open()))
    n = sum(len(st.iteration_start) + len(st.iteration_end) + sum(len(c.forward) + len(c.backward) for c in st.chunks)
            for st in workload.stages)
    assert len(rows) == n
    assert {r["op"] for r in rows} == {"compute", "comm"}


def test_aicb_csv(tmp_path, workload):
    p = tmp_path / "aicb.csv"
    write_aicb_csv(workload, p)
    rows = list(csv.reader(p.open()))
    assert tuple(rows[0]) == COLUMNS
    assert rows[-1][0] == "CommType.epoch_end"
    body = rows[1:-1]
    assert all(r[0].startswith("CommType.") and r[1].startswith("CommGroup.") for r in body)
    sends = [r for r in body if r[0] == "CommType.isend"]
    assert sends and all(r[1] == "CommGroup.pp_group" and r[7] in ("send_next", "send_prev") for r in sends)
    a2a = [r for r in body if r[0] == "CommType.all_to_all"]
    assert a2a and all(r[1] == "CommGroup.ep_group" and r[2] == "4" for r in a2a)
    # micro-batches unrolled: every per-micro-batch op appears num_microbatches times
    st = workload.stages[0]
    per_mb = sum(1 for c in st.chunks for op in c.forward + c.backward if op.is_comm and op.microbatch == "all")
    once = sum(1 for c in st.chunks for op in c.forward + c.backward if op.is_comm and op.microbatch != "all")
    once += sum(1 for op in st.iteration_start + st.iteration_end if op.is_comm)
    assert len(body) == per_mb * workload.num_microbatches + once
