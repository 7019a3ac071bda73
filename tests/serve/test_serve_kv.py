"""Paged KV block manager: capacity, watermark, invariant checks."""

from __future__ import annotations

import pytest

from sim.errors import SimError
from sim.serve.entities import Request
from sim.serve.kv_cache import BlockManager, KVInvariantError


def test_blocks_for_and_watermark():
    kv = BlockManager(100, 16, watermark_fraction=0.05)
    assert kv.watermark_blocks == 5
    assert [kv.blocks_for(n) for n in (1, 16, 17, 32, 33)] == [1, 1, 2, 2, 3]
    kv.allocate(90)
    assert kv.can_allocate(5) and not kv.can_allocate(6)           # 100 - 90 - 6 = 4 < 5
    assert kv.can_allocate(10, watermark=False) and not kv.can_allocate(11, watermark=False)
    assert kv.free == 10 and kv.peak == 90


def test_never_above_capacity_and_never_negative():
    kv = BlockManager(10, 4)
    kv.allocate(10)
    with pytest.raises(KVInvariantError):
        kv.allocate(1)
    kv.release(4)
    with pytest.raises(KVInvariantError):
        kv.release(7)
    assert kv.used == 6 and kv.peak == 10


def test_check_against_holders():
    kv = BlockManager(10, 4)
    a, b = Request(0, 0.0, 5, 2), Request(1, 0.0, 3, 2)
    a.blocks, a.kv_tokens = 2, 5
    b.blocks, b.kv_tokens = 1, 3
    kv.allocate(3)
    kv.check([a, b])
    b.kv_tokens = 5                                   # 5 tokens cannot live in one block of 4
    with pytest.raises(KVInvariantError, match="request 1"):
        kv.check([a, b])
    b.kv_tokens = 3
    kv.allocate(1)
    with pytest.raises(KVInvariantError, match="hold 3 KV blocks, the manager counts 4"):
        kv.check([a, b])
    with pytest.raises(KVInvariantError, match="still in use"):
        kv.check_empty()
    kv.release(4)
    kv.check_empty()


@pytest.mark.parametrize("args, msg", [((0, 16), "num_blocks"), ((10, 0), "block_size"),
                                       ((10, 16, 1.0), "watermark_fraction")])
def test_bad_sizes(args, msg):
    with pytest.raises(SimError, match=msg):
        BlockManager(*args)
