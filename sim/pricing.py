"""GPU prices: an editable table of US dollars per GPU-hour, with the source and date of every row.

The shipped table is sim/data/gpu_prices.yaml; a user's file (same layout, `--price-file`) replaces it
whole, so the prices a result used are exactly those of one named file. Lookups go through compute_db's
GPU names when the GPU is known there (`H100-SXM` finds the `H100` row), else through the table's own
names and aliases, case-insensitively. A GPU without a row is a one-line SimError, never a price of 0.

    from sim.pricing import load_price_table, price_per_gpu_hour
    price_per_gpu_hour("H100")                      # 4.25 (shipped table)
    load_price_table("my_prices.yaml").row("B200")  # GPUPrice(gpu, usd_per_gpu_hour, source, date, aliases)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from sim.errors import SimError

SHIPPED_PRICES = Path(__file__).resolve().parent / "data" / "gpu_prices.yaml"


def find_gpu_row(rows, name: str, extra_gpus=None):
    """The row (with `.gpu` and `.aliases`) named `name` directly or through compute_db's GPU names
    (`H100-SXM` finds an `H100` row), case-insensitively; None if there is none. Shared by every per-GPU
    table (prices, power)."""
    names = [name]
    try:
        from compute_db.gpus import canonical_name
        names.append(canonical_name(name, extra_gpus))
    except Exception:  # noqa: BLE001 - a GPU compute_db does not know can still have a row
        pass
    index = {}
    for r in rows:
        for n in (r.gpu, *r.aliases):
            index.setdefault(n.lower(), r)
    return next((index[n.lower()] for n in names if n.lower() in index), None)


@dataclass(frozen=True)
class GPUPrice:
    gpu: str
    usd_per_gpu_hour: float
    source: str
    date: str
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class PriceTable:
    rows: tuple[GPUPrice, ...]
    path: str
    currency: str = "USD"

    def row(self, gpu: str, extra_gpus=None) -> GPUPrice:
        """The row of `gpu` (compute_db name or alias, or a name/alias of the table); SimError if none."""
        found = find_gpu_row(self.rows, gpu, extra_gpus)
        if found is not None:
            return found
        known = ", ".join(r.gpu for r in self.rows)
        raise SimError(f"{self.path}: no price for GPU '{gpu}' (rows: {known}); add a row with usd_per_gpu_hour, "
                       "source and date and pass the file with --price-file")

    def price(self, gpu: str, extra_gpus=None) -> float:
        return self.row(gpu, extra_gpus).usd_per_gpu_hour


def load_price_table(path: str | Path | None = None) -> PriceTable:
    """Read a price table (None: the shipped one); SimError naming the file and row on a bad entry."""
    import yaml
    p = Path(path) if path is not None else SHIPPED_PRICES
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise SimError(f"{p}: cannot read the price table ({exc.strerror})") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"{p}:{mark.line + 1}" if mark is not None else str(p)
        raise SimError(f"{where}: not valid YAML ({getattr(exc, 'problem', None) or exc})") from None
    if not isinstance(data, dict) or not isinstance(data.get("prices"), dict) or not data["prices"]:
        raise SimError(f"{p}: expected a mapping with 'prices: {{GPU: {{usd_per_gpu_hour, source, date}}}}'")
    rows = []
    for name, entry in data["prices"].items():
        where = f"{p}: prices.{name}"
        if not isinstance(entry, dict):
            raise SimError(f"{where}: expected usd_per_gpu_hour, source and date")
        v = entry.get("usd_per_gpu_hour")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
            raise SimError(f"{where}.usd_per_gpu_hour: must be a number > 0 (got {v!r})")
        for key in ("source", "date"):
            if not str(entry.get(key) or "").strip():
                raise SimError(f"{where}.{key}: missing (every price says where and when it was quoted)")
        aliases = entry.get("aliases") or []
        if not isinstance(aliases, list):
            raise SimError(f"{where}.aliases: expected a list of names")
        rows.append(GPUPrice(str(name), float(v), str(entry["source"]).strip(), str(entry["date"]).strip(),
                             tuple(str(a) for a in aliases)))
    return PriceTable(tuple(rows), str(p), str(data.get("currency") or "USD"))


def price_per_gpu_hour(gpu: str, table: PriceTable | str | Path | None = None) -> float:
    """US dollars per hour of one `gpu` from `table` (a PriceTable, a file, or None: the shipped table)."""
    if not isinstance(table, PriceTable):
        table = load_price_table(table)
    return table.price(gpu)
