"""`clustersim collective calibrate`, the nccl-tests / SimAI busbw readers and NetCalibration files."""

from __future__ import annotations

import pytest

topo = pytest.importorskip("topo")

import netsim  # noqa: E402
from netsim import CollectiveRequest as Req  # noqa: E402
from netsim import NetCalibration, NetsimError, load_net_calibration  # noqa: E402
from netsim.nccltests import read_nccl_tests, read_simai_busbw  # noqa: E402
from netsim.validation import H100_61_US, SIZES_61  # noqa: E402
from sim.cli import main  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30


def nccl_tests_text(sizes, times_us, *, op="all_reduce", ranks=8, hosts=1, per_process=None, graph=0,
                    gpu="NVIDIA H100 80GB HBM3", new_format=True, banner=True):
    """An nccl-tests output file in the standard layout (times in us; algbw/busbw derived as nccl-tests
    does: algbw = S / t, busbw = algbw x 2(n-1)/n for all-reduce)."""
    per_process = per_process or ranks // hosts
    lines = []
    if banner:
        lines.append(f"# Collective test starting: {op}_perf")
    lines.append(f"# nThread 1 nGpus {per_process} minBytes {sizes[0]} maxBytes {sizes[-1]} step: 2(factor) "
                 f"warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: {graph}")
    lines += ["#", "# Using devices"]
    for r in range(ranks):
        host = f"node{r * hosts // ranks}"
        pid = 4000 + r // per_process
        lines.append(f"#  Rank {r:2d} Group  0 Pid {pid:6d} on {host:>10s} device {r % (ranks // hosts):2d} "
                     f"[0x{r:02x}] {gpu}")
    lines.append("#")
    if new_format:
        lines.append("#       size         count      type   redop    root     time   algbw   busbw #wrong"
                     "     time   algbw   busbw #wrong")
    else:
        lines.append("#       size         count      type   redop     time   algbw   busbw  error"
                     "     time   algbw   busbw  error")
    lines.append("#        (B)    (elements)                               (us)  (GB/s)  (GB/s)"
                 "            (us)  (GB/s)  (GB/s)")
    factor = 2 * (ranks - 1) / ranks
    for s, t in zip(sizes, times_us):
        alg = s / t / 1e3
        cols = f"{s:12d}{s // 4:14d}     float     sum"
        cols += "      -1" if new_format else ""
        wrong = "      0" if new_format else "  0e+00"
        # in-place column 10% slower, to tell the two apart
        cols += f" {t:8.2f} {alg:7.2f} {alg * factor:7.2f}{wrong} {t * 1.1:8.2f} {alg / 1.1:7.2f} {alg * factor / 1.1:7.2f}{wrong}"
        lines.append(cols)
    lines += ["# Out of bounds values : 0 OK", "# Avg bus bandwidth    : 123.45", "#"]
    return "\n".join(lines) + "\n"


def test_reader_header_facts_and_columns(tmp_path):
    p = tmp_path / "run.log"
    p.write_text(nccl_tests_text([8, 1024], [20.0, 21.5], ranks=16, hosts=2, per_process=1, op="all_gather"))
    t = read_nccl_tests(p)
    assert (t.op, t.ranks, t.hosts, t.gpu_type, t.gpus_per_process, t.cuda_graphs) == \
        ("all_gather", 16, 2, "H100", 1, False)
    assert [(s, round(x * 1e6, 2)) for s, x, _ in t.rows] == [(8, 20.0), (1024, 21.5)]
    assert t.rows[0][2] == 24                                   # file line of the first row
    inplace = read_nccl_tests(p, in_place=True)
    assert [round(x * 1e6, 2) for _, x, _ in inplace.rows] == [22.0, 23.65]
    # older nccl-tests (no root column, 'error' columns), one process for 8 GPUs, CUDA graphs, op from name
    q = tmp_path / "sendrecv_perf_8gpu.txt"
    q.write_text(nccl_tests_text([4096], [9.0], new_format=False, banner=False, graph=1,
                                 gpu="NVIDIA A100-SXM4-80GB"))
    t = read_nccl_tests(q)
    assert (t.op, t.ranks, t.hosts, t.gpu_type, t.gpus_per_process, t.cuda_graphs) == \
        ("send", 8, 1, "A100", 8, True)
    assert read_nccl_tests(q, op="all_to_all").op == "all_to_all"


@pytest.mark.parametrize("text,msg", [
    ("# nothing here\n", ":1: no nccl-tests table header"),
    ("# all_reduce_perf\n#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n",
     ":2: the table has no rows"),
    ("# all_reduce_perf\n#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "1024 256 float sum -1 12.0 0.08 0.15 0 12.0 0.08 0.15 0\nbroken line here\n", ":4: expected a table row"),
    ("# all_reduce_perf\n#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "1024 256 float sum -1 fast 0.08 0.15 0 12.0 0.08 0.15 0\n", ":3: size or time is not a number"),
    ("# all_reduce_perf\n#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "1024 256 float\n", ":3: expected 13 columns"),
    ("#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
     "1024 256 float sum -1 12.0 0.08 0.15 0 12.0 0.08 0.15 0\n", ":1: cannot tell which collective"),
])
def test_reader_errors_name_file_and_line(tmp_path, text, msg):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(NetsimError, match=msg) as exc:
        read_nccl_tests(p)
    assert str(exc.value).startswith(str(p)) and "\n" not in str(exc.value)


SIMAI_BUSBW = """test
TP:
  allreduce,: 300
  allgather,: 280
  reducescatter,: 280
  alltoall,: 230
DP:
  allreduce,: null
  allgather,: 380
  reducescatter,: 380
  alltoall,: null
PP:
  busbw: 47.5
"""


def test_simai_busbw_reader(tmp_path):
    p = tmp_path / "busbw.yaml"
    p.write_text(SIMAI_BUSBW)
    got = read_simai_busbw(p)
    assert {g: {op: bw for op, (bw, _line) in e.items()} for g, e in got.items()} == {
        "TP": {"all_reduce": 300e9, "all_gather": 280e9, "reduce_scatter": 280e9, "all_to_all": 230e9},
        "DP": {"all_gather": 380e9, "reduce_scatter": 380e9}, "PP": {"send": 47.5e9}}
    assert got["PP"]["send"][1] == 13
    p.write_text("test\nTP:\n  allreduce,: fast\n")
    with pytest.raises(NetsimError, match=r"busbw.yaml:3: allreduce: expected GB/s or null"):
        read_simai_busbw(p)
    p.write_text("test\nXX:\n  allreduce,: 1\n")
    with pytest.raises(NetsimError, match=r"busbw.yaml:2: unknown group 'XX'"):
        read_simai_busbw(p)


def test_calibrate_fits_a_slower_network_and_make_backend_uses_it(tmp_path, capsys):
    """A system whose every measured time is 1.5x the published 8 x H100 curve (nccl_model.md 6.1):
    the fitted constants make make_backend's large all-reduce 1.5x slower than netsim's own, and
    `clustersim collective --net-calibration` prints the same."""
    measured = tmp_path / "all_reduce_perf.txt"
    measured.write_text(nccl_tests_text(SIZES_61, [1.5 * t for t in H100_61_US]))
    out = tmp_path / "calib.yaml"
    assert main(["collective", "calibrate", str(measured), "-o", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "all_reduce, 8 GPUs on 1 node, 24 sizes; 8 GPU(s) per process" in printed
    cal = load_net_calibration(out)
    assert cal.fitted_from == ("all_reduce_perf.txt",) and cal.name == "calib"
    assert cal.fit["all_reduce_perf.txt"]["after"]["median_abs_error_ge_1MiB"] <= 0.10
    t = topo.build("spectrum-x", gpus=8, nvlink_bandwidth_Bps=450e9, psw_count=1)
    req = Req("all_reduce", tuple(range(8)), 4 * GiB)
    default = netsim.make_backend("flow", t).estimate(req)
    for kind in ("flow", "analytical"):
        fitted = netsim.make_backend(kind, t, net_calibration=cal).estimate(req)
        assert fitted == pytest.approx(1.5 * default, rel=0.05)
    assert main(["collective", "-g", "8", "-b", "4G", "-e", "4G", "--net-calibration", str(out)]) == 0
    row = next(ln.split() for ln in capsys.readouterr().out.splitlines() if ln.startswith("all_reduce"))
    assert float(row[3]) * 1e-6 == pytest.approx(1.5 * default, rel=0.05)


def test_calibrate_from_simai_busbw_sets_link_efficiencies(tmp_path, capsys):
    """TP busbw 300 GB/s on an H100 node (line rate 450 GB/s per direction) and PP busbw 47.5 GB/s on
    400 Gb/s NICs (50 GB/s): nvlink_efficiency ~ 300 / 450 drives the TP ring collectives, and
    network_efficiency ~ 47.5 / 50 the sends between servers."""
    p = tmp_path / "busbw.yaml"
    p.write_text("test\nTP:\n  allgather,: 300\n  reducescatter,: 300\nPP:\n  busbw: 47.5\n")
    out = tmp_path / "cal.yaml"
    assert main(["collective", "calibrate", "--simai-busbw", str(p), "-g", "16", "-o", str(out)]) == 0
    cal = load_net_calibration(out)
    assert cal.nvlink_efficiency == pytest.approx(300 / 450, rel=0.03)
    assert cal.network_efficiency == pytest.approx(47.5 / 50, rel=0.03)
    assert "nvls_efficiency" not in cal.constants() and cal.fitted_from == ("busbw.yaml",)


@pytest.mark.parametrize("argv,msg", [
    (["collective", "calibrate", "-o", "x.yaml"], "give nccl-tests files and/or --simai-busbw"),
    (["collective", "calibrate", "/nonexistent/a.txt", "-o", "x.yaml"], "/nonexistent/a.txt: cannot read"),
    (["collective", "calibrate", "{bad}", "-o", "/nonexistent-dir/x.yaml"], "-o /nonexistent-dir/x.yaml: cannot write"),
])
def test_calibrate_cli_errors(tmp_path, argv, msg, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("# all_reduce_perf\n#  size count type redop root time algbw busbw #wrong time algbw busbw "
                   "#wrong\n1024 256 float sum -1 x 0.08 0.15 0 12.0 0.08 0.15 0\n")
    argv = [str(bad) if a == "{bad}" else a for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert msg in err and err.count("\n") == 1


def test_calibrate_cli_malformed_file_is_file_line_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.txt"
    bad.write_text("# all_reduce_perf\n#  size count type redop root time algbw busbw #wrong time algbw busbw "
                   "#wrong\n1024 256 float sum -1 x 0.08 0.15 0 12.0 0.08 0.15 0\n")
    assert main(["collective", "calibrate", str(bad), "-o", str(tmp_path / "c.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{bad}:3: size or time is not a number" in err and err.count("\n") == 1
    assert not (tmp_path / "c.yaml").exists()


def test_net_calibration_file_round_trip_and_errors(tmp_path):
    from netsim.netcal import save_net_calibration

    cal = NetCalibration(name="x", network_efficiency=0.9, network_latency_s=1e-6, cpu_vendor="amd",
                         ll128_over_network=False, fitted_from=("a.txt",))
    p = tmp_path / "cal.yaml"
    save_net_calibration(cal, p)
    back = load_net_calibration(p)
    assert back == cal and back.path == str(p)
    for text, msg in [
        ("format: clustersim-net-calibration/1\nconstants:\n  fill_scale: 1.2\n  colour: red\n",
         ":4: constants.colour: unknown constant"),
        ("format: clustersim-net-calibration/1\nconstants:\n  network_efficiency: fast\n",
         ":3: constants.network_efficiency: expected a number"),
        ("format: clustersim-net-calibration/1\nconstants:\n  network_efficiency: 1.7\n",
         ":3: constants.network_efficiency: network_efficiency must be a number in"),
        ("format: something-else\nconstants: {}\n", ":1: format must be"),
        ("format: clustersim-net-calibration/1\nconstants:\n  cpu_vendor: arm\n", ":3: constants.cpu_vendor"),
        ("format: clustersim-net-calibration/1\nconstant:\n  fill_scale: 1\n", ":2: unknown key 'constant'"),
        ("format: [unclosed\n", "not valid YAML"),
    ]:
        p.write_text(text)
        with pytest.raises(NetsimError, match=msg) as exc:
            load_net_calibration(p)
        assert str(exc.value).startswith(str(p)) and "\n" not in str(exc.value)
    with pytest.raises(NetsimError, match="cannot read net calibration"):
        load_net_calibration(tmp_path / "missing.yaml")
    with pytest.raises(NetsimError, match="fill_scale must be a number"):
        NetCalibration(fill_scale=-1.0)


def test_collective_cli_bad_net_calibration_is_one_line(tmp_path, capsys):
    p = tmp_path / "c.yaml"
    p.write_text("format: clustersim-net-calibration/1\nconstants:\n  fill_scale: lots\n")
    assert main(["collective", "-g", "8", "-e", "1M", "--net-calibration", str(p)]) == 2
    err = capsys.readouterr().err
    assert f"{p}:3: constants.fill_scale: expected a number" in err and err.count("\n") == 1


@pytest.mark.slow
def test_calibrate_multi_node_finds_the_network_latency_and_no_ll128(tmp_path, capsys):
    """The published 2 x 8 H100 GPUDirect-TCPXO curve (nccl_model.md 6.2) as an nccl-tests file: the fit
    finds what the data show: a network latency of tens of us per hop (the ~123 us floor), no LL128
    across that network (the 1-16 MiB slope is LL's 39 GB/s cap) and a fit within 10% at >= 1 MiB."""
    from netsim.validation import SIZES_62, TCPXO_62_US

    p = tmp_path / "all_reduce_perf_tcpxo.txt"
    p.write_text(nccl_tests_text(SIZES_62, TCPXO_62_US, ranks=16, hosts=2, per_process=1))
    out = tmp_path / "tcpxo.yaml"
    assert main(["collective", "calibrate", str(p), "-bw", "200Gbps", "-o", str(out)]) == 0
    assert "16 GPUs on 2 nodes" in capsys.readouterr().out
    cal = load_net_calibration(out)
    assert 30e-6 <= cal.network_latency_s <= 80e-6
    assert cal.ll128_over_network is False
    rep = cal.fit["all_reduce_perf_tcpxo.txt"]
    assert rep["after"]["median_abs_error_ge_1MiB"] <= 0.10 < rep["before"]["median_abs_error_ge_1MiB"]
