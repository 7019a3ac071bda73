"""netsim: collectives as point-to-point flow DAGs on a topology; flow-level max-min engine; alpha-beta model.

Public API: make_backend("flow" | "analytical", topology, **options) -> NetworkBackend;
CollectiveRequest (netsim.api); NetsimError.
"""

from netsim.api import CollectiveRequest, NetworkBackend
from netsim.backend import make_backend
from netsim.errors import NetsimError

__all__ = ["CollectiveRequest", "NetworkBackend", "NetsimError", "make_backend"]
