"""One probe of the serving search: a deployment simulated at one arrival rate, and the cache of finished
probes that makes `clustersim serve-search` resumable (sim.serve.search).

Cache: every finished probe is appended as one JSON line {"key", "qps", "label", "metrics"} to a file of
the cache directory (one file per writing process: host-pid.jsonl, so local workers and MPI ranks never
share a file; one os.write per line, so an interrupted run leaves at most a torn last line, which loading
skips). The key hashes everything a probe's result depends on except its rate: the model spec, the
deployment, the request stream without its rate, the seed, and the cost-model inputs (the contents of
--db, --gpu-file, --net-calibration, a topology file and the shipped kernel DB and GPU table; the network
backend and the host model). SLOs are not in it: a probe stores every metric.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from sim.errors import SimError
from sim.serve.capacity import flat_metrics
from sim.serve.plan import ServingPlan

PROBE_FORMAT = 1


@dataclass(frozen=True)
class Deployment:
    """One point of the space on `gpu`: colocated (`plan`), or disaggregated (`disagg`, a
    sim.serve.disagg.DisaggPlan; `plan` then holds the pools' common settings, replicas = prefill + decode)."""
    gpu: str
    plan: ServingPlan
    disagg: object | None = None

    @property
    def kind(self) -> str:
        return "colocated" if self.disagg is None else "disaggregated"

    @property
    def num_gpus(self) -> int:
        if self.disagg is not None:
            return int(self.disagg.num_gpus)
        return self.plan.num_gpus

    @property
    def label(self) -> str:
        p = self.plan
        chunk = f" chunk{p.chunk_size}" if p.scheduler == "sarathi" else ""
        reps = f"x{p.replicas}" if self.disagg is None else f"P{self.disagg.prefill.replicas}+D{self.disagg.decode.replicas}"
        kv = "" if self.disagg is None or self.disagg.kv_transfer == "layerwise" else f" kv-{self.disagg.kv_transfer}"
        return f"{self.gpu} tp{p.tp} pp{p.pp} {reps} {p.scheduler}{chunk} cap{p.max_batch_size}{kv}"

    def record(self) -> dict:
        d = {"gpu": self.gpu, "kind": self.kind, "plan": asdict(self.plan)}
        if self.disagg is not None:
            d["disagg"] = asdict(self.disagg)
        return d


@dataclass(frozen=True)
class ProbeSetup:
    """What every probe shares: the model, the request stream (its qps is set per probe), the cluster
    and the cost-model inputs. model_arg: how the user named the model (for the rebuild command)."""
    model: object
    model_arg: str
    requests: object                         # workload_gen.requests.RequestConfig
    topology: str | None = None
    db: str | None = None
    gpu_file: str | None = None
    net_calibration: str | None = None
    network: str = "analytical"
    host: str = "launch-gaps"
    cpu_per_iteration_s: float = 0.0
    fingerprint: str = ""                    # hash of the cost-model input files (make_fingerprint)


def _file_digest(path) -> str:
    h = hashlib.sha256()
    try:
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                h.update(block)
    except OSError as exc:
        raise SimError(f"{path}: cannot read ({exc.strerror})") from None
    return h.hexdigest()


def make_fingerprint(setup: ProbeSetup) -> str:
    """Hash of the contents of every cost-model input file (the shipped kernel DB and GPU table too)."""
    import compute_db
    shipped = Path(compute_db.__file__).resolve().parent / "data"
    parts = {p.name: _file_digest(p) for p in sorted(shipped.glob("*")) if p.suffix in (".sqlite", ".yaml")}
    for name in ("db", "gpu_file", "net_calibration"):
        v = getattr(setup, name)
        parts[name] = _file_digest(v) if v else None
    if setup.topology and Path(setup.topology).is_file():
        parts["topology_file"] = _file_digest(setup.topology)
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def config_key(setup: ProbeSetup, dep: Deployment) -> str:
    """Hash of everything a probe's result depends on except its rate."""
    req = asdict(setup.requests)
    req.pop("qps", None)
    doc = {"format": PROBE_FORMAT, "model": asdict(setup.model), "deployment": dep.record(), "requests": req,
           "seed": setup.requests.seed,
           "cost": {"fingerprint": setup.fingerprint, "topology": setup.topology, "network": setup.network,
                    "host": setup.host, "cpu_per_iteration_s": setup.cpu_per_iteration_s}}
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=str).encode()).hexdigest()[:40]


class ProbeCache:
    """Finished probes as JSON lines {"key", "qps", "metrics"} in `directory`, one file per process."""

    def __init__(self, directory: str | Path):
        self.directory = Path(directory)

    def load(self) -> dict[str, dict[float, dict]]:
        out: dict[str, dict[float, dict]] = {}
        if not self.directory.is_dir():
            return out
        for f in sorted(self.directory.glob("*.jsonl")):
            with open(f, encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    try:
                        rec = json.loads(line)
                        out.setdefault(str(rec["key"]), {})[float(rec["qps"])] = dict(rec["metrics"])
                    except (ValueError, KeyError, TypeError):
                        continue          # a line torn by an interrupted run
        return out

    def append(self, key: str, qps: float, metrics: dict, label: str = "") -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        path = self.directory / f"{socket.gethostname()}-{os.getpid()}.jsonl"
        line = json.dumps({"key": key, "qps": qps, "label": label, "metrics": metrics}, separators=(",", ":"))
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if os.fstat(fd).st_size and not _ends_with_newline(path):
                os.write(fd, b"\n")          # end a line torn by an earlier process of the same pid
            os.write(fd, (line + "\n").encode())   # one write: a line is whole or torn, never interleaved
        finally:
            os.close(fd)


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as fh:
        fh.seek(-1, os.SEEK_END)
        return fh.read(1) == b"\n"


@functools.lru_cache(maxsize=4)
def _resources(db_path, gpu_file, net_cal_path):
    """(ComputeDB, network calibration) of a worker process: read-only, opened once per process."""
    from sim.commands import open_job_db
    db = open_job_db({"db": db_path, "gpu_file": gpu_file})
    cal = None
    if net_cal_path:
        import netsim
        cal = netsim.load_net_calibration(net_cal_path)
    return db, cal


def run_probe(setup: ProbeSetup, dep: Deployment, qps: float) -> dict:
    """One full serving simulation of `dep` at Poisson rate `qps` -> capacity.flat_metrics."""
    from sim.serve.api import host_overhead, simulate_serving
    db, cal = _resources(setup.db, setup.gpu_file, setup.net_calibration)
    cfg = replace(setup.requests, qps=qps)
    host = host_overhead(setup.host, setup.cpu_per_iteration_s)
    if dep.disagg is not None:
        # a DisaggRun's summary has simulate_serving's keys
        from sim.serve.disagg import simulate_disaggregated
        run = simulate_disaggregated(setup.model, dep.disagg, cfg, topology=setup.topology, db=db,
                                     network=setup.network, net_calibration=cal, host=host, seed=cfg.seed,
                                     trace_cap=0)
    else:
        run = simulate_serving(setup.model, dep.plan, cfg, topology=setup.topology, gpu=dep.gpu, db=db,
                               network=setup.network, net_calibration=cal, host=host, seed=cfg.seed, trace_cap=0)
    return flat_metrics(run.summary)


