#!/usr/bin/env bash
# Compare one workload across fabrics (and/or plans): table, compare.csv and compare.png.
#
#   scripts/compare.sh                                       # GPT-7B example on Spectrum-X vs DCN+
#   scripts/compare.sh -w workload.txt spectrum-x dcn+ "dcn+:nics_per_asw=16,psw_count=8"
#   scripts/compare.sh -m llama2-13b --tp 1 --dp 128 --global-batch 128 --seq-length 1024 \
#       spectrum-x dcn+ topo/AlibabaHPN_128g_8gps_DualToR_SinglePlane_200Gbps_H100
#
# Positional arguments are fabrics (template[:key=value,...] or SimAI topology files); flags go to
# `clustersim compare` unchanged (e.g. --plan tp=8,pp=2 to add plan variants, -o DIR, -n analytical).
set -euo pipefail
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*)
      args+=("$1")
      # flags with a value: everything clustersim compare knows except the switches below
      case "$1" in
        --sp|--enable_sequence_parallel|--use-distributed-optimizer|--distributed-optimizer|--tp-comm-overlap|-q|--quiet)
          shift ;;
        *)
          if [[ $# -lt 2 ]]; then echo "compare.sh: error: $1 needs a value" >&2; exit 2; fi
          args+=("$2"); shift 2 ;;
      esac ;;
    *) args+=(--fabric "$1"); shift ;;
  esac
done
exec clustersim compare "${args[@]+"${args[@]}"}"
