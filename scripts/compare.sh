#!/bin/sh
# Compare one workload across fabrics (and/or plans): table, compare.csv and compare.png.
#
#   scripts/compare.sh                                       # GPT-7B example on Spectrum-X vs DCN+
#   scripts/compare.sh -w workload.txt spectrum-x dcn+ "dcn+:nics_per_asw=16,psw_count=8"
#   scripts/compare.sh -m llama2-13b --tp 1 --dp 128 --global-batch 128 --seq-length 1024 \
#       spectrum-x dcn+ topo/AlibabaHPN_128g_8gps_DualToR_SinglePlane_200Gbps_H100
#
# Positional arguments are fabrics (template[:key=value,...] or SimAI topology files); flags go to
# `clustersim compare` unchanged (e.g. --plan tp=8,pp=2 to add plan variants, -o DIR, -n analytical).
# POSIX sh: works under sh and bash.
set -eu
count=$#
while [ "$count" -gt 0 ]; do
  arg=$1; shift; count=$((count - 1))
  case "$arg" in
    -h|--help) sed -n '2,/^# POSIX sh/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --sp|--enable_sequence_parallel|--use-distributed-optimizer|--distributed-optimizer|--tp-comm-overlap|-q|--quiet|\
    --*=*)
      set -- "$@" "$arg" ;;
    -*)
      # flags with a value: everything clustersim compare knows except the switches above
      if [ "$count" -lt 1 ]; then echo "compare.sh: error: $arg needs a value" >&2; exit 2; fi
      set -- "$@" "$arg" "$1"; shift; count=$((count - 1)) ;;
    *) set -- "$@" --fabric "$arg" ;;
  esac
done
exec clustersim compare "$@"
