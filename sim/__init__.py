"""sim: the training-step simulator (placement, streams, overlap, pipeline schedules, reports).

Public API: `simulate(workload, topology, *, gpu, network="flow", ...) -> StepReport`.
"""

__all__ = ["StepReport", "simulate"]


def __getattr__(name: str):
    # lazy, so `clustersim --version` and light subcommands do not pay for the simulator's imports
    if name in __all__:
        from sim import simulation
        return getattr(simulation, name)
    raise AttributeError(f"module 'sim' has no attribute {name!r}")
