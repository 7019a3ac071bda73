"""SimAI workload text: exact format on export, import of SimAI's examples, round trip."""

from __future__ import annotations

from collections import Counter

import pytest

from workload_gen import ModelSpec, ParallelPlan, generate
from workload_gen.errors import ConfigFileError
from workload_gen.simai_workload import read_simai_workload, write_simai_micro, write_simai_workload
from workload_gen.zoo import get_model

SIMAI_GROUPS = {"tp", "dp", "ep", "edp"}


def _gpt3_workload():
    plan = ParallelPlan(world_size=1024, tp=8, pp=8, sequence_parallel=True, micro_batch_size=1, seq_length=2048,
                        global_batch_size=512, distributed_optimizer=True)
    return generate(get_model("gpt3-175b"), plan)


def test_gpt3_export_header_and_tp_sizes(tmp_path):
    w = _gpt3_workload()
    out = tmp_path / "gpt3.txt"
    write_simai_workload(w, out)
    lines = out.read_text().splitlines()
    head = lines[0].split()
    assert head[0] == "HYBRID_TRANSFORMER_FWD_IN_BCKWD"
    kv = {head[i]: head[i + 1] for i in range(1, len(head) - 1)}
    assert kv["model_parallel_NPU_group:"] == "8" and kv["pp:"] == "8" and kv["all_gpus:"] == "1024"
    assert kv["ga:"] == str(512 // 16)                       # dp = 1024 / 64 = 16
    assert kv["pp_comm:"] == str(2 * 1 * 2048 * 12288 // 8)   # SP: activation / TP
    n = int(lines[1])
    assert all(ln.startswith("#clustersim ") for ln in lines[2 + n:])   # SimAI stops after n layer lines
    tp_types = Counter()
    for ln in lines[2:2 + n]:
        f = ln.split("\t")
        assert len(f) == 12 and f[1] == "-1" and f[11] == "100"
        assert all(int(f[i]) >= 0 for i in (2, 4, 5, 7, 8, 10))
        for ci, si in ((3, 4), (6, 7)):
            if f[ci] in ("ALLGATHER", "REDUCESCATTER", "ALLREDUCE"):
                tp_types[f[ci]] += 1
                if f[ci] != "ALLREDUCE":
                    assert int(f[si]) == 2 * 1 * 2048 * 12288
    assert tp_types["ALLGATHER"] > 0 and tp_types["REDUCESCATTER"] > 0


def _comm_multiset(ops, scope):
    c = Counter()
    for op in ops:
        if not op.is_comm or op.group not in SIMAI_GROUPS and op.group not in ("dp_cp", "etp"):
            continue
        if (op.microbatch == "all") != (scope == "all"):
            continue
        g = {"dp_cp": "dp", "etp": "tp"}.get(op.group, op.group)
        c[(op.collective, g, op.size_bytes)] += 1
    return c


@pytest.mark.parametrize("name,kw", [
    ("gpt", dict(world_size=64, tp=4, pp=2, sequence_parallel=True, distributed_optimizer=True,
                 global_batch_size=64, seq_length=1024, grad_bucket_elements=2_000_000)),
    ("gpt", dict(world_size=16, tp=2, pp=1, global_batch_size=32, seq_length=1024)),
    ("gpt", dict(world_size=32, tp=2, pp=2, vpp=2, cp=2, sequence_parallel=True, tp_comm_overlap=True,
                 distributed_optimizer=True, global_batch_size=32, seq_length=2048, recompute="full")),
    ("moe", dict(world_size=32, tp=2, pp=2, ep=4, sequence_parallel=True, distributed_optimizer=True,
                 global_batch_size=32, seq_length=1024)),
    ("gpt", dict(world_size=16, tp=2, framework="deepspeed", zero_stage=3, global_batch_size=16,
                 seq_length=1024, reduce_bucket_elements=3_000_000)),
])
def test_round_trip_keeps_collectives(tmp_path, name, kw):
    models = {
        "gpt": ModelSpec(name="gpt-small", num_layers=4, hidden_size=512, num_attention_heads=8,
                         ffn_hidden_size=2048, vocab_size=8192, seq_length=1024),
        "moe": ModelSpec(name="moe-small", num_layers=4, hidden_size=512, num_attention_heads=8, num_kv_heads=2,
                         ffn_hidden_size=1024, vocab_size=8192, seq_length=1024, activation="swiglu",
                         norm="rmsnorm", position_embedding="rope", tie_embeddings=False,
                         add_bias_linear=False, num_experts=8, moe_top_k=2),
    }
    w = generate(models[name], ParallelPlan(**kw))
    path = tmp_path / "w.txt"
    write_simai_workload(w, path)
    back = read_simai_workload(path, clustersim_section=False)   # the layer lines alone, as SimAI reads them
    assert back.num_microbatches == w.num_microbatches and back.meta["ga_unrolled_in_file"] == (w.num_microbatches > 1)
    assert (back.plan.tp, back.plan.pp, back.plan.ep, back.plan.world_size) == (w.plan.tp, w.plan.pp, w.plan.ep,
                                                                                 w.plan.world_size)
    st0 = w.stages[0]
    orig_ops = [op for ch in st0.chunks for op in ch.forward + ch.backward]
    new_ops = [op for ch in back.stages[0].chunks for op in ch.forward + ch.backward]
    assert _comm_multiset(new_ops, "all") == _comm_multiset(orig_ops, "all")
    once = _comm_multiset(orig_ops, "once") + _comm_multiset(st0.iteration_end, "all")
    assert _comm_multiset(new_ops, "once") == once
    assert back.stages[0].pp_send_bytes == st0.pp_send_bytes


def test_import_simai_examples(shared_dir):
    d = shared_dir / "data" / "simai_examples"
    w = read_simai_workload(d / "microAllReduce.txt")
    ops = w.stages[0].chunks[0].forward
    assert [(op.collective, op.group, op.size_bytes) for op in ops if op.is_comm] == [
        ("all_reduce", "tp", 16777216), ("all_reduce", "tp", 67108864)]
    assert [op.time_s for op in ops if not op.is_comm] == pytest.approx([556e-6, 556e-6])

    w = read_simai_workload(d / "workload_analytical.txt")
    assert (w.plan.tp, w.plan.ep, w.plan.pp, w.plan.world_size, w.num_microbatches) == (2, 16, 12, 9216, 24)
    assert len(w.stages) == 12 and w.stages[0].pp_send_bytes == 50331648
    ch = w.stages[0].chunks[0]
    c = Counter((op.collective, op.group, op.size_bytes) for op in ch.forward if op.is_comm and op.group != "pp")
    # per micro-batch: 8 layers x (2 attention + 7 MoE lines) + embedding + final column
    assert c[("all_to_all", "ep", 100663296)] == 16
    assert c[("all_gather", "tp", 50331648)] == 8 + 1   # attention_column + final_column
    once = Counter((op.collective, op.group, op.size_bytes) for op in ch.backward
                   if op.is_comm and op.microbatch == "last")
    assert once[("all_gather", "dp", 2807758848)] == 1 and once[("reduce_scatter", "edp", 38654705664)] == 1

    w = read_simai_workload(d / "aicb_gpt7b_128gpu_tp4_ga8.txt")
    assert (w.plan.tp, w.plan.pp, w.plan.world_size, w.num_microbatches) == (4, 1, 128, 8)
    fwd = w.stages[0].chunks[0].forward
    assert sum(1 for op in fwd if op.is_comm and op.microbatch == "all") == 1 + 72
    assert sum(op.time_s for op in fwd if not op.is_comm and op.microbatch == "all") == pytest.approx(
        799e-6 + 36 * (1820e-6 + 2478e-6))


def _write(tmp_path, text):
    p = tmp_path / "w.txt"
    p.write_text(text)
    return p


def test_old_header_defaults(tmp_path):
    p = _write(tmp_path, "HYBRID_TRANSFORMER_FWD_IN_BCKWD\tmodel_parallel_NPU_group: 8 checkpoints: 0 "
                         "checkpoint_initiates: 0\n1\nattention_layer -1 10 ALLREDUCE 1024 10 NONE 0 10 NONE 0 100\n")
    w = read_simai_workload(p)
    assert (w.plan.tp, w.plan.pp, w.plan.ep, w.num_microbatches, w.plan.world_size) == (8, 1, 1, 1, 8)
    w = read_simai_workload(p, world_size=64)
    assert w.plan.dp == 8


@pytest.mark.parametrize("text,msg", [
    ("DATA\n0\n", "unsupported SimAI parallelism policy 'DATA'"),
    ("HYBRID_TRANSFORMER model_parallel_NPU_group: 2\n0\n", "unsupported"),
    ("hello\n", "not a SimAI workload file"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2\n1\nx -1 1 NONE 0 1 NONE 0 1 NONE 0\n",
     ":3: a layer line needs exactly 12 fields (got 11)"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2\n2\nx -1 1 NONE 0 1 NONE 0 1 NONE 0 1\n",
     "announces 2 layer lines but the file has 1"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2\n1\nx -1 1 FOO 4 1 NONE 0 1 NONE 0 1\n",
     ":3: unknown comm type 'FOO'"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2\n1\nx -1 abc NONE 0 1 NONE 0 1 NONE 0 1\n",
     ":3: forward compute time must be an integer"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD ep: 2\n0\n", "model_parallel_NPU_group"),
    ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 4 all_gpus: 6\n0\n", "divisible"),
])
def test_bad_files_one_line_errors(tmp_path, text, msg):
    p = _write(tmp_path, text)
    with pytest.raises(ConfigFileError) as e:
        read_simai_workload(p)
    assert msg in str(e.value) and "\n" not in str(e.value)


def test_column_relative_groups(tmp_path):
    p = _write(tmp_path, "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 ep: 2 all_gpus: 8\n1\n"
                         "moe -1 5 ALLTOALL_EP 4096 5 ALLGATHER 8192 5 REDUCESCATTER_DP_EP 16384 100\n")
    ch = read_simai_workload(p).stages[0].chunks[0]
    comms = [(op.collective, op.group, op.size_bytes, op.blocking) for op in ch.forward + ch.backward if op.is_comm]
    assert comms == [("all_to_all", "ep", 4096, True), ("all_gather", "tp", 8192, True),
                     ("reduce_scatter", "edp", 16384, False)]


def test_micro_round_trip(tmp_path):
    p = tmp_path / "micro.txt"
    write_simai_micro(p, [1 << 20, 1 << 21, 1 << 22], world_size=16)
    lines = p.read_text().splitlines()
    assert lines[0].startswith("MICRO") and lines[1] == "3" and len(lines[2].split("\t")) == 12
    w = read_simai_workload(p)
    assert [(op.collective, op.group, op.size_bytes) for op in w.stages[0].chunks[0].forward if op.is_comm] == [
        ("all_reduce", "dp", 1 << 20), ("all_reduce", "dp", 1 << 21), ("all_reduce", "dp", 1 << 22)]
    assert w.plan.world_size == 16


def test_reader_median_is_statistics_median():
    """The reader's per-line median of the micro-batch copies (kept without importing statistics)."""
    import random
    import statistics

    from workload_gen.simai_workload import _median
    rng = random.Random(16)
    for n in list(range(1, 30)) + [24, 96, 97]:
        for _ in range(20):
            values = [rng.choice((1, 2, 3, rng.randrange(10**12))) for _ in range(n)]
            got, want = _median(values), statistics.median(values)
            assert got == want and type(got) is type(want), (values, got, want)


def _layer_file(tmp_path, rows: list[str], name: str = "w.txt") -> str:
    head = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 2 pp: 1 ga: 1 all_gpus: 4"
    path = tmp_path / name
    path.write_text("\n".join([head, str(len(rows))] + rows) + "\n")
    return str(path)


def test_bulk_layer_parse_equals_line_by_line(tmp_path):
    # the column-wise parse (distinct values converted once) gives the line-by-line parse's lines,
    # with the unusual but valid spellings of integers and comm types a hand-made file may hold
    from workload_gen.simai_workload import _parse_body, _parse_body_bulk, _read_lines
    rows = ["a\t-1\t1.0e3\tALLREDUCE\t+4096\t7\tNONE\t0\t5\tALLGATHER_EP\t0\t100",
            "b\t+2\t1000\tALLTOALL_EP\t64\t0\tREDUCESCATTER\t12\t3\tBROADCAST\t9\t100",
            "a\t-1\t1000\tALLREDUCEALLTOALL\t0\t7\tALLREDUCE_DP_EP\t8\t5\tALLGATHER\t16\t1e2"]
    path = _layer_file(tmp_path, rows)
    _h, lines, _t, _c = _read_lines(path)
    body = [(i + 3, r.split()) for i, r in enumerate(rows)]
    slow = _parse_body(path, body)
    assert _parse_body_bulk(body) is not None
    got = [(ln.name, ln.ns, ln.comm, ln.size, ln.lineno) for ln in lines]
    assert got == [(ln.name, ln.ns, ln.comm, ln.size, ln.lineno) for ln in slow]
    assert got[0] == ("a", (1000, 7, 5), (("all_reduce", "tp"), None, None), (4096, 0, 0), 3)
    assert got[1][2] == (("all_to_all", "ep"), ("reduce_scatter", "tp"), None)     # BROADCAST: no traffic
    assert got[2][2:4] == ((None, ("all_reduce", "edp"), ("all_gather", "dp")), (0, 8, 16))


@pytest.mark.parametrize("bad_rows,msg", [
    # the first bad line is named, whichever column of a later line is bad too
    (["x\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t-5\t100", "y\t-1\tzz\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100"],
     ":3: wg comm size must be between 0 and"),
    (["x\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100", "y\t-1\t1\tFOO\t4\t1\tNONE\t0\t1\tNONE\t0\t100"],
     ":4: unknown comm type 'FOO'"),
    (["x\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100", "y\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0"],
     ":4: a layer line needs exactly 12 fields (got 11)"),
    (["x\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\tq", "y\tdep\t1\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100"],
     ":3: weight-grad update time must be an integer (got 'q')"),
])
def test_bad_layer_field_names_first_bad_line(tmp_path, bad_rows, msg):
    path = _layer_file(tmp_path, bad_rows)
    with pytest.raises(ConfigFileError) as exc:
        read_simai_workload(path)
    assert f"{path}{msg}" in str(exc.value) and "\n" not in str(exc.value)
