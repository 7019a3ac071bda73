"""Expert-load model of MoE serving: how the routed tokens of a batch spread over experts and EP ranks.

Popularity: the experts, ranked from the most popular (i = 0) down, have routing shares
p_i ∝ (i + 1)^-s, a Zipf law with exponent s = `skew` (s = 0: balanced, p_i = 1/E).
A token picks top_k DISTINCT experts; the probability that it picks expert i is q_i = min(1, c·p_i), with
c such that Σ q_i = top_k (water-filling: one token cannot pick an expert twice, so the share of an
expert above 1/top_k is redistributed over the others). A batch of T tokens sends expert i T·q_i token
copies on average, and expert i receives at least one token with probability 1 − (1 − q_i)^T
(tokens route independently).

Placement (deterministic): popularity rank i lives on EP rank i mod ep (round robin: rank 0 holds the
hottest expert, the (ep+1)-th, ...). Rank 0 then holds, position by position, the most popular expert of
every round, so it is the hottest rank for every T. Its share of the copies, Σ_{i ≡ 0 mod ep} q_i / top_k,
times ep is the imbalance factor (hottest rank's copies / mean copies per rank; 1 when balanced).

Per batch the hottest rank receives R = ⌈T · Σ_{i ≡ 0} q_i⌉ copies (the ceiling is the pigeonhole bound:
some rank gets at least ⌈T·top_k/ep⌉) and runs its grouped expert GEMMs over G = the expected number of
its experts that receive a token, rounded (1 <= G <= min(local experts, R)), each at ⌈R / G⌉ rows: an
expert nobody routed to costs nothing (its weights are not read), which is what makes small-batch MoE
decode cheap.

Not modelled: the random fluctuation of routing around these expectations (beyond the pigeonhole
bound), correlation between tokens' choices, a token's copies to one rank deduplicated on the wire
(every one of the top_k copies travels), expert replication or popularity-aware placement (EPLB),
placements other than round robin.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from workload_gen.errors import WorkloadError


@dataclass(frozen=True)
class RankLoad:
    """Routed work of one EP rank for one batch: token copies received and the experts that run."""

    copies: float            # token copies the rank's experts process (mean rank: fractional)
    active_experts: float    # experts receiving at least one copy (hottest rank: an integer >= 1)

    @property
    def rows_per_expert(self) -> int:
        """Rows of each grouped-GEMM member (⌈copies / active experts⌉)."""
        return max(1, math.ceil(self.copies / self.active_experts)) if self.active_experts else 1


@dataclass(frozen=True)
class ExpertLoad:
    """Routing probabilities of one MoE model over its experts and their placement on `ep` ranks."""

    experts: int
    top_k: int
    ep: int
    skew: float
    q: tuple[float, ...]     # per expert, most popular first: probability that a token picks it

    @property
    def local_experts(self) -> int:
        return self.experts // self.ep

    def rank_q(self, rank: int) -> tuple[float, ...]:
        """q of the experts placed on `rank` (round robin by popularity)."""
        return self.q[rank::self.ep]

    @property
    def hot_share(self) -> float:
        """Fraction of all token copies that go to the hottest rank (rank 0)."""
        return sum(self.rank_q(0)) / self.top_k

    @property
    def imbalance(self) -> float:
        """Hottest rank's token copies / mean copies per rank (1.0 when balanced)."""
        return self.ep * self.hot_share

    def hot(self, tokens: int) -> RankLoad:
        """Load of the hottest rank for a batch of `tokens` tokens (module docstring)."""
        if tokens <= 0:
            return RankLoad(0, 0)
        x = tokens * sum(self.rank_q(0))
        copies = max(1, math.ceil(x * (1.0 - 1e-12)))     # guard exact integers against float noise
        active = _active(self.rank_q(0), tokens)
        g = min(self.local_experts, copies, max(1, math.floor(active + 0.5)))
        return RankLoad(copies, g)

    def mean(self, tokens: int) -> RankLoad:
        """Expected load of an average rank (model FLOPs and bytes): T·top_k/ep copies."""
        if tokens <= 0:
            return RankLoad(0.0, 0.0)
        return RankLoad(tokens * self.top_k / self.ep, _active(self.q, tokens) / self.ep)


def _active(q: tuple[float, ...], tokens: int) -> float:
    return sum(1.0 - (1.0 - x) ** tokens for x in q)


def routing_probabilities(experts: int, top_k: int, skew: float) -> tuple[float, ...]:
    """q_i of the module docstring (non-increasing, sum top_k, each <= 1)."""
    p = [(i + 1) ** -skew for i in range(experts)]
    total = sum(p)
    p = [x / total for x in p]
    capped = 0
    while True:
        rest = sum(p[capped:])
        c = (top_k - capped) / rest
        if capped == experts or c * p[capped] <= 1.0:
            break
        capped += 1
    return tuple(1.0 if i < capped else c * p[i] for i in range(experts))


def expert_load(experts: int, top_k: int, ep: int, skew: float = 0.0) -> ExpertLoad:
    """The ExpertLoad of `experts` experts, `top_k` per token, on `ep` ranks (WorkloadError on bad input)."""
    if isinstance(skew, bool) or not isinstance(skew, (int, float)) or not math.isfinite(skew) or skew < 0:
        raise WorkloadError(f"serving plan.expert_skew: must be a finite number >= 0 (got {skew!r})")
    if not 1 <= top_k <= experts:
        raise WorkloadError(f"model moe_top_k: must be in 1..{experts} experts (got {top_k})")
    if ep < 1 or experts % ep:
        raise WorkloadError(f"serving plan.ep: must divide the {experts} experts (got ep={ep})")
    return ExpertLoad(experts, top_k, ep, float(skew), routing_probabilities(experts, top_k, float(skew)))
