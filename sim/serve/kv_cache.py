"""Paged KV-cache block manager of one replica (counts only; which physical block is irrelevant to timing).

`num_blocks` blocks of `block_size` tokens each (the number comes from the memory planner,
sim.serve.memory, or the plan). Admission of a new prompt keeps `watermark_blocks` =
floor(watermark_fraction x num_blocks) free (vLLM's watermark, so that running requests can still grow);
growing a running request by one block only needs one free block. Which request holds how many blocks is
kept on the requests (Request.blocks); `check` verifies the two agree.
"""

from __future__ import annotations

from collections.abc import Iterable

from sim.errors import SimError


class KVInvariantError(AssertionError):
    """The block accounting is inconsistent (an engine bug, never a user error)."""


class BlockManager:
    __slots__ = ("num_blocks", "block_size", "watermark_blocks", "used", "peak")

    def __init__(self, num_blocks: int, block_size: int, watermark_fraction: float = 0.0) -> None:
        if int(num_blocks) != num_blocks or num_blocks < 1:
            raise SimError(f"num_blocks must be a positive integer (got {num_blocks!r})")
        if int(block_size) != block_size or block_size < 1:
            raise SimError(f"block_size must be a positive integer (got {block_size!r})")
        if not 0.0 <= watermark_fraction < 1.0:
            raise SimError(f"watermark_fraction must be in [0, 1) (got {watermark_fraction!r})")
        self.num_blocks = int(num_blocks)
        self.block_size = int(block_size)
        self.watermark_blocks = int(watermark_fraction * self.num_blocks)
        self.used = 0
        self.peak = 0

    @property
    def free(self) -> int:
        return self.num_blocks - self.used

    def blocks_for(self, tokens: int) -> int:
        """Blocks that hold `tokens` tokens."""
        return -(-tokens // self.block_size)

    def can_allocate(self, n: int, watermark: bool = True) -> bool:
        """True when `n` blocks can be taken while keeping the watermark free (or not, watermark=False)."""
        return self.num_blocks - self.used - n >= (self.watermark_blocks if watermark else 0)

    def allocate(self, n: int) -> None:
        used = self.used + n
        if used > self.num_blocks or n < 0:
            raise KVInvariantError(f"allocating {n} KV blocks with {self.used}/{self.num_blocks} in use")
        self.used = used
        if used > self.peak:
            self.peak = used

    def release(self, n: int) -> None:
        if n < 0 or n > self.used:
            raise KVInvariantError(f"freeing {n} KV blocks with {self.used} in use")
        self.used -= n

    def check(self, holders: Iterable | None = None) -> None:
        """Never above capacity, never negative, and the blocks held by `holders` (requests) add up."""
        if not 0 <= self.used <= self.num_blocks or self.peak > self.num_blocks:
            raise KVInvariantError(f"KV blocks in use {self.used} (peak {self.peak}) outside [0, {self.num_blocks}]")
        if holders is None:
            return
        held = 0
        for r in holders:
            if r.blocks < 0 or r.kv_tokens > r.blocks * self.block_size:
                raise KVInvariantError(f"request {r.id}: {r.kv_tokens} KV tokens in {r.blocks} blocks")
            held += r.blocks
        if held != self.used:
            raise KVInvariantError(f"requests hold {held} KV blocks, the manager counts {self.used}")

    def check_empty(self) -> None:
        """All blocks returned (end of a run)."""
        if self.used != 0:
            raise KVInvariantError(f"{self.used} KV blocks still in use at the end of the run")
