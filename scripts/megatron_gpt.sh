#!/bin/sh
# AICB's scripts/megatron_gpt.sh command line (AICB's flags and defaults), e.g.
#   sh ./scripts/megatron_gpt.sh -m 13 --world_size 8 --tensor_model_parallel_size 8 --pipeline_model_parallel 1 \
#       --frame Megatron --global_batch 2 --micro_batch 1 --seq_length 4096 --swiglu --use_flash_attn --aiob_enable
# AICB runs the job on real GPUs unless --workload_only; clustersim always writes the workload instead
# (results/workload/<name>.txt, a SimAI workload file; simulate it with scripts/run.sh -w FILE).
# --aiob_enable times the file's kernels with compute_db (--gpu_type, default H100), --comp_filepath FILE
# with an AIOB compute file. AICB's defaults: world 32, TP 8, global batch 1024, micro-batch 1, seq 4096,
# -m 13; the TP you give is always the TP used. Flags that change nothing here print one note line each;
# `clustersim aicb --help` lists every flag. POSIX sh: works under sh and bash.
only=0
for arg in "$@"; do
  case "$arg" in --workload_only) only=1 ;; esac
done
if [ "$only" -eq 0 ]; then
  echo "megatron_gpt.sh: note: no --workload_only: AICB would train on GPUs; clustersim writes the workload" >&2
fi
if command -v clustersim >/dev/null 2>&1; then
  exec clustersim aicb --frame Megatron "$@"
fi
exec python3 -m sim.cli aicb --frame Megatron "$@"
