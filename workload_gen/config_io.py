"""Load models and plans from files.

Models: HuggingFace `config.json` (model_type / architectures llama, mistral, mixtral, qwen2, qwen3_moe,
deepseek_v2, deepseek_v3), PerfLLM-style model JSON (`model_type` "dense"|"moe" with `head_num`, ...)
or a YAML/JSON mapping of ModelSpec field names (optionally `base: <zoo name>` to override a zoo model).
Plans: a YAML/JSON mapping of ParallelPlan field names (optionally nested under `plan:`; `dp` may replace
`world_size`), or a PerfLLM strategy JSON (`tp_size`, `pp_size`, ...).

Every malformed file raises ConfigFileError "<file>: key '<key>': <what is wrong>".
HF mapping notes (what is approximated): all supported HF architectures use gated MLPs (SwiGLU);
`attention_bias` maps to QKV biases (Llama's o_proj bias, `hidden` params per layer, is not represented);
`seq_length` = min(max_position_embeddings, 8192) (it only matters for learned positions, which these
architectures do not use; the plan's seq_length drives the workload).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import yaml

from workload_gen.errors import ConfigFileError, WorkloadError
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan

HF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM", "qwen3_moe": "Qwen3MoeForCausalLM",
    "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
}
_ARCH_BY_CLASS = {v.lower(): k for k, v in HF_ARCHITECTURES.items()}
_SEQ_CAP = 8192


# ----------------------------------------------------------------------------------------- reading
def read_mapping(path: Path) -> dict:
    """Top-level mapping of a JSON (by suffix) or YAML file; ConfigFileError naming file:line otherwise."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read ({e.strerror or e})") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text)
        else:
            data = yaml.safe_load(text)
    except json.JSONDecodeError as e:
        raise ConfigFileError(f"{path}:{e.lineno}: invalid JSON ({e.msg})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        raise ConfigFileError(f"{path}{where}: invalid YAML ({problem})") from None
    if not isinstance(data, dict):
        raise ConfigFileError(f"{path}: expected a mapping of keys to values at the top level "
                              f"(got {type(data).__name__})")
    return data


class _Keys:
    """Typed access to a mapping, raising ConfigFileError naming file and key."""

    def __init__(self, path: Path, data: dict):
        self.path, self.data = path, data

    def err(self, key: str, what: str) -> ConfigFileError:
        return ConfigFileError(f"{self.path}: key '{key}': {what}")

    def has(self, key: str) -> bool:
        return self.data.get(key) is not None

    def _typed(self, key: str, default: Any, ok, expected: str) -> Any:
        """The key's value if `ok(value)`; `default` when absent or null (error when there is none)."""
        if not self.has(key):
            if default is ...:
                raise self.err(key, "missing")
            return default
        v = self.data[key]
        if not ok(v):
            raise self.err(key, f"expected {expected}, got {v!r}")
        return v

    def int(self, key: str, default: Any = ..., *, min_value: int = 1) -> Any:
        kind = "a positive integer" if min_value == 1 else f"an integer >= {min_value}"
        return self._typed(key, default,
                           lambda v: not isinstance(v, bool) and isinstance(v, int) and v >= min_value, kind)

    def bool(self, key: str, default: Any = ...) -> Any:
        return self._typed(key, default, lambda v: isinstance(v, bool), "true or false")

    def str(self, key: str, default: Any = ...) -> Any:
        return self._typed(key, default, lambda v: isinstance(v, str), "a string")


def _field_value(k: _Keys, f: dataclasses.Field) -> Any:
    """Type-check one dataclass field value by its declared type (strings in the annotations)."""
    t = str(f.type)
    key = f.name
    v = k.data[key]
    if t.startswith("int"):
        if v is None and "None" in t:
            return None
        min_value = 0 if key in _NON_NEGATIVE else 1
        return k.int(key, min_value=min_value)
    if t == "bool":
        return k.bool(key)
    if t == "str":
        return k.str(key)
    if t == "dict":
        if not isinstance(v, dict):
            raise k.err(key, f"expected a mapping, got {v!r}")
        return v
    if t.startswith("tuple[int"):
        if v is None and "None" in t:
            return None
        if not isinstance(v, (list, tuple)) or not all(isinstance(i, int) and not isinstance(i, bool) for i in v):
            raise k.err(key, f"expected a list of integers, got {v!r}")
        return tuple(v)
    return v


_NON_NEGATIVE = {"num_experts", "moe_top_k", "num_shared_experts", "num_dense_layers", "zero_stage"}


def _build(cls, k: _Keys, base=None, skip: tuple[str, ...] = ()):
    fields = {f.name: f for f in dataclasses.fields(cls)}
    values = {}
    for key in k.data:
        if key in skip:
            continue
        if key not in fields:
            raise k.err(key, f"unknown {cls.__name__} field (known: {', '.join(fields)})")
        values[key] = _field_value(k, fields[key])
    try:
        return dataclasses.replace(base, **values) if base is not None else cls(**values)
    except TypeError:
        missing = [n for n, f in fields.items() if n not in values and f.default is dataclasses.MISSING
                   and f.default_factory is dataclasses.MISSING]
        raise k.err(missing[0] if missing else "?", "missing") from None


# ----------------------------------------------------------------------------------------- models
def _hf_arch(k: _Keys) -> str:
    mt = k.data.get("model_type")
    if isinstance(mt, str) and mt in HF_ARCHITECTURES:
        return mt
    for cls in k.data.get("architectures") or []:
        if isinstance(cls, str) and cls.lower() in _ARCH_BY_CLASS:
            return _ARCH_BY_CLASS[cls.lower()]
    got = mt if mt is not None else k.data.get("architectures")
    raise ConfigFileError(f"{k.path}: unsupported architecture {got!r}; supported model_type: "
                          f"{', '.join(HF_ARCHITECTURES)}")


def _from_hf(k: _Keys, name: str) -> ModelSpec:
    arch = _hf_arch(k)
    hidden = k.int("hidden_size")
    layers = k.int("num_hidden_layers")
    heads = k.int("num_attention_heads")
    kw: dict[str, Any] = dict(
        name=name, num_layers=layers, hidden_size=hidden, num_attention_heads=heads,
        num_kv_heads=k.int("num_key_value_heads", heads), vocab_size=k.int("vocab_size"),
        seq_length=min(k.int("max_position_embeddings", 4096), _SEQ_CAP), activation="swiglu",
        norm="rmsnorm", position_embedding="rope", tie_embeddings=k.bool("tie_word_embeddings", False),
        add_bias_linear=False, add_qkv_bias=k.bool("attention_bias", arch == "qwen2"),
        head_dim=k.int("head_dim", None))
    act = k.str("hidden_act", "silu")
    if act not in ("silu", "swiglu", "swish"):
        raise k.err("hidden_act", f"only gated SiLU (SwiGLU) MLPs are supported for {arch}, got {act!r}")
    extra: dict[str, Any] = {"hf_model_type": arch}
    if arch == "mixtral":
        ffn = k.int("intermediate_size")
        kw.update(ffn_hidden_size=ffn, num_experts=k.int("num_local_experts"),
                  moe_top_k=k.int("num_experts_per_tok"), moe_ffn_hidden_size=ffn)
    elif arch == "qwen3_moe":
        kw.update(ffn_hidden_size=k.int("intermediate_size"), num_experts=k.int("num_experts"),
                  moe_top_k=k.int("num_experts_per_tok"),
                  moe_ffn_hidden_size=k.int("moe_intermediate_size"), qk_layernorm=True,
                  add_qkv_bias=k.bool("attention_bias", False))
        step = k.int("decoder_sparse_step", 1)
        only = k.data.get("mlp_only_layers") or []
        if not isinstance(only, list) or not all(isinstance(i, int) and not isinstance(i, bool)
                                                  and 0 <= i < layers for i in only):
            raise k.err("mlp_only_layers", f"expected a list of layer indices in 0..{layers - 1}, got {only!r}")
        if step != 1 or only:
            kw["moe_layer_pattern"] = tuple(int(i not in only and (i + 1) % step == 0)
                                            for i in range(layers))
    elif arch in ("deepseek_v2", "deepseek_v3"):
        experts = k.int("n_routed_experts", 0, min_value=0)
        first_dense = k.int("first_k_dense_replace", 0, min_value=0)
        freq = k.int("moe_layer_freq", 1)
        kw.update(ffn_hidden_size=k.int("intermediate_size"), attention="mla",
                  q_lora_rank=k.int("q_lora_rank", None), kv_lora_rank=k.int("kv_lora_rank"),
                  qk_nope_head_dim=k.int("qk_nope_head_dim"), qk_rope_head_dim=k.int("qk_rope_head_dim"),
                  v_head_dim=k.int("v_head_dim"), head_dim=None)
        if experts:
            kw.update(num_experts=experts, moe_top_k=k.int("num_experts_per_tok"),
                      moe_ffn_hidden_size=k.int("moe_intermediate_size"),
                      num_shared_experts=k.int("n_shared_experts", 0, min_value=0),
                      num_dense_layers=min(first_dense, layers))
            if freq != 1:
                kw["moe_layer_pattern"] = tuple(int(i >= first_dense and i % freq == 0)
                                                for i in range(layers))
    else:  # llama, mistral, qwen2: dense
        kw.update(ffn_hidden_size=k.int("intermediate_size"))
    return ModelSpec(**kw, extra=extra)


# ModelSpec field -> the key of the source file that set it, so that a rule broken by a loaded file
# (e.g. KV heads not dividing the heads) names the key the user wrote, not clustersim's field name.
_HF_KEYS = {
    "num_layers": "num_hidden_layers", "num_kv_heads": "num_key_value_heads",
    "ffn_hidden_size": "intermediate_size", "moe_top_k": "num_experts_per_tok",
    "moe_ffn_hidden_size": "moe_intermediate_size", "num_shared_experts": "n_shared_experts",
    "num_dense_layers": "first_k_dense_replace", "seq_length": "max_position_embeddings",
    "tie_embeddings": "tie_word_embeddings", "add_qkv_bias": "attention_bias",
}
_HF_KEYS_BY_ARCH = {
    "mixtral": {"num_experts": "num_local_experts", "moe_ffn_hidden_size": "intermediate_size"},
    "qwen3_moe": {"num_experts": "num_experts", "moe_layer_pattern": "mlp_only_layers"},
    "deepseek_v2": {"num_experts": "n_routed_experts", "moe_layer_pattern": "moe_layer_freq"},
    "deepseek_v3": {"num_experts": "n_routed_experts", "moe_layer_pattern": "moe_layer_freq"},
}
_PERFLLM_KEYS = {
    "name": "model_name", "num_layers": "layer_num", "num_attention_heads": "head_num",
    "num_kv_heads": "kv_head_num", "head_dim": "head_size", "ffn_hidden_size": "intermediate_size",
    "num_experts": "expert_num", "moe_top_k": "topk", "num_dense_layers": "dense_layers",
    "shared_expert_ffn_hidden_size": "moe_shared_expert_intermediate_size",
    "qk_nope_head_dim": "qk_head_dim", "qk_rope_head_dim": "qk_pos_emb_head_dim",
    "activation": "use_swiglu", "attention": "attention_type",
}


def _source_key(field: str, data: dict, kind: str) -> str:
    """The file's key for ModelSpec `field` (`kind`: "hf", "perfllm" or "fields")."""
    if kind == "perfllm":
        return _PERFLLM_KEYS.get(field, field)
    if kind == "hf":
        arch = data.get("model_type")
        if arch not in HF_ARCHITECTURES:
            arch = next((_ARCH_BY_CLASS[c.lower()] for c in data.get("architectures") or []
                         if isinstance(c, str) and c.lower() in _ARCH_BY_CLASS), None)
        return _HF_KEYS_BY_ARCH.get(arch, {}).get(field) or _HF_KEYS.get(field, field)
    return field


def _from_perfllm(k: _Keys, name: str) -> ModelSpec:
    heads = k.int("head_num")
    kw: dict[str, Any] = dict(
        name=k.str("model_name", name), num_layers=k.int("layer_num"), hidden_size=k.int("hidden_size"),
        num_attention_heads=heads, num_kv_heads=k.int("kv_head_num", heads), head_dim=k.int("head_size", None),
        ffn_hidden_size=k.int("intermediate_size"), vocab_size=k.int("vocab_size"),
        activation="swiglu" if k.bool("use_swiglu", True) else "gelu", norm="rmsnorm",
        position_embedding="rope", tie_embeddings=False, add_bias_linear=False)
    if k.str("model_type") == "moe":
        shared = k.int("moe_shared_expert_intermediate_size", 0, min_value=0)
        kw.update(num_experts=k.int("expert_num"), moe_top_k=k.int("topk"),
                  moe_ffn_hidden_size=k.int("moe_ffn_hidden_size"), num_dense_layers=k.int("dense_layers", 0,
                                                                                           min_value=0),
                  num_shared_experts=1 if shared else 0, shared_expert_ffn_hidden_size=shared or None)
    if k.str("attention_type", "mha") == "mla":
        kw.update(attention="mla", head_dim=None, q_lora_rank=k.int("q_lora_rank", None),
                  kv_lora_rank=k.int("kv_lora_rank"), qk_nope_head_dim=k.int("qk_head_dim"),
                  qk_rope_head_dim=k.int("qk_pos_emb_head_dim"), v_head_dim=k.int("v_head_dim"))
    return ModelSpec(**kw)


def _default_name(path: Path) -> str:
    if path.stem == "config" and path.parent.name:
        return path.parent.name
    return path.stem


def model_from_mapping(data: dict, path: str | Path = "<model>") -> ModelSpec:
    """ModelSpec from an already-parsed mapping (HF config, PerfLLM model JSON or ModelSpec fields)."""
    from workload_gen.plan_validation import validate_model

    path = Path(path)
    k = _Keys(path, data)
    name = _default_name(path)
    if "model_type" in data and data.get("model_type") in ("dense", "moe") and "head_num" in data:
        kind = "perfllm"
        spec = _from_perfllm(k, name)
    elif "model_type" in data or "architectures" in data:
        kind = "hf"
        spec = _from_hf(k, name)
    else:
        kind = "fields"
        base = None
        if "base" in data:
            from workload_gen.zoo import get_model
            try:
                base = get_model(k.str("base"))
            except WorkloadError as e:
                raise k.err("base", str(e)) from None
        if base is None and "name" not in data:
            data = {"name": name, **data}
            k = _Keys(path, data)
        spec = _build(ModelSpec, k, base=base, skip=("base",))
    try:
        validate_model(spec)
    except WorkloadError as e:
        msg = str(e)
        key = _source_key(msg.split(":", 1)[0].removeprefix("model."), data, kind)
        raise ConfigFileError(f"{path}: key '{key}': {msg.split(':', 1)[1].strip()}") from None
    return spec


def load_model(path: str | Path) -> ModelSpec:
    """Load a model from a HF config.json, a PerfLLM model JSON or a YAML/JSON of ModelSpec fields."""
    p = Path(path)
    return model_from_mapping(read_mapping(p), p)


# ----------------------------------------------------------------------------------------- plans
_PERFLLM_PLAN_KEYS = {"tp_size", "pp_size", "ep_size", "cp_size", "micro_batch_num", "seq_len"}


def _plan_from_perfllm(k: _Keys) -> ParallelPlan:
    tp, pp, cp = k.int("tp_size", 1), k.int("pp_size", 1), k.int("cp_size", 1)
    world = k.int("world_size")
    mbs = k.int("micro_batch_size", 1)
    dp = max(1, world // (tp * cp * pp))
    recompute = "none"
    if k.bool("enable_recompute", False):
        gran = k.str("recompute_granularity", "full_block")
        if gran not in ("full_block", "selective_recompute"):
            raise k.err("recompute_granularity", f"expected full_block or selective_recompute, got {gran!r}")
        recompute = "full" if gran == "full_block" else "selective"
    dtype = k.str("dtype", "bf16")
    return ParallelPlan(
        world_size=world, tp=tp, pp=pp, cp=cp, ep=k.int("ep_size", 1), etp=k.int("etp_size", None),
        vpp=k.int("interleaving_size", 1), sequence_parallel=k.bool("enable_sequence_parallel", False),
        num_layers_first_stage=k.int("num_layers_in_first_pipeline_stage", None),
        num_layers_last_stage=k.int("num_layers_in_last_pipeline_stage", None),
        distributed_optimizer=k.int("zero_state", 0, min_value=0) >= 1, micro_batch_size=mbs,
        global_batch_size=mbs * k.int("micro_batch_num", 1) * dp, seq_length=k.int("seq_len"),
        dtype=dtype, recompute=recompute,
        recompute_num_layers=k.int("recompute_layer_num", None) if recompute == "full" else None,
        flash_attention=k.bool("use_flash_sdp", True))


def plan_from_mapping(data: dict, path: str | Path = "<plan>", *, model: ModelSpec | None = None) -> ParallelPlan:
    """ParallelPlan from an already-parsed mapping (type checks only; see validate_plan for the rules).

    A mapping without `seq_length` takes `model.seq_length` when `model` is given (else the plan default).
    """
    path = Path(path)
    if set(data) == {"plan"} and isinstance(data["plan"], dict):
        data = data["plan"]
    k = _Keys(path, data)
    if _PERFLLM_PLAN_KEYS & set(data):
        return _plan_from_perfllm(k)
    if model is not None and data.get("seq_length") is None:
        data = {**data, "seq_length": model.seq_length}
        k = _Keys(path, data)
    if "dp" in data:
        dp = k.int("dp")
        world = dp * k.int("tp", 1) * k.int("cp", 1) * k.int("pp", 1)
        if "world_size" in data and k.int("world_size") != world:
            raise k.err("dp", f"dp*tp*cp*pp = {world} disagrees with world_size={data['world_size']}")
        data = {**{key: v for key, v in data.items() if key != "dp"}, "world_size": world}
        k = _Keys(path, data)
    return _build(ParallelPlan, k)


def load_plan(path: str | Path, *, model: ModelSpec | None = None) -> ParallelPlan:
    """Load a plan from YAML/JSON (ParallelPlan field names, or a PerfLLM strategy JSON).

    Without a `seq_length` key the plan uses `model.seq_length` when `model` is given."""
    p = Path(path)
    return plan_from_mapping(read_mapping(p), p, model=model)
