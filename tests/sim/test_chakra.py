"""Chakra execution-trace export/import (sim.chakra), checked with mlc-chakra's own decoder.

Skipped (with the reason) when mlc-chakra is not installed: pip install --no-deps mlc-chakra protobuf.
"""

from __future__ import annotations

import io
import json
from collections import Counter

import pytest

pytest.importorskip("chakra.schema.protobuf.et_def_pb2",
                    reason="mlc-chakra not installed (pip install --no-deps mlc-chakra protobuf)")

from chakra.schema.protobuf import et_def_pb2 as pb  # noqa: E402
from chakra.src.third_party.utils.protolib import decodeMessage, encodeMessage, openFileRd  # noqa: E402

import topo  # noqa: E402
from sim.chakra import compute_db_times, export_chakra, load_chakra, parse_ranks  # noqa: E402
from sim.simulation import simulate  # noqa: E402
from workload_gen import ModelSpec, ParallelPlan, generate  # noqa: E402
from workload_gen.errors import ConfigFileError, WorkloadError  # noqa: E402

MODEL = ModelSpec(name="tiny", num_layers=4, hidden_size=1024, num_attention_heads=16, ffn_hidden_size=4096,
                  vocab_size=32000, seq_length=2048)
# 8 GPUs: TP 2 x PP 2 x DP 2, 4 micro-batches (gbs 8 / (mbs 1 x dp 2))
PLAN = ParallelPlan(world_size=8, tp=2, pp=2, global_batch_size=8, micro_batch_size=1, seq_length=2048,
                    sequence_parallel=True, distributed_optimizer=True)
TP_GROUPS = [{0, 1}, {2, 3}, {4, 5}, {6, 7}]          # default rank order tp-cp-ep-dp-pp
DP_GROUPS = [{0, 2}, {1, 3}, {4, 6}, {5, 7}]


def decode(path):
    """(GlobalMetadata, [Node]) with mlc-chakra's own reader (protolib.decodeMessage)."""
    fh = openFileRd(str(path))
    gm = pb.GlobalMetadata()
    assert decodeMessage(fh, gm)
    nodes = []
    while True:
        n = pb.Node()
        if not decodeMessage(fh, n):
            break
        nodes.append(n)
    fh.close()
    return gm, nodes


def attrs(node) -> dict:
    out = {}
    for a in node.attr:
        which = a.WhichOneof("value")
        v = getattr(a, which)
        out[a.name] = list(v.values) if which.endswith("_list") else v
    return out


def rewrite(path, keep_attr=lambda name: True, drop_metadata_node=False):
    """Re-encode a trace file keeping only the node attributes `keep_attr` accepts."""
    gm, nodes = decode(path)
    buf = io.BytesIO()
    encodeMessage(buf, pb.GlobalMetadata(version=gm.version))
    for n in nodes:
        if drop_metadata_node and n.type == pb.METADATA_NODE:
            continue
        kept = [a for a in n.attr if keep_attr(a.name)]
        del n.attr[:]
        n.attr.extend(kept)
        encodeMessage(buf, n)
    path.write_bytes(buf.getvalue())


@pytest.fixture(scope="module")
def native():
    return generate(MODEL, PLAN)


@pytest.fixture(scope="module")
def exported(native, tmp_path_factory):
    d = tmp_path_factory.mktemp("chakra")
    time_of, timing = compute_db_times(native, "H100")
    export_chakra(native, d, time_of=time_of, timing=timing)
    return d, time_of


@pytest.fixture(scope="module")
def fabric():
    return topo.build("spectrum-x", gpus=8)


def expected_counts(w, stage: int):
    """Per rank of `stage`, counted from the Workload: compute ops, collectives (collective, bytes), p2p."""
    m = w.num_microbatches
    st = w.stages[stage]
    comp = 0
    coll: Counter = Counter()
    p2p: Counter = Counter()
    items = [(op, 1) for op in st.iteration_start + st.iteration_end]
    items += [(op, m if op.microbatch == "all" else 1) for ch in st.chunks for op in ch.forward + ch.backward]
    for op, k in items:
        if not op.is_comm:
            comp += k
        elif op.group == "pp":
            p2p[(op.collective, op.size_bytes)] += k
        else:
            coll[(op.collective, op.size_bytes)] += k
    return comp, coll, p2p


def test_files_and_metadata(exported):
    d, _ = exported
    assert sorted(p.name for p in d.iterdir()) == [f"clustersim.{r}.et" for r in range(8)] + ["comm_group.json"]
    gm, nodes = decode(d / "clustersim.5.et")
    assert gm.version == "1.0.0"
    assert nodes[0].type == pb.METADATA_NODE
    a = attrs(nodes[0])
    assert (a["rank"], a["stage"], a["world_size"]) == (5, 1, 8)
    assert json.loads(a["cs_plan"])["tp"] == 2


@pytest.mark.parametrize("rank", range(8))
def test_per_rank_node_counts_and_collective_sizes(exported, native, rank):
    d, _ = exported
    _, nodes = decode(d / f"clustersim.{rank}.et")
    stage = 0 if rank < 4 else 1
    comp, coll, p2p = expected_counts(native, stage)
    types = Counter(n.type for n in nodes)
    assert types[pb.METADATA_NODE] == 1
    assert types[pb.COMP_NODE] == comp
    got_coll = Counter((pb.CollectiveCommType.Name(attrs(n)["comm_type"]).lower(), attrs(n)["comm_size"])
                       for n in nodes if n.type == pb.COMM_COLL_NODE)
    assert got_coll == coll
    got_p2p = Counter(("send" if n.type == pb.COMM_SEND_NODE else "recv", attrs(n)["comm_size"])
                      for n in nodes if n.type in (pb.COMM_SEND_NODE, pb.COMM_RECV_NODE))
    assert got_p2p == p2p
    assert sum(got_p2p.values()) == 2 * native.num_microbatches   # 1F1B: one send and one receive per mb
    assert len(nodes) == 1 + comp + sum(coll.values()) + sum(p2p.values())


def test_collective_groups_are_concrete_ranks(exported):
    d, _ = exported
    groups = json.loads((d / "comm_group.json").read_text())
    for rank in range(8):
        _, nodes = decode(d / f"clustersim.{rank}.et")
        for n in nodes:
            if n.type != pb.COMM_COLL_NODE:
                continue
            a = attrs(n)
            ranks = set(a["cs_pg_ranks"])
            assert rank in ranks and set(groups[a["pg_name"]]) == ranks
            kind = json.loads(a["cs_op"])["group"]
            if kind == "tp":
                assert ranks in TP_GROUPS
            elif kind in ("dp", "dp_cp"):
                assert ranks in DP_GROUPS


def test_durations_dependencies_and_p2p_matching(exported, native):
    d, time_of = exported
    sends, recvs = {}, {}
    for rank in range(8):
        _, nodes = decode(d / f"clustersim.{rank}.et")
        ids = [n.id for n in nodes]
        assert ids == list(range(len(nodes)))
        for n in nodes:
            assert all(dep < n.id for dep in list(n.data_deps) + list(n.ctrl_deps))   # program order
            a = attrs(n)
            if n.type == pb.COMP_NODE:
                assert a["is_cpu_op"] is False
                assert abs(n.duration_micros - a["cs_duration_s"] * 1e6) <= 0.5
            elif n.type == pb.COMM_SEND_NODE:
                assert a["comm_src"] == rank
                sends[(rank, a["comm_dst"], a["comm_tag"])] = a["comm_size"]
            elif n.type == pb.COMM_RECV_NODE:
                assert a["comm_dst"] == rank
                recvs[(a["comm_src"], rank, a["comm_tag"])] = a["comm_size"]
        # every node but the metadata and the first op depends on something
        assert sum(1 for n in nodes if not n.data_deps and not n.ctrl_deps) == 2
    assert sends == recvs and len(sends) == 4 * 2 * native.num_microbatches
    # compute time of rank 0 = compute_db times x executions
    m = native.num_microbatches
    st = native.stages[0]
    items = [(op, 1) for op in st.iteration_start + st.iteration_end]
    items += [(op, m if op.microbatch == "all" else 1) for ch in st.chunks for op in ch.forward + ch.backward]
    want_s = sum(time_of(op) * k for op, k in items if not op.is_comm)
    _, nodes = decode(d / "clustersim.0.et")
    got_s = sum(attrs(n)["cs_duration_s"] for n in nodes if n.type == pb.COMP_NODE)
    assert got_s == pytest.approx(want_s, rel=1e-12)


def test_import_simulates_to_native_iteration_time(exported, native, fabric):
    d, _ = exported
    w = load_chakra(d)
    assert (w.plan, w.schedule, w.num_microbatches) == (native.plan, native.schedule, native.num_microbatches)
    a = simulate(native, fabric, gpu="H100")
    b = simulate(w, fabric, gpu="H100")
    assert abs(b.iteration_time_s / a.iteration_time_s - 1) < 0.01
    assert b.compute_sources == {"trace": 1.0}
    assert b.memory["fits"] is True      # model and plan travel in the metadata node


def test_import_from_integer_microseconds_only(exported, native, fabric, tmp_path):
    """Chakra's own duration field (whole microseconds) alone: still within 1% of the native run."""
    d, _ = exported
    for f in d.glob("*.et"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
        rewrite(tmp_path / f.name, keep_attr=lambda name: name != "cs_duration_s")
    w = load_chakra(tmp_path / "clustersim.0.et")
    a = simulate(native, fabric, gpu="H100").iteration_time_s
    b = simulate(w, fabric, gpu="H100").iteration_time_s
    assert b != a and abs(b / a - 1) < 0.01


def test_generic_trace_without_annotations(tmp_path, fabric):
    """A pp=1 export stripped of every clustersim attribute (as a foreign trace): groups from pg_name and
    comm_group.json, blocking / wait points from the dependencies; iteration time within 1%."""
    plan = ParallelPlan(world_size=8, tp=2, pp=1, global_batch_size=8, micro_batch_size=1, seq_length=2048,
                        sequence_parallel=True, distributed_optimizer=True)
    w = generate(MODEL, plan)
    time_of, timing = compute_db_times(w, "H100")
    export_chakra(w, tmp_path, time_of=time_of, timing=timing, prefix="job")
    for f in tmp_path.glob("*.et"):
        rewrite(f, keep_attr=lambda name: not name.startswith("cs_"), drop_metadata_node=True)
    g = load_chakra(tmp_path)
    assert (g.plan.tp, g.plan.dp, g.plan.pp, g.num_microbatches) == (2, 4, 1, 1)
    assert g.meta["model_known"] is False and g.meta["warnings"] == []
    comp, coll, _ = expected_counts(w, 0)
    ops = g.stages[0].chunks[0].forward
    assert sum(1 for op in ops if not op.is_comm) == comp
    assert Counter((op.collective, op.size_bytes) for op in ops if op.is_comm) == coll
    a = simulate(w, fabric, gpu="H100")
    b = simulate(g, fabric, gpu="H100")
    assert abs(b.iteration_time_s / a.iteration_time_s - 1) < 0.01
    assert b.memory["fits"] is None and b.meta["tokens_known"] is False


# ------------------------------------------------------------------ hand-written foreign traces
def _node(nid, ntype, name, deps=(), dur=0, **at):
    n = pb.Node(id=nid, name=name, type=ntype, duration_micros=dur)
    n.data_deps.extend(deps)
    for k, v in at.items():
        if isinstance(v, bool):
            n.attr.append(pb.AttributeProto(name=k, bool_val=v))
        elif isinstance(v, int):
            n.attr.append(pb.AttributeProto(name=k, int64_val=v))
        else:
            n.attr.append(pb.AttributeProto(name=k, string_val=v))
    return n


def _write(path, nodes):
    buf = io.BytesIO()
    encodeMessage(buf, pb.GlobalMetadata(version="0.0.4"))
    for n in nodes:
        encodeMessage(buf, n)
    path.write_bytes(buf.getvalue())


def _foreign(tmp_path, world=4, extra=()):
    """Per rank: fwd 100 us; TP all-reduce (blocking); bwd 50 us; DP all-reduce waited by the step."""
    (tmp_path / "comm_group.json").write_text(json.dumps({"tp0": [0, 1], "tp1": [2, 3], "dp0": [0, 2],
                                                          "dp1": [1, 3]}))
    for r in range(world):
        nodes = [_node(0, pb.COMP_NODE, "fwd", dur=100, is_cpu_op=False),
                 _node(1, pb.COMM_COLL_NODE, "tp_ar", [0], comm_type=pb.ALL_REDUCE, comm_size=1 << 20,
                       pg_name=f"tp{r // 2}"),
                 _node(2, pb.COMP_NODE, "bwd", [1], dur=50, is_cpu_op=False),
                 _node(3, pb.COMM_COLL_NODE, "dp_ar", [2], comm_type=pb.ALL_REDUCE, comm_size=1 << 24,
                       pg_name=f"dp{r % 2}"),
                 _node(4, pb.COMP_NODE, "other", [2], dur=20, is_cpu_op=False),
                 _node(5, pb.COMP_NODE, "step", [3, 4], dur=30, is_cpu_op=False),
                 _node(6, pb.COMP_NODE, "python", [], dur=999, is_cpu_op=True),
                 _node(7, pb.MEM_LOAD_NODE, "load", []),
                 _node(8, pb.COMM_COLL_NODE, "barrier", [5], comm_type=pb.BARRIER, comm_size=0),
                 *extra]
        _write(tmp_path / f"trace.{r}.et", nodes)


def test_foreign_trace_structure(tmp_path):
    _foreign(tmp_path)
    w = load_chakra(tmp_path)
    assert (w.plan.world_size, w.plan.tp, w.plan.dp) == (4, 2, 2)
    ops = w.stages[0].chunks[0].forward
    assert [op.name for op in ops] == ["fwd", "tp_ar", "bwd", "dp_ar", "other", "step"]
    assert [op.time_s for op in ops if not op.is_comm] == pytest.approx([100e-6, 50e-6, 20e-6, 30e-6])
    tp_ar, dp_ar = ops[1], ops[3]
    assert (tp_ar.group, tp_ar.blocking, tp_ar.size_bytes) == ("tp", True, 1 << 20)
    assert (dp_ar.group, dp_ar.blocking, dp_ar.wait_op) == ("dp", False, "step")
    assert w.meta["ignored_nodes"] == {"COMP_NODE (CPU op)": 4, "MEM_LOAD_NODE": 4, "COMM_COLL_NODE BARRIER": 4}


def test_foreign_trace_simulates(tmp_path):
    _foreign(tmp_path)
    rep = simulate(load_chakra(tmp_path), topo.build("spectrum-x", gpus=8), gpu="H100", contention=False)
    # compute alone is 200 us (no contention slowdown); the exposed TP all-reduce adds to it
    assert rep.compute_s == pytest.approx(200e-6, rel=1e-9)
    assert rep.iteration_time_s > 200e-6 and rep.compute_sources == {"trace": 1.0}


# ------------------------------------------------------------------ errors
def test_truncated_file_names_file_and_node(exported, tmp_path):
    d, _ = exported
    data = (d / "clustersim.0.et").read_bytes()
    (tmp_path / "clustersim.0.et").write_bytes(data[: len(data) // 2])
    with pytest.raises(ConfigFileError, match=r"clustersim\.0\.et: byte \d+: the node after id \d+ is truncated"):
        load_chakra(tmp_path)


def test_garbage_file(tmp_path):
    (tmp_path / "x.0.et").write_bytes(b"\x05\xff\xff\xff\xff\xff")
    with pytest.raises(ConfigFileError, match=r"x\.0\.et: byte 1: GlobalMetadata is not a valid Chakra message"):
        load_chakra(tmp_path)


def test_unknown_dependency_and_cycle(tmp_path):
    _foreign(tmp_path, extra=[_node(9, pb.COMP_NODE, "bad", [42], dur=1, is_cpu_op=False)])
    with pytest.raises(ConfigFileError, match=r"trace\.0\.et: node id 9: depends on unknown node id 42"):
        load_chakra(tmp_path)
    _foreign(tmp_path, extra=[_node(9, pb.COMP_NODE, "a", [10], dur=1, is_cpu_op=False),
                              _node(10, pb.COMP_NODE, "b", [9], dur=1, is_cpu_op=False)])
    with pytest.raises(ConfigFileError, match=r"trace\.0\.et: node id 9: dependency cycle"):
        load_chakra(tmp_path)


def test_foreign_trace_errors(tmp_path):
    _foreign(tmp_path)
    (tmp_path / "trace.3.et").unlink()
    (tmp_path / "trace.4.et").write_bytes((tmp_path / "trace.0.et").read_bytes())
    with pytest.raises(ConfigFileError, match=r"trace\.3\.et missing"):
        load_chakra(tmp_path)
    _foreign(tmp_path, extra=[_node(9, pb.COMM_SEND_NODE, "send", [5], comm_dst=1, comm_size=8)])
    (tmp_path / "trace.4.et").unlink()
    with pytest.raises(ConfigFileError, match=r"trace\.0\.et: node id 9: COMM_SEND_NODE: pipeline send/recv"):
        load_chakra(tmp_path)
    _foreign(tmp_path, extra=[_node(9, pb.COMM_COLL_NODE, "x", [5], comm_type=pb.ALL_GATHER, comm_size=8,
                                    pg_name="nope")])
    with pytest.raises(ConfigFileError, match=r"node id 9: pg_name 'nope' not in comm_group\.json"):
        load_chakra(tmp_path)


def test_group_that_fits_no_plan(tmp_path):
    _foreign(tmp_path)
    # ranks 0 and 1 name the whole world where 2 and 3 name a TP pair: no TP x DP plan has both
    (tmp_path / "comm_group.json").write_text(json.dumps({"tp0": [0, 1, 2, 3], "tp1": [2, 3], "dp0": [0, 2],
                                                          "dp1": [1, 3]}))
    with pytest.raises(ConfigFileError, match=r"process group \[0, 1, 2, 3\] is neither a TP block of 2"):
        load_chakra(tmp_path)


def test_annotated_group_mismatch(exported, tmp_path):
    d, _ = exported
    for f in d.glob("*"):
        (tmp_path / f.name).write_bytes(f.read_bytes())
    gm, nodes = decode(tmp_path / "clustersim.1.et")
    target = next(n for n in nodes if n.type == pb.COMM_COLL_NODE and json.loads(attrs(n)["cs_op"])["group"] == "tp")
    for a in target.attr:
        if a.name == "cs_pg_ranks":
            del a.int64_list.values[:]
            a.int64_list.values.extend([1, 3])
    buf = io.BytesIO()
    encodeMessage(buf, gm)
    for n in nodes:
        encodeMessage(buf, n)
    (tmp_path / "clustersim.1.et").write_bytes(buf.getvalue())
    with pytest.raises(ConfigFileError, match=rf"clustersim\.1\.et: node id {target.id}: process group \[1, 3\] "
                                              r"is not the plan's 'tp' group of rank 1 \(\[0, 1\]\)"):
        load_chakra(tmp_path)


def test_missing_stage_and_mixed_prefixes(exported, tmp_path):
    d, _ = exported
    for r in (0, 1):
        (tmp_path / f"clustersim.{r}.et").write_bytes((d / f"clustersim.{r}.et").read_bytes())
    with pytest.raises(ConfigFileError, match="no trace file of pipeline stage 1"):
        load_chakra(tmp_path)
    (tmp_path / "other.0.et").write_bytes(b"")
    with pytest.raises(ConfigFileError, match="traces of several jobs"):
        load_chakra(tmp_path)
    with pytest.raises(ConfigFileError, match=r"other\.0\.et: empty file"):
        load_chakra(tmp_path / "other.0.et")


def test_parse_ranks():
    assert parse_ranks("0-2,5, 7", 8) == [0, 1, 2, 5, 7]
    assert parse_ranks(None, 3) == [0, 1, 2]
    with pytest.raises(WorkloadError, match=r"--chakra-ranks '0-9': '0-9' outside ranks 0\.\.7"):
        parse_ranks("0-9", 8)
    with pytest.raises(WorkloadError, match="'x' is not a rank"):
        parse_ranks("x", 8)


def test_cli_export_subset_and_run(tmp_path, monkeypatch, capsys):
    from sim.cli import main
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "et"
    rc = main(["workload", "aicb-7", "--num-layers", "2", "--tp", "2", "--pp", "2", "--world-size", "8",
               "--gbs", "8", "--chakra", str(out), "--chakra-ranks", "0,4"])
    assert rc == 0
    assert sorted(p.name for p in out.iterdir()) == ["clustersim.0.et", "clustersim.4.et", "comm_group.json"]
    assert "wrote Chakra traces" in capsys.readouterr().out
    rc = main(["run", "-w", str(out), "--network", "analytical", "--out", str(tmp_path / "res")])
    assert rc == 0
    summary = json.loads((tmp_path / "res" / "summary.json").read_text())
    assert summary["compute_sources"] == {"trace": 1.0} and summary["meta"]["world_size"] == 8


def test_cli_errors(tmp_path, capsys):
    from sim.cli import main
    (tmp_path / "file").write_text("x")
    assert main(["workload", "aicb-7", "--chakra", str(tmp_path / "file")]) == 2
    assert "--chakra: " in capsys.readouterr().err
    assert main(["workload", "aicb-7", "--chakra-ranks", "1"]) == 2
    assert "give --chakra DIR too" in capsys.readouterr().err
