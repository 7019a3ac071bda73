#!/usr/bin/env bash
# Simulate LLM inference serving with clustersim, accepting the flag names Vidur users type.
#
#   scripts/serve.sh                                  # built-in example (Llama-3-8B, 1 x H100, Sarathi)
#   scripts/serve.sh -m llama3-8b --gpu H100 --tp 1 --replicas 1 --scheduler sarathi --requests 2000 --qps 4 -o out
#   scripts/serve.sh --replica_config_model_name meta-llama/Llama-2-7b-hf --replica_config_device a100 \
#       --replica_config_tensor_parallel_size 1 --cluster_config_num_replicas 2 \
#       --replica_scheduler_config_type sarathi --sarathi_scheduler_config_chunk_size 512 \
#       --synthetic_request_generator_config_num_requests 512 \
#       --interval_generator_config_type poisson --poisson_request_interval_generator_config_qps 6.45 \
#       --length_generator_config_type trace --trace_request_length_generator_config_trace_file chat
#
# Vidur flags translated to `clustersim serve` flags: model name (org/ prefix and -hf suffix dropped),
# device (a100 -> A100-80GB, h100 -> H100), replicas, TP, pipeline stages, replica scheduler and its batch
# cap / chunk size / token budget / block size, global scheduler (lor -> least_outstanding), request
# count, interval generator (poisson, gamma with qps and cv, static), length generator (fixed with
# prefill/decode tokens, uniform/zipf with min/max tokens and prefill:decode ratio, trace with its file),
# trace replay file, seed, output directory. Execution-time-predictor flags (Vidur's profiles and
# random forests) have no meaning here: clustersim's kernel times come from compute_db; they are
# skipped with a note. Anything else is passed to `clustersim serve` unchanged.
set -eu
# POSIX sh (works under `sh` and bash): translated flags are appended to "$@" while the originals are
# shifted off the front.
count=$#
val=""
take() {  # the value of flag $1 (the next original argument); a missing value is one line, exit 2
  if [ "$count" -lt 1 ] || [ -z "$2" ]; then echo "serve.sh: error: $1 needs a value" >&2; exit 2; fi
  val=$2
}
model_name() {  # meta-llama/Llama-2-7b-hf -> llama-2-7b (clustersim's zoo resolves the spelling)
  m=${1##*/}; m=${m%-hf}; m=${m%-Instruct}
  printf '%s' "$m" | tr 'A-Z' 'a-z' | sed 's/^meta-llama-3/llama3/; s/^meta-//'
}
device() {
  case "$1" in a100) echo A100-80GB ;; h100) echo H100 ;; *) echo "$1" ;; esac
}
while [ "$count" -gt 0 ]; do
  flag=$1; shift; count=$((count - 1))
  case "$flag" in
    -h|--help) sed -n '2,/^set -eu/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    --replica_config_model_name|--replica_config_device|--cluster_config_num_replicas|\
    --replica_config_tensor_parallel_size|--replica_config_num_pipeline_stages|--replica_scheduler_config_type|\
    --*_scheduler_config_batch_size_cap|--*_scheduler_config_block_size|--*_scheduler_config_chunk_size|\
    --*_scheduler_config_max_tokens_in_batch|--*_scheduler_config_watermark_blocks_fraction|\
    --global_scheduler_config_type|--*_request_generator_config_num_requests|\
    --synthetic_request_generator_config_duration|--request_generator_config_type|\
    --interval_generator_config_type|--*_request_interval_generator_config_qps|\
    --gamma_request_interval_generator_config_cv|--length_generator_config_type|\
    --fixed_request_length_generator_config_prefill_tokens|--fixed_request_length_generator_config_decode_tokens|\
    --*_request_length_generator_config_min_tokens|--*_request_length_generator_config_max_tokens|\
    --*_request_length_generator_config_prefill_to_decode_ratio|--trace_request_length_generator_config_trace_file|\
    --trace_request_generator_config_trace_file|--trace_request_generator_config_time_scale_factor|\
    --metrics_config_output_dir)
      take "$flag" "${1:-}"; shift; count=$((count - 1))
      case "$flag" in
        --replica_config_model_name) set -- "$@" --model "$(model_name "$val")" ;;
        --replica_config_device) set -- "$@" --gpu "$(device "$val")" ;;
        --cluster_config_num_replicas) set -- "$@" --replicas "$val" ;;
        --replica_config_tensor_parallel_size) set -- "$@" --tp "$val" ;;
        --replica_config_num_pipeline_stages) set -- "$@" --pp "$val" ;;
        --replica_scheduler_config_type) set -- "$@" --scheduler "$val" ;;
        --*_scheduler_config_batch_size_cap) set -- "$@" --batch-cap "$val" ;;
        --*_scheduler_config_block_size) set -- "$@" --block-size "$val" ;;
        --*_scheduler_config_chunk_size) set -- "$@" --chunk-size "$val" ;;
        --*_scheduler_config_max_tokens_in_batch) set -- "$@" --max-tokens-per-iteration "$val" ;;
        --*_scheduler_config_watermark_blocks_fraction) set -- "$@" --watermark "$val" ;;
        --global_scheduler_config_type)
          if [ "$val" = lor ]; then set -- "$@" --router least_outstanding; else set -- "$@" --router "$val"; fi ;;
        --*_request_generator_config_num_requests) set -- "$@" --requests "$val" ;;
        --synthetic_request_generator_config_duration) set -- "$@" --duration "$val" ;;
        --request_generator_config_type) ;;      # implied by the flags that follow
        --interval_generator_config_type) set -- "$@" --arrival "$val" ;;
        --*_request_interval_generator_config_qps) set -- "$@" --qps "$val" ;;
        --gamma_request_interval_generator_config_cv) set -- "$@" --cv "$val" ;;
        --length_generator_config_type) set -- "$@" --lengths "$val" ;;
        --fixed_request_length_generator_config_prefill_tokens) set -- "$@" --prefill-tokens "$val" ;;
        --fixed_request_length_generator_config_decode_tokens) set -- "$@" --decode-tokens "$val" ;;
        --*_request_length_generator_config_min_tokens) set -- "$@" --min-tokens "$val" ;;
        --*_request_length_generator_config_max_tokens) set -- "$@" --max-tokens "$val" ;;
        --*_request_length_generator_config_prefill_to_decode_ratio) set -- "$@" --pd-ratio "$val" ;;
        --trace_request_length_generator_config_trace_file) set -- "$@" --trace "$val" --lengths trace ;;
        --trace_request_generator_config_trace_file) set -- "$@" --trace "$val" --arrival trace ;;
        --trace_request_generator_config_time_scale_factor) set -- "$@" --time-scale "$val" ;;
        --metrics_config_output_dir) set -- "$@" --out "$val" ;;
      esac ;;
    --*execution_time_predictor_config*)
      echo "serve.sh: note: $flag ignored (kernel times come from compute_db, not Vidur's profiles)" >&2
      case "${1:-}" in --*|"") ;; *) shift; count=$((count - 1)) ;; esac ;;
    *) set -- "$@" "$flag" ;;
  esac
done
exec clustersim serve "$@"
