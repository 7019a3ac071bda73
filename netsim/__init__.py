"""netsim: collectives as point-to-point flow DAGs on a topology; flow-level max-min engine; NCCL-like
protocol-aware collective model (analytical backend with the same terms).

Public API: make_backend("flow" | "analytical", topology, *, net_calibration=None, **options) ->
NetworkBackend; CollectiveRequest (netsim.api); NetCalibration and load_net_calibration (a user's fitted
network constants, from `clustersim collective calibrate`); NetsimError.
"""

# Public names, imported on first use so that light commands (`clustersim --help`) do not pay for numpy
# and friends (PEP 562).
_EXPORTS = {
    "CollectiveRequest": "netsim.api",
    "NetCalibration": "netsim.netcal",
    "NetworkBackend": "netsim.api",
    "NetsimError": "netsim.errors",
    "load_net_calibration": "netsim.netcal",
    "make_backend": "netsim.backend",
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
