"""Shared fixtures. Reference data lives in ../shared beside the checkout (present in CI)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    if not SHARED.is_dir():
        pytest.skip("../shared reference data not present beside the checkout")
    return SHARED


def has_module(name: str) -> bool:
    return importlib.util.find_spec(name) is not None
