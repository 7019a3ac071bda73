"""sim.energy / sim.train_cost: cost and energy of one iteration by hand from the timeline; time, cost and
energy to train; the power table; `clustersim run --train-tokens`."""

from __future__ import annotations

import csv
import json
import math

import pytest
from helpers_sim import pipeline_workload

from sim.cli import main
from sim.energy import iteration_energy, load_power_table
from sim.errors import SimError
from sim.goodput import ComponentCounts, component_counts, load_failure_model
from sim.pricing import load_price_table
from sim.train_cost import estimate_training

POWER = """gpus:
  H100: {busy_w: 1000, idle_w: 100, source: test}
server_cpu_w: 500
nic_w: 20
switch_w: 1000
pue: 1.5
"""
PRICES = """prices:
  H100: {usd_per_gpu_hour: 3.6, source: test, date: 2025-01}
"""


@pytest.fixture(scope="module")
def small():
    """1F1B, 2 stages x TP 2 = 4 GPUs, 4 micro-batches of 1 ms forward + 2 ms backward, no overheads:
    the timeline is (m + p - 1)(tf + tb) = 15 ms; each GPU computes m (tf + tb) = 12 ms of it."""
    from sim.inputs import make_topology
    from sim.simulation import simulate
    w = pipeline_workload(2, 1, 4, 1e-3, 2e-3, "1f1b", tp=2)
    topo = make_topology("spectrum-x", gpus=8)
    return simulate(w, topo, gpu="H100", overheads=False, contention=False), topo


def _tables(tmp_path):
    (tmp_path / "p.yaml").write_text(POWER)
    (tmp_path / "c.yaml").write_text(PRICES)
    return load_power_table(tmp_path / "p.yaml"), load_price_table(tmp_path / "c.yaml")


def test_iteration_energy_and_cost_by_hand(small, tmp_path):
    rep, _ = small
    power, prices = _tables(tmp_path)
    assert rep.iteration_time_s == pytest.approx(0.015, rel=1e-9)
    counts = ComponentCounts(gpu=4, nic=4, switch=3, server=1)
    e = iteration_energy(rep, power, counts)
    T = 0.015
    gpu_j = 4 * (0.012 * 1000 + 0.003 * 100)           # 49.2 J
    rest_j = (1 * 500 + 4 * 20 + 3 * 1000) * T          # 53.7 J
    assert e.gpu_busy_s == pytest.approx(4 * 0.012) and e.gpu_idle_s == pytest.approx(4 * 0.003)
    assert e.it_j == pytest.approx(gpu_j + rest_j, rel=1e-9)
    assert e.facility_j == pytest.approx(1.5 * (49.2 + 53.7), rel=1e-9)
    est = estimate_training(rep, counts, 1e9, load_failure_model(), power, prices)
    assert est.iteration_usd == pytest.approx(4 * 3.6 * T / 3600, rel=1e-9)   # 6e-5 $
    assert est.iterations is None and est.total_usd is None


def test_time_cost_energy_to_train(small, tmp_path):
    rep, _ = small
    power, prices = _tables(tmp_path)
    counts = ComponentCounts(gpu=4, nic=4, switch=3, server=1)
    tpi = rep.meta["global_batch_size"] * rep.meta["seq_length"]       # 4 x 2048 = 8192 tokens
    assert tpi == 8192
    est = estimate_training(rep, counts, 1e9, load_failure_model(), power, prices, train_tokens=10 * tpi + 1)
    assert est.iterations == 11
    g = est.goodput.goodput
    assert 0 < g < 1
    assert est.solve_time_s == pytest.approx(11 * 0.015)
    assert est.wall_time_s == pytest.approx(11 * 0.015 / g)
    assert est.total_usd == pytest.approx(4 * 3.6 * est.wall_time_s / 3600)
    assert est.total_facility_j == pytest.approx(1.5 * 102.9 * 11 / g)
    assert est.usd_per_million_tokens == pytest.approx(est.total_usd / (10 * tpi + 1) * 1e6)
    d = est.to_dict()
    assert d["iterations"] == 11 and d["goodput"]["goodput"] == g
    assert d["total_facility_mwh"] == pytest.approx(est.total_facility_j / 3.6e9)


def test_component_counts_of_a_template(small):
    _, topo = small
    # SimAI's Spectrum-X pod: 8 leaf (asw) + 64 spine (psw) switches; one NIC port per GPU; 8 GPUs a server
    assert component_counts(topo, 4) == ComponentCounts(gpu=4, nic=8, switch=72, server=1)
    assert component_counts(topo, 8).server == 1


def test_shipped_power_table():
    t = load_power_table()
    h100 = t.gpu("H100")
    assert h100.busy_w == 700 and 0 < h100.idle_w < h100.busy_w
    assert t.gpu("a100").gpu == "A100-80GB"        # alias, case-insensitive
    assert t.pue >= 1 and t.sources["pue"] and t.sources["server_cpu"]
    with pytest.raises(SimError, match=r"no power for GPU 'MI300X'.*--power-file"):
        t.gpu("MI300X")


@pytest.mark.parametrize("old,new,message", [
    ("busy_w: 1000, idle_w: 100", "busy_w: 100, idle_w: 1000", "gpus.H100.idle_w: 1000 W is above busy_w 100 W"),
    ("busy_w: 1000", "busy_w: 0", "gpus.H100.busy_w: must be a number > 0"),
    (", source: test", "", "gpus.H100.source: missing"),
    ("pue: 1.5", "pue: 0.9", "pue: must be a number >= 1 (got 0.9)"),
    ("nic_w: 20", "nic_w: -1", "nic_w: must be a number >= 0"),
])
def test_bad_power_file_is_one_line_error(tmp_path, old, new, message):
    assert POWER.count(old) == 1
    p = tmp_path / "p.yaml"
    p.write_text(POWER.replace(old, new))
    with pytest.raises(SimError) as err:
        load_power_table(p)
    assert message in str(err.value) and str(p) in str(err.value) and "\n" not in str(err.value)


SMALL = ["-m", "aicb-7", "--tp", "4", "--pp", "2", "--dp", "2", "--global-batch", "4", "--seq-length", "1024",
         "--sp", "-q", "--no-charts", "--no-trace"]


def test_run_train_tokens_prints_and_writes(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(PRICES)
    out = tmp_path / "res"
    assert main(["run", *SMALL, "--train-tokens", "1e9", "--price-file", str(tmp_path / "c.yaml"),
                 "-o", str(out)]) == 0
    text = capsys.readouterr().out
    for label in ("job MTBF", "checkpoint interval", "goodput", "cost per iteration", "time to train",
                  "cost to train", "energy to train", "per million tokens"):
        assert label in text
    s = json.loads((out / "summary.json").read_text())
    tr = s["training"]
    assert tr["iterations"] == math.ceil(1e9 / (4 * 1024))
    assert tr["usd_per_gpu_hour"] == 3.6
    assert tr["iteration_usd"] == pytest.approx(16 * 3.6 * s["iteration_time_s"] / 3600)
    assert tr["wall_time_s"] == pytest.approx(tr["iterations"] * s["iteration_time_s"] / tr["goodput"]["goodput"])
    assert "goodput" in (out / "summary.txt").read_text()


def test_run_without_training_flags_has_no_training_key(tmp_path):
    out = tmp_path / "res"
    assert main(["run", *SMALL, "-o", str(out)]) == 0
    assert "training" not in json.loads((out / "summary.json").read_text())


@pytest.mark.parametrize("flags,message", [
    (["--train-tokens", "lots"], "--train-tokens: expected a token count"),
    (["--checkpoint-interval", "0"], "--checkpoint-interval: must be > 0"),
    (["--mtbf-file", "/nonexistent/f.yaml"], "cannot read the failure model"),
])
def test_run_training_flag_errors(flags, message, capsys):
    assert main(["run", *SMALL, "-o", "-", *flags]) == 2
    err = capsys.readouterr().err
    assert "clustersim: error:" in err and message in err and "Traceback" not in err


# ------------------------------------------------------------------------------------------- switch share
def test_switch_charged_by_its_ports_in_use(tmp_path):
    """switch_ports: a switch costs min(1, cables / ports) of its power; without it, whole switches."""
    (tmp_path / "p.yaml").write_text(POWER + "switch_ports: 64\n")
    table = load_power_table(tmp_path / "p.yaml")
    counts = ComponentCounts(gpu=4, nic=4, switch=3, server=1, switch_ports_used=(80, 16, 8))
    from sim.energy import energy_from_busy
    e = energy_from_busy(2.0, 4.0, 4, table.gpu("H100"), table, counts)
    assert e.switches_charged == pytest.approx(1 + 0.25 + 0.125)
    assert e.switch_j == pytest.approx(1.375 * 1000 * 2.0)
    no_ports = _tables(tmp_path)[0]
    whole = energy_from_busy(2.0, 4.0, 4, no_ports.gpu("H100"), no_ports, counts)
    assert whole.switches_charged == 3 and whole.switch_j == pytest.approx(3 * 1000 * 2.0)
    (tmp_path / "bad.yaml").write_text(POWER + "switch_ports: 0\n")
    with pytest.raises(SimError, match="switch_ports: must be a whole number of ports >= 1"):
        load_power_table(tmp_path / "bad.yaml")


def test_component_counts_give_the_cables_of_each_switch(small):
    """SimAI's Spectrum-X template for 8 GPUs: 8 rail leaves, each with 1 GPU port and 64 spine uplinks;
    64 spines, each cabled to the 8 leaves."""
    _, topo = small
    used = component_counts(topo, 8).switch_ports_used
    assert sorted(used) == [8] * 64 + [65] * 8
    assert load_power_table().switch_ports == 64


# ------------------------------------------------------------------------------------------- --gpu-file aliases
def test_gpu_file_alias_finds_price_and_power_rows(tmp_path, capsys):
    """A GPU of a --gpu-file is priced (and powered) through its aliases."""
    from compute_db.gpus import load_gpu_file
    from sim.pricing import price_per_gpu_hour
    gpu_file = tmp_path / "gpus.yaml"
    gpu_file.write_text("gpus:\n  LABGPU:\n    aliases: [LabGPU-SXM]\n    peak_tflops: {bf16: 500}\n"
                        "    hbm_GiB: 96\n    hbm_GBps: 2000\n    nvlink_GBps: 300\n    nic_Gbps: 400\n"
                        "    similar_to: [H100]\n")
    prices = tmp_path / "c.yaml"
    prices.write_text("prices:\n  LabGPU-SXM: {usd_per_gpu_hour: 2.5, source: lab quote, date: 2025-05}\n")
    power = tmp_path / "p.yaml"
    power.write_text(POWER.replace("H100:", "LabGPU-SXM:"))
    extra = load_gpu_file(gpu_file)
    with pytest.raises(SimError, match="no price for GPU 'LABGPU'"):
        price_per_gpu_hour("LABGPU", prices)                 # without the GPU file the alias is unknown
    assert price_per_gpu_hour("LABGPU", prices, extra) == 2.5
    assert load_power_table(power).gpu("labgpu", extra).busy_w == 1000
    args = ["run", "-m", "llama3-8b", "--tp", "1", "--dp", "1", "--global-batch", "1", "--seq-length", "1024",
            "--gpu", "LABGPU", "--gpu-file", str(gpu_file), "--price-file", str(prices), "--power-file", str(power),
            "-n", "analytical", "-q", "-o", "-", "--json"]
    assert main(args) == 0                                   # run passes its --gpu-file to the lookups
    tr = json.loads(capsys.readouterr().out)["training"]
    assert tr["usd_per_gpu_hour"] == 2.5 and tr["price_source"].endswith("LabGPU-SXM (lab quote, 2025-05)")


# ------------------------------------------------------------------------------------------- compare / sweep
def test_compare_cost_energy_columns_by_hand(tmp_path, capsys):
    (tmp_path / "c.yaml").write_text(PRICES)
    out = tmp_path / "cmp"
    args = ["compare", *SMALL[:-2], "--fabric", "spectrum-x", "--fabric", "dcn+", "-n", "analytical",
            "--price-file", str(tmp_path / "c.yaml"), "--train-tokens", "1e9", "-o", str(out)]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert "$/Mtok" in text and "kWh/Mtok" in text and "$ to train" in text
    with open(out / "compare.csv") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0])[-1] == "error" and "usd_to_train" in rows[0]
    entries = json.loads((out / "compare.json").read_text())
    iters = math.ceil(1e9 / (4 * 1024))
    for row, entry in zip(rows, entries):
        t = float(row["iteration_time_s"])
        assert float(row["iteration_usd"]) == pytest.approx(16 * 3.6 * t / 3600, rel=1e-5)
        assert int(row["iterations_to_train"]) == iters
        g = float(row["goodput"])
        assert float(row["usd_to_train"]) == pytest.approx(16 * 3.6 * iters * t / g / 3600, rel=1e-4)
        tr = entry["training"]
        assert tr["iteration_usd"] == pytest.approx(float(row["iteration_usd"]), rel=1e-5)
        # energy from the entry's own timeline: busy = stage compute x its ranks, idle the rest
        T, stages = entry["iteration_time_s"], entry["stages"]
        busy = sum(min(s["compute_s"], T) for s in stages) * 16 / len(stages)
        assert tr["iteration_energy"]["gpu_busy_s"] == pytest.approx(busy, rel=1e-9)
        assert tr["iteration_energy"]["gpu_idle_s"] == pytest.approx(16 * T - busy, rel=1e-9)


def test_sweep_cost_energy_columns(tmp_path):
    out = tmp_path / "sweep.csv"
    args = ["sweep", "-m", "aicb-7", "--dp", "2", "--global-batch", "4", "--seq-length", "1024", "--sp",
            "-n", "analytical", "--grid", "tp=4,3", "--pp", "2", "-j", "1", "--cost-energy", "-o", str(out)]
    assert main(args) == 0
    with open(out) as f:
        ok, bad = list(csv.DictReader(f))
    assert list(ok)[-1] == "error" and bad["error"] and bad["iteration_usd"] == ""      # tp=3 does not divide
    assert float(ok["iteration_usd"]) == pytest.approx(16 * 4.25 * float(ok["iteration_time_s"]) / 3600, rel=1e-5)
    assert float(ok["iteration_facility_j"]) > 0 and "usd_to_train" not in ok
