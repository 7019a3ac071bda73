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


def test_trace_ranks_draws_one_process_per_rank(rep):
    only = chrome_trace(rep, [17, 20])            # ranks 16..31 are stage 1 (PP outermost)
    counters = only["otherData"]["link_counters"]["pid"]       # the network's process (pid = world size)
    pids = {e["pid"] for e in only["traceEvents"]}
    assert pids == {17, 20, counters} and counters == 32
    od = only["otherData"]
    assert od["ranks_shown"] == [17, 20] and od["stages_shown"] == [1] and od["pipeline_flows"] == 0
    # 17 and 20 share no tp (4-blocks), dp (same r % 4) or mp (same dp index) group: no arrow
    assert od["collective_flows"] == 0 and not [e for e in only["traceEvents"] if e["ph"] in ("s", "f")]
    names = {e["pid"]: e["args"]["name"] for e in only["traceEvents"] if e["name"] == "process_name"}
    assert names[17] == ("rank 17 (stage 1, GPU 17): timeline of stage 1's representative rank 16 "
                         "(all ranks of a stage run the same program)")
    # both show the representative's program: the same slices
    def slices(pid):
        return [(e["name"], e["ts"], e["dur"]) for e in only["traceEvents"] if e["ph"] == "X" and e["pid"] == pid]
    assert slices(17) == slices(20) and len(slices(17)) > 1000
    with pytest.raises(SimError, match=r"--trace-ranks: rank 32 is not a rank of this job \(0..31\)"):
        chrome_trace(rep, [32])


# The example's groups from its plan alone (tp 4, pp 2, dp 4, rank order tp-cp-ep-dp-pp: tp varies
# fastest, then dp, then pp), independent of sim.placement.
_GROUP_OF = {"tp": lambda r: r // 4, "dp": lambda r: (r // 16, r % 4), "mp": lambda r: (r // 4) % 4,
             "pp": lambda r: r % 16, "embedding": lambda r: r % 16}


def _arrows(trace):
    ev = trace["traceEvents"]
    s = [e for e in ev if e["ph"] == "s"]
    f = {}
    for e in ev:
        if e["ph"] == "f":
            assert e["id"] not in f, "two finishes with one id"
            f[e["id"]] = e
    assert len({e["id"] for e in s}) == len(s) == len(f) and {e["id"] for e in s} == set(f)
    return [(e, f[e["id"]]) for e in s]


def test_trace_ranks_arrows_join_members_of_one_group(rep):
    ranks = [0, 1, 5, 16, 17]
    trace = json.loads(json.dumps(chrome_trace(rep, ranks)))
    ev = trace["traceEvents"]
    pairs = _arrows(trace)                     # every "s" has exactly one "f" with the same id
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "thread_name"}
    count: dict = {}
    for s, f in pairs:
        assert s["pid"] != f["pid"] and s["ts"] == f["ts"]
        kind = "pp" if s["cat"] == "pp_flow" else s["name"].removesuffix(" collective")
        assert _GROUP_OF[kind](s["pid"]) == _GROUP_OF[kind](f["pid"]), (kind, s, f)
        count[(kind, s["pid"], f["pid"])] = count.get((kind, s["pid"], f["pid"]), 0) + 1
    def n(pid, thread):      # slices of one stream of a stage representative (rank 0: stage 0, 16: stage 1)
        return sum(1 for e in ev if e["ph"] == "X" and e["pid"] == pid and threads[(pid, e["tid"])] == thread)
    n_tp0, n_tp1, n_dp = n(0, "comm:tp"), n(16, "comm:tp"), n(0, "comm:dp")
    assert n_tp0 > 100 and n_tp1 > 100 and n_dp > 0 and n(0, "comm:mp") == n(16, "comm:mp") == 1
    # tp {0, 1} and {16, 17}: every tp collective of their stage; dp {1, 5}: every dp collective of stage 0;
    # mp {0, 1, 16, 17}: from 0; pipeline: 8 activations 0->16 and 1->17, 8 gradients back; rank 5's
    # partner 21 is not traced
    assert count == {("tp", 0, 1): n_tp0, ("tp", 16, 17): n_tp1, ("dp", 1, 5): n_dp,
                     ("mp", 0, 1): 1, ("mp", 0, 16): 1, ("mp", 0, 17): 1,
                     ("pp", 0, 16): 8, ("pp", 16, 0): 8, ("pp", 1, 17): 8, ("pp", 17, 1): 8}
    od = trace["otherData"]
    assert od["pipeline_flows"] == 32 and od["collective_flows"] == n_tp0 + n_tp1 + n_dp + 3
    assert od["collective_flows_by_group"] == {"dp": n_dp, "mp": 3, "tp": n_tp0 + n_tp1}
    # each pipeline arrow lands on a receive slice of the partner
    recv = {(e["pid"], e["ts"]) for e in ev if e["ph"] == "X" and e["name"].startswith("recv ")}
    assert all((f["pid"], f["ts"]) in recv for s, f in pairs if s["cat"] == "pp_flow")


def test_default_trace_has_one_process_per_stage(trace, rep):
    pids = {e["pid"] for e in trace["traceEvents"] if e["ph"] == "X"}
    assert pids == set(rep.rep_ranks) == {0, 16}
    assert "ranks_shown" not in trace["otherData"]
    _arrows(trace)


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
