"""Stub cost models (closed-form stage times) and invariant checks for the serving-engine tests."""

from __future__ import annotations

import hashlib
import struct

from sim.serve.costs import BatchShape, StageCost
from sim.serve.engine import ServeResult, simulate
from sim.serve.plan import ServingPlan


class LinearTimer:
    """time = a + b x tokens (+ c x decode context tokens) on every stage; send_s on all but the last.

    FLOPs = flops_per_token x tokens, HBM bytes = bytes_per_token x tokens (per GPU of the stage).
    """

    def __init__(self, a: float = 0.0, b: float = 0.0, c: float = 0.0, num_stages: int = 1, send_s: float = 0.0,
                 flops_per_token: float = 0.0, bytes_per_token: float = 0.0) -> None:
        self.a, self.b, self.c = a, b, c
        self.num_stages = num_stages
        self.send = send_s
        self.fpt, self.bpt = flops_per_token, bytes_per_token
        self.calls: list[tuple[int, int, BatchShape, float]] = []

    def stage_cost(self, replica: int, stage: int, shape: BatchShape, now_s: float) -> StageCost:
        self.calls.append((replica, stage, shape, now_s))
        n = shape.num_tokens
        t = self.a + self.b * n + self.c * sum(shape.decode)
        return StageCost(t, compute_s=t, send_s=self.send if stage < self.num_stages - 1 else 0.0,
                         flops=self.fpt * n, hbm_bytes=self.bpt * n)


class PhaseTimer:
    """prefill_s per batch containing any prefill chunk, decode_s for a pure decode batch (easy hand math)."""

    def __init__(self, prefill_s: float, decode_s: float, num_stages: int = 1) -> None:
        self.p, self.d = prefill_s, decode_s
        self.num_stages = num_stages
        self.shapes: list[BatchShape] = []

    def stage_cost(self, replica: int, stage: int, shape: BatchShape, now_s: float) -> StageCost:
        if stage == 0:
            self.shapes.append(shape)
        t = self.p if shape.prefill else self.d
        return StageCost(t, compute_s=t)


def check_invariants(res: ServeResult, n_requests: int | None = None) -> None:
    """Every request finished with exactly its tokens, timestamps ordered, KV accounting closed (the
    per-iteration KV checks run inside the engine: simulate(check_invariants=True) in `run`)."""
    reqs = res.requests
    if n_requests is not None:
        assert len(reqs) == n_requests
    assert [r.id for r in reqs] == list(range(len(reqs)))
    for r in reqs:
        assert r.generated == r.num_decode, r
        assert r.blocks == 0 and r.kv_cap == 0
        assert r.kv_tokens == r.num_prefill + r.num_decode - 1 or (r.num_decode == 1 and r.kv_tokens == r.prefilled)
        assert r.arrived_at_s <= r.first_scheduled_s <= r.first_token_s <= r.completed_s
        assert r.exec_s <= r.completed_s - r.first_scheduled_s + 1e-9
        assert r.model_exec_s <= r.exec_s + 1e-9
    for st in res.replicas:
        assert st.kv_used_blocks[-1] == 0
        assert 0 <= min(st.kv_used_blocks) and max(st.kv_used_blocks) <= st.num_blocks
        assert st.peak_used_blocks <= st.num_blocks
        assert list(st.kv_t_s) == sorted(st.kv_t_s)
    # every output token but each request's first produced exactly one gap
    assert res.gaps.total == sum(r.num_decode - 1 for r in reqs)


def fingerprint(res: ServeResult) -> str:
    """Hash of every request's timestamps and every batch (bit-level identity of two runs)."""
    h = hashlib.sha256()
    for r in res.requests:
        h.update(struct.pack("<qddddqd", r.id, r.first_scheduled_s, r.first_token_s, r.completed_s, r.exec_s,
                             r.restarts, r.max_gap_s))
    h.update(res.batches.end_s.tobytes())
    h.update(res.batches.num_requests.tobytes())
    h.update(res.gaps.values.tobytes())
    h.update(res.gaps.counts.tobytes())
    return h.hexdigest()


def run(reqs, timer=None, num_blocks: int = 1000, max_model_len: int = 4096, seed: int = 0, **plan_kw) -> ServeResult:
    plan = ServingPlan(**plan_kw)
    timer = timer or LinearTimer(a=0.01, b=1e-4, num_stages=plan.pp)
    res = simulate(reqs, plan, timer, num_blocks, max_model_len, seed=seed, check_invariants=True)
    check_invariants(res)
    return res
