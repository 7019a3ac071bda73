"""Distributed-optimizer parameter all-gathers: megatron-core's one-bucket-ahead dispatch chain."""

import pytest

from workload_gen.generator import generate
from workload_gen.plan import ParallelPlan
from workload_gen.zoo import get_model


def _resolved_wait(ops, i):
    """Index of the op that waits for the non-blocking comm at i: the first later op named wait_op."""
    name = ops[i].wait_op
    return next(j for j in range(i + 1, len(ops)) if ops[j].name == name)


@pytest.mark.parametrize("name, kw", [
    ("aicb-7", dict(world_size=32, tp=4, pp=2, sequence_parallel=True)),
    ("llama3-8b", dict(world_size=16, tp=2, pp=2, vpp=2, sequence_parallel=True)),
    ("mixtral-8x7b", dict(world_size=32, tp=2, pp=2, ep=4, sequence_parallel=True)),
])
def test_gather_chain_one_bucket_ahead(name, kw):
    plan = ParallelPlan(global_batch_size=4 * kw["world_size"], distributed_optimizer=True,
                        grad_bucket_elements=5_000_000, **kw)
    w = generate(get_model(name), plan)
    checked = 0
    for st in w.stages:
        for ch in st.chunks:
            ops = ch.forward
            for group in {op.group for op in ops if op.is_comm and op.name.startswith("dp_param_gather")}:
                idx = [i for i, op in enumerate(ops) if op.is_comm and op.group == group
                       and op.name.startswith("dp_param_gather")]
                assert len(idx) >= 2
                waits = [_resolved_wait(ops, i) for i in idx]
                # every gather is waited on by a kernel of the bucket's own (earliest) layer
                assert all(ops[w_].layer == ops[i].layer for i, w_ in zip(idx, waits))
                # the chain's first gather is dispatched before any compute kernel
                assert not any(not op.is_comm for op in ops[:idx[0]])
                # buckets are needed in the order they are dispatched
                assert waits == sorted(waits)
                for k in range(1, len(idx)):
                    # bucket k is dispatched where bucket k-1 is waited on: no compute kernel between the
                    # two, except the waiting kernel itself when it shares bucket k's wait_op name ...
                    lo, hi = sorted((idx[k], waits[k - 1]))
                    between = [op for op in ops[lo:hi + 1] if not op.is_comm]
                    assert len(between) <= 1, [op.name for op in between]
                    # ... and before the kernel that needs it
                    assert idx[k - 1] < idx[k] < waits[k]
                checked += len(idx)
    assert checked > 0
