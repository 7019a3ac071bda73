"""Mutable simulation entities of the serving engine: requests, batches, per-replica statistics, logs.

Token accounting (one request of P prompt tokens and D output tokens): output token 1 is produced by the
iteration that processes the last prompt token (its time is the TTFT point); token k+1 by a decode
iteration that processes token k (KV context P + k - 1 before it). A request completes when token D is
emitted; its KV cache then holds P + D - 1 tokens (the last token is never processed). A restart after
g >= 0 emitted tokens recomputes P + g tokens as a new prefill whose last chunk emits token g + 1
(tokens already emitted are never emitted again).

Disaggregated serving (sim.serve.disagg): a decode pool receives requests whose prompt was prefilled on
another replica (`Request.prefilled_elsewhere`): P prompt tokens already in the KV cache (the blocks are
allocated when the decode replica admits it) and output token 1 already emitted at the prefill's end;
the decode replica runs no prefill compute for it, only decodes (or a local recompute after a preemption).

Hot-path classes use __slots__ and plain attributes: the engine touches every running request once per
iteration, so attribute access is the cost that matters. Times are seconds from the start (t = 0);
timestamps not reached yet are -1.0.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field

from sim.serve.costs import BatchShape


class Request:
    """One inference request and its progress.

    prefill_target: tokens to prefill in the current attempt (P, or P + g after a restart);
    prefilled:      prefill tokens of the current attempt already processed (in the KV cache);
    kv_tokens:      tokens whose K/V are in the cache; generated: output tokens emitted so far;
    blocks / kv_cap: KV blocks held and the tokens they hold (blocks x block_size);
    exec_s:         time spent in running batches: sum over its batches of (batch end - batch formation);
    model_exec_s:   sum over its batches of the batch's stage times (compute + exposed comm of every stage);
    max_gap_s:      largest gap between two consecutive output tokens (0 while fewer than 2 tokens).
    kv_landed_s / decode_admitted_s: a request prefilled elsewhere: when its prompt's KV had fully
                    arrived at its decode replica, and when that replica admitted it (blocks allocated).
    """
    __slots__ = ("id", "arrived_at_s", "num_prefill", "num_decode", "replica",
                 "prefill_target", "prefilled", "kv_tokens", "generated", "blocks", "kv_cap", "in_flight",
                 "first_scheduled_s", "first_token_s", "last_token_s", "completed_s",
                 "exec_s", "model_exec_s", "restarts", "max_gap_s", "token_times", "kv_landed_s",
                 "decode_admitted_s")

    def __init__(self, id: int, arrived_at_s: float, num_prefill: int, num_decode: int) -> None:
        self.id = id
        self.arrived_at_s = arrived_at_s
        self.num_prefill = num_prefill
        self.num_decode = num_decode
        self.replica = -1
        self.prefill_target = num_prefill
        self.prefilled = 0
        self.kv_tokens = 0
        self.generated = 0
        self.blocks = 0
        self.kv_cap = 0
        self.in_flight = False
        self.first_scheduled_s = -1.0
        self.first_token_s = -1.0
        self.last_token_s = -1.0
        self.completed_s = -1.0
        self.exec_s = 0.0
        self.model_exec_s = 0.0
        self.restarts = 0
        self.max_gap_s = 0.0
        self.token_times: array | None = None
        self.kv_landed_s = -1.0
        self.decode_admitted_s = -1.0

    @classmethod
    def prefilled_elsewhere(cls, id: int, arrived_at_s: float, num_prefill: int, num_decode: int, *,
                            first_scheduled_s: float, first_token_s: float, exec_s: float = 0.0,
                            model_exec_s: float = 0.0, restarts: int = 0) -> Request:
        """A request whose prompt another replica prefilled: its P tokens are KV (no blocks held yet) and
        output token 1 was emitted at `first_token_s`; exec/model times and restarts carry over."""
        r = cls(id, arrived_at_s, num_prefill, num_decode)
        r.prefilled = r.kv_tokens = num_prefill
        r.generated = 1
        r.first_scheduled_s = first_scheduled_s
        r.first_token_s = r.last_token_s = first_token_s
        r.exec_s = exec_s
        r.model_exec_s = model_exec_s
        r.restarts = restarts
        return r

    @property
    def max_kv_tokens(self) -> int:
        """KV tokens held at the end (the last output token is never processed)."""
        return self.num_prefill + self.num_decode - 1

    def __repr__(self) -> str:
        return (f"Request(id={self.id}, P={self.num_prefill}, D={self.num_decode}, gen={self.generated}, "
                f"prefilled={self.prefilled}/{self.prefill_target}, kv={self.kv_tokens}, blocks={self.blocks})")


class Batch:
    """One iteration of one replica: prefill chunks (request, tokens) and one-token decodes.

    formed_s: when the replica scheduler formed it; start_s: stage 0 start; end_s: last stage end;
    model_time_s: sum of its stage times; tag: scheduler-private (e.g. the static batch it belongs to).
    """
    __slots__ = ("id", "replica", "prefills", "chunks", "decodes", "shape", "formed_s", "start_s", "end_s",
                 "model_time_s", "tag")

    def __init__(self, prefills: list[Request], chunks: list[int], decodes: list[Request]) -> None:
        self.id = -1
        self.replica = -1
        self.prefills = prefills
        self.chunks = chunks
        self.decodes = decodes
        # offsets are read now, before the batch's tokens are added
        self.shape = BatchShape(tuple(zip(chunks, [r.prefilled for r in prefills])),
                                tuple([r.kv_tokens for r in decodes]))
        self.formed_s = -1.0
        self.start_s = -1.0
        self.end_s = -1.0
        self.model_time_s = 0.0
        self.tag = None

    @property
    def num_requests(self) -> int:
        return len(self.prefills) + len(self.decodes)

    def request_ids(self) -> list[int]:
        return [r.id for r in self.prefills] + [r.id for r in self.decodes]

    def __repr__(self) -> str:
        return (f"Batch(id={self.id}, replica={self.replica}, prefill={list(zip(self.request_ids(), self.chunks))}, "
                f"decode={[r.id for r in self.decodes]})")


class TokenGaps:
    """All time-between-tokens gaps, run-length encoded: `counts[i]` consecutive gaps equal to `values[i]`.

    Requests decoding together emit their tokens at one batch end and mostly share the previous emission
    time too, so one iteration adds one or a few runs instead of one float per request.
    """
    __slots__ = ("values", "counts", "cur", "cur_count")

    def __init__(self) -> None:
        self.values = array("d")
        self.counts = array("q")
        self.cur = -1.0
        self.cur_count = 0

    def add(self, gap_s: float, n: int = 1) -> None:
        if gap_s == self.cur:
            self.cur_count += n
        else:
            self.flush()
            self.cur, self.cur_count = gap_s, n

    def flush(self) -> None:
        if self.cur_count:
            self.values.append(self.cur)
            self.counts.append(self.cur_count)
        self.cur, self.cur_count = -1.0, 0

    @property
    def total(self) -> int:
        return sum(self.counts) + self.cur_count


@dataclass
class PrefilledRequests:
    """Input of a decode pool: requests prefilled elsewhere (`Request.prefilled_elsewhere`, each with
    num_decode >= 2), in the order they become ready (`ready_at_s` non-decreasing). The engine routes a
    request to a replica at its ready time and hands it to the KV hand-off (sim.serve.engine.KVHandoff),
    which reports when its KV has landed; without a hand-off it lands at once."""
    ready_at_s: list[float]
    requests: list[Request]
    source: str = ""


class ChunkLog:
    """Prefill chunks as the pipeline stages ran them: one row per (batch stage, prefilling request):
    request id, replica, stage, stage start (s), stage duration (s), chunk tokens."""
    __slots__ = ("request", "replica", "stage", "start_s", "dur_s", "tokens")

    def __init__(self) -> None:
        self.request = array("q")
        self.replica = array("i")
        self.stage = array("i")
        self.start_s = array("d")
        self.dur_s = array("d")
        self.tokens = array("q")

    def add(self, request: int, replica: int, stage: int, start_s: float, dur_s: float, tokens: int) -> None:
        self.request.append(request)
        self.replica.append(replica)
        self.stage.append(stage)
        self.start_s.append(start_s)
        self.dur_s.append(dur_s)
        self.tokens.append(tokens)

    def __len__(self) -> int:
        return len(self.request)


class BatchLog:
    """One row per completed batch, in completion order (compact typed arrays)."""
    __slots__ = ("id", "replica", "formed_s", "start_s", "end_s", "num_requests", "num_prefill_tokens",
                 "num_decodes", "model_time_s")

    def __init__(self) -> None:
        self.id = array("q")
        self.replica = array("i")
        self.formed_s = array("d")
        self.start_s = array("d")
        self.end_s = array("d")
        self.num_requests = array("i")
        self.num_prefill_tokens = array("q")
        self.num_decodes = array("i")
        self.model_time_s = array("d")

    def add(self, b: Batch) -> None:
        self.id.append(b.id)
        self.replica.append(b.replica)
        self.formed_s.append(b.formed_s)
        self.start_s.append(b.start_s)
        self.end_s.append(b.end_s)
        self.num_requests.append(b.num_requests)
        self.num_prefill_tokens.append(sum(b.chunks))
        self.num_decodes.append(len(b.decodes))
        self.model_time_s.append(b.model_time_s)

    def __len__(self) -> int:
        return len(self.id)


@dataclass
class ReplicaStats:
    """Per-replica accumulators (per pipeline stage where noted). FLOPs and bytes are per GPU of a stage.

    kv_t_s / kv_used_blocks: step function of KV blocks in use (a sample at every change).
    """
    replica: int
    num_stages: int
    num_blocks: int
    block_size: int
    busy_s: list[float] = field(default_factory=list)
    compute_s: list[float] = field(default_factory=list)
    comm_s: list[float] = field(default_factory=list)
    send_s: list[float] = field(default_factory=list)
    flops: list[float] = field(default_factory=list)
    hbm_bytes: list[float] = field(default_factory=list)
    num_batches: int = 0
    num_requests: int = 0
    preemptions: int = 0
    peak_used_blocks: int = 0
    kv_t_s: array = field(default_factory=lambda: array("d", [0.0]))
    kv_used_blocks: array = field(default_factory=lambda: array("q", [0]))

    def __post_init__(self) -> None:
        for name in ("busy_s", "compute_s", "comm_s", "send_s", "flops", "hbm_bytes"):
            if not getattr(self, name):
                setattr(self, name, [0.0] * self.num_stages)

    def sample_kv(self, t_s: float, used: int) -> None:
        if used == self.kv_used_blocks[-1]:
            return
        if used > self.peak_used_blocks:
            self.peak_used_blocks = used
        if self.kv_t_s[-1] == t_s:
            self.kv_used_blocks[-1] = used
        else:
            self.kv_t_s.append(t_s)
            self.kv_used_blocks.append(used)
