"""GPU prices: an editable table of US dollars per GPU-hour, with the source and date of every row.

The shipped table is sim/data/gpu_prices.yaml; a user's file (same layout, `--price-file`) replaces it
whole, so the prices a result used are exactly those of one named file. Lookups go through compute_db's
GPU names and aliases when the GPU is known there (`H100-SXM` finds the `H100` row; a --gpu-file's GPU
finds the row of one of its aliases), else through the table's own names and aliases, case-insensitively.
A GPU without a row is a one-line SimError, never a price of 0.

    from sim.pricing import load_price_table, price_per_gpu_hour
    price_per_gpu_hour("H100")                      # 4.25 (shipped table)
    load_price_table("my_prices.yaml").row("B200")  # GPUPrice(gpu, usd_per_gpu_hour, source, date, aliases)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sim.errors import SimError
from sim.tables import aliases, find_gpu_row, number, read_yaml, text_field

SHIPPED_PRICES = Path(__file__).resolve().parent / "data" / "gpu_prices.yaml"


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
    p = Path(path) if path is not None else SHIPPED_PRICES
    data = read_yaml(p, "price table")
    if not isinstance(data, dict) or not isinstance(data.get("prices"), dict) or not data["prices"]:
        raise SimError(f"{p}: expected a mapping with 'prices: {{GPU: {{usd_per_gpu_hour, source, date}}}}'")
    rows = []
    for name, entry in data["prices"].items():
        where = f"{p}: prices.{name}"
        if not isinstance(entry, dict):
            raise SimError(f"{where}: expected usd_per_gpu_hour, source and date")
        why = "every price says where and when it was quoted"
        rows.append(GPUPrice(str(name), number(entry.get("usd_per_gpu_hour"), f"{where}.usd_per_gpu_hour"),
                             text_field(entry, "source", where, why), text_field(entry, "date", where, why),
                             aliases(entry, where)))
    return PriceTable(tuple(rows), str(p), str(data.get("currency") or "USD"))


def price_per_gpu_hour(gpu: str, table: PriceTable | str | Path | None = None, extra_gpus=None) -> float:
    """US dollars per hour of one `gpu` from `table` (a PriceTable, a file, or None: the shipped table);
    `extra_gpus`: a --gpu-file's GPUs (compute_db.gpus.load_gpu_file), whose aliases find rows too."""
    if not isinstance(table, PriceTable):
        table = load_price_table(table)
    return table.price(gpu, extra_gpus)
