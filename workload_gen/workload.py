"""The Workload: what every rank of one pipeline stage executes in one training iteration.

Compact by construction: one program per (pipeline stage, virtual chunk) for ONE micro-batch, plus
once-per-iteration prologue/epilogue ops. Its size depends on layers and stages, never on world size;
`sim` expands micro-batches (schedule kind in `Workload.schedule`) and concrete rank groups.

Conventions (SI units):
- ComputeOp.flops: floating-point operations of the kernel on one rank (multiply-add = 2 FLOPs).
- ComputeOp.bytes: bytes read + written from/to HBM by the kernel on one rank (ideal, no cache reuse).
- ComputeOp.saved_bytes: activation bytes this forward kernel keeps alive for the backward pass (per
  rank, per micro-batch), following Korthikanti et al. accounting; 0 for backward/optimizer kernels.
- CommOp.size_bytes follows nccl-tests' buffer size S: all-reduce/broadcast/reduce: the buffer;
  all-gather: the gathered output (shard x n); reduce-scatter: the unreduced input (shard x n);
  all-to-all: the bytes one rank sends in total (its own slice included); send/recv: the message.
- Ops of one list run in order on the rank's compute stream. A blocking CommOp stalls the stream until
  it completes; a non-blocking one runs on a communication stream and must finish before the op named
  by `wait_op` starts: the first later op in the same list with that name (names repeat across
  layers); None: before the end of the list it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from workload_gen.model import ModelSpec
    from workload_gen.plan import ParallelPlan

# Op kinds emitted by the generator and the shape fields each carries (all positive ints).
# compute_db keys its measurements on (kind, variant, shape, dtype). GEMM shapes are those of the
# product the kernel actually computes: for Y[m,n] = X[m,k] W[k,n], dgrad is (m, k, n) and wgrad (k, n, m).
COMPUTE_KINDS: dict[str, tuple[str, ...]] = {
    "gemm": ("m", "n", "k"),                         # Y[m,n] = X[m,k] @ W[k,n]; variant fwd|dgrad|wgrad
    "grouped_gemm": ("groups", "m", "n", "k"),       # m = tokens per group (mean); variant fwd|dgrad|wgrad
    "flash_attn": ("batch", "seq_q", "seq_kv", "heads", "kv_heads", "head_dim_qk", "head_dim_v"),  # fwd|bwd
    # decode attention of a batch (paged / flash-decoding, one query token per request): kv_tokens = cached
    # tokens read over all `batch` requests; MLA (absorbed) passes kv_heads=1, head_dim_qk=rope dim,
    # head_dim_v=kv_lora_rank so that K+V bytes are the latent's. fwd only (inference).
    "attn_decode": ("batch", "kv_tokens", "heads", "kv_heads", "head_dim_qk", "head_dim_v"),
    "attn_bmm": ("batch", "m", "n", "k"),             # unfused attention QK^T / PV batched GEMM
    "softmax": ("rows", "cols"),                     # fwd|bwd (unfused attention, router)
    "layernorm": ("tokens", "hidden"),               # fwd|bwd
    "rmsnorm": ("tokens", "hidden"),                 # fwd|bwd
    "gelu": ("tokens", "width"),                     # fwd|bwd
    "swiglu": ("tokens", "width"),                   # width = output width (input is 2x); fwd|bwd
    "rotary": ("tokens", "heads", "head_dim"),       # fwd|bwd
    "dropout": ("numel",),                           # fwd|bwd
    "embedding": ("tokens", "hidden", "vocab"),      # fwd (gather) | bwd (scatter-add)
    "cross_entropy": ("tokens", "vocab"),            # fwd|bwd (vocab = this rank's shard)
    "router_topk": ("tokens", "experts", "topk"),    # fwd|bwd
    "permute": ("tokens", "hidden", "topk"),         # token dispatch reorder; fwd|bwd
    "unpermute": ("tokens", "hidden", "topk"),       # combine reorder; fwd|bwd
    "elementwise": ("numel",),                       # residual add, bias, scale; fwd|bwd
    "optimizer": ("params",),                        # Adam step over this rank's fp32 shard
    "memcpy": ("bytes",),                            # device-to-device copy
}
COMPUTE_VARIANTS = ("fwd", "dgrad", "wgrad", "bwd", "step", "")

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "broadcast", "reduce",
               "send", "recv")

# Group kinds a CommOp runs over; sim turns them into concrete rank sets from the plan's rank order.
GROUP_KINDS = (
    "tp",         # tensor parallel
    "cp",         # context parallel
    "dp",         # data parallel (pure)
    "dp_cp",      # data x context parallel: dense-gradient reduction and optimizer sharding group
    "ep",         # expert parallel
    "etp",        # expert tensor parallel
    "edp",        # expert data parallel (expert-gradient reduction group)
    "pp",         # pipeline neighbours (send/recv peer given by CommOp.peer)
    "embedding",  # first and last pipeline stage (tied-embedding gradient all-reduce)
    "mp",         # model parallel (tp x pp [x cp]): gradient-norm all-reduce
)
# How group kinds roll up in reports (TP, CP, EP, DP, PP).
REPORT_GROUP = {"tp": "TP", "etp": "TP", "cp": "CP", "ep": "EP", "dp": "DP", "dp_cp": "DP", "edp": "DP",
                "pp": "PP", "embedding": "DP", "mp": "DP"}

PHASES = ("fwd", "bwd", "recompute", "iteration_start", "iteration_end")
MICROBATCH_SCOPE = ("all", "first", "last")


@dataclass(frozen=True, slots=True)
class ComputeOp:
    """A kernel of a stage program: shape, dtype, FLOPs and bytes moved (or a given time, s)."""
    name: str                           # e.g. "attn_qkv", "mlp_fc1" (stable, report-friendly)
    kind: str                           # key of COMPUTE_KINDS
    shape: tuple[tuple[str, int], ...]  # ordered (field, value) pairs per COMPUTE_KINDS[kind]
    dtype: str                          # "bf16" | "fp16" | "fp8" | "fp32"
    flops: float
    bytes: float
    variant: str = "fwd"
    layer: int = -1                     # global layer index; -1 outside transformer layers
    phase: str = "fwd"
    saved_bytes: int = 0
    microbatch: str = "all"             # "all" | "first" | "last"
    causal: bool = False                # attention kernels only
    time_s: float | None = None         # given duration (imported traces, e.g. SimAI files): compute_db
                                        # is not consulted when set

    @property
    def dims(self) -> dict[str, int]:
        return dict(self.shape)

    is_comm = False


@dataclass(frozen=True, slots=True)
class CommOp:
    """A collective or pipeline transfer of a stage program (size: nccl-tests buffer bytes)."""
    name: str                           # e.g. "attn_row_rs", "dp_grad_bucket3"
    collective: str                     # one of COLLECTIVES
    group: str                          # one of GROUP_KINDS
    size_bytes: int                     # nccl-tests buffer size S (see module docstring)
    layer: int = -1
    phase: str = "fwd"
    blocking: bool = True
    wait_op: str | None = None          # name of the first later op in the same list that waits for it
    peer: str | None = None             # send/recv: "next" | "prev" pipeline stage (pp group)
    microbatch: str = "all"             # "all" | "first" | "last" micro-batch of the iteration
    dtype: str = "bf16"

    is_comm = True


Op = ComputeOp | CommOp


@dataclass
class ChunkProgram:
    """One virtual pipeline chunk of a stage: the ops of one micro-batch's forward and backward."""
    chunk: int                          # virtual chunk index on this stage (0..vpp-1)
    layers: tuple[int, ...]             # global layer indices, in order
    forward: list[Op] = field(default_factory=list)
    backward: list[Op] = field(default_factory=list)   # recompute + dgrad + wgrad, in execution order


@dataclass
class StageProgram:
    """The ops one pipeline stage runs: its chunks' micro-batch programs and the per-iteration ops."""
    stage: int
    chunks: list[ChunkProgram] = field(default_factory=list)
    iteration_start: list[Op] = field(default_factory=list)  # once per iteration, before micro-batch 0
    iteration_end: list[Op] = field(default_factory=list)    # once per iteration, after the last backward
    pp_send_bytes: int = 0              # activation bytes one micro-batch sends to the next stage


@dataclass
class Workload:
    """A whole training iteration for every rank, compact (see module docstring)."""
    model: ModelSpec
    plan: ParallelPlan
    stages: list[StageProgram]
    schedule: str = "1f1b"              # "1f1b" | "interleaved" | "none" (pp == 1) | "gpipe"
    num_microbatches: int = 1
    meta: dict = field(default_factory=dict)   # provenance, generator version, notes

    FORMAT_VERSION = 1
