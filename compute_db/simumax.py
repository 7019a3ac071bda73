"""Importer for SimuMax's measured kernel efficiencies (MooreThreads/SimuMax v1.2, flattened CSV + system JSON).

`<gpu>_kernel_efficiency.csv`: one measured shape per row, `efficiency` = FLOPs / (time × peak), so
time_s = FLOPs / (peak_tflops · 1e12 · efficiency) with SimuMax's FLOP counting:
- matmul: 2·b·m·n·k. Layouts (BLAS/TransformerEngine convention): TN = forward Y = X·Wᵀ with X [m,k], Y [m,n]
  -> our gemm/fwd (m, n, k); NN = input gradient dX[m,n] = dY[m,k]·W -> gemm/dgrad (m, n, k), which is what
  `keys.backward_gemm_shapes` gives for the dgrad of a forward (m, k, n); NT = weight gradient
  dW[m,n] = dYᵀ·X ([N_out, K_in], reduction k = tokens) -> our wgrad computes Xᵀ·dY = [K_in, N_out], the
  transpose, so gemm/wgrad (n, m, k). Rows with b != 1 are skipped (none in v1.2).
- group_matmul: ng GEMMs of (M, N, K) given as the forward GEMM's dims for all three stages: fwd ->
  grouped_gemm/fwd (ng, M, N, K); bwd_grad_act -> dgrad (ng, M, K, N); bwd_grad_w -> wgrad (ng, K, N, M).
- sdp_fwd / sdp_bwd (TransformerEngine flash attention): FLOPs counted NON-causal, per batch
  2·head_num·seq²·(qk_head_dim + v_head_dim) (QKᵀ and PV), backward 2.5× forward. The kernels were causal:
  efficiencies above 1.0 of the non-causal count occur (up to 1.19 on the A100, 1.20 on the B200), which a
  non-causal kernel cannot reach, so the rows are filed as causal flash_attn (batch, s, s, h, kv_h, dqk, dv);
  our causal FLOP count is about half, i.e. our efficiency is about half of theirs.
Inputs are bf16 (SimuMax measured bf16 GEMMs; the `out_dtype` fp32 wgrad variants accumulate into an fp32 main
gradient): the key dtype is bf16. Rows that map to the same key (qkv_contiguous True/False, bf16/fp32 output or
main-grad) are merged: median time. Rows are stored "imported" with source "simumax-v1.2"; a lookup of such a
key answers "measured".

`<gpu>_system_defaults.json`: `memory_bandwidth` holds measured HBM efficiencies of memory-bound kernels
relative to the file's `gbps`; they become figures (store.Figure) re-expressed against our GPU table's HBM
bandwidth: value = efficient_factor · gbps / table GB/s. default -> family "default" (every memory-bound
family without a figure of its own), permute_fwd/bwd -> permute fwd/bwd, ce -> cross_entropy. Not imported:
`ce_fusion` (a fused kernel we do not model), `latency_us` (a fixed 30-40 us per-kernel latency far above the
launch + tail of the measured small kernels, ~4-6 us in the Vidur data), the `accelerator_defaults` (SimuMax's
fallbacks for unmeasured shapes, not measurements; the fp8 entries are 0 = not measured) and the network model.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path

import pandas as pd

from compute_db.errors import ComputeDBError
from compute_db.importers import merge_rows
from compute_db.keys import KernelKey, make_key
from compute_db.store import Figure, KernelRow

SOURCE = "simumax-v1.2"
# file prefix -> GPU table name. The A100 file describes a PCIe server (no NVSwitch; its config lists 80 GB):
# A100-80GB-PCIe. See docs/compute_db.md ("SimuMax data").
SIMUMAX_GPU_NAMES = {"b200": "B200", "a100_pcie": "A100-80GB-PCIe"}
_MEMORY_FIGURES = {"default": ("default", ""), "permute_fwd": ("permute", "fwd"), "permute_bwd": ("permute", "bwd"),
                   "ce": ("cross_entropy", "")}


def _num(rec: dict, col: str, where: str) -> float:
    v = rec.get(col)
    try:
        v = float(v)
    except (TypeError, ValueError):
        raise ComputeDBError(f"{where}: column '{col}' must be a number, got {v!r}") from None
    if not math.isfinite(v):
        raise ComputeDBError(f"{where}: column '{col}' is missing or not finite")
    return v


def _int(rec: dict, col: str, where: str) -> int:
    v = _num(rec, col, where)
    if v <= 0 or v != int(v):
        raise ComputeDBError(f"{where}: column '{col}' must be a positive integer, got {v:g}")
    return int(v)


def row_key_and_flops(rec: dict, where: str) -> tuple[KernelKey, float] | None:
    """(our kernel key, SimuMax FLOPs) of one CSV record; None for a row we do not import (b != 1)."""
    op = rec.get("op")
    if op == "matmul":
        b, m, n, k = (_int(rec, c, where) for c in ("b", "m", "n", "k"))
        if b != 1:
            return None
        layout = rec.get("layout")
        if layout == "TN":
            key = make_key("gemm", "fwd", (m, n, k), "bf16")
        elif layout == "NN":
            key = make_key("gemm", "dgrad", (m, n, k), "bf16")
        elif layout == "NT":
            key = make_key("gemm", "wgrad", (n, m, k), "bf16")
        else:
            raise ComputeDBError(f"{where}: matmul layout must be TN, NN or NT, got {layout!r}")
        return key, 2.0 * b * m * n * k
    if op == "group_matmul":
        g, m, n, k = (_int(rec, c, where) for c in ("ng", "M", "N", "K"))
        stage = rec.get("stage")
        shapes = {"fwd": ("fwd", (g, m, n, k)), "bwd_grad_act": ("dgrad", (g, m, k, n)),
                  "bwd_grad_w": ("wgrad", (g, k, n, m))}
        if stage not in shapes:
            raise ComputeDBError(f"{where}: group_matmul stage must be fwd, bwd_grad_act or bwd_grad_w, got {stage!r}")
        variant, dims = shapes[stage]
        return make_key("grouped_gemm", variant, dims, "bf16"), 2.0 * g * m * n * k
    if op in ("sdp_fwd", "sdp_bwd"):
        b, s, h, kvh, dqk, dv = (_int(rec, c, where) for c in ("batch", "seq_len", "head_num", "kv_head_num",
                                                                 "qk_head_dim", "v_head_dim"))
        flops = 2.0 * b * h * s * s * (dqk + dv)
        variant = "fwd" if op == "sdp_fwd" else "bwd"
        if variant == "bwd":
            flops *= 2.5
        return make_key("flash_attn", variant, (b, s, s, h, kvh, dqk, dv), "bf16", causal=True), flops
    raise ComputeDBError(f"{where}: unknown op {op!r} (expected matmul, group_matmul, sdp_fwd, sdp_bwd)")


def import_simumax_csv(csv_path: str | Path, gpu: str, source: str = SOURCE) -> list[KernelRow]:
    """Kernel rows (seconds) of one SimuMax `<gpu>_kernel_efficiency.csv`; errors name file:line."""
    csv_path = Path(csv_path)
    try:
        df = pd.read_csv(csv_path)
    except (OSError, ValueError) as exc:
        raise ComputeDBError(f"{csv_path}: cannot read SimuMax CSV ({exc})") from None
    missing = [c for c in ("op", "peak_tflops", "efficiency") if c not in df.columns]
    if missing:
        raise ComputeDBError(f"{csv_path}:1: not a SimuMax kernel-efficiency CSV (missing column(s) "
                             f"{', '.join(missing)})")
    times: dict[KernelKey, list[tuple[float, float, float, float]]] = defaultdict(list)
    for i, rec in enumerate(df.to_dict("records"), start=2):
        where = f"{csv_path}:{i}"
        eff = _num(rec, "efficiency", where)
        peak = _num(rec, "peak_tflops", where)
        if eff <= 0 or peak <= 0:
            raise ComputeDBError(f"{where}: efficiency and peak_tflops must be > 0 (got {eff:g}, {peak:g})")
        # a GEMM cannot beat the peak; causal attention counted non-causally does half the counted work,
        # so at most 2x (see the module docstring for the observed 1.2)
        cap = 2.0 if rec.get("op") in ("sdp_fwd", "sdp_bwd") else 1.0
        if eff > cap:
            raise ComputeDBError(f"{where}: efficiency {eff:g} above {cap:g} for op {rec.get('op')!r} "
                                 f"(faster than the GPU's peak)")
        got = row_key_and_flops(rec, where)
        if got is None:
            continue
        key, flops = got
        t = flops / (peak * 1e12 * eff)
        times[key].append((t, t, t, 0.0))
    return [merge_rows(gpu, key, source, sorted(ts)) for key, ts in times.items()]


def import_simumax_figures(json_path: str | Path, gpu: str, table_hbm_Bps: float,
                           source: str = SOURCE) -> list[Figure]:
    """HBM-efficiency figures of one SimuMax `<gpu>_system_defaults.json`, relative to `table_hbm_Bps`."""
    json_path = Path(json_path)
    try:
        data = json.loads(json_path.read_text())
    except (OSError, ValueError) as exc:
        raise ComputeDBError(f"{json_path}: cannot read SimuMax system JSON ({exc})") from None
    mem = data.get("memory_bandwidth") if isinstance(data, dict) else None
    if not isinstance(mem, dict):
        raise ComputeDBError(f"{json_path}: no 'memory_bandwidth' mapping")
    out = []
    for name, (family, variant) in _MEMORY_FIGURES.items():
        entry = mem.get(name)
        if entry is None:
            continue
        where = f"{json_path}: memory_bandwidth.{name}"
        if not isinstance(entry, dict):
            raise ComputeDBError(f"{where}: expected a mapping")
        eff, gbps = _num(entry, "efficient_factor", where), _num(entry, "gbps", where)
        if eff <= 0 or gbps <= 0:
            raise ComputeDBError(f"{where}: efficient_factor and gbps must be > 0")
        value = eff * gbps * 1e9 / table_hbm_Bps
        out.append(Figure(gpu, family, variant, "hbm_efficiency", value, source,
                          f"{name}: {eff:.4g} of {gbps:g} GB/s = {eff * gbps:.0f} GB/s"))
    return out


def import_simumax(directory: str | Path) -> tuple[list[KernelRow], list[Figure]]:
    """All `<gpu>_kernel_efficiency.csv` and `<gpu>_system_defaults.json` of a SimuMax efficiency folder."""
    from compute_db.gpus import get_gpu
    directory = Path(directory)
    if not directory.is_dir():
        raise ComputeDBError(f"{directory}: SimuMax efficiency directory not found")
    rows: list[KernelRow] = []
    figures: list[Figure] = []
    found = False
    for prefix, gpu in SIMUMAX_GPU_NAMES.items():
        csv_path = directory / f"{prefix}_kernel_efficiency.csv"
        json_path = directory / f"{prefix}_system_defaults.json"
        if csv_path.is_file():
            rows.extend(import_simumax_csv(csv_path, gpu))
            found = True
        if json_path.is_file():
            figures.extend(import_simumax_figures(json_path, gpu, get_gpu(gpu).hbm_Bps))
            found = True
    if not found:
        raise ComputeDBError(f"{directory}: no <gpu>_kernel_efficiency.csv / <gpu>_system_defaults.json files "
                             f"(known prefixes: {', '.join(SIMUMAX_GPU_NAMES)})")
    return rows, figures
