"""report.html's collectives table: totals per key from a fast run's unbuilt rows (sim.fastpath
CollectiveRows.group_totals) equal the totals of the built rows, sums in row order."""

from __future__ import annotations

from operator import itemgetter

import pytest

from sim.commands import run_job
from sim.html.run_report import collective_totals, collectives

PLAN = {"tp": 2, "pp": 2, "dp": 2, "global_batch_size": 8, "micro_batch_size": 1, "seq_length": 1024,
        "sequence_parallel": True, "distributed_optimizer": True}
KEY = itemgetter("stage", "report_group", "group", "collective", "size_bytes", "group_size", "phase", "timing")


def _plain(rows: list[dict]) -> dict:
    agg: dict = {}
    for r in rows:
        a = agg.setdefault(KEY(r), [0, 0.0, 0.0])
        a[0] += 1
        a[1] += r["duration_s"]
        a[2] += r["exposed_s"]
    return agg


@pytest.mark.parametrize("trace", [False, True])
def test_totals_of_unbuilt_rows_are_those_of_the_rows(trace):
    rep = run_job({"model": "aicb-7", "network": "analytical", "plan": PLAN}, trace=trace)
    unbuilt = vars(rep)["_collectives"]
    assert type(unbuilt).__name__ == "CollectiveRows"   # the arithmetic fast path ran, rows not built
    got = collective_totals(rep)
    section = collectives(rep)
    assert vars(rep)["_collectives"] is unbuilt         # totalled (and the section made) without building them
    built = list(rep.collectives)
    assert any(r["group"] == "pp" for r in built) and any(r["timing"] == "estimate" for r in built)
    want = _plain(built)
    assert list(got) == list(want) and got == want     # same keys in the same order, bit-equal sums
    assert type(vars(rep)["_collectives"]) is list
    assert collective_totals(rep) == want              # rows built: totalled from them
    assert collectives(rep) == section and f"({len(built):,})" in section
