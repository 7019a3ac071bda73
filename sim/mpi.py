"""The MPI world of a run started under mpiexec (mpi4py optional), for commands that split work over ranks."""

from __future__ import annotations

import os

_LAUNCHER_VARS = ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "MPI_LOCALNRANKS")


def mpi_comm():
    """mpi4py COMM_WORLD when launched by an MPI launcher with more than one rank, else None.

    Checked from the environment first so that a plain run never initialises MPI.
    """
    if not any(os.environ.get(k) for k in _LAUNCHER_VARS):
        return None
    try:
        from mpi4py import MPI
    except ImportError:
        return None
    comm = MPI.COMM_WORLD
    return comm if comm.Get_size() > 1 else None
