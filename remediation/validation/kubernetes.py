"""Running a validation suite on a cordoned Kubernetes node as a batch/v1 Job.

The Job's pod is bound to the node with ``spec.nodeName`` (that bypasses the scheduler, so
the cordon stays in place for everyone else) and tolerates gpuwarden's quarantine taint
(any effect), nothing else: :func:`remediation.backends.kubejob.pinned`, shared with the
GPU reset's Job and rolling maintenance's ``kube_job`` operation. The suite runs in one container, step after step under
``timeout``; each step's output is framed in the pod log by marker lines, so no shared
storage is needed:

    ===gpuwarden-step 0 begin===
    ...output...
    ===gpuwarden-step 0 rc=0===

Non-blocking like the Slurm runner: :meth:`start`, :meth:`poll`, :meth:`finish`. Finishing
mirrors the Slurm stop: the node cordoned and tainted by gpuwarden again if anyone lifted
it (unless the run ended in a release), the Job and its pods deleted, then all of it read
back; it raises until the API server shows the Job and its pods gone and the node still
ours, and the caller (:mod:`remediation.validation.release`) retries it every tick and
pages after a few tries. Release is the normal release path's business, never this one's.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any, Protocol

from remediation.backends import kubejob
from remediation.backends.base import BackendError
from remediation.backends.kubernetes import TAINT_KEY
from remediation.model import REASON_PREFIX
from remediation.validation.slurm import SchedulerUnknown, SuiteCancelled
from remediation.validation.suite import StepRun, Suite

_BEGIN = re.compile(r"^===gpuwarden-step (\d+) begin===$")
_END = re.compile(r"^===gpuwarden-step (\d+) rc=(\d+)===$")


@dataclass(frozen=True)
class KubeValidationRun:
    node: str
    namespace: str
    job_name: str
    steps: int


def script(suite: Suite) -> str:
    lines = []
    for i, step in enumerate(suite.steps):
        cmd = " ".join(shlex.quote(a) for a in step.command)
        lines.append(f"echo '===gpuwarden-step {i} begin==='")
        lines.append(f"timeout -k 10 {step.timeout_s:g} {cmd} 2>&1; rc=$?")
        lines.append(f'echo; echo "===gpuwarden-step {i} rc=$rc==="')
    return "\n".join(lines) + "\n"


def job_manifest(
    node: str, suite: Suite, name: str, namespace: str, image: str, gpus: int
) -> dict[str, Any]:
    deadline = int(sum(s.timeout_s + 15 for s in suite.steps)) + 60
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "spec": {
            "backoffLimit": 0,  # a failed suite is a verdict, not something to retry blindly
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "spec": {
                    "containers": [
                        {
                            "name": "suite",
                            "image": image,
                            "command": ["/bin/sh", "-c", script(suite)],
                            "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                        }
                    ],
                },
            },
        },
    }
    labels = {"app.kubernetes.io/name": "gpuwarden-validation"}
    return kubejob.pinned(body, node, name, namespace, labels)


def split_log(log: str, steps: int) -> list[StepRun]:
    """The pod log cut back into one StepRun per step; a step with no end marker has no
    result (``exit_code`` None: it did not finish), never a pass."""
    out: dict[int, list[str]] = {}
    codes: dict[int, int] = {}
    current: int | None = None
    for line in log.splitlines():
        m = _BEGIN.match(line)
        if m:
            current = int(m.group(1))
            out[current] = []
            continue
        m = _END.match(line)
        if m:
            codes[int(m.group(1))] = int(m.group(2))
            current = None
            continue
        if current is not None:
            out[current].append(line)
    runs = []
    for i in range(steps):
        text = "\n".join(out.get(i, [])) + "\n"
        rc = codes.get(i)
        if i not in out and rc is None:
            runs.append(StepRun.no_result())  # never began: the pod ended before it
        else:
            runs.append(StepRun(None, text) if rc is None else StepRun.exited(rc, text))
    return runs


class Cordon(Protocol):
    """What the stop needs of the Kubernetes backend: take the node out, read it back."""

    def take_out(self, node: str, reason: str, evict: bool) -> str: ...

    def is_taken_out(self, node: str) -> bool: ...


class TaintedCordon:
    """The backend's cordon, read back with gpuwarden's quarantine taint too: a node
    uncordoned, or only untainted, behind our back is not "out by gpuwarden" (the taint is
    what keeps DaemonSet-style pods that ignore ``unschedulable`` off it)."""

    def __init__(self, backend: Any) -> None:  # remediation.backends.kubernetes.KubernetesBackend
        self.backend = backend

    def take_out(self, node: str, reason: str, evict: bool) -> str:
        return str(self.backend.take_out(node, reason, evict))

    def is_taken_out(self, node: str) -> bool:
        if not self.backend.is_taken_out(node):
            return False
        spec = (self.backend.api.read_node(node) or {}).get("spec") or {}
        return any(t.get("key") == TAINT_KEY for t in spec.get("taints") or [])


class KubernetesValidation:
    """``api``: a :class:`~remediation.backends.kubeapi.KubeApi` with the Job calls;
    ``cordon``: the backend that keeps the node out (None: the node is not checked)."""

    def __init__(
        self, api: Any, namespace: str, image: str, gpus: int = 8, cordon: Cordon | None = None
    ) -> None:
        self.api, self.namespace, self.image, self.gpus = api, namespace, image, gpus
        self.cordon = cordon

    def start(self, node: str, suite: Suite, run_id: str) -> KubeValidationRun:
        name = f"gpuwarden-validate-{run_id}"[:63].rstrip("-")
        body = job_manifest(node, suite, name, self.namespace, self.image, self.gpus)
        status = self.api.create_job(self.namespace, body)
        if status not in (200, 201):
            raise BackendError(f"validation Job for {node}: HTTP {status}")
        return KubeValidationRun(node, self.namespace, name, len(suite.steps))

    def poll(self, run: KubeValidationRun) -> list[StepRun] | None:
        """SchedulerUnknown when the API server does not answer (never "the Job ended");
        SuiteCancelled when the Job was deleted by someone else."""
        try:
            job = self.api.read_job(run.namespace, run.job_name)
        except Exception as e:  # a read that failed is unknown; the deadline concludes it
            raise SchedulerUnknown(f"reading Job {run.job_name}: {type(e).__name__}: {e}") from e
        if job is None:  # deleted behind our back (gpuwarden deletes only concluded runs)
            raise SuiteCancelled(f"validation Job {run.job_name} was deleted outside gpuwarden")
        st = job.get("status") or {}
        if not (st.get("succeeded") or st.get("failed")):
            return None
        pods = self.api.list_pods_by_label(run.namespace, f"job-name={run.job_name}")
        if not pods:
            return [StepRun.no_result()] * run.steps
        name = str((pods[0].get("metadata") or {}).get("name"))
        return split_log(self.api.read_pod_log(run.namespace, name), run.steps)

    def finish(self, run: KubeValidationRun, verdict: str | None = "stopped") -> None:
        """Keep the node out (``verdict`` None: it was released, left alone), delete the
        Job and its pods, read all of it back; BackendError until the API server confirms
        (the caller retries each tick). A read that fails raises too: never "gone"."""
        node_ok = verdict is None or self.cordon is None or self.cordon.is_taken_out(run.node)
        if not node_ok:  # someone lifted our cordon meanwhile: out again, first
            self.cordon.take_out(  # type: ignore[union-attr]
                run.node, f"{REASON_PREFIX} validation {verdict}"[:200], False
            )
        # Background propagation: the garbage collector deletes the Job's pods. gpuwarden
        # never deletes pods in its namespace itself (its Role grants no pod delete there).
        try:
            self.api.delete_job(run.namespace, run.job_name)
        except Exception as e:  # the client's ApiException: status and reason, said plainly
            status = getattr(e, "status", None)
            said = f"HTTP {status} {getattr(e, 'reason', '') or ''}".strip() if status else str(e)
            raise BackendError(f"validation Job {run.job_name} not deleted: {said}") from e
        if self.api.read_job(run.namespace, run.job_name) is not None:
            raise BackendError(f"validation Job {run.job_name} still there")
        left = self.api.list_pods_by_label(run.namespace, f"job-name={run.job_name}")
        if left:
            names = ", ".join(str((p.get("metadata") or {}).get("name")) for p in left)
            raise BackendError(
                f"pods of Job {run.job_name} still there (the garbage collector deletes "
                f"them): {names}"
            )
        if (
            verdict is not None
            and self.cordon is not None
            and not self.cordon.is_taken_out(run.node)
        ):
            raise BackendError(f"node {run.node} not cordoned by gpuwarden after the validation")
