"""An analytical run imports only what it uses (issue 16: first-use imports are most of a small run)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "networkx", "matplotlib", "scipy", "numba", "torch")
# a SimAI file carries its kernel times: the compute DB file (sqlite3) is never opened
UNUSED_HERE = ("netsim.engine", "netsim.maxmin", "sim.chakra", "workload_gen.native_io", "numpy.ma",
               "sqlite3", "compute_db.store",
               # the SimAI reader: medians without statistics, sha256 only for a #clustersim section;
               # workload_gen's package imports its generator on first use
               "statistics", "hashlib", "workload_gen.generator", "workload_gen.deepspeed")


def test_analytical_run_of_a_simai_file_imports_no_heavy_library(shared_dir):
    code = (
        "import json, sys\n"
        "from sim.commands import run_job\n"
        f"rep = run_job({{'workload': {str(shared_dir / 'data' / 'simai_examples' / 'workload_analytical.txt')!r},"
        " 'network': 'analytical'})\n"
        "print(json.dumps([rep.meta['engine'], sorted(m for m in sys.modules)]))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    engine, modules = json.loads(done.stdout.strip().splitlines()[-1])
    assert engine == "arithmetic (sim.fastpath)"
    loaded = set(modules)
    assert not [m for m in HEAVY if m in loaded]
    assert not [m for m in UNUSED_HERE if m in loaded]
    assert "numpy" in loaded    # numpy is the one numeric library an analytical run uses
