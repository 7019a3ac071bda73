"""Energy of one simulated iteration from the timeline (issue 14, item 5).

Per GPU, two states: busy while its kernels run (the stage representative's compute_s, overlap slowdown
included) at busy_w, idle for the rest of the iteration (exposed communication, bubble, launch gaps) at
idle_w; every rank of a pipeline stage is taken to behave as the stage's representative. Host CPUs (per
server), NICs and network switches draw constant power over the iteration. Facility energy = IT energy x
PUE. Ignored: power varying with the kind of kernel, NVSwitch and PCIe switch power, storage, DVFS.

    table = load_power_table()            # shipped sim/data/power.yaml, or a --power-file
    e = iteration_energy(rep, table, counts)   # counts: sim.goodput.ComponentCounts
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sim.errors import SimError

SHIPPED_POWER = Path(__file__).resolve().parent / "data" / "power.yaml"


@dataclass(frozen=True)
class GPUPower:
    gpu: str
    busy_w: float
    idle_w: float
    source: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class PowerTable:
    gpus: tuple[GPUPower, ...]
    server_cpu_w: float
    nic_w: float
    switch_w: float
    pue: float
    sources: dict
    path: str

    def gpu(self, name: str, extra_gpus=None) -> GPUPower:
        """The row of GPU `name` (compute_db name or alias, or a name/alias of the table); SimError if none."""
        from sim.pricing import find_gpu_row
        found = find_gpu_row(self.gpus, name, extra_gpus)
        if found is not None:
            return found
        raise SimError(f"{self.path}: no power for GPU '{name}' (rows: {', '.join(r.gpu for r in self.gpus)}); "
                       "add a row with busy_w, idle_w and source and pass the file with --power-file")


@dataclass(frozen=True)
class IterationEnergy:
    """Joules of one iteration by part; gpu_busy_s / gpu_idle_s are summed over all GPUs of the job."""

    iteration_time_s: float
    gpu_busy_s: float
    gpu_idle_s: float
    gpu_busy_j: float
    gpu_idle_j: float
    cpu_j: float
    nic_j: float
    switch_j: float
    pue: float

    @property
    def it_j(self) -> float:
        return self.gpu_busy_j + self.gpu_idle_j + self.cpu_j + self.nic_j + self.switch_j

    @property
    def facility_j(self) -> float:
        return self.it_j * self.pue

    @property
    def facility_w(self) -> float:
        return self.facility_j / self.iteration_time_s if self.iteration_time_s > 0 else 0.0

    def to_dict(self) -> dict:
        return {"iteration_time_s": self.iteration_time_s, "gpu_busy_s": self.gpu_busy_s,
                "gpu_idle_s": self.gpu_idle_s, "gpu_busy_j": self.gpu_busy_j, "gpu_idle_j": self.gpu_idle_j,
                "cpu_j": self.cpu_j, "nic_j": self.nic_j, "switch_j": self.switch_j, "it_j": self.it_j,
                "pue": self.pue, "facility_j": self.facility_j, "facility_w": self.facility_w}


def iteration_energy(rep, table: PowerTable, counts, gpu: str | None = None) -> IterationEnergy:
    """Energy of one iteration of StepReport `rep` on `counts` units (sim.goodput.ComponentCounts)."""
    row = table.gpu(gpu or rep.meta["gpu"])
    t = float(rep.iteration_time_s)
    world = int(rep.meta.get("world_size") or counts.gpu)
    stages = rep.stages or [{"compute_s": rep.compute_s}]
    per_stage = world / len(stages)
    busy = sum(min(max(float(s["compute_s"]), 0.0), t) for s in stages) * per_stage
    idle = world * t - busy
    return IterationEnergy(
        iteration_time_s=t, gpu_busy_s=busy, gpu_idle_s=idle,
        gpu_busy_j=busy * row.busy_w, gpu_idle_j=idle * row.idle_w,
        cpu_j=counts.server * table.server_cpu_w * t, nic_j=counts.nic * table.nic_w * t,
        switch_j=counts.switch * table.switch_w * t, pue=table.pue)


def _watts(v, where: str, allow_zero: bool = True) -> float:
    bad = isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v)
    if bad or v < 0 or (v == 0 and not allow_zero):
        raise SimError(f"{where}: must be a number {'>=' if allow_zero else '>'} 0 (got {v!r})")
    return float(v)


def load_power_table(path: str | Path | None = None) -> PowerTable:
    """Read a power table (None: the shipped sim/data/power.yaml); SimError naming the file and field."""
    from sim.goodput import _read_yaml
    p = Path(path) if path is not None else SHIPPED_POWER
    data = _read_yaml(p, "power table")
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict) or not data["gpus"]:
        raise SimError(f"{p}: expected 'gpus: {{GPU: {{busy_w, idle_w, source}}}}', server_cpu_w, nic_w, "
                       "switch_w and pue")
    rows = []
    for name, entry in data["gpus"].items():
        where = f"{p}: gpus.{name}"
        if not isinstance(entry, dict):
            raise SimError(f"{where}: expected busy_w, idle_w and source")
        busy = _watts(entry.get("busy_w"), f"{where}.busy_w", allow_zero=False)
        idle = _watts(entry.get("idle_w"), f"{where}.idle_w")
        if idle > busy:
            raise SimError(f"{where}.idle_w: {idle:g} W is above busy_w {busy:g} W")
        if not str(entry.get("source") or "").strip():
            raise SimError(f"{where}.source: missing (every power figure says where it comes from)")
        aliases = entry.get("aliases") or []
        if not isinstance(aliases, list):
            raise SimError(f"{where}.aliases: expected a list of names")
        rows.append(GPUPower(str(name), busy, idle, str(entry["source"]).strip(), tuple(map(str, aliases))))
    parts = {k: _watts(data.get(k), f"{p}: {k}") for k in ("server_cpu_w", "nic_w", "switch_w")}
    pue = data.get("pue")
    if isinstance(pue, bool) or not isinstance(pue, (int, float)) or not math.isfinite(pue) or pue < 1:
        raise SimError(f"{p}: pue: must be a number >= 1 (got {pue!r})")
    sources = {k.removesuffix("_source"): str(v) for k, v in data.items() if k.endswith("_source")}
    return PowerTable(tuple(rows), parts["server_cpu_w"], parts["nic_w"], parts["switch_w"], float(pue),
                      sources, str(p))
