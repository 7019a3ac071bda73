"""User-facing errors of topo (one line each, naming the flag or file:line)."""


class TopoError(ValueError):
    """Invalid topology parameters or a malformed topology file."""
