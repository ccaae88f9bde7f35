"""Fixtures shared by every test package: the real Kubernetes lab (tests/kubelab.py)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.kubelab import KubeLab, cleanup, start_lab


@pytest.fixture(scope="session")
def kube_lab() -> Iterator[KubeLab]:
    """One real control plane (current version) per test process (xdist worker): tests share
    it and keep apart by their own namespaces and node names."""
    lab = start_lab()
    try:
        yield lab
    finally:
        cleanup(lab)
