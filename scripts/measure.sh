#!/usr/bin/env bash
# AIOB-style kernel measurement: time every distinct kernel of a workload with torch and store the
# results in a compute DB (SQLite). Thin wrapper over `clustersim measure`.
#
#   scripts/measure.sh --model llama3-8b --plan plan.yaml [--db kernels.sqlite] [--device cuda] [...]
#   scripts/measure.sh --workload workload.json --db kernels.sqlite --repeats 20
#
# AICB-style spellings are accepted: --model_name (= --model), --aiob_db (= --db),
# -m SIZE (AICB model size, e.g. 7 -> aicb-7). Other flags go to `clustersim measure` unchanged.
# Needs the aiob extra: pip install -e '.[aiob]'.
set -euo pipefail

db="kernels.sqlite"
args=()
while [[ $# -gt 0 ]]; do
  case "$1" in
    --db|--aiob_db|--model_name|-m|--model_size)
      if [[ $# -lt 2 ]]; then echo "measure.sh: error: $1: expected a value" >&2; exit 2; fi ;;
  esac
  case "$1" in
    --db|--aiob_db) db="$2"; shift 2 ;;
    --db=*|--aiob_db=*) db="${1#*=}"; shift ;;
    --model_name) args+=(--model "$2"); shift 2 ;;
    -m|--model_size) args+=(--model "aicb-$2"); shift 2 ;;
    -h|--help)
      sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
      echo
      if command -v clustersim >/dev/null 2>&1; then exec clustersim measure --help; fi
      exec python -m sim.cli measure --help ;;
    *) args+=("$1"); shift ;;
  esac
done

if command -v clustersim >/dev/null 2>&1; then
  exec clustersim measure --db "$db" "${args[@]}"
fi
exec python -m sim.cli measure --db "$db" "${args[@]}"
