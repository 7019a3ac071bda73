#!/bin/sh
# AICB's scripts/megatron_workload_with_aiob.sh command line (AICB's flags and defaults), e.g.
#   sh ./scripts/megatron_workload_with_aiob.sh -m 7 --world_size 4096 --tensor_model_parallel_size 2 \
#       --pipeline_model_parallel 1 --frame Megatron --global_batch 8192 --micro_batch 1 --seq_length 4096 \
#       --swiglu --use_flash_attn --aiob_enable [--comp_filepath workload/aiob_inputs/Example.txt]
# Writes the SimAI workload to results/workload/<name>.txt. --aiob_enable: kernel times from compute_db
# (--gpu_type, default H100) instead of PLACEHOLDER roofline times; --comp_filepath FILE: AIOB's measured
# forward times (backward scaled by the same ratio; a missing file is an error). AICB's defaults: world 32,
# TP 8, global batch 1024, micro-batch 1, seq 4096, -m 13; the TP you give is always the TP used.
# POSIX sh: works under sh and bash.
if command -v clustersim >/dev/null 2>&1; then
  exec clustersim aicb --frame Megatron "$@"
fi
exec python3 -m sim.cli aicb --frame Megatron "$@"
