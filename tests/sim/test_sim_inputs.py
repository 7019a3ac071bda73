"""Topology construction for simulations: NVLink starts from the GPU's datasheet line rate."""

from __future__ import annotations

import pytest

from sim.inputs import make_topology


def _nvlink_rates(t) -> set[float]:
    return {link.bandwidth_Bps for link in t.links if link.kind == "nvlink"}


@pytest.mark.parametrize("gpu_type, per_direction_Bps", [("H100", 450e9), ("A100", 300e9), ("B200", 900e9)])
def test_template_nvlink_defaults_to_datasheet_line_rate(gpu_type, per_direction_Bps):
    # hardware.md: NVLink per GPU both directions summed (H100 900, A100 600, B200 1,800 GB/s), halved
    t = make_topology("spectrum-x", gpus=16, gpu_type=gpu_type)
    assert _nvlink_rates(t) == {per_direction_Bps}


def test_explicit_nvlink_rate_wins():
    t = make_topology("spectrum-x:nvlink_bandwidth_Bps=2880Gbps", gpus=16)
    assert _nvlink_rates(t) == {2880e9 / 8}


def test_nvl72_keeps_its_own_nvlink_figure():
    t = make_topology("nvl72", gpus=72)
    # 18 NVSwitch chips per domain: GPU 0's NVLink ports add up to GB200's 900 GB/s per direction
    out_of_gpu0 = sum(link.bandwidth_Bps for link in t.links if link.kind == "nvlink" and link.src == 0)
    assert out_of_gpu0 == pytest.approx(900e9)
