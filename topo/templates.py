"""Topology templates: `build(template, **params) -> Topology`.

SimAI's generator templates (same defaults, wiring, numbering, capacity checks and file names):
"spectrum-x", "alibaba-hpn", "dcn+", "rail-optimized" (SimAI `--ro`), "non-rail" (SimAI without
`-topo`). clustersim's own: "multi-pod" (pods under a core tier, oversubscription per tier),
"fat-tree" (k-ary), "nvl72" / "nvl36" (NVLink domains spanning trays), "pcie" (PCIe-only servers,
e.g. L40S, with NIC nodes).

Parameters (all optional; bandwidths in bytes/s or as ns-3 strings such as "400Gbps", latencies in
seconds or strings such as "0.0005ms"):
  gpus, gpus_per_server, gpu_type, error_rate,
  nvswitch_per_server (SimAI model: that many NVSwitch nodes, each linked to every GPU at the full
  nvlink rate), nvswitch_chips (faithful: that many chips per NVLink domain, each GPU's NVLink
  bandwidth split evenly over them, or by nvswitch_chip_links such as "5,4,4,5" for HGX H100),
  nvlink_bandwidth_Bps, nvlink_latency_s,
  nic_bandwidth_Bps (endpoint-ToR link, per port), nic_bandwidth_per_gpu_Bps (alternative: the
  scale-out bandwidth each GPU gets; the port rate follows from NIC sharing and dual ToR), latency_s, nics (NIC nodes), gpus_per_nic, pcie_bandwidth_Bps,
  pcie_latency_s, asw_count, nics_per_asw, psw_count (per pod), asw_psw_bandwidth_Bps, asw_per_psw,
  dual_tor, dual_plane, rail_optimized, pods, segments_per_pod,
  tor_oversubscription (ASW down/up bandwidth; sets the PSW count per pod),
  core_oversubscription (multi-pod: PSW down/up bandwidth), oversubscription (= core_oversubscription
  for multi-pod, tor_oversubscription otherwise), core_radix, k (fat-tree), nvlink_domain_size,
  network (False: servers / NVLink domains only).
"""

from __future__ import annotations

import math

from topo.errors import TopoError
from topo.fabric import FabricSpec, Rate, build_fabric
from topo.model import Topology
from topo.units import format_rate, rate_of, time_of

# SimAI generator defaults (simai_formats.md §4)
SIMAI_BASE = dict(gpus=32, gpus_per_server=8, gpu_type="H100", nvswitch_per_server=1,
                  nvlink_bandwidth_Bps="2880Gbps", nvlink_latency_s="0.000025ms", latency_s="0.0005ms",
                  nic_bandwidth_Bps="400Gbps", asw_count=8, nics_per_asw=64, psw_count=64,
                  asw_psw_bandwidth_Bps="400Gbps", asw_per_psw=64, error_rate=0)
SIMAI_TEMPLATE_DEFAULTS = {
    "spectrum-x": dict(gpus=4096),
    "alibaba-hpn": dict(gpus=15360, nic_bandwidth_Bps="200Gbps", asw_count=240, nics_per_asw=128,
                        psw_count=120, asw_per_psw=240),
    "dcn+": dict(gpus=512, asw_count=8, asw_per_psw=8, psw_count=8),
    "rail-optimized": {},
    "non-rail": {},
}
SIMAI_TEMPLATES = tuple(SIMAI_TEMPLATE_DEFAULTS)
OWN_TEMPLATES = ("multi-pod", "fat-tree", "nvl72", "nvl36", "pcie")
TEMPLATES = SIMAI_TEMPLATES + OWN_TEMPLATES

_ALIASES = {"spectrumx": "spectrum-x", "spectrum-x": "spectrum-x", "alibabahpn": "alibaba-hpn",
            "alibaba-hpn": "alibaba-hpn", "hpn": "alibaba-hpn", "dcn+": "dcn+", "dcn": "dcn+",
            "rail-optimized": "rail-optimized", "ro": "rail-optimized", "rail": "rail-optimized",
            "rail_opti": "rail-optimized", "non-rail": "non-rail", "custom": "non-rail",
            "multi-pod": "multi-pod", "multipod": "multi-pod", "fat-tree": "fat-tree", "fattree": "fat-tree",
            "nvl72": "nvl72", "nvl36": "nvl36", "pcie": "pcie", "l40s": "pcie"}

_KNOWN = set(SIMAI_BASE) | {
    "dual_tor", "dual_plane", "rail_optimized", "nvswitch_chips", "nics", "gpus_per_nic",
    "pcie_bandwidth_Bps", "pcie_latency_s", "pcie_switches_per_server", "pods", "segments_per_pod",
    "tor_oversubscription", "core_oversubscription", "oversubscription", "core_radix", "k",
    "nvswitch_chip_links", "nic_bandwidth_per_gpu_Bps",
    "nvlink_domain_size", "network", "name", "flag_names"}


def canonical_template(template: str) -> str:
    key = str(template).strip().lower().replace("_", "-")
    if key in _ALIASES:
        return _ALIASES[key]
    key2 = key.replace("-", "")
    for alias, name in _ALIASES.items():
        if alias.replace("-", "") == key2:
            return name
    raise TopoError(f"template: unknown template '{template}' (known: {', '.join(TEMPLATES)})")


def simai_defaults(template: str, dual_tor: bool = False, dual_plane: bool = False) -> dict:
    """SimAI's defaults for a template and its --dt/--dp switches."""
    t = canonical_template(template)
    d = dict(SIMAI_BASE)
    d.update(SIMAI_TEMPLATE_DEFAULTS.get(t, {}))
    if t == "alibaba-hpn" and dual_plane:
        d["asw_per_psw"] = 120
    if t == "dcn+" and dual_tor:
        d.update(nic_bandwidth_Bps="200Gbps", nics_per_asw=128)
    return d


def simai_file_name(template: str, params: dict) -> str:
    """The output file name SimAI's generator chooses."""
    t = canonical_template(template)
    p = simai_defaults(t, params.get("dual_tor", False), params.get("dual_plane", False))
    p.update({k: v for k, v in params.items() if v is not None})
    bw = p["nic_bandwidth_Bps"]
    bw = bw if isinstance(bw, str) else format_rate(bw)
    g, gps, gt = p["gpus"], p["gpus_per_server"], p["gpu_type"]
    plane = "_DualToR_DualPlane" if p.get("dual_plane") else "_DualToR_SinglePlane"
    if t == "spectrum-x":
        return f"Spectrum-X_{g}g_{gps}gps_{bw}_{gt}"
    if t == "alibaba-hpn":
        return f"AlibabaHPN_{g}g_{gps}gps{plane}_{bw}_{gt}"
    if t == "dcn+":
        return f"DCN+{'DualToR' if p.get('dual_tor') else 'SingleToR'}_{g}g_{gps}gps_{bw}_{gt}"
    if t == "rail-optimized":
        if p.get("dual_tor"):
            return f"Rail_Opti_{g}g_{gps}gps{plane}_{bw}_{gt}"
        return f"Rail_Opti_SingleToR_{g}g_{gps}gps_{bw}_{gt}"
    if t == "non-rail":
        # gen_Topo_Template.py: No_Rail_Opti_<G>g_<gps>gps_{SingleToR,DualToR}_<bw>_<gt>; SimAI refuses a
        # non-rail dual plane, which clustersim builds: its name says so (no SimAI name to match)
        tor = "DualToR_DualPlane" if p.get("dual_plane") else "DualToR" if p.get("dual_tor") else "SingleToR"
        return f"No_Rail_Opti_{g}g_{gps}gps_{tor}_{bw}_{gt}"
    label = {"multi-pod": "MultiPod", "fat-tree": "FatTree", "nvl72": "NVL72", "nvl36": "NVL36",
             "pcie": "PCIe"}[t]
    return f"{label}_{g}g_{gps}gps_{bw}_{gt}"


def _rate(p: dict, key: str, flag: str) -> Rate:
    v, text = rate_of(p[key], flag)
    return Rate(v, text)


def _time(p: dict, key: str, flag: str) -> Rate:
    v, text = time_of(p[key], flag)
    return Rate(v, text)


def _int(p: dict, key: str, flag: str) -> int:
    v = p[key]
    if isinstance(v, bool) or not isinstance(v, int):
        try:
            if isinstance(v, str) or float(v) != int(v):
                raise ValueError
            v = int(v)
        except (TypeError, ValueError):
            raise TopoError(f"{flag}: expected an integer, got {v!r}") from None
    return v


def _float(p: dict, key: str, flag: str) -> float:
    try:
        v = float(p[key])
    except (TypeError, ValueError):
        raise TopoError(f"{flag}: expected a number, got {p[key]!r}") from None
    if not v > 0:
        raise TopoError(f"{flag}: must be > 0, got {p[key]!r}")
    return v


# Marks a topology whose NVLink rate is SimAI's generator default (2880 Gbps, an effective H100 figure),
# not a rate the user chose: simulators replace it with the GPU's datasheet line rate (sim.inputs).
NVLINK_DEFAULT_NOTE = "NVLink rate: SimAI generator default (2880Gbps); not chosen by the user"


def build(template: str, **params) -> Topology:
    """Build a topology from a template name (see module docstring for parameters)."""
    t = canonical_template(template)
    unknown = set(params) - _KNOWN
    if unknown:
        raise TopoError(f"{sorted(unknown)[0]}: unknown parameter for template '{t}'")
    flags = params.pop("flag_names", False)  # CLI: name SimAI flags in errors
    name = params.pop("name", "")

    def fl(key: str) -> str:
        if not flags:
            return key
        return {"gpus": "-g", "gpus_per_server": "-gps", "nvlink_bandwidth_Bps": "-nvbw",
                "nvlink_latency_s": "-nl", "latency_s": "-l", "nic_bandwidth_Bps": "-bw",
                "asw_count": "-asn", "nics_per_asw": "-npa", "psw_count": "-psn",
                "asw_psw_bandwidth_Bps": "-apbw", "asw_per_psw": "-app", "nvswitch_per_server": "-nsps",
                "error_rate": "-er", "gpu_type": "-gt", "pcie_bandwidth_Bps": "--pcie-bw",
                "nic_bandwidth_per_gpu_Bps": "--nic-bw-per-gpu", "nvlink_domain_size": "--nvlink-domain",
                "k": "-k"}.get(key, "--" + key.replace("_", "-"))

    def positive(key: str) -> int:
        v = _int(p, key, fl(key))
        if v < 1:
            raise TopoError(f"{fl(key)}: must be >= 1, got {v}")
        return v

    dual_tor = bool(params.get("dual_tor", False))
    dual_plane = bool(params.get("dual_plane", False))
    if t == "alibaba-hpn":
        dual_tor = True
    p = simai_defaults(t if t in SIMAI_TEMPLATES else "non-rail", dual_tor, dual_plane)
    p.update(_OWN_DEFAULTS.get(t, {}))
    p.update({k: v for k, v in params.items() if v is not None})
    try:
        error_rate = float(p["error_rate"])
    except (TypeError, ValueError):
        raise TopoError(f"{fl('error_rate')}: expected a number, got {p['error_rate']!r}") from None
    if not 0.0 <= error_rate < 1.0:   # a per-packet loss probability (ns-3 error model); 1 loses every packet
        raise TopoError(f"{fl('error_rate')}: error rate must be between 0 and 1 (1 excluded), "
                        f"got {p['error_rate']!r}")
    spec = FabricSpec(
        gpus=_int(p, "gpus", fl("gpus")), gpus_per_server=_int(p, "gpus_per_server", fl("gpus_per_server")),
        gpu_type=str(p["gpu_type"]), error_rate=error_rate,
        nvswitch_count=_int(p, "nvswitch_per_server", fl("nvswitch_per_server")),
        nvlink=_rate(p, "nvlink_bandwidth_Bps", fl("nvlink_bandwidth_Bps")),
        nvlink_latency=_time(p, "nvlink_latency_s", fl("nvlink_latency_s")),
        nic=_rate(p, "nic_bandwidth_Bps", fl("nic_bandwidth_Bps")),
        latency=_time(p, "latency_s", fl("latency_s")),
        nics_per_asw=_int(p, "nics_per_asw", fl("nics_per_asw")),
        psw_per_pod=_int(p, "psw_count", fl("psw_count")),
        asw_per_psw=_int(p, "asw_per_psw", fl("asw_per_psw")),
        asw_psw=_rate(p, "asw_psw_bandwidth_Bps", fl("asw_psw_bandwidth_Bps")),
        asw_requested=_int(p, "asw_count", fl("asw_count")) if t in SIMAI_TEMPLATES else None,
        dual_tor=dual_tor, dual_plane=dual_plane,
        rail_optimized=bool(p.get("rail_optimized", t not in ("dcn+", "non-rail"))),
        label="simai" if flags else "",
    )
    if "pcie_bandwidth_Bps" in p:
        spec.pcie = _rate(p, "pcie_bandwidth_Bps", fl("pcie_bandwidth_Bps"))
        spec.pcie_latency = _time(p, "pcie_latency_s", fl("pcie_latency_s"))
    if p.get("nvswitch_chips") is not None:
        spec.host = "chips"
        spec.nvswitch_count = positive("nvswitch_chips")
    if p.get("nvswitch_chip_links"):
        links = p["nvswitch_chip_links"]
        if isinstance(links, str):
            try:
                links = [int(x) for x in links.split(",")]
            except ValueError:
                raise TopoError(f"{fl('nvswitch_chip_links')}: expected comma-separated integers, "
                                f"got {links!r}") from None
        spec.nvlink_chip_links = tuple(int(x) for x in links)
        if not p.get("nvswitch_chips"):
            spec.host = "chips"
            spec.nvswitch_count = len(spec.nvlink_chip_links)
    if p.get("nics"):
        spec.nics = True
        spec.gpus_per_nic = _int(p, "gpus_per_nic", fl("gpus_per_nic")) if "gpus_per_nic" in p else 1
        if spec.pcie is None:
            spec.pcie = Rate(*rate_of(_PCIE_GEN5, "pcie_bandwidth_Bps"))
            spec.pcie_latency = Rate(*time_of(_PCIE_LAT, "pcie_latency_s"))
    if p.get("nic_bandwidth_per_gpu_Bps") is not None:
        if "nic_bandwidth_Bps" in params:
            raise TopoError(f"{fl('nic_bandwidth_per_gpu_Bps')}: give either it or {fl('nic_bandwidth_Bps')}")
        per_gpu = _rate(p, "nic_bandwidth_per_gpu_Bps", fl("nic_bandwidth_per_gpu_Bps")).value
        sharing = spec.gpus_per_nic if (spec.nics or t == "pcie") else 1
        if t == "pcie":
            sharing = _int(p, "gpus_per_nic", fl("gpus_per_nic"))
        port = per_gpu * sharing / (2 if dual_tor else 1)
        spec.nic = Rate(port, format_rate(port))
        p["nic_bandwidth_Bps"] = spec.nic.text
    if "nvlink_domain_size" in p:
        spec.nvlink_domain_size = _int(p, "nvlink_domain_size", fl("nvlink_domain_size"))
    if "network" in p:
        spec.network = bool(p["network"])
    tor_key = "tor_oversubscription" if "tor_oversubscription" in p else (
        "oversubscription" if "oversubscription" in p and t != "multi-pod" else None)
    if tor_key:
        if t == "fat-tree":
            raise TopoError(f"{fl(tor_key)}: a k-ary fat-tree is non-blocking by construction")
        tor = _float(p, tor_key, fl(tor_key))
        planes = 2 if spec.dual_plane else 1
        per_plane = math.ceil(spec.nics_per_asw * spec.nic.value / (spec.asw_psw.value * tor))
        spec.psw_per_pod = per_plane * planes
    if "core_oversubscription" in p and t != "multi-pod":
        raise TopoError(f"{fl('core_oversubscription')}: only the multi-pod template has a core tier")
    if t == "multi-pod":
        spec.core = True
        key = "core_oversubscription" if "core_oversubscription" in p else "oversubscription"
        spec.core_oversubscription = _float(p, key, fl(key)) if key in p else 1.0
        spec.core_radix = positive("core_radix") if "core_radix" in p else 64
        spec.pods = positive("pods") if "pods" in p else 0
        if "segments_per_pod" in p:
            spec.segments_per_pod = positive("segments_per_pod")
    elif t == "fat-tree":
        k = _int(p, "k", fl("k"))
        if k < 2 or k % 2:
            raise TopoError(f"{fl('k')}: a k-ary fat-tree needs an even k >= 2, got {k}")
        spec.fat_tree_k = k
        if "gpus" not in params:
            eps = k ** 3 // 4
            per_server_eps = spec.gpus_per_server // (spec.gpus_per_nic if spec.nics else 1)
            spec.gpus = eps // max(1, per_server_eps) * spec.gpus_per_server
        spec.asw_psw = spec.nic if "asw_psw_bandwidth_Bps" not in params else spec.asw_psw
    elif t in ("nvl72", "nvl36"):
        spec.host = "chips"
        spec.nvlink_domain_size = _int(p, "nvlink_domain_size", "nvlink_domain_size") \
            if "nvlink_domain_size" in params else (72 if t == "nvl72" else 36)
        if "nvswitch_per_server" in params and not p.get("nvswitch_chips"):
            spec.host = "simai"  # SimAI-style single NVSwitch node(s) per domain
        else:
            spec.nvswitch_count = _int(p, "nvswitch_chips", "nvswitch_chips")
        if "gpus" not in params:
            spec.gpus = spec.nvlink_domain_size
    elif t == "pcie":
        spec.host = "pcie"
        spec.gpus_per_nic = _int(p, "gpus_per_nic", fl("gpus_per_nic"))
        spec.pcie_switches_per_server = _int(p, "pcie_switches_per_server", "pcie_switches_per_server")
    default_nvlink = "nvlink_bandwidth_Bps" not in params and t not in ("nvl72", "nvl36", "pcie")
    return build_fabric(spec, name=name or simai_file_name(
        t, {**p, "dual_tor": dual_tor, "gpus": spec.gpus, "gpus_per_server": spec.gpus_per_server}),
        notes=(NVLINK_DEFAULT_NOTE,) if default_nvlink else ())


_PCIE_GEN5 = "512Gbps"   # PCIe Gen5 x16 raw line rate per direction (32 GT/s x 16 lanes)
_PCIE_GEN4 = "256Gbps"   # PCIe Gen4 x16 (16 GT/s x 16 lanes)
_PCIE_LAT = "0.0001ms"   # one PCIe switch hop, about 100 ns
_OWN_DEFAULTS = {
    "multi-pod": dict(gpus=16384),
    "fat-tree": dict(k=16, gpus_per_server=8),
    # GB200 NVL72: 18 trays x 4 GPUs, 18 NVSwitch chips, 1.8 TB/s per GPU both directions
    "nvl72": dict(gpus_per_server=4, gpu_type="GB200", nvswitch_chips=18, nvlink_bandwidth_Bps="7200Gbps"),
    "nvl36": dict(gpus_per_server=4, gpu_type="GB200", nvswitch_chips=18, nvlink_bandwidth_Bps="7200Gbps"),
    # L40S PCIe servers: 8 GPUs on 2 PCIe Gen4 switches, one 200G NIC per 2 GPUs
    "pcie": dict(gpu_type="L40S", gpus=32, gpus_per_nic=2, pcie_switches_per_server=2,
                 pcie_bandwidth_Bps=_PCIE_GEN4, pcie_latency_s=_PCIE_LAT, nic_bandwidth_Bps="200Gbps",
                 nvswitch_per_server=0),
}
