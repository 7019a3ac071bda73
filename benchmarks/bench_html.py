"""Benchmarks of report.html (sim.html): the page of the default `clustersim run` must build in well under
0.3 s (goal), so that writing it does not make a run noticeably slower.

- run_report_no_picture: run_html of the built-in example (32 x H100, TP4 x PP2 x DP4, flow network,
  with its trace) without the topology drawing, as with --no-charts. Simulation excluded from the time.
- run_report_with_picture: the same with the topology picture embedded (as a default run with charts:
  topo.draw_svg's native SVG, no matplotlib).
- serve_report: serve_html of the built-in serving example (1,000 requests).
Run: python benchmarks/bench_html.py [case substring ...]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from harness import run_cases  # noqa: E402


def _example_run():
    from sim.commands import EXAMPLE_JOB, run_job
    return run_job(dict(EXAMPLE_JOB), trace=True, return_inputs=True)


def _time_run_report(picture: bool) -> str:
    rep, workload, topology = _example_run()
    from sim.html.run_report import run_html
    t0 = time.perf_counter()
    text = run_html(rep, workload, topology, picture=picture)
    return f"build {time.perf_counter() - t0:.3f} s, {len(text) / 1e6:.2f} MB, {len(rep.trace):,} trace events"


def case_run_report_no_picture() -> str:
    return _time_run_report(False)


def case_run_report_with_picture() -> str:
    return _time_run_report(True)


def case_serve_report() -> str:
    from sim.serve.api import simulate_serving
    from sim.serve.metrics import request_frame
    from sim.serve.plan import ServingPlan
    from workload_gen.requests import RequestConfig
    run = simulate_serving("llama3-8b", ServingPlan(scheduler="sarathi", chunk_size=512),
                           RequestConfig(num_requests=1000, qps=16.0, lengths="chat"), gpu="H100", seed=0)
    from sim.html.serve_report import serve_html
    t0 = time.perf_counter()
    text = serve_html(run.result, run.summary, request_frame(run.result))
    return f"build {time.perf_counter() - t0:.3f} s, {len(text) / 1e6:.2f} MB"


if __name__ == "__main__":
    run_cases({"run_report_no_picture": case_run_report_no_picture,
               "run_report_with_picture": case_run_report_with_picture,
               "serve_report": case_serve_report})
