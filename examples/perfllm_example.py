"""PerfLLM-style API end to end (the seed documents' workflow, on clustersim).

Run from the repository root:  python examples/perfllm_example.py [--quick] [--model F --strategy F --system F]
Reads that tool's JSON model / strategy / system files (default: examples/perfllm_configs/), estimates one
iteration, prints the memory and cost analyses, then searches plans with recompute and writes
ranked.csv, rejected_families.csv and pareto.png under examples/out/search_llama3_70b/ (or --dump).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sim.analysis.perfllm import PerfLLM
from sim.errors import SimError
from workload_gen.errors import WorkloadError

HERE = Path(__file__).resolve().parent
CFG = HERE / "perfllm_configs"
GiB = 1024 ** 3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="smaller search space (a few seconds)")
    ap.add_argument("--dump", default=str(HERE / "out" / "search_llama3_70b"))
    ap.add_argument("--model", default=str(CFG / "model_llama3_70b.json"), help="model config file")
    ap.add_argument("--strategy", default=str(CFG / "strategy_llama3_70b_tp8_pp4_cp2.json"), help="strategy file")
    ap.add_argument("--system", default=str(CFG / "system_h100.json"), help="system config file")
    args = ap.parse_args()

    perf_model = PerfLLM()
    perf_model.configure(strategy_config=args.strategy, model_config=args.model, system_config=args.system)
    perf_model.run_estimate()            # one training iteration
    mem_result = perf_model.analysis_mem()
    cost_result = perf_model.analysis_cost()

    print("== memory (per GPU) ==")
    for stage in ("first_stage", "last_stage"):
        r = mem_result[stage]
        mm = r["model_mem_bytes"]
        print(f"{stage:<12} weights {mm['weight_bytes'] / GiB:6.2f} GiB  grads {mm['grad_bytes'] / GiB:6.2f} GiB  "
              f"optim {mm['optimizer_bytes'] / GiB:6.2f} GiB  act/mb {r['fwd_activation_cache_per_micro_batch_bytes'] / GiB:5.2f} GiB  "
              f"act in 1F1B {r['peak_activation_mem_in_1F1B_bytes'] / GiB:6.2f} GiB  peak {r['peak_mem_bytes'] / GiB:6.2f} GiB  "
              f"reserved {r['peak_mem_with_reserved_bytes'] / GiB:6.2f} GiB  at {r['peak_path']}")
    print("== cost ==")
    for k in ("duration_time_per_iter_s", "chunk_time_s", "all_tokens_per_iter",
              "throughput_per_accelerator_tokens_per_s", "mfu_6nd_with_attn", "mfu", "hfu"):
        print(f"{k:<42} {cost_result[k]:.6g}")
    print("breakdown_result", json.dumps({k: round(v, 4) for k, v in cost_result["breakdown_result"].items()}))

    all_search_result: list = []
    best = perf_model.search_best_parallel_strategy_with_recompute(
        world_size=1024, gmi_error=6, micro_batch_size=1, global_batch_size=1024,
        all_search_result=all_search_result, tp_search_list=[2, 4, 8] if not args.quick else [4, 8],
        pp_search_list=None if not args.quick else [4, 8], cp_search_list=None if not args.quick else [1, 2],
        recompute_search_type=["no_recompute", "full_block", "selective_recompute"],
        use_reserved_memory=True, dump_path=args.dump)
    print("== search ==")
    print(f"evaluated {best['evaluated']} plans ({best['feasible_plans']} fit) in {best['elapsed_s']:.1f} s")
    print(f"best: {best['best_plan']}  {best['duration_time_per_iter_s']:.3f} s/iter  "
          f"MFU {float(best['mfu_6nd_with_attn']):.1%}  peak {best['peak_mem_with_reserved_bytes'] / GiB:.1f} GiB")
    print(f"wrote {args.dump}/ranked.csv, rejected_families.csv, pareto.png")


if __name__ == "__main__":
    try:
        main()
    except (SimError, WorkloadError) as exc:  # bad config files: one line naming file and key
        print(f"perfllm_example: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except BrokenPipeError:  # piped into `head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        sys.exit(0)
