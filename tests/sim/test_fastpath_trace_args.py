"""sim.fastpath's trace arguments: every entry holds its argument dict from the start (one per
sim.trace_args.args_key, empty until annotate fills it in place), so annotating 10^5 entries makes no
new entry. The sharing is sound only if entries with one args_key get equal arguments: checked on the
event engine's raw trace, where annotate makes each entry's arguments from its own reference."""

from __future__ import annotations

import json

import sim.trace_args as trace_args
from sim.commands import _row_key_for, build_inputs, open_job_db
from sim.simulation import simulate
from sim.trace_args import args_key

JOB = {"model": "aicb-7", "plan": {"tp": 4, "pp": 2, "dp": 4, "global_batch_size": 32, "micro_batch_size": 1,
                                   "seq_length": 4096, "sequence_parallel": True, "distributed_optimizer": True},
       "fabric": "spectrum-x", "network": "analytical"}


def _traced(monkeypatch, fast_path: bool):
    """(raw trace handed to annotate, its output, the report) of one traced iteration."""
    seen = {}
    real = trace_args.annotate

    def spy(trace, *args):
        seen["raw"] = list(trace)          # the entries as recorded (annotate may fill their dicts)
        seen["refs"] = [ev[6] if len(ev) > 6 else None for ev in trace]
        seen["out"] = real(trace, *args)
        seen["given"] = trace
        return seen["out"]

    monkeypatch.setattr(trace_args, "annotate", spy)
    workload, topology, gpu = build_inputs(JOB)
    rep = simulate(workload, topology, gpu=gpu, network="analytical", db=open_job_db(JOB),
                   row_key=_row_key_for(workload), trace=True, fast_path=fast_path)
    return seen, rep


def test_entries_with_one_args_key_get_equal_arguments(monkeypatch):
    seen, rep = _traced(monkeypatch, fast_path=False)
    assert rep.meta["engine"].startswith("events")
    by_key: dict = {}
    for ev, ref, out in zip(seen["raw"], seen["refs"], seen["out"]):
        by_key.setdefault(args_key(ref, ev[5]), []).append(out[6])
    assert len(by_key) < len(seen["raw"]) / 10      # the sharing is worth it: far fewer keys than entries
    kinds = {k[0] for k in by_key}
    assert {"k", "w", "c"} <= kinds                 # kernels, waits and collectives all checked
    for key, args in by_key.items():
        text = json.dumps(args[0], sort_keys=True)
        assert all(json.dumps(a, sort_keys=True) == text for a in args), key


def test_args_key_separates_a_wait_from_its_collective():
    class H:
        name, kind, stage, collective, size_bytes, fast, peer_stage = "ar", "tp", 0, "all_reduce", 8, True, -1
    h = H()
    assert args_key(h, "wait") == ("w", "ar", "tp")
    assert args_key(h, "comm") == ("c", 0, "tp", "all_reduce", 8, True, -1)
    assert args_key(None, "overhead") != args_key(None, "fwd")


def test_fast_path_annotation_fills_shared_dicts_in_place(monkeypatch):
    seen, rep = _traced(monkeypatch, fast_path=True)
    assert rep.meta["engine"] == "arithmetic (sim.fastpath)"
    raw, out = seen["raw"], seen["out"]
    assert out is seen["given"] and out is rep.trace      # no second list of entries
    assert all(a is b for a, b in zip(raw, out)) and len(raw) == len(out) > 0
    args = [ev[6] for ev in out]
    assert all(type(a) is dict and a for a in args)       # every entry annotated (no host issue is None)
    distinct = {id(a) for a in args}
    assert len(distinct) < len(out) / 10
    # a collective's or wait's arguments are one dict per distinct content (kernels: one per op)
    by_text: dict = {}
    for ev in out:
        if ev[5] in ("comm", "wait"):
            assert by_text.setdefault(json.dumps(ev[6], sort_keys=True), ev[6]) is ev[6], ev
    assert len(by_text) > 2
