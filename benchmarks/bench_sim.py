"""Benchmarks of the training-step simulator (issue 6). Each case prints wall time and peak RSS.

    python benchmarks/bench_sim.py            # all cases
    python benchmarks/bench_sim.py a c        # cases whose name contains "a" or "c"... use full names:
    python benchmarks/bench_sim.py gpt7b moe

Targets on the 2-core reference machine: (a) <= 10 s, (b) <= 2 s, (c) <= 30 s, (d) <= 5 min and <= 8 GB.
Times cover workload generation, topology build, compute lookup and the simulation of one iteration.
"""

from __future__ import annotations

import math
import sys
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


if __name__ == "__main__":
    run_cases({"a_gpt7b_128gpu_flow": case_a_gpt7b_128, "b_moe_9216gpu_analytical": case_b_moe_9216,
               "c_gpt3_175b_1024gpu_flow": case_c_gpt3_1024, "d_llama405b_16384gpu_flow": case_d_llama405b_16384})
