#!/usr/bin/env bash
# Generate a Megatron training workload with AICB's flag names (simai_formats.md §7), e.g.
#   scripts/megatron_workload.sh -m 7 --world_size 4096 --tensor_model_parallel_size 2 \
#       --pipeline_model_parallel 1 --global_batch 8192 --micro_batch 1 --seq_length 4096 --swiglu --use_flash_attn
# Unlike AICB's script, the TP you give is always the TP used. Writes the SimAI workload file to
# results/workload/ (AICB's location) unless --simai/--out/--simai-dir is given; any other
# `clustersim workload` flag is passed through (see `clustersim workload --help`).
set -euo pipefail
frame="Megatron"
args=()
want_default_out=1
while [[ $# -gt 0 ]]; do
  case "$1" in
    --frame)
      if [[ $# -lt 2 ]]; then echo "megatron_workload.sh: error: --frame: expected a value" >&2; exit 2; fi
      frame="$2"; shift 2 ;;
    --frame=*) frame="${1#--frame=}"; shift ;;
    --simai|--simai-dir|--out|-o|--simai=*|--simai-dir=*|--out=*) want_default_out=0; args+=("$1"); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ $want_default_out -eq 1 ]]; then
  args+=(--simai-dir "results/workload")
fi
if command -v clustersim >/dev/null 2>&1; then
  exec clustersim workload --frame "$frame" "${args[@]}"
fi
exec python -m sim.cli workload --frame "$frame" "${args[@]}"
