"""Fixtures shared by every test package: the real Kubernetes lab (tests/kubelab.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kubelab import KubeLab, cleanup, start_lab, versions


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
