"""ServingPlan: how a model is deployed for inference serving (the serving counterpart of ParallelPlan).

One dataclass is the single description of a deployment; the memory planner, the cost model, the
schedulers and the CLI all read it. Fields only (validation: `validate_serving_plan`).

Replicas are identical: each holds one copy of the model on tp x pp GPUs (tp ranks per pipeline stage);
`ep` > 1 spreads a MoE model's experts over the replica's tp ranks of a stage (ep == tp, vLLM's expert
parallel mode; the group may span servers) instead of sharding every expert's FFN width over them.
`expert_skew` makes expert popularity Zipf-distributed; a step waits for the hottest EP rank.
"""

from __future__ import annotations

from dataclasses import dataclass

SCHEDULERS = ("vllm", "sarathi", "orca", "faster_transformer", "lightllm")
ROUTERS = ("round_robin", "random", "least_outstanding")
WEIGHT_DTYPES = ("bf16", "fp16", "fp8")
KV_DTYPES = ("bf16", "fp16", "fp8")
KV_MODES = ("layerwise", "whole")        # disaggregated KV transfer (sim.serve.kv_transfer)


@dataclass(frozen=True)
class ServingPlan:
    tp: int = 1
    pp: int = 1
    ep: int = 1                          # 1 or tp (MoE only)
    expert_skew: float = 0.0             # MoE: Zipf exponent of expert popularity (0 = balanced routing;
                                         # workload_gen.expert_load)
    replicas: int = 1
    # --- precision ---
    weight_dtype: str = "bf16"           # GEMMs run in this dtype (fp8: fp8 GEMMs, bf16 activations)
    kv_dtype: str | None = None          # None: the activation dtype (fp16 if weight_dtype is fp16, else bf16)
    # --- schedulers (replica and global) ---
    scheduler: str = "sarathi"
    router: str = "round_robin"
    max_batch_size: int = 128            # requests per iteration (Vidur default 128)
    max_tokens_per_iteration: int = 4096  # vLLM max_num_batched_tokens (padded accounting, serving.md)
    chunk_size: int = 512                # Sarathi-Serve token budget per iteration
    block_size: int = 16                 # tokens per KV-cache block
    watermark_fraction: float = 0.01     # vLLM: blocks kept free when admitting a prompt
    max_waiting_iterations: int = 10     # LightLLM: decode iterations a waiting prefill may be delayed
    # --- memory ---
    num_blocks: int | None = None        # None: from the memory planner (sim.serve.memory)
    memory_margin_fraction: float = 0.1  # of GPU memory kept free (fragmentation, allocator slack)
    max_model_len: int | None = None     # None: the model's context length (ModelSpec.seq_length)

    @property
    def gpus_per_replica(self) -> int:
        return self.tp * self.pp

    @property
    def num_gpus(self) -> int:
        return self.gpus_per_replica * self.replicas

    @property
    def activation_dtype(self) -> str:
        return "fp16" if self.weight_dtype == "fp16" else "bf16"

    @property
    def kv_cache_dtype(self) -> str:
        return self.kv_dtype or self.activation_dtype
