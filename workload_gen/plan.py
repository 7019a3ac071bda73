"""ParallelPlan: how a model is split over a cluster and trained for one iteration.

Fields only plus cheap derived sizes; `validate_plan` (plan_validation.py) enforces every rule.
Defaults follow Megatron-LM / megatron-core as NeMo-era recipes run it: fp32 gradient reduction for
bf16/fp8 (16-bit for fp16, Megatron-LM's rule), gradient reduction and parameter gathers overlapped
with compute, batched pipeline p2p with its device synchronisation (megatron-core batch_p2p_sync).
Data-parallel size is derived: dp = world_size / (tp * cp * pp). Expert groups re-partition the
same tp*cp*dp ranks of a stage: ep * etp * edp = tp * cp * dp (Megatron MoE "expert-tensor-data").
"""

from __future__ import annotations

from dataclasses import dataclass

FRAMEWORKS = ("megatron", "deepspeed")
DTYPES = ("bf16", "fp16", "fp8")
RECOMPUTE = ("none", "selective", "full")
GRAD_REDUCE_DTYPES = ("auto", "fp32", "bf16", "fp16")
DEFAULT_RANK_ORDER = "tp-cp-ep-dp-pp"


def no_dp_overlap_fields(fields: dict, no_dp_overlap: bool) -> dict:
    """Apply a --no-dp-overlap switch (Megatron-LM 2021: no DP overlap at all) to plan field overrides:
    both overlap fields false; an explicit true for either contradicts it (PlanError naming the flags)."""
    if not no_dp_overlap:
        return fields
    for name in ("overlap_grad_reduce", "overlap_param_gather"):
        if fields.get(name):
            from workload_gen.errors import PlanError
            raise PlanError(f"--no-dp-overlap contradicts --{name.replace('_', '-')}")
    return {**fields, "overlap_grad_reduce": False, "overlap_param_gather": False}


@dataclass(frozen=True)
class ParallelPlan:
    """How a model is split over the cluster and trained for one iteration (see the module doc)."""
    world_size: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    etp: int | None = None                    # expert tensor parallel; None = tp
    vpp: int = 1                              # virtual pipeline (interleaved) chunks per stage
    sequence_parallel: bool = False
    num_layers_first_stage: int | None = None # uneven pipeline: layers on stage 0
    num_layers_last_stage: int | None = None  # uneven pipeline: layers on the last stage
    framework: str = "megatron"
    distributed_optimizer: bool = False       # Megatron ZeRO-1-like optimizer-state sharding
    zero_stage: int = 0                       # DeepSpeed ZeRO stage 0..3
    reduce_bucket_elements: int = 500_000_000     # DeepSpeed reduce_bucket_size (elements, as its flag)
    allgather_bucket_elements: int = 500_000_000  # DeepSpeed allgather_bucket_size (elements)
    grad_bucket_elements: int = 40_000_000        # Megatron DDP bucket size (elements)
    grad_reduce_dtype: str = "auto"           # gradient buffer + DP reduction dtype (see dp_comm.grad_reduce_dtype)
    overlap_grad_reduce: bool = True          # Megatron --overlap-grad-reduce: buckets reduced during backward
    overlap_param_gather: bool = True         # Megatron --overlap-param-gather (distributed optimizer)
    overlap_p2p_comm: bool = False            # megatron-core overlap_p2p_comm (interleaved only): no batch-p2p sync
    micro_batch_size: int = 1
    global_batch_size: int = 1024
    seq_length: int = 2048
    dtype: str = "bf16"
    recompute: str = "none"                   # "none" | "selective" | "full"
    recompute_num_layers: int | None = None   # full recompute: layers per stage recomputed (None = all)
    flash_attention: bool = True
    tp_comm_overlap: bool = False
    cp_comm_type: str = "p2p"                 # "p2p" (ring K/V exchange) | "a2a" (Ulysses all-to-all)
    moe_grouped_gemm: bool = True
    rank_order: str = DEFAULT_RANK_ORDER

    # ---- derived sizes (no validation here) ----
    @property
    def dp(self) -> int:
        return self.world_size // (self.tp * self.cp * self.pp)

    @property
    def expert_tp(self) -> int:
        return self.tp if self.etp is None else self.etp

    @property
    def edp(self) -> int:
        """Expert data-parallel size: ranks of a stage holding the same expert shard."""
        return (self.tp * self.cp * self.dp) // (self.ep * self.expert_tp)

    @property
    def num_microbatches(self) -> int:
        return self.global_batch_size // (self.micro_batch_size * self.dp)

    @property
    def ranks_per_stage(self) -> int:
        return self.world_size // self.pp
