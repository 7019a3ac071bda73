"""SimAI generator compatibility: worked examples (simai_formats.md §4) and golden files."""

from __future__ import annotations

import pytest

from topo import build
from topo.errors import TopoError
from topo.simai_file import simai_lines
from topo.templates import simai_file_name

# (build args, header line, GPU-NVS links, GPU-ASW links, ASW-PSW links, GPU-ASW rate)
WORKED = [
    (("spectrum-x", dict(gpus=128)), "216 8 16 72 768 H100", 128, 128, 512, "400Gbps"),
    (("alibaba-hpn", dict(gpus=128)), "280 8 16 136 2304 H100", 128, 256, 1920, "200Gbps"),
    (("alibaba-hpn", dict(gpus=128, dual_plane=True)), "280 8 16 136 1344 H100", 128, 256, 960, "200Gbps"),
    (("dcn+", dict(gpus=128)), "154 8 16 10 272 H100", 128, 128, 16, "400Gbps"),
    (("dcn+", dict(gpus=128, dual_tor=True)), "154 8 16 10 400 H100", 128, 256, 16, "200Gbps"),
    (("spectrum-x", dict(gpus=8, psw_count=1)), "18 8 1 9 24 H100", 8, 8, 8, "400Gbps"),
    (("rail-optimized", dict(gpus=16, gpu_type="H20", nic_bandwidth_Bps="200Gbps",
                             nvlink_bandwidth_Bps="2400Gbps")), "90 8 2 72 544 H20", 16, 16, 512, "200Gbps"),
]


@pytest.mark.parametrize("args,header,n_nvs,n_gpu_asw,n_asw_psw,rate", WORKED)
def test_worked_examples(args, header, n_nvs, n_gpu_asw, n_asw_psw, rate):
    t = build(args[0], **args[1])
    lines, _ = simai_lines(t)
    assert lines[0] == header
    G = t.num_gpus
    n_switch_line = len(lines[1].split())
    assert n_switch_line == int(header.split()[2]) + int(header.split()[3])
    cables = [ln.split() for ln in lines[2:]]
    kinds = {"nvs": 0, "gpu_asw": 0, "asw_psw": 0}
    nvs_hi = G + int(header.split()[2])
    for src, dst, r, delay, er in cables:
        s, d = int(src), int(dst)
        if s < G and d < nvs_hi:
            kinds["nvs"] += 1
            assert delay == "0.000025ms"
        elif s < G:
            kinds["gpu_asw"] += 1
            assert r == rate and delay == "0.0005ms"
        else:
            kinds["asw_psw"] += 1
            assert r == "400Gbps"
        assert er == "0"
    assert (kinds["nvs"], kinds["gpu_asw"], kinds["asw_psw"]) == (n_nvs, n_gpu_asw, n_asw_psw)


GOLDEN = [
    ("Spectrum-X_128g_8gps_400Gbps_H100", "spectrum-x", dict(gpus=128)),
    ("Spectrum-X_128g_8gps_100Gbps_A100", "spectrum-x",
     dict(gpus=128, gpu_type="A100", nic_bandwidth_Bps="100Gbps", nvlink_bandwidth_Bps="2400Gbps")),
    ("Spectrum-X_8g_8gps_400Gbps_H100", "spectrum-x", dict(gpus=8, psw_count=1)),
    ("AlibabaHPN_128g_8gps_DualToR_SinglePlane_200Gbps_H100", "alibaba-hpn", dict(gpus=128)),
    ("AlibabaHPN_128g_8gps_DualToR_DualPlane_200Gbps_H100", "alibaba-hpn", dict(gpus=128, dual_plane=True)),
    ("DCN+SingleToR_128g_8gps_400Gbps_H100", "dcn+", dict(gpus=128)),
    ("DCN+DualToR_128g_8gps_200Gbps_H100", "dcn+", dict(gpus=128, dual_tor=True)),
    ("Rail_Opti_SingleToR_16g_8gps_200Gbps_H20", "rail-optimized",
     dict(gpus=16, gpu_type="H20", nic_bandwidth_Bps="200Gbps", nvlink_bandwidth_Bps="2400Gbps")),
]


@pytest.mark.parametrize("fname,template,params", GOLDEN)
def test_golden_files_byte_identical(shared_dir, fname, template, params):
    t = build(template, **params)
    assert t.name == fname == simai_file_name(template, params)
    lines, warnings = simai_lines(t)
    assert warnings == []
    golden = (shared_dir / "data" / "simai_topologies" / fname).read_text()
    assert "\n".join(lines) + "\n" == golden


def test_spectrum_x_8g_verbatim_lines():
    lines, _ = simai_lines(build("spectrum-x", gpus=8, psw_count=1))
    assert lines[:5] == ["18 8 1 9 24 H100", "8 9 10 11 12 13 14 15 16 17 ",
                         "0 8 2880Gbps 0.000025ms 0", "0 9 400Gbps 0.0005ms 0", "1 8 2880Gbps 0.000025ms 0"]
    assert lines[-1] == "16 17 400Gbps 0.0005ms 0"


def test_defaults_of_templates():
    # Spectrum-X default 4096 GPUs: 8 segments x 8 rails = 64 ASWs, 64 PSWs, full bipartite
    t = build("spectrum-x")
    lines, _ = simai_lines(t)
    assert lines[0] == f"{4096 + 512 + 64 + 64} 8 512 128 {4096 + 4096 + 64 * 64} H100"
    # AlibabaHPN default 15360 GPUs: 15 segments x 16 ASWs = 240 ASWs, 120 PSWs
    hpn = build("alibaba-hpn", dual_plane=True)
    assert sum(1 for n in hpn.nodes if n.tier == "asw") == 240
    assert sum(1 for n in hpn.nodes if n.tier == "psw") == 120
    assert t.notes and "corrected from 8 to 64" in t.notes[0]


def test_dual_plane_wiring():
    t = build("alibaba-hpn", gpus=128, dual_plane=True)
    lines, _ = simai_lines(t)
    # GPU 0 -> ASW 144 (bank 1) and 152 (bank 2); bank 1 ASWs reach only PSWs 160..219
    assert lines[3:5] == ["0 144 200Gbps 0.0005ms 0", "0 152 200Gbps 0.0005ms 0"]
    asw_psw = [tuple(map(int, ln.split()[:2])) for ln in lines[2:] if int(ln.split()[0]) >= 144]
    assert all(160 <= p <= 219 for a, p in asw_psw if a < 152)
    assert all(220 <= p <= 279 for a, p in asw_psw if a >= 152)


def test_capacity_exceeded():
    with pytest.raises(TopoError, match="pod capacity exceeded"):
        build("spectrum-x", gpus=8192)
    with pytest.raises(TopoError, match="not a multiple"):
        build("spectrum-x", gpus=100)
    with pytest.raises(TopoError, match="bad rate '400Gbs'"):
        build("spectrum-x", gpus=8, nic_bandwidth_Bps="400Gbs")
    with pytest.raises(TopoError, match="unknown template 'foo'"):
        build("foo")
