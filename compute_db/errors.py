"""User-facing errors of compute_db (one line each)."""


class ComputeDBError(ValueError):
    """Unknown GPU, corrupt database, invalid kernel shape, missing measurement dependencies."""
