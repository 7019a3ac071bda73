"""Energy of one simulated iteration from the timeline (issue 14, item 5).

Per GPU, two states: busy while its kernels run (the stage representative's compute_s, overlap slowdown
included) at busy_w, idle for the rest of the iteration (exposed communication, bubble, launch gaps) at
idle_w; every rank of a pipeline stage is taken to behave as the stage's representative. Host CPUs (per
server), NICs and network switches draw constant power over the iteration. With `switch_ports` in the
table a switch is charged to the job by the share of its ports the fabric's cables use (min(1, cables /
switch_ports)): the rest of a partly used switch serves other jobs; without it, whole switches. Facility
energy = IT energy x PUE. Ignored: power varying with the kind of kernel or with link load, NVSwitch and
PCIe switch power, storage, DVFS.

    table = load_power_table()            # shipped sim/data/power.yaml, or a --power-file
    e = iteration_energy(rep, table, counts)   # counts: sim.goodput.ComponentCounts
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.errors import SimError
from sim.tables import aliases, find_gpu_row, number, read_yaml, text_field

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
    switch_ports: int | None = None     # ports of the switch switch_w is for (None: whole switches)

    def gpu(self, name: str, extra_gpus=None) -> GPUPower:
        """The row of GPU `name` (compute_db name or alias, or a name/alias of the table); SimError if none."""
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
    switches_charged: float = 0.0      # switch-equivalents charged to the job (port share or whole switches)

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
                "cpu_j": self.cpu_j, "nic_j": self.nic_j, "switch_j": self.switch_j,
                "switches_charged": self.switches_charged, "it_j": self.it_j,
                "pue": self.pue, "facility_j": self.facility_j, "facility_w": self.facility_w}


def iteration_energy(rep, table: PowerTable, counts, gpu: str | None = None, extra_gpus=None) -> IterationEnergy:
    """Energy of one iteration of StepReport `rep` on `counts` units (sim.goodput.ComponentCounts);
    `extra_gpus`: a --gpu-file's GPUs, whose aliases find power rows too."""
    world = int(rep.meta.get("world_size") or counts.gpu)
    return energy_from_busy(float(rep.iteration_time_s), gpu_busy_s(rep, world), world,
                            table.gpu(gpu or rep.meta["gpu"], extra_gpus), table, counts)


def gpu_busy_s(rep, world: int | None = None) -> float:
    """GPU-seconds of kernels in one iteration of StepReport `rep`, summed over its `world` GPUs (default
    the report's world size): each stage's compute time (capped at the iteration) x its ranks."""
    t = float(rep.iteration_time_s)
    world = int(world or rep.meta["world_size"])
    stages = rep.stages or [{"compute_s": rep.compute_s}]
    return sum(min(max(float(s["compute_s"]), 0.0), t) for s in stages) * world / len(stages)


def energy_from_busy(iteration_time_s: float, gpu_busy_s: float, world: int, row: GPUPower, table: PowerTable,
                     counts) -> IterationEnergy:
    """Energy of one iteration of `iteration_time_s` whose `world` GPUs compute `gpu_busy_s` GPU-seconds in
    all (the rest of their time idle); `row`: the GPU's power row, `counts` the job's units."""
    t = float(iteration_time_s)
    busy = min(max(float(gpu_busy_s), 0.0), world * t)
    idle = world * t - busy
    switches = switches_charged(counts, table)
    return IterationEnergy(
        iteration_time_s=t, gpu_busy_s=busy, gpu_idle_s=idle,
        gpu_busy_j=busy * row.busy_w, gpu_idle_j=idle * row.idle_w,
        cpu_j=counts.server * table.server_cpu_w * t, nic_j=counts.nic * table.nic_w * t,
        switch_j=switches * table.switch_w * t, pue=table.pue, switches_charged=switches)


def switches_charged(counts, table: PowerTable) -> float:
    """Switch-equivalents whose power the job draws: sum of min(1, cables / switch_ports) over its switches
    when the table gives switch_ports and the counts their cables, else the whole switch count."""
    used = getattr(counts, "switch_ports_used", ())
    if table.switch_ports and used:
        return sum(min(1.0, n / table.switch_ports) for n in used)
    return float(counts.switch)


def load_power_table(path: str | Path | None = None) -> PowerTable:
    """Read a power table (None: the shipped sim/data/power.yaml); SimError naming the file and field."""
    p = Path(path) if path is not None else SHIPPED_POWER
    data = read_yaml(p, "power table")
    if not isinstance(data, dict) or not isinstance(data.get("gpus"), dict) or not data["gpus"]:
        raise SimError(f"{p}: expected 'gpus: {{GPU: {{busy_w, idle_w, source}}}}', server_cpu_w, nic_w, "
                       "switch_w and pue")
    rows = []
    for name, entry in data["gpus"].items():
        where = f"{p}: gpus.{name}"
        if not isinstance(entry, dict):
            raise SimError(f"{where}: expected busy_w, idle_w and source")
        busy = number(entry.get("busy_w"), f"{where}.busy_w")
        idle = number(entry.get("idle_w"), f"{where}.idle_w", strict=False)
        if idle > busy:
            raise SimError(f"{where}.idle_w: {idle:g} W is above busy_w {busy:g} W")
        source = text_field(entry, "source", where, "every power figure says where it comes from")
        rows.append(GPUPower(str(name), busy, idle, source, aliases(entry, where)))
    parts = {k: number(data.get(k), f"{p}: {k}", strict=False) for k in ("server_cpu_w", "nic_w", "switch_w")}
    pue = number(data.get("pue"), f"{p}: pue", minimum=1.0, strict=False)
    ports = data.get("switch_ports")
    if ports is not None and (isinstance(ports, bool) or not isinstance(ports, int) or ports < 1):
        raise SimError(f"{p}: switch_ports: must be a whole number of ports >= 1 (got {ports!r})")
    sources = {k.removesuffix("_source"): str(v) for k, v in data.items() if k.endswith("_source")}
    return PowerTable(tuple(rows), parts["server_cpu_w"], parts["nic_w"], parts["switch_w"], pue,
                      sources, str(p), ports)
