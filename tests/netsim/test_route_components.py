"""sim.engine.route_components (channel uses labelled all at once, in chunks of whole components)
against a plain scan flow by flow: components as the closure of "shares a channel", signatures
with every component's channels numbered in order of first use, from Planner.call."""

from __future__ import annotations

import numpy as np
import pytest

import sim.engine as engine
from netsim.api import CollectiveRequest
from netsim.backend import Planner
from topo.templates import build


def _plain(planner, groups, collective, size):
    calls = [planner.call(CollectiveRequest(collective, g, size)) for g in groups]
    chans = [set().union(*(f.channels.tolist() for f in c[3])) if c[3] else set() for c in calls]
    seen, comps = set(), []
    for i in range(len(groups)):
        if i in seen:
            continue
        comp, todo = {i}, [i]
        while todo:
            a = todo.pop()
            for b in range(len(groups)):
                if b not in comp and chans[a] & chans[b]:
                    comp.add(b)
                    todo.append(b)
        seen |= comp
        comps.append(sorted(comp))
    cap = planner.view.capacity_Bps
    out = []
    for comp in comps:
        labels: list = []
        sig: list = []
        for i in comp:
            c = calls[i]
            sig.append((c[1], c[2], c[4], c[5], len(c[3])))
            for f in c[3]:
                lab = []
                for ch in f.channels.tolist():
                    if ch not in labels:
                        labels.append(ch)
                    lab.append(labels.index(ch))
                sig.append((tuple(lab), tuple(f.weights.tolist()), f.frac, f.latency_s, f.cap_Bps, f.deps, f.after,
                            f.nch, f.fill_stages, f.fill_chunk))
        sig.append(tuple(float(cap[ch]) for ch in labels))
        out.append((comp, tuple(sig), labels))
    return out


CASES = [
    # ECMP: rings of strided groups collide on the spines (components of several groups, joined late)
    ("dcn+", {"gpus": 256}, "all_reduce", [tuple(range(r, 256, 32)) for r in range(12)]),
    # a later pair joins an earlier component (uses out of component order)
    ("dcn+", {"gpus": 256}, "send", [(g, g + 128) for g in range(0, 64, 3)] + [(5, 40), (13, 40), (0, 200)]),
    ("alibaba-hpn", {"gpus": 256}, "send", [(g, (g + 64) % 256) for g in range(0, 256, 5)]),
    # translated pairs over the spine: copies share templates (Planner.call_parts_many)
    ("spectrum-x", {"gpus": 1024}, "send", [(g, g + 512) for g in range(0, 512, 7)]),
    # large groups: hundreds of channels per component (labels beyond the cached small ints)
    ("spectrum-x", {"gpus": 1024}, "all_reduce", [tuple(range(r, 1024, 8)) for r in range(4)]),
    ("multi-pod", {"gpus": 256, "nics_per_asw": 8, "segments_per_pod": 2, "psw_count": 4}, "all_gather",
     [tuple(range(r, 256, 16)) for r in range(8)] + [(0, 1, 2, 3)]),
]


@pytest.mark.parametrize("chunk", [1 << 16, 5])
@pytest.mark.parametrize("name,kw,collective,groups", CASES, ids=[f"{c[0]}-{c[2]}" for c in CASES])
def test_route_components_equal_plain_scan(name, kw, collective, groups, chunk, monkeypatch):
    # 5: a chunk per component (components larger than a chunk are labelled whole)
    monkeypatch.setattr(engine, "_LABEL_CHUNK", chunk)
    t = build(name, **kw)
    fast, plain = Planner(t), Planner(t)
    got = engine.route_components(fast, groups, collective, 1 << 24)
    want = _plain(plain, groups, collective, 1 << 24)
    assert [(c, s, list(ch)) for c, s, ch in got] == want
    v = fast.view
    for _, _, chans in got:      # fabric channels: both ends network switches
        assert engine.fabric_channels(fast, chans) == {ch for ch in chans if v.is_network_switch(int(v.ch_src[ch]))
                                                       and v.is_network_switch(int(v.ch_dst[ch]))}
    if name == "dcn+":
        assert any(len(c) > 1 for c, _, _ in got)      # components of several groups
    if collective == "all_reduce" and name == "spectrum-x":
        assert max(max(s[1][0]) for _, s, _ in got) > 256


def test_route_components_of_groups_without_flows():
    # size 0 and one-GPU groups: no flows, each its own component, no channels
    t = build("spectrum-x", gpus=64)
    p = Planner(t)
    got = engine.route_components(p, [(0, 8), (1, 9)], "send", 0)
    assert [(c, list(ch)) for c, _, ch in got] == [([0], []), ([1], [])]
    assert got[0][1] == got[1][1]
    assert engine.route_components(p, [(3,), (4,)], "all_reduce", 1 << 20)[0][0] == [0]


def test_components_of_joins_through_chains():
    # groups 0-1 share channel 7, 1-2 channel 9, 3 alone, 4-0 channel 1: one component {0, 1, 2, 4}
    chans = np.array([1, 7, 7, 9, 9, 5, 1], dtype=np.int64)
    gid = np.array([0, 0, 1, 1, 2, 3, 4], dtype=np.int64)
    assert engine._components_of(chans, gid, 5).tolist() == [0, 0, 0, 1, 0]
    assert engine._components_of(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64), 3).tolist() == [0, 1, 2]
