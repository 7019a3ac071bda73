"""Benchmarks of the training-step simulator (issue 6). Each case prints wall time and peak RSS.

    python benchmarks/bench_sim.py            # all cases
    python benchmarks/bench_sim.py a c        # cases whose name contains "a" or "c"... use full names:
    python benchmarks/bench_sim.py gpt7b moe
    python benchmarks/bench_sim.py simai     # the SimAI example files, analytical (issue 16)

Targets on the 2-core reference machine: (a) <= 10 s, (b) <= 2 s, (c) <= 30 s, (d) <= 5 min and <= 8 GB.
Times cover workload generation, topology build, compute lookup and the simulation of one iteration.

SimAI example files with the analytical backend (issue 16 targets: MoE 9,216 GPUs <= 0.3 s and AICB
GPT-7B/128 <= 0.1 s of simulation, whole process <= 1 s each; microAllReduce whole process <= 0.6 s):
- simai_*_analytical: run_job in a fresh process (reading, topology, compute lookup, simulation; no
  trace: the arithmetic fast path, sim.fastpath);
- simai_*_after_start: the same run_job timed after start-up (imports and the shipped GPU table loaded
  by a run of the micro file first); the case's own wall also counts that first run;
- simai_*_process / simai_*_process_bare: the whole `clustersim run -w FILE -n analytical -o DIR -q`
  command in a subprocess (interpreter start, imports, all outputs / --no-trace --no-charts; the
  packages' bytecode compiled first, as `pip install .` does); wall and the subprocess's peak RSS;
- simai_*_simai_bin: SimAI's own analytical binary on the same file, when SIMAI_BIN names one built
  by ../shared/tools/simai-analytical/build.sh (skipped with a note otherwise).
"""

from __future__ import annotations

import math
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from harness import run_cases  # noqa: E402

# Imported once here (process start-up, ~0.4 s), not inside the timed cases.
import netsim  # noqa: E402,F401
import sim.commands  # noqa: E402,F401
import topo  # noqa: E402,F401
import workload_gen  # noqa: E402,F401

SHARED = Path(__file__).resolve().parents[2] / "shared"


def _run(job: dict) -> str:
    from sim.commands import run_job
    rep = run_job(job)
    m = rep.meta
    mfu = f"{100 * rep.mfu:.1f}%" if math.isfinite(rep.mfu) else "n/a"   # SimAI files carry no FLOPs
    return (f"iteration {rep.iteration_time_s:.4f} s, MFU {mfu}, "
            f"{m['network_collectives']} net / {m['estimated_collectives']} estimated collectives")


def case_a_gpt7b_128() -> str:
    """(a) AICB -m 7, 128 GPUs, TP 4, DP 32, GA 8, seq 4096, Spectrum-X 400 Gb/s, flow."""
    return _run({"model": "aicb-7", "plan": {"tp": 4, "dp": 32, "global_batch_size": 256, "micro_batch_size": 1,
                                             "seq_length": 4096, "sequence_parallel": True,
                                             "distributed_optimizer": True},
                 "fabric": "spectrum-x:nic_bandwidth_Bps=400Gbps", "network": "flow"})


def case_b_moe_9216() -> str:
    """(b) SimAI's 9,216-GPU MoE example file (TP 2, EP 16, PP 12, GA 24), analytical."""
    return _run({"workload": str(SHARED / "data" / "simai_examples" / "workload_analytical.txt"),
                 "network": "analytical"})


def case_c_gpt3_1024() -> str:
    """(c) GPT-3 175B, 1,024 GPUs, TP 8, PP 8, DP 16 (GBS 1536, 96 micro-batches), flow."""
    return _run({"model": "gpt3-175b", "plan": {"tp": 8, "pp": 8, "dp": 16, "global_batch_size": 1536,
                                                "micro_batch_size": 1, "seq_length": 2048,
                                                "sequence_parallel": True, "distributed_optimizer": True},
                 "fabric": "spectrum-x", "network": "flow"})


def case_d_llama405b_16384() -> str:
    """(d) Llama-3.1-405B, 16,384 GPUs, TP 8, PP 16, DP 128 (GBS 2048, 16 micro-batches), flow."""
    return _run({"model": "llama3.1-405b", "plan": {"tp": 8, "pp": 16, "dp": 128, "global_batch_size": 2048,
                                                    "micro_batch_size": 1, "seq_length": 8192,
                                                    "sequence_parallel": True, "distributed_optimizer": True,
                                                    "num_layers_first_stage": 7, "num_layers_last_stage": 7},
                 "fabric": "multi-pod", "network": "flow"})


SIMAI_FILES = {"micro": "microAllReduce.txt", "gpt7b": "aicb_gpt7b_128gpu_tp4_ga8.txt",
               "moe": "workload_analytical.txt"}


def _simai_file(key: str) -> str:
    return str(SHARED / "data" / "simai_examples" / SIMAI_FILES[key])


def _analytical(key: str) -> str:
    return _run({"workload": _simai_file(key), "network": "analytical"})


def _after_start(key: str) -> str:
    """run_job on the file after start-up: the modules a SimAI analytical run imports (numpy, the
    packages) and the shipped GPU table are loaded first, by a run of the 8-GPU micro file, and only
    the second run_job is timed (the acceptance's "simulation time, excluding interpreter start")."""
    from sim.commands import run_job
    run_job({"workload": _simai_file("micro"), "network": "analytical"})
    t0 = time.perf_counter()
    rep = run_job({"workload": _simai_file(key), "network": "analytical"})
    wall = time.perf_counter() - t0
    return f"simulation after start-up {wall:.3f} s, iteration {rep.iteration_time_s:.4f} s"


def _process(key: str, bare: bool) -> str:
    """The whole CLI command in a subprocess: its wall time and peak RSS. The packages' bytecode is
    compiled first, as `pip install .` (the README's Quickstart) does: an editable install in an
    environment with PYTHONDONTWRITEBYTECODE=1 (this machine's) recompiles every module on each run,
    about 0.1-0.2 s more."""
    _compile_packages()
    with tempfile.TemporaryDirectory(prefix="bench-sim-") as tmp:
        cmd = [sys.executable, "-m", "sim.cli", "run", "-w", _simai_file(key), "-n", "analytical",
               "-o", str(Path(tmp) / "out"), "-q"] + (["--no-trace", "--no-charts"] if bare else [])
        t0 = time.perf_counter()
        done = subprocess.run(cmd, capture_output=True, text=True)
        wall = time.perf_counter() - t0
    if done.returncode != 0:
        return f"FAILED rc {done.returncode}: {done.stderr.strip().splitlines()[-1:]}"
    rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024.0
    simulated = next((ln for ln in done.stdout.splitlines() if ln.startswith("simulated in")), "")
    return f"whole process {wall:.3f} s, {rss:.0f} MB; {simulated.split(';')[0]}"


def _compile_packages() -> None:
    import compileall
    root = Path(__file__).resolve().parents[1]
    for pkg in ("sim", "netsim", "topo", "workload_gen", "compute_db"):
        compileall.compile_dir(str(root / pkg), quiet=1)


def _simai_bin(key: str) -> str:
    """SimAI's analytical binary (SIMAI_BIN) on the same file: wall time of the process."""
    binary = os.environ.get("SIMAI_BIN")
    if not binary:
        return "skipped: set SIMAI_BIN to a SimAI_analytical built by ../shared/tools/simai-analytical/build.sh"
    path = _simai_file(key)
    with open(path) as fh:
        head = fh.readline().split()
    gpus = head[head.index("all_gpus:") + 1] if "all_gpus:" in head else "8"
    run_dir = Path(os.path.abspath(binary)).parent.parent   # build.sh DIR (not the link target): SimAI reads and writes relative to it
    cmd = [binary, "-w", path, "-g", gpus, "-g_p_s", "8", "-r", f"bench-{key}-"]
    if key == "moe":     # the README's command for its MoE example
        cmd += ["-nv", "360", "-nic", "48.5", "-n_p_s", "8"]
    t0 = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=run_dir)
    wall = time.perf_counter() - t0
    return f"SimAI whole process {wall:.3f} s (rc {done.returncode}); {_simai_total(run_dir, key)}"


def _simai_total(run_dir: Path, key: str) -> str:
    """SimAI's iteration time from the results/<prefix>EndToEnd.csv it wrote (microseconds)."""
    try:
        rows = (run_dir / "results" / f"bench-{key}-EndToEnd.csv").read_text().splitlines()
        head = [c.strip() for c in rows[0].split(",")]
        total_us = float(rows[1].split(",")[head.index("Total time")])
    except (OSError, IndexError, ValueError):
        return "no EndToEnd.csv"
    return f"SimAI iteration {total_us / 1e6:.4f} s"


def _simai_cases() -> dict:
    cases = {}
    for key in SIMAI_FILES:
        cases[f"simai_{key}_analytical"] = globals()[f"case_simai_{key}"]
        cases[f"simai_{key}_after_start"] = globals()[f"case_simai_{key}_after_start"]
        cases[f"simai_{key}_process"] = globals()[f"case_simai_{key}_process"]
        cases[f"simai_{key}_process_bare"] = globals()[f"case_simai_{key}_process_bare"]
        cases[f"simai_{key}_simai_bin"] = globals()[f"case_simai_{key}_bin"]
    return cases


# module-level zero-argument cases (the harness runs them in spawned processes)
def case_simai_micro() -> str:
    return _analytical("micro")


def case_simai_gpt7b() -> str:
    return _analytical("gpt7b")


def case_simai_moe() -> str:
    return _analytical("moe")


def case_simai_micro_after_start() -> str:
    return _after_start("micro")


def case_simai_gpt7b_after_start() -> str:
    return _after_start("gpt7b")


def case_simai_moe_after_start() -> str:
    return _after_start("moe")


def case_simai_micro_process() -> str:
    return _process("micro", False)


def case_simai_gpt7b_process() -> str:
    return _process("gpt7b", False)


def case_simai_moe_process() -> str:
    return _process("moe", False)


def case_simai_micro_process_bare() -> str:
    return _process("micro", True)


def case_simai_gpt7b_process_bare() -> str:
    return _process("gpt7b", True)


def case_simai_moe_process_bare() -> str:
    return _process("moe", True)


def case_simai_micro_bin() -> str:
    return _simai_bin("micro")


def case_simai_gpt7b_bin() -> str:
    return _simai_bin("gpt7b")


def case_simai_moe_bin() -> str:
    return _simai_bin("moe")


# ---------------------------------------------------------------- flow backend scaling (issue 16)
# Targets: GPT-3 175B at 16,384 GPUs <= 10 s with a fitted exponent of wall vs world size (64 -> 16,384)
# <= 0.3; Llama-3.1-405B / 16,384 <= 10 s and <= 1 GB; SimAI's MoE 9,216 file (flow) <= 60 s; MT-NLG 530B
# and the 1T model <= 20 s each (flow). Run `python benchmarks/bench_sim.py gpt3_scaling` to get the
# exponent printed after the series. The MoE flow case runs only when named (`moe_9216gpu_flow`; about
# 35 s with the EP quotient of sim.ep_symmetry, 12 minutes without it).
GPT3_SERIES = (64, 1024, 4096, 16384)


def _gpt3_175b(world: int) -> str:
    """GPT-3 175B, TP 8, PP 8, DP world/64, 96 micro-batches per replica (GBS 96 x DP), flow on the
    default fabric (Spectrum-X up to 4,096 GPUs, multi-pod above)."""
    dp = world // 64
    return _run({"model": "gpt3-175b", "plan": {"tp": 8, "pp": 8, "dp": dp, "global_batch_size": 96 * dp,
                                                "micro_batch_size": 1, "seq_length": 2048,
                                                "sequence_parallel": True, "distributed_optimizer": True},
                 "fabric": None, "network": "flow"})


def case_gpt3_64() -> str:
    return _gpt3_175b(64)


def case_gpt3_1024() -> str:
    return _gpt3_175b(1024)


def case_gpt3_4096() -> str:
    return _gpt3_175b(4096)


def case_gpt3_16384() -> str:
    return _gpt3_175b(16384)


def case_moe_9216_flow() -> str:
    """SimAI's 9,216-GPU MoE example file with the flow backend."""
    return _run({"workload": _simai_file("moe"), "network": "flow"})


def case_mtnlg_530b() -> str:
    """MT-NLG 530B: 105 layers, hidden 20480, 128 heads, TP 8, PP 35, 2,520 A100, GBS 2,520, seq 2048, flow."""
    return _run({"model": "mt-nlg-530b",
                 "plan": {"tp": 8, "pp": 35, "dp": 9, "global_batch_size": 2520, "micro_batch_size": 1,
                          "seq_length": 2048, "sequence_parallel": True, "distributed_optimizer": True},
                 "gpu": "A100", "fabric": None, "network": "flow"})


def case_1t() -> str:
    """1T model: 128 layers, hidden 25600, 160 heads, TP 8, PP 64, 3,072 A100, GBS 3,072, seq 2048, flow."""
    return _run({"model": "gpt-1t",
                 "plan": {"tp": 8, "pp": 64, "dp": 6, "global_batch_size": 3072, "micro_batch_size": 1,
                          "seq_length": 2048, "sequence_parallel": True, "distributed_optimizer": True},
                 "gpu": "A100", "fabric": None, "network": "flow"})


def _fit_exponent(worlds, walls) -> float:
    """Least-squares slope of log(wall) against log(world size)."""
    xs = [math.log(w) for w in worlds]
    ys = [math.log(t) for t in walls]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def _gpt3_scaling() -> None:
    from harness import run_case
    walls = [run_case(f"gpt3_scaling_{w}gpu_flow", globals()[f"case_gpt3_{w}"])[0] for w in GPT3_SERIES]
    print(f"gpt3_scaling fitted exponent of wall vs world size ({GPT3_SERIES[0]} -> {GPT3_SERIES[-1]}): "
          f"{_fit_exponent(GPT3_SERIES, walls):.3f} (target <= 0.3)", flush=True)


if __name__ == "__main__":
    if any("gpt3_scaling" in a for a in sys.argv[1:]) or len(sys.argv) == 1:
        _gpt3_scaling()
    run_cases({"a_gpt7b_128gpu_flow": case_a_gpt7b_128, "b_moe_9216gpu_analytical": case_b_moe_9216,
               "c_gpt3_175b_1024gpu_flow": case_c_gpt3_1024, "d_llama405b_16384gpu_flow": case_d_llama405b_16384,
               "mtnlg_530b_2520gpu_flow": case_mtnlg_530b, "gpt_1t_3072gpu_flow": case_1t,
               **_simai_cases()})
    if any("moe_9216gpu_flow" in a for a in sys.argv[1:]):
        # only when named (docs/sim.md, Benchmarks)
        run_cases({"moe_9216gpu_flow": case_moe_9216_flow})
