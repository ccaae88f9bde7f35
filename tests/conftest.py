"""Fixtures shared by every test package: the real Kubernetes lab (tests/kubelab.py)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kubelab import KubeLab, cleanup, start_lab, versions
from tests.realcomp import default_generation, generation_dir, generation_missing


@pytest.fixture(scope="session")
def kube_lab() -> Iterator[KubeLab]:
    """One real control plane (current version) per test process (xdist worker): tests share
    it and keep apart by their own namespaces and node names."""
    lab = start_lab()
    try:
        yield lab
    finally:
        cleanup(lab)


@pytest.fixture(scope="session")
def kube_lab_oldest() -> Iterator[KubeLab]:
    """A control plane of the oldest Kubernetes gpuwarden supports (versions.env's
    OLDEST_KUBE_VERSION), started only by the tests that ask for it."""
    lab = start_lab(versions()["OLDEST_KUBE_VERSION"])
    try:
        yield lab
    finally:
        cleanup(lab)


@pytest.fixture(params=["current", "oldest"])
def any_kube_lab(request: pytest.FixtureRequest) -> KubeLab:
    """The test runs on the current and on the oldest supported control plane."""
    name = "kube_lab" if request.param == "current" else "kube_lab_oldest"
    return request.getfixturevalue(name)  # type: ignore[no-any-return]


@pytest.fixture(scope="session")
def _prom_generation_links(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("prom-generations")


@pytest.fixture(scope="session", autouse=True)
def _default_prom_generation(_prom_generation_links: Path) -> Iterator[None]:
    """Every test finds the default generation's Prometheus/Alertmanager/node_exporter first on
    PATH (tests/realcomp.py, GPUWARDEN_PROM_GENERATION). A generation that is not installed
    leaves PATH alone here; the tests that need a server then skip, or fail under CI."""
    g = default_generation()
    if generation_missing(g):
        yield
        return
    d = generation_dir(g, _prom_generation_links)
    old = os.environ["PATH"]
    os.environ["PATH"] = f"{d}{os.pathsep}{old}"
    yield
    os.environ["PATH"] = old


@pytest.fixture(scope="module", params=["current", "stable"])
def prom_generation(request: pytest.FixtureRequest, _prom_generation_links: Path) -> Iterator[str]:
    """The module's tests run once per Prometheus generation, its servers first on PATH.
    Module-scoped, so a module's server fixtures that take it start once per generation."""
    d = generation_dir(request.param, _prom_generation_links)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PATH", f"{d}{os.pathsep}{os.environ['PATH']}")
        yield str(request.param)
