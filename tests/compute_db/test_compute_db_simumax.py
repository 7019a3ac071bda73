"""SimuMax importer: efficiency -> time with SimuMax's FLOP counting, layout -> kernel key, figures."""

from __future__ import annotations

import json

import pytest

from compute_db import simumax
from compute_db.errors import ComputeDBError
from compute_db.keys import backward_gemm_shapes, make_key

HEADER = ("op,peak_tflops,efficiency,K,M,N,accumulate,b,batch,dtype,grad,head_num,k,kv_head_num,layout,m,"
          "main_grad_dtype,n,ng,out_dtype,qk_head_dim,qkv_contiguous,seq_len,single_output,stage,"
          "use_split_accumulator,v_head_dim")


def _csv(tmp_path, lines, name="x_kernel_efficiency.csv"):
    p = tmp_path / name
    p.write_text(HEADER + "\n" + "\n".join(lines) + "\n")
    return p


def _by_key(rows):
    return {r.key: r for r in rows}


def test_gemm_layouts_map_to_our_keys_and_times(tmp_path):
    # the forward GEMM of a linear layer (tokens 4096, in 8192, out 10240) and its two gradients as SimuMax
    # writes them (TN / NN / NT rows of its B200 file)
    p = _csv(tmp_path, [
        "matmul,2250.0,0.5,,,,False,1,,,,,8192,,TN,4096,,10240,,bf16,,,,,,,",
        "matmul,2250.0,0.4,,,,False,1,,,,,10240,,NN,4096,,8192,,bf16,,,,,,,",
        "matmul,2250.0,0.25,,,,True,1,,,,,4096,,NT,10240,,8192,,fp32,,,,,,,",
    ])
    rows = _by_key(simumax.import_simumax_csv(p, "B200"))
    shapes = backward_gemm_shapes(4096, 10240, 8192)        # our convention: (m, n, k) of each GEMM computed
    flops = 2.0 * 4096 * 10240 * 8192
    for variant, eff in (("fwd", 0.5), ("dgrad", 0.4), ("wgrad", 0.25)):
        r = rows[make_key("gemm", variant, shapes[variant], "bf16")]
        assert r.median_s == pytest.approx(flops / (2250e12 * eff), rel=1e-12)
        assert (r.provenance, r.source, r.gpu) == ("imported", "simumax-v1.2", "B200")


def test_duplicates_merge_to_the_median(tmp_path):
    p = _csv(tmp_path, [
        "matmul,1000.0,0.5,,,,True,1,,,,,64,,NT,128,,256,,fp32,,,,,,,",
        "matmul,1000.0,0.25,,,,True,1,,,,,64,,NT,128,,256,,bf16,,,,,,,",
    ])
    (r,) = simumax.import_simumax_csv(p, "B200")
    t1, t2 = 2.0 * 128 * 256 * 64 / 1e15 / 0.5, 2.0 * 128 * 256 * 64 / 1e15 / 0.25
    assert r.key == make_key("gemm", "wgrad", (256, 128, 64), "bf16")
    assert (r.median_s, r.min_s, r.mean_s) == pytest.approx(((t1 + t2) / 2, t1, (t1 + t2) / 2), rel=1e-12)


def test_grouped_gemm_stages(tmp_path):
    p = _csv(tmp_path, [
        f"group_matmul,2250.0,0.2,5120.0,154.0,3072.0,False,,,bf16,{g},,,,,,fp32,,160.0,bf16,,,,True,{stage},False,"
        for g, stage in (("False", "fwd"), ("True", "bwd_grad_act"), ("True", "bwd_grad_w"))])
    rows = _by_key(simumax.import_simumax_csv(p, "B200"))
    t = 2.0 * 160 * 154 * 3072 * 5120 / (2250e12 * 0.2)
    for variant, dims in (("fwd", (160, 154, 3072, 5120)), ("dgrad", (160, 154, 5120, 3072)),
                          ("wgrad", (160, 5120, 3072, 154))):
        assert rows[make_key("grouped_gemm", variant, dims, "bf16")].median_s == pytest.approx(t, rel=1e-12)


def test_flash_attention_is_causal_with_non_causal_flops(tmp_path):
    p = _csv(tmp_path, [
        "sdp_fwd,2250.0,1.2,,,,,,1.0,,,8.0,,1.0,,,,,,,128.0,True,32768.0,,,,128.0",
        "sdp_bwd,2250.0,0.6,,,,,,1.0,,,64.0,,64.0,,,,,,,192.0,True,4096.0,,,,128.0",
    ])
    rows = _by_key(simumax.import_simumax_csv(p, "B200"))
    fwd = make_key("flash_attn", "fwd", (1, 32768, 32768, 8, 1, 128, 128), "bf16", causal=True)
    bwd = make_key("flash_attn", "bwd", (1, 4096, 4096, 64, 64, 192, 128), "bf16", causal=True)
    assert rows[fwd].median_s == pytest.approx(2 * 8 * 32768**2 * 256 / (2250e12 * 1.2), rel=1e-12)
    assert rows[bwd].median_s == pytest.approx(2.5 * 2 * 64 * 4096**2 * 320 / (2250e12 * 0.6), rel=1e-12)


@pytest.mark.parametrize("line,needle", [
    ("matmul,2250.0,0.0,,,,False,1,,,,,64,,TN,64,,64,,bf16,,,,,,,", "efficiency and peak_tflops must be > 0"),
    ("matmul,2250.0,0.5,,,,False,1,,,,,64,,XX,64,,64,,bf16,,,,,,,", "matmul layout must be TN, NN or NT"),
    ("matmul,2250.0,0.5,,,,False,1,,,,,64,,TN,,,64,,bf16,,,,,,,", "column 'm' is missing or not finite"),
    ("conv,2250.0,0.5,,,,False,1,,,,,64,,TN,64,,64,,bf16,,,,,,,", "unknown op 'conv'"),
])
def test_bad_rows_name_file_and_line(tmp_path, line, needle):
    p = _csv(tmp_path, ["matmul,2250.0,0.5,,,,False,1,,,,,64,,TN,64,,64,,bf16,,,,,,,", line])
    with pytest.raises(ComputeDBError, match=rf"x_kernel_efficiency.csv:3: .*{needle}"):
        simumax.import_simumax_csv(p, "B200")


def test_memory_figures_are_re_expressed_against_our_bandwidth(tmp_path):
    p = tmp_path / "a100_pcie_system_defaults.json"
    p.write_text(json.dumps({"memory_bandwidth": {
        "default": {"efficient_factor": 0.91, "gbps": 1600, "latency_us": 40},
        "permute_fwd": {"efficient_factor": 0.2, "gbps": 1600}, "ce_fusion": {"efficient_factor": 0.3, "gbps": 1600}}}))
    figs = {(f.family, f.variant): f for f in simumax.import_simumax_figures(p, "A100-80GB-PCIe", 1935e9)}
    assert set(figs) == {("default", ""), ("permute", "fwd")}            # ce_fusion is not a kernel we model
    assert figs[("default", "")].value == pytest.approx(0.91 * 1600 / 1935, rel=1e-12)
    assert "1456 GB/s" in figs[("default", "")].note


def test_shared_files(shared_dir):
    rows, figs = simumax.import_simumax(shared_dir / "data" / "simumax_efficiency")
    count = {}
    for r in rows:
        count[(r.gpu, r.key.kind)] = count.get((r.gpu, r.key.kind), 0) + 1
    # B200: 144 TN + 144 NN + 226 NT matmul rows -> 3 x 144 keys (the NT duplicates differ in output dtype)
    assert count[("B200", "gemm")] == 432 and count[("A100-80GB-PCIe", "gemm")] == 183
    assert count[("B200", "flash_attn")] == 38 and count[("B200", "grouped_gemm")] == 60
    # first row of the B200 file: TN m=4096 n=10240 k=8192 at efficiency 0.6451614102335537
    key = make_key("gemm", "fwd", (4096, 10240, 8192), "bf16")
    (r,) = [r for r in rows if r.gpu == "B200" and r.key == key]
    assert r.median_s == pytest.approx(2 * 4096 * 10240 * 8192 / (2250e12 * 0.6451614102335537), rel=1e-12)
    b200 = {(f.family, f.variant): f.value for f in figs if f.gpu == "B200"}
    assert b200 == pytest.approx({("default", ""): 0.666, ("permute", "fwd"): 0.5008136513816437,
                                  ("permute", "bwd"): 0.5108178337365621, ("cross_entropy", ""): 0.3246108444537549})
