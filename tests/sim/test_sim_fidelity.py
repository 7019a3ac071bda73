"""Fidelity models of the executor, checked against hand calculations on hand-built workloads:
communication in flight slows the compute beside it (sim.contention), launches and the host cost
time (sim.overheads), the batched pipeline p2p synchronises the device."""

from __future__ import annotations

import pytest
from helpers_sim import FakeTopo, comp, pipeline_workload, single_stage

from compute_db.gpus import get_gpu
from sim.contention import NCCL_HBM_BYTES_PER_LINK_BYTE, ContentionModel
from sim.engine import Engine
from sim.idealnet import IdealNetwork
from sim.overheads import HostOverheads
from sim.placement import place
from workload_gen.workload import CommOp, ComputeOp

H100 = get_gpu("H100")
SMS, CTAS = 132, 24            # H100 SXM SMs; NCCL coll channels on 8 x H100 (nccl_model.md 4.3)


def run(w, net=None, **kw):
    topo = FakeTopo(max(64, w.plan.world_size))
    return Engine(w, place(w.plan, topo), topo, net or IdealNetwork(), lambda op: op.time_s, **kw).run()


def membound(name: str, t: float, nbytes: float = 1e9) -> ComputeOp:
    return ComputeOp(name, "elementwise", (("numel", 1),), "bf16", 0.0, nbytes, layer=0, time_s=t)


def _overlap_workload(dp: int, size: float, first):
    ar = CommOp("ar", "all_reduce", "dp", int(size), blocking=False, wait_op="g2")
    return single_stage([ar, first, comp("g2", 0.25)], [comp("b", 1.0, "bwd")], dp=dp)


@pytest.mark.parametrize("dp", [4, 16])      # 4: NVLink-local, timed arithmetically; 16: event-driven
def test_overlapped_gemm_slower_than_alone_by_the_sm_share(dp):
    d = 0.5
    w = _overlap_workload(dp, 1e9, comp("g1", 1.0))
    alone = run(w, IdealNetwork(lambda req: d))
    beside = run(w, IdealNetwork(lambda req: d), contention=ContentionModel(H100))
    assert alone.iteration_time_s == pytest.approx(2.25)
    # g1 runs on (132 - 24) of 132 SMs while the all-reduce is in flight [0, 0.5], then at full speed
    f = SMS / (SMS - CTAS)
    g1 = d + (1.0 - d / f)
    assert beside.iteration_time_s == pytest.approx(g1 + 0.25 + 1.0, rel=1e-12)
    assert beside.stages[0].slowdown_s == pytest.approx(g1 - 1.0, rel=1e-12)
    assert beside.stages[0].compute_s == pytest.approx(g1 + 1.25, rel=1e-12)
    assert beside.iteration_time_s > alone.iteration_time_s


def test_memory_bound_kernel_slowed_by_the_collectives_hbm_traffic():
    d, size, n = 0.5, 200e9, 4
    w = _overlap_workload(n, size, membound("m1", 1.0))
    r = run(w, IdealNetwork(lambda req: d), contention=ContentionModel(H100))
    # bytes arrive at min(NVLink line rate, the collective's own rate); 3 HBM bytes per link byte
    rate = min(H100.nvlink_Bps, size * 2 * (n - 1) / n / d)
    h = NCCL_HBM_BYTES_PER_LINK_BYTE * rate / H100.hbm_Bps
    f = 1.0 / (1.0 - h)
    m1 = d + (1.0 - d / f)
    assert r.iteration_time_s == pytest.approx(m1 + 1.25, rel=1e-12)


def test_small_message_uses_fewer_ctas():
    # 64 KiB -> 2 channels of 32 KiB (NCCL enqueue rule for Simple): s = 2/132
    d = 0.5
    w = _overlap_workload(4, 64 * 1024, comp("g1", 1.0))
    r = run(w, IdealNetwork(lambda req: d), contention=ContentionModel(H100))
    f = SMS / (SMS - 2)
    assert r.iteration_time_s == pytest.approx(d + (1.0 - d / f) + 1.25, rel=1e-12)


def test_tp_comm_overlap_userbuffers_footprints():
    cm = ContentionModel(H100, tp_comm_overlap=True)
    ag = CommOp("x_ag", "all_gather", "tp", 10**8, blocking=False, wait_op="@after:qkv")
    bulk = CommOp("x_ag_bwd", "all_gather", "tp", 10**8, blocking=False, wait_op="qkv_wgrad")
    rs = CommOp("x_rs", "reduce_scatter", "tp", 10**8, blocking=False, wait_op="@after:proj")
    assert cm.footprint(ag, 8, True).sms == 1            # TE ring-exchange: copy engines
    assert cm.footprint(bulk, 8, True).sms == 16         # TE bulk overlap
    assert cm.footprint(rs, 8, True).sms == 16           # TE pipelined reduce-scatter
    nccl = ContentionModel(H100).footprint(rs, 8, True)
    assert nccl.sms == CTAS and nccl.hbm_Bps == pytest.approx(3 * H100.nvlink_Bps)
    assert cm.footprint(ag, 8, True).hbm_Bps == pytest.approx(2 * H100.nvlink_Bps)


def test_unknown_gpu_keeps_only_the_hbm_term():
    cm = ContentionModel(get_gpu("MI300X"))
    assert not cm.has_sm_term
    fp = cm.footprint(CommOp("a", "all_reduce", "dp", 10**9, blocking=False), 8, True)
    assert fp.sms == 0 and fp.hbm_Bps > 0


# ------------------------------------------------------------------ launches and the host
def test_host_bound_short_kernels():
    n, t, host, gap = 50, 1e-6, 10e-6, 0.9e-6
    w = single_stage([comp(f"k{i}", t) for i in range(n)], [])
    r = run(w, host=HostOverheads(kernel_gap_s=gap, host_per_kernel_s=host, sync_on_pipeline_p2p=False))
    # kernel i is issued at (i+1)*host and runs [that + gap, + t]: the GPU waits for the CPU every time
    assert r.iteration_time_s == pytest.approx(n * host + gap + t, rel=1e-12)
    st = r.stages[0]
    assert st.compute_s == pytest.approx(n * t)
    assert st.overhead_s == pytest.approx(n * host + gap + t - n * t, rel=1e-12)


def test_long_kernels_pay_only_the_launch_gap():
    n, t, host, gap = 20, 1e-3, 10e-6, 0.9e-6
    w = single_stage([comp(f"k{i}", t) for i in range(n)], [])
    r = run(w, host=HostOverheads(kernel_gap_s=gap, host_per_kernel_s=host, sync_on_pipeline_p2p=False))
    # the CPU is ahead after the first issue: first kernel waits host + gap, the others only the gap
    assert r.iteration_time_s == pytest.approx(host + n * (gap + t), rel=1e-12)


def test_item_sync_makes_the_host_reissue():
    host, gap, d = 10e-6, 0.0, 1e-3
    norm = CommOp("grad_norm_ar_mp", "all_reduce", "dp", 4, phase="iteration_end")
    end = [norm, comp("opt", 1e-3, "iteration_end", variant="step")]
    w = single_stage([comp("f", 1e-3)], [comp("b", 1e-3, "bwd")], end, dp=16)
    hm = HostOverheads(kernel_gap_s=gap, host_per_kernel_s=host, sync_on_pipeline_p2p=False,
                       host_sync_ops=("grad_norm_ar",))
    synced = run(w, IdealNetwork(lambda req: d), host=hm)
    free = run(w, IdealNetwork(lambda req: d), host=HostOverheads(kernel_gap_s=gap, host_per_kernel_s=host,
                                                                   sync_on_pipeline_p2p=False))
    # f at host, b right after, the norm all-reduce (issued by the host long before) for d; after
    # .item() the host issues the optimizer kernel only then: + host
    assert free.iteration_time_s == pytest.approx(host + 2e-3 + d + 1e-3, rel=1e-12)
    assert synced.iteration_time_s == pytest.approx(free.iteration_time_s + host, rel=1e-12)


def test_batched_p2p_device_sync_waits_for_collectives_in_flight():
    # 2 stages, 2 micro-batches, 1F1B. Stage 0's forward of the LAST micro-batch starts a collective of
    # D seconds that is waited only at the iteration end (like a gradient bucket). Without the sync it
    # hides under the backward passes; megatron-core's torch.cuda.synchronize after the batched p2p
    # before stage 0's first backward waits for it.
    tf, tb, D = 1.0, 2.0, 4.0
    w = pipeline_workload(2, 1, 2, tf, tb, "1f1b", send_bytes=1000)
    w.stages[0].chunks[0].forward.insert(0, CommOp("g", "all_reduce", "tp", 1000, blocking=False,
                                                   microbatch="last"))

    def net():
        return IdealNetwork(lambda req: D if req.op == "all_reduce" else 0.0)

    free = run(w, net(), host=HostOverheads(kernel_gap_s=0.0, host_per_kernel_s=0.0, sync_on_pipeline_p2p=False))
    synced = run(w, net(), host=HostOverheads(kernel_gap_s=0.0, host_per_kernel_s=0.0, sync_on_pipeline_p2p=True))
    assert free.stages[0].exposed_s["TP"] == pytest.approx(0.0)
    # stage 0: F0 [0, tf], F1 [tf, 2 tf] starts the collective (done tf + D); the gradient of mb 0
    # arrives at 2 tf + tb (stage 1: F0, B0); the sync then waits for the collective: D - tf - tb exposed
    assert synced.stages[0].exposed_s["TP"] == pytest.approx(D - tf - tb)
    for r in (free, synced):
        for st in r.stages:
            assert st.compute_s + st.bubble_s + st.overhead_s + sum(st.exposed_s.values()) == \
                pytest.approx(r.iteration_time_s, rel=1e-12)


def test_kernel_retimed_when_a_queued_collective_starts_mid_kernel():
    # two collectives on one (event-driven) DP stream: a 64 KiB one (2 CTAs) then a 1 GB one (24 CTAs)
    # that starts only when the first ends; the kernel beside them changes speed at d and at 2d
    d = 0.25
    small = CommOp("a1", "all_reduce", "dp", 64 * 1024, blocking=False, wait_op="g2")
    big = CommOp("a2", "all_reduce", "dp", 10**9, blocking=False, wait_op="g2")
    w = single_stage([small, big, comp("g1", 1.0), comp("g2", 0.25)], [comp("b", 1.0, "bwd")], dp=16)
    r = run(w, IdealNetwork(lambda req: d), contention=ContentionModel(H100))
    f1, f2 = SMS / (SMS - 2), SMS / (SMS - CTAS)
    left = 1.0 - d / f1 - d / f2          # work left after the two collectives
    assert r.iteration_time_s == pytest.approx(2 * d + left + 0.25 + 1.0, rel=1e-12)
