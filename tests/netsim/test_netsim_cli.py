"""`clustersim collective` and the MICRO reader."""

from __future__ import annotations

import pytest

pytest.importorskip("topo")

from netsim.cli import parse_size  # noqa: E402
from netsim.errors import NetsimError  # noqa: E402
from netsim.micro import read_micro  # noqa: E402
from sim.cli import main  # noqa: E402

MICRO = """MICRO
3
all_reduce_1M -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 1048576 100
all_gather_2M -1 1 NONE 0 1 NONE 0 1 ALLGATHER 2097152 100
mixed -1 1 ALLTOALL_EP 4096 1 NONE 0 1 REDUCESCATTER_DP_EP 8192 100
"""


def test_parse_size():
    assert parse_size("8", "-b") == 8
    assert parse_size("64K", "-b") == 65536
    assert parse_size("128M", "-b") == 128 << 20
    assert parse_size("1G", "-b") == 1 << 30
    with pytest.raises(NetsimError, match="-b"):
        parse_size("lots", "-b")


def test_read_micro(tmp_path):
    p = tmp_path / "micro.txt"
    p.write_text(MICRO.replace(" ", "\t", 5))
    ops = read_micro(str(p))
    assert [(o.op, o.size_bytes) for o in ops] == [
        ("all_reduce", 1 << 20), ("all_gather", 2 << 20), ("all_to_all", 4096), ("reduce_scatter", 8192)]
    assert ops[2].line == 5


@pytest.mark.parametrize("text,msg", [
    ("DATA\n0\n", ":1: parallelism policy 'DATA' is not supported"),
    ("MICRO\n2\nx -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8 100\n", ":2: header says 2"),
    ("MICRO\n1\nx -1 1 NONE 0 1 NONE 0 1 ALLREDUCE 8\n", ":3: expected 12 fields"),
    ("MICRO\n1\nx -1 1 NONE 0 1 NONE 0 1 GOSSIP 8 100\n", ":3: unknown comm type 'GOSSIP'"),
    ("MICRO\n1\nx -1 1 NONE 0 1 NONE 0 1 ALLREDUCE eight 100\n", ":3: field 11"),
])
def test_read_micro_errors(tmp_path, text, msg):
    p = tmp_path / "bad.txt"
    p.write_text(text)
    with pytest.raises(NetsimError, match=msg):
        read_micro(str(p))


def test_collective_table_and_png(tmp_path, capsys):
    png = tmp_path / "busbw.png"
    rc = main(["collective", "--op", "allreduce", "-t", "spectrum-x", "-g", "8", "-nvbw", "3600Gbps",
               "-b", "1M", "-e", "1G", "-f", "1024", "-a", "ring", "--png", str(png), "--check"])
    out = capsys.readouterr().out
    assert rc == 0
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("all_reduce")]
    assert [int(r[1]) for r in rows] == [1 << 20, 1 << 30]
    flow_bus, ana_bus = float(rows[1][5]), float(rows[1][8])
    assert 330 < flow_bus < 390 and abs(ana_bus / flow_bus - 1) < 0.1
    assert png.read_bytes()[:4] == b"\x89PNG"


# SimAI's own 8-GPU all-reduce smoke test (simai_formats.md section 1): a training file, comm in the
# forward column
SIMAI_MICRO_ALLREDUCE = """HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 8 ep: 1 pp: 1 vpp: 8 ga: 1 all_gpus: 8 \
checkpoints: 0 checkpoint_initiates: 0
2
embedding_layer     -1 556000  ALLREDUCE   16777216      1       NONE 0        1      NONE   0      1
embedding_layer     -1 556000  ALLREDUCE   67108864      1       NONE 0        1      NONE   0      1
"""


def test_collective_runs_simai_micro_allreduce_example(tmp_path, capsys):
    p = tmp_path / "microAllReduce.txt"
    p.write_text(SIMAI_MICRO_ALLREDUCE)
    assert [(o.op, o.size_bytes) for o in read_micro(str(p))] == [("all_reduce", 16 << 20), ("all_reduce", 64 << 20)]
    assert main(["collective", "--micro", str(p), "-g", "8"]) == 0
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("embedding_layer")]
    assert [int(r[2]) for r in rows] == [16 << 20, 64 << 20]
    assert "compute times and TP/DP/EP group columns are ignored" in out


def test_collective_template_nvlink_is_the_datasheet_line_rate(capsys):
    """Without -nvbw a template gets its GPU's datasheet NVLink rate (netsim applies its efficiency to
    it): 8 x H100 ring all-reduce ~370 GB/s busbw, 8 x A100 ~230 GB/s (hardware.md). SimAI's template
    default, 2880 Gbps, is already an effective figure and gave ~295 GB/s."""
    for gpu, nic, expect in (("H100", "400Gbps", 370), ("A100", "200Gbps", 230)):
        assert main(["collective", "-g", "8", "-gt", gpu, "-bw", nic, "-a", "ring", "-b", "1G", "-e", "1G",
                     "--backend", "flow"]) == 0
        out = capsys.readouterr().out
        row = next(ln.split() for ln in out.splitlines() if ln.startswith("all_reduce"))
        assert float(row[5]) == pytest.approx(expect, rel=0.05)
        assert "datasheet line rate" in out
    # an explicit -nvbw wins
    assert main(["collective", "-g", "8", "-nvbw", "2880Gbps", "-a", "ring", "-b", "1G", "-e", "1G",
                 "--backend", "flow"]) == 0
    out = capsys.readouterr().out
    row = next(ln.split() for ln in out.splitlines() if ln.startswith("all_reduce"))
    assert float(row[5]) == pytest.approx(360 * 370 / 450, rel=0.05) and "datasheet" not in out


def test_collective_groups(capsys):
    assert main(["collective", "--op", "all_gather", "-g", "32", "--ranks", "8", "--servers", "4",
                 "-b", "1M", "-e", "1M", "--backend", "analytical"]) == 0
    out = capsys.readouterr().out
    assert "group of 8 GPUs over 4 servers" in out
    assert main(["collective", "-g", "32", "--rail", "3", "-b", "1M", "-e", "1M"]) == 0
    assert "group of 4 GPUs over 4 servers" in capsys.readouterr().out


def test_collective_micro(tmp_path, capsys):
    p = tmp_path / "micro.txt"
    p.write_text(MICRO)
    assert main(["collective", "--micro", str(p), "-g", "16"]) == 0
    out = capsys.readouterr().out
    assert out.count("all_reduce_1M") == 1 and out.count("mixed") == 2


@pytest.mark.parametrize("argv,msg", [
    (["collective", "--op", "gossip"], "--op: unknown collective"),
    (["collective", "-g", "16", "-a", "nvls", "-e", "1M"], "one NVLink domain"),
    (["collective", "-g", "16", "--ranks", "17"], "--ranks 17"),
    (["collective", "-g", "16", "--servers", "2"], "--servers needs --ranks"),
    (["collective", "-b", "2G", "-e", "1G"], "minbytes <= maxbytes"),
    (["collective", "-a", "bogus", "-e", "1M"], "unknown algorithm 'bogus'"),
    (["collective", "--png", "/nonexistent-dir/x.png", "-e", "1M"], "--png /nonexistent-dir/x.png: cannot write"),
    (["collective", "--micro", "/nonexistent-dir/m.txt"], "/nonexistent-dir/m.txt: cannot read workload file"),
])
def test_collective_errors(argv, msg, capsys):
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert msg in cap.err and cap.err.count("\n") == 1
    assert cap.out == ""     # nothing printed before the error (no half table)


def test_collective_on_simai_topology_file(tmp_path, capsys):
    import topo

    path = tmp_path / "fabric.txt"
    topo.write_simai_topology(topo.build("spectrum-x", gpus=16), path)
    assert main(["collective", "-t", str(path), "--op", "reduce_scatter", "-b", "16M", "-e", "16M",
                 "--backend", "flow"]) == 0
    out = capsys.readouterr().out
    assert "group of 16 GPUs over 2 servers" in out and "reduce_scatter" in out
    assert main(["collective", "-t", str(path), "-g", "8"]) == 2
    assert "do not apply to a topology file" in capsys.readouterr().err
