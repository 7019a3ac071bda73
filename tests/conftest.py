"""Shared fixtures. Reference data lives in ../shared beside the checkout (present in CI)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest
from hypothesis import settings as hypothesis_settings

# Property tests draw from a fixed seed sequence in CI (same examples every run, nothing read from or
# written to a local example database); CLUSTERSIM_HYPOTHESIS_PROFILE=explore draws fresh random examples
# for a local bug hunt.
hypothesis_settings.register_profile("ci", derandomize=True, database=None)
hypothesis_settings.register_profile("explore", derandomize=False)
hypothesis_settings.load_profile(os.environ.get("CLUSTERSIM_HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared reference data not present beside the checkout")
    return SHARED


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None
