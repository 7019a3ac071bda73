"""sim.serve.replica: replicas on a topology, their groups, which of them share fabric links."""

from __future__ import annotations

import pytest

from netsim.backend import Planner
from sim.errors import SimError
from sim.inputs import make_topology
from sim.serve.plan import ServingPlan
from sim.serve.replica import link_sharing, place_replicas


@pytest.fixture(scope="module")
def spx64():
    return make_topology("spectrum-x", gpus=64, gpu_type="H100")


def test_contiguous_placement_formula(spx64):
    plan = ServingPlan(tp=4, pp=2, replicas=8)
    pl = place_replicas(plan, spx64)
    for r, rep in enumerate(pl.replicas):
        for s in range(2):
            assert rep.tp_group(s) == tuple(r * 8 + s * 4 + i for i in range(4))
    assert pl.replicas[3].pp_pairs(0) == ((24, 28), (25, 29), (26, 30), (27, 31))
    assert pl.replicas[3].pp_pairs(1) == ()
    assert pl.ep_group(0, 0) == ()
    assert len(pl.units()) == 16


def test_ep_group_is_the_tp_group(spx64):
    pl = place_replicas(ServingPlan(tp=4, ep=4, replicas=2), spx64)
    assert pl.ep_group(1, 0) == (4, 5, 6, 7)


def test_topology_too_small_is_one_line(spx64):
    with pytest.raises(SimError) as e:
        place_replicas(ServingPlan(tp=8, pp=2, replicas=5), spx64)
    assert str(e.value) == ("serving plan needs 80 GPUs (5 replicas x tp 8 x pp 2) but the topology has only 64")


def test_mapping_and_its_errors(spx64):
    pl = place_replicas(ServingPlan(tp=2, replicas=2), spx64, mapping=[8, 0, 16, 24])
    assert pl.replicas[0].tp_group(0) == (8, 0) and pl.replicas[1].gpus == (16, 24)
    with pytest.raises(SimError, match="same GPU"):
        place_replicas(ServingPlan(tp=2, replicas=2), spx64, mapping=[0, 1, 1, 2])
    with pytest.raises(SimError, match="names GPU 99"):
        place_replicas(ServingPlan(tp=2), spx64, mapping=[0, 99])
    with pytest.raises(SimError, match="lists 1 GPUs"):
        place_replicas(ServingPlan(tp=2), spx64, mapping=[0])


def test_mapping_file(tmp_path, spx64):
    f = tmp_path / "map.txt"
    f.write_text("# replica 0\n7\n6\n")
    assert place_replicas(ServingPlan(tp=2), spx64, mapping=f).replicas[0].gpus == (7, 6)


def test_tp_inside_servers_shares_nothing(spx64):
    pl = place_replicas(ServingPlan(tp=4, replicas=16), spx64)
    sharing = link_sharing(pl, Planner(spx64))
    assert sharing.replica_pairs() == set()
    assert not any(sharing.shares(u) for u in pl.units())
    # a TP group uses only its own GPUs' NVLink ports
    assert all(sharing.channels[((r, 0), "tp")] for r in range(16))


def test_groups_crossing_a_shared_uplink_share():
    topo = make_topology("dcn+:gpus=4,gpus_per_server=1,nics_per_asw=2,psw_count=1,asw_per_psw=8",
                         gpu_type="H100")
    pl = place_replicas(ServingPlan(tp=2, replicas=2), topo, mapping=[0, 2, 1, 3])
    sharing = link_sharing(pl, Planner(topo))
    assert sharing.replica_pairs() == {(0, 1)}
    assert sharing.conflicts[((0, 0), "tp")] == (frozenset({((1, 0), "tp")}),)


def test_pipeline_stages_of_one_replica_share_receiving_ports(spx64):
    # stage 0 sends into stage 1's GPUs, whose ports stage 1's TP collectives use too
    pl = place_replicas(ServingPlan(tp=4, pp=2, replicas=1), spx64)
    sharing = link_sharing(pl, Planner(spx64))
    assert sharing.channels[((0, 0), "pp")] & sharing.channels[((0, 1), "tp")]
    assert sharing.replica_pairs() == set()


def test_replicas_on_a_simai_topology_file(shared_dir):
    import topo
    t = topo.read_simai_topology(shared_dir / "data" / "simai_topologies" / "Spectrum-X_8g_8gps_400Gbps_H100")
    pl = place_replicas(ServingPlan(tp=4, replicas=2), t)
    assert [r.gpus for r in pl.replicas] == [(0, 1, 2, 3), (4, 5, 6, 7)]
    assert link_sharing(pl, Planner(t)).replica_pairs() == set()
    with pytest.raises(SimError, match="only 8"):
        place_replicas(ServingPlan(tp=8, replicas=2), t)


def test_replicas_behind_one_nic_share():
    # PCIe servers, one NIC per 2 GPUs: TP groups (0, 8) and (1, 9) leave their servers through the
    # same two NICs; (0, 1) and (2, 3) stay on their PCIe switches
    topo = make_topology("pcie", gpus=16, gpu_type="L40S")
    crossing = place_replicas(ServingPlan(tp=2, replicas=2), topo, mapping=[0, 8, 1, 9])
    assert link_sharing(crossing, Planner(topo)).replica_pairs() == {(0, 1)}
    local = place_replicas(ServingPlan(tp=2, replicas=2), topo)
    assert link_sharing(local, Planner(topo)).replica_pairs() == set()
