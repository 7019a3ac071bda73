"""GEMM wave-quantization term of the roofline (compute_db/roofline.py) and the SM counts it needs."""

from dataclasses import replace

import numpy as np
import pytest

from compute_db import open_db
from compute_db.errors import ComputeDBError
from compute_db.gpus import get_gpu, load_gpu_file
from compute_db.keys import make_key
from compute_db.roofline import WAVE_TILES, predict, wave_factor, wave_weights


def test_shipped_sm_counts():
    assert [get_gpu(g).sms for g in ("A100", "A100-80GB-PCIe", "H100", "H100-PCIe", "H200", "B200", "L40S")] == \
        [108, 108, 132, 114, 132, 148, 142]


def test_gpu_file_sm_count_optional_and_checked(tmp_path):
    entry = "  Z1:\n    peak_tflops: {bf16: 500}\n    hbm_GiB: 64\n    hbm_GBps: 2000\n"
    ok = tmp_path / "ok.yaml"
    ok.write_text("gpus:\n" + entry)
    assert load_gpu_file(ok)["Z1"].sms == 0
    for bad in ("0", "1.5", "many"):
        f = tmp_path / "bad.yaml"
        f.write_text("gpus:\n" + entry + f"    sm_count: {bad}\n")
        with pytest.raises(ComputeDBError, match=r"bad.yaml: gpus.Z1: field 'sm_count' must be a whole number >= 1"):
            load_gpu_file(f)


def test_wave_factor_by_hand():
    assert WAVE_TILES[0] == (128, 128)
    # 256 x 256 output on 3 SMs, all weight on 128x128 tiles: 4 tiles -> 2 waves -> 2·128·128·3 = 98,304 of
    # area paid for 65,536 used (x1.5); weight 0.5 -> 1.5^0.5
    f = wave_factor(256.0, 256.0, 256.0, 256.0, 1.0, 3, np.array([0.5, 0.0, 0.0]))
    assert f == pytest.approx(1.5 ** 0.5, rel=1e-12)
    # 4 groups of 128 x 128 in one launch on 4 SMs: one full wave, no waste
    assert wave_factor(128.0, 128.0, 128.0, 128.0, 4.0, 4, np.array([0.9, 0.0, 0.0])) == pytest.approx(1.0)
    # weights are a mixture with the smooth share: each in (0, 1), sum < 1
    w = wave_weights([3.0, 3.0, 3.0])
    assert (w > 0).all() and w.sum() < 1 and w[0] == pytest.approx(np.exp(3) / (1 + 3 * np.exp(3)))


def test_quantized_area_non_decreasing_in_m_n_and_groups():
    rng = np.random.default_rng(7)
    for _ in range(200):
        w = wave_weights(rng.normal(0.0, 2.0, len(WAVE_TILES)))
        sms = int(rng.integers(8, 160))
        n, pad = float(rng.integers(1, 9000)), float(rng.uniform(0, 200))
        m = np.arange(1.0, 3000.0)
        area = (m + pad) * (n + pad) * wave_factor(m, n, m + pad, n + pad, 1.0, sms, w)
        assert (np.diff(area) >= -1e-9 * area[1:]).all()
        g = np.arange(1.0, 64.0)
        total = g * (n + pad) ** 2 * wave_factor(n, n, n + pad, n + pad, g, sms, w)
        assert (np.diff(total) >= -1e-9 * total[1:]).all()


def test_h100_fit_has_a_wave_term_that_shows_in_the_roofline():
    db = open_db()
    spec = get_gpu("H100")
    key = make_key("gemm", "fwd", (1024, 8448, 4096), "bf16")
    fit = db.family_fit("H100", key)
    assert len(fit.wave) == len(WAVE_TILES) and wave_weights(fit.wave).sum() > 0.1
    # n = 8448 = 66 tiles of 128: m = 1024 fills exactly 4 waves of 132 SMs with 128x128 tiles, m = 1040 needs a
    # fifth, nearly empty one; 1.6 % more FLOPs must cost clearly more than 1.6 % more time
    t = [db.model_time(make_key("gemm", "fwd", (m, 8448, 4096), "bf16"), "H100")[0] for m in (1024, 1040)]
    assert t[1] / t[0] > 1.04
    # without an SM count (a user GPU) the term is off: the same as a fit without wave weights
    bare = predict(replace(fit, wave=()), key, spec.peak_flops["bf16"], spec.hbm_Bps)
    assert predict(fit, key, spec.peak_flops["bf16"], spec.hbm_Bps, 0) == bare
    assert predict(fit, key, spec.peak_flops["bf16"], spec.hbm_Bps, spec.sms) != bare


def test_b200_holds_h100_wave_weights():
    # SimuMax's B200 GEMMs are all >= 2048 tokens: launch time, small-size waste and the tile mixture are held
    db = open_db()
    key = make_key("gemm", "fwd", (4096, 4096, 4096), "bf16")
    b200, h100 = db.family_fit("B200", key), db.family_fit("H100", key)
    assert "(t0, em, x0, tile weights of fit:H100)" in b200.basis
    assert b200.wave == h100.wave and b200.e != h100.e
