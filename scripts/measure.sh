#!/bin/sh
# AIOB-style kernel measurement: time every distinct kernel of a workload with torch and store the
# results in a compute DB (SQLite). Thin wrapper over `clustersim measure`.
#
#   scripts/measure.sh --model llama3-8b --plan plan.yaml [--db kernels.sqlite] [--device cuda] [...]
#   scripts/measure.sh --workload workload.json --db kernels.sqlite --repeats 20
#
# AICB-style spellings are accepted: --model_name (= --model), --aiob_db (= --db),
# -m SIZE (AICB model size, e.g. 7 -> aicb-7). Other flags go to `clustersim measure` unchanged.
# Needs the aiob extra: pip install -e '.[aiob]'. POSIX sh: works under sh and bash.
set -eu
db="kernels.sqlite"
count=$#
while [ "$count" -gt 0 ]; do
  arg=$1; shift; count=$((count - 1))
  case "$arg" in
    --db|--aiob_db|--model_name|-m|--model_size)
      if [ "$count" -lt 1 ]; then echo "measure.sh: error: $arg: expected a value" >&2; exit 2; fi ;;
  esac
  case "$arg" in
    --db|--aiob_db) db=$1; shift; count=$((count - 1)) ;;
    --db=*|--aiob_db=*) db=${arg#*=} ;;
    --model_name) set -- "$@" --model "$1"; shift; count=$((count - 1)) ;;
    -m|--model_size) set -- "$@" --model "aicb-$1"; shift; count=$((count - 1)) ;;
    -h|--help)
      sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'
      echo
      if command -v clustersim >/dev/null 2>&1; then exec clustersim measure --help; fi
      exec python3 -m sim.cli measure --help ;;
    *) set -- "$@" "$arg" ;;
  esac
done
if command -v clustersim >/dev/null 2>&1; then
  exec clustersim measure --db "$db" "$@"
fi
exec python3 -m sim.cli measure --db "$db" "$@"
