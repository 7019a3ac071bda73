"""NetCalibration: a user's fitted network constants (from `clustersim collective calibrate`), and its YAML file.

Every field is optional: None keeps netsim's own constant (netsim.calibration). Units SI.

    nvlink_efficiency, network_efficiency, pcie_efficiency   effective / line rate of a link class
    nvls_efficiency                                          NVLS switch-port throughput / line rate
    nvlink_hop_scale, pcie_hop_scale, network_hop_scale      x netsim's per-hop latencies of a link class
                                                             (NVLink: also NVLS's latency)
    network_latency_s                                        extra latency per network hop (NIC / transport)
    launch_s_per_gpu                                         host launch cost per GPU of the calling process
    fill_scale                                               x the pipeline-fill chunk sizes
    cpu_vendor                                               intel | amd (NCCL's LL cap row, netOverhead)
    ll128_over_network                                       false: the network cannot carry LL128 (NCCL
                                                             enables LL128 only on paths that keep 128-byte
                                                             writes ordered; e.g. TCP-based GPUDirect)

File format (written by `clustersim collective calibrate`, read by netsim.load_net_calibration):

    format: clustersim-net-calibration/1
    name: my-cluster
    constants:
      network_efficiency: 0.91
      ...
    fitted_from: [all_reduce.txt]        # optional, informational
    fit: {...}                           # optional, informational (errors before / after)
"""

from __future__ import annotations

import math
import os
import tempfile
from dataclasses import asdict, dataclass, field, fields

from netsim.errors import NetsimError
from netsim.outfile import user_mode

FORMAT = "clustersim-net-calibration/1"

# field -> (lower bound, upper bound): a fitted constant outside these is a broken fit or a typo
_RANGES = {
    "nvlink_efficiency": (0.05, 1.0), "network_efficiency": (0.05, 1.0), "pcie_efficiency": (0.05, 1.0),
    "nvls_efficiency": (0.05, 1.0), "nvlink_hop_scale": (0.0, 100.0), "pcie_hop_scale": (0.0, 100.0),
    "network_hop_scale": (0.0, 100.0), "network_latency_s": (0.0, 0.1), "launch_s_per_gpu": (0.0, 0.01),
    "fill_scale": (0.0, 100.0),
}
CPU_VENDORS = ("intel", "amd")


@dataclass(frozen=True)
class NetCalibration:
    name: str = ""
    nvlink_efficiency: float | None = None
    network_efficiency: float | None = None
    pcie_efficiency: float | None = None
    nvls_efficiency: float | None = None
    nvlink_hop_scale: float | None = None
    pcie_hop_scale: float | None = None
    network_hop_scale: float | None = None
    network_latency_s: float | None = None
    launch_s_per_gpu: float | None = None
    fill_scale: float | None = None
    cpu_vendor: str | None = None
    ll128_over_network: bool | None = None
    fitted_from: tuple[str, ...] = ()
    fit: dict = field(default_factory=dict, compare=False)
    path: str = field(default="", compare=False)      # the file it was read from ("" if built in code)

    def __post_init__(self):
        for name, (lo, hi) in _RANGES.items():
            v = getattr(self, name)
            if v is not None and not (isinstance(v, int | float) and not isinstance(v, bool)
                                      and math.isfinite(v) and lo <= v <= hi):
                raise NetsimError(f"net calibration: {name} must be a number in [{lo:g}, {hi:g}], got {v!r}")
        if self.ll128_over_network is not None and not isinstance(self.ll128_over_network, bool):
            raise NetsimError(f"net calibration: ll128_over_network must be true or false, got "
                              f"{self.ll128_over_network!r}")
        if self.cpu_vendor is not None and self.cpu_vendor not in CPU_VENDORS:
            raise NetsimError(f"net calibration: cpu_vendor must be one of {', '.join(CPU_VENDORS)}, "
                              f"got {self.cpu_vendor!r}")

    def constants(self) -> dict:
        """The constants this calibration sets (None fields left out)."""
        return {k: v for k, v in asdict(self).items() if k in CONSTANT_FIELDS and v is not None}

    def label(self) -> str:
        return self.name or (os.path.basename(self.path) if self.path else "net calibration")


CONSTANT_FIELDS = tuple(f.name for f in fields(NetCalibration)
                        if f.name not in ("name", "fitted_from", "fit", "path"))


def load_net_calibration(path) -> NetCalibration:
    """Read a calibration YAML file. Bad file: NetsimError naming file:line and the field."""
    import yaml

    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as fh:
            text = fh.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise NetsimError(f"{path}: cannot read net calibration ({getattr(exc, 'strerror', None) or exc})") from None
    try:
        root = yaml.compose(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else path
        raise NetsimError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or 'parse error'})") from None
    if root is None or not isinstance(root, yaml.MappingNode):
        raise NetsimError(f"{path}:1: expected a mapping with 'format' and 'constants'")

    def where(node) -> str:
        return f"{path}:{node.start_mark.line + 1}"

    top = {k.value: (k, v) for k, v in root.value}
    for key, (knode, _v) in top.items():
        if key not in ("format", "name", "constants", "fitted_from", "fit", "system"):
            raise NetsimError(f"{where(knode)}: unknown key {key!r} (expected format, name, constants, "
                              "fitted_from, fit, system)")
    if "format" not in top:
        raise NetsimError(f"{path}:1: missing 'format: {FORMAT}'")
    fnode = top["format"][1]
    if not isinstance(fnode, yaml.ScalarNode) or fnode.value != FORMAT:
        raise NetsimError(f"{where(fnode)}: format must be {FORMAT!r}, got {getattr(fnode, 'value', '?')!r}")
    if "constants" not in top:
        raise NetsimError(f"{path}:1: missing 'constants'")
    cnode = top["constants"][1]
    if not isinstance(cnode, yaml.MappingNode):
        raise NetsimError(f"{where(cnode)}: constants must be a mapping of name: value")
    values: dict = {}
    for knode, vnode in cnode.value:
        name = knode.value
        if name not in CONSTANT_FIELDS:
            raise NetsimError(f"{where(knode)}: constants.{name}: unknown constant "
                              f"(known: {', '.join(CONSTANT_FIELDS)})")
        if not isinstance(vnode, yaml.ScalarNode):
            raise NetsimError(f"{where(vnode)}: constants.{name}: expected a single value")
        text_value = vnode.value.strip()
        if name == "cpu_vendor":
            value = text_value.lower()
        elif name == "ll128_over_network":
            low = text_value.lower()
            if low not in ("true", "false", "yes", "no"):
                raise NetsimError(f"{where(vnode)}: constants.{name}: expected true or false, got {vnode.value!r}")
            value = low in ("true", "yes")
        elif text_value in ("", "~", "null", "Null", "NULL") and vnode.style is None:
            value = None
        else:
            try:
                value = float(text_value)
            except ValueError:
                raise NetsimError(f"{where(vnode)}: constants.{name}: expected a number, "
                                  f"got {vnode.value!r}") from None
        try:
            NetCalibration(**{name: value})
        except NetsimError as exc:
            raise NetsimError(f"{where(vnode)}: constants.{name}: {str(exc).split(': ', 2)[-1]}") from None
        values[name] = value
    data = yaml.safe_load(text)
    name = data.get("name") or ""
    fitted = data.get("fitted_from") or []
    if not isinstance(fitted, list):
        raise NetsimError(f"{where(top['fitted_from'][1])}: fitted_from must be a list of file names")
    fit = data.get("fit") or {}
    if not isinstance(fit, dict):
        raise NetsimError(f"{where(top['fit'][1])}: fit must be a mapping")
    return NetCalibration(name=str(name), fitted_from=tuple(str(x) for x in fitted), fit=fit, path=path, **values)


def save_net_calibration(cal: NetCalibration, path, *, system: dict | None = None) -> None:
    """Write `cal` as YAML atomically (temp file + rename)."""
    import yaml

    path = os.fspath(path)
    doc = {"format": FORMAT, "name": cal.name, "constants": cal.constants()}
    if system:
        doc["system"] = system
    if cal.fitted_from:
        doc["fitted_from"] = list(cal.fitted_from)
    if cal.fit:
        doc["fit"] = cal.fit
    text = ("# clustersim network calibration: netsim.load_net_calibration / clustersim ... --net-calibration\n"
            + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False))
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise NetsimError(f"-o {path}: cannot write (folder {folder} does not exist)")
    fd, tmp = tempfile.mkstemp(prefix=".netcal-", suffix=".yaml", dir=folder)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        user_mode(tmp)
        os.replace(tmp, path)
    except OSError as exc:
        raise NetsimError(f"-o {path}: cannot write ({exc.strerror})") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
