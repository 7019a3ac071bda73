"""AIOB-style measurement runner: time every distinct kernel of a workload with torch, write the DB.

Each kernel key is built as real torch tensors of its shape and dtype and timed directly in its own
layout: forward GEMMs X·W, dgrad dY·W^T, wgrad X^T·dY; backward kernels of the other kinds by autograd
(the backward call alone is timed, the forward graph is built once and retained). GPU: CUDA events around
each repeat after warm-up; CPU: wall-clock (time.perf_counter). Outliers beyond Tukey fences (1.5 IQR)
are dropped before the statistics. torch is imported lazily (the `aiob` extra).
"""

from __future__ import annotations

import datetime as _dt
import platform
import shutil
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np

from compute_db.errors import ComputeDBError
from compute_db.keys import ELEMENT_BYTES, KernelKey, key_of, work
from compute_db.store import KernelRow

AIOB_HINT = "install the aiob extra: pip install -e '.[aiob]'"


def require_torch():
    try:
        import torch
    except ImportError:
        raise ComputeDBError(f"measuring kernels needs torch; {AIOB_HINT}") from None
    return torch


@dataclass(frozen=True)
class DeviceInfo:
    gpu: str           # name the rows are filed under
    device: str        # torch device name ("NVIDIA H100 80GB HBM3", CPU model)
    driver: str
    torch: str
    cuda: str


def distinct_keys(ops: Iterable) -> list[KernelKey]:
    """Distinct kernel keys of compute ops (ops with a given time are skipped), in first-seen order."""
    seen: dict[KernelKey, None] = {}
    for op in ops:
        if getattr(op, "is_comm", False) or getattr(op, "time_s", None) is not None:
            continue
        seen.setdefault(key_of(op), None)
    return list(seen)


def workload_ops(workload) -> list:
    out = []
    for stage in workload.stages:
        for chunk in stage.chunks:
            out.extend(chunk.forward)
            out.extend(chunk.backward)
        out.extend(stage.iteration_start)
        out.extend(stage.iteration_end)
    return out


def filter_outliers(samples_s: np.ndarray) -> np.ndarray:
    """Samples inside the Tukey fences [q1 - 1.5 IQR, q3 + 1.5 IQR]."""
    if samples_s.size < 4:
        return samples_s
    q1, q3 = np.percentile(samples_s, [25, 75])
    iqr = q3 - q1
    kept = samples_s[(samples_s >= q1 - 1.5 * iqr) & (samples_s <= q3 + 1.5 * iqr)]
    return kept if kept.size else samples_s


def device_info(torch, device: str, gpu_name: str | None) -> DeviceInfo:
    if device.startswith("cuda"):
        dev_name = torch.cuda.get_device_name(torch.device(device))
        driver = ""
        if shutil.which("nvidia-smi"):
            try:
                driver = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                        capture_output=True, text=True, timeout=20).stdout.strip().splitlines()[0]
            except (OSError, subprocess.SubprocessError, IndexError):
                driver = ""
        gpu = gpu_name or guess_gpu_name(dev_name)
        return DeviceInfo(gpu, dev_name, driver, torch.__version__, torch.version.cuda or "")
    dev_name = platform.processor() or platform.machine() or "cpu"
    return DeviceInfo(gpu_name or "CPU", f"cpu: {dev_name}", "", torch.__version__, "")


def guess_gpu_name(device_name: str) -> str:
    """Table name for a torch device name ('NVIDIA H100 80GB HBM3' -> 'H100'); the raw name if no match."""
    s = device_name.upper().replace("NVIDIA", "").strip()
    rules = [("GB200", "GB200"), ("B200", "B200"), ("H200", "H200"), ("H800", "H800"), ("H20", "H20"),
             ("H100 PCIE", "H100-PCIe"), ("H100", "H100"), ("MI300X", "MI300X")]
    for token, name in rules:
        if token in s:
            return name
    if "A100" in s:
        big = "80GB" in s
        pcie = "PCIE" in s
        return ("A100-80GB" if big else "A100-40GB") + ("-PCIe" if pcie else "")
    return device_name


def _torch_dtype(torch, dtype: str):
    return {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32,
            "fp8": getattr(torch, "float8_e4m3fn", None)}[dtype]


# memory-bound kinds that eager PyTorch runs as several kernels (rotary six, SwiGLU two, cross-entropy
# two) where training and serving stacks (Apex, Transformer Engine, vLLM) run one fused kernel
FUSED_KINDS = frozenset({"rotary", "swiglu", "gelu", "rmsnorm", "layernorm", "softmax", "cross_entropy",
                         "router_topk"})
RUNNER_SOURCE = "aiob-runner"
FUSED_SOURCE = "aiob-runner-fused"


def build_kernel(torch, key: KernelKey, device: str, fused: bool = False) -> Callable[[], object]:
    """A zero-argument callable running the kernel of `key` once (tensors allocated here). fused: kinds of
    FUSED_KINDS go through torch.compile (one generated kernel per direction, as the fused stacks run them;
    compiled on first call)."""
    F = torch.nn.functional
    dt = _torch_dtype(torch, key.dtype)
    if key.dtype == "fp8":
        dt = torch.bfloat16 if device == "cpu" else dt
    act = dt if key.dtype != "fp8" else torch.bfloat16
    d = dict(zip(key.fields, key.dims))
    g = torch.Generator(device="cpu").manual_seed(0)

    def rnd(*shape, dtype=act, grad=False):
        t = torch.randn(*shape, generator=g, dtype=torch.float32).to(device=device, dtype=dtype)
        return t.requires_grad_(grad)

    def autograd_bwd(fwd: Callable[[], object], inputs: list):
        out = fwd()
        grad = torch.ones_like(out) if out.dim() == 0 else torch.randn_like(out)
        return lambda: torch.autograd.grad(out, inputs, grad, retain_graph=True)

    def run(fwd: Callable[[], object], inputs: list):
        """fwd, or its backward with respect to inputs; compiled first when fusing (see FUSED_KINDS)."""
        if fused and k in FUSED_KINDS:
            # every key of a kind runs the same code object: without a reset, dynamo would count each new
            # shape as a recompilation and fail at its limit (8)
            torch._dynamo.reset()
            fwd = torch.compile(fwd, dynamic=False, fullgraph=True)
        return autograd_bwd(fwd, inputs) if bwd else fwd

    bwd = key.variant == "bwd"
    k = key.kind
    if k in ("gemm", "grouped_gemm", "attn_bmm"):
        count = 1 if k == "gemm" else key.dims[0]
        m, n, kk = key.dims[-3:]
        if key.dtype == "fp8" and device != "cpu" and hasattr(torch, "_scaled_mm") and count == 1:
            a = rnd(m, kk, dtype=torch.bfloat16).to(dt)
            b = rnd(n, kk, dtype=torch.bfloat16).to(dt).t()   # column-major second operand
            one = torch.ones((), device=device)
            return lambda: torch._scaled_mm(a, b, scale_a=one, scale_b=one, out_dtype=torch.bfloat16)
        mdt = act
        if key.variant == "dgrad":      # dX[m, k'] = dY[m, k] · W^T, W stored [n, k]
            a, w = rnd(count, m, kk, dtype=mdt), rnd(count, n, kk, dtype=mdt)
            fn = lambda: torch.matmul(a, w.transpose(-1, -2))  # noqa: E731
        elif key.variant == "wgrad":    # dW = X^T · dY, X stored [k, m]
            x, dy = rnd(count, kk, m, dtype=mdt), rnd(count, kk, n, dtype=mdt)
            fn = lambda: torch.matmul(x.transpose(-1, -2), dy)  # noqa: E731
        else:
            a, w = rnd(count, m, kk, dtype=mdt), rnd(count, kk, n, dtype=mdt)
            fn = lambda: torch.matmul(a, w)  # noqa: E731
        return fn
    if k in ("flash_attn", "attn_decode"):
        if k == "flash_attn":
            b, sq, skv, h, kvh, dqk, dv = key.dims
        else:   # one query token per request over its cached K/V (kv_tokens spread evenly over the batch)
            b, kv, h, kvh, dqk, dv = key.dims
            sq, skv = 1, max(1, -(-kv // b))
        q = rnd(b, h, sq, dqk, grad=bwd)
        kt = rnd(b, kvh, skv, dqk, grad=bwd)
        v = rnd(b, kvh, skv, dv, grad=bwd)
        causal = key.causal and k == "flash_attn"    # a decode query attends to every cached token
        # grouped-query K/V are read as they are (enable_gqa): no expanded copy inside the timed call
        fwd = lambda: F.scaled_dot_product_attention(q, kt, v, is_causal=causal, enable_gqa=h != kvh)  # noqa: E731
        return run(fwd, [q, kt, v])
    if k in ("layernorm", "rmsnorm"):
        x = rnd(d["tokens"], d["hidden"], grad=bwd)
        w = rnd(d["hidden"], grad=bwd)
        if k == "layernorm":
            bias = rnd(d["hidden"], grad=bwd)
            fwd = lambda: F.layer_norm(x, (d["hidden"],), w, bias)  # noqa: E731
            params = [x, w, bias]
        else:
            fwd = lambda: F.rms_norm(x, (d["hidden"],), w)  # noqa: E731
            params = [x, w]
        return run(fwd, params)
    if k in ("gelu", "swiglu"):
        if k == "gelu":
            x = rnd(d["tokens"], d["width"], grad=bwd)
            fwd = lambda: F.gelu(x, approximate="tanh")  # noqa: E731
        else:
            x = rnd(d["tokens"], 2 * d["width"], grad=bwd)

            def fwd():
                a, b2 = x.chunk(2, dim=-1)
                return F.silu(a) * b2
        return run(fwd, [x])
    if k == "rotary":
        x = rnd(d["tokens"], d["heads"], d["head_dim"], grad=bwd)
        cos = rnd(d["tokens"], 1, d["head_dim"])
        sin = rnd(d["tokens"], 1, d["head_dim"])

        def fwd():
            x1, x2 = x.chunk(2, dim=-1)
            return x * cos + torch.cat((-x2, x1), dim=-1) * sin
        return run(fwd, [x])
    if k in ("dropout", "elementwise"):
        a = rnd(d["numel"], grad=bwd and k == "dropout")
        b2 = rnd(d["numel"])
        if k == "dropout":
            fwd = lambda: F.dropout(a, 0.1, training=True)  # noqa: E731
            return run(fwd, [a])
        # no autograd for bwd: an add's backward launches no kernel (dy passes through), so autograd would
        # time only the engine's host overhead. The bwd key's work (keys.work: two inputs, one output,
        # e.g. a gradient accumulation) is the same kernel as fwd's.
        return lambda: a + b2
    if k == "memcpy":
        src = torch.empty(d["bytes"], dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    if k == "softmax":
        x = rnd(d["rows"], d["cols"], grad=bwd)
        fwd = lambda: torch.softmax(x, dim=-1)  # noqa: E731
        return run(fwd, [x])
    if k == "embedding":
        table = rnd(d["vocab"], d["hidden"], grad=bwd)
        idx = torch.randint(0, d["vocab"], (d["tokens"],), generator=g).to(device)
        fwd = lambda: F.embedding(idx, table)  # noqa: E731
        return run(fwd, [table])
    if k == "cross_entropy":
        logits = rnd(d["tokens"], d["vocab"], dtype=torch.float32, grad=bwd)
        target = torch.randint(0, d["vocab"], (d["tokens"],), generator=g).to(device)
        fwd = lambda: F.cross_entropy(logits, target)  # noqa: E731
        return run(fwd, [logits])
    if k == "router_topk":
        logits = rnd(d["tokens"], d["experts"], dtype=torch.float32, grad=bwd)

        def fwd():
            probs = torch.softmax(logits, dim=-1)
            return torch.topk(probs, d["topk"], dim=-1).values
        return run(fwd, [logits])
    if k in ("permute", "unpermute"):
        t, hdim, topk = d["tokens"], d["hidden"], d["topk"]
        order = torch.randperm(t * topk, generator=g).to(device)
        if k == "permute":
            x = rnd(t, hdim, grad=bwd)
            src_rows = order // topk
            fwd = lambda: x.index_select(0, src_rows)  # noqa: E731
            return run(fwd, [x])
        y = rnd(t * topk, hdim, grad=bwd)
        dst_rows = order // topk

        def fwd():
            return torch.zeros(t, hdim, dtype=y.dtype, device=device).index_add(0, dst_rows, y)
        return run(fwd, [y])
    if k == "optimizer":
        p = d["params"]
        param, grad_ = rnd(p, dtype=torch.float32), rnd(p, dtype=torch.float32)
        m1, m2 = torch.zeros_like(param), torch.zeros_like(param)
        copy = torch.empty(p, dtype=torch.bfloat16, device=device)

        def step():  # Adam with bias-corrected step size folded into lr; bf16 parameter copy
            m1.mul_(0.9).add_(grad_, alpha=0.1)
            m2.mul_(0.95).addcmul_(grad_, grad_, value=0.05)
            param.addcdiv_(m1, m2.sqrt().add_(1e-8), value=-1e-4)
            copy.copy_(param)
        return step
    raise ComputeDBError(f"the measurement runner has no torch kernel for kind '{k}'")


def _footprint_bytes(key: KernelKey) -> float:
    _, byts = work(key)
    extra = 3.0 if key.variant == "bwd" else 1.5   # autograd keeps inputs, outputs, gradients
    if key.kind == "flash_attn":
        b, sq, skv, h, _, _, _ = key.dims
        extra += 4.0 * b * h * sq * skv / max(byts, 1)  # a non-fused SDPA backend materialises scores
    if key.kind == "optimizer":
        return 18.0 * key.dims[0]
    return byts * extra + ELEMENT_BYTES[key.dtype]


def time_kernel(torch, fn: Callable[[], object], device: str, warmup: int, repeats: int) -> np.ndarray:
    """Per-call durations in seconds (after warm-up)."""
    cuda = device.startswith("cuda")
    for _ in range(warmup):
        fn()
    if cuda:
        return _time_cuda(torch, fn, repeats)
    out = np.empty(repeats)
    for i in range(repeats):
        t0 = time.perf_counter()
        fn()
        out[i] = time.perf_counter() - t0
    return out


CUDA_CHUNK = 8            # timed calls queued behind one busy-wait kernel
_MAX_HOLD_S = 0.05        # longest busy-wait (s)


def _time_cuda(torch, fn: Callable[[], object], repeats: int) -> np.ndarray:
    """Per-call GPU times of fn's kernels alone (CUDA events), host launch time excluded.

    Recorded call by call, an event pair also times the GPU's wait for the host to launch the kernel: on
    an H100 a 64x4096x2048 fp16 GEMM read 38 us that way against 10 us in Vidur's profile (and 30-50 us for
    every small GEMM), while the simulator charges host launch time separately (sim.overheads). So a
    busy-wait kernel (torch.cuda._sleep) holds the GPU while the host queues the events and calls of up to
    CUDA_CHUNK repeats; the GPU then runs them back to back. Without torch.cuda._sleep: call by call."""
    cu = torch.cuda
    cu.synchronize()
    sleep = getattr(cu, "_sleep", None)
    cycles_per_s = 0.0
    if sleep is not None:
        t0 = time.perf_counter()
        fn()
        fn()
        host_s = (time.perf_counter() - t0) / 2     # host time to queue one call
        sleep(1_000)            # loads the busy-wait kernel (lazily loaded modules): not in the rate below
        cu.synchronize()
        start, end = cu.Event(enable_timing=True), cu.Event(enable_timing=True)
        start.record()
        sleep(1_000_000)
        end.record()
        cu.synchronize()
        cycles_per_s = 1_000_000 / max(start.elapsed_time(end) * 1e-3, 1e-9)
    out: list[float] = []
    while len(out) < repeats:
        n = min(CUDA_CHUNK, repeats - len(out))
        events = [(cu.Event(enable_timing=True), cu.Event(enable_timing=True)) for _ in range(n)]
        if sleep is not None:
            sleep(int(cycles_per_s * min(_MAX_HOLD_S, 2.0 * n * host_s + 1e-3)))
        for start, end in events:
            start.record()
            fn()
            end.record()
        cu.synchronize()
        out.extend(s.elapsed_time(e) * 1e-3 for s, e in events)
    return np.array(out)


def measure_keys(keys: Iterable[KernelKey], *, device: str = "auto", warmup: int = 3, repeats: int = 10,
                 gpu_name: str | None = None, max_bytes: float | None = None,
                 progress: Callable[[KernelKey], None] | None = None,
                 fused: bool = False) -> tuple[list[KernelRow], list[str]]:
    """Measure kernels; returns (rows, skipped 'key: reason' lines). Needs torch (the aiob extra).
    fused: FUSED_KINDS compiled with torch.compile (GPU only); their rows are filed under FUSED_SOURCE."""
    if warmup < 0 or repeats < 1:
        raise ComputeDBError("--warmup must be >= 0 and --repeats >= 1")
    torch = require_torch()
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ComputeDBError("--device cuda: no CUDA device visible to torch")
    if device != "cpu" and not device.startswith("cuda"):
        raise ComputeDBError(f"--device must be auto, cpu or cuda[:N], got '{device}'")
    if fused and not device.startswith("cuda"):
        raise ComputeDBError("--fused needs a CUDA device (torch.compile generates the fused kernels with Triton)")
    if gpu_name:
        from compute_db.gpus import canonical_name
        try:
            gpu_name = canonical_name(gpu_name)   # file rows under the table name when the GPU is known
        except ComputeDBError:
            pass
    info = device_info(torch, device, gpu_name)
    if max_bytes is None:
        if device.startswith("cuda"):
            max_bytes = 0.7 * torch.cuda.get_device_properties(torch.device(device)).total_memory
        else:
            max_bytes = 2e9
    date = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    rows, skipped = [], []
    for key in keys:
        if progress is not None:
            progress(key)
        if _footprint_bytes(key) > max_bytes:
            skipped.append(f"{key.text()}: needs ~{_footprint_bytes(key) / 1e9:.1f} GB > {max_bytes / 1e9:.1f} GB limit")
            continue
        if key.dtype == "fp8" and (device == "cpu" or key.kind not in ("gemm",)):
            skipped.append(f"{key.text()}: fp8 is measured only for GEMMs on a GPU (torch._scaled_mm)")
            continue
        try:
            fn = build_kernel(torch, key, device, fused)
            if fused and key.kind in FUSED_KINDS:
                fn()         # compiles: never inside a timed call, whatever --warmup says
            samples = time_kernel(torch, fn, device, warmup, repeats)
        except Exception as exc:    # noqa: BLE001 - torch's and torch.compile's failures have no common base
            if not isinstance(exc, (RuntimeError, TypeError, ValueError, NotImplementedError)) and not fused:
                raise
            skipped.append(f"{key.text()}: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            if device.startswith("cuda"):
                torch.cuda.empty_cache()
            continue
        finally:
            fn = None
        kept = filter_outliers(samples)
        if not np.all(np.isfinite(kept)) or kept.min() <= 0:
            kept = np.maximum(kept, 1e-9)
        rows.append(KernelRow(
            gpu=info.gpu, key=key, mean_s=float(kept.mean()), median_s=float(np.median(kept)),
            min_s=float(kept.min()), std_s=float(kept.std()) if kept.size > 1 else 0.0,
            samples=int(kept.size), provenance="measured",
            source=FUSED_SOURCE if fused and key.kind in FUSED_KINDS else RUNNER_SOURCE, device=info.device,
            driver=info.driver, torch=info.torch, cuda=info.cuda, date=date))
    return rows, skipped
