"""AIOB measurement runner on CPU with tiny shapes; the torch-missing message."""

from __future__ import annotations

import sys

import numpy as np
import pytest

from compute_db import measure, open_db, store
from compute_db.errors import ComputeDBError
from compute_db.keys import make_key
from workload_gen.workload import COMPUTE_KINDS, ChunkProgram, ComputeOp, StageProgram, Workload

TINY = {"m": 16, "n": 8, "k": 32, "groups": 2, "batch": 2, "seq_q": 16, "seq_kv": 16, "heads": 4, "kv_heads": 2,
        "head_dim_qk": 8, "head_dim_v": 8, "rows": 8, "cols": 16, "tokens": 16, "hidden": 32, "width": 16,
        "head_dim": 8, "numel": 256, "vocab": 64, "experts": 8, "topk": 2, "params": 1000, "bytes": 4096,
        "kv_tokens": 64}


def _all_tiny_keys():
    keys = []
    for kind, fields in COMPUTE_KINDS.items():
        variants = {"gemm": ["fwd", "dgrad", "wgrad"], "grouped_gemm": ["fwd", "dgrad", "wgrad"],
                    "optimizer": ["step"], "memcpy": ["fwd"], "attn_decode": ["fwd"]}.get(kind, ["fwd", "bwd"])
        for v in variants:
            keys.append(make_key(kind, v, {f: TINY[f] for f in fields}, "fp32" if kind == "optimizer" else "bf16",
                                 causal=kind == "flash_attn"))
    return keys


def test_outlier_filter():
    s = np.array([1.0, 1.1, 0.9, 1.0, 1.05, 50.0])
    assert 50.0 not in measure.filter_outliers(s) and len(measure.filter_outliers(s)) == 5


def test_without_torch_says_install_aiob(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "torch", None)   # makes `import torch` raise ImportError
    with pytest.raises(ComputeDBError, match=r"install the aiob extra: pip install -e '\.\[aiob\]'"):
        measure.measure_keys([make_key("gemm", "fwd", {"m": 4, "n": 4, "k": 4}, "bf16")], device="cpu")
    from sim.cli import main
    # a zoo model and plan that exist: the only thing missing is torch
    assert main(["measure", "--model", "llama3-8b", "--db", "x.sqlite"]) == 2
    err = capsys.readouterr().err
    assert err == "clustersim: error: measuring kernels needs torch; install the aiob extra: pip install -e '.[aiob]'\n"


def test_guess_gpu_name():
    assert measure.guess_gpu_name("NVIDIA H100 80GB HBM3") == "H100"
    assert measure.guess_gpu_name("NVIDIA A100-SXM4-80GB") == "A100-80GB"
    assert measure.guess_gpu_name("NVIDIA H200") == "H200"


@pytest.mark.slow
def test_measure_every_kind_on_cpu(tmp_path):
    pytest.importorskip("torch")
    keys = _all_tiny_keys()
    rows, skipped = measure.measure_keys(keys, device="cpu", warmup=1, repeats=4, gpu_name="CPU-test")
    assert skipped == [] and len(rows) == len(keys)
    for r in rows:
        assert r.provenance == "measured" and r.gpu == "CPU-test" and r.torch and r.date.endswith("Z")
        assert 0 < r.min_s <= r.median_s and 1 <= r.samples <= 4
    db = tmp_path / "m.sqlite"
    store.write_rows(db, rows)
    assert len(store.read_rows(db, "CPU-test")) == len(keys)


@pytest.mark.parametrize("kind", ["flash_attn", "attn_decode"])
def test_grouped_query_attention_kernels_compute_attention_over_the_shared_kv_heads(kind):
    torch = pytest.importorskip("torch")
    b, h, kvh, d = 2, 4, 2, 8
    if kind == "flash_attn":
        dims, sq, skv = {"batch": b, "seq_q": 16, "seq_kv": 16, "heads": h, "kv_heads": kvh, "head_dim_qk": d,
                         "head_dim_v": d}, 16, 16
    else:      # 64 cached tokens over 2 requests: 32 each, one query token per request
        dims, sq, skv = {"batch": b, "kv_tokens": 64, "heads": h, "kv_heads": kvh, "head_dim_qk": d,
                         "head_dim_v": d}, 1, 32
    key = make_key(kind, "fwd", dims, "fp32", causal=kind == "flash_attn")
    out = measure.build_kernel(torch, key, "cpu")()
    # the same tensors as build_kernel draws (seed 0, q, k, v in order); reference: K/V heads expanded by hand,
    # query head i reading K/V head i // (h / kvh), plain softmax attention
    g = torch.Generator(device="cpu").manual_seed(0)
    q, k, v = (torch.randn(*shape, generator=g) for shape in ((b, h, sq, d), (b, kvh, skv, d), (b, kvh, skv, d)))
    k, v = k.repeat_interleave(h // kvh, dim=1), v.repeat_interleave(h // kvh, dim=1)
    scores = q @ k.transpose(-1, -2) / d ** 0.5
    if kind == "flash_attn":
        scores = scores.masked_fill(torch.ones(sq, skv, dtype=torch.bool).triu(1), float("-inf"))
    ref = torch.softmax(scores, dim=-1) @ v
    assert out.shape == (b, h, sq, d)
    assert torch.allclose(out, ref, atol=1e-5)


def test_measure_cli_on_tiny_workload(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from sim.cli import main

    def op(name, kind, dims, variant="fwd"):
        return ComputeOp(name, kind, tuple(dims.items()), "bf16", 0.0, 0.0, variant)
    gemm = {"m": 16, "n": 8, "k": 32}
    fwd = [op("fc", "gemm", gemm), op("norm", "rmsnorm", {"tokens": 16, "hidden": 32})]
    bwd = [op("fc_dgrad", "gemm", {"m": 16, "n": 32, "k": 8}, "dgrad"),
           op("norm_bwd", "rmsnorm", {"tokens": 16, "hidden": 32}, "bwd"), op("fc", "gemm", gemm)]
    wl = Workload(model=None, plan=None, stages=[StageProgram(0, [ChunkProgram(0, (0,), fwd, bwd)])])
    monkeypatch.setattr("compute_db.cli._workload_from_args", lambda args: wl)
    db = tmp_path / "m.sqlite"
    assert main(["measure", "--workload", "unused.json", "--db", str(db), "--device", "cpu",
                 "--gpu-name", "H100", "--warmup", "1", "--repeats", "3"]) == 0
    rows = store.read_rows(db)
    assert len(rows) == 4 and {r.gpu for r in rows} == {"H100"}   # 4 distinct kernels
    kt = open_db(db).lookup(fwd[0], "H100")
    assert kt.source == "measured"


@pytest.mark.parametrize("extra,needle", [
    # regressions: these measured nothing and still exited 0 (creating an empty DB)
    (["--kinds", "nosuch"], "--kinds: unknown kernel kind(s) nosuch"),
    (["--kinds", "grouped_gemm"], "--kinds: the workload has no kernels of kind(s) grouped_gemm"),
    (["--max-gb", "-1"], "--max-gb: must be > 0"),
    (["--max-kernels", "0"], "--max-kernels: must be >= 1"),
    (["--fused"], "--fused needs a CUDA device (torch.compile generates the fused kernels with Triton)"),
])
def test_measure_rejects_options_that_select_nothing(tmp_path, monkeypatch, capsys, extra, needle):
    pytest.importorskip("torch")
    from sim.cli import main
    op = ComputeOp("fc", "gemm", (("m", 16), ("n", 8), ("k", 32)), "bf16", 0.0, 0.0)
    wl = Workload(model=None, plan=None, stages=[StageProgram(0, [ChunkProgram(0, (0,), [op], [])])])
    monkeypatch.setattr("compute_db.cli._workload_from_args", lambda args: wl)
    db = tmp_path / "m.sqlite"
    assert main(["measure", "--workload", "unused.json", "--db", str(db), "--device", "cpu", *extra]) == 2
    err = capsys.readouterr().err
    assert needle in err and err.count("\n") == 1 and not db.exists()


@pytest.mark.parametrize("variant", ["fwd", "bwd"])
def test_elementwise_kernel_adds_two_inputs_in_both_directions(variant):
    """An add's autograd backward launches no kernel (it hands dy through), so timing it by autograd timed
    nothing (66 us for 262 M fp32 elements on an H100, 16 TB/s); both directions run the two-input,
    one-output kernel that keys.work counts."""
    torch = pytest.importorskip("torch")
    n = 1000
    out = measure.build_kernel(torch, make_key("elementwise", variant, {"numel": n}, "fp32"), "cpu")()
    g = torch.Generator(device="cpu").manual_seed(0)
    a, b = torch.randn(n, generator=g), torch.randn(n, generator=g)
    assert isinstance(out, torch.Tensor) and not out.requires_grad
    assert torch.equal(out, a + b)


class _FakeCuda:
    """A GPU timeline for time_kernel: _sleep advances it at 1 GHz, each kernel call by 2 us; the log keeps
    the order in which the host queued things."""

    def __init__(self):
        self.now_ms = 0.0
        self.log = []
        cuda = self

        class Event:
            def __init__(self, enable_timing=False):
                self.t = None

            def record(self):
                self.t = cuda.now_ms
                cuda.log.append("rec")

            def elapsed_time(self, other):
                return other.t - self.t

        self.Event = Event

    def synchronize(self):
        self.log.append("sync")

    def _sleep(self, cycles):
        self.now_ms += cycles / 1e6
        self.log.append(("sleep", cycles))

    def kernel(self):
        self.now_ms += 0.002
        self.log.append("call")


def test_cuda_timing_queues_each_chunk_behind_a_busy_wait():
    """No sample may include the GPU waiting for the host to launch: each chunk of at most CUDA_CHUNK
    calls is queued while a busy-wait kernel holds the GPU, and the samples are the kernels' own times."""
    cuda = _FakeCuda()
    torch = type("T", (), {"cuda": cuda})()
    samples = measure.time_kernel(torch, cuda.kernel, "cuda", warmup=1, repeats=20)
    assert samples.shape == (20,) and np.allclose(samples, 2e-6)
    timed = cuda.log[cuda.log.index(("sleep", 1_000_000)) + 3:]      # after the rate calibration
    assert cuda.log.index(("sleep", 1_000)) < cuda.log.index(("sleep", 1_000_000))   # loaded before it
    chunks = []
    for item in timed:
        if isinstance(item, tuple):
            assert item[0] == "sleep" and item[1] > 0
            chunks.append([])
        elif item != "sync":
            chunks[-1].append(item)
    assert [len(c) // 3 for c in chunks] == [8, 8, 4]
    assert all(c == ["rec", "call", "rec"] * (len(c) // 3) for c in chunks)


@pytest.mark.parametrize("kind,variant,dims,compiled", [
    ("rotary", "fwd", {"tokens": 4, "heads": 2, "head_dim": 8}, True),
    ("swiglu", "bwd", {"tokens": 4, "width": 8}, True),
    ("cross_entropy", "fwd", {"tokens": 4, "vocab": 16}, True),
    ("gemm", "fwd", {"m": 4, "n": 8, "k": 16}, False),             # one cuBLAS call already
    ("elementwise", "fwd", {"numel": 64}, False),                    # one kernel already
])
def test_fused_mode_compiles_the_multi_kernel_kinds_only(monkeypatch, kind, variant, dims, compiled):
    torch = pytest.importorskip("torch")
    calls = []

    def fake_compile(fn, **kw):
        calls.append(kw)
        return fn
    monkeypatch.setattr(torch, "compile", fake_compile)
    key = make_key(kind, variant, dims, "fp32")
    outs = []
    for fused in (True, False):
        with torch.random.fork_rng():
            torch.manual_seed(0)        # a backward's upstream gradient is drawn from the global generator
            outs.append(measure.build_kernel(torch, key, "cpu", fused=fused)())
    fused, plain = outs
    assert calls == ([{"dynamic": False, "fullgraph": True}] if compiled else [])
    assert (kind in measure.FUSED_KINDS) == compiled
    for a, b in zip(fused if isinstance(fused, tuple) else (fused,), plain if isinstance(plain, tuple) else (plain,)):
        assert torch.equal(a, b)         # the same computation on the same tensors
