import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import fuzzkit  # noqa: E402


def pytest_terminal_summary(terminalreporter):
    if fuzzkit.COUNTS:
        total = sum(fuzzkit.COUNTS.values())
        parts = ", ".join(f"{k} {v}" for k, v in sorted(fuzzkit.COUNTS.items()))
        terminalreporter.write_line(f"fuzz: {total} bad inputs refused with one line and exit 2 ({parts})")


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _no_huge_override(monkeypatch):
    """The bounds under test are lifted by CLUSTERSIM_ALLOW_HUGE; never inherit it from the shell."""
    monkeypatch.delenv("CLUSTERSIM_ALLOW_HUGE", raising=False)
