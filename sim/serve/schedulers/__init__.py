"""Replica schedulers (one module per policy behind `ReplicaScheduler`) and the global router.

Adding a policy: write a module with a ReplicaScheduler subclass and add it to SCHEDULER_CLASSES (and its
name to sim.serve.plan.SCHEDULERS).
"""

from __future__ import annotations

from sim.errors import SimError
from sim.serve.plan import SCHEDULERS
from sim.serve.schedulers.base import ReplicaScheduler
from sim.serve.schedulers.faster_transformer import FasterTransformerScheduler
from sim.serve.schedulers.lightllm import LightLLMScheduler
from sim.serve.schedulers.orca import OrcaScheduler
from sim.serve.schedulers.router import Router, make_router
from sim.serve.schedulers.sarathi import SarathiScheduler
from sim.serve.schedulers.vllm import VLLMScheduler

SCHEDULER_CLASSES: dict[str, type[ReplicaScheduler]] = {
    c.name: c for c in (VLLMScheduler, SarathiScheduler, OrcaScheduler, FasterTransformerScheduler,
                        LightLLMScheduler)
}


def scheduler_class(name: str) -> type[ReplicaScheduler]:
    cls = SCHEDULER_CLASSES.get(name)
    if cls is None:
        raise SimError(f"unknown scheduler {name!r} (choose from {', '.join(SCHEDULERS)})")
    return cls


__all__ = ["ReplicaScheduler", "Router", "SCHEDULER_CLASSES", "scheduler_class", "make_router"]
