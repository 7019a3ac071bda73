"""netsim: collectives as point-to-point flow DAGs on a topology; flow-level max-min engine; NCCL-like
protocol-aware collective model (analytical backend with the same terms).

Public API: make_backend("flow" | "analytical", topology, *, net_calibration=None, **options) ->
NetworkBackend; CollectiveRequest (netsim.api); NetCalibration and load_net_calibration (a user's fitted
network constants, from `clustersim collective calibrate`); NetsimError.
"""

from netsim.api import CollectiveRequest, NetworkBackend
from netsim.backend import make_backend
from netsim.errors import NetsimError
from netsim.netcal import NetCalibration, load_net_calibration

__all__ = ["CollectiveRequest", "NetCalibration", "NetworkBackend", "NetsimError", "load_net_calibration",
           "make_backend"]
