"""Topology benchmarks (issue 3 acceptance): 16,384-GPU multi-pod build + validate + write
(< 10 s, < 2 GB RSS) and 100,000 random GPU-pair routes (< 5 s); drawing the 16,384-GPU multi-pod and
224 x NVL72 fabrics (< 5 s each, build excluded).

    python benchmarks/bench_topo.py [filter]
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from harness import run_cases  # noqa: E402

GPUS = 16384


def build_validate_write() -> str:
    from topo import build, write_simai_topology
    from topo.analysis import validate

    t0 = time.perf_counter()
    t = build("multi-pod", gpus=GPUS, core_oversubscription=2)
    t1 = time.perf_counter()
    problems = validate(t)
    t2 = time.perf_counter()
    with tempfile.TemporaryDirectory() as d:
        write_simai_topology(t, os.path.join(d, t.name))
        size = os.path.getsize(os.path.join(d, t.name))
    t3 = time.perf_counter()
    assert not problems, problems[:3]
    return (f"build {t1 - t0:.2f}s validate {t2 - t1:.2f}s write {t3 - t2:.2f}s; "
            f"{len(t.nodes)} nodes {t.num_cables} cables, file {size / 1e6:.1f} MB")


def route_100k() -> str:
    from topo import Router, build

    t = build("multi-pod", gpus=GPUS)
    rng = random.Random(0)
    pairs = [(rng.randrange(GPUS), rng.randrange(GPUS)) for _ in range(100_000)]
    t0 = time.perf_counter()
    r = Router(t)
    hops = 0
    for i, (a, b) in enumerate(pairs):
        hops += len(r.path(a, b, i))
    dt = time.perf_counter() - t0
    return f"routing {dt:.2f}s for 100,000 pairs (router init included), mean {hops / len(pairs):.2f} links"


def route_100k_nvl72() -> str:
    from topo import Router, build

    g = 72 * 224  # 16,128 GPUs in 224 NVL72 racks, 18 NVSwitch chips each
    t = build("multi-pod", gpus=g, gpus_per_server=4, nvswitch_chips=18, nvlink_domain_size=72,
              nvlink_bandwidth_Bps="7200Gbps", gpu_type="GB200")
    rng = random.Random(0)
    pairs = [(rng.randrange(g), rng.randrange(g)) for _ in range(100_000)]
    t0 = time.perf_counter()
    r = Router(t)
    for i, (a, b) in enumerate(pairs):
        r.path(a, b, i)
    return f"routing {time.perf_counter() - t0:.2f}s; {len(t.nodes)} nodes {t.num_cables} cables"


def _draw(t) -> str:
    from topo.draw import draw_topology, drawing_view

    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        draw_topology(t, os.path.join(d, "t.png"))
        dt = time.perf_counter() - t0
        size = os.path.getsize(os.path.join(d, "t.png"))
    return f"{drawing_view(t)} view drawn in {dt:.2f}s (build excluded), PNG {size / 1e3:.0f} kB"


def draw_multipod() -> str:
    from topo import build

    return _draw(build("multi-pod", gpus=GPUS))


def draw_nvl72() -> str:
    from topo import build

    return _draw(build("multi-pod", gpus=72 * 224, gpus_per_server=4, nvswitch_chips=18, nvlink_domain_size=72,
                       nvlink_bandwidth_Bps="7200Gbps", gpu_type="GB200"))


if __name__ == "__main__":
    run_cases({
        "topo: draw multi-pod 16384 (target < 5 s)": draw_multipod,
        "topo: draw 224 x NVL72 multi-pod (target < 5 s)": draw_nvl72,
        "topo: multi-pod 16384 build+validate+write": build_validate_write,
        "topo: route 100k pairs, multi-pod 16384": route_100k,
        "topo: route 100k pairs, 224 x NVL72 multi-pod": route_100k_nvl72,
    })
