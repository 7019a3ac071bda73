"""Acceptance: leave-one-model-out error of interpolation + roofline on the shipped Vidur data."""

from __future__ import annotations

import pytest

from compute_db import open_db
from compute_db.calibrate import leave_one_model_out
from compute_db.errors import ComputeDBError


@pytest.mark.slow
@pytest.mark.parametrize("gpu", ["H100", "A100"])
def test_gemm_lomo_error_within_acceptance(gpu):
    (gemm,) = leave_one_model_out(open_db(), gpu, min_tokens=64, families=("gemm",))
    assert gemm.models >= 4 and gemm.kernels > 500
    assert gemm.median_abs_err <= 0.10
    assert gemm.p90_abs_err <= 0.25


def test_calibrate_needs_data():
    with pytest.raises(ComputeDBError, match="no kernel data for GPU B200"):
        leave_one_model_out(open_db(), "B200")
