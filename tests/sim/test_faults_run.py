"""Jobs on faulted fabrics: DP time under a failed spine, unplaceable jobs, fault flags of run / compare."""

from __future__ import annotations

import csv

import pytest
from helpers_sim import comp, single_stage

import topo
from sim.cli import main
from sim.errors import SimError
from sim.fabric_faults import check_placeable
from sim.placement import place
from sim.simulation import simulate
from topo.faults import apply_faults, fault_set
from workload_gen.workload import CommOp

GiB = 1 << 30
FAT_TREE = "fat-tree:k=4,gpus_per_server=2"


def _dp_job():
    """TP 2 x DP 8 on 16 GPUs: one 1 GiB gradient all-reduce per DP group at the iteration's end (exposed)."""
    return single_stage([comp("f", 1e-3)], [comp("b", 2e-3, phase="bwd", variant="dgrad")],
                        end=[CommOp("grad", "all_reduce", "dp", GiB, phase="iteration_end", blocking=True)],
                        dp=8, tp=2)


def test_failed_spine_doubles_the_dp_all_reduce():
    """k=4 fat tree, 2 GPUs per server: 8 servers in 4 pods of 2 spines. The DP rings (even GPUs,
    odd GPUs) leave and enter pod 0 once each, on links of their own while healthy; with spine 0 of pod 0
    failed the two rings share pod 0's surviving up- and down-links: half the rate. Ring all-reduce
    bandwidth term by hand: 2 (n-1)/n S / 47 GB/s (hardware.md: 400 Gb/s NIC link via NCCL) =
    0.03998 s for n = 8, S = 1 GiB; failed: twice that."""
    t = topo.build("fat-tree", k=4, gpus=16, gpus_per_server=2)
    w = _dp_job()
    healthy = simulate(w, t, gpu="H100", sampling="full").exposed_comm_s["DP"]
    failed = simulate(w, apply_faults(t, fault_set(fail=["spine:0"])), gpu="H100", sampling="full").exposed_comm_s["DP"]
    by_hand = 2 * 7 / 8 * GiB / 47e9
    assert healthy == pytest.approx(by_hand, rel=0.03)       # + latencies and pipeline fill
    assert failed == pytest.approx(2 * by_hand, rel=0.03)
    assert failed / healthy == pytest.approx(2.0, rel=0.02)


def test_unused_failed_server_does_not_block_a_job():
    t = topo.build("fat-tree", k=4, gpus=16, gpus_per_server=2)
    w = single_stage([comp("f", 1e-3)], [], dp=4, tp=2)          # GPUs 0-7
    faults = fault_set(fail=["server:7", "nic:gpu12"])
    t2 = apply_faults(t, faults)
    check_placeable(t, faults, t2, place(w.plan, t2))
    with pytest.raises(SimError, match=r"^job unplaceable: rank 2 runs on GPU 2 \(server 1\), which failed "
                                       r"\(server:1\)$"):
        faults = fault_set(fail=["server:1"])
        t3 = apply_faults(t, faults)
        check_placeable(t, faults, t3, place(w.plan, t3))


def _err(capsys):
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    return err[0]


def test_lost_only_nic_makes_the_job_unplaceable(tmp_path, capsys):
    """One NIC per server (8 GPUs share it): failing server 1's NIC cuts GPUs 8-15 off the network."""
    out = tmp_path / "res"
    rc = main(["run", "-t", "spectrum-x:nics=true,gpus_per_nic=8", "--fail", "nic:1", "-o", str(out), "-q"])
    assert rc == 2 and not out.exists()
    assert _err(capsys) == ("clustersim: error: job unplaceable: GPU 8 (rank 8, server 1) lost its network link "
                            "(nic:1 failed) and its dp group needs GPU 0")


@pytest.mark.parametrize("flags, msg", [
    (["--fail", "spine:64"], "clustersim: error: --fail 'spine:64': no spine 64 in this topology (valid here: "
                             "gpu:0..31, server:0..3, nic:gpuN, tor:0..7, spine:0..63, nvswitch:0..3, node:0..107, "
                             "link:A-B)"),
    (["--degrade", "tor:0=2"], "clustersim: error: --degrade 'tor:0=2': factor must be in (0, 1) (use --fail for "
                               "a failed part), got 2"),
    (["--faults", "missing.yaml"], "clustersim: error: missing.yaml: fault file not found"),
])
def test_bad_fault_flags_exit_2_and_write_nothing(tmp_path, capsys, monkeypatch, flags, msg):
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "res"
    assert main(["run", *flags, "-o", str(out), "-q"]) == 2
    assert _err(capsys) == msg and not out.exists()


def test_compare_bad_variant_fails_before_simulating(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = main(["compare", "-t", "spectrum-x", "--faults-variant", "ok=spine:0", "--faults-variant", "bad=core:0",
               "-o", str(out), "-q"])
    assert rc == 2 and not out.exists()
    assert _err(capsys).startswith("clustersim: error: --faults-variant bad 'core:0': this topology has no 'core' "
                                   "switches")
    assert main(["compare", "--faults-variant", "noname", "-o", "-", "-q"]) == 2
    assert _err(capsys) == ("clustersim: error: --faults-variant 'noname': expected NAME=PARTS, e.g. "
                            "one-spine=spine:0 or healthy=")


@pytest.mark.slow
def test_compare_healthy_vs_one_spine(tmp_path, capsys):
    out = tmp_path / "cmp"
    rc = main(["compare", "-t", FAT_TREE, "--gpus", "16", "-m", "aicb-7", "--tp", "2", "--dp", "8",
               "--global-batch", "16", "--seq-length", "1024", "--faults-variant", "healthy=",
               "--faults-variant", "one-spine=spine:0", "-o", str(out), "-q"])
    assert rc == 0
    with open(out / "compare.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert list(rows[0])[:2] == ["fabric", "faults"]
    vals = {r["faults"]: r for r in rows}
    assert set(vals) == {"healthy", "one-spine"}
    h, f = vals["healthy"], vals["one-spine"]
    assert float(f["exposed_DP_s"]) > 1.5 * float(h["exposed_DP_s"])
    # same kernels; only the slowdown by communication in flight may differ
    assert float(f["compute_s"]) == pytest.approx(float(h["compute_s"]), rel=0.01)
    assert "one-spine" in capsys.readouterr().out
