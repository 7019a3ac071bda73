"""sim.goodput: Young/Daly checkpoint intervals, Daly's expected goodput, job MTBF, the shipped defaults."""

from __future__ import annotations

import math
import random

import pytest

from sim.errors import SimError
from sim.goodput import (
    ComponentCounts,
    FailureModel,
    daly_interval_s,
    estimate_goodput,
    goodput,
    job_mtbf_s,
    load_failure_model,
    young_interval_s,
)

HOUR = 3600.0


def test_young_and_daly_intervals_by_hand():
    # C = 200 s, M = 10,000 s: sqrt(2CM) = 2000 exactly; C/2M = 0.01, sqrt = 0.1
    assert young_interval_s(200.0, 10_000.0) == pytest.approx(2000.0, rel=1e-12)
    # Daly: 2000 (1 + 0.1/3 + 0.01/9) - 200 = 2000 + 66.667 + 2.222 - 200
    assert daly_interval_s(200.0, 10_000.0) == pytest.approx(1868.8889, abs=1e-4)
    assert daly_interval_s(30_000.0, 10_000.0) == 10_000.0      # C >= 2M: tau = M


def test_goodput_closed_form():
    tau, c, r, m = 2000.0, 200.0, 300.0, 10_000.0
    expected = 2000.0 / (10_000.0 * math.exp(0.03) * (math.exp(0.22) - 1.0))
    assert goodput(tau, c, r, m) == pytest.approx(expected, rel=1e-12)
    assert goodput(tau, c, r, math.inf) == pytest.approx(2000.0 / 2200.0)   # no failures: checkpoint cost only


def test_daly_interval_maximises_goodput():
    c, r, m = 120.0, 600.0, 3 * HOUR
    best = daly_interval_s(c, m)
    g = goodput(best, c, r, m)
    for f in (0.7, 0.9, 1.1, 1.4):
        assert goodput(best * f, c, r, m) < g


def test_goodput_is_the_expectation_of_the_failure_model():
    """Monte Carlo of the model the formula states: a segment of tau + C must run without a failure; each
    failure costs the time lost plus a restart R that a failure can also interrupt (seeded)."""
    tau, c, r, m = 1500.0, 300.0, 400.0, 2000.0
    rng = random.Random(7)
    n, total = 20_000, 0.0
    for _ in range(n):
        t, need = 0.0, tau + c
        while True:
            f = rng.expovariate(1.0 / m)
            if f >= need:
                t += need
                break
            t += f
            while True:               # restart, itself interruptible
                f = rng.expovariate(1.0 / m)
                if f >= r:
                    t += r
                    break
                t += f
        total += t
    simulated = tau * n / total
    assert simulated == pytest.approx(goodput(tau, c, r, m), rel=0.02)


def _model(gpu_h=50_000.0, nic_h=1e6, switch_h=1e5, server_h=2e4, write_GBps=1e3, read_GBps=1e3, restart_s=0.0):
    from sim.goodput import CheckpointStorage
    return FailureModel({"gpu": gpu_h * HOUR, "nic": nic_h * HOUR, "switch": switch_h * HOUR,
                         "server": server_h * HOUR}, {},
                        CheckpointStorage(14.0, write_GBps * 1e9, read_GBps * 1e9, 1e15, 1e15, restart_s), "t")


def test_job_mtbf_sums_component_rates():
    m = _model()
    counts = ComponentCounts(gpu=64, nic=64, switch=10, server=8)
    rate_per_h = 64 / 50_000 + 64 / 1e6 + 10 / 1e5 + 8 / 2e4
    assert job_mtbf_s(m.mtbf_s, counts) == pytest.approx(HOUR / rate_per_h, rel=1e-12)
    assert job_mtbf_s(m.mtbf_s, ComponentCounts(0, 0, 0, 0)) == math.inf


def test_1k_to_16k_gpus_lowers_goodput_as_the_formula_says():
    """Same MTBF per GPU: the job MTBF falls 16x; the goodput at Daly's interval follows the closed form,
    and the lost fraction grows about sqrt(16) = 4x (first order sqrt(2C/M); R/M adds a 16x term)."""
    mtbf_gpu_s = 50_000 * HOUR
    ckpt_bytes = 60e12                     # 60 s to write at 1 TB/s
    model = _model(gpu_h=50_000.0, write_GBps=1000.0, read_GBps=2000.0, restart_s=90.0)   # R = 90 + 30 s
    out = {}
    for n in (1000, 16_000):
        rep = estimate_goodput(model, ComponentCounts(gpu=n, nic=0, switch=0, server=0), ckpt_bytes)
        m = mtbf_gpu_s / n
        c, r = 60.0, 120.0
        x = c / (2 * m)
        tau = math.sqrt(2 * c * m) * (1 + math.sqrt(x) / 3 + x / 9) - c
        assert rep.job_mtbf_s == pytest.approx(m, rel=1e-12)
        assert rep.checkpoint_write_s == pytest.approx(c, rel=1e-12)
        assert rep.daly_interval_s == pytest.approx(tau, rel=1e-12)
        assert rep.restart_s == pytest.approx(r, rel=1e-12)
        assert rep.goodput == pytest.approx(tau / (m * math.exp(r / m) * (math.exp((tau + c) / m) - 1)),
                                            rel=1e-12)
        out[n] = rep.goodput
    assert out[16_000] < out[1000] < 1
    assert 3.8 < (1 - out[16_000]) / (1 - out[1000]) < 4.4


def test_checkpoint_and_restart_bandwidth_limits():
    from sim.goodput import CheckpointStorage
    st = CheckpointStorage(14.0, storage_write_Bps=2e12, storage_read_Bps=1e12, server_write_Bps=10e9,
                           server_read_Bps=20e9, restart_s=100.0)
    model = FailureModel(_model().mtbf_s, {}, st, "t")
    # 8 servers x 10 GB/s = 80 GB/s < 2 TB/s: 800 GB take 10 s; reading at 160 GB/s takes 5 s
    rep = estimate_goodput(model, ComponentCounts(64, 64, 4, 8), 800e9)
    assert rep.checkpoint_write_s == pytest.approx(10.0)
    assert rep.restart_s == pytest.approx(105.0)
    given = estimate_goodput(model, ComponentCounts(64, 64, 4, 8), 800e9, interval_s=1234.0)
    assert given.interval_s == 1234.0 and given.goodput < rep.goodput


def test_shipped_defaults_reproduce_llama3_interruptions():
    """Llama 3 paper: 419 unexpected interruptions in 54 days on 16,384 H100 (2,048 servers); the shipped
    file states its assumptions of 16,384 NICs and 1,280 switches."""
    m = load_failure_model()
    counts = ComponentCounts(gpu=16_384, nic=16_384, switch=1280, server=2048)
    assert job_mtbf_s(m.mtbf_s, counts) == pytest.approx(54 * 24 * HOUR / 419, rel=1e-3)
    assert all(m.sources[k] for k in ("gpu", "nic", "switch", "server", "storage", "restart"))
    assert m.storage.bytes_per_param == 14


def test_checkpoint_size_of_llama3_8b():
    from sim.goodput import checkpoint_bytes
    from workload_gen.zoo import get_model
    # Llama 3 8B has 8.03e9 parameters (Meta's model card): 14 B each
    assert checkpoint_bytes(get_model("llama3-8b"), 14) == pytest.approx(8.03e9 * 14, rel=0.005)


def _write(tmp_path, text):
    p = tmp_path / "f.yaml"
    p.write_text(text)
    return p


GOOD = """components:
  gpu: {mtbf_hours: 1000, source: a}
  nic: {mtbf_hours: 1000, source: a}
  switch: {mtbf_hours: 1000, source: a}
  server: {mtbf_hours: 1000, source: a}
checkpoint: {bytes_per_param: 14, storage_write_GBps: 1, storage_read_GBps: 1, server_write_GBps: 1,
  server_read_GBps: 1, restart_s: 0}
"""


@pytest.mark.parametrize("old,new,message", [
    ("gpu: {mtbf_hours: 1000", "gpu: {mtbf_hours: -5", "components.gpu.mtbf_hours: must be a number > 0 (got -5)"),
    ("  nic: {mtbf_hours: 1000, source: a}\n", "", "components.nic: missing"),
    ("switch: {mtbf_hours: 1000, source: a}", "switch: {mtbf_hours: 1000}", "components.switch.source: missing"),
    ("server:", "rack:", "components.rack: unknown component"),
    ("restart_s: 0", "restart_s: -1", "checkpoint.restart_s: must be a number >= 0"),
    ("storage_write_GBps: 1,", "storage_write_GBps: x,", "checkpoint.storage_write_GBps: must be a number > 0"),
    ("checkpoint:", "checkpoint: [\n", "not valid YAML"),
])
def test_bad_failure_file_is_one_line_error(tmp_path, old, new, message):
    assert GOOD.count(old) == 1
    load_failure_model(_write(tmp_path, GOOD))          # the unedited file loads
    p = _write(tmp_path, GOOD.replace(old, new))
    with pytest.raises(SimError) as err:
        load_failure_model(p)
    text = str(err.value)
    assert message in text and str(p) in text and "\n" not in text


def test_goodput_rejects_nonpositive_interval():
    with pytest.raises(SimError, match="checkpoint interval must be > 0"):
        goodput(0.0, 1.0, 1.0, 100.0)


def test_segments_far_longer_than_the_mtbf_give_goodput_zero_not_an_overflow():
    from sim.goodput import goodput
    # exp((1e9 + 10) / 1e3) overflows a float: the expected wall time is beyond any float
    assert goodput(1e9, 10.0, 600.0, 1e3) == 0.0
    assert goodput(1e3, 10.0, 600.0, 1e3) > 0.0
