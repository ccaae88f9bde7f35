"""The namespace-order defect (issue 32): remediation's validation and GPU-reset Jobs run in
validation.kubernetes.namespace, and nothing said when that namespace, or the RoleBinding
there, was missing: the first quarantine met the failure. The start-up check asks the real
API server with a server-side dry-run Job create (dryRun=All) and names the namespace."""

from __future__ import annotations

import uuid

import pytest

from remediation import job_namespace
from tests.kube.shipped import NAMESPACE, apply_remediation_rbac
from tests.kubelab import KubeLab

pytestmark = pytest.mark.real
IMAGE = "registry.example/gpuwarden-validation:1"


@pytest.fixture(scope="module")
def token(kube_lab: KubeLab) -> str:
    return apply_remediation_rbac(kube_lab, [])


def test_the_shipped_rbac_lets_remediation_dry_run_create_its_jobs_and_nothing_is_stored(
    kube_lab: KubeLab, token: str
) -> None:
    assert job_namespace.problem(kube_lab.kube_api(token), NAMESPACE, IMAGE) is None
    stored = kube_lab.http.get_or_none(
        f"/apis/batch/v1/namespaces/{NAMESPACE}/jobs/{job_namespace.PROBE_JOB}"
    )
    assert stored is None, "a dry-run create must not store the probe Job"


def test_a_job_namespace_that_does_not_exist_is_named_with_the_servers_404(
    kube_lab: KubeLab,
) -> None:
    missing = f"absent-{uuid.uuid4().hex[:8]}"
    line = job_namespace.problem(kube_lab.kube_api(), missing, IMAGE)
    assert line is not None
    assert f"namespace {missing!r} does not exist" in line
    assert "HTTP 404" in line and f'namespaces "{missing}" not found' in line


def test_a_job_namespace_without_the_rolebinding_is_named_with_the_servers_403(
    kube_lab: KubeLab, token: str
) -> None:
    ns = kube_lab.namespace("nobind")
    line = job_namespace.problem(kube_lab.kube_api(token), ns, IMAGE)
    assert line is not None
    assert f"may not create Jobs in namespace {ns!r}" in line and "HTTP 403" in line


def test_a_live_kubernetes_start_refuses_when_its_job_namespace_is_missing(
    kube_lab: KubeLab, token: str
) -> None:
    from types import SimpleNamespace

    from remediation.backends.kubernetes import KubernetesBackend
    from remediation.cli import job_namespace_problem

    missing = f"absent-{uuid.uuid4().hex[:8]}"
    validation = SimpleNamespace(kube_image=IMAGE, kube_namespace=missing)
    backend = KubernetesBackend(kube_lab.kube_api())
    live = SimpleNamespace(
        policy=SimpleNamespace(dry_run=False, validation=validation), backend=backend
    )
    line = job_namespace_problem(live)
    assert line is not None and missing in line
    observing = SimpleNamespace(
        policy=SimpleNamespace(dry_run=True, validation=validation), backend=backend
    )
    assert job_namespace_problem(observing) is None, "observe-first creates no Jobs: no check"
