"""Pipeline schedules: per stage, the ordered (chunk, microbatch, "fwd"|"bwd") tasks of one iteration.

Follows Megatron-LM's schedules (facts of the algorithm, own code):
- "1f1b" (PipeDream-flush): stage s runs min(p-s-1, m) warm-up forwards, then alternates one forward
  and one backward, then drains the remaining backwards (cool-down).
- "interleaved" (virtual pipeline, v chunks per stage): virtual micro-batch k of a stage maps to
  micro-batch (k // (p*v))*p + k % p and chunk (k // p) % v for forwards (v-1 minus that for
  backwards); warm-up is (p-s-1)*2 + (v-1)*p virtual forwards (all of them when m == p), then 1F1B
  over virtual micro-batches, then cool-down. Micro-batches are taken in groups of p; a last partial
  group (m % p != 0) is handled by mapping virtual indices over the real sequence of (chunk, mb).
- "gpipe": all forwards then all backwards. "none": pp == 1 (same as 1f1b with p = 1).
Dependencies between stages are not encoded here; the engine enforces them (forward of virtual stage
k needs the activation of virtual stage k-1, backward needs the gradient of virtual stage k+1).
"""

from __future__ import annotations

from sim.errors import SimError

Task = tuple[int, int, str]   # (chunk, microbatch, "fwd" | "bwd")


def _virtual_order(m: int, p: int, v: int, backward: bool) -> list[tuple[int, int]]:
    """(chunk, mb) for each virtual micro-batch index, groups of p micro-batches per chunk sweep."""
    seq: list[tuple[int, int]] = []
    for g0 in range(0, m, p):
        group = range(g0, min(g0 + p, m))
        chunks = range(v - 1, -1, -1) if backward else range(v)
        for c in chunks:
            seq.extend((c, mb) for mb in group)
    return seq


def stage_tasks(kind: str, stage: int, pp: int, num_microbatches: int, vpp: int = 1) -> list[Task]:
    """Ordered tasks of `stage` for one iteration."""
    p, m, v, s = int(pp), int(num_microbatches), int(vpp), int(stage)
    if m < 1:
        raise SimError(f"number of micro-batches must be >= 1, got {m}")
    if not 0 <= s < p:
        raise SimError(f"stage {s} outside 0..{p - 1}")
    if kind in ("none", "1f1b") and v > 1:
        kind = "interleaved"
    if kind == "gpipe":
        order_f = _virtual_order(m, p if v > 1 else m, v, False)
        order_b = _virtual_order(m, p if v > 1 else m, v, True)
        return [(c, mb, "fwd") for c, mb in order_f] + [(c, mb, "bwd") for c, mb in order_b]
    if kind in ("none", "1f1b"):
        warm = min(p - s - 1, m)
        tasks: list[Task] = [(0, i, "fwd") for i in range(warm)]
        for i in range(m - warm):
            tasks.append((0, warm + i, "fwd"))
            tasks.append((0, i, "bwd"))
        tasks.extend((0, i, "bwd") for i in range(m - warm, m))
        return tasks
    if kind == "interleaved":
        if v > 1 and m < p:
            raise SimError(f"interleaved schedule needs micro-batches ({m}) >= pipeline stages ({p})")
        fwd = _virtual_order(m, p, v, False)
        bwd = _virtual_order(m, p, v, True)
        total = m * v
        warm = total if m == p else min((p - s - 1) * 2 + (v - 1) * p, total)
        tasks = [(*fwd[k], "fwd") for k in range(warm)]
        for k in range(total - warm):
            tasks.append((*fwd[warm + k], "fwd"))
            tasks.append((*bwd[k], "bwd"))
        tasks.extend((*bwd[k], "bwd") for k in range(total - warm, total))
        return tasks
    raise SimError(f"unknown pipeline schedule '{kind}' (1f1b, interleaved, gpipe, none)")


def all_stage_tasks(kind: str, pp: int, num_microbatches: int, vpp: int = 1) -> list[list[Task]]:
    return [stage_tasks(kind, s, pp, num_microbatches, vpp) for s in range(pp)]
