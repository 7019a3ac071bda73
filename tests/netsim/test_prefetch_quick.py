"""Planner.prefetch_quick: the quick-key signatures of many groups made in one TopoView.hop_keys
call per template equal the ones quick_key makes group by group, so every key and answer is the
plain planner's."""

from __future__ import annotations

import pytest

from netsim.api import CollectiveRequest
from netsim.backend import Planner
from netsim.errors import NetsimError
from topo.templates import build

MULTI_POD = ("multi-pod", {"gpus": 256, "nics_per_asw": 8, "segments_per_pod": 2, "psw_count": 4})


def _stage_groups(n: int) -> dict[str, list[tuple[int, ...]]]:
    """Per kind, one group per 'stage' of 32 GPUs: TP pairs, EP-like blocks, DP-like strided groups
    (inside a segment, across segments, across pods) and random-looking ones."""
    return {
        "tp": [(o, o + 1) for o in range(0, n, 32)],
        "ep": [tuple(range(o, o + 16)) for o in range(0, n, 32)],
        "dp": [tuple(range(o, n, 64)) for o in range(0, 64, 8)] + [tuple(range(o, o + 128, 16)) for o in (0, 64, 128)],
        "odd": [(3, 77, 140, 201), (5, 70, 141, 250), (9, 10, 200, 255)],
    }


@pytest.mark.parametrize("name,kw", [MULTI_POD, ("spectrum-x", {"gpus": 256}), ("dcn+", {"gpus": 64})],
                         ids=["multi-pod", "spectrum-x", "dcn+"])
@pytest.mark.parametrize("op", ["all_gather", "reduce_scatter", "all_reduce", "all_to_all"])
def test_prefetched_keys_and_answers_equal_group_by_group(name, kw, op):
    t = build(name, **kw)
    pre, plain = Planner(t), Planner(t)
    groups = [g for gs in _stage_groups(t.num_gpus).values() for g in gs if max(g) < t.num_gpus]
    pre.prefetch_quick(op, groups)
    assert pre._quick_by_tmpl or pre._quick_sigs       # something was made in the batch
    for gpus in groups:
        for size in (4096, 3 << 20, 1 << 30):
            req = CollectiveRequest(op, gpus, size)
            assert pre.quick_key(req) == plain.quick_key(req), (gpus, size)
            assert pre.analytical_s(req) == plain.analytical_s(req), (gpus, size)


def test_one_hop_keys_call_per_template(monkeypatch):
    t = build(MULTI_POD[0], **MULTI_POD[1])
    pre = Planner(t)
    calls = []
    real = pre.view.hop_keys
    monkeypatch.setattr(pre.view, "hop_keys", lambda src, dst: calls.append(len(src)) or real(src, dst))
    dp = _stage_groups(256)["dp"][:8]              # eight 4-GPU groups of one template
    pre.prefetch_quick("all_gather", dp)
    assert len(calls) == 1 and calls[0] > 8
    for gpus in dp:
        assert pre.quick_key(CollectiveRequest("all_gather", gpus, 1 << 20)) is not None
    assert len(calls) == 1                          # quick_key found every signature made


def test_bad_groups_are_left_to_quick_key():
    t = build(MULTI_POD[0], **MULTI_POD[1])
    pre = Planner(t)
    pre.prefetch_quick("all_gather", [(0, 64, 128), (0, 0, 64), (0, 999), (8, 72, 136)])
    with pytest.raises(NetsimError, match="rank 999 is not a GPU"):
        pre.quick_key(CollectiveRequest("all_gather", (0, 999), 1 << 20))
    with pytest.raises(NetsimError, match="GPU 0 appears twice"):
        pre.quick_key(CollectiveRequest("all_gather", (0, 0, 64), 1 << 20))
