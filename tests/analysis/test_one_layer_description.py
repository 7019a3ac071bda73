"""One description of a layer (issue 16 item 4): memory analysis, plan search and the generator use the
same kernels and the same saved-activation accounting (workload_gen.layers), for every zoo model."""

from __future__ import annotations

from collections import Counter

import pytest

from sim.analysis.memory import (
    MemoryOptions,
    activations_from_workload,
    analyze_memory,
    layer_activation_bytes,
)
from sim.analysis.stagefacts import KernelCatalog
from workload_gen import generate
from workload_gen.errors import WorkloadError
from workload_gen.layers import COMPONENTS, attention_units, make_ctx, mlp_units
from workload_gen.plan import ParallelPlan
from workload_gen.plan_validation import validate_plan
from workload_gen.zoo import ZOO


def _plans(m) -> list[ParallelPlan]:
    """Valid TP/SP/CP/EP/recompute variants of a small deployment of `m` (pp 2 where the layers split)."""
    moe = m.num_experts > 0
    pp = 2 if m.num_layers % 2 == 0 else 1
    ep = 2 if moe else 1
    gelu = m.activation == "gelu"
    base = dict(global_batch_size=8, seq_length=2048, pp=pp)
    cands = [
        dict(base, world_size=2 * pp * ep, tp=2, ep=ep, sequence_parallel=True, recompute="selective"),
        dict(base, world_size=2 * pp, cp=2, recompute="full", recompute_num_layers=1),
        dict(base, world_size=4 * pp, tp=4, flash_attention=not gelu),                 # unfused for GPTs
        dict(base, world_size=4 * pp, tp=2, cp=2, cp_comm_type="a2a", sequence_parallel=True),
    ]
    if moe:
        cands += [dict(base, world_size=4 * pp, tp=2, ep=2, etp=2, sequence_parallel=True),
                  dict(base, world_size=2 * pp, ep=2, moe_grouped_gemm=False, recompute="selective")]
    if pp == 2 and m.num_layers % 4 == 0:
        cands.append(dict(base, world_size=4, tp=2, vpp=2, sequence_parallel=True, tp_comm_overlap=True))
    out = []
    for kw in cands:
        p = ParallelPlan(**kw)
        try:
            validate_plan(m, p)
        except WorkloadError:
            continue
        out.append(p)
    return out


CASES = [(name, p) for name, m in ZOO.items() for p in _plans(m)]


def test_every_zoo_model_has_at_least_two_plans():
    per = Counter(name for name, _ in CASES)
    assert set(per) == set(ZOO)
    assert min(per.values()) >= 2, per


def _generated_layer_ops(w, layer: int) -> Counter:
    out: Counter = Counter()
    for st in w.stages:
        for ch in st.chunks:
            for op in (*ch.forward, *ch.backward):
                if op.layer == layer and not op.is_comm and op.phase in ("fwd", "bwd"):
                    out[(op.name, op.variant, op.shape, op.dtype, op.flops, op.bytes)] += 1
    return out


def _key(op):
    return (op.name, op.variant, op.shape, op.dtype, op.flops, op.bytes)


@pytest.mark.parametrize("name,plan", CASES, ids=[f"{n}-{i}" for i, (n, _) in enumerate(CASES)])
def test_analysis_kernels_and_saved_bytes_equal_the_generators(name, plan):
    m = ZOO[name]
    w = generate(m, plan)
    cat = KernelCatalog(m, plan)
    layers = [x for st in w.stages for ch in st.chunks for x in ch.layers]
    picks = {m.layer_is_moe(x): x for x in layers}          # one dense and one MoE layer where present
    for layer in picks.values():
        lk = cat.layer(layer)
        ana = Counter(_key(op) for op in (*lk.fwd, *lk.bwd))
        gen = _generated_layer_ops(w, layer)
        assert ana == gen, (name, layer, gen - ana, ana - gen)
        # the same collectives (name, group, bytes) in the forward as the generator emits
        gen_comm = Counter((op.name, op.group, op.size_bytes) for st in w.stages for ch in st.chunks
                           for op in ch.forward if op.is_comm and op.layer == layer)
        assert Counter((op.name, op.group, op.size_bytes) for op in lk.fwd_comms) == gen_comm
    # saved activations per layer and per chunk: memory analysis (units, no workload) == generator
    from_wl = activations_from_workload(w)
    walk = analyze_memory(m, plan)
    wl = analyze_memory(m, plan, w)
    for a, b in zip(walk.stages, wl.stages):
        assert a.activation_per_layer_bytes == b.activation_per_layer_bytes, (name, a.stage)
        assert a.activation_per_chunk_bytes == b.activation_per_chunk_bytes, (name, a.stage)
    first = w.stages[0].chunks[0]
    layer = first.layers[-1]
    n_full = plan.recompute_num_layers or len(first.layers)
    full = plan.recompute == "full" and layer in first.layers[:n_full]
    assert layer_activation_bytes(m, plan, layer, full=full) == from_wl[(0, 0)][layer]


@pytest.mark.parametrize("name", ["gpt3-175b", "llama3-70b", "qwen3-235b-a22b", "deepseek-v3", "mixtral-8x7b"])
def test_saved_parts_add_up_and_use_known_components(name):
    """Every saving forward kernel carries its saved tensors tagged by recompute component."""
    m = ZOO[name]
    plan = ParallelPlan(world_size=4, tp=2, ep=2 if m.num_experts else 1, sequence_parallel=True,
                        global_batch_size=4, seq_length=2048, flash_attention=m.activation != "gelu")
    c = make_ctx(m, plan)
    layer = next(i for i in range(m.num_layers) if m.layer_is_moe(i) == bool(m.num_experts))
    for u in attention_units(c, layer) + mlp_units(c, layer):
        for op in u.fwd:
            if op.is_comm:
                continue
            parts = u.saved.get(op.name, ())
            assert sum(b for _, b in parts) == op.saved_bytes, op.name
            assert all(comp in COMPONENTS for comp, _ in parts), parts


def test_selective_component_choices_from_units_and_workload_agree_on_moe():
    m = ZOO["qwen3-30b-a3b"]
    plan = ParallelPlan(world_size=8, tp=2, ep=4, sequence_parallel=True, global_batch_size=8, seq_length=2048,
                        recompute="selective")
    w = generate(m, plan)
    for sel in (("attn",), ("mlp",), ("attn", "mlp", "norm")):
        opts = MemoryOptions(selective=sel)
        a = analyze_memory(m, plan, w, options=opts).stages[0].activation_per_layer_bytes
        b = analyze_memory(m, plan, options=opts).stages[0].activation_per_layer_bytes
        assert a == b, sel


@pytest.mark.slow
def test_search_best_plans_keep_their_order_when_simulated():
    """The analytical screen's ranking of the best plans holds when each is re-simulated (analytical
    network backend, event/fast-path simulator on the generated workload)."""
    import topo
    from sim import simulate
    from sim.analysis.search import SearchSpace, search

    m = ZOO["llama2-7b"]
    space = SearchSpace(tp=(1, 2, 4, 8), pp=(1, 2), vpp=(1,), cp=(1,), micro_batch_size=(1,),
                        recompute=("none", "selective", "full"), full_recompute_fractions=(1.0,),
                        optimizer=("distributed",))
    res = search(m, 16, 32, seq_length=4096, space=space, confirm=False, use_compute_db=True)
    assert len(res.ranked) >= 3
    # the best plan of each distinct (tp, pp, recompute) family, in screened order
    seen, top = set(), []
    for c in res.ranked:
        fam = (c.plan.tp, c.plan.pp, c.plan.recompute, c.plan.sequence_parallel)
        if fam not in seen:
            seen.add(fam)
            top.append(c)
        if len(top) == 3:
            break
    t = topo.build("spectrum-x", gpus=16)
    sims = [simulate(generate(m, c.plan), t, gpu="H100", network="analytical")
            .iteration_time_s for c in top]
    screened = [c.iteration_time_s for c in top]
    assert sorted(range(len(top)), key=lambda i: sims[i]) == list(range(len(top))), (screened, sims)


@pytest.mark.parametrize("name,ep,etp", [("mixtral-8x7b", 4, 1), ("deepseek-v3", 8, 1), ("qwen3-30b-a3b", 2, 2)])
def test_expert_load_form_of_moe_units_reduces_to_the_balanced_one(name, ep, etp):
    """Serving passes its expert load to the same builder (layers.moe_units); with the balanced load
    (every local expert gets the mean rows) it emits exactly the training kernels."""
    from workload_gen.layers import ExpertRows, moe_units
    m = ZOO[name]
    plan = ParallelPlan(world_size=2 * ep * etp, tp=2, ep=ep, etp=etp, sequence_parallel=True,
                        global_batch_size=8, seq_length=4096)
    c = make_ctx(m, plan)
    layer = next(i for i in range(m.num_layers) if m.layer_is_moe(i))
    local = m.num_experts // ep
    rows = ep * etp * c.tokens_sp * m.moe_top_k // m.num_experts
    load = ExpertRows(groups=local, rows=rows, act_rows=local * rows, work_rows=local * rows, work_sets=local,
                      a2a_copies=c.tokens_sp * m.moe_top_k)

    def ops(units):
        return [(op.name, op.shape if not op.is_comm else op.size_bytes, getattr(op, "flops", 0),
                 getattr(op, "bytes", 0), op.saved_bytes if not op.is_comm else 0)
                for u in units for op in (*u.fwd, *(e[0] for e in u.bwd))]
    assert ops(moe_units(c, layer, load)) == ops(moe_units(c, layer))
