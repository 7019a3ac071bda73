"""compute_db: kernel timing database — measured, interpolated or modeled, always with provenance.

Public API: open_db(path=None, gpu_file=None) -> ComputeDB (a user file is layered over the shipped DB: its rows win
for their keys); ComputeDB.lookup(op, gpu) / lookup_many(ops, gpu) ->
KernelTime(time_s, source, basis); compute_db.gpus.get_gpu / list_gpus / load_gpu_file;
compute_db.report.source_fractions.
"""

from compute_db.db import ComputeDB, KernelTime, open_db

__all__ = ["ComputeDB", "KernelTime", "open_db"]
