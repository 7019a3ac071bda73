"""The add-a-model workflow for serving: Vidur profiles (mlp, attention, network) and the CPU measurement path
feed `clustersim serve --db`; the imported / measured kernels and collectives are the ones the cost model uses.

Round trip: every Vidur-format time is 2x what the shipped DB (kernels) or netsim (collectives) answers for the
same kernel / collective, so a batch whose every kernel and collective is covered must cost exactly 2x."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from compute_db import open_db, store
from compute_db.keys import key_of, make_key
from netsim import make_backend
from netsim.api import CollectiveRequest
from sim.cli import main
from sim.inputs import make_topology
from sim.serve.batch_time import collective_provenance_s, make_timer
from sim.serve.costs import BatchShape
from sim.serve.plan import ServingPlan
from workload_gen import inference as inf
from workload_gen.zoo import get_model

LLAMA2 = get_model("llama2-7b")          # 32 heads (MHA), hidden 4096: the Vidur profile's model
TP = 2
HEADS, KVH, HD = 32 // TP, 32 // TP, 128
# stage 0 of tp 2 x pp 2 (no LM head): 64 tokens = one 62-token prefill chunk at offset 128 + 2 decodes of 150
SHAPE = BatchShape(prefill=((62, 128),), decode=(150, 150))
T = 64
AR_SIZES = [1 << k for k in range(10, 27)]      # bytes; 2^19 = the fp16 activations of 64 tokens (64 x 4096 x 2)
STATS = ("min", "max", "mean", "median", "std")
ATTN_OPS = ("attn_input_reshape", "attn_kv_cache_save", "attn_prefill", "attn_decode", "attn_output_reshape")


def _attn_key(chunk: int, cached: int):
    return make_key("flash_attn", "fwd", {"batch": 1, "seq_q": chunk, "seq_kv": cached + chunk, "heads": HEADS,
                                         "kv_heads": KVH, "head_dim_qk": HD, "head_dim_v": HD}, "fp16", causal=True)


def _kv_save_key(tokens: int):
    return make_key("memcpy", "fwd", {"bytes": tokens * 2 * KVH * HD * 2}, "fp16")   # K and V, fp16


def _stat_cols(op: str, t_ms: float) -> dict:
    return {f"time_stats.{op}.{s}": (0.0 if s == "std" else t_ms) for s in STATS}


def _write_profiles(root, shared_dir, shipped, topo) -> None:
    """Vidur-format files with every time = 2x the shipped DB's / netsim's answer (see module docstring)."""
    model_dir = root / "h100" / "meta-llama" / "Llama-2-7b-hf"
    model_dir.mkdir(parents=True)
    mlp = pd.read_csv(shared_dir / "data/vidur_profiling/h100/meta-llama/Llama-2-7b-hf/mlp.csv")
    mlp = mlp[mlp["num_tensor_parallel_workers"] == TP].copy()
    for c in mlp.columns:
        if c.startswith("time_stats."):
            mlp[c] = 2.0 * mlp[c]

    def lookup_ms(key) -> float:
        return 2.0 * shipped.lookup_key(key, "H100").time_s * 1e3

    # Vidur records Llama-2's padded vocabulary (32768); the simulator's embedding shard is 32000 / 2 rows: the
    # synthetic file names the model's vocabulary, with 2x the shipped DB's time of that embedding
    mlp["vocab_size"] = 32000
    for st in STATS:
        mlp[f"time_stats.emb.{st}"] = [0.0 if st == "std" else lookup_ms(make_key(
            "embedding", "fwd", {"tokens": int(n), "hidden": 4096, "vocab": 32000 // TP}, "fp16"))
            for n in mlp["num_tokens"]]
    mlp.to_csv(model_dir / "mlp.csv", index=False)

    rows = []
    base = {"n_embd": 4096, "n_q_head": 32, "n_kv_head": 32, "block_size": 16, "num_tensor_parallel_workers": TP,
            "max_model_len": 4096, "attention_backend": "FLASHINFER"}
    # prefill: the once-per-batch 1x1 kernel, the batch's chunk, and a 64-token chunk (its KV save = T tokens)
    for chunk, cached in ((1, 0), (62, 128), (64, 0)):
        rec = {**base, "batch_size": 1, "prefill_chunk_size": chunk, "kv_cache_size": cached, "is_prefill": True}
        rec.update(_stat_cols("attn_prefill", lookup_ms(_attn_key(chunk, cached))))
        rec.update(_stat_cols("attn_kv_cache_save", lookup_ms(_kv_save_key(chunk))))
        rec.update(_stat_cols("attn_decode", math.nan))
        for op in ("attn_input_reshape", "attn_output_reshape"):
            rec.update(_stat_cols(op, 0.001))
        rows.append(rec)
    # decode: 2 requests with 150 cached tokens each read 2 x 151 tokens
    rec = {**base, "batch_size": 2, "prefill_chunk_size": 0, "kv_cache_size": 150, "is_prefill": False}
    dkey = make_key("attn_decode", "fwd", {"batch": 2, "kv_tokens": 302, "heads": HEADS, "kv_heads": KVH,
                                           "head_dim_qk": HD, "head_dim_v": HD}, "fp16")
    rec.update(_stat_cols("attn_decode", lookup_ms(dkey)))
    rec.update(_stat_cols("attn_prefill", math.nan))
    rec.update(_stat_cols("attn_kv_cache_save", lookup_ms(_kv_save_key(2))))
    for op in ("attn_input_reshape", "attn_output_reshape"):
        rec.update(_stat_cols(op, 0.001))
    rows.append(rec)
    pd.DataFrame(rows).to_csv(model_dir / "attention.csv", index=False)

    net = make_backend("analytical", topo)
    node = root / "h100_dgx"
    node.mkdir()
    ar = []
    for size in AR_SIZES:
        t_ms = 2.0 * net.estimate(CollectiveRequest("all_reduce", (0, 1), size)) * 1e3
        for rank, factor in ((0, 1.0), (1, 0.9)):      # the slowest rank's time is the collective's
            ar.append({"rank": rank, "num_workers": 2, "size": size, "collective": "all_reduce",
                       "devices_per_node": 2, "max_devices_per_node": 8, **_stat_cols("all_reduce", factor * t_ms)})
    pd.DataFrame(ar).to_csv(node / "all_reduce.csv", index=False)
    sr = []
    for size in AR_SIZES:
        t_ms = 2.0 * net.estimate(CollectiveRequest("send", (0, 2), size)) * 1e3
        sr.append({"rank": 0, "num_workers": 2, "size": size, "collective": "send_recv", "devices_per_node": 2,
                   "max_devices_per_node": 8, **_stat_cols("send_recv", t_ms)})
        # another setting (one GPU per server): must not answer a send inside one server
        sr.append({"rank": 0, "num_workers": 2, "size": size, "collective": "send_recv", "devices_per_node": 1,
                   "max_devices_per_node": 8, **_stat_cols("send_recv", 100.0)})
    pd.DataFrame(sr).to_csv(node / "send_recv.csv", index=False)
    (root / "README.md").write_text("profiles\n")


@pytest.fixture(scope="module")
def topo():
    return make_topology("spectrum-x", gpus=8, gpu_type="H100")


@pytest.fixture(scope="module")
def imported(tmp_path_factory, shared_dir, topo):
    root = tmp_path_factory.mktemp("vidur")
    shipped = open_db()
    _write_profiles(root / "profiles", shared_dir, shipped, topo)
    db = root / "imported.sqlite"
    assert main(["compute-db", "import-vidur", str(root / "profiles"), "--db", str(db)]) == 0
    return root, db


def test_import_reports_every_file_kind_and_what_was_skipped(imported, capsys):
    root, _ = imported
    assert main(["compute-db", "import-vidur", str(root / "profiles"), "--db", str(root / "again.sqlite")]) == 0
    out = capsys.readouterr().out.splitlines()
    mlp = pd.read_csv(root / "profiles/h100/meta-llama/Llama-2-7b-hf/mlp.csv")
    # 10 ops per token count, the two norms one key (rmsnorm tokens x hidden): 9 kernels per distinct token count
    n_mlp = mlp["num_tokens"].nunique() * 9
    # attention: 3 prefill kernels, 1 decode, KV-cache saves of 1, 62, 64 and 2 tokens
    n_coll = len(AR_SIZES) * 3                # all_reduce + send_recv at 2 settings
    assert out[0] == (f"imported {n_mlp + 8} Vidur kernel rows (H100) and {n_coll} collective points (H100) into "
                      f"{root / 'again.sqlite'}")
    body = "\n".join(out[1:])
    assert f"mlp.csv           1 file  {n_mlp:>7d} kernel rows (H100)" in body
    assert ("attention.csv     1 file        8 kernel rows (H100): 4 KV-cache save, 1 decode attention, "
            "3 prefill attention") in body
    assert (f"all_reduce.csv    1 file  {len(AR_SIZES):>7d} collective points (H100): all_reduce over 2 GPUs "
            "(2 per server)") in body
    assert (f"send_recv.csv     1 file  {2 * len(AR_SIZES):>7d} collective points (H100): send over 2 GPUs (1 per "
            "server), send over 2 GPUs (2 per server)") in body
    assert "README.md: not a Vidur profile" in body
    assert "attn_input_reshape, attn_output_reshape: not used" in body


@pytest.fixture(scope="module")
def timers(imported, topo):
    _, db = imported
    plan = ServingPlan(tp=TP, pp=2, weight_dtype="fp16")
    return (make_timer(LLAMA2, plan, topo, "H100", db=open_db()),
            make_timer(LLAMA2, plan, topo, "H100", db=open_db(db)))


def test_imported_kernels_and_collectives_double_a_covered_stage(timers):
    old_t, new_t = timers
    old, new = old_t.stage_cost(0, 0, SHAPE, 0.0), new_t.stage_cost(0, 0, SHAPE, 0.0)
    # every kernel of stage 0 (embedding, 16 layers' token-level kernels, prefill and decode attention) and
    # every collective (TP all-reduces, the PP send) comes from the imported files at 2x
    assert new.compute_s == pytest.approx(2.0 * old.compute_s, rel=1e-9)
    assert new.comm_s == pytest.approx(2.0 * old.comm_s, rel=1e-9) and old.comm_s > 0
    assert new.send_s == pytest.approx(2.0 * old.send_s, rel=1e-9) and old.send_s > 0
    assert new.time_s == pytest.approx(2.0 * old.time_s, rel=1e-9)
    prov = new_t.provenance_s()
    assert prov["measured"] == pytest.approx(new.compute_s, rel=1e-9)        # all of it measured
    coll = collective_provenance_s(new_t)
    assert coll["measured"] == pytest.approx(new.comm_s + new.send_s, rel=1e-9) and coll["netsim"] == 0.0
    old_coll = collective_provenance_s(old_t)
    assert old_coll["netsim"] == pytest.approx(old.comm_s + old.send_s, rel=1e-9)


def test_stage_kernels_are_the_imported_keys(imported):
    _, db = imported
    keys = {r.key for r in store.read_rows(db, "H100")}
    spec = inf.inference_spec(LLAMA2, tp=TP, pp=2, weight_dtype="fp16")
    ops = [op for op, _ in inf.stage_ops(spec, 0, SHAPE.prefill, SHAPE.decode) if not op.is_comm]
    assert ops and all(key_of(op) in keys for op in ops)


def test_serve_cli_uses_the_imported_db(imported, capsys):
    _, db = imported
    argv = ["serve", "-m", "llama2-7b", "--tp", "2", "--pp", "2", "--dtype", "fp16", "--requests", "24",
            "--qps", "4", "--prefill-tokens", "256", "--decode-tokens", "16", "-o", "-", "--json", "-q"]
    import json
    assert main(argv) == 0
    base = json.loads(capsys.readouterr().out)
    assert main(argv + ["--db", str(db)]) == 0
    got = json.loads(capsys.readouterr().out)
    kern = got["kernel_time_sources"]["fractions"]
    assert kern.get("measured", 0.0) > base["kernel_time_sources"]["fractions"].get("measured", 0.0)
    coll = got["collective_time_sources"]["fractions"]
    assert coll.get("measured", 0.0) + coll.get("interpolated", 0.0) > 0.9      # TP all-reduces and PP sends
    assert base["collective_time_sources"]["fractions"] == {"netsim": 1.0}
    # decode steps: most of the time is doubled (the last stage's LM head and sampling are not in the files)
    ratio = got["metrics"]["tpot_s"]["mean"] / base["metrics"]["tpot_s"]["mean"]
    assert 1.5 < ratio < 2.0


# ---------------------------------------------------------------- CPU measurement of a model not in the zoo

TINY_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 64,
               "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
               "vocab_size": 256, "max_position_embeddings": 64, "rms_norm_eps": 1e-5, "tie_word_embeddings": False}
# a batch on the measurement grid: 8-token chunk at offset 24 (KV 32) + 3 decodes of context 7 (KV 8 each):
# T = 11 tokens, 4 output rows
TINY_SHAPE = BatchShape(prefill=((8, 24),), decode=(7, 7, 7))


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    pytest.importorskip("torch")
    import json
    root = tmp_path_factory.mktemp("tiny")
    cfg = root / "config.json"
    cfg.write_text(json.dumps(TINY_CONFIG))
    db = root / "measured.sqlite"
    assert main(["measure", "--serving", "-m", str(cfg), "--tp", "1,2", "--device", "cpu", "--gpu-name", "H100",
                 "--grid", "tokens=1,4,8,11,32", "--grid", "chunk=8", "--grid", "kv=8,32", "--grid", "batch=1,3",
                 "--warmup", "0", "--repeats", "2", "--db", str(db)]) == 0
    return cfg, db


@pytest.mark.parametrize("tp", [1, 2])
def test_cpu_measured_serving_kernels_answer_the_simulation(tiny, topo, tp):
    cfg, db = tiny
    from workload_gen.config_io import load_model
    model = load_model(cfg)
    rows = [r for r in store.read_rows(db, "H100")]
    assert rows and all(r.provenance == "measured" and r.source == "aiob-runner" and r.device.startswith("cpu")
                        for r in rows)
    keys = {r.key for r in rows}
    spec = inf.inference_spec(model, tp=tp)
    ops = [op for op, _ in inf.stage_ops(spec, 0, TINY_SHAPE.prefill, TINY_SHAPE.decode) if not op.is_comm]
    assert ops and all(key_of(op) in keys for op in ops)
    timer = make_timer(model, ServingPlan(tp=tp), topo, "H100", db=open_db(db))
    cost = timer.stage_cost(0, 0, TINY_SHAPE, 0.0)
    prov = timer.provenance_s()
    assert prov["measured"] == pytest.approx(cost.compute_s, rel=1e-9) and cost.compute_s > 0


def test_serve_cli_runs_a_config_json_with_the_measured_db(tiny, capsys):
    cfg, db = tiny
    assert main(["serve", "-m", str(cfg), "--db", str(db), "--requests", "20", "--qps", "5", "--prefill-tokens",
                 "24", "--decode-tokens", "8", "-o", "-", "-q"]) == 0
    out = capsys.readouterr().out
    line = next(x for x in out.splitlines() if x.startswith("kernel time provenance"))
    assert "measured" in line
