"""FlowEngine.expect_events: a caller announcing many events moves the engine to the compiled kernels
at once (the plain ones would spend the budget anyway); a small announcement leaves the plain ones.
Both kernel sets give the same results bit for bit (tests/netsim/test_engine_lazy.py)."""

import math

import numpy as np
import pytest

from netsim import _flowcore as fc
from netsim.engine import EVENT_PLAIN_S, FlowEngine, KernelBudget
from netsim.maxmin import numba_available


def _engine(plain_s: float = 1.0):
    budget = KernelBudget(plain_s)
    return FlowEngine(np.full(4, 1e9), budget=budget), budget


def test_few_events_keep_plain_kernels():
    eng, budget = _engine()
    left = budget.left_s
    eng.expect_events(int(left / EVENT_PLAIN_S) // 2)
    assert eng._k_resolve is fc.resolve
    assert budget.left_s == left


@pytest.mark.skipif(not numba_available(), reason="numba not installed: the plain kernels are used throughout")
def test_many_events_switch_to_compiled_kernels():
    eng, budget = _engine()
    eng.expect_events(int(math.ceil(budget.left_s / EVENT_PLAIN_S)))
    assert eng._k_resolve is fc.kernels(True)["resolve"]
    assert eng._budget is None and budget.left_s == math.inf
    # the engine still works: one flow on one link at 1e9 B/s
    ends = []
    eng.add_flow([0], 2e9, on_done=lambda f, t: ends.append(t))
    eng.run()
    assert ends == [2.0]


def test_explicit_kernel_choice_is_kept():
    eng = FlowEngine(np.full(4, 1e9), use_numba=False)
    eng.expect_events(10**9)
    assert eng._k_resolve is fc.resolve


@pytest.mark.parametrize("use_numba", [False, True])
def test_event_times_are_python_floats_with_either_kernel_set(use_numba):
    """The plain kernels' heap top is a numpy float, the compiled ones' a Python float: times handed to
    callers (and iteration times built from them) are one type whichever set runs."""
    if use_numba and not numba_available():
        pytest.skip("numba not installed")
    eng = FlowEngine(np.full(4, 1e9), use_numba=use_numba)
    ends = []
    eng.add_flow([0], 2e9, on_done=lambda f, t: ends.append(t))
    eng.add_flow([1], 1e9, on_done=lambda f, t: ends.append(t))
    eng.advance(0.0)      # both flows active: the next event is the kernels' heap top
    assert eng.next_event_time() == 1.0 and type(eng.next_event_time()) is float
    eng.run()
    assert ends == [1.0, 2.0] and all(type(t) is float for t in ends)
