#!/bin/sh
# Generate a DeepSpeed (ZeRO) training workload with AICB's flag names, e.g.
#   scripts/deepspeed_workload.sh -m 13 --world_size 64 --stage 3 --global_batch 256 --micro_batch 1 \
#       --seq_length 2048 --reduce_bucket_size 500000000 --allgather_bucket_size 500000000
# --stage defaults to 1 (AICB's DeepSpeed default is ZeRO-1 too; a --plan-file's zero_stage wins);
# TP is whatever you give (flag or --plan-file), 1 when neither sets it: the script adds no TP flag.
# Writes the SimAI workload to results/workload/ unless --simai/--out/--simai-dir is given.
# For AICB's deepspeed_llama.sh (LLaMA-1 sizes, AICB's defaults) use deepspeed_llama.sh.
# POSIX sh: works under sh and bash.
set -eu
want_default_out=1
count=$#
while [ "$count" -gt 0 ]; do
  arg=$1; shift; count=$((count - 1))
  case "$arg" in
    --frame)
      if [ "$count" -lt 1 ]; then echo "deepspeed_workload.sh: error: --frame: expected a value" >&2; exit 2; fi
      shift; count=$((count - 1)) ;;
    --frame=*) ;;
    --simai|--simai-dir|--out|-o|--simai=*|--simai-dir=*|--out=*) want_default_out=0; set -- "$@" "$arg" ;;
    *) set -- "$@" "$arg" ;;
  esac
done
if [ "$want_default_out" -eq 1 ]; then
  set -- "$@" --simai-dir "results/workload"
fi
if command -v clustersim >/dev/null 2>&1; then
  exec clustersim workload --frame DeepSpeed "$@"
fi
exec python3 -m sim.cli workload --frame DeepSpeed "$@"
