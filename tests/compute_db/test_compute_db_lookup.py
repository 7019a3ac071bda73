"""Lookup resolution: measured, interpolated, modeled (own / similar-GPU fits), given; report fractions."""

from __future__ import annotations

import pytest

from compute_db import report, store
from compute_db.db import ComputeDB, open_db
from compute_db.errors import ComputeDBError
from compute_db.keys import make_key
from workload_gen.workload import ComputeOp


def _gemm(m, n=512, k=1024, dtype="fp16", variant="fwd"):
    return make_key("gemm", variant, {"m": m, "n": n, "k": k}, dtype)


def _rows():
    # a synthetic GPU line: t grows with m; a noisy dip at m=96 must not make interpolation non-monotone
    pts = {32: 10e-6, 64: 12e-6, 96: 11e-6, 128: 20e-6, 256: 40e-6}
    return [store.KernelRow("H100", _gemm(m), t, t, t, 0.0, 5, "imported", "syn") for m, t in pts.items()]


def test_exact_hit_is_measured():
    db = ComputeDB(rows=_rows())
    kt = db.lookup_key(_gemm(64), "H100")
    assert (kt.time_s, kt.source) == (12e-6, "measured")


def test_equivalent_dtype_and_layout_are_interpolated():
    db = ComputeDB(rows=_rows())
    kt = db.lookup_key(_gemm(64, dtype="bf16"), "h100-sxm")
    assert (kt.time_s, kt.source) == (12e-6, "interpolated")
    # a wgrad GEMM with the same (m, n, k) is informed by the forward measurement
    assert db.lookup_key(_gemm(64, variant="wgrad"), "H100").time_s == 12e-6


def test_band_between_measurements():
    # m=181 lies between measured m=128 (20 us) and m=256 (40 us); time may grow at most quadratically
    # per dimension, so the data band is [max(20, 40 * (181/256)^2), min(20 * (181/128)^2, 40)] us
    db = ComputeDB(rows=_rows())
    kt = db.lookup_key(_gemm(181), "H100")
    lo = max(20e-6, 40e-6 * (181 / 256) ** 2)
    hi = min(20e-6 * (181 / 128) ** 2, 40e-6)
    assert lo * (1 - 1e-9) <= kt.time_s <= hi * (1 + 1e-9)
    model_t, _ = db.model_time(_gemm(181), "H100")
    assert kt.time_s == pytest.approx(min(max(model_t, lo), hi), rel=1e-9)


def test_narrow_band_is_interpolated():
    db = ComputeDB(rows=_rows())
    kt = db.lookup_key(_gemm(70), "H100")   # between 64 (12 us) and 96 (11 us): band ~[12, 12] us
    assert kt.source == "interpolated" and kt.time_s == pytest.approx(12e-6, rel=0.01)
    assert "data band" in kt.basis


def test_monotone_despite_noisy_dip():
    # measured points are reported as measured (raw); everything else is monotone in m
    db = ComputeDB(rows=_rows())
    kts = [db.lookup_key(_gemm(m), "H100") for m in range(16, 600, 3)]
    times = [kt.time_s for kt in kts if kt.source != "measured"]
    assert len(times) > 150
    assert all(b >= a for a, b in zip(times, times[1:]))
    assert db.lookup_key(_gemm(96), "H100").time_s == 11e-6


def test_continuous_past_the_last_measurement():
    db = ComputeDB(rows=_rows())
    at_end = db.lookup_key(_gemm(256, dtype="bf16"), "H100")
    beyond = db.lookup_key(_gemm(257, dtype="bf16"), "H100")
    assert at_end.time_s == pytest.approx(40e-6, rel=1e-12)
    assert at_end.time_s <= beyond.time_s <= 40e-6 * (257 / 256) ** 2 * (1 + 1e-9)


def test_given_time():
    op = ComputeOp("x", "gemm", (("m", 1), ("n", 1), ("k", 1)), "bf16", 0, 0, time_s=3e-3)
    kt = open_db().lookup(op, "H100")
    assert (kt.time_s, kt.source) == (3e-3, "given")


def test_unknown_gpu_error_lists_known():
    with pytest.raises(ComputeDBError, match=r"unknown GPU 'V100'; known GPUs: .*H100"):
        open_db().lookup_key(_gemm(64), "V100")


def test_similar_gpu_fit_scaled_by_spec():
    db = open_db()
    key = make_key("gemm", "fwd", {"m": 16384, "n": 16384, "k": 16384}, "bf16")
    h100, b200 = db.lookup_key(key, "H100"), db.lookup_key(key, "B200")
    assert b200.source == "modeled" and "fit:H100" in b200.basis and "B200 spec" in b200.basis
    # compute-bound: same fitted efficiency, peak 2250 vs 989.4 TFLOP/s
    assert h100.time_s / b200.time_s == pytest.approx(2250 / 989.4, rel=0.03)
    # memory-bound norm on H200 vs H100: HBM 4.8 vs 3.35 TB/s
    norm = make_key("rmsnorm", "fwd", {"tokens": 1 << 16, "hidden": 8000}, "bf16")  # no measured line
    ratio = db.lookup_key(norm, "H100").time_s / db.lookup_key(norm, "H200").time_s
    assert 1.2 < ratio <= 4.8 / 3.35 + 1e-9


def test_large_gemm_efficiency_plausible():
    # hardware.md: achieved large-GEMM throughput 70-75% of peak on A100, 70-85% on H100 (fitted, not set)
    db = open_db()
    key = make_key("gemm", "fwd", {"m": 8192, "n": 8192, "k": 8192}, "bf16")
    for gpu, peak, lo, hi in (("H100", 989.4e12, 0.6, 0.9), ("A100", 312e12, 0.6, 0.85)):
        eff = 2 * 8192**3 / db.lookup_key(key, gpu).time_s / peak
        assert lo < eff < hi, (gpu, eff)


def test_fp8_on_gpu_without_fp8_runs_at_16bit_rate():
    db = open_db()
    key8 = make_key("gemm", "fwd", {"m": 8192, "n": 8192, "k": 8192}, "fp8")
    key16 = make_key("gemm", "fwd", {"m": 8192, "n": 8192, "k": 8192}, "bf16")
    assert db.lookup_key(key8, "A100").time_s == db.lookup_key(key16, "A100").time_s
    assert db.lookup_key(key8, "H100").time_s < db.lookup_key(key16, "H100").time_s


def test_every_kind_resolves_on_every_gpu():
    from compute_db.gpus import list_gpus
    from workload_gen.workload import COMPUTE_KINDS
    db = open_db()
    for gpu in list_gpus():
        for kind, fields in COMPUTE_KINDS.items():
            kt = db.lookup_key(make_key(kind, "fwd", {f: 64 for f in fields}, "bf16"), gpu)
            assert kt.time_s > 0 and kt.source in ("measured", "interpolated", "modeled")


def test_lookup_many_matches_lookup():
    db = open_db()
    ops = [ComputeOp(f"g{m}", "gemm", (("m", m), ("n", 4096), ("k", 4096)), "bf16", 0, 0) for m in (64, 300, 9000)]
    ops = ops * 3 + [ComputeOp("x", "gemm", (("m", 1), ("n", 1), ("k", 1)), "bf16", 0, 0, time_s=1.0)]
    many = db.lookup_many(ops, "H100")
    assert many == [db.lookup(op, "H100") for op in ops]


def test_source_fractions():
    from compute_db.db import KernelTime
    times = [KernelTime(1.0, "measured"), KernelTime(3.0, "modeled"), KernelTime(2.0, "interpolated")]
    fr = report.source_fractions(times, [2, 1, 1])
    assert fr == {"measured": 2 / 7, "interpolated": 2 / 7, "modeled": 3 / 7, "given": 0.0}
    assert report.source_fractions([]) == {"measured": 0.0, "interpolated": 0.0, "modeled": 0.0, "given": 0.0}
