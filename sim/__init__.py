"""sim: the training-step simulator (placement, streams, overlap, pipeline schedules, reports).

Public API: `simulate(workload, topology, *, gpu, network="flow", ...) -> StepReport`.
"""

from sim.simulation import StepReport, simulate

__all__ = ["StepReport", "simulate"]
