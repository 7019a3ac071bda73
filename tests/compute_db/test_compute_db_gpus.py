"""GPU spec table: figures from reference/hardware.md, aliases, user files, errors."""

from __future__ import annotations

import pytest

from compute_db import gpus
from compute_db.errors import ComputeDBError

# (name, bf16 TFLOP/s, fp8, tf32, HBM GB, HBM GB/s, NVLink GB/s both directions, NIC Gb/s) per hardware.md
HARDWARE_MD = [
    ("A100-40GB", 312, None, 156, 40, 1555, 600, 200),
    ("A100-80GB", 312, None, 156, 80, 2039, 600, 200),
    ("A100-40GB-PCIe", 312, None, 156, 40, 1555, None, None),
    ("A100-80GB-PCIe", 312, None, 156, 80, 1935, None, None),
    ("H100", 989.4, 1978.9, 494.7, 80, 3350, 900, 400),
    ("H100-PCIe", 756, 1513, 378, 80, 2000, None, None),
    ("H800", 989, 1979, 495, 80, 3350, 400, 400),
    ("H20", 148, 296, 74, 96, 4000, 900, None),
    ("H200", 989, 1979, 495, 141, 4800, 900, 400),
    ("B200", 2250, 4500, 1100, 180, 8000, 1800, 400),
    ("GB200", 2500, 5000, 1250, 186, 8000, 1800, 400),
    ("MI300X", 1307.4, 2614.9, 653.7, 192, 5300, 896, 400),
]


@pytest.mark.parametrize("row", HARDWARE_MD, ids=[r[0] for r in HARDWARE_MD])
def test_shipped_table_matches_hardware_md(row):
    name, bf16, fp8, tf32, hbm, bw, nvl, nic = row
    g = gpus.get_gpu(name)
    assert g.peak_flops["bf16"] == pytest.approx(bf16 * 1e12)
    assert g.peak_flops["fp16"] == pytest.approx(bf16 * 1e12)
    assert g.peak_flops["fp32"] == pytest.approx(tf32 * 1e12)
    if fp8 is not None:
        assert g.peak_flops["fp8"] == pytest.approx(fp8 * 1e12)
        assert g.fp8_native
    else:
        assert not g.fp8_native and g.peak_flops["fp8"] == g.peak_flops["bf16"]
    assert g.hbm_bytes == pytest.approx(hbm * 2**30)
    assert g.hbm_Bps == pytest.approx(bw * 1e9)
    if nvl is not None:
        assert g.nvlink_Bps == pytest.approx(nvl / 2 * 1e9)   # one direction
    if nic is not None:
        assert g.nic_Bps == pytest.approx(nic * 1e9 / 8)


def test_every_hardware_md_gpu_listed():
    assert set(r[0] for r in HARDWARE_MD) <= set(gpus.list_gpus())


def test_aliases_and_case():
    assert gpus.get_gpu("h100-sxm5").name == "H100"
    assert gpus.get_gpu("A100").name == "A100-80GB"
    assert gpus.get_gpu("gb200-nvl72").name == "GB200"


def test_unknown_gpu_lists_known():
    with pytest.raises(ComputeDBError) as exc:
        gpus.get_gpu("Z9000")
    msg = str(exc.value)
    assert "unknown GPU 'Z9000'" in msg and "H100" in msg and "MI300X" in msg and "\n" not in msg


def test_user_gpu_file(tmp_path):
    f = tmp_path / "mine.yaml"
    f.write_text("gpus:\n  X1:\n    aliases: [x-one]\n    peak_tflops: {bf16: 100, fp8: 200, fp32: 50}\n"
                 "    hbm_GiB: 10\n    hbm_GBps: 1000\n    nvlink_GBps: 100\n    nic_Gbps: 100\n    similar_to: [H100]\n")
    extra = gpus.load_gpu_file(f)
    g = gpus.get_gpu("x-one", extra)
    assert g.name == "X1" and g.peak_flops["fp16"] == 100e12 and g.nic_Bps == 12.5e9
    assert "X1" in gpus.list_gpus(extra) and "X1" not in gpus.list_gpus()


def test_bad_gpu_files(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("gpus:\n  X1:\n    peak_tflops: {bf16: 100}\n    hbm_GiB: 10\n")
    with pytest.raises(ComputeDBError, match="hbm_GBps"):
        gpus.load_gpu_file(f)
    f.write_text("gpus: [\n")
    with pytest.raises(ComputeDBError, match=r"bad.yaml:\d+: not valid YAML"):
        gpus.load_gpu_file(f)
    with pytest.raises(ComputeDBError, match="not found"):
        gpus.load_gpu_file(tmp_path / "missing.yaml")


def _z1(similar):
    return ("gpus:\n  Z1:\n    peak_tflops: {bf16: 500, fp8: 1000, fp32: 250}\n    hbm_GiB: 64\n"
            f"    hbm_GBps: 2000\n    nvlink_GBps: 300\n    nic_Gbps: 400\n    similar_to: [{similar}]\n")


def test_similar_to_must_name_a_known_gpu(tmp_path):
    # regression: a typo was ignored silently and the fit came from whichever GPU had the most data
    f = tmp_path / "z.yaml"
    f.write_text(_z1("V100"))
    with pytest.raises(ComputeDBError, match=r"z.yaml: gpus.Z1.similar_to: unknown GPU 'V100' \(known: .*H100"):
        gpus.load_gpu_file(f)


def test_similar_to_accepts_aliases(tmp_path):
    # regression: an alias in similar_to (h100-sxm5) was dropped and the A100 fit used instead
    from compute_db import open_db
    from compute_db.keys import make_key
    f = tmp_path / "z.yaml"
    f.write_text(_z1("h100-sxm5"))
    kt = open_db(gpu_file=f).lookup_key(make_key("gemm", "fwd", {"m": 8192, "n": 8192, "k": 8192}, "bf16"), "Z1")
    assert kt.source == "modeled" and "fit:H100" in kt.basis


def _same_document(a, b) -> None:
    """Equal values of the same types, mappings in the same key order."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            _same_document(a[k], b[k])
    elif isinstance(a, list):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _same_document(x, y)
    else:
        assert a == b


def test_shipped_table_is_read_without_pyyaml_as_pyyaml_reads_it():
    """The shipped gpus.yaml stays within the subset the start-up reader takes (else every run would
    import PyYAML again) and gives PyYAML's document, types and key order included."""
    import yaml
    text = gpus.SHIPPED_GPU_FILE.read_text()
    fast = gpus._simple_yaml(text)
    assert fast is not None
    _same_document(fast, yaml.safe_load(text))


SUBSET_CASES = [
    "a:\n  b: 1\n  c: -2.50\n  d: [x-1, Y.2]\n  e: {f: true, g: false}\nh: 0\n",
    "# head\na:   # note\n  b:\n    c: 3 # tail\n\n    d: []\n  e: {}\n",
    "a:\n    deep: 1\n    more: name_1\nb: 2\n",
]
DECLINED_CASES = [
    "a: yes\n", "a: on\n", "a: 012\n", "a: 1e3\n", "a: 1_000\n", "a: 0x1f\n", "a: '1'\n", 'a: "x"\n',
    "a: ~\n", "a: null\n", "a: .5\n", "a: True\n", "a:\nb: 1\n", "a:\n", "a:\n  - 1\n", "a: &x 1\n",
    "a: !!str 1\n", "a:\n\tb: 1\n", "a: [1, [2]]\n", "a: x y\n", "a: x:y\n", "1: a\n", "a:\n  b: 1\n c: 2\n",
    "a: 1:20\n", "a: [1, 2\n", "---\na: 1\n", "",
]


@pytest.mark.parametrize("text", SUBSET_CASES)
def test_subset_reader_gives_pyyamls_document(text):
    import yaml
    got = gpus._simple_yaml(text)
    assert got is not None
    _same_document(got, yaml.safe_load(text))


@pytest.mark.parametrize("text", DECLINED_CASES)
def test_subset_reader_declines_what_it_does_not_read_like_pyyaml(text):
    """Quotes, YAML 1.1 bools / nulls / octal / sexagesimal / exponent numbers, block lists, anchors,
    tags, tabs, empty values and bad indents: None (PyYAML reads the file instead)."""
    assert gpus._simple_yaml(text) is None


def test_user_files_are_read_by_pyyaml(tmp_path, monkeypatch):
    """Only the shipped table takes the subset reader: a user file always goes through PyYAML."""
    gpus.shipped_gpus()     # read (and cached) before the reader is replaced
    monkeypatch.setattr(gpus, "_simple_yaml", lambda text: pytest.fail("subset reader used for a user file"))
    f = tmp_path / "g.yaml"
    f.write_text("gpus:\n  X1:\n    peak_tflops: {bf16: 100}\n    hbm_GiB: 10\n    hbm_GBps: 100\n")
    assert gpus.load_gpu_file(f)["X1"].peak_flops["bf16"] == 100e12


def test_importing_the_gpu_table_does_not_import_pyyaml():
    import subprocess
    import sys
    code = ("import sys; from compute_db import gpus; gpus.shipped_gpus(); "
            "print('yaml' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
