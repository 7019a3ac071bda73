"""Goodput of a training job with failures and synchronous checkpoints (issue 14, item 4).

Model (exponentially distributed failures, checkpoint written synchronously every `tau` seconds of work):
- job MTBF M: 1/M = sum over component kinds of n_k / MTBF_k (GPUs, NICs, network switches, servers;
  independent failures, any one interrupts the job).
- checkpoint cost C = checkpoint bytes / write bandwidth; restart cost R = restart time + bytes / read
  bandwidth; bandwidth = min(aggregate storage, servers x per-server link).
- intervals: Young (1974) tau = sqrt(2 C M); Daly (2006) tau = sqrt(2 C M) [1 + sqrt(C/(2M))/3 +
  C/(18 M)] - C for C < 2M, else tau = M.
- expected wall time (Daly 2006): T_w = M e^(R/M) (e^((tau+C)/M) - 1) T_s / tau for T_s seconds of
  failure-free work; goodput = T_s / T_w.
Ignored: asynchronous checkpointing, failures during restart beyond the exponential model, spare-node
swaps, partial (in-memory) restarts, correlated failures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

from sim.errors import SimError
from sim.tables import number, read_yaml, text_field

SHIPPED_FAILURES = Path(__file__).resolve().parent / "data" / "failures.yaml"
COMPONENT_KINDS = ("gpu", "nic", "switch", "server")
HOUR_S = 3600.0


@dataclass(frozen=True)
class CheckpointStorage:
    """What a checkpoint costs: bytes per parameter, bandwidths (B/s) and the fixed restart time (s)."""

    bytes_per_param: float
    storage_write_Bps: float
    storage_read_Bps: float
    server_write_Bps: float
    server_read_Bps: float
    restart_s: float


@dataclass(frozen=True)
class FailureModel:
    mtbf_s: dict                   # component kind -> MTBF of one unit, s
    sources: dict                  # component kind / field -> where the number comes from
    storage: CheckpointStorage
    path: str


@dataclass(frozen=True)
class ComponentCounts:
    """Units a job depends on: its GPUs, its servers and their NICs, and the fabric's network switches;
    `switch_ports_used`: cables on each of those switches (sim.energy charges a switch by its ports in use)."""

    gpu: int
    nic: int
    switch: int
    server: int
    switch_ports_used: tuple[int, ...] = field(default=(), compare=False)

    def as_dict(self) -> dict:
        return {k: getattr(self, k) for k in COMPONENT_KINDS}


@dataclass(frozen=True)
class GoodputReport:
    counts: ComponentCounts
    job_mtbf_s: float
    checkpoint_bytes: float
    checkpoint_write_s: float       # C
    restart_s: float                # R (fixed restart + checkpoint read)
    young_interval_s: float
    daly_interval_s: float
    interval_s: float               # the interval the goodput is for (Daly's unless given)
    goodput: float
    formulas: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"components": self.counts.as_dict(), "job_mtbf_s": self.job_mtbf_s,
                "checkpoint_bytes": self.checkpoint_bytes, "checkpoint_write_s": self.checkpoint_write_s,
                "restart_s": self.restart_s, "young_interval_s": self.young_interval_s,
                "daly_interval_s": self.daly_interval_s, "checkpoint_interval_s": self.interval_s,
                "goodput": self.goodput, "formulas": dict(self.formulas)}


FORMULAS = {
    "job_mtbf": "1 / sum_k(n_k / MTBF_k) over gpu, nic, switch, server",
    "checkpoint_write": "C = checkpoint_bytes / min(storage_write, servers * server_write)",
    "restart": "R = restart_s + checkpoint_bytes / min(storage_read, servers * server_read)",
    "young": "sqrt(2 C M)",
    "daly": "sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + C / 18M) - C  (C < 2M; else M)",
    "goodput": "tau / (M e^(R/M) (e^((tau + C)/M) - 1))  (Daly 2006 expected wall time)",
}


# ------------------------------------------------------------------------------------------- formulas
def job_mtbf_s(mtbf_s: dict, counts: ComponentCounts) -> float:
    """MTBF of a job that any single unit failure interrupts, s (inf when no unit can fail)."""
    rate = sum(getattr(counts, k) / mtbf_s[k] for k in COMPONENT_KINDS if getattr(counts, k))
    return 1.0 / rate if rate > 0 else math.inf


def young_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    return math.sqrt(2.0 * checkpoint_s * mtbf_s)


def daly_interval_s(checkpoint_s: float, mtbf_s: float) -> float:
    c, m = checkpoint_s, mtbf_s
    if c >= 2.0 * m:
        return m
    x = c / (2.0 * m)
    return math.sqrt(2.0 * c * m) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - c


def goodput(interval_s: float, checkpoint_s: float, restart_s: float, mtbf_s: float) -> float:
    """Useful work / expected wall time with a checkpoint every `interval_s` of work (Daly 2006)."""
    if interval_s <= 0:
        raise SimError(f"checkpoint interval must be > 0 s (got {interval_s})")
    if math.isinf(mtbf_s):
        return interval_s / (interval_s + checkpoint_s)
    m = mtbf_s
    try:
        return interval_s / (m * math.exp(restart_s / m) * math.expm1((interval_s + checkpoint_s) / m))
    except OverflowError:   # segments far longer than the MTBF: expected wall time beyond any float
        return 0.0


# ------------------------------------------------------------------------------------------- job inputs
def component_counts(topology, world: int) -> ComponentCounts:
    """Units of a contiguously placed job of `world` GPUs: its GPUs; its servers and their network
    interfaces (the NIC nodes the first server's GPUs leave through, or one per GPU whose port goes
    straight to a switch, times the servers); every network switch of the fabric (ECMP spreads the job's
    traffic over all of them, so any one failing interrupts it; a template's whole pod counts)."""
    servers = -(-int(world) // int(topology.gpus_per_server))
    exits = {path[-2] for g in topology.gpus_of_server(0) for path in topology.gpu_ports(g) if len(path) >= 2}
    switches = [n.id for n in topology.nodes if n.kind == "switch" and n.tier != "pcie"]
    ports = dict.fromkeys(switches, 0)
    for link in topology.links:      # one directed link out of a switch per cable
        if link.src in ports:
            ports[link.src] += 1
    return ComponentCounts(gpu=int(world), nic=len(exits) * servers, switch=len(switches), server=servers,
                           switch_ports_used=tuple(ports.values()))


def checkpoint_bytes(model, bytes_per_param: float) -> float:
    """Checkpoint size of a model's states: all parameters (experts included) x bytes per parameter."""
    from workload_gen.params import count_params
    return float(count_params(model).total) * float(bytes_per_param)


def estimate_goodput(model: FailureModel, counts: ComponentCounts, ckpt_bytes: float,
                     interval_s: float | None = None) -> GoodputReport:
    """Goodput of a job with `counts` units writing `ckpt_bytes` checkpoints (interval: Daly's optimum)."""
    st = model.storage
    s = max(1, counts.server)
    c = ckpt_bytes / min(st.storage_write_Bps, s * st.server_write_Bps)
    r = st.restart_s + ckpt_bytes / min(st.storage_read_Bps, s * st.server_read_Bps)
    m = job_mtbf_s(model.mtbf_s, counts)
    young = young_interval_s(c, m) if math.isfinite(m) else math.inf
    daly = daly_interval_s(c, m) if math.isfinite(m) else math.inf
    tau = interval_s if interval_s is not None else daly
    g = goodput(tau, c, r, m) if math.isfinite(tau) else 1.0
    return GoodputReport(counts, m, float(ckpt_bytes), c, r, young, daly, tau, g, dict(FORMULAS))


# ------------------------------------------------------------------------------------------- file
def load_failure_model(path: str | Path | None = None) -> FailureModel:
    """Read a failure/checkpoint file (None: the shipped sim/data/failures.yaml); SimError on a bad entry."""
    p = Path(path) if path is not None else SHIPPED_FAILURES
    data = read_yaml(p, "failure model")
    if not isinstance(data, dict) or not isinstance(data.get("components"), dict) \
            or not isinstance(data.get("checkpoint"), dict):
        raise SimError(f"{p}: expected 'components: {{gpu|nic|switch|server: {{mtbf_hours, source}}}}' "
                       "and 'checkpoint: {...}'")
    comps = data["components"]
    unknown = sorted(set(map(str, comps)) - set(COMPONENT_KINDS))
    if unknown:
        raise SimError(f"{p}: components.{unknown[0]}: unknown component (known: {', '.join(COMPONENT_KINDS)})")
    mtbf, sources = {}, {}
    for kind in COMPONENT_KINDS:
        entry = comps.get(kind)
        if not isinstance(entry, dict):
            raise SimError(f"{p}: components.{kind}: missing (give mtbf_hours and source)")
        mtbf[kind] = number(entry.get("mtbf_hours"), f"{p}: components.{kind}.mtbf_hours") * HOUR_S
        sources[kind] = text_field(entry, "source", f"{p}: components.{kind}", "every MTBF says where it comes from")
    ck = data["checkpoint"]

    def num(key: str) -> float:
        return number(ck.get(key), f"{p}: checkpoint.{key}")

    restart = number(ck.get("restart_s"), f"{p}: checkpoint.restart_s", strict=False)
    storage = CheckpointStorage(
        bytes_per_param=num("bytes_per_param"),
        storage_write_Bps=num("storage_write_GBps") * 1e9, storage_read_Bps=num("storage_read_GBps") * 1e9,
        server_write_Bps=num("server_write_GBps") * 1e9, server_read_Bps=num("server_read_GBps") * 1e9,
        restart_s=float(restart))
    for key in ("bytes_per_param_source", "storage_source", "server_source", "restart_source"):
        if ck.get(key):
            sources[key.removesuffix("_source")] = str(ck[key]).strip()
    return FailureModel(mtbf, sources, storage, str(p))
