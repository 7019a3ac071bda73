"""One NVLink default: a topology built by the Python API without an NVLink rate simulates as the CLI's
(the GPU's datasheet line rate), while a rate the user chose is kept."""

from __future__ import annotations

import topo
from compute_db import open_db
from sim import simulate
from sim.inputs import make_topology, resolve_default_nvlink
from topo.templates import NVLINK_DEFAULT_NOTE
from workload_gen import ModelSpec, ParallelPlan, generate

MODEL = ModelSpec(name="tiny", num_layers=2, hidden_size=1024, num_attention_heads=16, ffn_hidden_size=4096,
                  vocab_size=32000, seq_length=1024)
PLAN = ParallelPlan(world_size=16, tp=8, pp=1, global_batch_size=4, micro_batch_size=1, seq_length=1024)


def _nvlink_rates(t) -> set[float]:
    return {lk.bandwidth_Bps for lk in t.links if lk.kind == "nvlink"}


def test_api_default_topology_simulates_like_the_cli():
    w = generate(MODEL, PLAN)
    api = simulate(w, topo.build("spectrum-x", gpus=16), gpu="H100", network="analytical")
    cli = simulate(w, make_topology("spectrum-x", gpus=16), gpu="H100", network="analytical")
    assert api.iteration_time_s == cli.iteration_time_s


def test_default_rate_is_replaced_by_the_datasheet_rate_and_said():
    spec = open_db().gpu("H100")
    t = topo.build("spectrum-x", gpus=16)
    assert NVLINK_DEFAULT_NOTE in t.notes and _nvlink_rates(t) == {2880e9 / 8}
    r = resolve_default_nvlink(t, spec)
    assert _nvlink_rates(r) == {spec.nvlink_Bps} and spec.nvlink_Bps == 450e9
    assert NVLINK_DEFAULT_NOTE not in r.notes and any("datasheet" in n for n in r.notes)


def test_a_chosen_rate_is_kept():
    spec = open_db().gpu("H100")
    t = topo.build("spectrum-x", gpus=16, nvlink_bandwidth_Bps="2880Gbps")
    assert NVLINK_DEFAULT_NOTE not in t.notes
    assert resolve_default_nvlink(t, spec) is t
