"""Kernel keys: validation, text form, work (FLOPs / bytes) per kind."""

from __future__ import annotations

import pytest

from compute_db.errors import ComputeDBError
from compute_db.keys import backward_gemm_shapes, key_of, make_key, parse_key_text, work
from workload_gen.workload import COMPUTE_KINDS, ComputeOp


def _any_dims(kind):
    return {f: 8 for f in COMPUTE_KINDS[kind]}


@pytest.mark.parametrize("kind", sorted(COMPUTE_KINDS))
def test_every_kind_has_a_key_and_work(kind):
    for variant in ("fwd", "bwd", "dgrad", "wgrad", "step", ""):
        try:
            key = make_key(kind, variant, _any_dims(kind), "bf16")
        except ComputeDBError:
            continue
        flops, byts = work(key)
        assert byts > 0 and flops >= 0
        assert parse_key_text(key.text()) == key


@pytest.mark.parametrize("bad", [0, -4])
def test_zero_and_negative_shapes_rejected(bad):
    with pytest.raises(ComputeDBError, match="shape field 'n' must be positive"):
        make_key("gemm", "fwd", {"m": 4, "n": bad, "k": 4}, "bf16")


def test_invalid_keys():
    with pytest.raises(ComputeDBError, match="missing shape field"):
        make_key("gemm", "fwd", {"m": 4, "n": 4}, "bf16")
    with pytest.raises(ComputeDBError, match="unknown dtype"):
        make_key("gemm", "fwd", {"m": 4, "n": 4, "k": 4}, "int4")
    with pytest.raises(ComputeDBError, match="unknown kernel kind"):
        make_key("conv", "fwd", {"m": 4}, "bf16")
    with pytest.raises(ComputeDBError, match="positive integer"):
        make_key("gemm", "fwd", {"m": 4.5, "n": 4, "k": 4}, "bf16")
    with pytest.raises(ComputeDBError, match="unknown variant"):
        make_key("gemm", "bwd", {"m": 4, "n": 4, "k": 4}, "bf16")


def test_gemm_work():
    flops, byts = work(make_key("gemm", "fwd", {"m": 4096, "n": 1024, "k": 512}, "bf16"))
    assert flops == 2 * 4096 * 1024 * 512
    assert byts == 2 * (4096 * 512 + 512 * 1024 + 4096 * 1024)
    flops8, byts8 = work(make_key("gemm", "fwd", {"m": 4096, "n": 1024, "k": 512}, "fp8"))
    assert flops8 == flops and byts8 == (4096 * 512 + 512 * 1024) + 2 * 4096 * 1024


def test_backward_gemm_shapes():
    # Y[m,n] = X[m,k] W[k,n]: dgrad [m,n]x[n,k] -> (m, k, n); wgrad [k,m]x[m,n] -> (k, n, m)
    assert backward_gemm_shapes(10, 20, 30) == {"fwd": (10, 20, 30), "dgrad": (10, 30, 20), "wgrad": (30, 20, 10)}


def test_flash_attention_flops():
    dims = {"batch": 2, "seq_q": 1024, "seq_kv": 1024, "heads": 16, "kv_heads": 4, "head_dim_qk": 128,
            "head_dim_v": 128}
    full = 2 * 2 * 16 * 1024 * 1024 * 256
    assert work(make_key("flash_attn", "fwd", dims, "bf16"))[0] == full
    causal = work(make_key("flash_attn", "fwd", dims, "bf16", causal=True))[0]
    assert causal == pytest.approx(full * (1024 + 1) / (2 * 1024))
    assert work(make_key("flash_attn", "bwd", dims, "bf16"))[0] == pytest.approx(2.5 * full)


def test_key_of_op_normalizes_variants():
    op = ComputeOp("emb_wgrad", "embedding", (("tokens", 8), ("hidden", 4), ("vocab", 16)), "bf16", 0, 0,
                   variant="wgrad")
    assert key_of(op).variant == "bwd"
    op = ComputeOp("opt", "optimizer", (("params", 8),), "fp32", 0, 0, variant="")
    assert key_of(op).variant == "step"
    op = ComputeOp("s", "attn_bmm", (("batch", 2), ("m", 4), ("n", 4), ("k", 4)), "bf16", 0, 0, causal=True)
    assert not key_of(op).causal   # unfused batched GEMMs compute the full matrix
