"""The real Slurm mini-cluster for tests (see :mod:`gpuwarden.lab.slurmlab`).

Missing Slurm binaries skip the test on a developer machine and fail it under ``CI``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from gpuwarden.lab.slurmlab import BINARIES, NodeState, SlurmCluster
from gpuwarden.lab.slurmlab import slurm_cluster as _slurm_cluster
from tests.realcomp import require_binary

__all__ = ["NodeState", "SlurmCluster", "slurm_cluster"]


@contextlib.contextmanager
def slurm_cluster(
    live: int = 2, ghosts: int = 2, prefix: str = "gpu-node-"
) -> Iterator[SlurmCluster]:
    for b in BINARIES:
        require_binary(b)
    with _slurm_cluster(live=live, ghosts=ghosts, prefix=prefix) as sc:
        yield sc
