"""SimAI users' command lines through scripts/ (SimAI_analytical, SimAI_simulator, run.sh) under sh and bash,
SimAI's flags with SimAI's meanings (-nv / -nic as bus bandwidths, -busbw, -c SimAI.conf, AS_*), one-line
notes and refusals, SimAI topology file names, the SimAI workload reader's header checks and linear time,
and the model -> SimAI file (AIOB-timed) -> run round trip."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from sim.cli import main
from sim.errors import SimError
from workload_gen.errors import ConfigFileError

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts"
SHELLS = [s for s in ("sh", "bash") if shutil.which(s)]
ANALYTICAL_LINE = ("./bin/SimAI_analytical -w ./example/workload_analytical.txt -g 9216 -nv 360 -nic 48.5 "
                   "-n_p_s 8 -g_p_s 8 -r example-")
SIMULATOR_LINE = ("AS_SEND_LAT=3 AS_NVLS_ENABLE=1 ./bin/SimAI_simulator -t 16 -w ./example/microAllReduce.txt "
                  "-n ./Spectrum-X_128g_8gps_100Gbps_A100 -c astra-sim-alibabacloud/inputs/config/SimAI.conf")


def _simai_tree(tmp_path: Path, shared_dir: Path) -> Path:
    """A SimAI checkout's layout: bin/ (our wrappers, linked), example/, a topology, SimAI.conf."""
    (tmp_path / "bin").mkdir()
    for name in ("SimAI_analytical", "SimAI_simulator"):
        (tmp_path / "bin" / name).symlink_to(SCRIPTS / name)
    shutil.copytree(shared_dir / "data" / "simai_examples", tmp_path / "example")
    shutil.copy(shared_dir / "data" / "simai_topologies" / "Spectrum-X_128g_8gps_100Gbps_A100", tmp_path)
    conf = tmp_path / "astra-sim-alibabacloud" / "inputs" / "config" / "SimAI.conf"
    conf.parent.mkdir(parents=True)
    conf.write_bytes(_simai_conf_bytes(shared_dir))
    return tmp_path


def _simai_conf_bytes(shared_dir: Path) -> bytes:
    """SimAI v1.6's own SimAI.conf, from the SimAI source archive in ../shared/tools."""
    tgz = shared_dir / "tools" / "simai-analytical" / "simai-v1.6-analytical.tar.gz"
    with tarfile.open(tgz) as tf:
        return tf.extractfile("astra-sim-alibabacloud/inputs/config/SimAI.conf").read()


def _sh(shell: str, line: str, cwd: Path, env_extra: dict | None = None):
    if shutil.which("clustersim") is None:
        pytest.fail("the clustersim console script is not installed (pip install -e .)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("AS_")}
    env.update(env_extra or {})
    return subprocess.run([shell, "-c", line], cwd=cwd, capture_output=True, text=True, timeout=300, env=env)


def _total_us(csv_path: Path) -> int:
    return int(csv_path.read_text().splitlines()[1].rsplit(",", 1)[1])


@pytest.mark.slow
@pytest.mark.parametrize("shell", SHELLS)
def test_simai_readme_analytical_line_unchanged(shell, shared_dir, tmp_path, capsys):
    root = _simai_tree(tmp_path, shared_dir)
    r = _sh(shell, ANALYTICAL_LINE, root)
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr and "invalid choice" not in r.stderr
    e2e = root / "results" / "example" / "EndToEnd.csv"
    assert e2e.read_text().splitlines()[1].startswith("example-, ")     # SimAI's "File name" column
    # our answer: the same job through `clustersim run` with the flags spelled out
    f = str(root / "example" / "workload_analytical.txt")
    assert main(["run", "-w", f, "-n", "analytical", "--topology", "multi-pod:gpus_per_server=8", "--gpus", "9216",
                 "--nvlink-busbw", "360", "--nic-busbw", "48.5", "--nics-per-server", "8", "-o", "-", "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert _total_us(e2e) == pytest.approx(direct * 1e6, abs=1)


@pytest.mark.parametrize("shell", SHELLS)
def test_simai_readme_simulator_line_unchanged(shell, shared_dir, tmp_path, capsys):
    root = _simai_tree(tmp_path, shared_dir)
    r = _sh(shell, SIMULATOR_LINE, root)
    assert r.returncode == 0, r.stderr
    err = r.stderr.splitlines()
    assert "Traceback" not in r.stderr
    for needle in ("-t 16: thread count: ignored", "AS_SEND_LAT=3: ignored", "AS_NVLS_ENABLE=1: ignored",
                   "CC_MODE", "PACKET_PAYLOAD_SIZE", "FLOW_FILE", "SIMULATOR_STOP_TIME"):
        assert sum(needle in ln for ln in err) == 1, (needle, err)
    assert all(": note: " in ln for ln in err)
    e2e = root / "results" / "SimAI" / "EndToEnd.csv"
    assert main(["run", "-w", str(root / "example" / "microAllReduce.txt"), "-t",
                 str(root / "Spectrum-X_128g_8gps_100Gbps_A100"), "-o", "-", "--json"]) == 0
    direct = json.loads(capsys.readouterr().out)["iteration_time_s"]
    assert _total_us(e2e) == pytest.approx(direct * 1e6, abs=1)


@pytest.mark.parametrize("shell", SHELLS)
def test_run_sh_is_posix_and_takes_simai_and_clustersim_flags(shell, shared_dir, tmp_path):
    f = shared_dir / "data" / "simai_examples" / "microAllReduce.txt"
    r = _sh(shell, f"{SCRIPTS / 'run.sh'} -w {f} -g_type A100 -nv 200 -dp_o 0.5 -q --no-charts -o out", tmp_path)
    assert r.returncode == 0, r.stderr
    assert r.stderr.strip() == ("run.sh: note: -dp_o 0.5: overlap ratio: ignored (clustersim simulates the overlap of "
                                "DP communication with compute)")
    assert (tmp_path / "out" / "EndToEnd.csv").is_file()
    r = _sh(shell, f"{SCRIPTS / 'run.sh'} --help", tmp_path)
    assert r.returncode == 0 and "SimAI flags translated" in r.stdout


def _micro(tmp_path: Path, size: int, world: int = 8) -> str:
    from workload_gen.simai_workload import write_simai_micro
    p = tmp_path / f"micro_{size}.txt"
    write_simai_micro(p, [size], world_size=world)
    return str(p)


def _iteration_s(argv, capsys) -> float:
    assert main(argv + ["-o", "-", "--json"]) == 0
    return json.loads(capsys.readouterr().out)["iteration_time_s"]


@pytest.mark.parametrize("mode", ["analytical", "simulator"])
def test_nv_and_nic_are_bus_bandwidths(mode, tmp_path, capsys):
    """SimAI's -nv / -nic are the bus bandwidths a large ring all-reduce reaches: time = S 2(n-1)/n / busbw."""
    size = 4 << 30
    f = _micro(tmp_path, size)
    bus = size * 2 * 7 / 8
    for nv in (150.0, 300.0):    # 8 x A100 in one server (A100: no NVLS), NVLink 300 GB/s line rate
        t = _iteration_s(["simai", mode, "-w", f, "-g_type", "A100", "-nv", str(nv)], capsys)
        assert t == pytest.approx(bus / (nv * 1e9), rel=0.03)
    for nic in (24.0, 48.5):     # 8 servers of 1 GPU: the ring crosses the network only
        t = _iteration_s(["simai", mode, "-w", f, "-g_p_s", "1", "-nic", str(nic)], capsys)
        assert t == pytest.approx(bus / (nic * 1e9), rel=0.03)


def test_network_settings_efficiencies():
    from sim.inputs import make_topology
    from sim.simai_compat import network_settings
    t = make_topology("spectrum-x", gpus=16)          # H100: NVLink 450 GB/s per direction, NIC 400 Gb/s
    cal, opts = network_settings({"nvlink_busbw": 360.0, "nic_busbw": 48.5}, t, None)
    assert cal.nvlink_efficiency == pytest.approx(360 / 450) and cal.network_efficiency == pytest.approx(48.5 / 50)
    assert opts is None
    cal, _ = network_settings({"nic_busbw": 48.5, "nics_per_server": 4}, t, None)    # two GPUs share a NIC
    assert cal.network_efficiency == pytest.approx(48.5 * 4 / 8 / 50)
    _, opts = network_settings({"pxn": True}, t, None)
    assert opts == {"pxn": True}
    with pytest.raises(SimError, match="above the topology's NVLink line rate 450 GB/s"):
        network_settings({"nvlink_busbw": 500.0}, t, None)
    with pytest.raises(SimError, match="above the topology's 50 GB/s per GPU"):
        network_settings({"nic_busbw": 60.0}, t, None)


def test_busbw_file_is_fitted(tmp_path):
    from sim.inputs import make_topology
    from sim.simai_compat import network_settings
    p = tmp_path / "busbw.yaml"   # SimAI's example busbw file layout (simai_formats.md §8)
    p.write_text("test\nTP:\n  allreduce,: 300\n  allgather,: 280\n  reducescatter,: 280\n  alltoall,: 230\n"
                 "DP:\n  allreduce,: null\n  allgather,: 380\n  reducescatter,: 380\n  alltoall,: null\n"
                 "EP:\n  allreduce,: null\n  allgather,: 45\n  reducescatter,: 45\n  alltoall,: 80\nPP:\n"
                 "  busbw: 47.5\n")
    t = make_topology("spectrum-x", gpus=16)
    cal, _ = network_settings({"simai_busbw": str(p)}, t, None)
    assert cal is not None and cal.constants()          # fitted constants replace netsim's
    cal2, _ = network_settings({"simai_busbw": str(p), "nvlink_busbw": 360.0}, t, None)
    assert cal2.nvlink_efficiency == pytest.approx(0.8)  # -nv wins for NVLink
    bad = tmp_path / "bad.yaml"
    bad.write_text("x\nTP:\n  allreduce,: fast\n")
    assert main(["simai", "analytical", "-w", _micro(tmp_path, 1 << 20), "-busbw", str(bad), "-o", "-"]) == 2


@pytest.mark.parametrize("text,msg", [
    ("CC_MODE abc\n", ":1: CC_MODE: expected numbers"),
    ("KMAX_MAP 2 25000000000 400\n", ":1: KMAX_MAP: expected N then N"),
    ("LINK_DOWN 1000 3 4\n", ":1: LINK_DOWN 1000 3 4: link failures are not modelled"),
    ("ENABLE_QCN 1\nENABLE_QCN 0\n", ":2: ENABLE_QCN given twice"),
    ("rate ai\n", ":1: expected 'KEY value'"),
    ("RATE_AI fast\n", ":1: RATE_AI: expected a rate"),
    ("ERROR_RATE_PER_LINK 2\n", ":1: ERROR_RATE_PER_LINK must be in [0, 1)"),
    ("\n", ":1: no settings"),
])
def test_simai_conf_refused_with_file_line(tmp_path, capsys, text, msg):
    conf = tmp_path / "SimAI.conf"
    conf.write_text(text)
    assert main(["simai", "simulator", "-w", _micro(tmp_path, 1 << 20), "-c", str(conf), "-o", "-"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("clustersim: error: ") and msg in err and "\n" not in err


def test_simai_conf_of_simai_reads_and_binary_is_refused(shared_dir, tmp_path):
    from sim.simai_compat import read_simai_conf
    conf = tmp_path / "SimAI.conf"
    conf.write_bytes(_simai_conf_bytes(shared_dir))
    notes = read_simai_conf(str(conf))
    assert len(notes) == 5 and all(": ignored: " in n for n in notes)
    conf.write_bytes(b"\xff\xfe\x00binary")
    with pytest.raises(SimError, match="not a text file"):
        read_simai_conf(str(conf))
    with pytest.raises(SimError, match="SimAI.conf not found"):
        read_simai_conf(str(tmp_path / "nope.conf"))


def test_every_noted_flag_is_one_line_and_pxn_is_honoured():
    from sim.simai_compat import translate
    argv = ["-w", "x.txt", "-t", "16", "-v", "1", "-nic_t", "cx7", "-l", "ja", "-dp_o", "0.5", "-tp_o", "0.1",
            "-ep_o", "0.2", "-pp_o", "1", "-n_p_s", "8"]
    env = {"AS_SEND_LAT": "3", "AS_NVLS_ENABLE": "1", "AS_PXN_ENABLE": "1", "AS_LOG_LEVEL": "0", "AS_FOO": "1",
           "HOME": "/root"}
    run_argv, notes = translate("analytical", argv, env)
    heads = [n.split(":", 1)[0] for n in notes]
    assert sorted(heads) == sorted(["-t 16", "-v 1", "-nic_t cx7", "-l ja", "-dp_o 0.5", "-tp_o 0.1", "-ep_o 0.2",
                                    "-pp_o 1", "-n_p_s 8",
                                    "AS_SEND_LAT=3", "AS_NVLS_ENABLE=1", "AS_LOG_LEVEL=0", "AS_FOO=1"])
    assert all("\n" not in n for n in notes)
    assert "--pxn" in run_argv and run_argv[run_argv.index("--network") + 1] == "analytical"
    assert run_argv[run_argv.index("--out") + 1] == os.path.join("results", "SimAI")


def test_flags_are_whole_tokens_and_errors_are_one_line(tmp_path, capsys, shared_dir):
    f = _micro(tmp_path, 1 << 20)
    # -nv / -g_type / -g_p_s are never prefix-matched as -n v / -g _type
    assert main(["simai", "analytical", "-w", f, "-nv", "360", "-g_type", "H100", "-g_p_s", "8", "-o", "-"]) == 0
    capsys.readouterr()
    topo = shared_dir / "data" / "simai_topologies" / "Spectrum-X_8g_8gps_400Gbps_H100"
    for argv, msg in [
        (["-w", f, "-nv", "fast"], "argument -nv/--nvlink: invalid float value: 'fast'"),
        (["-w", f, "-nope", "1"], "unrecognized argument -nope (flags are whole tokens)"),
        (["-w", f, "-g_typ", "A100"], "unrecognized argument -g_typ; did you mean -g_type?"),
        (["-w", f, "--nvlinkk", "300"], "unrecognized arguments: --nvlinkk"),
        (["-w", f, "-n", str(tmp_path / "missing")], "topology file not found"),
        (["-w", f, "-n", str(topo), "-g_p_s", "4"], "has 8 GPUs per server"),
        (["-w", f, "-nv", "-3"], "--nvlink-busbw: expected a bus bandwidth in GB/s above 0"),
    ]:
        assert main(["simai", "simulator", *argv, "-o", "-"]) == 2, argv
        err = capsys.readouterr().err.strip()
        assert msg in err and "\n" not in err and "Traceback" not in err, err


def test_simai_topology_file_names_match_the_generator():
    """gen_Topo_Template.py's names: the two non-rail builders and custom dual-ToR rail builders."""
    from topo.templates import build
    assert build("non-rail", gpus=16).name == "No_Rail_Opti_16g_8gps_SingleToR_400Gbps_H100"
    assert build("non-rail", gpus=16, dual_tor=True).name == "No_Rail_Opti_16g_8gps_DualToR_400Gbps_H100"
    assert build("rail-optimized", gpus=16, dual_tor=True).name == "Rail_Opti_16g_8gps_DualToR_SinglePlane_400Gbps_H100"
    assert build("rail-optimized", gpus=16, dual_tor=True, dual_plane=True).name == \
        "Rail_Opti_16g_8gps_DualToR_DualPlane_400Gbps_H100"
    assert build("dcn+", gpus=128).name == "DCN+SingleToR_128g_8gps_400Gbps_H100"
    assert build("dcn+", gpus=128, dual_tor=True).name == "DCN+DualToR_128g_8gps_200Gbps_H100"


# ------------------------------------------------------------------------ SimAI workload reader
_HEAD = "HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: {tp} ep: 1 pp: {pp} vpp: 1 ga: {ga} all_gpus: 8\n"


@pytest.mark.parametrize("tp,pp,ga,line,msg", [
    ("-8", "1", "1", "1 ALLREDUCE 4", ":1: model_parallel_NPU_group: must be between 1 and"),
    ("8", "0", "1", "1 ALLREDUCE 4", ":1: pp: must be between 1 and"),
    ("8", "1", "-2", "1 ALLREDUCE 4", ":1: ga: must be between 1 and"),
    ("8", "1", "1000000000", "1 ALLREDUCE 4", ":1: ga: must be between 1 and 65,536"),
    ("nan", "1", "1", "1 ALLREDUCE 4", ":1: model_parallel_NPU_group: must be an integer (got 'nan')"),
    ("8", "1", "1", "inf ALLREDUCE 4", ":3: forward compute time must be an integer (got 'inf')"),
    ("8", "1", "1", "1e400 ALLREDUCE 4", ":3: forward compute time must be an integer"),
    ("8", "1", "1", "1 ALLREDUCE " + "9" * 400, ":3: fwd comm size must be between 0 and"),
    ("8", "1", "1", "1 ALLREDUCE -4", ":3: fwd comm size must be between 0 and"),
    ("8", "1", "1", "2.5 ALLREDUCE 4", ":3: forward compute time must be an integer (got '2.5')"),
])
def test_simai_header_and_values_out_of_range_are_errors(tmp_path, tp, pp, ga, line, msg):
    from workload_gen.simai_workload import read_simai_workload
    p = tmp_path / "w.txt"
    p.write_text(_HEAD.format(tp=tp, pp=pp, ga=ga) + f"1\nx -1 {line} 1 NONE 0 1 NONE 0 100\n")
    with pytest.raises(ConfigFileError) as e:
        read_simai_workload(p)
    assert msg in str(e.value) and "\n" not in str(e.value)


def _unrolled_file(path: Path, per: int, ga: int) -> None:
    rows = ["grad_gather\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER\t3261071360\t100"]
    for g in range(ga):
        rows += [f"layer{i % 7}\t-1\t{1000 + i}\tALLGATHER\t1048576\t{900 + g}\tREDUCESCATTER\t1048576\t800\tNONE\t0\t100"
                 for i in range(per)]
    rows.append("optimizer1\t-1\t5\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100")
    path.write_text(_HEAD.format(tp=4, pp=1, ga=ga).replace("all_gpus: 8", "all_gpus: 128")
                    + f"{len(rows)}\n" + "\n".join(rows) + "\n")


@pytest.mark.parametrize("per", [1_250, 5_000])
def test_simai_reader_folds_an_unrolled_file(tmp_path, per):
    """A file with the GA loop unrolled (ga x per layer rows) reads as one micro-batch program repeated
    ga times. Its speed (linear in rows) is checked by benchmarks/bench_workload.py "read SimAI"."""
    from workload_gen.simai_workload import read_simai_workload
    p = tmp_path / "w.txt"
    _unrolled_file(p, per, 8)
    w = read_simai_workload(p)
    assert w.meta["ga_unrolled_in_file"] and w.num_microbatches == 8


# ------------------------------------------------------------------------ round trip
_AICB7 = ["-m", "7", "--world_size", "16", "--tensor_model_parallel_size", "4", "--global_batch", "32",
          "--micro_batch", "1", "--seq_length", "4096", "--enable_sequence_parallel", "--use-distributed-optimizer"]
_RUN7 = ["run", "-m", "aicb-7", "--tp", "4", "--world-size", "16", "--global-batch", "32", "--micro-batch", "1",
         "--seq-length", "4096", "--sp", "--use-distributed-optimizer"]


@pytest.mark.slow
def test_round_trip_model_simai_file_with_aiob_run_within_1_percent(tmp_path, capsys):
    f = tmp_path / "w.txt"
    assert main(["aicb", *_AICB7, "--aiob_enable", "--simai", str(f)]) == 0
    capsys.readouterr()
    direct = _iteration_s(_RUN7, capsys)
    via_file = _iteration_s(["run", "-w", str(f)], capsys)
    assert via_file == pytest.approx(direct, rel=0.01)
    # the layer lines (what SimAI reads) carry compute_db's kernel times, not the 400 TFLOP/s placeholder
    from compute_db import open_db
    from workload_gen import generate
    from workload_gen.plan import ParallelPlan
    from workload_gen.zoo import get_model
    w = generate(get_model("aicb-7"), ParallelPlan(world_size=16, tp=4, global_batch_size=32, micro_batch_size=1,
                                                   seq_length=4096, sequence_parallel=True,
                                                   distributed_optimizer=True))
    db = open_db()
    st = w.stages[0]
    ops = [op for c in st.chunks for op in c.forward + c.backward if not op.is_comm]
    per_mb = sum(db.lookup(op, "H100").time_s for op in ops if op.microbatch == "all")
    once = sum(db.lookup(op, "H100").time_s for op in ops if op.microbatch != "all")
    once += sum(db.lookup(op, "H100").time_s for op in st.iteration_start + st.iteration_end if not op.is_comm)
    lines = f.read_text().splitlines()
    n = int(lines[1])
    ns = sum(int(x) for ln in lines[2:2 + n] for x in (ln.split("\t")[2], ln.split("\t")[5], ln.split("\t")[8]))
    expected = per_mb * w.num_microbatches + once
    assert ns * 1e-9 == pytest.approx(expected, rel=0.002)


def test_edited_layer_lines_drop_the_clustersim_section(tmp_path):
    from workload_gen import ModelSpec, ParallelPlan, generate
    from workload_gen.simai_workload import read_simai_workload, write_simai_workload
    m = ModelSpec(name="tiny", num_layers=4, hidden_size=256, num_attention_heads=4, ffn_hidden_size=1024,
                  vocab_size=1000, seq_length=512)
    w = generate(m, ParallelPlan(world_size=8, tp=2, pp=2, global_batch_size=8, seq_length=512))
    p = tmp_path / "w.txt"
    write_simai_workload(w, p)
    back = read_simai_workload(p)
    assert back.plan == w.plan and len(back.stages) == 2 and back.stages[1].chunks[0].forward == \
        w.stages[1].chunks[0].forward          # every stage, op for op (SimAI's lines hold stage 0 only)
    lines = p.read_text().splitlines()
    f = lines[2].split("\t")
    f[2] = str(int(f[2]) + 1000)
    lines[2] = "\t".join(f)
    p.write_text("\n".join(lines) + "\n")
    edited = read_simai_workload(p)
    assert edited.meta["imported_from"] == "simai" and "edited" in edited.meta["warnings"][0]
    lines[-1] = "#clustersim data !!!"
    lines[2] = "\t".join([f[0], f[1], str(int(f[2]) - 1000)] + f[3:])
    p.write_text("\n".join(lines) + "\n")
    with pytest.raises(ConfigFileError, match="section is corrupt"):
        read_simai_workload(p)
