"""User-facing errors of sim (one line each)."""


class SimError(ValueError):
    """Invalid simulation input (workload larger than topology, inconsistent files, bad options)."""
