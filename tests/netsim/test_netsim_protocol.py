"""The NCCL-like protocol layer, checked by hand from the sourced constants (nccl_model.md, hardware.md).

Every expected number below is computed in the test from the published constants, not from netsim.
"""

from __future__ import annotations

import pytest

topo = pytest.importorskip("topo")

import netsim  # noqa: E402
from netsim import CollectiveRequest as Req  # noqa: E402
from netsim import NetCalibration, NetsimError  # noqa: E402

KiB, MiB, GiB = 1 << 10, 1 << 20, 1 << 30
US = 1e-6
LAUNCH = 1.6 * US            # host launch per GPU of the calling process
NV_PROP = 2 * 25e-9          # GPU -> NVSwitch -> GPU, SimAI template NVLink latency 0.000025 ms per link


@pytest.fixture(scope="module")
def h100():
    return topo.build("spectrum-x", gpus=8, nvlink_bandwidth_Bps=450e9, psw_count=1)


@pytest.fixture(scope="module")
def a100():
    return topo.build("spectrum-x", gpus=8, gpu_type="A100", nvlink_bandwidth_Bps=300e9, psw_count=1)


G8 = tuple(range(8))


@pytest.mark.parametrize("kind", ["flow", "analytical"])
def test_8_h100_ring_ll_floor_and_launch_switch(h100, kind):
    """NCCL 2.30.7 Ring/LL latency on 8 NVLink GPUs: base 6.6 + 14 x 0.6 us (= NCCL's 15.0 us) + 14 x 50 ns
    propagation, + one host launch (1.6 us) per GPU the process drives; 8 B of payload adds < 1 ns."""
    ring_ll = 6.6 * US + 14 * (0.6 * US + NV_PROP)
    req = Req("all_reduce", G8, 8, "ring", protocol="LL")
    assert netsim.make_backend(kind, h100).estimate(req) == pytest.approx(LAUNCH + ring_ll, rel=1e-3)
    assert netsim.make_backend(kind, h100, launch_overhead=False).estimate(req) == pytest.approx(ring_ll, rel=1e-3)
    # nccl-tests -g 8: one process launches on all 8 GPUs
    assert netsim.make_backend(kind, h100, gpus_per_process=8).estimate(req) == pytest.approx(8 * LAUNCH + ring_ll,
                                                                                             rel=1e-3)
    # hardware.md: an 8 x H100 all-reduce floor of roughly 13-20 us (automatic choice)
    assert 13 * US <= netsim.make_backend(kind, h100).estimate(Req("all_reduce", G8, 8)) <= 20 * US


@pytest.mark.parametrize("kind", ["flow", "analytical"])
def test_ll_bandwidth_is_half_the_link_capped_by_llmaxbw(h100, kind):
    """Ring LL busbw = min(0.5 x 370 GB/s, llMaxBw Hopper 1 node 141 GB/s) = 141 GB/s; LL has no
    chunk-level fill. 64 MiB: latency + S x 14/8 / 141 GB/s."""
    size = 64 * MiB
    lat = LAUNCH + 6.6 * US + 14 * (0.6 * US + NV_PROP)
    t = netsim.make_backend(kind, h100).estimate(Req("all_reduce", G8, size, "ring", protocol="LL"))
    assert t == pytest.approx(lat + size * 14 / 8 / 141e9, rel=1e-3)


@pytest.mark.parametrize("kind", ["flow", "analytical"])
def test_ring_simple_pays_one_chunk_of_fill(a100, kind):
    """8 x A100 ring Simple, 16 MiB: Ampere NVLink hops measured at 1.0/0.6 x NCCL's table (nccl_model.md
    6.3): Simple hop 3.4 x 1.667 us; link 230 GB/s (hardware.md); 24 channels carry S x 14/8 / 24 bytes
    each; a 2 MiB chunk (4 steps x 512 KiB) of fill: bytes x (1 + C / (s + C))."""
    size = 16 * MiB
    s = size * 14 / 8 / 24
    c = 2 * MiB
    lat = LAUNCH + 8.4 * US + 14 * (3.4 * US / 0.6 + NV_PROP)
    expect = lat + size * 14 / 8 * (1 + c / (s + c)) / 230e9
    t = netsim.make_backend(kind, a100).estimate(Req("all_reduce", G8, size, "ring", protocol="Simple"))
    assert t == pytest.approx(expect, rel=1e-3)


@pytest.mark.parametrize("kind", ["flow", "analytical"])
def test_nvls_time_by_hand(h100, kind):
    """NVLS: NCCL's 25 us latency (+ two switch round trips of propagation); each GPU port moves
    S (1 + 1/n) at 480 x 9/14 GB/s (the NVLS port throughput that gives ~480 GB/s busbw at n = 8);
    16 NVLS channels with a 1 MiB fill chunk each."""
    size = 8 * GiB
    rate = 480e9 * 9 / 14 / (1 + 1 / 8)
    s = size / 16
    expect = LAUNCH + 25 * US + 2 * 2 * 25e-9 + size * (1 + MiB / (s + MiB)) / rate
    t = netsim.make_backend(kind, h100).estimate(Req("all_reduce", G8, size, "nvls"))
    assert t == pytest.approx(expect, rel=1e-3)
    bus = size / t * 14 / 8
    assert bus == pytest.approx(480e9, rel=0.01)


def test_small_groups_and_p2p_floors_are_5_to_17_us():
    """The issue: 2-4 GPU groups and p2p sends floored at 1-6 us where real ones are 5-17 us
    (nccl_model.md 6.3: 10.0 us at 2 GPUs, 16.9 us at 4)."""
    t = topo.build("spectrum-x", gpus=16, nvlink_bandwidth_Bps=450e9)
    for kind in ("flow", "analytical"):
        net = netsim.make_backend(kind, t)
        for req in (Req("all_reduce", (0, 1), 8), Req("all_reduce", (0, 1, 2, 3), 8),
                    Req("all_gather", (0, 1), 8), Req("send", (0, 1), 8), Req("send", (0, 8), 8)):
            assert 5 * US <= net.estimate(req) <= 17 * US, req
        # by hand: p2p over NVLink = launch + LL base 6.6 us + one NVLink hop 0.6 us + propagation
        assert net.estimate(Req("send", (0, 1), 8)) == pytest.approx(LAUNCH + 6.6 * US + 0.6 * US + NV_PROP,
                                                                    rel=1e-3)


def test_protocol_override_and_records(h100):
    net = netsim.make_backend("flow", h100)
    for proto in ("LL", "ll128", "Simple"):
        net.submit(Req("all_reduce", G8, 4 * MiB, "ring", protocol=proto), 0.0, lambda t: None)
    net.run_until_idle()
    assert [r.protocol for r in net.records] == ["LL", "LL128", "Simple"]
    assert [r.algorithm for r in net.records] == ["ring"] * 3
    with pytest.raises(NetsimError, match="protocol LL128 does not apply to nvls"):
        net.estimate(Req("all_reduce", G8, MiB, "nvls", protocol="LL128"))
    with pytest.raises(NetsimError, match="protocol LL128 does not apply to p2p"):
        net.estimate(Req("send", (0, 1), MiB, protocol="LL128"))
    with pytest.raises(NetsimError, match="unknown protocol 'LL256'"):
        net.estimate(Req("all_reduce", G8, MiB, protocol="LL256"))
    # protocol forced, algorithm automatic: the fastest algorithm that runs it
    net.submit(Req("all_reduce", G8, GiB, protocol="LL128"), 0.0, lambda t: None)
    net.run_until_idle()
    assert (net.records[-1].algorithm, net.records[-1].protocol) == ("ring", "LL128")


def test_automatic_choice_follows_nccls_regimes(h100, a100):
    """nccl_model.md 5.2 (NCCL's own choice): 8 x H100 Ring/LL at small sizes, NVLS at large ones;
    8 x A100 Ring/LL small, Ring/Simple at large (LL128 between)."""
    def choice(t, size):
        net = netsim.make_backend("analytical", t)
        net.submit(Req("all_reduce", G8, size), 0.0, lambda t: None)
        return net.records[-1].algorithm, net.records[-1].protocol

    assert choice(h100, 8) == ("ring", "LL") and choice(h100, 64 * KiB) == ("ring", "LL")
    assert choice(h100, 256 * MiB) == ("nvls", "Simple")
    assert choice(a100, 8) == ("ring", "LL") and choice(a100, 8 * MiB) == ("ring", "LL128")
    assert choice(a100, 4 * GiB) == ("ring", "Simple")


def test_multi_node_latency_terms():
    """2 x 8 H100: a multi-node Ring/Simple all-reduce multiplies its latency by NCCL's ring plateau
    factor 1.4; a NetCalibration's network_latency_s adds to every network hop (a tree's up and down
    paths each cross the network once)."""
    t = topo.build("spectrum-x", gpus=16, nvlink_bandwidth_Bps=450e9)
    g = tuple(range(16))
    plan = netsim.make_backend("analytical", t).planner.plan("all_reduce", "ring", "simple", g)
    assert plan.timing(16 * MiB) == (pytest.approx((LAUNCH + 8.4 * US) * 1.4), 1.4)
    assert plan.timing(64)[1] == 1.0                        # below 64 B per channel and rank: no plateau
    base = netsim.make_backend("analytical", t).estimate(Req("all_reduce", g, 8, "tree", protocol="LL"))
    slow = netsim.make_backend("analytical", t, net_calibration=NetCalibration(network_latency_s=50 * US))
    assert slow.estimate(Req("all_reduce", g, 8, "tree", protocol="LL")) == pytest.approx(base + 100 * US, rel=1e-3)


def test_make_backend_rejects_a_non_calibration(h100):
    with pytest.raises(NetsimError, match="net_calibration must be a netsim.NetCalibration"):
        netsim.make_backend("flow", h100, net_calibration={"fill_scale": 2})
    with pytest.raises(NetsimError, match="gpus_per_process must be an integer >= 1"):
        netsim.make_backend("analytical", h100, gpus_per_process=0)
