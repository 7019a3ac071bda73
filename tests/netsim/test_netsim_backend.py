"""make_backend("flow" | "analytical"): calibration targets from hardware.md, contention, errors."""

from __future__ import annotations

import math

import pytest

topo = pytest.importorskip("topo")

import netsim  # noqa: E402
from netsim import CollectiveRequest as Req  # noqa: E402
from netsim.errors import NetsimError  # noqa: E402

GiB = 1 << 30
MiB = 1 << 20


def busbw(op, n, size, t):
    factor = {"all_reduce": 2 * (n - 1) / n, "all_gather": (n - 1) / n,
              "reduce_scatter": (n - 1) / n, "all_to_all": (n - 1) / n}.get(op, 1.0)
    return size / t * factor


@pytest.fixture(scope="module")
def h100_8():
    # one DGX H100: 900 GB/s NVLink per GPU = 450 GB/s per direction
    return topo.build("spectrum-x", gpus=8, nvlink_bandwidth_Bps=450e9, psw_count=1)


@pytest.fixture(scope="module")
def h100_32():
    return topo.build("spectrum-x", gpus=32, nvlink_bandwidth_Bps=450e9)


def test_8_h100_ring_and_nvls(h100_8):
    net = netsim.make_backend("flow", h100_8, check_invariants=True)
    ring = net.estimate(Req("all_reduce", tuple(range(8)), GiB, "ring"))
    nvls = net.estimate(Req("all_reduce", tuple(range(8)), GiB, "nvls"))
    # hardware.md: ~370 GB/s effective ring busbw; NVLS peaks near 480 GB/s
    assert busbw("all_reduce", 8, GiB, ring) == pytest.approx(370e9, rel=0.15)
    assert busbw("all_reduce", 8, GiB, nvls) > busbw("all_reduce", 8, GiB, ring)
    assert busbw("all_reduce", 8, GiB, nvls) == pytest.approx(480e9, rel=0.15)
    # hardware.md: NVLS busbw ~370 GB/s at 4 GPUs
    nvls4 = net.estimate(Req("all_reduce", (0, 1, 2, 3), GiB, "nvls"))
    assert busbw("all_reduce", 4, GiB, nvls4) == pytest.approx(370e9, rel=0.15)
    # small-message floor: 13-20 us on 8 x H100
    small = net.estimate(Req("all_reduce", tuple(range(8)), 8))
    assert 10e-6 <= small <= 22e-6


@pytest.mark.parametrize("servers", [2, 4])
def test_multi_server_ring_is_nic_bound(servers, h100_32):
    n = 8 * servers
    net = netsim.make_backend("flow", h100_32)
    t = net.estimate(Req("all_reduce", tuple(range(n)), GiB, "ring"))
    per_nic = busbw("all_reduce", n, GiB, t) / 8   # 8 NICs per server carry the 8 ring channels
    assert per_nic == pytest.approx(47e9, rel=0.15)   # hardware.md: NDR ~46-48 GB/s per NIC via NCCL


def test_all_to_all_oversubscribed_factor():
    """4 servers, one ToR per server (8 NICs down). Full bisection: 8 uplinks per ToR; 2:1: 4.
    Every inter-server byte crosses a ToR uplink, and 24 of each GPU's 31 peers are remote, so
    with NICs as the limit on the full fabric the 2:1 fabric halves the usable uplink capacity:
    expected factor 2 in the fluid limit. Hash-based ECMP already loads some uplinks of the full
    fabric above the NIC rate, which lowers the measured ratio; accept 1.6..2.2.
    Absolute bounds (hand calculation): each GPU sends 24/32 of S over its 400 Gb/s NIC at
    47 GB/s effective (hardware.md), so the full fabric needs >= 0.75 S / 47 GB/s and the 2:1
    fabric, whose 4 uplinks per ToR carry 8 GPUs' remote traffic, >= twice that."""
    group = tuple(range(32))
    size = 256 * MiB
    times = {}
    for psw in (8, 4):
        t = topo.build("non-rail", gpus=32, nics_per_asw=8, asw_count=4, psw_count=psw)
        net = netsim.make_backend("flow", t, check_invariants=True)
        times[psw] = net.estimate(Req("all_to_all", group, size))
    nic_bound = 0.75 * size / 47e9
    assert nic_bound * (1 - 1e-6) <= times[8] <= 1.5 * nic_bound
    assert times[4] >= 2 * nic_bound * (1 - 1e-6)
    factor = times[4] / times[8]
    assert 1.6 <= factor <= 2.2, factor


def test_small_message_latency_across_servers_by_hand():
    """16 B ring all-reduce (LL) on 16 H100 over 2 servers (8 rings, each of 16 hops: 14 NVLink, 2
    network). Per call: host launch 1.6 us + NCCL Ring/LL base 6.6 us. Per hop (NCCL 2.30.7 hwLat):
    NVLink LL 0.6 us, but a multi-node ring step pays at least netOverhead 1.0 us (Intel), + 2 x 25 ns
    links = 1.05 us; network LL 2.7 us + 2 x 0.5 us links = 3.7 us (netsim.calibration, topo template
    latencies). A piece crosses 2(n-1) = 30 hops: one full lap (14 x 1.05 + 2 x 3.7 = 22.1 us) plus the
    worst 14 consecutive hops (both network hops + 12 NVLink hops = 20.0 us): 42.1 us; total 50.3 us.
    A 16 B all-gather crosses 15 hops (all but one NVLink hop: 13 x 1.05 + 2 x 3.7 = 21.05 us): 29.25 us.
    The payload (16 B at LL's 39 GB/s busbw cap) adds under a nanosecond."""
    t = topo.build("spectrum-x", gpus=16, nvlink_bandwidth_Bps=450e9)
    g = tuple(range(16))
    for kind in ("flow", "analytical"):
        net = netsim.make_backend(kind, t)
        assert net.estimate(Req("all_reduce", g, 16, "ring", protocol="LL")) == pytest.approx(50.3e-6, rel=1e-3)
        assert net.estimate(Req("all_gather", g, 16, "ring", protocol="LL")) == pytest.approx(29.25e-6, rel=1e-3)
        # the automatic choice at 16 B is LL (lowest latency)
        net.submit(Req("all_reduce", g, 16, "ring"), 0.0, lambda t: None)
        net.advance(1.0)
        assert net.records[-1].protocol == "LL"


CASES = [
    (8, "all_reduce", "ring"), (8, "all_reduce", "nvls"), (8, "all_gather", "ring"),
    (8, "reduce_scatter", "nvls"), (8, "all_to_all", "direct"), (8, "broadcast", "ring"),
    (16, "all_reduce", "ring"), (16, "all_reduce", "hierarchical"), (16, "all_to_all", "direct"),
    (32, "all_reduce", "ring"), (32, "all_gather", "ring"), (32, "all_reduce", "tree"),
    (12, "all_reduce", "ring"), (24, "reduce_scatter", "ring"), (2, "send", "p2p"),
    (32, "all_gather", "hierarchical"), (16, "reduce_scatter", "hierarchical"), (8, "all_reduce", "rhd"),
    # non-powers of two, uneven servers, chains and trees rooted at rank 0 (regressions: rhd on 3 GPUs
    # and tree on 8 + 4 GPUs were 14% / 11% apart when schedules were timed one allocation per level)
    (3, "all_reduce", "rhd"), (5, "all_reduce", "rhd"), (6, "all_reduce", "rhd"), (24, "all_reduce", "rhd"),
    (12, "all_reduce", "tree"), (20, "all_reduce", "tree"), (32, "broadcast", "ring"), (16, "reduce", "ring"),
    (16, "broadcast", "tree"), (32, "reduce", "tree"), (16, "all_to_all", "pairwise"), (4, "all_gather", "rhd"),
    (3, "all_reduce", "ring"), (4, "all_reduce", "nvls"),
]


@pytest.mark.parametrize("n,op,alg", CASES)
def test_analytical_matches_flow(n, op, alg, h100_32):
    flow = netsim.make_backend("flow", h100_32)
    ana = netsim.make_backend("analytical", h100_32)
    gpus = (0, 9) if op == "send" else tuple(range(n))
    for size in (MiB, 4 * MiB, 16 * MiB, 256 * MiB, GiB):
        req = Req(op, gpus, size, alg)
        a, f = ana.estimate(req), flow.estimate(req)
        assert a == pytest.approx(f, rel=0.10), (size, a, f)


GROUPS = {
    "2 per server over 4 servers": (0, 1, 8, 9, 16, 17, 24, 25),
    "4 + 4 over 2 servers": (0, 1, 2, 3, 8, 9, 10, 11),
    "rail 3": (3, 11, 19, 27),
    "shuffled over 2 servers": (5, 13, 2, 10, 7, 15, 0, 8),
}


@pytest.mark.parametrize("name", sorted(GROUPS))
def test_analytical_matches_flow_on_group_shapes(name, h100_32):
    flow = netsim.make_backend("flow", h100_32)
    ana = netsim.make_backend("analytical", h100_32)
    g = GROUPS[name]
    for op, alg in (("all_reduce", "ring"), ("all_reduce", "tree"), ("all_reduce", "auto"), ("all_gather", "ring"),
                    ("reduce_scatter", "ring"), ("all_to_all", "direct"), ("broadcast", "ring"), ("all_reduce", "rhd")):
        for size in (MiB, 64 * MiB, GiB):
            req = Req(op, g, size, alg)
            a, f = ana.estimate(req), flow.estimate(req)
            assert a == pytest.approx(f, rel=0.10), (op, alg, size, a, f)


def test_contention_between_groups(h100_32):
    """Two all-reduces whose rings share NICs are slower together than alone; both complete."""
    g1 = tuple(range(0, 32, 2))     # even local GPUs of 4 servers
    g2 = tuple(range(1, 32, 2))
    net = netsim.make_backend("flow", h100_32, check_invariants=True)
    alone = net.estimate(Req("all_to_all", g1, 64 * MiB))
    ends = []
    net.submit(Req("all_to_all", g1, 64 * MiB, tag="a"), 0.0, ends.append)
    net.submit(Req("all_to_all", tuple(range(32)), 64 * MiB, tag="b"), 0.0, ends.append)
    while not math.isinf(net.next_event_time()):
        net.advance(net.next_event_time())
    assert len(ends) == 2
    assert max(ends) > alone
    assert {r.tag for r in net.records} == {"a", "b"}
    _ = g2


def test_sim_style_driving_and_determinism(h100_32):
    def run():
        net = netsim.make_backend("flow", h100_32, check_invariants=True)
        log = []
        reqs = [Req("all_reduce", tuple(range(16)), 32 * MiB, tag="dp"),
                Req("all_gather", tuple(range(8, 24)), 8 * MiB, tag="ag"),
                Req("send", (3, 27), 4 * MiB, tag="pp"),
                Req("reduce_scatter", tuple(range(0, 32, 8)), 16 * MiB, tag="rs")]
        for i, r in enumerate(reqs):
            net.submit(r, i * 1e-4, lambda t, tag=r.tag: log.append((tag, t)))
        t = net.next_event_time()
        while t != math.inf:
            net.advance(t)
            t = net.next_event_time()
        return log

    a, b = run(), run()
    assert a == b and len(a) == 4


def test_analytical_backend_events(h100_8):
    net = netsim.make_backend("analytical", h100_8)
    done = []
    req = Req("all_reduce", tuple(range(8)), GiB, "ring")
    net.submit(req, 1.0, done.append)
    assert net.next_event_time() == pytest.approx(1.0 + net.estimate(req))
    net.advance(1.0)
    assert not done
    net.advance(10.0)
    assert done == [pytest.approx(1.0 + net.estimate(req))]
    assert net.next_event_time() == math.inf


def test_trivial_requests_complete(h100_8):
    for kind in ("flow", "analytical"):
        net = netsim.make_backend(kind, h100_8)
        done = []
        net.submit(Req("all_reduce", (3,), GiB), 0.5, done.append)
        net.submit(Req("all_gather", (0, 1), 0), 0.5, done.append)
        net.advance(0.5)
        assert done == [0.5, 0.5]


def test_auto_choice_rule(h100_8, h100_32):
    flow = netsim.make_backend("flow", h100_8)
    flow.submit(Req("all_reduce", tuple(range(8)), GiB), 0.0, lambda t: None)
    flow.submit(Req("all_reduce", tuple(range(8)), 4096), 0.0, lambda t: None)
    flow.run_until_idle()
    algs = [r.algorithm for r in sorted(flow.records, key=lambda r: r.size_bytes)]
    assert algs == ["ring", "nvls"]     # small: ring latency wins; large: NVLS bandwidth wins
    multi = netsim.make_backend("analytical", h100_32)
    multi.submit(Req("all_reduce", tuple(range(32)), 4096), 0.0, lambda t: None)
    multi.submit(Req("all_to_all", tuple(range(32)), 4096), 0.0, lambda t: None)
    assert [r.algorithm for r in multi.records] == ["tree", "direct"]


@pytest.mark.parametrize("req,msg", [
    (Req("all_reduce", (0, 99), 10), "rank 99 is not a GPU"),
    (Req("all_reduce", (), 10), "empty group"),
    (Req("all_reduce", (1, 2, 1), 10), "appears twice"),
    (Req("all_reduce", (0, 1), -5), "size_bytes must be >= 0"),
    (Req("all_reduce", (0, 1), 10, "bogus"), "unknown algorithm 'bogus'"),
    (Req("all_to_all", (0, 1), 10, "ring"), "does not apply to all_to_all"),
    (Req("all_reduce", tuple(range(16)), 10, "nvls"), "one NVLink domain"),
    (Req("frobnicate", (0, 1), 10), "unknown collective op"),
    (Req("send", (0, 1, 2), 10), "group must be"),
])
def test_bad_input(req, msg, h100_32):
    for kind in ("flow", "analytical"):
        net = netsim.make_backend(kind, h100_32)
        with pytest.raises(NetsimError, match=msg) as exc:
            net.submit(req, 0.0, lambda t: None)
        assert "\n" not in str(exc.value)


def test_unknown_backend(h100_8):
    with pytest.raises(NetsimError, match="unknown network backend"):
        netsim.make_backend("packet", h100_8)
    with pytest.raises(NetsimError, match="unknown option"):
        netsim.make_backend("flow", h100_8, colour="red")


def test_two_servers_tree_beats_nic_bound_ring():
    """hardware.md: on exactly 2 nodes NCCL picks tree and busbw can exceed the NIC limit; measured
    (nccl_model.md 6.2): 2 x 8 H100 with 8 x 200 Gb/s NICs per node reach 339 GB/s busbw at 8 GiB,
    above 8 NICs x 24 GB/s = 192 GB/s. The ring is NIC-bound; the tree is not (its NVLink chains bound it)."""
    t = topo.build("spectrum-x", gpus=16, nvlink_bandwidth_Bps=450e9, nic_bandwidth_Bps="200Gbps")
    net = netsim.make_backend("flow", t)
    g = tuple(range(16))
    ring = net.estimate(Req("all_reduce", g, GiB, "ring"))
    tree = net.estimate(Req("all_reduce", g, GiB, "tree"))
    assert tree < ring
    assert busbw("all_reduce", 16, GiB, ring) < 8 * 24e9
    assert busbw("all_reduce", 16, GiB, tree) > 1.3 * 8 * 24e9
    net.submit(Req("all_reduce", g, GiB), 0.0, lambda t: None)
    net.run_until_idle()
    assert net.records[-1].algorithm == "tree"


def test_pxn_routes_through_nvlink_peer():
    t = topo.build("spectrum-x", gpus=16)
    plain = netsim.make_backend("flow", t)
    pxn = netsim.make_backend("flow", t, pxn=True)
    req = Req("all_to_all", tuple(range(16)), 64 * MiB, "pxn")
    # PXN: GPU 0 -> GPU 9 (other rail) first crosses NVLink to the rail-1 GPU of its own server
    chans = pxn.planner.view.path(0, 9, 0, pxn=True)
    kinds = [pxn.planner.view.channel_kind(c) for c in chans]
    assert kinds[0] == "nvlink" and "network" in kinds
    assert pxn.estimate(req) > 0
    # with the backend option every flow uses PXN routes: a send GPU 0 -> GPU 9 (other rail) starts
    # on NVLink; without it, it starts on the network
    g = (0, 9)
    for net, first in ((pxn, "nvlink"), (plain, "network")):
        f = net.planner.flows("send", "p2p", g, net.planner.shape(g)[0])[0]
        kinds = {net.planner.view.channel_kind(int(c)) for c in f.channels}
        assert first in kinds and "network" in kinds
        assert ("nvlink" in kinds) == (first == "nvlink")
    with pytest.raises(NetsimError, match="does not apply"):
        plain.estimate(Req("all_reduce", tuple(range(16)), 1, "pxn"))


def test_statistics(h100_8):
    net = netsim.make_backend("flow", h100_8, record_link_timeline=True, record_flows=True)
    net.submit(Req("all_reduce", tuple(range(8)), 256 * MiB, "ring", tag="x"), 0.0, lambda t: None)
    net.run_until_idle()
    rec = net.records[0]
    assert rec.tag == "x" and rec.time_s > 0
    times, util = net.link_utilization_timeline()
    assert times[0] >= 0 and util.max() <= 1 + 1e-9
    # during the ring every GPU's NVLink port is saturated (the ring's bottleneck)
    busy = util[:-1].max(axis=0)
    assert (busy > 0.99).sum() >= 8
    fct = net.flow_completion_times()
    assert len(fct) == 1 and fct[0][2] == pytest.approx(rec.end_s)
    mean = net.link_utilization()
    assert 0 < mean.max() <= 1 + 1e-9


def test_ring_window_latency():
    from netsim.resolve import ring_window_s
    hops = [1.0, 1.0, 6.0, 1.0, 1.0, 6.0]            # a ring of 6 hops, two of them network
    assert ring_window_s(hops, 5) == pytest.approx(15.0)    # skip one 1.0 hop
    assert ring_window_s(hops, 2) == pytest.approx(7.0)
    assert ring_window_s(hops, 10) == pytest.approx(16.0 + 14.0)  # a full lap + the worst 4: 6, 1, 1, 6
    assert ring_window_s(hops, 0) == 0.0 and ring_window_s([], 3) == 0.0
