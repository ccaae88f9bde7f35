"""Start-up check: can remediation create its validation and GPU-reset Jobs where the
policy says they run (validation.kubernetes.namespace)? Asked of the API server with a
server-side dry-run create (dryRun=All): nothing is stored, but a missing namespace (404)
or a missing Role/RoleBinding (403) stops the service at start, naming the namespace,
instead of surfacing as a failed Job at the first quarantine."""

from __future__ import annotations

from typing import Any

from remediation.validation.kubernetes import job_manifest
from remediation.validation.suite import Suite

PROBE_JOB = "gpuwarden-preflight"


def problem(api: Any, namespace: str, image: str) -> str | None:
    """None when a Job like remediation's may be created in ``namespace``; else one line
    saying why not. ``api`` is remediation.backends.kubeapi.OfficialKubeApi."""
    body = job_manifest(
        "gpuwarden-preflight", Suite("preflight", ()), PROBE_JOB, namespace, image, 0
    )
    status, message = api.dry_run_create_job(namespace, body)
    if status in (200, 201):
        return None
    if status == 404:
        why = f"namespace {namespace!r} does not exist: create it (kubectl create namespace {namespace})"
    elif status == 403:
        why = (
            f"this ServiceAccount may not create Jobs in namespace {namespace!r}: apply the "
            "RoleBinding gpuwarden-remediation-validation there"
        )
    else:
        why = f"the API server refused a dry-run Job create in namespace {namespace!r}"
    return f"validation.kubernetes.namespace {namespace}: {why} (HTTP {status}: {message})"
