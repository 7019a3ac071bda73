"""netsim.resolve.ring_window_s (a Python loop below RING_NUMPY_MIN_HOPS hops, a numpy sliding window from
there) against the plain loop, bit for bit."""

from __future__ import annotations

import math
import random

import numpy as np

from netsim.resolve import ring_window_s


def _loop(hop_lat: list[float], steps: int) -> float:
    h = len(hop_lat)
    if h == 0 or steps <= 0:
        return 0.0
    laps, rest = divmod(steps, h)
    total = laps * math.fsum(hop_lat)
    if rest == 0:
        return total
    run = math.fsum(hop_lat[:rest])
    best = run
    for i in range(1, h):
        run += hop_lat[(i + rest - 1) % h] - hop_lat[i - 1]
        best = max(best, run)
    return total + best


def test_ring_window_is_bit_identical_to_the_loop():
    rng = random.Random(11)
    for _ in range(3000):
        h = rng.randint(0, 60)
        lat = [rng.choice([1e-6, 2.5e-6, 7e-6]) + rng.random() * 1e-7 for _ in range(h)]
        steps = rng.randint(0, 3 * h + 2)
        assert ring_window_s(lat, steps) == _loop(lat, steps)


def test_ring_window_known_values():
    assert ring_window_s([1.0, 5.0, 2.0], 2) == 7.0       # windows 6, 7, 3
    assert ring_window_s([1.0, 5.0, 2.0], 4) == 8.0 + 5.0  # one lap + worst single hop
    assert ring_window_s([3.0], 2) == 6.0
    assert ring_window_s([], 3) == 0.0


def test_ring_window_equals_the_plain_loop_on_long_rings_with_ties():
    rng = random.Random(5)
    for h in (1, 2, 3, 17, 159, 160, 384, 385):
        for values in ([2e-6], [1e-6, 2.5e-6], [1e-6, 2.5e-6, 7e-6 + 1e-9]):     # one value: all hops tie
            lat = [rng.choice(values) + rng.choice((0.0, 0.0, 3e-8)) for _ in range(h)]
            for steps in sorted({0, 1, 2, h - 1, h, h + 1, 2 * h - 1, 3 * h + 5}):
                want = _loop(lat, steps)
                assert ring_window_s(lat, steps) == want, (h, steps)
                assert ring_window_s(np.array(lat), steps) == want, (h, steps)


def test_ring_window_known_worst_window():
    # the one slow hop at the end: every window of 3 that holds it counts 1 + 1 + 9
    assert ring_window_s([1.0, 1.0, 1.0, 1.0, 9.0], 3) == 11.0
    assert ring_window_s([1.0, 1.0, 1.0, 1.0, 9.0], 4) == 12.0
    assert ring_window_s([9.0, 1.0, 1.0, 1.0, 1.0], 1) == 9.0
