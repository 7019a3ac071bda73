"""`clustersim workload`: build a Workload from a model and a parallel plan, print a summary, export it.

Flag names: clustersim's own plus AICB's (simai_formats.md §7, AICB's scripts and utils.py) as aliases,
so AICB command lines work unchanged (`-m 7 --world_size 4096 --tensor_model_parallel_size 2 --frame
Megatron ...`). The user's TP is always honoured. Every AICB flag is either honoured or answered with one
line: `note:` when it changes nothing here (launch settings, real-run iteration counts, ZeRO-3 knobs
clustersim does not model), an error when ignoring it would change the plan (collective tests, a
non-zero --pp_rank). AICB's measurement flags (--aiob_enable, --comp_filepath) need compute_db, which
workload_gen does not import: `clustersim aicb` (sim) takes the same flags and times kernels.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections import Counter
from pathlib import Path

from workload_gen.errors import ConfigFileError, WorkloadError
from workload_gen.plan import no_dp_overlap_fields

AICB_SIZES = {"7", "13", "22", "175", "405", "moe", "deepseek671", "deepseek236", "deepseek16"}
# AICB's DeepSpeed LLaMA sizes (scripts/deepspeed_llama.sh -m): LLaMA-1 (Touvron et al. 2023, table 2):
# layers, hidden, heads; FFN = 2/3 x 4h rounded up to a multiple of 256; vocab 32000; MHA, RMSNorm, RoPE
AICB_LLAMA1 = {"7": (32, 4096, 32, 11008), "13": (40, 5120, 40, 13824), "30": (60, 6656, 52, 17920),
               "33": (60, 6656, 52, 17920), "65": (80, 8192, 64, 22016)}

# AICB flags that change nothing here: flag -> (takes a value, why). Each prints one `note:` line.
AICB_NOTES: dict[str, tuple[bool, str]] = {
    "--epoch_num": (True, "iterations of a real training run; clustersim describes one iteration"),
    "--iter_num": (True, "iterations of a real training run; clustersim describes one iteration"),
    "--node_rank": (True, "torchrun launch setting; nothing is launched"),
    "--master_addr": (True, "torchrun launch setting; nothing is launched"),
    "--master_port": (True, "torchrun launch setting; nothing is launched"),
    "--enable_visual": (False, "AICB's HTML charts; `clustersim run` writes PNG charts and a Perfetto trace"),
    "--computation_enable": (False, "clustersim workloads always hold the compute kernels"),
    "--openai_gelu": (False, "a GeLU formula variant: same kernel cost"),
    "--onnx_safe": (False, "export numerics option: same kernel cost"),
    "--bias_gelu_fusion": (False, "kernel fusion is not modelled: bias and GeLU are timed as separate kernels"),
    "--squared_relu": (False, "activation variant: timed as the model's activation kernel (same elementwise cost)"),
    "--max_position_embeddings": (True, "position table size; positions follow --seq_length here"),
    "--amp_enabled": (False, "DeepSpeed AMP: give --dtype fp16 for fp16 compute"),
    "--contiguous_gradients": (False, "DeepSpeed buffer layout: no effect on kernels or traffic"),
    "--max_live_parameters": (True, "ZeRO-3 prefetch limit: not modelled (every parameter is gathered per layer)"),
    "--model_persistence_threshold": (True, "ZeRO-3 knob not modelled (every parameter is partitioned)"),
    "--param_persistence_threshold": (True, "ZeRO-3 knob not modelled (every parameter is partitioned; small "
                                            "parameters kept whole change gather sizes little)"),
    "--prefetch_bucket_size": (True, "ZeRO-3 prefetch size: not modelled (gathers are issued per layer)"),
    "--overlap_version": (True, "AICB's overlap implementation switch; overlap here follows "
                                "--overlap-grad-reduce / --overlap-param-gather"),
    "--workload_only": (False, None),   # honoured: clustersim only ever writes the workload (no note)
}
# AICB flags clustersim refuses: flag -> (takes a value, why)
AICB_REFUSED: dict[str, tuple[bool, str]] = {
    "--test_comm": (True, "AICB's collective test: use `clustersim collective` (nccl-tests-style sweeps)"),
    "--begin_size": (True, "AICB's collective test: use `clustersim collective --sizes`"),
    "--end_size": (True, "AICB's collective test: use `clustersim collective --sizes`"),
    "--multi_all_reduce_enable": (True, "AICB's collective test: use `clustersim collective`"),
}


class _AicbNote(argparse.Action):
    """Collect one note line per AICB flag that changes nothing here (printed by run())."""

    def __call__(self, parser, namespace, values, option_string=None):
        reason = AICB_NOTES[self.dest_flag][1]
        if reason is None:
            return
        shown = f"{option_string} {values}" if isinstance(values, str) else option_string
        notes = list(getattr(namespace, "aicb_notes", None) or [])
        notes.append(f"{shown}: ignored: {reason}")
        namespace.aicb_notes = notes


class _AicbRefused(argparse.Action):
    """Remember a refused AICB flag; run() raises it as one line (before anything is generated)."""

    def __call__(self, parser, namespace, values, option_string=None):
        if getattr(namespace, "aicb_refused", None) is None:
            namespace.aicb_refused = f"{option_string}: not supported: {AICB_REFUSED[self.dest_flag][1]}"


def register(subparsers) -> None:
    """Add this package's subcommands to the clustersim parser."""
    p = subparsers.add_parser(
        "workload", help="generate a kernel-level training workload (summary, native JSON, SimAI, AICB CSV)",
        description="Generate the per-stage kernel/collective program of one training iteration.")
    add_arguments(p)
    p.set_defaults(func=run)


def add_arguments(p: argparse.ArgumentParser) -> None:
    m = p.add_argument_group("model")
    m.add_argument("model", nargs="?", help="zoo model name (see --list-models) or a model file")
    m.add_argument("-m", "--model-size", "--model_size", dest="aicb_size", help="AICB model size: 7 13 22 175 405 moe deepseek671 ...")
    m.add_argument("--model", dest="model_opt", help="zoo model name or model file (as clustersim measure --model)")
    m.add_argument("--model-file", "--model_file", help="HuggingFace config.json or YAML model file")
    m.add_argument("--list-models", action="store_true", help="print the zoo names and exit")
    m.add_argument("--num-layers", "--num_layers", type=int)
    m.add_argument("--hidden-size", "--hidden_size", type=int)
    m.add_argument("--num-attention-heads", "--num_attention_heads", type=int)
    m.add_argument("--num-kv-heads", "--num_query_groups", "--num-query-groups", type=int)
    m.add_argument("--ffn-hidden-size", "--ffn_hidden_size", type=int)
    m.add_argument("--vocab-size", "--vocab_size", type=int)
    m.add_argument("--num-experts", "--num_experts", "--num_moe_experts", "--experts", type=int)
    m.add_argument("--moe-router-topk", "--moe_router_topk", "--topk", type=int)
    m.add_argument("--moe-ffn-hidden-size", "--moe_ffn_hidden_size", type=int)
    m.add_argument("--swiglu", "--gated_linear_unit", action="store_true", default=None,
                   help="gated MLP (SwiGLU; AICB's --gated_linear_unit is costed the same)")
    m.add_argument("--moe-enable", "--moe_enable", "--moe_enabled", dest="moe_enable", action="store_true",
                   help="(AICB) MoE: the model's experts, or --num_experts on a dense model")
    m.add_argument("--model_name", "--model-name", dest="model_name",
                   help="(AICB) model label for file names; a zoo name picks that model when no other is given")
    m.add_argument("-l", dest="num_layers_l", type=int, help="(AICB) = --num_layers")
    m.add_argument("--n_dense_layers", "--num-dense-layers", dest="n_dense_layers", type=int,
                   help="MoE: leading dense layers")
    m.add_argument("--n_shared_expert", "--num-shared-experts", dest="n_shared_expert", type=int,
                   help="MoE: shared experts")
    m.add_argument("--q_lora_rank", type=int, help="MLA query low-rank dim")
    m.add_argument("--kv_lora_rank", type=int, help="MLA key/value low-rank dim")
    m.add_argument("--qk_nope_dim", type=int, help="MLA per-head q/k dim without RoPE")
    m.add_argument("--qk_rope_dim", type=int, help="MLA per-head q/k RoPE dim")
    m.add_argument("--v_head_dim", type=int, help="MLA per-head value dim")
    m.add_argument("--make_vocab_size_divisible_by", "--make-vocab-size-divisible-by", dest="vocab_divisible",
                   type=int, help="vocabulary padding multiple (x TP)")
    m.add_argument("--add_bias_linear", "--add-bias-linear", dest="add_bias_linear", action="store_true",
                   default=None, help="biases on the linear layers")

    q = p.add_argument_group("parallel plan")
    q.add_argument("--plan-file", "--plan_file", help="YAML/JSON plan file (flags override its values)")
    q.add_argument("--frame", "--framework", dest="framework", type=str.lower,
                   help="megatron (default), deepspeed or deepseek (AICB's DeepSeek frame = megatron here)")
    q.add_argument("--world-size", "--world_size", type=int)
    q.add_argument("--nnodes", type=int, help="(AICB/torchrun) nodes: world size = nnodes x nproc_per_node")
    q.add_argument("--nproc_per_node", "--nproc-per-node", dest="nproc_per_node", type=int,
                   help="(AICB/torchrun) GPUs per node")
    q.add_argument("--tp", "--tensor-model-parallel-size", "--tensor_model_parallel_size", type=int)
    q.add_argument("--pp", "--pipeline-model-parallel-size", "--pipeline_model_parallel",
                   "--pipeline_model_parallel_size", type=int)
    q.add_argument("--pp_rank", type=int, help="(AICB) pipeline rank of the exported file: 0 (SimAI files "
                                               "describe stage 0)")
    q.add_argument("--vpp", "--virtual-pipeline-model-parallel-size", type=int)
    q.add_argument("--cp", "--context-parallel-size", "--context_parallel_size", type=int)
    q.add_argument("--ep", "--expert-model-parallel-size", "--expert_model_parallel_size",
                   "--expert_parallel_size", type=int)
    q.add_argument("--etp", "--expert-tensor-parallel-size", type=int)
    q.add_argument("--sp", "--sequence-parallel", "--enable_sequence_parallel", "--enable-sequence-parallel",
                   dest="sp", action="store_true", default=None)
    q.add_argument("--first-stage-layers", "--decoder-first-pipeline-num-layers", type=int)
    q.add_argument("--last-stage-layers", "--decoder-last-pipeline-num-layers", type=int)
    q.add_argument("--mbs", "--micro-batch-size", "--micro_batch", type=int)
    q.add_argument("--gbs", "--global-batch-size", "--global_batch", type=int)
    q.add_argument("--seq", "--seq-length", "--seq_length", type=int)
    q.add_argument("--dtype", type=_dtype, choices=["bf16", "fp16", "fp8"],
                   help="bf16 | fp16 | fp8 (AICB/torch spellings bfloat16, float16 accepted)")
    q.add_argument("--recompute", choices=["none", "selective", "full"])
    q.add_argument("--recompute-activations", "--recompute_activations", action="store_true",
                   help="(AICB/Megatron) selective recompute")
    q.add_argument("--recompute-num-layers", type=int)
    q.add_argument("--flash-attn", "--use_flash_attn", "--use-flash-attn", dest="flash", action="store_true",
                   default=None)
    q.add_argument("--no-flash-attn", dest="flash", action="store_false")
    q.add_argument("--tp-comm-overlap", action="store_true", default=None)
    q.add_argument("--cp-comm-type", choices=["p2p", "a2a"])
    q.add_argument("--distributed-optimizer", "--use-distributed-optimizer", "--use_distributed_optimizer",
                   dest="dist_opt", action="store_true", default=None)
    q.add_argument("--zero-stage", "--stage", "--zero_stage", dest="zero_stage", type=int, choices=[0, 1, 2, 3])
    q.add_argument("--reduce-bucket-size", "--reduce_bucket_size", type=int)
    q.add_argument("--allgather-bucket-size", "--allgather_bucket_size", type=int)
    q.add_argument("--grad-bucket-size", "--ddp-bucket-size", type=int)
    q.add_argument("--grad-reduce-dtype", choices=["auto", "fp32", "bf16", "fp16"],
                   help="gradient buffer / DP reduction dtype (auto: Megatron-LM: fp32 for bf16, fp16 for fp16)")
    q.add_argument("--accumulate-allreduce-grads-in-fp32", dest="grads_fp32", action="store_true",
                   help="(Megatron-LM) = --grad-reduce-dtype fp32")
    q.add_argument("--overlap-grad-reduce", "--overlap_grad_reduce", action=argparse.BooleanOptionalAction,
                   default=None,
                   help="reduce gradient buckets during the backward pass (default on)")
    q.add_argument("--overlap-param-gather", action=argparse.BooleanOptionalAction, default=None,
                   help="distributed optimizer: gather parameters during the forward pass (default on)")
    q.add_argument("--no-dp-overlap", action="store_true", help="both of the above off (Megatron-LM 2021)")
    q.add_argument("--overlap-p2p-comm", "--overlap-p2p-communication", action=argparse.BooleanOptionalAction,
                   default=None, help="interleaved schedule: overlap pipeline p2p (no batched-p2p device sync)")
    q.add_argument("--moe-grouped-gemm", "--moe_grouped_gemm", "--grouped_gemm", dest="grouped", action="store_true",
                   default=None)
    q.add_argument("--no-moe-grouped-gemm", dest="grouped", action="store_false")
    q.add_argument("--rank-order", type=str)
    a = p.add_argument_group("AICB flags that change nothing here (one note line each) or are refused")
    for flag, (takes, why) in {**AICB_NOTES, **AICB_REFUSED}.items():
        act = _AicbNote if flag in AICB_NOTES else _AicbRefused
        action = a.add_argument(flag, dest=f"_aicb{flag.replace('-', '_')}", action=act,
                                nargs=None if takes else 0, default=None, help=why or "honoured (always)")
        action.dest_flag = flag
    a.set_defaults(aicb_notes=[], aicb_refused=None)
    k = p.add_argument_group("AIOB kernel timing (`clustersim aicb`)")
    k.add_argument("--aiob_enable", "--aiob-enable", action="store_true",
                   help="time the exported SimAI / AICB files with compute_db (`clustersim aicb`)")
    k.add_argument("--comp_filepath", "--comp-filepath", help="AIOB compute file with measured forward kernel times")
    k.add_argument("--gpu_type", "--gpu-type", dest="gpu_type", help="GPU whose kernel times the files carry (H100)")

    o = p.add_argument_group("output")
    o.add_argument("--out", "-o", dest="out", help="write the native versioned JSON workload")
    o.add_argument("--ops-csv", help="write a flat CSV of every op")
    o.add_argument("--simai", help="write a SimAI workload text file (stage 0, GA unrolled)")
    o.add_argument("--simai-dir", help="write the SimAI file into this folder under an AICB-style name")
    o.add_argument("--aicb-csv", help="write an AICB-style per-op CSV log (stage 0, one iteration)")
    o.add_argument("--chakra", metavar="DIR", help="write MLCommons Chakra execution traces (<prefix>.<rank>.et per "
                   "rank, kernel times from compute_db; needs `pip install --no-deps mlc-chakra protobuf`)")
    o.add_argument("--chakra-ranks", metavar="RANKS", help="ranks to write with --chakra, e.g. 0-7,12 (default all)")
    o.add_argument("--chakra-gpu", metavar="GPU", default="H100", help="GPU of the --chakra kernel times (H100)")


_DTYPE_ALIASES = {"bfloat16": "bf16", "float16": "fp16", "half": "fp16", "float8": "fp8"}


def _dtype(text: str) -> str:
    return _DTYPE_ALIASES.get(text.strip().lower(), text.strip().lower())


def _framework(args) -> str | None:
    fw = args.framework
    if fw in (None, "megatron", "deepspeed", "deepseek"):
        return fw
    if fw == "collective_test":
        raise WorkloadError("--frame collective_test: AICB's collective test: use `clustersim collective` "
                            "(nccl-tests-style sweeps on a topology)")
    raise WorkloadError(f"--frame: unknown framework {args.framework!r} (known: Megatron, DeepSpeed, DeepSeek)")


def _aicb_llama1(size: str):
    """AICB's DeepSpeed LLaMA (-m with --frame DeepSpeed): LLaMA-1 dims on the llama2-7b architecture."""
    from workload_gen.zoo import get_model
    layers, hidden, heads, ffn = AICB_LLAMA1[size]
    return dataclasses.replace(get_model("llama2-7b"), name=f"aicb-llama-{size}b", num_layers=layers,
                               hidden_size=hidden, num_attention_heads=heads, num_kv_heads=None,
                               ffn_hidden_size=ffn, vocab_size=32000)


def _model(args):
    from workload_gen.zoo import get_model, list_models
    if args.list_models:
        return list_models()
    names = [x for x in (args.model, args.model_opt) if x]
    llama1 = None
    if args.aicb_size:
        size = args.aicb_size.lower()
        if _framework(args) == "deepspeed" and size in AICB_LLAMA1:
            llama1 = _aicb_llama1(size)
        elif size not in AICB_SIZES:
            known = sorted(AICB_SIZES) + [f"{k} (--frame DeepSpeed)" for k in AICB_LLAMA1 if k not in AICB_SIZES]
            raise WorkloadError(f"-m: unknown AICB model size {args.aicb_size!r}; known: {', '.join(known)}")
        else:
            names.append(f"aicb-{size}")
    label = getattr(args, "model_name", None)
    if label and not names and not llama1 and not args.model_file:
        try:
            get_model(label)
            names.append(label)
            label = None
        except WorkloadError:
            raise WorkloadError(f"--model_name {label!r}: not a zoo model; give the model with -m SIZE, a zoo "
                                "name or --model-file (--model_name then only labels the output)") from None
    if llama1 is not None:
        if names or args.model_file:
            raise WorkloadError(f"model: more than one model given (-m {args.aicb_size}, "
                                f"{', '.join(names) or args.model_file})")
        model = llama1
    elif args.model_file:
        if names:
            raise WorkloadError("--model-file: give either a zoo model or a model file, not both")
        from workload_gen.config_io import load_model
        model = load_model(args.model_file)
    elif len(set(names)) > 1:
        raise WorkloadError(f"model: more than one model given ({', '.join(names)})")
    elif names:
        try:
            model = get_model(names[0])
        except WorkloadError:
            if not Path(names[0]).is_file():
                raise
            # a model file, as `clustersim measure --model` takes
            from workload_gen.config_io import load_model
            model = load_model(names[0])
    else:
        raise WorkloadError("model: give a zoo model name, -m SIZE or --model-file (see --list-models)")
    if args.num_layers_l is not None:
        if args.num_layers is not None and args.num_layers != args.num_layers_l:
            raise WorkloadError(f"-l {args.num_layers_l} contradicts --num_layers {args.num_layers}")
        args.num_layers = args.num_layers_l
    over = {"num_layers": args.num_layers, "hidden_size": args.hidden_size,
            "num_attention_heads": args.num_attention_heads, "num_kv_heads": args.num_kv_heads,
            "ffn_hidden_size": args.ffn_hidden_size, "vocab_size": args.vocab_size,
            "num_experts": args.num_experts, "moe_top_k": args.moe_router_topk,
            "moe_ffn_hidden_size": args.moe_ffn_hidden_size, "num_dense_layers": args.n_dense_layers,
            "num_shared_experts": args.n_shared_expert, "q_lora_rank": args.q_lora_rank,
            "kv_lora_rank": args.kv_lora_rank, "qk_nope_head_dim": args.qk_nope_dim,
            "qk_rope_head_dim": args.qk_rope_dim, "v_head_dim": args.v_head_dim,
            "make_vocab_size_divisible_by": args.vocab_divisible}
    over = {k: v for k, v in over.items() if v is not None}
    for k, v in over.items():
        if v <= 0 and not (k in ("num_experts", "num_dense_layers", "num_shared_experts") and v == 0):
            raise WorkloadError(f"--{k.replace('_', '-')}: must be positive (got {v})")
    if args.moe_enable and not model.is_moe and not over.get("num_experts"):
        raise WorkloadError(f"--moe_enable: model {model.name} is dense; give --num_experts N (and "
                            "--moe_router_topk K) to make it MoE")
    if args.add_bias_linear:
        over["add_bias_linear"] = True
    if label:
        over["name"] = label
    if args.swiglu:
        over["activation"] = "swiglu"
    if "hidden_size" in over and "ffn_hidden_size" not in over:
        # a model whose FFN follows Megatron's default rule keeps following it (as AICB, which leaves
        # --ffn_hidden_size to Megatron): 4h for GELU, int(4h*2/3/64)*64 for SwiGLU
        if model.activation == "gelu":
            over["ffn_hidden_size"] = 4 * over["hidden_size"]
        elif model.gated_mlp and model.ffn_hidden_size == _swiglu_ffn(model.hidden_size):
            over["ffn_hidden_size"] = _swiglu_ffn(over["hidden_size"])
    if "num_attention_heads" in over and "num_kv_heads" not in over and model.kv_heads == model.num_attention_heads:
        over["num_kv_heads"] = None   # multi-head attention stays multi-head (one KV head per query head)
    return dataclasses.replace(model, **over) if over else model


def _swiglu_ffn(hidden: int) -> int:
    """Megatron's default SwiGLU FFN width (also AICB's `-m` sizes): int(4h * 2/3 / 64) * 64."""
    return int(4 * hidden * 2 / 3 / 64) * 64


def _plan(args, model):
    from workload_gen.plan import ParallelPlan
    base = {}
    given: set = set()   # keys the plan file sets itself (base holds every field)
    if args.plan_file:
        from workload_gen.config_io import load_plan, read_mapping
        # a plan file without seq_length uses the model's (not ParallelPlan's default); --seq overrides
        base = dataclasses.asdict(load_plan(args.plan_file, model=model))
        raw = read_mapping(Path(args.plan_file))
        given = set(raw["plan"]) if set(raw) == {"plan"} and isinstance(raw["plan"], dict) else set(raw)
    fw = _framework(args)
    if fw == "deepseek":
        fw = "megatron"
    if args.pp_rank not in (None, 0):
        raise WorkloadError(f"--pp_rank {args.pp_rank}: not supported: SimAI and AICB files describe pipeline "
                            "stage 0; `clustersim run` simulates every stage from the model")
    world = args.world_size
    if args.nnodes is not None or args.nproc_per_node is not None:
        nodes, per = args.nnodes or 1, args.nproc_per_node or 8
        if nodes < 1 or per < 1:
            raise WorkloadError(f"--nnodes / --nproc_per_node must be >= 1 (got {nodes}, {per})")
        if world is not None and world != nodes * per:
            raise WorkloadError(f"--world_size {world} contradicts --nnodes {nodes} x --nproc_per_node {per}")
        world = nodes * per
    flags = {
        "framework": fw, "tp": args.tp, "pp": args.pp, "vpp": args.vpp, "cp": args.cp, "ep": args.ep,
        "etp": args.etp, "sequence_parallel": args.sp, "num_layers_first_stage": args.first_stage_layers,
        "num_layers_last_stage": args.last_stage_layers, "micro_batch_size": args.mbs,
        "global_batch_size": args.gbs, "seq_length": args.seq, "dtype": args.dtype,
        "recompute": args.recompute or ("selective" if args.recompute_activations else None),
        "recompute_num_layers": args.recompute_num_layers, "flash_attention": args.flash,
        "tp_comm_overlap": args.tp_comm_overlap, "cp_comm_type": args.cp_comm_type,
        "distributed_optimizer": args.dist_opt, "zero_stage": args.zero_stage,
        "reduce_bucket_elements": args.reduce_bucket_size, "allgather_bucket_elements": args.allgather_bucket_size,
        "grad_bucket_elements": args.grad_bucket_size, "moe_grouped_gemm": args.grouped,
        "rank_order": args.rank_order, "world_size": world,
        "grad_reduce_dtype": args.grad_reduce_dtype or ("fp32" if args.grads_fp32 else None),
        "overlap_grad_reduce": args.overlap_grad_reduce, "overlap_param_gather": args.overlap_param_gather,
        "overlap_p2p_comm": args.overlap_p2p_comm,
    }
    if args.grads_fp32 and args.grad_reduce_dtype not in (None, "fp32"):
        raise WorkloadError("--accumulate-allreduce-grads-in-fp32 contradicts --grad-reduce-dtype "
                            f"{args.grad_reduce_dtype}")
    flags = no_dp_overlap_fields(flags, args.no_dp_overlap)
    cfg = dict(base)
    cfg.update({k: v for k, v in flags.items() if v is not None})
    cfg.setdefault("seq_length", model.seq_length)
    if "world_size" not in cfg:
        cfg["world_size"] = cfg.get("tp", 1) * cfg.get("pp", 1) * cfg.get("cp", 1)
    if cfg.get("framework") == "deepspeed" and args.zero_stage is None and "zero_stage" not in given:
        cfg["zero_stage"] = 1
    return ParallelPlan(**cfg)


def simai_name(w) -> str:
    p = w.plan
    return (f"{w.model.name}-world_size{p.world_size}-tp{p.tp}-pp{p.pp}-ep{p.ep}-gbs{p.global_batch_size}"
            f"-mbs{p.micro_batch_size}-seq{p.seq_length}.txt")


def per_iteration(w):
    """Per rank and iteration: {stage: (Counter of comm bytes per group, compute ops, comm ops, flops)}."""
    out = {}
    n = w.num_microbatches
    for st in w.stages:
        by_group: Counter = Counter()
        k_ops = c_ops = 0
        flops = 0.0
        lists = [(op, 1) for op in st.iteration_start + st.iteration_end]
        for ch in st.chunks:
            for op in ch.forward + ch.backward:
                lists.append((op, n if op.microbatch == "all" else 1))
        for op, times in lists:
            if op.is_comm:
                if op.collective == "recv":      # count pipeline traffic once, at the sender
                    c_ops += times
                    continue
                by_group[op.group] += op.size_bytes * times
                c_ops += times
            else:
                k_ops += times
                flops += op.flops * times
        out[st.stage] = (by_group, k_ops, c_ops, flops)
    return out


def summary(w) -> str:
    from workload_gen.dp_comm import grad_reduce_dtype
    from workload_gen.params import count_params, stage_params
    m, p = w.model, w.plan
    pc = count_params(m)
    lines = [f"model {m.name}: {m.num_layers} layers, hidden {m.hidden_size}, heads {m.num_attention_heads}"
             f"/{m.kv_heads}, ffn {m.ffn_hidden_size}, vocab {m.vocab_size} (padded {w.meta.get('padded_vocab_size')})",
             f"plan: {p.framework}, world {p.world_size} = tp {p.tp} x cp {p.cp} x pp {p.pp} x dp {p.dp}"
             + (f", ep {p.ep} etp {p.expert_tp} edp {p.edp}" if m.is_moe else "")
             + f", vpp {p.vpp}, sp {p.sequence_parallel}, mbs {p.micro_batch_size}, gbs {p.global_batch_size},"
               f" seq {p.seq_length}, {p.dtype}, recompute {p.recompute}"
             + (f", zero {p.zero_stage}" if p.framework == "deepspeed" else f", dist-opt {p.distributed_optimizer}")
             + f", grads {grad_reduce_dtype(p)}"
             + ("" if p.framework == "deepspeed" or p.overlap_grad_reduce else ", no DP overlap"),
             f"schedule {w.schedule}, {w.num_microbatches} micro-batches per iteration",
             f"parameters: total {pc.total / 1e9:.3f} B" + (f", active {pc.active / 1e9:.3f} B" if m.is_moe else "")]
    for s in range(p.pp):
        sp_ = stage_params(m, p, s)
        if p.pp <= 4 or s in (0, 1, p.pp - 1):
            lines.append(f"  stage {s}: {len(sp_.layers)} layers, per rank {sp_.total / 1e9:.3f} B params "
                         f"(dense {sp_.dense / 1e9:.3f} B, expert {sp_.expert / 1e9:.3f} B)")
        elif s == 2:
            lines.append("  ...")
    it = per_iteration(w)
    ranks = p.world_size // p.pp
    total_flops = sum(v[3] for v in it.values()) * ranks
    lines.append(f"FLOPs per iteration (all ranks, kernels incl. recompute): {total_flops:.4e}"
                 f"  ({total_flops / p.world_size:.4e} per GPU)")
    groups = sorted({g for v in it.values() for g in v[0]})
    lines.append("comm bytes per iteration per rank (busiest stage / stage 0), nccl-tests buffer sizes:")
    for g in groups:
        mx = max(v[0][g] for v in it.values())
        lines.append(f"  {g:10s} {mx / 2**30:12.3f} GiB   {it[0][0][g] / 2**30:12.3f} GiB")
    k0, c0 = it[0][1], it[0][2]
    n_ops = sum(len(ch.forward) + len(ch.backward) for st in w.stages for ch in st.chunks)
    lines.append(f"kernels per iteration on a stage-0 rank: {k0} compute, {c0} comm; "
                 f"workload holds {n_ops} ops ({len(w.stages)} stages)")
    return "\n".join(lines)


def run(args, kernel_timer=None, chakra=None) -> int:
    """`clustersim workload`. chakra: the Chakra trace writer (sim.chakra.ChakraWriter: `check_args(args,
    world)`, `write_from_args(w, args, kernel_timer)`; it needs the simulator's schedule and compute_db, which
    workload_gen must not import, so the console script passes it). kernel_timer(workload) -> (time_of(op)
    -> s, description): kernel times for
    the exported files (`clustersim aicb` passes compute_db's); None: PLACEHOLDER roofline times."""
    if getattr(args, "aicb_refused", None):
        raise WorkloadError(args.aicb_refused)
    if (args.aiob_enable or args.comp_filepath) and kernel_timer is None:
        flag = "--aiob_enable" if args.aiob_enable else "--comp_filepath"
        raise WorkloadError(f"{flag}: kernel timing needs compute_db: use `clustersim aicb` (the same flags) or "
                            "scripts/megatron_workload_with_aiob.sh")
    notes = list(getattr(args, "aicb_notes", None) or [])
    if args.gpu_type and kernel_timer is None:
        notes.append(f"--gpu_type {args.gpu_type}: ignored: it names the GPU of AIOB kernel times "
                     "(`clustersim aicb --aiob_enable`)")
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    model = _model(args)
    if isinstance(model, list):
        print("\n".join(model))
        return 0
    plan = _plan(args, model)
    from workload_gen.native_io import check_output_path
    for flag, path in (("--out", args.out), ("--ops-csv", args.ops_csv), ("--simai", args.simai),
                       ("--aicb-csv", args.aicb_csv)):
        if path:   # fail before generating so that no output set is left half-written
            try:
                check_output_path(path)
            except ConfigFileError as exc:
                raise ConfigFileError(f"{flag}: {exc}") from None
    if args.simai and args.simai_dir:
        raise ConfigFileError("--simai-dir: give either --simai FILE or --simai-dir DIR, not both")
    if args.simai_dir and os.path.exists(args.simai_dir) and not os.path.isdir(args.simai_dir):
        raise ConfigFileError(f"--simai-dir: {args.simai_dir}: exists and is not a directory")
    if getattr(args, "chakra", None) or getattr(args, "chakra_ranks", None):
        if chakra is None:
            raise WorkloadError("--chakra: Chakra traces are written by the `clustersim workload` command "
                                "(sim.chakra), not by workload_gen.cli.run alone")
        chakra.check_args(args, plan.world_size)   # before generating: no half-written output set
    from workload_gen.generator import generate
    w = generate(model, plan)
    print(summary(w))
    time_of, timing = None, "PLACEHOLDER roofline estimates (400 TFLOP/s, 2 TB/s; not calibrated)"
    if kernel_timer is not None and (args.simai or args.simai_dir or args.aicb_csv):
        time_of, timing = kernel_timer(w)
    outputs = []
    try:
        if args.out:
            from workload_gen.native_io import save_workload
            save_workload(w, args.out)
            outputs.append(("native JSON", args.out))
        if args.ops_csv:
            from workload_gen.native_io import write_ops_csv
            write_ops_csv(w, args.ops_csv)
            outputs.append(("ops CSV", args.ops_csv))
        simai = args.simai
        if args.simai_dir:
            try:
                os.makedirs(args.simai_dir, exist_ok=True)
            except OSError as exc:
                raise ConfigFileError(f"--simai-dir: {args.simai_dir}: cannot create ({exc.strerror})") from None
            simai = str(Path(args.simai_dir) / simai_name(w))
        if simai:
            from workload_gen.simai_workload import write_simai_workload
            dropped = write_simai_workload(w, simai, time_of=time_of)
            outputs.append(("SimAI workload", simai))
            if dropped:
                kinds = Counter(op.group for op in dropped)
                print("note: SimAI's layer lines cannot express " + ", ".join(
                    f"{n} {g}" for g, n in sorted(kinds.items())) + " op(s) per micro-batch/iteration (pipeline "
                      "traffic is the header's pp_comm); the file's #clustersim section keeps them")
            print(f"note: compute times in the SimAI file: {timing}")
        if args.aicb_csv:
            from workload_gen.aicb_csv import write_aicb_csv
            write_aicb_csv(w, args.aicb_csv, include_compute=True, time_of=time_of)
            outputs.append(("AICB CSV", args.aicb_csv))
        if getattr(args, "chakra", None):
            outputs.append(("Chakra traces", chakra.write_from_args(w, args, kernel_timer)))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError, PermissionError) as exc:
        raise ConfigFileError(f"{exc.filename}: cannot write ({exc.strerror})") from None
    for what, path in outputs:
        print(f"wrote {what}: {path}")
    return 0
