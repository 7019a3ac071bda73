"""Replica schedulers against schedules worked out by hand (stub timer: stage time = 0.01 s x tokens).

Each test states the expected iterations in its docstring; TTFT / token gaps / completion times follow
from them. check_invariants runs on every result (helpers_serve.run).
"""

from __future__ import annotations

import pytest
from helpers_serve import LinearTimer, PhaseTimer, run

from sim.serve.costs import BatchShape

approx = pytest.approx


def tok(b=0.01, **kw):
    return LinearTimer(a=0.0, b=b, **kw)


def shapes(timer: LinearTimer, stage: int = 0) -> list[BatchShape]:
    return [c[2] for c in timer.calls if c[1] == stage]


def P(*pairs):
    return BatchShape(prefill=tuple(pairs))


def Dc(*ctx):
    return BatchShape(decode=tuple(ctx))


# ------------------------------------------------------------------------------------------------ vllm

def test_vllm_prefill_priority_and_no_decodes_in_prefill_iterations():
    """A (t 0, 100+3), B (t 0.5, 50+2). Iterations: [A prefill 100] 0-1.0; B arrived meanwhile ->
    [B prefill 50] 1.0-1.5 (A does not decode in it); [A, B decode] 1.5-1.52 (B done); [A] 1.52-1.53."""
    t = tok()
    res = run([(0.0, 100, 3), (0.5, 50, 2)], t, scheduler="vllm")
    assert shapes(t) == [P((100, 0)), P((50, 0)), Dc(100, 50), Dc(101)]
    a, b = res.requests
    assert a.first_token_s == approx(1.0) and b.first_token_s == approx(1.5)
    assert a.completed_s == approx(1.53) and b.completed_s == approx(1.52)
    assert a.max_gap_s == approx(0.52) and b.max_gap_s == approx(0.02)
    assert b.first_scheduled_s == approx(1.0)
    assert sorted(zip(res.gaps.values, res.gaps.counts)) == [(approx(0.01), 1), (approx(0.02), 1), (approx(0.52), 1)]


def test_vllm_padded_token_budget():
    """Budget 300: prompts 100, 120, 90 at t 0. 2 x 120 = 240 fits, 3 x 120 = 360 does not: [100, 120],
    then [90] alone (prefill first), then decodes of all three."""
    t = PhaseTimer(1.0, 0.1)
    run([(0.0, 100, 2), (0.0, 120, 2), (0.0, 90, 2)], t, scheduler="vllm", max_tokens_per_iteration=300,
        max_model_len=300)
    assert t.shapes[:3] == [P((100, 0), (120, 0)), P((90, 0)), Dc(100, 120, 90)]


def test_vllm_preempts_most_recent_and_recomputes():
    """block 4, 6 blocks, no watermark. A, B: 8+6 at t 0 (2 blocks each).
    [A,B prefill 16 tok] 0-.16; 4 decodes (A, B take a 3rd block at the first) .16-.24; at the 5th both
    need a 4th block with none free: B (most recent) is preempted, A decodes alone .24-.25 (A done);
    B recomputes 8 + 5 generated = 13 tokens .25-.38 and that prefill emits its 6th (last) token."""
    t = tok()
    res = run([(0.0, 8, 6), (0.0, 8, 6)], t, scheduler="vllm", block_size=4, num_blocks=6,
              watermark_fraction=0.0)
    assert shapes(t) == [P((8, 0), (8, 0)), Dc(8, 8), Dc(9, 9), Dc(10, 10), Dc(11, 11), Dc(12), P((13, 0))]
    a, b = res.requests
    assert (a.restarts, b.restarts) == (0, 1)
    assert a.completed_s == approx(0.25) and b.completed_s == approx(0.38)
    assert b.first_token_s == approx(0.16)            # not re-emitted by the recompute
    assert b.max_gap_s == approx(0.14)                # token 5 at .24 -> token 6 at .38
    assert b.exec_s == approx(0.16 + 0.08 + 0.13)
    assert res.replicas[0].preemptions == 1


def test_vllm_victim_is_latest_arrival_not_the_neighbour():
    """block 4, 6 blocks. A 8+4, B 6+4, C 6+4 (2 blocks each, cache full). First decode: A needs a block:
    the victim is C (latest), not B; B still fits in its 2nd block."""
    t = tok()
    res = run([(0.0, 8, 4), (0.0, 6, 4), (0.0, 6, 4)], t, scheduler="vllm", block_size=4, num_blocks=6,
              watermark_fraction=0.0)
    assert shapes(t)[:2] == [P((8, 0), (6, 0), (6, 0)), Dc(8, 6)]
    assert [r.restarts for r in res.requests] == [0, 0, 1]


def test_vllm_preempts_itself_when_it_is_the_latest():
    """block 4, 5 blocks. A 8+10 (2 blocks), B 6+10 (2 blocks). A takes the spare block at decode 1; at
    decode 3 B (kv 8) needs one, nobody after it: B preempts itself; A runs alone to completion (kv 10..16),
    then B recomputes 6 + 3 = 9 tokens and decodes its 6 remaining tokens (kv 9..14)."""
    t = tok()
    res = run([(0.0, 8, 10), (0.0, 6, 10)], t, scheduler="vllm", block_size=4, num_blocks=5,
              watermark_fraction=0.0)
    expect = ([P((8, 0), (6, 0)), Dc(8, 6), Dc(9, 7)] + [Dc(k) for k in range(10, 17)] + [P((9, 0))]
              + [Dc(k) for k in range(9, 15)])
    assert shapes(t) == expect
    assert [r.restarts for r in res.requests] == [0, 1]


def test_vllm_watermark_blocks_admission():
    """100 blocks of 16, watermark 10% = 10 blocks. A: 1400 tokens = 88 blocks (12 left >= 10: admitted);
    B: 48 tokens = 3 blocks would leave 9 < 10: waits until A finishes."""
    t = tok(b=0.001)
    res = run([(0.0, 1400, 2), (0.0, 48, 2)], t, scheduler="vllm", num_blocks=100, watermark_fraction=0.1)
    assert shapes(t) == [P((1400, 0)), Dc(1400), P((48, 0)), Dc(48)]
    assert res.requests[1].first_scheduled_s == approx(1.401)


# --------------------------------------------------------------------------------------------- sarathi

def test_sarathi_chunked_prefill():
    """chunk 8. A 20+2, B 5+3 at t 0. [A 8@0] [A 8@8] [A 4@16, B 4@0] -> A's first token;
    [decode A(20); B 1@4] (A done; B's first token); [B(5)] [B(6)]. Times 0.01 s/token."""
    t = tok()
    res = run([(0.0, 20, 2), (0.0, 5, 3)], t, scheduler="sarathi", chunk_size=8)
    assert shapes(t) == [P((8, 0)), P((8, 8)), P((4, 16), (4, 0)),
                         BatchShape(prefill=((1, 4),), decode=(20,)), Dc(5), Dc(6)]
    a, b = res.requests
    assert a.first_token_s == approx(0.24) and a.completed_s == approx(0.26)
    assert b.first_token_s == approx(0.26) and b.completed_s == approx(0.28)
    assert b.max_gap_s == approx(0.01)


def test_sarathi_decodes_first_then_budget_left_for_prefill():
    """chunk 4: two decoding requests use 2 of 4 tokens, a new prompt of 10 gets 2 tokens per iteration."""
    t = PhaseTimer(0.05, 0.01)
    run([(0.0, 2, 5), (0.0, 2, 5), (0.001, 10, 2)], t, scheduler="sarathi", chunk_size=4)
    assert t.shapes[0] == P((2, 0), (2, 0))
    assert t.shapes[1] == BatchShape(prefill=((2, 0),), decode=(2, 2))
    assert t.shapes[2] == BatchShape(prefill=((2, 2),), decode=(3, 3))


def test_sarathi_preemption_restarts_partial_prefill_from_scratch():
    """block 4, 4 blocks, chunk 2. A 4+6, B 8+2 at t 0. [A 2@0] [A 2@2] (A's first token); then A decodes
    (1 token) and B, admitted with 2 blocks, prefills 1 token per iteration (offsets 0..3) while A's kv goes
    4..7 (A took a 2nd block at kv 4). At kv 8 A needs a 3rd block, none is free: B (later arrival,
    mid-prefill) is preempted, A decodes alone (its 6th token), then B restarts its prompt at offset 0."""
    t = tok()
    res = run([(0.0, 4, 6), (0.0, 8, 2)], t, scheduler="sarathi", chunk_size=2, block_size=4, num_blocks=4,
              watermark_fraction=0.0)
    mixed = [BatchShape(prefill=((1, k),), decode=(4 + k,)) for k in range(4)]
    assert shapes(t) == ([P((2, 0)), P((2, 2))] + mixed + [Dc(8)]
                         + [P((2, 0)), P((2, 2)), P((2, 4)), P((2, 6)), Dc(8)])
    a, b = res.requests
    assert (a.restarts, b.restarts) == (0, 1)
    assert b.first_token_s == approx(0.01 * (2 + 2 + 4 * 2 + 1 + 4 * 2))


# ------------------------------------------------------------------------------------------------ orca

def test_orca_reserves_max_length_and_mixes_prefill_with_decodes():
    """max_model_len 64 = 4 blocks of 16 reserved per request, 8 blocks: two requests at a time.
    A 10+3, B 20+2, C 5+2 at t 0: [A, B prefill] 0-.30; [A(10), B(20)] .30-.32 (B done);
    [C prefill 5 + A(11)] .32-.38 (A done); [C(5)] .38-.39."""
    t = tok()
    res = run([(0.0, 10, 3), (0.0, 20, 2), (0.0, 5, 2)], t, scheduler="orca", num_blocks=8, max_model_len=64)
    assert shapes(t) == [P((10, 0), (20, 0)), Dc(10, 20), BatchShape(prefill=((5, 0),), decode=(11,)), Dc(5)]
    a, b, c = res.requests
    assert (a.completed_s, b.completed_s, c.completed_s) == (approx(0.38), approx(0.32), approx(0.39))
    assert c.first_scheduled_s == approx(0.32) and c.first_token_s == approx(0.38)
    assert res.replicas[0].peak_used_blocks == 8


# ---------------------------------------------------------------------------------- faster_transformer

def test_faster_transformer_static_batch_waits_for_slowest():
    """max batch 2. A 10+4, B 10+2, C 10+1 at t 0. Group {A, B}: prefill .20, decode [A,B] .22 (B done),
    [A] .23, [A] .24 (A done): C is not added when B leaves; group {C}: prefill .24-.34 (its only token)."""
    t = tok()
    res = run([(0.0, 10, 4), (0.0, 10, 2), (0.0, 10, 1)], t, scheduler="faster_transformer", max_batch_size=2)
    assert shapes(t) == [P((10, 0), (10, 0)), Dc(10, 10), Dc(11), Dc(12), P((10, 0))]
    a, b, c = res.requests
    assert a.completed_s == approx(0.24) and b.completed_s == approx(0.22)
    assert c.first_scheduled_s == approx(0.24) and c.first_token_s == approx(0.34) == c.completed_s


# -------------------------------------------------------------------------------------------- lightllm

def test_lightllm_alternates_with_max_waiting_iterations():
    """max_waiting_iterations 2. A 10+6 at 0, B 10+2 at .005. [A prefill] 0-.10; B waits 2 decode
    iterations [A(10)] [A(11)] -> .12; [B prefill] .12-.22 (no decodes); [A(12), B(10)] .24 (B done);
    [A(13)] .25; [A(14)] .26 (A done)."""
    t = tok()
    res = run([(0.0, 10, 6), (0.005, 10, 2)], t, scheduler="lightllm", max_waiting_iterations=2)
    assert shapes(t) == [P((10, 0)), Dc(10), Dc(11), P((10, 0)), Dc(12, 10), Dc(13), Dc(14)]
    a, b = res.requests
    assert b.first_token_s == approx(0.22) and b.completed_s == approx(0.24)
    assert a.max_gap_s == approx(0.12) and a.completed_s == approx(0.26)


def test_lightllm_admits_on_projected_not_current_use():
    """block 4, 6 blocks. A 10+6 will hold 15 tokens = 4 blocks; B 10+2 will hold 11 = 3 blocks. 4 + 3 > 6:
    B waits for A to finish although only 3 blocks are in use when it arrives."""
    t = tok()
    res = run([(0.0, 10, 6), (0.005, 10, 2)], t, scheduler="lightllm", max_waiting_iterations=0, block_size=4,
              num_blocks=6)
    assert shapes(t) == [P((10, 0))] + [Dc(k) for k in range(10, 15)] + [P((10, 0)), Dc(10)]
    assert res.requests[1].first_scheduled_s == approx(res.requests[0].completed_s)
    assert res.replicas[0].preemptions == 0


# ------------------------------------------------------------------------------------ pipeline parallel

def test_pp_keeps_at_most_pp_batches_in_flight():
    """pp 2, 0.1 s per stage, max batch 1 (so max 2 admitted). A, B, C 10+3 at t 0.
    A: stage 0 [0,.1] stage 1 [.1,.2]; B queued behind it: [.1,.2] [.2,.3]. C waits (2 admitted).
    Then A and B decode alternately; A done at .6, C admitted at .6: first token .8, done 1.2."""
    t = LinearTimer(a=0.1, num_stages=2)
    res = run([(0.0, 10, 3)] * 3, t, scheduler="vllm", pp=2, max_batch_size=1)
    a, b, c = res.requests
    assert [r.first_token_s for r in (a, b, c)] == [approx(0.2), approx(0.3), approx(0.8)]
    assert [r.completed_s for r in (a, b, c)] == [approx(0.6), approx(0.7), approx(1.2)]
    # every stage runs one batch at a time and at most 2 batches are in flight
    for stage in (0, 1):
        starts = sorted(c[3] for c in t.calls if c[1] == stage)
        assert all(y - x >= 0.1 - 1e-12 for x, y in zip(starts, starts[1:]))
    df_b = res.batches
    events = sorted([(s, 1) for s in df_b.formed_s] + [(e, -1) for e in df_b.end_s])
    level = peak = 0
    for _, d in events:
        level += d
        peak = max(peak, level)
    assert peak == 2


def test_pp_send_time_delays_the_batch_not_the_stage():
    """pp 2, stage 0.1 s, send 0.05 s: A's first token at .1 + .05 + .1; B's stage 0 starts at .1."""
    t = LinearTimer(a=0.1, num_stages=2, send_s=0.05)
    res = run([(0.0, 10, 1), (0.0, 10, 1)], t, scheduler="vllm", pp=2, max_batch_size=1)
    assert res.requests[0].first_token_s == approx(0.25)
    assert res.requests[1].first_token_s == approx(0.35)
    assert sorted(c[3] for c in t.calls if c[1] == 0) == [approx(0.0), approx(0.1)]


# --------------------------------------------------------------------------------------------- routers

def test_round_robin_router():
    res = run([(0.01 * i, 10, 2) for i in range(5)], scheduler="vllm", replicas=2)
    assert [r.replica for r in res.requests] == [0, 1, 0, 1, 0]


def test_least_outstanding_router():
    """A (long) -> 0; B -> 1 (0 has one outstanding); B finishes; C -> 1 (outstanding 1, 0); D: tie -> 0."""
    reqs = [(0.0, 10, 1000), (0.001, 1, 1), (1.0, 1, 1000), (1.0001, 1, 5)]
    res = run(reqs, tok(), scheduler="vllm", replicas=2, router="least_outstanding")
    assert [r.replica for r in res.requests] == [0, 1, 1, 0]


def test_random_router_is_seeded_and_spreads():
    reqs = [(0.001 * i, 4, 2) for i in range(2000)]
    a = [r.replica for r in run(reqs, scheduler="vllm", replicas=4, router="random", seed=3).requests]
    b = [r.replica for r in run(reqs, scheduler="vllm", replicas=4, router="random", seed=3).requests]
    c = [r.replica for r in run(reqs, scheduler="vllm", replicas=4, router="random", seed=4).requests]
    assert a == b and a != c
    counts = [a.count(k) for k in range(4)]
    assert all(abs(n - 500) < 4 * (2000 * 0.25 * 0.75) ** 0.5 for n in counts)
