"""Layer placement, per-rank parameter counts and the kernels of a layer, from workload_gen.

workload_gen.layout / workload_gen.params / workload_gen.layers are the single source of truth (Megatron conventions: even
layer split with optional first/last-stage override, interleaved chunk j of stage i = virtual stage
j*pp + i; TP shards GEMM weights and the vocabulary; experts shard over EP then expert-TP).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class RankParams:
    """Parameters held by one rank of a stage (unsharded by DP/ZeRO)."""
    dense: int
    expert: int

    @property
    def total(self) -> int:
        return self.dense + self.expert


def layer_assignment(model, plan) -> list[list[tuple[int, ...]]]:
    """[stage][chunk] -> global layer ids."""
    from workload_gen.layout import layer_assignment as wl_assign
    return [[tuple(c) for c in st] for st in wl_assign(model, plan)]


def rank_params(model, plan, stage: int) -> RankParams:
    """Dense and expert parameters one rank of `stage` holds (workload_gen.params.stage_params)."""
    from workload_gen.params import stage_params
    sp = stage_params(model, plan, stage)
    return RankParams(int(sp.dense), int(sp.expert))


# ------------------------------------------------------------------------------------------------
# the kernels of a layer: workload_gen.layers' units, flattened for the analyses (no kernel knowledge here)
@dataclass
class LayerKernels:
    """One layer (or the embedding / head block) on one rank, per micro-batch, as workload_gen emits it.

    Built from `workload_gen.layers` units with no recompute policy applied; `fwd[i]` keeps the saved
    tensors `saved[i]` ((component, bytes), ...), holds `temp[i]` bytes while it runs and is re-run by
    the selective-recompute choice `group[i]` ("attn" | "mlp" | "norm" | "")."""
    fwd: list            # forward ComputeOps, in order
    saved: list[tuple[tuple[str, int], ...]]
    temp: list[int]
    group: list[str]
    bwd: list            # backward ComputeOps (dgrad, wgrad, *_bwd), in order
    fwd_comms: list      # forward CommOps
    bwd_comms: list      # backward CommOps

    def saved_bytes(self, drop: frozenset[str] = frozenset()) -> int:
        return sum(b for parts in self.saved for c, b in parts if c not in drop)

    def op_saved(self, i: int, drop: frozenset[str] = frozenset()) -> int:
        return sum(b for c, b in self.saved[i] if c not in drop)


def _flatten(units) -> LayerKernels:
    lk = LayerKernels([], [], [], [], [], [], [])
    for u in units:
        for op in u.fwd:
            if op.is_comm:
                lk.fwd_comms.append(op)
                continue
            lk.fwd.append(op)
            lk.saved.append(u.saved.get(op.name, ()))
            lk.temp.append(u.temp.get(op.name, 0))
            lk.group.append(u.recompute)
    for u in units:
        for op, _, _ in u.bwd:
            (lk.bwd_comms if op.is_comm else lk.bwd).append(op)
    return lk


def _layer_key(c) -> tuple:
    """Everything workload_gen.layers.layer_units reads besides the layer index (the Ctx sizes and
    the plan fields the unit builders consult): plans equal in these have identical layer kernels."""
    p = c.plan
    return (c.b, c.s, c.cp, c.t, c.sp, c.tokens, c.tokens_sp, c.h, c.act, c.gemm, c.dropout, c.flash, c.overlap,
            p.ep, p.expert_tp, p.cp_comm_type, p.moe_grouped_gemm)


class KernelCatalog:
    """The kernels of every layer kind of a (model, plan), built once each from workload_gen.layers.

    `shared`: a dict reused across plans of ONE model (plan search) so that plans that differ only in
    pipeline/data/recompute/optimizer fields reuse the layer kernels."""

    def __init__(self, model, plan, shared: dict | None = None):
        from workload_gen.layers import make_ctx
        self.model, self.plan = model, plan
        self.ctx = make_ctx(model, plan)
        self._layers: dict = shared if shared is not None else {}
        self._key = _layer_key(self.ctx)
        self._emb: LayerKernels | None = None
        self._head: LayerKernels | None = None

    def layer(self, layer: int) -> LayerKernels:
        """Layers of one kind (dense / MoE) have identical kernels on a rank: built once per kind."""
        key = (self.model.name, self._key, self.model.layer_is_moe(layer))
        lk = self._layers.get(key)
        if lk is None:
            from workload_gen.layers import layer_units
            lk = self._layers[key] = _flatten(layer_units(self.ctx, layer, drop=frozenset()))
        return lk

    def embedding(self) -> LayerKernels:
        if self._emb is None:
            from workload_gen.layers import embedding_train_units
            self._emb = _flatten(embedding_train_units(self.ctx))
        return self._emb

    def head(self) -> LayerKernels:
        if self._head is None:
            from workload_gen.layers import head_units
            self._head = _flatten(head_units(self.ctx))
        return self._head
