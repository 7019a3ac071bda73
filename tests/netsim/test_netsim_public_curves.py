"""Acceptance: the model against every public measured curve of nccl_model.md section 6.

Per curve (netsim.validation describes each system as a topology): median |error| <= 10% for sizes
>= 1 MiB and <= 25% below, and the flow and analytical backends agree within 2% at every point.
The measured numbers are the published ones (transcription checked against the reference file).
Constants calibrated from these curves (issue 17 asks for exactly that; sources in netsim/calibration.py):
the per-GPU launch cost (6.1 floors), the Ampere NVLink hop scale (6.3) and the NVLS fill chunk (6.1
H100/H200), so those curves check the model's form rather than the constants. A curve's OWN system
parameters fitted from its points (6.2: the TCPXO hop latency from its small-message floor) are not
tested on the range they came from (`Curve.fitted_range`).
"""

from __future__ import annotations

import re

import pytest

pytest.importorskip("topo")

from netsim import validation as v  # noqa: E402

# 6.6 "2 x 8 H20, NVLSTree: 46-48 us" ran NVLSTree, an algorithm netsim does not model: reported in
# docs/netsim.md, not asserted.
NOT_ASSERTED = {"6.6-h20-16"}
ASSERTED = [c.key for c in v.CURVES if c.key not in NOT_ASSERTED]


@pytest.fixture(scope="module")
def results():
    return {c.key: v.evaluate(c) for c in v.CURVES if c.key not in NOT_ASSERTED}


@pytest.mark.parametrize("key", ASSERTED)
def test_curve_within_tolerance(key, results):
    pts = results[key]
    big, small = v.medians(pts)
    fitted = next(c.fitted_range for c in v.CURVES if c.key == key)
    big, small = (None if fitted == "big" else big), (None if fitted == "small" else small)
    assert big is not None or small is not None
    if big is not None:
        assert big <= 0.10, (key, [round(p.error("flow"), 3) for p in pts])
    if small is not None:
        assert small <= 0.25, (key, [round(p.error("flow"), 3) for p in pts])


@pytest.mark.parametrize("key", ASSERTED)
def test_flow_and_analytical_agree_uncontended(key, results):
    for p in results[key]:
        assert p.model["analytical"] == pytest.approx(p.model["flow"], rel=0.02), (key, p.x)


def test_choices_follow_the_measured_regimes(results):
    """Where the measurement names or implies the algorithm: H100/H200 large all-reduce on NVLS (busbw
    ~480 > the ring's 370), A100 on rings; the TCPXO curve on LL below its 16-32 MiB step and Simple
    above it, trees at the largest sizes (its slope below the step is LL's 39 GB/s cap; the model
    switches one size early, at 16 MiB)."""
    for key in ("6.1-h100", "6.1-h200"):
        assert all(p.choice == "nvls/Simple" for p in results[key] if p.size >= 8 * v.MiB)
    assert all(p.choice.startswith("ring/") for p in results["6.1-a100"])
    tcpxo = results["6.2-tcpxo"]
    assert all(p.choice.endswith("/LL") for p in tcpxo if p.size <= 8 * v.MiB)
    assert all(p.choice.endswith("/Simple") for p in tcpxo if p.size >= 32 * v.MiB)
    assert all(p.choice == "tree/Simple" for p in tcpxo if p.size >= 128 * v.MiB)


def _size(text: str) -> int:
    num, unit = text.split()
    return int(float(num) * {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30}[unit])


def _rows(section: str) -> list[list[str]]:
    return [[c.strip() for c in ln.strip().strip("|").split("|")] for ln in section.splitlines()
            if ln.startswith("|") and not ln.startswith("|---")]


def test_transcription_matches_reference(shared_dir):
    text = (shared_dir / "reference" / "nccl_model.md").read_text(encoding="utf-8")
    flat = " ".join(text.split())
    sec = {m.group(1): m.group(2) for m in re.finditer(r"### (6\.\d)[^\n]*\n(.*?)(?=\n### |\Z)", text, re.S)}
    rows = [r for r in _rows(sec["6.1"]) if r[0][0].isdigit()]
    assert [_size(r[0]) for r in rows] == v.SIZES_61
    for col, got in ((2, v.A100_61_US), (4, v.H100_61_US), (6, v.H200_61_US)):
        assert [float(r[col].replace(",", "")) for r in rows] == got
    pts = {}
    for r in _rows(sec["6.2"]):
        for i in (0, 3):
            if r[i] and r[i][0].isdigit():
                pts[_size(r[i])] = float(r[i + 1].replace(",", ""))
    assert sorted(pts) == v.SIZES_62 and [pts[s] for s in v.SIZES_62] == v.TCPXO_62_US
    r63 = _rows(sec["6.3"])
    gpus = [int(x) for x in r63[0][1:]]
    times = [float(x) for x in next(r for r in r63 if r[0].startswith("measured"))[1:]]
    assert dict(zip(gpus, times)) == v.RING_63_US
    assert "Ring: 365–370 GB/s for 2 … 8 GPUs" in flat
    assert "≈ 370 for 2–4 GPUs, then ≈ 420 (5), 440 (6), 460 (7), 480 (8 GPUs)" in flat
    r65 = _rows(sec["6.5"])
    assert [_size(x) for x in r65[0][1:]] == v.SIZES_65
    assert [float(x) for x in r65[1][1:]] == v.TREE_65_US
    assert "46–48 µs for 4 B – 512 B" in flat and "≈ 93 µs for 8 B – 512 B" in flat
    assert "12.5 µs at 4–16 B rising to 16.7 µs at 4 KiB" in flat
