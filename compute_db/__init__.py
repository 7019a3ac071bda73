"""compute_db: kernel timing database — measured, interpolated or modeled, always with provenance.

Public API: open_db(path=None, gpu_file=None) -> ComputeDB (a user file is layered over the shipped DB: its rows win
for their keys); ComputeDB.lookup(op, gpu) / lookup_many(ops, gpu) ->
KernelTime(time_s, source, basis); compute_db.gpus.get_gpu / list_gpus / load_gpu_file;
compute_db.report.source_fractions.
"""

# Public names, imported on first use so that light commands (`clustersim --help`) do not pay for numpy
# and friends (PEP 562).
_EXPORTS = {
    "ComputeDB": "compute_db.db",
    "KernelTime": "compute_db.db",
    "open_db": "compute_db.db",
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
