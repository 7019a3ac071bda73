"""Size bombs and bad values through the commands that build workloads (`workload`, `run`, `memory`,
`serve`): every value below breaks a documented bound (workload_gen/limits.py) or a type/range rule, so
each must be refused in one line before anything large is allocated, and nothing is written."""

from __future__ import annotations

import pytest
from fuzzkit import refused, refused_bounded
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

# flags per command whose value builds something proportional to it (or enters FLOP counts)
FLAGS = {
    "workload": ("--world-size", "--gbs", "--pp", "--num-layers", "--hidden-size", "--seq", "--vocab-size",
                 "--ffn-hidden-size", "--num-attention-heads", "--tp", "--vpp", "--mbs"),
    "run": ("--world-size", "--global-batch", "--pp", "--seq-length", "--tp", "--micro-batch"),
    "memory": ("--world-size", "--gbs", "--pp", "--seq", "--tp", "--mbs"),
}
HUGE = st.integers(20_000_000, 10**30).map(str) | st.sampled_from(["1" + "0" * 400, str(2**63), str(2**64 + 1)])
BAD = st.sampled_from(["-8", "0", "1.5", "nan", "x", "", "1e9", "-1"])


def _argv(tmp_path, command: str, flag: str, value: str):
    out = tmp_path / ("w.json" if command == "workload" else "res")
    argv = [command, "--model", "llama3-8b", flag, value]
    if command == "workload":
        argv += ["-o", str(out)]
    elif command == "run":
        argv += ["--out", str(out), "-q"]
    else:
        out = None
    return argv, out


@FUZZ
@given(data=st.data(), value=HUGE | BAD)
def test_flag_bombs_and_bad_values(tmp_path, data, value):
    command = data.draw(st.sampled_from(sorted(FLAGS)))
    flag = data.draw(st.sampled_from(FLAGS[command]))
    argv, out = _argv(tmp_path, command, flag, value)
    refused("cli-flags", argv, out=out)


@pytest.mark.parametrize("argv", [
    ["workload", "--model", "llama3-8b", "--num-layers", "100000000"],
    ["workload", "--model", "llama3-8b", "--world-size", "8", "--gbs", "8000000", "--mbs", "1"],
    ["run", "--model", "llama3-8b", "--world-size", "8", "--gpus", "8", "--global-batch", "800000000",
     "--micro-batch", "1"],
    ["run", "--model", "llama3-8b", "--world-size", "1000000000", "--gpus", "1000000000"],
    ["memory", "--model", "llama3-8b", "--world-size", "100000000", "--pp", "100000000"],
    ["serve", "--model", "llama3-8b", "--requests", "1000000000"],
    ["serve", "--model", "llama3-8b", "--arrival", "poisson", "--qps", "1e9", "--duration", "1e9"],
], ids=lambda a: " ".join(a[:1] + a[3:5]))
def test_bombs_bounded_in_a_subprocess(tmp_path, argv):
    """The issue's 10^7..10^9 values: refused under a 1 GiB address-space limit within 10 s."""
    out = tmp_path / "res"
    tail = ["-o", str(tmp_path / "w.json")] if argv[0] == "workload" else ["--out", str(out)] if argv[0] in ("run", "serve") else []
    line = refused_bounded("cli-flags", argv + tail, out=out if argv[0] in ("run", "serve") else None)
    assert "exceeds the limit" in line or "exceed the limit" in line


def test_override_lifts_the_bound(tmp_path, monkeypatch):
    """CLUSTERSIM_ALLOW_HUGE=1 lets a deep model through the bound (to fail later on a real rule here)."""
    argv = ["memory", "--model", "llama3-8b", "--world-size", "8", "--pp", "2000", "--first-stage-layers", "3"]
    assert "plan.pp: 2000 exceeds the limit of 1,024" in refused("cli-flags", argv)
    monkeypatch.setenv("CLUSTERSIM_ALLOW_HUGE", "1")
    assert "exceeds the limit" not in refused("cli-flags", argv)
