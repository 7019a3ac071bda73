"""ns-3 attribute strings <-> SI values (rates in bytes/s, times in seconds).

SimAI topology files carry rates like `400Gbps` (bits per second, decimal prefixes) and delays like
`0.0005ms`. Parsing goes through Decimal so that `0.000025ms` becomes exactly the float 25e-9 and
formatting reproduces the same text.
"""

from __future__ import annotations

import math
import re
from decimal import Decimal

from topo.errors import TopoError

_RATE_RE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)([kKMGT]i?)?(bps|b/s|Bps|B/s)$")
_PREFIX = {None: 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12,
           "ki": 2**10, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
_TIME_RE = re.compile(r"^([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)(s|ms|us|ns|ps|min|h)?$")
_TIME_UNIT = {None: Decimal(1), "s": Decimal(1), "ms": Decimal("1e-3"), "us": Decimal("1e-6"),
              "ns": Decimal("1e-9"), "ps": Decimal("1e-12"), "min": Decimal(60), "h": Decimal(3600)}


def parse_rate(text: str, what: str = "rate") -> float:
    """ns-3 DataRate string (`400Gbps`, `25GBps`, `100Mb/s`) -> bytes per second."""
    m = _RATE_RE.match(str(text).strip())
    if not m:
        raise TopoError(f"{what}: bad rate '{text}' (expected an ns-3 rate such as 400Gbps)")
    try:
        value = Decimal(m.group(1)) * _PREFIX[m.group(2)]
        if m.group(3) in ("bps", "b/s"):
            value = value / 8
    except ArithmeticError:   # decimal.Overflow on exponents beyond Decimal's range
        raise TopoError(f"{what}: rate '{text}' is out of range") from None
    return float(value)


def parse_time(text: str, what: str = "delay") -> float:
    """ns-3 Time string (`0.0005ms`, `500ns`, `1e-6s`, bare number = seconds) -> seconds."""
    m = _TIME_RE.match(str(text).strip())
    if not m:
        raise TopoError(f"{what}: bad time '{text}' (expected an ns-3 time such as 0.0005ms)")
    try:
        return float(Decimal(m.group(1)) * _TIME_UNIT[m.group(2)])
    except ArithmeticError:   # decimal.Overflow on exponents beyond Decimal's range
        raise TopoError(f"{what}: time '{text}' is out of range") from None


def _plain(d: Decimal) -> str:
    d = d.normalize()
    text = format(d, "f")
    return text


def format_rate(bandwidth_Bps: float) -> str:
    """bytes/s -> the shortest exact ns-3 bits-per-second string (`400Gbps`, `2880Gbps`, `1.5Gbps`)."""
    bits = Decimal(repr(float(bandwidth_Bps))) * 8
    for unit, scale in (("Tbps", 10**12), ("Gbps", 10**9), ("Mbps", 10**6), ("Kbps", 10**3)):
        if bits >= scale and bits % scale == 0 and unit != "Tbps":
            return f"{_plain(bits / scale)}{unit}"
    if bits >= 10**9:
        return f"{_plain(bits / 10**9)}Gbps"
    return f"{_plain(bits)}bps"


def format_time(latency_s: float) -> str:
    """seconds -> SimAI's millisecond form (`0.0005ms` for 500 ns)."""
    return f"{_plain(Decimal(repr(float(latency_s))) * 1000)}ms"


def format_number(x: float) -> str:
    """Error rates and similar plain numbers: `0`, `0.001`."""
    if float(x) == int(x):
        return str(int(x))
    return _plain(Decimal(repr(float(x))))


def rate_of(value: float | str, what: str) -> tuple[float, str]:
    """Accept bytes/s or an ns-3 string; return (bytes/s, text to write)."""
    if isinstance(value, str):
        v = parse_rate(value, what)
        if not v > 0:
            raise TopoError(f"{what}: bandwidth must be > 0, got {value.strip()!r}")
        if v == math.inf:
            raise TopoError(f"{what}: bandwidth must be finite, got {value.strip()!r}")
        return v, value.strip()
    if not value > 0:
        raise TopoError(f"{what}: bandwidth must be > 0, got {value}")
    if not value < math.inf:
        raise TopoError(f"{what}: bandwidth must be finite, got {value}")
    return float(value), format_rate(value)


def time_of(value: float | str, what: str) -> tuple[float, str]:
    """Accept seconds or an ns-3 string; return (seconds, text to write)."""
    if isinstance(value, str):
        v = parse_time(value, what)
        if not v < math.inf:
            raise TopoError(f"{what}: latency must be finite, got {value.strip()!r}")
        return v, value.strip()
    if value < 0:
        raise TopoError(f"{what}: latency must be >= 0, got {value}")
    if not value < math.inf:   # NaN too
        raise TopoError(f"{what}: latency must be finite, got {value}")
    return float(value), format_time(value)
