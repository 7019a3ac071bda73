"""Property tests: predictions grow with every shape dimension (hence with FLOPs) per family and GPU."""

from __future__ import annotations

import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from compute_db import open_db  # noqa: E402
from compute_db.keys import make_key, work  # noqa: E402
from workload_gen.workload import COMPUTE_KINDS  # noqa: E402

DB = open_db()
GPUS = ["H100", "A100-80GB", "H200", "B200", "GB200", "MI300X"]
KIND_VARIANTS = [(k, v) for k in sorted(COMPUTE_KINDS)
                 for v in ({"gemm": ("fwd", "dgrad", "wgrad"), "grouped_gemm": ("fwd", "wgrad"),
                            "optimizer": ("step",), "memcpy": ("fwd",)}.get(k, ("fwd", "bwd")))]
dim = st.integers(min_value=1, max_value=1 << 16)


def _dims(kind, values):
    dims = dict(zip(COMPUTE_KINDS[kind], values))
    if kind == "flash_attn":  # GQA: kv_heads <= heads
        dims["kv_heads"] = min(dims["kv_heads"], dims["heads"])
    return dims


@settings(max_examples=150, deadline=None)
@given(kv=st.sampled_from(KIND_VARIANTS), gpu=st.sampled_from(GPUS), dtype=st.sampled_from(["bf16", "fp8", "fp32"]),
       values=st.lists(st.integers(min_value=1, max_value=1 << 14), min_size=7, max_size=7),
       which=st.integers(min_value=0, max_value=6), factor=st.integers(min_value=2, max_value=64),
       causal=st.booleans())
def test_modeled_time_monotone_in_each_dimension_and_flops(kv, gpu, dtype, values, which, factor, causal):
    kind, variant = kv
    n = len(COMPUTE_KINDS[kind])
    small = _dims(kind, values[:n])
    field = COMPUTE_KINDS[kind][which % n]
    if kind == "flash_attn" and field == "kv_heads":
        field = "heads"
    big = dict(small)
    big[field] = small[field] * factor
    k_small = make_key(kind, variant, small, dtype, causal)
    k_big = make_key(kind, variant, big, dtype, causal)
    t_small, _ = DB.model_time(k_small, gpu)
    t_big, _ = DB.model_time(k_big, gpu)
    assert work(k_big)[0] >= work(k_small)[0]          # more FLOPs ...
    assert t_big >= t_small * (1 - 1e-12)              # ... never faster


@settings(max_examples=150, deadline=None)
@given(kv=st.sampled_from(KIND_VARIANTS), gpu=st.sampled_from(["H100", "A100-80GB", "H200"]),
       values=st.lists(st.integers(min_value=1, max_value=1 << 13), min_size=7, max_size=7),
       which=st.integers(min_value=0, max_value=6), grow=st.integers(min_value=1, max_value=5000))
def test_full_lookup_monotone_near_measured_data(kv, gpu, values, which, grow):
    # the full lookup (interpolation band + roofline) on GPUs with kernel data; a measured shape is
    # answered with its raw measurement, which may itself be noisy, so those pairs are skipped
    kind, variant = kv
    n = len(COMPUTE_KINDS[kind])
    small = _dims(kind, values[:n])
    field = COMPUTE_KINDS[kind][which % n]
    if kind == "flash_attn" and field == "kv_heads":
        field = "heads"
    big = dict(small)
    big[field] += grow
    a = DB.lookup_key(make_key(kind, variant, small, "fp16"), gpu)
    b = DB.lookup_key(make_key(kind, variant, big, "fp16"), gpu)
    if "measured" not in (a.source, b.source):
        assert b.time_s >= a.time_s * (1 - 1e-12)


@settings(max_examples=60, deadline=None)
@given(gpu=st.sampled_from(GPUS), m=dim, n=dim, k=dim, scale=st.integers(min_value=2, max_value=16))
def test_full_lookup_monotone_when_gemm_scales(gpu, m, n, k, scale):
    # scaling all dims scales FLOPs by scale^3
    a = DB.lookup_key(make_key("gemm", "fwd", {"m": m, "n": n, "k": k}, "bf16"), gpu)
    b = DB.lookup_key(make_key("gemm", "fwd", {"m": m * scale, "n": n * scale, "k": k * scale}, "bf16"), gpu)
    assert b.time_s >= a.time_s


@pytest.mark.parametrize("gpu", ["H100", "A100"])
@pytest.mark.parametrize("nk", [(4096, 4096), (12288, 4096), (4096, 11008)])
def test_lookup_along_measured_line_is_monotone(gpu, nk):
    # a token sweep across and beyond Vidur's measured m values (answers for bf16: no raw "measured")
    n, k = nk
    kts = [DB.lookup_key(make_key("gemm", "fwd", {"m": m, "n": n, "k": k}, "bf16"), gpu) for m in range(8, 20000, 37)]
    assert any(kt.source == "interpolated" for kt in kts)
    times = [kt.time_s for kt in kts]
    assert all(b >= a for a, b in zip(times, times[1:]))
