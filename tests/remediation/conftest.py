from __future__ import annotations

import shutil
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiohttp.test_utils import TestClient, TestServer

from remediation.app import build_app
from remediation.clock import FakeClock
from remediation.service import Service
from tests.realcomp import world_readable_tmpdir
from tests.remediation.helpers import service, topology_file
from tests.slurmcluster import SlurmCluster, slurm_cluster


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def svc_client(tmp_path: Path, clock: FakeClock) -> AsyncIterator[tuple[Service, TestClient]]:
    svc = service(tmp_path, clock=clock, topology=topology_file(tmp_path, 10))
    async with TestClient(TestServer(build_app(svc))) as client:
        yield svc, client


@pytest.fixture(scope="session")
def slurm() -> Iterator[SlurmCluster]:
    """One real Slurm mini-cluster for the whole session (2 slurmd + 2 ghost nodes)."""
    with slurm_cluster(live=2, ghosts=2) as sc:
        yield sc


@pytest.fixture
def clean_slurm(slurm: SlurmCluster) -> SlurmCluster:
    slurm.reset_nodes()
    return slurm


@pytest.fixture
def readable_dir() -> Iterator[Path]:
    """A scratch directory that Slurm jobs (another user) can read and write; removed after."""
    d = world_readable_tmpdir("gpuwarden-test-")
    yield d
    shutil.rmtree(d, ignore_errors=True)
