"""Cross-check per-rank parameter counts against megatron-core 0.16 model slices built on `meta`.

One gloo process group of world size 1 is initialised; the TP/PP/EP/ETP sizes of a slice are given to
megatron-core through a ProcessGroupCollection of stand-in groups that only report size() and rank()
(model construction needs nothing else). Layers are built from megatron-core's local (non-TE) specs.
Test-only patch: the local MLA spec shards the low-rank down-projections over TP, while production
Megatron (Transformer-Engine spec) builds them duplicated, which is what clustersim models; a stand-in
`TELinear` (a plain replicated weight) lets the local spec build them duplicated too. Three more
patches for MLA only: the q projection asks parallel_state (not the collection) for its TP group, the
rotary table asks for the current CUDA device, and the local core attention rejects MLA's k_channels
argument (core attention has no parameters, so a parameter-free stand-in is exact).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import warnings

import pytest

from workload_gen.model import ModelSpec
from workload_gen.params import stage_params
from workload_gen.plan import ParallelPlan
from workload_gen.vocab import padded_vocab_size

pytestmark = pytest.mark.slow   # ~5 s importing megatron-core; each case < 0.5 s

# Skip only when the `aiob`/`test` extra is not installed at all; an installed but broken torch or
# megatron-core must fail here, not turn the acceptance cross-check into a silent skip.
if importlib.util.find_spec("torch") is None or importlib.util.find_spec("megatron") is None:
    pytest.skip("torch / megatron-core not installed (pip install -e '.[test]')", allow_module_level=True)
import megatron.core  # noqa: E402,F401
import torch  # noqa: E402


class _Group:
    """Stand-in process group: megatron-core sizes its shards from group.size() / group.rank()."""

    def __init__(self, size: int, rank: int = 0):
        self._size, self._rank = size, rank

    def size(self) -> int:
        return self._size

    def rank(self) -> int:
        return self._rank


@pytest.fixture(scope="module")
def mcore():
    import torch.distributed as dist

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
        from megatron.core.models.gpt.gpt_model import GPTModel
        from megatron.core.process_groups_config import ProcessGroupCollection
        from megatron.core.transformer import multi_latent_attention as mla_mod
        from megatron.core.transformer.transformer_config import MLATransformerConfig, TransformerConfig

    started = False
    if not dist.is_initialized():
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.close()
        os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=0, world_size=1)
        started = True

    class DuplicatedLinear(torch.nn.Module):
        """Replicated (TP-duplicated) linear layer, as TE's TELinear(parallel_mode='duplicated')."""

        def __init__(self, input_size, output_size, *, config, bias=False, **_):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.empty(output_size, input_size))
            self.bias = torch.nn.Parameter(torch.empty(output_size)) if bias else None

    class ParameterFreeAttention(torch.nn.Module):
        """Core attention holds no parameters; the local DotProductAttention rejects MLA's k_channels."""

        def __init__(self, *args, **kwargs):
            super().__init__()

    from megatron.core.tensor_parallel import layers as tp_layers

    ns = dict(tp_layers=tp_layers, NoAttn=ParameterFreeAttention, GPTModel=GPTModel, PGC=ProcessGroupCollection, block_spec=get_gpt_decoder_block_spec,
              TC=TransformerConfig, MLATC=MLATransformerConfig, mla_mod=mla_mod, Dup=DuplicatedLinear)
    yield ns
    if started:
        dist.destroy_process_group()


def _pgs(mc, plan: ParallelPlan, stage: int):
    import dataclasses

    pg = mc["PGC"]()
    for f in dataclasses.fields(pg):
        setattr(pg, f.name, _Group(1))
    pg.tp_dp_cp = _Group(1)
    pg.tp = _Group(plan.tp)
    pg.pp = _Group(plan.pp, stage)
    pg.ep = _Group(plan.ep)
    pg.expt_tp = _Group(plan.expert_tp)
    pg.tp_ep = _Group(plan.expert_tp * plan.ep)
    pg.mp = _Group(plan.tp * plan.pp)
    pg.embd = None      # megatron-core: "set it to None" when the tied-copy all-reduce is not wanted
    return pg


def _config(mc, model: ModelSpec, plan: ParallelPlan):
    import torch.nn.functional as F

    kw = dict(
        num_layers=model.num_layers, hidden_size=model.hidden_size,
        num_attention_heads=model.num_attention_heads, ffn_hidden_size=model.ffn_hidden_size,
        normalization="RMSNorm" if model.norm == "rmsnorm" else "LayerNorm",
        gated_linear_unit=model.gated_mlp, activation_func=F.silu if model.gated_mlp else F.gelu,
        add_bias_linear=model.add_bias_linear, add_qkv_bias=model.add_qkv_bias,
        qk_layernorm=model.qk_layernorm or model.is_mla,
        tensor_model_parallel_size=plan.tp, pipeline_model_parallel_size=plan.pp,
        pipeline_dtype=torch.float32, expert_model_parallel_size=plan.ep,
        expert_tensor_parallel_size=plan.expert_tp,
        num_layers_in_first_pipeline_stage=plan.num_layers_first_stage,
        num_layers_in_last_pipeline_stage=plan.num_layers_last_stage,
        use_cpu_initialization=True, perform_initialization=False)
    if plan.vpp > 1:
        kw["virtual_pipeline_model_parallel_size"] = plan.vpp
    if not model.is_mla:
        kw.update(num_query_groups=model.kv_heads, kv_channels=model.head_size)
    if model.is_moe:
        kw.update(num_moe_experts=model.num_experts, moe_router_topk=model.moe_top_k,
                  moe_ffn_hidden_size=model.expert_ffn_hidden_size, moe_grouped_gemm=False,
                  moe_layer_freq=[int(model.layer_is_moe(i)) for i in range(model.num_layers)])
        if model.num_shared_experts:
            kw["moe_shared_expert_intermediate_size"] = model.shared_expert_total_ffn
    if model.is_mla:
        kw.update(multi_latent_attention=True, q_lora_rank=model.q_lora_rank,
                  kv_lora_rank=model.kv_lora_rank, qk_head_dim=model.qk_nope_head_dim,
                  qk_pos_emb_head_dim=model.qk_rope_head_dim, v_head_dim=model.v_head_dim,
                  rope_type="rope")
        return mc["MLATC"](**kw)
    return mc["TC"](**kw)


def _megatron_stage_numel(mc, model: ModelSpec, plan: ParallelPlan, stage: int, monkeypatch) -> tuple[int, int]:
    """(non-expert, expert) parameter numel of one rank of `stage`, summed over its virtual chunks."""
    if model.is_mla:
        monkeypatch.setattr(mc["mla_mod"], "TELinear", mc["Dup"])
        # MLA builds its rotary table on the current CUDA device; this CPU-only torch has none.
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
        # MLA's q projection (q_lora_rank None) is built without a tp_group and falls back to the global
        # parallel_state group, which a world-size-1 run cannot size; hand it the slice's TP group.
        pgs = _pgs(mc, plan, stage)
        monkeypatch.setattr(
            mc["tp_layers"], "get_tensor_model_parallel_group_if_none",
            lambda tp_group, is_expert=False, check_initialized=True:
                tp_group if tp_group is not None else (pgs.expt_tp if is_expert else pgs.tp))
    cfg = _config(mc, model, plan)
    vocab = padded_vocab_size(model.vocab_size, plan.tp, model.make_vocab_size_divisible_by)
    dense = expert = 0
    for chunk in range(plan.vpp):
        vp = chunk if plan.vpp > 1 else None
        spec = mc["block_spec"](cfg, use_transformer_engine=False, vp_stage=vp, pp_rank=stage)
        if model.is_mla:
            for layer_spec in spec.layer_specs:
                sub = layer_spec.submodules.self_attention.submodules
                sub.linear_q_down_proj = mc["Dup"]
                sub.linear_kv_down_proj = mc["Dup"]
                sub.core_attention = mc["NoAttn"]
        with torch.device("meta"):
            gpt = mc["GPTModel"](
                cfg, spec, vocab_size=vocab, max_sequence_length=model.seq_length,
                pre_process=stage == 0 and chunk == 0,
                post_process=stage == plan.pp - 1 and chunk == plan.vpp - 1,
                share_embeddings_and_output_weights=model.tie_embeddings,
                position_embedding_type="learned_absolute" if model.position_embedding == "learned" else "rope",
                pg_collection=_pgs(mc, plan, stage), vp_stage=vp)
        for name, p in gpt.named_parameters():
            if ".experts." in name:
                expert += p.numel()
            else:
                dense += p.numel()
    return dense, expert


GPT = ModelSpec(name="tiny-gpt", num_layers=8, hidden_size=64, num_attention_heads=8, ffn_hidden_size=256,
                vocab_size=1000, seq_length=128)
LLAMA = ModelSpec(name="tiny-llama", num_layers=8, hidden_size=64, num_attention_heads=8, num_kv_heads=4,
                  ffn_hidden_size=176, vocab_size=1003, seq_length=128, activation="swiglu", norm="rmsnorm",
                  position_embedding="rope", tie_embeddings=False, add_bias_linear=False, add_qkv_bias=True)
MIXTRAL = ModelSpec(name="tiny-mixtral", num_layers=4, hidden_size=64, num_attention_heads=8, num_kv_heads=2,
                    ffn_hidden_size=96, vocab_size=1000, seq_length=128, activation="swiglu", norm="rmsnorm",
                    position_embedding="rope", tie_embeddings=False, add_bias_linear=False,
                    num_experts=8, moe_top_k=2, moe_ffn_hidden_size=96)
DEEPSEEK = ModelSpec(name="tiny-deepseek", num_layers=4, hidden_size=64, num_attention_heads=4,
                     ffn_hidden_size=192, vocab_size=999, seq_length=128, activation="swiglu", norm="rmsnorm",
                     position_embedding="rope", tie_embeddings=False, add_bias_linear=False,
                     attention="mla", q_lora_rank=48, kv_lora_rank=32, qk_nope_head_dim=16,
                     qk_rope_head_dim=8, v_head_dim=16, num_experts=8, moe_top_k=2, moe_ffn_hidden_size=32,
                     num_shared_experts=2, num_dense_layers=1)
DEEPSEEK_LITE = ModelSpec(**{**DEEPSEEK.__dict__, "name": "tiny-deepseek-lite", "q_lora_rank": None})
QWEN3 = ModelSpec(**{**MIXTRAL.__dict__, "name": "tiny-qwen3moe", "head_dim": 16, "qk_layernorm": True,
                     "moe_ffn_hidden_size": 48, "moe_layer_freq": 2})

CASES = [
    # (model, plan kwargs)
    (GPT, dict(world_size=1)),
    (GPT, dict(world_size=4, tp=4)),
    (GPT, dict(world_size=4, tp=2, pp=2)),
    (GPT, dict(world_size=8, tp=2, pp=4, vpp=2)),
    (GPT, dict(world_size=2, pp=2, num_layers_first_stage=3)),
    (LLAMA, dict(world_size=4, tp=4)),
    (LLAMA, dict(world_size=4, tp=2, pp=2)),
    (LLAMA, dict(world_size=8, tp=2, pp=4, num_layers_first_stage=1, num_layers_last_stage=3)),
    (LLAMA, dict(world_size=8, tp=2, pp=4, vpp=2, num_layers_first_stage=2, num_layers_last_stage=2)),
    (MIXTRAL, dict(world_size=4, tp=1, ep=4)),
    (MIXTRAL, dict(world_size=8, tp=2, pp=2, ep=2, sequence_parallel=True)),
    (MIXTRAL, dict(world_size=8, tp=2, ep=4, etp=1, sequence_parallel=True)),
    (QWEN3, dict(world_size=8, tp=2, pp=2, ep=2, etp=1, sequence_parallel=True)),
    (DEEPSEEK, dict(world_size=4, tp=1, ep=4)),
    (DEEPSEEK, dict(world_size=8, tp=2, pp=2, ep=2, etp=2, sequence_parallel=True)),
    (DEEPSEEK_LITE, dict(world_size=8, tp=4, pp=2, ep=4, etp=1, sequence_parallel=True)),
]


@pytest.mark.parametrize("model,kw", CASES, ids=[f"{m.name}-{'-'.join(f'{k}{v}' for k, v in kw.items())}"
                                               for m, kw in CASES])
def test_stage_params_match_megatron_core(mcore, model, kw, monkeypatch):
    from workload_gen.plan_validation import validate_plan

    plan = ParallelPlan(global_batch_size=64, **kw)
    validate_plan(model, plan)
    for stage in range(plan.pp):
        ours = stage_params(model, plan, stage)
        dense, expert = _megatron_stage_numel(mcore, model, plan, stage, monkeypatch)
        assert (ours.dense, ours.expert) == (dense, expert), f"stage {stage}"


@pytest.mark.parametrize("model", [GPT, LLAMA], ids=["learned-positions", "rope"])
def test_embedding_tp_collective_matches_megatron_core(mcore, model):
    """With SP megatron-core reduce-scatters the word embedding only without learned positions
    (LanguageModelEmbedding.reduce_scatter_embeddings); otherwise it all-reduces and splits. The
    embedding is built alone: the local (non-TE) layer spec cannot build norms with SP."""
    from megatron.core.models.common.embeddings.language_model_embedding import LanguageModelEmbedding

    from workload_gen.generator import generate

    plan = ParallelPlan(world_size=2, tp=2, sequence_parallel=True, global_batch_size=2, seq_length=128)
    cfg = _config(mcore, model, plan)
    cfg.sequence_parallel = True
    vocab = padded_vocab_size(model.vocab_size, plan.tp, model.make_vocab_size_divisible_by)
    with torch.device("meta"):
        emb = LanguageModelEmbedding(
            cfg, vocab_size=vocab, max_sequence_length=model.seq_length,
            position_embedding_type="learned_absolute" if model.position_embedding == "learned" else "rope",
            tp_group=_Group(plan.tp))
    fwd = [op for op in generate(model, plan).stages[0].chunks[0].forward if op.is_comm and op.layer == -1
           and op.name.startswith("embedding")]
    assert [op.collective for op in fwd] == (["reduce_scatter"] if emb.reduce_scatter_embeddings
                                             else ["all_reduce"])
    assert emb.reduce_scatter_embeddings == (model.position_embedding != "learned")


UNEVEN_VPP = [
    # (layers, pp, vpp, first, last)
    (12, 3, 2, 2, 2),
    (16, 4, 2, 2, None),
    (14, 4, 2, None, 2),
    (26, 4, 3, 3, 5),              # refused by megatron-core too: 5 not divisible by 3
    (30, 4, 2, 4, 2),
    (13, 3, 1, 5, None),
]


@pytest.mark.parametrize("layers,pp,vpp,first,last", UNEVEN_VPP)
def test_uneven_pipeline_with_vpp_matches_megatron_core(mcore, layers, pp, vpp, first, last):
    """Layer ids per (pipeline rank, virtual stage) equal megatron-core's offset + count, and a split
    megatron-core's TransformerConfig refuses is refused by validate_plan (one line naming a field)."""
    import torch.nn.functional as F
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    from workload_gen.errors import PlanError
    from workload_gen.layout import layer_assignment
    from workload_gen.plan_validation import validate_plan

    model = ModelSpec(**{**LLAMA.__dict__, "num_layers": layers})
    plan = ParallelPlan(world_size=pp, pp=pp, vpp=vpp, num_layers_first_stage=first, num_layers_last_stage=last,
                        global_batch_size=pp * 2)
    kw = dict(num_layers=layers, hidden_size=64, num_attention_heads=4, ffn_hidden_size=128,
              pipeline_model_parallel_size=pp, pipeline_dtype=torch.float32, activation_func=F.silu,
              num_layers_in_first_pipeline_stage=first, num_layers_in_last_pipeline_stage=last)
    if vpp > 1:
        kw["virtual_pipeline_model_parallel_size"] = vpp
    try:
        cfg = mcore["TC"](**kw)
    except ValueError:
        with pytest.raises(PlanError) as e:
            validate_plan(model, plan)
        assert str(e.value).split(":")[0] in ("plan.num_layers_first_stage", "plan.num_layers_last_stage",
                                              "plan.vpp")
        return
    validate_plan(model, plan)
    ours = layer_assignment(model, plan)
    for rank in range(pp):
        for v in range(vpp):
            vp = v if vpp > 1 else None
            off = get_transformer_layer_offset(cfg, vp_stage=vp, pp_rank=rank)
            n = get_num_layers_to_build(cfg, vp_stage=vp, pp_rank=rank)
            assert ours[rank][v] == tuple(range(off, off + n)), f"rank {rank} vp {v}"
