"""Read and write SimAI topology files (simai_formats.md §3).

```
<node_num> <gpus_per_server> <nvswitch_num> <switch_num> <link_num> <gpu_type>
<switch ids: NVSwitch ids first, then network-switch ids>
<src> <dst> <rate> <delay> <error_rate>      (one line per cable)
```
One line is one bidirectional cable; it becomes links 2k (src -> dst) and 2k+1 (dst -> src).

What SimAI cannot express is written in its closest faithful form, and said so:
- NIC nodes are listed as network switches (they forward between the GPU/PCIe side and the ToR,
  which is what a NIC does); PCIe switches of PCIe-only servers are listed in the NVSwitch section
  (SimAI then routes intra-server traffic through them, as it would through an NVSwitch).
- NVSwitch chips (several per server or per NVL domain) are written as they are: SimAI reads them as
  several NVSwitch nodes, each linked to every GPU of the domain at that link's share.
Facts a SimAI file has no field for (node kinds/tiers that differ from what the structure implies,
link kinds, the NVLink domain size) go to `#`-comment lines after the last cable. SimAI reads exactly
`link_num` cable lines and stops, so it never sees them; clustersim reads them back, which makes
read(write(t)) == t for every model.
"""

from __future__ import annotations

import math
import os
import tempfile
from collections import deque
from pathlib import Path

from topo.errors import TopoError
from topo.limits import ALLOW_HUGE_ENV, MAX_CABLES, MAX_NODES, over_limit
from topo.model import LINK_KINDS, NODE_KINDS, Link, Node, Topology, tier_name
from topo.units import format_number, format_rate, format_time, parse_rate, parse_time

TRAILER = "#clustersim"


def _host_section(n: Node) -> bool:
    return n.kind == "nvswitch" or n.tier == "pcie"


def simai_lines(t: Topology) -> tuple[list[str], list[str]]:
    """(file lines, warnings) for a topology in SimAI's format."""
    G = t.num_gpus
    nodes = t.nodes
    warnings: list[str] = []
    for i in range(G):
        if nodes[i].kind != "gpu":
            raise TopoError(f"topology: node {i} must be a GPU (GPUs are numbered 0..{G - 1})")
    host = [n.id for n in nodes[G:] if _host_section(n)]
    rest = [n.id for n in nodes[G:] if not _host_section(n)]
    if any(n.kind == "gpu" for n in nodes[G:]):
        raise TopoError("topology: all GPUs must come first")
    links = t.links
    if len(links) % 2:
        raise TopoError("topology: links must come in cable pairs (2k, 2k+1)")
    out = [f"{len(nodes)} {t.gpus_per_server} {len(host)} {len(rest)} {len(links) // 2} {t.gpu_type}",
           "".join(f"{i} " for i in host + rest)]
    rate_ok: dict[tuple[str, float], bool] = {}
    time_ok: dict[tuple[str, float], bool] = {}
    for k in range(0, len(links), 2):
        a, r = links[k], links[k + 1]
        if (r.src, r.dst, r.bandwidth_Bps, r.latency_s, r.error_rate) != (a.dst, a.src, a.bandwidth_Bps,
                                                                           a.latency_s, a.error_rate):
            raise TopoError(f"topology: links {k} and {k + 1} are not the two directions of one cable")
        rate = _spelling(a.rate_text, a.bandwidth_Bps, parse_rate, format_rate, rate_ok)
        delay = _spelling(a.delay_text, a.latency_s, parse_time, format_time, time_ok)
        out.append(f"{a.src} {a.dst} {rate} {delay} {format_number(a.error_rate)}")
    extra = _trailer(t, host, warnings)
    out.extend(extra)
    return out, warnings


def _same(text: str, value: float, parse) -> bool:
    try:
        return parse(text) == value
    except TopoError:
        return False


def _spelling(text: str, value: float, parse, fmt, cache: dict[tuple[str, float], bool]) -> str:
    """The file's own spelling of `value` when it parses back to exactly `value`, else `fmt(value)`."""
    key = (text, value)
    if key not in cache:
        cache[key] = bool(text) and _same(text, value, parse)
    return text if cache[key] else fmt(value)


def write_simai_topology(t: Topology, path: str | os.PathLike) -> list[str]:
    """Write `t` as a SimAI topology file (atomically). Returns warnings about approximations."""
    lines, warnings = simai_lines(t)
    text = "\n".join(lines) + "\n"
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent or ".")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        mask = os.umask(0)
        os.umask(mask)
        os.chmod(tmp, 0o666 & ~mask)   # mkstemp creates 0600; give the file the user's usual mode
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return warnings


def _ranges(ids: list[int]) -> str:
    parts = []
    i = 0
    while i < len(ids):
        j = i
        while j + 1 < len(ids) and ids[j + 1] == ids[j] + 1:
            j += 1
        parts.append(str(ids[i]) if i == j else f"{ids[i]}-{ids[j]}")
        i = j + 1
    return ",".join(parts)


def _parse_ranges(text: str, limit: int) -> list[int]:
    """'0-3,7' -> [0, 1, 2, 3, 7]; ValueError for an id outside 0..limit-1 (checked before expanding)."""
    out: list[int] = []
    for part in text.split(","):
        if "-" in part:
            lo, hi = (int(x) for x in part.split("-"))
        elif part:
            lo = hi = int(part)
        else:
            continue
        if not 0 <= lo <= hi < limit:
            raise ValueError(part)
        out.extend(range(lo, hi + 1))
    return out


def _trailer(t: Topology, host: list[int], warnings: list[str]) -> list[str]:
    """Comment lines for what the SimAI structure does not imply (empty for SimAI's own models)."""
    G = t.num_gpus
    inferred_nodes = _infer_nodes(len(t.nodes), G, set(host), t.links)
    node_diff: dict[tuple[str, str], list[int]] = {}
    for n in t.nodes[G:]:
        if (n.kind, n.tier) != inferred_nodes[n.id]:
            node_diff.setdefault((n.kind, n.tier), []).append(n.id)
    hs = set(host)
    kinds = ["gpu" if i < G else ("nvswitch" if i in hs else "switch") for i in range(len(t.nodes))]
    link_diff: dict[str, list[int]] = {}
    for k in range(0, len(t.links), 2):
        a = t.links[k]
        if a.kind != _infer_link_kind(kinds[a.src], kinds[a.dst]):
            link_diff.setdefault(a.kind, []).append(k // 2)
    dom = _infer_domain_size(t.num_gpus, t.links, [n.kind for n in t.nodes])
    lines = []
    if node_diff or link_diff or dom != t.nvlink_domain_size:
        lines.append(f"{TRAILER} v1: lines below are ignored by SimAI (it reads exactly link_num cables)")
    if any(n.kind == "nic" for n in t.nodes):
        warnings.append("SimAI has no NIC node: NICs are written as network switches (they forward GPU <-> ToR)")
    if any(n.tier == "pcie" for n in t.nodes):
        warnings.append("SimAI has no PCIe model: PCIe switches are written in the NVSwitch section")
    for w in warnings:
        lines.append(f"{TRAILER} note: {w}")
    for (kind, tier), ids in sorted(node_diff.items()):
        lines.append(f"{TRAILER} node {kind} {tier} {_ranges(ids)}")
    for kind, cables in sorted(link_diff.items()):
        lines.append(f"{TRAILER} cable {kind} {_ranges(cables)}")
    if dom != t.nvlink_domain_size:
        lines.append(f"{TRAILER} nvlink_domain_size {t.nvlink_domain_size}")
    return lines


def _infer_link_kind(ka: str, kb: str) -> str:
    return "nvlink" if "nvswitch" in (ka, kb) else "network"


def _infer_nodes(num_nodes: int, G: int, nvs: set[int], links) -> list[tuple[str, str]]:
    """(kind, tier) of every node from the structure: tiers by BFS level from the GPUs."""
    out: list[tuple[str, str]] = [("gpu", "gpu")] * G + [("switch", "")] * (num_nodes - G)
    for i in nvs:
        out[i] = ("nvswitch", "nvswitch")
    adj: list[list[int]] = [[] for _ in range(num_nodes)]
    for link in links:
        adj[link.src].append(link.dst)
    level = [0] * num_nodes
    dq: deque[int] = deque()
    for g in range(G):
        for v in adj[g]:
            if v not in nvs and v >= G and level[v] == 0:
                level[v] = 1
                dq.append(v)
    while dq:
        u = dq.popleft()
        for v in adj[u]:
            if v >= G and v not in nvs and level[v] == 0:
                level[v] = level[u] + 1
                dq.append(v)
    for i in range(G, num_nodes):
        if i not in nvs:
            out[i] = ("switch", tier_name(level[i]) if level[i] else "unconnected")
    return out


def _infer_domain_size(G: int, links, kinds: list[str]) -> int:
    """Largest set of GPUs joined through NVSwitch nodes (1 when there is no NVSwitch)."""
    parent = list(range(len(kinds)))

    def find(x: int) -> int:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    any_nv = False
    for link in links:
        if link.kind == "nvlink":
            any_nv = True
            a, b = find(link.src), find(link.dst)
            if a != b:
                parent[max(a, b)] = min(a, b)
    if not any_nv:
        return 1
    sizes: dict[int, int] = {}
    for g in range(G):
        r = find(g)
        sizes[r] = sizes.get(r, 0) + 1
    return max(sizes.values())


def _count(text: str) -> int:
    """A non-negative decimal integer of at most 19 digits (ValueError otherwise: `-1`, `1.5`, `nan`,
    400-digit numbers, which int() would parse slowly and which no count can be)."""
    if not text.isdigit() or not text.isascii() or len(text) > 19:
        raise ValueError(text)
    return int(text)


def _clip(text: str, n: int = 40) -> str:
    """A file token for an error message, shortened so that the message stays one readable line."""
    return text if len(text) <= n else f"{text[:n]}... ({len(text)} characters)"


def raw_line(path: Path, offset: int) -> int:
    """1-based line number of byte `offset` in the file."""
    with open(path, "rb") as f:
        return f.read(offset).count(b"\n") + 1


def read_simai_topology(path: str | os.PathLike) -> Topology:
    """Parse a SimAI topology file (generator output or hand-written)."""
    path = Path(path)
    name = str(path)
    try:
        raw = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        line = raw_line(path, exc.start)
        raise TopoError(f"{name}:{line}: not UTF-8 text (byte {exc.start})") from None
    lines = raw.splitlines()
    pos = 0

    def next_line() -> tuple[int, list[str]]:
        nonlocal pos
        while pos < len(lines):
            pos += 1
            s = lines[pos - 1].strip()
            if s and not s.startswith("#"):
                return pos, s.split()
        return pos + 1, []

    ln, head = next_line()
    if len(head) not in (5, 6):
        raise TopoError(f"{name}:{ln}: header must be '<node_num> <gpus_per_server> <nvswitch_num> "
                        f"<switch_num> <link_num> <gpu_type>'")
    try:
        node_num, gps, nvs_num, sw_num, link_num = (_count(x) for x in head[:5])
    except ValueError:
        raise TopoError(f"{name}:{ln}: header counts must be integers: {_clip(' '.join(head[:5]))}") from None
    for what, v, bound in (("node_num", node_num, MAX_NODES), ("gpus_per_server", gps, MAX_NODES),
                           ("nvswitch_num", nvs_num, MAX_NODES), ("switch_num", sw_num, MAX_NODES),
                           ("link_num", link_num, MAX_CABLES)):
        if over_limit(v, bound):
            raise TopoError(f"{name}:{ln}: {what} {_clip(str(v))} exceeds the limit of {bound:,} "
                            f"(set {ALLOW_HUGE_ENV}=1 to read it anyway)")
    gpu_type = head[5] if len(head) == 6 else "NONE"
    G = node_num - nvs_num - sw_num
    if G < 1 or gps < 1 or min(nvs_num, sw_num, link_num) < 0:
        raise TopoError(f"{name}:{ln}: inconsistent header counts (GPUs = node_num - nvswitch_num - "
                        f"switch_num = {G}, gpus_per_server = {gps})")
    ids: list[int] = []
    while len(ids) < nvs_num + sw_num:
        ln, toks = next_line()
        if not toks:
            raise TopoError(f"{name}:{ln}: expected {nvs_num + sw_num} switch ids, found {len(ids)}")
        if len(ids) + len(toks) > nvs_num + sw_num:
            raise TopoError(f"{name}:{ln}: expected {nvs_num + sw_num} switch ids, found more")
        try:
            ids.extend(_count(x) for x in toks)
        except ValueError:
            raise TopoError(f"{name}:{ln}: switch ids must be non-negative integers") from None
    if len(ids) != nvs_num + sw_num:
        raise TopoError(f"{name}:{ln}: expected {nvs_num + sw_num} switch ids, found {len(ids)}")
    if sorted(ids) != list(range(G, node_num)):
        bad = _clip(str(sorted(set(ids) ^ set(range(G, node_num)))[0]))
        raise TopoError(f"{name}:{ln}: switch ids must be {G}..{node_num - 1} once each (GPUs are "
                        f"0..{G - 1}); offending id {bad}")
    nvs = set(ids[:nvs_num])
    kinds = ["gpu"] * G + ["switch"] * (node_num - G)
    for i in nvs:
        kinds[i] = "nvswitch"
    links: list[Link] = []
    rate_cache: dict[str, float] = {}
    time_cache: dict[str, float] = {}
    for _ in range(link_num):
        ln, toks = next_line()
        if not toks:
            raise TopoError(f"{name}:{ln}: header declares {link_num} links but the file has {len(links) // 2}")
        if len(toks) != 5:
            raise TopoError(f"{name}:{ln}: expected '<src> <dst> <rate> <delay> <error_rate>', got {len(toks)} fields")
        try:
            a, b = _count(toks[0]), _count(toks[1])
        except ValueError:
            raise TopoError(f"{name}:{ln}: node ids must be non-negative integers: "
                            f"{_clip(toks[0])} {_clip(toks[1])}") from None
        if not (a < node_num and b < node_num) or a == b:
            raise TopoError(f"{name}:{ln}: bad link {_clip(str(a))} {_clip(str(b))} (nodes are 0..{node_num - 1})")
        if a < G and b < G:
            raise TopoError(f"{name}:{ln}: link {a} {b} joins two GPUs directly (SimAI needs a switch between)")
        rt, dt = toks[2], toks[3]
        if rt not in rate_cache:
            rate_cache[rt] = parse_rate(rt, f"{name}:{ln}")
            if not (0 < rate_cache[rt] < math.inf):
                raise TopoError(f"{name}:{ln}: rate must be positive and finite, got {_clip(rt)}")
        if dt not in time_cache:
            time_cache[dt] = parse_time(dt, f"{name}:{ln}")
            if not (0 <= time_cache[dt] < math.inf):
                raise TopoError(f"{name}:{ln}: delay must be non-negative and finite, got {_clip(dt)}")
        try:
            er = float(toks[4])
        except ValueError:
            raise TopoError(f"{name}:{ln}: error rate must be a number, got {_clip(toks[4])}") from None
        if not 0.0 <= er < 1.0:   # a per-packet loss probability; 1 would lose every packet
            raise TopoError(f"{name}:{ln}: error rate must be in [0, 1), got {_clip(toks[4])}")
        kind = _infer_link_kind(kinds[a], kinds[b])
        n = len(links)
        links.append(Link(n, a, b, rate_cache[rt], time_cache[dt], kind, er, rt, dt))
        links.append(Link(n + 1, b, a, rate_cache[rt], time_cache[dt], kind, er, rt, dt))
    ln, toks = next_line()
    if toks:
        raise TopoError(f"{name}:{ln}: more cable lines than the {link_num} declared in the header")
    # trailer
    node_info = _infer_nodes(node_num, G, nvs, links)
    dom = None
    for i, line in enumerate(lines, start=1):
        if not line.startswith(TRAILER + " "):
            continue
        toks = line.split()
        try:
            if toks[1] == "node":
                if toks[2] not in NODE_KINDS or toks[2] == "gpu":
                    raise ValueError(toks[2])
                for nid in _parse_ranges(toks[4], node_num):
                    if nid < G:
                        raise ValueError(nid)
                    node_info[nid] = (toks[2], toks[3])
            elif toks[1] == "cable":
                if toks[2] not in LINK_KINDS:
                    raise ValueError(toks[2])
                for c in _parse_ranges(toks[3], link_num):
                    a, b = links[2 * c], links[2 * c + 1]
                    links[2 * c] = Link(a.id, a.src, a.dst, a.bandwidth_Bps, a.latency_s, toks[2], a.error_rate,
                                        a.rate_text, a.delay_text)
                    links[2 * c + 1] = Link(b.id, b.src, b.dst, b.bandwidth_Bps, b.latency_s, toks[2],
                                            b.error_rate, b.rate_text, b.delay_text)
            elif toks[1] == "nvlink_domain_size":
                dom = int(toks[2])
                if not 1 <= dom <= G:
                    raise ValueError(dom)
        except (IndexError, ValueError):
            raise TopoError(f"{name}:{i}: malformed {TRAILER} line") from None
    nodes = tuple(Node(i, k, tr) for i, (k, tr) in enumerate(node_info))
    if dom is None:
        dom = _infer_domain_size(G, links, [n.kind for n in nodes])
    return Topology(G, gps, gpu_type, dom, nodes, tuple(links), name=path.name)
