"""Inputs of a simulation: workloads (native JSON, SimAI text, model + plan) and topologies
(topo templates with parameters, or SimAI topology files). Errors are one line (SimError or the
owning package's error)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from sim.errors import SimError
from workload_gen.plan import ParallelPlan

SIMAI_POLICIES = ("HYBRID_TRANSFORMER_FWD_IN_BCKWD", "MICRO", "DATA", "HYBRID_TRANSFORMER", "HYBRID_DLRM",
                  "MODEL", "HYBRID_DATA_MODEL", "HYBRID_MODEL_DATA", "HYBRID_CUSTOMIZED",
                  "DISTRIBUTED_INFERENCE")

PLAN_FIELDS = {f.name: f for f in dataclasses.fields(ParallelPlan)}


def parse_number(text: str, where: str, what: str, kind: type = float, minimum: float | None = None):
    """A flag's numeric field (float or int) from text: finite, >= `minimum` when given; a one-line
    SimError '<where>: <what> ...' otherwise."""
    import math
    try:
        value = kind(text.strip())
    except ValueError:
        raise SimError(f"{where}: {what} '{text.strip()}' is not {'an integer' if kind is int else 'a number'}") from None
    finite = kind is int or math.isfinite(value)
    if not finite or (minimum is not None and value < minimum):
        bound = "" if minimum is None else f">= {minimum:g}"
        rule = " and ".join(filter(None, ["finite" if kind is float else "", bound]))
        raise SimError(f"{where}: {what} must be {rule}, got {text.strip()}")
    return value


def unique_names(variants: list[tuple[str, object]], flag: str) -> list[tuple[str, object]]:
    """compare's named variants (--faults-variant, --straggler-variant): each name once."""
    names = [n for n, _ in variants]
    dup = next((n for n in names if names.count(n) > 1), None)
    if dup:
        raise SimError(f"{flag}: name '{dup}' given twice")
    return variants


def _first_token(path: Path) -> str:
    with open(path, "rb") as fh:
        head = fh.read(256)
    try:
        text = head.decode("utf-8", errors="replace").lstrip()
    except Exception:  # pragma: no cover
        return ""
    return text.split(None, 1)[0] if text.split() else ""


def is_simai_workload(path: str | Path) -> bool:
    return _first_token(Path(path)) in SIMAI_POLICIES


def load_workload_file(path: str | Path):
    """Native workload JSON (workload_gen.native_io), SimAI workload text file (by its first token), an AICB
    CSV log clustersim wrote (by its header; workload_gen.aicb_csv) or a Chakra trace folder /
    `<prefix>.<rank>.et` file (sim.chakra)."""
    p = Path(path)
    # sim.chakra is imported only for what can be a trace (a folder, or `<prefix>.<rank>.et[.gz]`)
    from_chakra = p.is_dir() or p.name.endswith((".et", ".et.gz"))
    if from_chakra:
        from sim.chakra import is_chakra_input
    if from_chakra and is_chakra_input(p):
        from sim.chakra import load_chakra
        return load_chakra(p)
    if not p.is_file():
        raise SimError(f"{p}: workload file not found")
    if is_simai_workload(p):
        from workload_gen.simai_workload import read_simai_workload
        return read_simai_workload(p)
    if _first_token(p).startswith("{"):
        from workload_gen.native_io import load_workload
        return load_workload(p)
    from workload_gen.aicb_csv import is_aicb_csv
    if is_aicb_csv(p):
        from workload_gen.aicb_csv import read_aicb_csv
        return read_aicb_csv(p)
    raise SimError(f"{p}:1: neither a clustersim workload JSON, a SimAI workload file nor an AICB CSV log "
                   f"(first token '{_first_token(p)[:40]}')")


def resolve_model(name_or_path: str):
    p = Path(name_or_path)
    if p.suffix.lower() in (".json", ".yaml", ".yml") or p.is_file():
        from workload_gen.config_io import load_model
        return load_model(p)
    from workload_gen.zoo import get_model
    return get_model(name_or_path)


def _coerce(name: str, value):
    f = PLAN_FIELDS.get(name)
    if f is None:
        raise SimError(f"plan field '{name}' unknown (known: {', '.join(sorted(PLAN_FIELDS))})")
    if isinstance(value, str):
        text = value.strip()
        ftype = str(f.type)
        if "bool" in ftype:
            if text.lower() in ("1", "true", "yes", "on"):
                return True
            if text.lower() in ("0", "false", "no", "off"):
                return False
            raise SimError(f"plan field '{name}': expected true/false, got '{value}'")
        if "int" in ftype:
            if text.lower() == "none" and "None" in ftype:
                return None
            try:
                return int(text)
            except ValueError:
                raise SimError(f"plan field '{name}': expected an integer, got '{value}'") from None
        return text
    return value


def make_plan(base=None, **fields):
    """ParallelPlan from an optional base plan (or plan file path) and field overrides (None = keep)."""
    if isinstance(base, (str, Path)):
        from workload_gen.config_io import load_plan
        base = load_plan(base)
    dp = fields.pop("dp", None)
    fields = {k: _coerce(k, v) for k, v in fields.items() if v is not None}
    if dp is not None:
        try:
            fields["dp"] = int(dp)
        except ValueError:
            raise SimError(f"plan field 'dp': expected an integer, got '{dp}'") from None
        if fields["dp"] < 1:   # refused, not read as the default dp = 1
            raise SimError(f"plan field 'dp': must be a positive integer (got {fields['dp']})")
    if "dp" in fields and "world_size" in fields:
        t = fields.get("tp", base.tp if base else 1) * fields.get("pp", base.pp if base else 1) \
            * fields.get("cp", base.cp if base else 1)
        if t * int(fields["dp"]) != int(fields["world_size"]):
            raise SimError(f"plan: dp={fields['dp']} x tp*pp*cp={t} != world_size={fields['world_size']} "
                           "(give one of --dp / --world-size)")
    if base is None:
        world = fields.get("world_size")
        if world is None:
            dp = int(fields.pop("dp", 1))
            world = dp * fields.get("tp", 1) * fields.get("pp", 1) * fields.get("cp", 1)
            fields["world_size"] = world
        fields.pop("dp", None)
        return ParallelPlan(**fields)
    if "dp" in fields and "world_size" not in fields:
        t = fields.get("tp", base.tp) * fields.get("pp", base.pp) * fields.get("cp", base.cp)
        fields["world_size"] = t * int(fields["dp"])
    fields.pop("dp", None)
    return dataclasses.replace(base, **fields)


def parse_kv(text: str, what: str) -> dict:
    """'a=1,b=x' -> {'a': '1', 'b': 'x'}."""
    out = {}
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "=" not in part:
            raise SimError(f"{what} '{text}': expected key=value pairs separated by commas, got '{part}'")
        k, v = part.split("=", 1)
        out[k.strip().replace("-", "_")] = v.strip()
    return out


def _num_or_str(v: str):
    try:
        return int(v)
    except ValueError:
        pass
    try:
        return float(v)
    except ValueError:
        pass
    if v.lower() in ("true", "false"):
        return v.lower() == "true"
    return v


def make_topology(spec: str, gpus: int | None = None, gpu_type: str | None = None, **params):
    """Topology from 'TEMPLATE[:key=value,...]' or a SimAI topology file path.

    gpus: GPUs to build (default: the template's default); gpu_type: the topology's GPU type string.
    """
    import topo
    p = Path(spec)
    if p.is_file():
        return topo.read_simai_topology(p)
    template, _, rest = spec.partition(":")
    kw = {k: _num_or_str(v) for k, v in parse_kv(rest, "fabric").items()} if rest else {}
    if gpus is not None and "gpus" not in kw:
        kw["gpus"] = int(gpus)
    if gpu_type is not None and "gpu_type" not in kw:
        kw["gpu_type"] = gpu_type
    kw.update({k: v for k, v in params.items() if v is not None})
    if ("/" in template or template.endswith((".txt", ".topo"))) and not p.exists():
        raise SimError(f"{spec}: topology file not found")
    _default_nvlink_from_spec(template, kw)
    return topo.build(template, **kw)


def resolve_default_nvlink(topology, gpu_spec):
    """A topology built with SimAI's default NVLink rate (topo.build without nvlink_bandwidth_Bps) at the
    GPU's datasheet line rate instead, as `make_topology` builds it, so the Python API and the CLI simulate
    the same fabric; a rate the user chose, and topology files, are kept."""
    from topo.model import with_nvlink_rate
    from topo.templates import NVLINK_DEFAULT_NOTE
    if NVLINK_DEFAULT_NOTE not in getattr(topology, "notes", ()) or not gpu_spec.nvlink_Bps > 0:
        return topology
    from dataclasses import replace
    t = with_nvlink_rate(topology, gpu_spec.nvlink_Bps)
    note = f"NVLink at the {gpu_spec.name} datasheet line rate {gpu_spec.nvlink_Bps / 1e9:g} GB/s per direction"
    return replace(t, notes=tuple(n for n in t.notes if n != NVLINK_DEFAULT_NOTE) + (note,))


def _default_nvlink_from_spec(template: str, kw: dict) -> None:
    """Use the GPU's NVLink line rate (one direction) unless the user gave one.

    SimAI's generator default, 2880 Gbps (360 GB/s), is an *effective* H100 figure; netsim applies
    its calibrated NVLink efficiency to the link rate itself, so simulations start from the datasheet
    line rate of the topology's GPU (H100: 450 GB/s, A100: 300 GB/s per direction). `clustersim topo`
    keeps SimAI's default so that its files stay byte-identical to SimAI's generator.
    """
    from compute_db.errors import ComputeDBError
    from compute_db.gpus import get_gpu
    from topo.errors import TopoError
    from topo.templates import canonical_template
    if "nvlink_bandwidth_Bps" in kw:
        return
    try:
        if canonical_template(template) in ("nvl72", "nvl36", "pcie"):
            return  # these set their own NVLink / PCIe figures
        spec = get_gpu(str(kw.get("gpu_type", "H100")))
    except (TopoError, ComputeDBError):
        return  # unknown template / GPU: topo.build reports it (or keeps its defaults)
    if spec.nvlink_Bps > 0:
        kw["nvlink_bandwidth_Bps"] = spec.nvlink_Bps


def load_net_calibration(path):
    """netsim.load_net_calibration(path) (a user network calibration), or None without a path."""
    if not path:
        return None
    import netsim
    return netsim.load_net_calibration(path)


def default_gpu(topology, gpu: str | None) -> str:
    if gpu:
        return gpu
    t = getattr(topology, "gpu_type", None)
    if not t or str(t).upper() == "NONE":
        raise SimError("topology does not name its GPU type: pass --gpu")
    return str(t)


def servers_for(world: int, gpus_per_server: int = 8) -> int:
    """GPU count of the smallest whole-server topology holding `world` ranks."""
    return -(-int(world) // gpus_per_server) * gpus_per_server
