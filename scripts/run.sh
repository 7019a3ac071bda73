#!/usr/bin/env bash
# Simulate one training iteration with clustersim, accepting the flags SimAI users type.
#
#   scripts/run.sh                                   # built-in example
#   scripts/run.sh -w example/workload_analytical.txt -g 9216 -g_p_s 8 -r test- --analytical
#   scripts/run.sh -w my_workload.txt -n topo/Spectrum-X_128g_8gps_400Gbps_H100 -o results/
#   scripts/run.sh --model llama3-70b --tp 8 --pp 4 --dp 8 --global-batch 512   (clustersim flags)
#
# SimAI flags translated: -w/--workload FILE, -n/--topo TOPOLOGY_FILE, -g/--gpus N, -g_p_s N
# (GPUs per server of the template topology), -r/--result NAME (run name), --analytical (analytical
# network backend), -o DIR (results directory). Anything else is passed to `clustersim run` unchanged.
set -euo pipefail
args=()
gps=""
gpus=""
topology=""
need() {  # a SimAI flag given without its value: one line, exit 2 (as clustersim does)
  if [[ $# -lt 2 || -z "$2" ]]; then echo "run.sh: error: $1 needs a value" >&2; exit 2; fi
}
while [[ $# -gt 0 ]]; do
  case "$1" in
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -w|--workload) need "$@"; args+=(--workload "$2"); shift 2 ;;
    -n|--topo|--topology) need "$@"; topology="$2"; shift 2 ;;
    -g|--gpus) need "$@"; gpus="$2"; args+=(--gpus "$2"); shift 2 ;;
    -g_p_s|--gpus-per-server) need "$@"; gps="$2"; shift 2 ;;
    -r|--result) need "$@"; args+=(--name "${2%-}"); shift 2 ;;
    --analytical) args+=(--network analytical); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
if [[ -n "$gps" ]]; then
  if [[ -n "$topology" ]]; then
    if [[ -f "$topology" ]]; then
      echo "run.sh: error: -g_p_s applies to template topologies, not to the file $topology" >&2; exit 2
    fi
    case "$topology" in *:*) topology="$topology,gpus_per_server=$gps" ;; *) topology="$topology:gpus_per_server=$gps" ;; esac
  else
    # clustersim's default fabric: one Spectrum-X pod holds at most 4,096 GPUs, multi-pod beyond
    if [[ "$gpus" =~ ^[0-9]+$ ]] && (( gpus > 4096 )); then
      topology="multi-pod:gpus_per_server=$gps"
    else
      topology="spectrum-x:gpus_per_server=$gps"
    fi
  fi
fi
if [[ -n "$topology" ]]; then args+=(--topology "$topology"); fi
exec clustersim run "${args[@]+"${args[@]}"}"
