"""User-facing errors of netsim (one line each)."""


class NetsimError(ValueError):
    """Invalid collective request (rank not in topology, bad group, size, algorithm)."""
