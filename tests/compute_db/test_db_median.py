"""compute_db.db._median (per-key medians of the measured rows, in Python) is numpy's median bit for
bit: the middle value of an odd count, the two middle values' sum halved for an even count, NaN
when one is NaN."""

import math

import numpy as np

from compute_db.db import _median


def test_median_equals_numpy_bit_for_bit():
    rng = np.random.default_rng(3)
    for n in range(1, 12):
        for _ in range(200):
            vals = rng.lognormal(-9.0, 2.0, n).tolist()
            if n > 2 and rng.random() < 0.3:
                vals[1] = vals[0]                      # ties
            got = _median(list(vals))
            want = float(np.median(vals))
            assert type(got) is float
            assert got == want, (vals, got, want)


def test_median_of_two_is_their_halved_sum():
    assert _median([3.0, 1.0]) == 2.0
    with np.errstate(over="ignore"):
        assert _median([1e308, 1e308]) == math.inf == float(np.median([1e308, 1e308]))   # numpy's overflow too
    assert _median([5.0]) == 5.0


def test_median_with_nan_is_nan():
    assert math.isnan(_median([1.0, float("nan"), 2.0]))
