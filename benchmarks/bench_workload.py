"""Workload generation speed and memory (acceptance: Llama-3.1-405B, 16,384 GPUs, < 2 s, < 300 MB).

Run: python benchmarks/bench_workload.py [case-substring ...]
Peak RSS is the whole child process (Python interpreter and imports included).
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import run_cases  # noqa: E402


def _chunk_ops(w) -> int:
    """Forward + backward ops of all chunk programs of a workload."""
    return sum(len(c.forward) + len(c.backward) for s in w.stages for c in s.chunks)


def llama405b_16k() -> str:
    from workload_gen import ParallelPlan, generate
    from workload_gen.zoo import get_model
    # 126 layers over PP 16: 7 on the first and last stage, 8 on the 14 others (as Meta's recipe)
    plan = ParallelPlan(world_size=16384, tp=8, pp=16, cp=1, sequence_parallel=True, micro_batch_size=1,
                        seq_length=8192, global_batch_size=2048, distributed_optimizer=True,
                        num_layers_first_stage=7, num_layers_last_stage=7)
    w = generate(get_model("llama3.1-405b"), plan)
    return f"dp {plan.dp}, {w.num_microbatches} micro-batches, {_chunk_ops(w)} ops"


def deepseek_v3_2048() -> str:
    from workload_gen import ParallelPlan, generate
    from workload_gen.zoo import get_model
    plan = ParallelPlan(world_size=2048, tp=2, pp=16, ep=64, vpp=1, sequence_parallel=True, micro_batch_size=1,
                        seq_length=4096, global_batch_size=4096, distributed_optimizer=True,
                        num_layers_first_stage=4, num_layers_last_stage=1)
    return f"{_chunk_ops(generate(get_model('deepseek-v3'), plan))} ops"


def gpt3_simai_export() -> str:
    import tempfile

    from workload_gen import ParallelPlan, generate
    from workload_gen.simai_workload import write_simai_workload
    from workload_gen.zoo import get_model
    plan = ParallelPlan(world_size=1024, tp=8, pp=8, sequence_parallel=True, micro_batch_size=1, seq_length=2048,
                        global_batch_size=1536, distributed_optimizer=True)
    w = generate(get_model("gpt3-175b"), plan)
    with tempfile.TemporaryDirectory() as d:
        write_simai_workload(w, Path(d) / "w.txt")
        size = (Path(d) / "w.txt").stat().st_size
    return f"SimAI file {size / 1e6:.1f} MB"


def _simai_unrolled(rows_per_mb: int, ga: int) -> str:
    """Read a SimAI file whose gradient-accumulation loop is unrolled (ga x rows_per_mb layer rows):
    the reader must stay linear in the row count (10k vs 40k rows: about 4x, not 16x)."""
    import tempfile

    from workload_gen.simai_workload import read_simai_workload
    head = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD model_parallel_NPU_group: 4 ep: 1 pp: 1 vpp: 1 ga: "
            f"{ga} all_gpus: 128 checkpoints: 0 checkpoint_initiates: 0\n")
    rows = ["grad_gather\t-1\t1\tNONE\t0\t1\tNONE\t0\t1\tALLGATHER\t3261071360\t100"]
    for g in range(ga):
        rows += [f"layer{i % 7}\t-1\t{1000 + i}\tALLGATHER\t1048576\t{900 + g}\tREDUCESCATTER\t1048576\t800"
                 "\tNONE\t0\t100" for i in range(rows_per_mb)]
    rows.append("optimizer1\t-1\t5\tNONE\t0\t1\tNONE\t0\t1\tNONE\t0\t100")
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "w.txt"
        p.write_text(head + f"{len(rows)}\n" + "\n".join(rows) + "\n")
        w = read_simai_workload(p)
    return f"{len(rows)} rows, ga unrolled: {w.meta['ga_unrolled_in_file']}"


def simai_read_10k() -> str:
    return _simai_unrolled(1250, 8)


def simai_read_40k() -> str:
    return _simai_unrolled(5000, 8)


if __name__ == "__main__":
    run_cases({
        "generate llama3.1-405b 16384 GPUs tp8 pp16 dp128": llama405b_16k,
        "generate deepseek-v3 2048 GPUs tp2 pp16 ep64": deepseek_v3_2048,
        "generate+export SimAI gpt3-175b 1024 GPUs": gpt3_simai_export,
        "read SimAI unrolled 10k rows": simai_read_10k,
        "read SimAI unrolled 40k rows": simai_read_40k,
    })
