"""StepReport.collectives built on first read: a run keeps its communication log and a report that is
never asked for its rows (SimAI's 9,216-GPU example: 4 * 10^4; a deep pipeline on the event engine:
10^6) never builds the dicts. Subclasses say how (build)."""

from __future__ import annotations


class LazyRows:
    """The collective rows of a finished log, made by build() (sim.simulation.StepReport.collectives
    calls it on first read). len() needs no row; pickling stores the built list."""

    __slots__ = ("_log",)

    def __init__(self, log: list) -> None:
        self._log = log

    def __len__(self) -> int:
        return len(self._log)

    def __reduce__(self):
        return list, (self.build(),)     # a report pickled before its rows were read holds the list

    def build(self) -> list[dict]:
        raise NotImplementedError


def timed_row(prefix: dict, start_s: float, end_s: float, exposed_s: float) -> dict:
    """A collective row: a copy of its op's fixed columns (`prefix`, field order kept) with its times."""
    row = prefix.copy()
    row["start_s"] = start_s
    row["end_s"] = end_s
    row["duration_s"] = end_s - start_s
    row["exposed_s"] = exposed_s
    return row
