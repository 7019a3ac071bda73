"""Megatron's vocabulary padding: the embedding/LM-head rows are padded so every TP shard is equal."""

from __future__ import annotations


def padded_vocab_size(vocab: int, tp: int, divisible_by: int = 128) -> int:
    """Smallest multiple of `divisible_by * tp` that is >= `vocab` (Megatron's `_vocab_size_with_padding`)."""
    if vocab <= 0 or tp <= 0 or divisible_by <= 0:
        raise ValueError(f"padded_vocab_size: vocab, tp and divisible_by must be positive "
                         f"(got {vocab}, {tp}, {divisible_by})")
    multiple = divisible_by * tp
    return -(-vocab // multiple) * multiple
