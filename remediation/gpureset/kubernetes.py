"""The reset job on Kubernetes: the reset suite (``job.suite``) as a privileged batch/v1 Job
bound to the node, run and read back by the validation suites' machinery
(:mod:`remediation.validation.kubernetes`: the same script with step markers, the same pod
log split, the same fail-closed poll).

Differences from a validation suite's Job, and why:

- ``privileged`` with ``NVIDIA_VISIBLE_DEVICES=all`` and no ``nvidia.com/gpu`` request:
  resetting a GPU needs the device nodes of every GPU (``nvidia-smi -r`` and the
  persistence-mode switch), and a faulted GPU is one the device plugin may report unhealthy,
  so a pod requesting it would be refused admission by the kubelet.
- The Job is named after the action (``gpuwarden-reset-<action id>``), so a restart that
  lost the answer to its create finds the Job it made (HTTP 409) instead of making another.

Non-blocking, the interface the saga (``saga.py``) drives: :meth:`start`, :meth:`poll`,
:meth:`cancel` (a hung reset: the Job and its pod deleted), :meth:`finish` (the Job
deleted; the node stays cordoned: release is the normal release path's business).
"""

from __future__ import annotations

from typing import Any

from remediation.backends.base import BackendError
from remediation.validation.kubernetes import (
    KubernetesValidation,
    KubeValidationRun,
    job_manifest,
)
from remediation.validation.suite import StepRun, Suite

APP = "gpuwarden-gpu-reset"


def reset_manifest(node: str, suite: Suite, name: str, namespace: str, image: str) -> Any:
    body = job_manifest(node, suite, name, namespace, image, 0)
    pod = body["spec"]["template"]
    for meta in (body["metadata"], pod["metadata"]):
        meta["labels"]["app.kubernetes.io/name"] = APP
    [c] = pod["spec"]["containers"]
    c["name"] = "reset"
    del c["resources"]  # no GPU request: see the module docstring
    c["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
    c["securityContext"] = {"privileged": True}
    return body


class KubernetesReset:
    """``api``: a :class:`~remediation.backends.kubeapi.KubeApi` with the Job calls."""

    def __init__(self, api: Any, namespace: str, image: str) -> None:
        self.api, self.namespace, self.image = api, namespace, image
        self.suites = KubernetesValidation(api, namespace, image, 0)

    def start(self, node: str, suite: Suite, run_id: str, drain_reason: str) -> KubeValidationRun:
        """Create the Job; one already there under this action's name is the one a process
        killed before it saved the handle made (adopted, not made twice)."""
        name = f"gpuwarden-{run_id}"[:63].rstrip("-")
        status = self.api.create_job(
            self.namespace, reset_manifest(node, suite, name, self.namespace, self.image)
        )
        if status not in (200, 201, 409):
            raise BackendError(f"GPU reset Job for {node}: HTTP {status} ({drain_reason})")
        return KubeValidationRun(node, self.namespace, name, len(suite.steps))

    def run_from(self, detail: dict[str, Any]) -> KubeValidationRun:
        """The handle the saga journaled, back."""
        return KubeValidationRun(**detail)

    def poll(self, run: KubeValidationRun) -> list[StepRun] | None:
        return self.suites.poll(run)

    def cancel(self, run: KubeValidationRun) -> None:
        self.suites.finish(run)  # the Job deleted, its pod with it (propagation Background)

    def finish(self, run: KubeValidationRun, word: str) -> None:
        self.suites.finish(run)
