"""Load models and plans from files.

Models: HuggingFace `config.json` (model_type / architectures llama, mistral, mixtral, qwen2, qwen2_moe,
qwen3, qwen3_moe, qwen3_next, deepseek, deepseek_v2, deepseek_v3), SimuMax (PerfLLM) model JSON
(`head_num`, `layer_num`, ...; `model_type` "dense"|"moe", absent = dense) or a YAML/JSON mapping of
ModelSpec field names (optionally `base: <zoo name>` to override a zoo model).
Plans: a YAML/JSON mapping of ParallelPlan field names (optionally nested under `plan:`; `dp` may replace
`world_size`), or a SimuMax strategy JSON (`tp_size`, `pp_size`, ...).

Every malformed file raises ConfigFileError "<file>: key '<key>': <what is wrong>". Keys read with a
meaning that differs from the file's tool, or that clustersim cannot model, give a CompatibilityWarning
(one line naming file and key) or, for callers that collect them, a note.
HF mapping notes (what is approximated): all supported HF architectures use gated MLPs (SwiGLU);
`attention_bias` maps to QKV biases (Llama's o_proj bias, `hidden` params per layer, is not represented);
`seq_length` = min(max_position_embeddings, 8192) (it only matters for learned positions, which these
architectures do not use; the plan's seq_length drives the workload). MoE fields are read under every
alias of `_HF_MOE_ALIASES` for every architecture; a config with MoE keys but no expert count is an
error, never a dense model. Qwen2-MoE / Qwen3-Next shared-expert gates (hidden x 1) are not counted.
qwen3_next: all layers modelled as full GQA attention (its Gated DeltaNet linear-attention layers and
the attention output gate are not; a CompatibilityWarning says so).
"""

from __future__ import annotations

import dataclasses
import json
import warnings
from pathlib import Path
from typing import Any

import yaml

from workload_gen.errors import ConfigFileError, WorkloadError
from workload_gen.model import ModelSpec
from workload_gen.plan import ParallelPlan

HF_ARCHITECTURES = {
    "llama": "LlamaForCausalLM", "mistral": "MistralForCausalLM", "mixtral": "MixtralForCausalLM",
    "qwen2": "Qwen2ForCausalLM", "qwen2_moe": "Qwen2MoeForCausalLM", "qwen3": "Qwen3ForCausalLM",
    "qwen3_moe": "Qwen3MoeForCausalLM", "qwen3_next": "Qwen3NextForCausalLM",
    "deepseek": "DeepseekForCausalLM", "deepseek_v2": "DeepseekV2ForCausalLM", "deepseek_v3": "DeepseekV3ForCausalLM",
}
_ARCH_BY_CLASS = {v.lower(): k for k, v in HF_ARCHITECTURES.items()}
_SEQ_CAP = 8192
_MLA_ARCHS = ("deepseek_v2", "deepseek_v3")
_QK_NORM_ARCHS = ("qwen3", "qwen3_moe", "qwen3_next")
_QKV_BIAS_ARCHS = ("qwen2", "qwen2_moe")           # HF Qwen2 has q/k/v biases and no attention_bias key
_EXPERT_WIDTH_IS_FFN = ("llama", "mistral", "mixtral")  # intermediate_size is each expert's width
# HF key aliases of the MoE fields across DeepSeek / Qwen / Mixtral releases and tools that rewrite them
# (SimAI's DeepSeek-V3 config says num_routed_experts). The first non-zero alias names the value; any
# other non-zero alias must agree with it. "shared_total": width of the fused shared-expert MLP.
_HF_MOE_ALIASES = {
    "num_experts": ("n_routed_experts", "num_routed_experts", "num_local_experts", "num_experts",
                    "moe_num_experts"),
    "moe_top_k": ("num_experts_per_tok", "moe_top_k", "moe_router_topk", "moe_topk"),
    "moe_ffn_hidden_size": ("moe_intermediate_size", "moe_ffn_hidden_size", "expert_intermediate_size"),
    "num_shared_experts": ("n_shared_experts", "num_shared_experts"),
    "shared_total": ("shared_expert_intermediate_size", "moe_shared_expert_intermediate_size"),
}


class CompatibilityWarning(UserWarning):
    """A file key read differently from its tool's meaning, inert there too, or not modelled (one line)."""


def _note(notes: list[str] | None, text: str) -> None:
    """Hand a compatibility note to the caller's list, or warn when the caller collects none."""
    if notes is not None:
        notes.append(text)
    else:
        warnings.warn(text, CompatibilityWarning, stacklevel=4)


# ----------------------------------------------------------------------------------------- reading
def read_mapping(path: Path) -> dict:
    """Top-level mapping of a JSON (by suffix) or YAML file; ConfigFileError naming file:line otherwise."""
    try:
        text = path.read_text()
    except OSError as e:
        raise ConfigFileError(f"{path}: cannot read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a text file (not UTF-8)") from None
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


def _alias(k: _Keys, field: str) -> tuple[str | None, int]:
    """(file key, value) of the first alias of MoE `field` present with a non-zero value; (None, 0) if none.

    Every alias present must be an integer >= 0 and the non-zero ones must agree."""
    found: tuple[str | None, int] = (None, 0)
    for key in _HF_MOE_ALIASES[field]:
        v = k.int(key, 0, min_value=0)
        if not v:
            continue
        if found[0] is None:
            found = (key, v)
        elif v != found[1]:
            raise k.err(key, f"disagrees with '{found[0]}' ({v} vs {found[1]})")
    return found


def _layer_list(k: _Keys, key: str, layers: int) -> list[int]:
    v = k.data.get(key) or []
    if not isinstance(v, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < layers
                                          for i in v):
        raise k.err(key, f"expected a list of layer indices in 0..{layers - 1}, got {v!r}")
    return v


def _hf_moe(k: _Keys, arch: str, layers: int) -> dict[str, Any]:
    """ModelSpec MoE fields of an HF config under any of the aliases in `_HF_MOE_ALIASES` ({} = dense).

    A config naming MoE fields (top-k, expert width, shared experts) without an expert count is an
    error naming those keys: it is never read as a dense model."""
    count_key, experts = _alias(k, "num_experts")
    if not experts:
        moe_keys = [key for f in ("moe_top_k", "moe_ffn_hidden_size", "num_shared_experts", "shared_total")
                    for key in _HF_MOE_ALIASES[f] if k.data.get(key)]
        if moe_keys:
            names = ", ".join(f"'{x}'" for x in moe_keys)
            raise ConfigFileError(
                f"{k.path}: key '{moe_keys[0]}': MoE keys ({names}) given but no expert count "
                f"(one of {', '.join(_HF_MOE_ALIASES['num_experts'])}); refusing to read it as a dense model")
        return {}
    topk_key, topk = _alias(k, "moe_top_k")
    if not topk:
        raise k.err(_HF_MOE_ALIASES["moe_top_k"][0], f"missing (the experts per token of the {experts} "
                                                     f"experts named by '{count_key}')")
    width_key, width = _alias(k, "moe_ffn_hidden_size")
    if not width:
        if arch not in _EXPERT_WIDTH_IS_FFN:
            raise k.err(_HF_MOE_ALIASES["moe_ffn_hidden_size"][0], f"missing (the expert width of {arch})")
        width = k.int("intermediate_size")       # Mixtral: intermediate_size is each expert's width
    _, n_shared = _alias(k, "num_shared_experts")
    total_key, shared_total = _alias(k, "shared_total")
    per_shared = None
    if shared_total:
        # HF builds one fused shared MLP of this width (Qwen2-MoE / Qwen3-Next)
        n_shared = n_shared or 1
        if shared_total % n_shared:
            raise k.err(total_key, f"must be a multiple of the {n_shared} shared experts, got {shared_total}")
        per_shared = shared_total // n_shared
    first_k = k.int("first_k_dense_replace", 0, min_value=0)
    step = k.int("decoder_sparse_step", 1)
    only = _layer_list(k, "mlp_only_layers", layers)
    freq = k.data.get("moe_layer_freq", 1)
    if isinstance(freq, list):               # Megatron-style per-layer pattern
        if len(freq) != layers or any(v not in (0, 1) or isinstance(v, bool) for v in freq):
            raise k.err("moe_layer_freq", f"expected an integer or one 0/1 per layer ({layers}), got {freq!r}")
        is_moe = [bool(v) for v in freq]
    else:
        freq = k.int("moe_layer_freq", 1)
        is_moe = [i % freq == 0 for i in range(layers)]
    # DeepSeek: i >= first_k_dense_replace and i % moe_layer_freq == 0; Qwen: (i+1) % decoder_sparse_step
    # == 0 and i not in mlp_only_layers. Only the keys a family writes differ from their defaults.
    pattern = tuple(int(m and i >= first_k and (i + 1) % step == 0 and i not in only)
                    for i, m in enumerate(is_moe))
    if not any(pattern):
        if first_k >= layers:
            raise k.err("first_k_dense_replace", f"must be below num_hidden_layers={layers} (got {first_k}): "
                                                 f"no layer would hold the {experts} experts")
        key = next((x for x in ("mlp_only_layers", "decoder_sparse_step", "moe_layer_freq") if k.data.get(x)),
                   count_key)
        raise k.err(key, f"leaves no MoE layer for the {experts} experts of '{count_key}'")
    kw: dict[str, Any] = dict(num_experts=experts, moe_top_k=topk, moe_ffn_hidden_size=width,
                              num_shared_experts=n_shared, shared_expert_ffn_hidden_size=per_shared,
                              num_dense_layers=min(first_k, layers))
    if pattern != tuple(int(i >= first_k) for i in range(layers)):
        kw["moe_layer_pattern"] = pattern
    return kw


def _qwen3_next_attention(k: _Keys, layers: int, extra: dict) -> None:
    """Record (and warn about) what of Qwen3-Next's hybrid attention is modelled."""
    types = k.data.get("layer_types")
    if isinstance(types, list) and len(types) == layers and all(isinstance(t, str) for t in types):
        full = sum(t == "full_attention" for t in types)
    else:
        interval = k.int("full_attention_interval", 4)
        full = sum((i + 1) % interval == 0 for i in range(layers))
    extra["attention_layers"] = {"full_attention": full, "linear_attention": layers - full}
    note = (f"{k.path}: qwen3_next: all {layers} layers are modelled as full GQA attention with the config's "
            f"head_dim, heads and KV heads; its {layers - full} Gated DeltaNet linear-attention layers (O(s) "
            f"state, own projections) and the output gate of the {full} gated-attention layers are not "
            f"modelled (attention FLOPs overestimated, attention weights approximated)")
    extra["approximations"] = [note]
    warnings.warn(note, CompatibilityWarning, stacklevel=4)


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
        add_bias_linear=False, add_qkv_bias=k.bool("attention_bias", arch in _QKV_BIAS_ARCHS),
        head_dim=k.int("head_dim", None), qk_layernorm=arch in _QK_NORM_ARCHS,
        ffn_hidden_size=k.int("intermediate_size"))
    act = k.str("hidden_act", "silu")
    if act not in ("silu", "swiglu", "swish"):
        raise k.err("hidden_act", f"only gated SiLU (SwiGLU) MLPs are supported for {arch}, got {act!r}")
    extra: dict[str, Any] = {"hf_model_type": arch}
    if arch in _MLA_ARCHS:
        kw.update(attention="mla", q_lora_rank=k.int("q_lora_rank", None), kv_lora_rank=k.int("kv_lora_rank"),
                  qk_nope_head_dim=k.int("qk_nope_head_dim"), qk_rope_head_dim=k.int("qk_rope_head_dim"),
                  v_head_dim=k.int("v_head_dim"), head_dim=None)
    kw.update(_hf_moe(k, arch, layers))
    if arch == "qwen3_next":
        _qwen3_next_attention(k, layers, extra)
    return ModelSpec(**kw, extra=extra)


# ModelSpec field -> the key of the source file that set it, so that a rule broken by a loaded file
# (e.g. KV heads not dividing the heads) names the key the user wrote, not clustersim's field name.
_HF_KEYS = {
    "num_layers": "num_hidden_layers", "num_kv_heads": "num_key_value_heads",
    "ffn_hidden_size": "intermediate_size", "num_dense_layers": "first_k_dense_replace",
    "seq_length": "max_position_embeddings", "tie_embeddings": "tie_word_embeddings",
    "add_qkv_bias": "attention_bias",
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
        aliases = {**_HF_MOE_ALIASES, "shared_expert_ffn_hidden_size": _HF_MOE_ALIASES["shared_total"],
                   "moe_layer_pattern": ("mlp_only_layers", "decoder_sparse_step", "moe_layer_freq")}
        present = [a for a in aliases.get(field, ()) if data.get(a) not in (None, 0, [])]
        if present:
            return present[0]
        if field == "moe_ffn_hidden_size":
            return "intermediate_size"          # Mixtral-style: the expert width is intermediate_size
        return _HF_KEYS.get(field, field)
    return field


# SimuMax (PerfLLM) model JSON keys that only an MoE model has
_SIMUMAX_MOE_KEYS = ("expert_num", "topk", "moe_ffn_hidden_size", "moe_shared_expert_intermediate_size")


def _is_simumax_model(data: dict) -> bool:
    """SimuMax's model JSON: `model_type` dense|moe, or its own key names (older files have no model_type)."""
    return data.get("model_type") in ("dense", "moe") or ("head_num" in data and "layer_num" in data)


def _from_perfllm(k: _Keys, name: str) -> ModelSpec:
    """SimuMax model JSON. `model_type` absent = "dense" (SimuMax's default; several shipped files omit
    it); `moe_ffn_hidden_size` absent = `intermediate_size` (Mixtral files); `head_size` is the per-head
    width; `moe_shared_expert_intermediate_size` the total shared-expert width (one fused MLP)."""
    mt = k.str("model_type", "dense")
    if mt not in ("dense", "moe"):
        raise k.err("model_type", f"expected 'dense' or 'moe', got {mt!r}")
    if mt == "dense":
        moe_keys = [key for key in _SIMUMAX_MOE_KEYS if k.data.get(key)]
        if moe_keys:
            said = "is 'dense'" if "model_type" in k.data else "is missing (SimuMax reads that as dense)"
            raise k.err("model_type", f"{said} but MoE keys {', '.join(moe_keys)} are given; "
                                      f"set \"model_type\": \"moe\" (refusing to drop the experts)")
    heads = k.int("head_num")
    kw: dict[str, Any] = dict(
        name=k.str("model_name", name), num_layers=k.int("layer_num"), hidden_size=k.int("hidden_size"),
        num_attention_heads=heads, num_kv_heads=k.int("kv_head_num", heads), head_dim=k.int("head_size", None),
        ffn_hidden_size=k.int("intermediate_size"), vocab_size=k.int("vocab_size"),
        activation="swiglu" if k.bool("use_swiglu", True) else "gelu", norm="rmsnorm",
        position_embedding="rope", tie_embeddings=False, add_bias_linear=False)
    if mt == "moe":
        shared = k.int("moe_shared_expert_intermediate_size", 0, min_value=0)
        kw.update(num_experts=k.int("expert_num"), moe_top_k=k.int("topk"),
                  moe_ffn_hidden_size=k.int("moe_ffn_hidden_size", None),
                  num_dense_layers=k.int("dense_layers", 0, min_value=0),
                  num_shared_experts=1 if shared else 0, shared_expert_ffn_hidden_size=shared or None)
    attn = k.str("attention_type", "mha")
    if attn not in ("mha", "gqa", "mla"):
        raise k.err("attention_type", f"expected 'mha' (covers GQA) or 'mla', got {attn!r}")
    if attn == "mla":
        kw.update(attention="mla", head_dim=None, q_lora_rank=k.int("q_lora_rank", None),
                  kv_lora_rank=k.int("kv_lora_rank"), qk_nope_head_dim=k.int("qk_head_dim"),
                  qk_rope_head_dim=k.int("qk_pos_emb_head_dim"), v_head_dim=k.int("v_head_dim"))
    extra: dict[str, Any] = {"source_format": "simumax"}
    if mt == "moe" and k.bool("moe_pad_expert_input_to_capacity", False):
        cap = k.data.get("capacity", 1)
        if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0:
            raise k.err("capacity", f"expected a positive number, got {cap!r}")
        if cap != 1:
            note = (f"{k.path}: key 'capacity': expert inputs padded to capacity factor {cap} are not modelled "
                    f"(experts get the balanced top-k share of tokens, = capacity factor 1)")
            extra["approximations"] = [note]
            warnings.warn(note, CompatibilityWarning, stacklevel=3)
    return ModelSpec(**kw, extra=extra)


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
    if _is_simumax_model(data):
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
_SIMUMAX_NET_KEYS = ("tp_net", "etp_net", "ep_net", "cp_net", "pp_net", "dp_net")


def _simumax_recompute(k: _Keys, notes: list[str] | None) -> tuple[str, int | None]:
    """(recompute, recompute_num_layers) under SimuMax's rule: a granularity acts only with
    `enable_recompute: true`, and `enable_recompute` acts only through a granularity. Either half alone is
    inert in SimuMax too: a note says so and the plan runs without recompute."""
    enable = k.bool("enable_recompute", False)
    gran = k.str("recompute_granularity", None)
    if gran is not None and gran not in ("full_block", "selective_recompute"):
        raise k.err("recompute_granularity", f"expected full_block or selective_recompute, got {gran!r}")
    n = k.int("recompute_layer_num", None, min_value=0)
    where = f"{k.path}: key"
    if gran is None:
        if enable:
            _note(notes, f"{where} 'enable_recompute': true without recompute_granularity names nothing to "
                         f"recompute (SimuMax's shipped no-recompute strategies read so); running without recompute")
        return "none", None
    if not enable:
        _note(notes, f"{where} 'recompute_granularity': {gran!r} is inert without \"enable_recompute\": true "
                     f"(SimuMax's rule); running without recompute")
        return "none", None
    if gran == "selective_recompute":
        if n:
            _note(notes, f"{where} 'recompute_layer_num': {n} with selective_recompute: clustersim recomputes "
                         f"the selected components in every layer (per-layer selective recompute is not modelled)")
        return "selective", None
    if n == 0:
        _note(notes, f"{where} 'recompute_layer_num': 0 recomputes no layer; running without recompute")
        return "none", None
    return "full", n        # None: every layer of each chunk


def _plan_from_perfllm(k: _Keys, notes: list[str] | None = None) -> ParallelPlan:
    """ParallelPlan of a SimuMax strategy JSON (meanings as SimuMax v1.2 reads them; see _simumax_recompute).

    Sequence parallel at tp_size 1 is inert (nothing to shard) and dropped with a note; `zero_state` 1
    = distributed optimizer, 2/3 = DeepSpeed ZeRO-2/3; `use_fp32_accum_grad` false = 16-bit main grads;
    `pp_comm_async` = overlapped interleaved p2p. `mem_factor`, the selective-recompute components and
    `enable_dropout` are not plan fields (sim.analysis.perfllm.load_strategy / PerfLLM read them)."""
    tp, pp, cp = k.int("tp_size", 1), k.int("pp_size", 1), k.int("cp_size", 1)
    world = k.int("world_size")
    mbs = k.int("micro_batch_size", 1)
    dp = max(1, world // (tp * cp * pp))
    recompute, rec_layers = _simumax_recompute(k, notes)
    dtype = k.str("dtype", "bf16")
    vpp = k.int("interleaving_size", 1)
    sp = k.bool("enable_sequence_parallel", False)
    if sp and tp == 1:
        sp = False
        _note(notes, f"{k.path}: key 'enable_sequence_parallel': inert at tp_size 1 (nothing to shard; SimuMax "
                     f"and Megatron run without it); running without sequence parallelism")
    zero = k.int("zero_state", 0, min_value=0)
    if zero > 3:
        raise k.err("zero_state", f"expected 0, 1, 2 or 3, got {zero}")
    fp32_grads = k.bool("use_fp32_accum_grad", None)
    grad_dtype = "auto" if fp32_grads is None else ("fp32" if fp32_grads else ("fp16" if dtype == "fp16" else "bf16"))
    overlap_p2p = bool(k.bool("pp_comm_async", False))
    if overlap_p2p and vpp == 1:
        overlap_p2p = False
        _note(notes, f"{k.path}: key 'pp_comm_async': only the interleaved schedule overlaps pipeline p2p "
                     f"(interleaving_size 1); running with synchronous p2p")
    policy = k.str("moe_dispatcher_policy", "all2all")
    if policy != "all2all":
        _note(notes, f"{k.path}: key 'moe_dispatcher_policy': {policy!r} is modelled as all-to-all dispatch")
    nets = [key for key in _SIMUMAX_NET_KEYS if key in k.data]
    if nets:
        _note(notes, f"{k.path}: key '{nets[0]}': {', '.join(nets)} not used; clustersim places each group on "
                     f"the topology by rank order (tp-cp-ep-dp-pp)")
    return ParallelPlan(
        world_size=world, tp=tp, pp=pp, cp=cp, ep=k.int("ep_size", 1), etp=k.int("etp_size", None),
        vpp=vpp, sequence_parallel=sp,
        num_layers_first_stage=k.int("num_layers_in_first_pipeline_stage", None),
        num_layers_last_stage=k.int("num_layers_in_last_pipeline_stage", None),
        framework="deepspeed" if zero >= 2 else "megatron", distributed_optimizer=zero == 1,
        zero_stage=zero if zero >= 2 else 0, micro_batch_size=mbs,
        global_batch_size=mbs * k.int("micro_batch_num", 1) * dp, seq_length=k.int("seq_len"),
        dtype=dtype, recompute=recompute, recompute_num_layers=rec_layers,
        flash_attention=k.bool("use_flash_sdp", True), grad_reduce_dtype=grad_dtype,
        overlap_p2p_comm=overlap_p2p)


def plan_from_mapping(data: dict, path: str | Path = "<plan>", *, model: ModelSpec | None = None,
                      notes: list[str] | None = None) -> ParallelPlan:
    """ParallelPlan from an already-parsed mapping (type checks only; see validate_plan for the rules).

    A mapping without `seq_length` takes `model.seq_length` when `model` is given (else the plan default).
    `notes`: a list collecting one-line compatibility notes of a SimuMax strategy (None: warn them).
    """
    path = Path(path)
    if set(data) == {"plan"} and isinstance(data["plan"], dict):
        data = data["plan"]
    k = _Keys(path, data)
    if _PERFLLM_PLAN_KEYS & set(data):
        return _plan_from_perfllm(k, notes)
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
