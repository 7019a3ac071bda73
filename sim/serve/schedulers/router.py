"""Global scheduler: routes each arriving request to a replica.

  round_robin        request i (in arrival order) -> replica i mod R (Vidur's default);
  random             uniform over replicas from a numpy Generator seeded by the run's seed;
  least_outstanding  the replica with the fewest requests assigned and not yet finished; ties -> lowest id.
"""

from __future__ import annotations

import numpy as np

from sim.errors import SimError
from sim.serve.plan import ROUTERS


class Router:
    def __init__(self, num_replicas: int) -> None:
        self.n = num_replicas
        self.outstanding = [0] * num_replicas

    def route(self) -> int:
        i = self._pick()
        self.outstanding[i] += 1
        return i

    def on_complete(self, replica: int) -> None:
        self.outstanding[replica] -= 1

    def _pick(self) -> int:
        raise NotImplementedError


class RoundRobinRouter(Router):
    def __init__(self, num_replicas: int) -> None:
        super().__init__(num_replicas)
        self.next = 0

    def _pick(self) -> int:
        i = self.next
        self.next = (i + 1) % self.n
        return i


class RandomRouter(Router):
    def __init__(self, num_replicas: int, seed: int) -> None:
        super().__init__(num_replicas)
        self.rng = np.random.default_rng(np.random.SeedSequence([int(seed), 0x5E7E]))
        self.buf: list[int] = []

    def _pick(self) -> int:
        if not self.buf:                   # draw in blocks: one numpy call per 4096 requests
            self.buf = self.rng.integers(0, self.n, 4096).tolist()[::-1]
        return self.buf.pop()


class LeastOutstandingRouter(Router):
    def _pick(self) -> int:
        o = self.outstanding
        return o.index(min(o))


def make_router(name: str, num_replicas: int, seed: int = 0) -> Router:
    if name == "round_robin":
        return RoundRobinRouter(num_replicas)
    if name == "random":
        return RandomRouter(num_replicas, seed)
    if name == "least_outstanding":
        return LeastOutstandingRouter(num_replicas)
    raise SimError(f"unknown router {name!r} (choose from {', '.join(ROUTERS)})")
