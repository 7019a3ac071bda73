"""The user's kernel DB reaches the analytical estimate, the plan search and the PerfLLM API."""

from __future__ import annotations

import pytest

from sim.analysis.search import SearchSpace, search
from workload_gen.zoo import get_model

SPACE = SearchSpace(tp=(1,), pp=(1,), vpp=(1,), cp=(1,), sequence_parallel=(False,), micro_batch_size=(1,),
                    recompute=("none",), optimizer=("distributed",))


def _slow_gemm_db(tmp_path, model, seq):
    """A user DB measuring every forward GEMM of the model's layer 10x slower than the shipped DB says."""
    from compute_db import open_db
    from compute_db.keys import key_of
    from compute_db.store import KernelRow, write_fresh
    from workload_gen import generate
    from workload_gen.plan import ParallelPlan
    w = generate(model, ParallelPlan(world_size=8, global_batch_size=8, seq_length=seq))
    shipped = open_db()
    rows, seen = [], set()
    for op in w.stages[0].chunks[0].forward:
        if not op.is_comm and op.kind == "gemm" and op.layer >= 0 and key_of(op) not in seen:
            seen.add(key_of(op))
            t = 10 * shipped.lookup(op, "H100").time_s
            rows.append(KernelRow("H100", key_of(op), t, t, t, 0.0, 10, "measured", "test"))
    path = tmp_path / "slow.sqlite"
    write_fresh(path, rows)
    return path


def test_search_and_steptime_use_the_users_db(tmp_path):
    from compute_db import open_db
    m = get_model("llama3-8b")
    db = open_db(_slow_gemm_db(tmp_path, m, 2048))
    base = search(m, 8, 8, seq_length=2048, space=SPACE, confirm=False)
    slow = search(m, 8, 8, seq_length=2048, space=SPACE, confirm=False, db=db)
    assert slow.best.iteration_time_s > 2 * base.best.iteration_time_s


def test_perfllm_configure_with_db(tmp_path):
    from sim.analysis.perfllm import PerfLLM
    m = get_model("llama3-8b")
    path = _slow_gemm_db(tmp_path, m, 2048)
    strategy = {"seq_len": 2048, "micro_batch_size": 1, "micro_batch_num": 1, "world_size": 8, "tp_size": 1,
                "pp_size": 1, "zero_state": 1}
    base = PerfLLM().configure(strategy_config=strategy, model_config="llama3-8b", system_config="H100")
    slow = PerfLLM().configure(strategy_config=strategy, model_config="llama3-8b", system_config="H100", db=path)
    t0 = base.run_estimate()["duration_time_per_iter_s"]
    t1 = slow.run_estimate()["duration_time_per_iter_s"]
    assert t1 > 2 * t0
    assert slow.run_estimate(simulator="analytical")["duration_time_per_iter_s"] == pytest.approx(t1, rel=0.5)
