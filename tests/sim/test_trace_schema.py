"""trace.json of the built-in example: arguments on every kernel and communication slice, a flow arrow
for every pipeline send, --trace-ranks selection."""

import json

import pytest

from sim.commands import EXAMPLE_JOB, run_job
from sim.errors import SimError
from sim.report import chrome_trace, parse_ranks

KERNEL_ARGS = {"kind", "shape", "dtype", "flops", "bytes", "provenance", "time_alone_s", "layer", "variant"}
COMM_ARGS = {"collective", "group", "group_size", "size_bytes", "algorithm", "protocol", "timing", "stage"}


@pytest.fixture(scope="module")
def rep():
    return run_job(dict(EXAMPLE_JOB), trace=True)


@pytest.fixture(scope="module")
def trace(rep):
    return json.loads(json.dumps(chrome_trace(rep)))     # what trace.json holds


def test_every_kernel_slice_has_its_arguments(trace):
    kernels = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] in ("fwd", "bwd", "recompute",
                                                                                   "iteration_start", "iteration_end")]
    assert len(kernels) > 1000
    for e in kernels:
        a = e["args"]
        assert set(a) == KERNEL_ARGS, e
        assert a["provenance"] in ("measured", "interpolated", "modeled", "given")
        assert a["flops"] >= 0 and a["bytes"] >= 0 and a["time_alone_s"] > 0
        assert all(isinstance(v, int) and v > 0 for v in a["shape"].values())
    gemm = next(e["args"] for e in kernels if e["args"]["kind"] == "gemm")
    d = gemm["shape"]
    assert gemm["flops"] == pytest.approx(2.0 * d["m"] * d["n"] * d["k"] * d.get("batch", 1), rel=1e-9)


def test_every_communication_slice_has_its_arguments(trace):
    comms = [e for e in trace["traceEvents"] if e["ph"] == "X" and e["cat"] == "comm"]
    assert comms
    for e in comms:
        assert COMM_ARGS <= set(e["args"]), e
        assert e["args"]["size_bytes"] > 0 and e["args"]["group_size"] >= 2
    tp = [e["args"] for e in comms if e["args"]["group"] == "tp"]
    assert tp and {a["group_size"] for a in tp} == {4}
    assert {a["algorithm"] for a in tp} <= {"ring", "tree", "nvls", "direct", "rhd", "hierarchical", "p2p"}


def test_every_pipeline_send_has_a_flow_arrow_to_its_receive(trace, rep):
    ev = trace["traceEvents"]
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    sends = [e for e in ev if e["ph"] == "X" and threads[(e["pid"], e["tid"])] in ("comm:pp_next", "comm:pp_prev")]
    assert len(sends) == 16                     # 8 micro-batches x (activation 0->1 + gradient 1->0)
    starts = {(e["pid"], e["tid"], e["ts"]): e["id"] for e in ev if e["ph"] == "s" and e["cat"] == "pp_flow"}
    finishes = {e["id"]: e for e in ev if e["ph"] == "f" and e["cat"] == "pp_flow"}
    assert len(starts) == len(finishes) == 16 == trace["otherData"]["pipeline_flows"]
    recvs = {(e["pid"], e["tid"], e["ts"]): e for e in ev if e["ph"] == "X" and e["name"].startswith("recv ")}
    for s in sends:
        fid = starts[(s["pid"], s["tid"], s["ts"])]
        f = finishes[fid]
        assert f["bp"] == "e" and f["pid"] == rep.rep_ranks[s["args"]["peer_stage"]] != s["pid"]
        r = recvs[(f["pid"], f["tid"], f["ts"])]       # the arrow lands on the receive slice
        assert r["dur"] == s["dur"] and r["args"]["from_stage"] == s["args"]["stage"]


def test_trace_ranks_selects_stages(rep):
    only = chrome_trace(rep, [17, 20])            # ranks 16..31 are stage 1 (PP outermost)
    counters = only["otherData"]["link_counters"]["pid"]       # the network's process (pid = world size)
    pids = {e["pid"] for e in only["traceEvents"]}
    assert pids == {16, counters} and counters == 32
    assert only["otherData"]["stages_shown"] == [1] and only["otherData"]["pipeline_flows"] == 0
    name = next(e["args"]["name"] for e in only["traceEvents"] if e["name"] == "process_name")
    assert name == "rank 16 (stage 1, GPU 16); stands for rank(s) 17, 20 of the stage"
    with pytest.raises(SimError, match=r"--trace-ranks: rank 32 is not a rank of this job \(0..31\)"):
        chrome_trace(rep, [32])


def test_parse_ranks():
    assert parse_ranks("0,16") == [0, 16]
    assert parse_ranks("0-3, 8") == [0, 1, 2, 3, 8]
    with pytest.raises(SimError, match="--trace-ranks: 'a' is not a rank"):
        parse_ranks("0,a")
    with pytest.raises(SimError, match="--trace-ranks: '5-2'"):
        parse_ranks("5-2")
    with pytest.raises(SimError, match="--trace-ranks: '0-99999999' goes beyond the largest world size 131,072"):
        parse_ranks("0-99999999")


def test_cli_trace_ranks_writes_only_those_stages(tmp_path):
    from sim.cli import main
    out = tmp_path / "r"
    assert main(["run", "--no-charts", "-q", "--trace-ranks", "0", "-o", str(out)]) == 0
    t = json.loads((out / "trace.json").read_text())
    assert t["otherData"]["stages_shown"] == [0]
