"""Per-iteration costs that are not kernel time: launch gaps, host (CPU) issue, host synchronisation.

compute_db times a kernel from its start to its end on the GPU; a real Megatron iteration also pays
for getting kernels onto the GPU. Modelled on every rank's compute stream (sim.engine):

- GPU launch gap: consecutive kernels of one stream start `kernel_gap_s` apart even when the CPU
  has queued them long before. NVIDIA, "Getting Started with CUDA Graphs" (A. Gray, 2019): a 2.9 us
  kernel issued back-to-back on a stream takes 3.8 us per kernel (3.4 us inside a CUDA graph), i.e.
  ~0.9 us per launch.
- Host issue: the CPU (Python, PyTorch's dispatcher, the CUDA driver) spends `host_per_kernel_s` to
  issue each kernel or NCCL call, in program order; a kernel cannot start before it is issued. The
  CPU normally runs far ahead of the GPU and this costs nothing; it shows where kernels are shorter
  than their issue time (small models, small micro-batches) and after every host synchronisation.
  10 us: the order of PyTorch eager-mode per-operator overhead (H. He, "Making Deep Learning Go Brrrr
  From First Principles", 2022: overhead-bound operators cost ~10 us each; cudaLaunchKernel alone is a
  few us, CUDA Graphs blog above). The least certain constant here (see docs/fidelity.md).
- Host synchronisation: the CPU waits for the GPU, so the next kernels pay their issue time from an
  empty queue:
  * Megatron reads the gradient norm and (fp16) the found-inf flag with `.item()` after their
    all-reduces (megatron.core.optimizer: clip_grads.get_grad_norm_fp32, _unscale_main_grads_and_check_for_nan);
  * megatron-core's batched pipeline p2p (batch_p2p_comm with batch_p2p_sync, the default unless
    overlap_p2p_comm) calls torch.cuda.synchronize() after every send/recv: the device-wide wait also
    waits for every collective in flight on the rank (gradient buckets, parameter gathers). Modelled
    at each pipeline task boundary that sends or receives (plan.overlap_p2p_comm turns it off).
Time the compute stream spends waiting for the host (issue or gap) is reported as "overhead"; waits
for collectives at a synchronisation are exposed communication of their kind, as any other wait.
Ignored: CPU-side work between iterations (data loading, logging), Python garbage collection,
stragglers; the CUDA launch queue depth (1,024 entries) that bounds how far the CPU runs ahead.
"""

from __future__ import annotations

from dataclasses import dataclass

KERNEL_GAP_S = 0.9e-6          # CUDA Graphs blog: 3.8 us - 2.9 us per back-to-back stream launch
HOST_PER_KERNEL_S = 10e-6      # PyTorch eager per-operator overhead (order of magnitude, He 2022)


@dataclass(frozen=True)
class HostOverheads:
    """Launch and host costs of one rank (seconds); see the module docstring for the sources."""
    kernel_gap_s: float = KERNEL_GAP_S
    host_per_kernel_s: float = HOST_PER_KERNEL_S
    sync_on_pipeline_p2p: bool = True        # megatron-core batch_p2p_sync (False with overlap_p2p_comm)
    host_sync_ops: tuple[str, ...] = ()      # name prefixes of blocking ops read back with .item()

    def describe(self) -> str:
        p2p = "device sync at every pipeline send/recv" if self.sync_on_pipeline_p2p else "no p2p sync"
        return (f"{self.kernel_gap_s * 1e6:.1f} us launch gap per kernel, {self.host_per_kernel_s * 1e6:.0f} us host "
                f"issue per op, host sync after {', '.join(self.host_sync_ops) or 'nothing'}; {p2p}")


def for_plan(plan) -> HostOverheads:
    """The overhead model of a plan: Megatron's sync points; DeepSpeed's pipeline engine blocks on
    its p2p too (torch.distributed send/recv are synchronous for the CPU), so the same rule applies."""
    from workload_gen.dp_comm import HOST_SYNC_OPS
    sync = int(plan.pp) > 1 and not bool(getattr(plan, "overlap_p2p_comm", False))
    return HostOverheads(sync_on_pipeline_p2p=sync, host_sync_ops=tuple(HOST_SYNC_OPS))
