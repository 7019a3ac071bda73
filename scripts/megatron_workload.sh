#!/bin/sh
# Generate a Megatron training workload with AICB's flag names (simai_formats.md §7), e.g.
#   scripts/megatron_workload.sh -m 7 --world_size 4096 --tensor_model_parallel_size 2 \
#       --pipeline_model_parallel 1 --global_batch 8192 --micro_batch 1 --seq_length 4096 --swiglu --use_flash_attn
# Unlike AICB's script, the TP you give is always the TP used. Writes the SimAI workload file to
# results/workload/ (AICB's location) unless --simai/--out/--simai-dir is given; any other
# `clustersim workload` flag is passed through (see `clustersim workload --help`). For AICB's defaults
# and --aiob_enable timing use megatron_workload_with_aiob.sh. POSIX sh: works under sh and bash.
set -eu
frame="Megatron"
want_default_out=1
count=$#
while [ "$count" -gt 0 ]; do
  arg=$1; shift; count=$((count - 1))
  case "$arg" in
    --frame)
      if [ "$count" -lt 1 ]; then echo "megatron_workload.sh: error: --frame: expected a value" >&2; exit 2; fi
      frame=$1; shift; count=$((count - 1)) ;;
    --frame=*) frame=${arg#--frame=} ;;
    --simai|--simai-dir|--out|-o|--simai=*|--simai-dir=*|--out=*) want_default_out=0; set -- "$@" "$arg" ;;
    *) set -- "$@" "$arg" ;;
  esac
done
if [ "$want_default_out" -eq 1 ]; then
  set -- "$@" --simai-dir "results/workload"
fi
if command -v clustersim >/dev/null 2>&1; then
  exec clustersim workload --frame "$frame" "$@"
fi
exec python3 -m sim.cli workload --frame "$frame" "$@"
