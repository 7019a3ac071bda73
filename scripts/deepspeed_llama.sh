#!/bin/sh
# AICB's scripts/deepspeed_llama.sh command line (AICB's flags and defaults), e.g.
#   sh scripts/deepspeed_llama.sh --zero_stage 3 -m 65 --epoch_num 100 --reduce_bucket_size=1000000000 \
#       --allgather_bucket_size=500000000 --param_persistence_threshold=1000000
# -m 7/13/30/65: LLaMA-1 sizes (AICB's DeepSpeed models). Writes the SimAI workload to
# results/workload/<name>.txt; ZeRO-3 knobs clustersim does not model print one note line each.
# AICB's defaults: world 32, global batch 1024, micro-batch 1, seq 4096, TP 1. POSIX sh: works under sh and bash.
if command -v clustersim >/dev/null 2>&1; then
  exec clustersim aicb --frame DeepSpeed "$@"
fi
exec python3 -m sim.cli aicb --frame DeepSpeed "$@"
