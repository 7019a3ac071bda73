"""AICB's AIOB compute-timing file (reference/simai_formats.md §6): read it, and name the kernels it times.

```
train_iter:10
Emb:
    time_gpu_max: 857
    time_gpu_min: 782
    time_gpu_avg: 799
```
Per kernel key three values in microseconds; clustersim uses `time_gpu_avg`. AIOB times forward kernels
only and does not record the GPU. `AIOB_KERNELS` maps each key to the names of clustersim's forward
ComputeOps it times (one call per layer); keys with no counterpart are reported, not guessed.
"""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, field

from workload_gen.errors import ConfigFileError

# AIOB key -> clustersim forward kernel names (workload_gen.layers) it times
AIOB_KERNELS: dict[str, tuple[str, ...]] = {
    "Emb": ("embedding",),
    "layernorm": ("input_norm",),
    "atten_qkv": ("attn_qkv",),
    "atten_flash": ("attn_core",),
    "atten_core_qk": ("attn_scores",),
    "atten_core_softmax": ("attn_softmax",),
    "atten_core_contex": ("attn_context",),
    "atten_linear": ("attn_proj",),
    "layernorm2": ("pre_mlp_norm",),
    "mlp_linear_1": ("mlp_fc1",),
    "mlp_gelu": ("mlp_act",),
    "mlp_linear_2": ("mlp_fc2",),
    "layernorm_post": ("final_norm",),
    "logit_time": ("lm_head",),
    # DeepSeek MLA
    "attention_linear_q_lora": ("attn_q_down",),
    "attention_q_column": ("attn_q_up", "attn_q"),
    "attention_linear_kv_lora": ("attn_kv_down",),
    "attention_kv_column": ("attn_kv_up",),
    "attention_o_row": ("attn_proj",),
}
_STATS = ("time_gpu_max", "time_gpu_min", "time_gpu_avg")
_KEY_RE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*)\s*:\s*")
_STAT_RE = re.compile(r"(time_gpu_max|time_gpu_min|time_gpu_avg)\s*:\s*(\S+)\s*")


@dataclass(frozen=True)
class AiobTimes:
    """Forward kernel times of an AIOB file: key -> seconds (time_gpu_avg), and where each key was read."""
    path: str
    train_iter: int | None
    times_s: dict[str, float] = field(default_factory=dict)
    line_of: dict[str, int] = field(default_factory=dict)

    def kernel_times(self) -> dict[str, float]:
        """clustersim forward kernel name -> seconds, for the keys that map (see AIOB_KERNELS)."""
        out: dict[str, float] = {}
        for key, t in self.times_s.items():
            for name in AIOB_KERNELS.get(key, ()):
                out.setdefault(name, t)
        return out

    def unmapped(self) -> list[str]:
        """Keys clustersim has no kernel for (e.g. param_time, MoE grouped-GEMM keys)."""
        return [k for k in self.times_s if k not in AIOB_KERNELS]


def read_aiob_file(path: str | os.PathLike) -> AiobTimes:
    """Parse an AIOB compute file; errors name file:line. A missing file is an error (never a default)."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise ConfigFileError(f"{path}: AIOB compute file not found")
    try:
        with open(path, encoding="utf-8") as fh:
            raw = fh.read().splitlines()
    except UnicodeDecodeError:
        raise ConfigFileError(f"{path}: not a text file (not UTF-8)") from None
    except OSError as exc:
        raise ConfigFileError(f"{path}: cannot read ({exc.strerror})") from None
    train_iter = None
    times: dict[str, float] = {}
    lines: dict[str, int] = {}
    stats: dict[str, float] = {}
    key = None
    key_line = 0

    def close(ln: int) -> None:
        if key is None:
            return
        if "time_gpu_avg" not in stats:
            raise ConfigFileError(f"{path}:{key_line}: kernel {key!r} has no time_gpu_avg")
        times[key] = stats["time_gpu_avg"] * 1e-6
        lines[key] = key_line

    for i, text in enumerate(raw, start=1):
        s = text.strip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("train_iter:"):
            v = s.split(":", 1)[1].strip()
            if not v.isdigit():
                raise ConfigFileError(f"{path}:{i}: train_iter must be a whole number (got {v[:40]!r})")
            train_iter = int(v)
            continue
        m = _STAT_RE.fullmatch(s)
        if m:
            if key is None:
                raise ConfigFileError(f"{path}:{i}: {m.group(1)} before any kernel key")
            try:
                us = float(m.group(2))
            except ValueError:
                us = math.nan
            if not (math.isfinite(us) and 0 <= us <= 1e9):
                raise ConfigFileError(f"{path}:{i}: {m.group(1)} must be a time in us between 0 and 1e9 "
                                      f"(got {m.group(2)[:40]!r})")
            stats[m.group(1)] = us
            continue
        m = _KEY_RE.fullmatch(s)
        if m and text[:1] not in (" ", "\t"):
            close(i)
            key, key_line, stats = m.group(1), i, {}
            if key in times:
                raise ConfigFileError(f"{path}:{i}: kernel {key!r} appears twice")
            continue
        raise ConfigFileError(f"{path}:{i}: expected 'train_iter:N', 'KEY:' or an indented "
                              f"'time_gpu_avg: us' line, got {s[:60]!r}")
    close(len(raw))
    if not times:
        raise ConfigFileError(f"{path}:1: no kernel times (expected 'KEY:' blocks with time_gpu_avg)")
    return AiobTimes(path=path, train_iter=train_iter, times_s=times, line_of=lines)
