"""topo.faults: part names, apply_faults (pure, cables removed / degraded), routing over survivors, and the
capacities netsim sees (spine failure, degraded link, error_rate) against hand calculations."""

from __future__ import annotations

import json
import math

import pytest

import netsim
import topo
from netsim import CollectiveRequest as Req
from topo.errors import TopoError
from topo.faults import (
    Fault,
    FaultSet,
    apply_faults,
    fault_set,
    load_fault_file,
    parse_degrade,
    resolve_faults,
)

GiB = 1 << 30
# hardware.md: a 400 Gb/s (50 GB/s) NIC link delivers ~47 GB/s through NCCL
LINK_EFF_Bps = 47e9


@pytest.fixture(scope="module")
def ft():
    """k=4 fat tree, 16 GPUs as endpoints, 2 per server: 4 pods, each of 2 edge (ToR) + 2 aggregation
    (spine) switches; node ids: GPUs 0-15, NVSwitches 16-23, ToRs 24-31, spines 32-39, cores 40-43."""
    return topo.build("fat-tree", k=4, gpus=16, gpus_per_server=2)


def _sends_time(t, pairs, size):
    net = netsim.make_backend("flow", t)
    ends = []
    for a, b in pairs:
        net.submit(Req("send", (a, b), size), 0.0, ends.append)
    while not math.isinf(net.next_event_time()):
        net.advance(net.next_event_time())
    return max(ends)


def _seconds_per_byte(t, pairs):
    """Bandwidth term of concurrent sends: time difference of two sizes over the size difference (the
    latency and per-call terms cancel)."""
    return (_sends_time(t, pairs, 2 * GiB) - _sends_time(t, pairs, GiB)) / GiB


def test_failed_spine_halves_cross_pod_bandwidth(ft):
    """Pod 0's 4 GPUs each send to a GPU of pod 1. Healthy: each edge switch has 2 up-links (one per
    spine) and destination-based routing gives every flow its own link: each flow runs at one link's
    47 GB/s. Spine 0 of pod 0 failed: each edge switch keeps 1 up-link for its 2 flows (23.5 GB/s
    each), and the surviving spine's 2 core links carry 4 flows: again 23.5 GB/s. So 2x."""
    pairs = [(g, g + 4) for g in range(4)]
    healthy = _seconds_per_byte(ft, pairs)
    failed = _seconds_per_byte(apply_faults(ft, fault_set(fail=["spine:0"])), pairs)
    assert healthy == pytest.approx(1 / LINK_EFF_Bps, rel=1e-6)
    assert failed == pytest.approx(2 / LINK_EFF_Bps, rel=1e-6)


def test_routing_avoids_the_failed_spine(ft):
    ft2 = apply_faults(ft, fault_set(fail=["spine:0"]))
    healthy = topo.Router(ft).ecmp_paths(0, 4)
    survivors = topo.Router(ft2).ecmp_paths(0, 4)
    # pod to pod: 2 spines x 2 cores each = 4 equal-cost paths; 2 remain through spine 1
    assert len(healthy) == 4 and len(survivors) == 2
    for path in survivors:
        nodes = {ft2.links[i].src for i in path} | {ft2.links[i].dst for i in path}
        assert 32 not in nodes and 33 in nodes
    for key in range(16):
        p = topo.Router(ft2).path(0, 4, key)
        assert all(ft2.links[i].src != 32 and ft2.links[i].dst != 32 for i in p)


def test_degraded_link_halves_the_flow_across_it(ft):
    """GPU 0 -> GPU 2 (other ToR, same pod): every hop is a 400 Gb/s link, 47 GB/s; with GPU 0's
    ToR cable at factor 0.5 the flow runs at 23.5 GB/s."""
    ft2 = apply_faults(ft, FaultSet((parse_degrade("link:gpu:0-tor:0=0.5"),)))
    assert _seconds_per_byte(ft, [(0, 2)]) == pytest.approx(1 / LINK_EFF_Bps, rel=1e-6)
    assert _seconds_per_byte(ft2, [(0, 2)]) == pytest.approx(2 / LINK_EFF_Bps, rel=1e-6)
    # both directions of the cable, nothing else
    changed = [lk for lk, old in zip(ft2.links, ft.links) if lk.capacity_factor != 1.0]
    assert [(lk.src, lk.dst, lk.capacity_factor) for lk in changed] == [(0, 24, 0.5), (24, 0, 0.5)]


def test_error_rate_is_a_capacity_loss_by_hand():
    """error_rate p = 0.01 per packet, selective repeat: goodput (1 - p) of 47 GB/s = 46.53 GB/s."""
    lossy = topo.build("fat-tree", k=4, gpus=16, gpus_per_server=2, error_rate=0.01)
    assert _seconds_per_byte(lossy, [(0, 2)]) == pytest.approx(1 / 46.53e9, rel=1e-6)


def test_apply_faults_is_pure_and_keeps_cable_pairs(ft):
    before = ft.links
    ft2 = apply_faults(ft, fault_set(fail=["spine:0", "core:3"], degrade=["tor:1=0.25"]))
    assert ft.links == before and ft2 is not ft
    assert ft2.nodes == ft.nodes
    # spine 0: 2 ToR + 2 core cables; core 3: one cable to a spine of each of 4 pods
    assert ft.num_cables - ft2.num_cables == 4 + 4
    assert [lk.id for lk in ft2.links] == list(range(len(ft2.links)))
    for a, b in zip(ft2.links[0::2], ft2.links[1::2]):
        assert (a.src, a.dst, a.capacity_factor) == (b.dst, b.src, b.capacity_factor)
    # ToR 1 (pod 0): 2 GPU cables and its spine-1 cable left (its spine-0 cable failed with spine 0)
    tor1 = [lk for lk in ft2.links if 25 in (lk.src, lk.dst)]
    assert len(tor1) == 2 * 3 and all(lk.capacity_factor == 0.25 for lk in tor1)
    assert apply_faults(ft, FaultSet()) is ft


def test_server_and_nic_names(ft):
    res = resolve_faults(ft, fault_set(fail=["server:1"]))
    # GPUs 2 and 3 and server 1's NVSwitch (node 17); each with its cables
    assert sorted(res.failed_nodes) == [2, 3, 17]
    ft2 = apply_faults(ft, fault_set(fail=["server:1"]))
    assert not ft2.out_links(2) and not ft2.out_links(17) and ft2.out_links(4)
    # SimAI model (GPU = its own NIC endpoint): nic:gpuN is the GPU's network cable, not the GPU
    ft3 = apply_faults(ft, fault_set(fail=["nic:gpu3"]))
    assert ft3.gpu_ports(3) == [] and any(lk.dst == 17 for lk in ft3.out_links(3))
    nic = topo.build("spectrum-x", gpus=16, nics=True, gpus_per_nic=8)
    nic_ids = [n.id for n in nic.nodes if n.kind == "nic"]
    assert resolve_faults(nic, fault_set(fail=["nic:1"])).failed_nodes == {nic_ids[1]: "nic:1"}
    assert resolve_faults(nic, fault_set(fail=["nic:gpu9"])).failed_nodes == {nic_ids[1]: "nic:gpu9"}


def test_factors_multiply_and_failure_wins(ft):
    res = resolve_faults(ft, fault_set(fail=["tor:0"], degrade=["link:tor:0-spine:0=0.5", "spine:0=0.5"]))
    cable = next(lk.id // 2 for lk in ft.links if (lk.src, lk.dst) == (24, 32))
    assert res.cable_factor[cable] == 0.0 and res.cable_fault[cable] == "tor:0"
    res = resolve_faults(ft, fault_set(degrade=["link:tor:0-spine:0=0.5", "spine:0=0.5"]))
    assert res.cable_factor[cable] == 0.25


@pytest.mark.parametrize("spec, msg", [
    ("spine:9", "--fail 'spine:9': no spine 9 in this topology (valid here: gpu:0..15, server:0..7, nic:gpuN, "
                "tor:0..7, spine:0..7, core:0..3, nvswitch:0..7, node:0..43, link:A-B)"),
    ("rack:1", "--fail 'rack:1': unknown part kind 'rack' (valid here: gpu:0..15"),
    ("gpu:x", "--fail 'gpu:x': 'x' is not a gpu index"),
    ("nic:0", "--fail 'nic:0': this topology has no NIC nodes (each GPU is its own NIC endpoint): use nic:gpuN"),
    ("link:0-1", "--fail 'link:0-1': nodes 0 and 1 are not linked"),
    ("link:0", "--fail 'link:0': expected link:A-B with A, B node names"),
    ("", "--fail '': expected a part name"),
])
def test_bad_names_are_one_line_errors(ft, spec, msg):
    with pytest.raises(TopoError) as exc:
        resolve_faults(ft, fault_set(fail=[spec]))
    assert str(exc.value).startswith(msg) and "\n" not in str(exc.value)


@pytest.mark.parametrize("spec, msg", [
    ("spine:0", "--degrade 'spine:0': expected PART=FACTOR"),
    ("spine:0=1", "--degrade 'spine:0=1': factor must be in (0, 1) (use --fail for a failed part), got 1"),
    ("spine:0=0", "--degrade 'spine:0=0': factor must be in (0, 1)"),
    ("spine:0=half", "--degrade 'spine:0=half': factor must be a number in (0, 1), got 'half'"),
])
def test_bad_degrade_specs(spec, msg):
    with pytest.raises(TopoError, match=None) as exc:
        parse_degrade(spec)
    assert str(exc.value).startswith(msg)


def test_fault_files(tmp_path, ft):
    y = tmp_path / "f.yaml"
    y.write_text("fail:\n  - spine:0\n  - link:tor:1-spine:1\ndegrade:\n  core:0: 0.5\n")
    j = tmp_path / "f.json"
    j.write_text(json.dumps({"fail": ["spine:0", "link:tor:1-spine:1"], "degrade": {"core:0": 0.5}}))
    want = (Fault("spine:0", 0.0, str(y)), Fault("link:tor:1-spine:1", 0.0, str(y)), Fault("core:0", 0.5, str(y)))
    assert load_fault_file(y).faults == want
    assert [(f.part, f.factor) for f in load_fault_file(j).faults] == [(f.part, f.factor) for f in want]
    assert apply_faults(ft, load_fault_file(y)).num_cables == ft.num_cables - 5
    bad = tmp_path / "bad.yaml"
    bad.write_text("failed: [spine:0]\n")
    with pytest.raises(TopoError, match=r"bad.yaml: expected keys 'fail' .* got unknown key 'failed'$"):
        load_fault_file(bad)
    bad.write_text("degrade: {spine:0: 2}\n")
    with pytest.raises(TopoError, match=r"bad.yaml: degrade 'spine:0': factor must be in \(0, 1\)"):
        load_fault_file(bad)
    bad.write_text("fail: [spine:0\n")
    with pytest.raises(TopoError, match=r"bad.yaml: not a valid fault file"):
        load_fault_file(bad)
    bad.write_text("fail: [spine:42]\n")
    with pytest.raises(TopoError, match=r"bad.yaml: 'spine:42': no spine 42"):
        resolve_faults(ft, load_fault_file(bad))
