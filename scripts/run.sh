#!/bin/sh
# Simulate one training iteration with clustersim, accepting the flags SimAI users type.
#
#   scripts/run.sh                                   # built-in example
#   scripts/run.sh -w example/workload_analytical.txt -g 9216 -g_p_s 8 -r test- --analytical
#   scripts/run.sh -w my_workload.txt -n topo/Spectrum-X_128g_8gps_400Gbps_H100 -o results/
#   scripts/run.sh --model llama3-70b --tp 8 --pp 4 --dp 8 --global-batch 512   (clustersim flags)
#
# SimAI flags translated, with SimAI's meanings (SimAI_analytical / SimAI_simulator): -w FILE, -n TOPOLOGY_FILE,
# -g N, -g_p_s N, -g_type GPU, -r PREFIX (run name; results in ./results/<PREFIX>/ unless -o), -r_f DIR,
# -nv GB/s, -nic GB/s, -n_p_s N, -busbw FILE, -c SimAI.conf, AS_PXN_ENABLE=1; noted with no effect: -t,
# -v, -nic_t, -l, -dp_o -tp_o -ep_o -pp_o, AS_SEND_LAT, AS_NVLS_ENABLE. --analytical: analytical network
# backend (default flow). Anything else is passed to `clustersim run` unchanged (-o DIR, --no-charts, ...).
# POSIX sh: works under sh and bash.
for arg in "$@"; do
  case "$arg" in
    -h|--help) sed -n '2,/^# POSIX sh/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
  esac
done
if command -v clustersim >/dev/null 2>&1; then
  exec clustersim simai run "$@"
fi
exec python3 -m sim.cli simai run "$@"
