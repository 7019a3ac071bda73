"""Pipeline sends on an idle stream go straight to the network (Engine._direct; _StageRun._send
skips the _stream_issue -> _stream_next -> make_reqs chain): the results must be exactly those of the
chain, the same report, every collective row and every per-layer row, bit for bit."""

import pytest
from test_engine_compute_run import JOBS, _report, assert_same

from sim import engine


@pytest.mark.parametrize("name", sorted(JOBS))
def test_direct_sends_exact(name, monkeypatch):
    taken = []
    orig = engine.Engine._direct
    monkeypatch.setattr(engine.Engine, "_direct",
                        lambda self, st, kind, q: (lambda d: (taken.append(d), d)[1])(orig(self, st, kind, q)))
    fast, t_fast = _report(JOBS[name])
    assert any(taken), "no pipeline send went straight to the network"
    monkeypatch.setattr(engine.Engine, "_direct", lambda self, st, kind, q: False)
    ref, t_ref = _report(JOBS[name])
    assert t_fast == t_ref
    assert_same(fast, ref)
