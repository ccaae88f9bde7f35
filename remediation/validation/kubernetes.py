"""Running a validation suite on a cordoned Kubernetes node as a batch/v1 Job.

The Job's pod is bound to the node with ``spec.nodeName`` (that bypasses the scheduler, so
the cordon stays in place for everyone else) and tolerates gpuwarden's quarantine taint
(any effect), nothing else. The suite runs in one container, step after step under
``timeout``; each step's output is framed in the pod log by marker lines, so no shared
storage is needed:

    ===gpuwarden-step 0 begin===
    ...output...
    ===gpuwarden-step 0 rc=0===

Non-blocking like the Slurm runner: :meth:`start`, :meth:`poll`, :meth:`finish` (deletes the
Job; the node stays cordoned: release is the normal release path's business).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from typing import Any

from remediation.backends.base import BackendError
from remediation.backends.kubernetes import TAINT_KEY
from remediation.validation.slurm import SchedulerUnknown
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
    labels = {"app.kubernetes.io/name": "gpuwarden-validation", "gpuwarden.io/node": node}
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "backoffLimit": 0,  # a failed suite is a verdict, not something to retry blindly
            "activeDeadlineSeconds": deadline,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeName": node,
                    "restartPolicy": "Never",
                    "tolerations": [{"key": TAINT_KEY, "operator": "Exists"}],
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
        runs.append(StepRun(None, text) if rc is None else StepRun.exited(rc, text))
    return runs


class KubernetesValidation:
    """``api``: a :class:`~remediation.backends.kubeapi.KubeApi` with the Job calls."""

    def __init__(self, api: Any, namespace: str, image: str, gpus: int = 8) -> None:
        self.api, self.namespace, self.image, self.gpus = api, namespace, image, gpus

    def start(self, node: str, suite: Suite, run_id: str) -> KubeValidationRun:
        name = f"gpuwarden-validate-{run_id}"[:63].rstrip("-")
        body = job_manifest(node, suite, name, self.namespace, self.image, self.gpus)
        status = self.api.create_job(self.namespace, body)
        if status not in (200, 201):
            raise BackendError(f"validation Job for {node}: HTTP {status}")
        return KubeValidationRun(node, self.namespace, name, len(suite.steps))

    def poll(self, run: KubeValidationRun) -> list[StepRun] | None:
        """SchedulerUnknown when the API server does not answer (never "the Job ended")."""
        try:
            job = self.api.read_job(run.namespace, run.job_name)
        except Exception as e:  # a read that failed is unknown; the deadline concludes it
            raise SchedulerUnknown(f"reading Job {run.job_name}: {type(e).__name__}: {e}") from e
        if job is None:
            return [StepRun(None, "")] * run.steps  # deleted behind our back: no result
        st = job.get("status") or {}
        if not (st.get("succeeded") or st.get("failed")):
            return None
        pods = self.api.list_pods_by_label(run.namespace, f"job-name={run.job_name}")
        if not pods:
            return [StepRun(None, "")] * run.steps
        name = str((pods[0].get("metadata") or {}).get("name"))
        return split_log(self.api.read_pod_log(run.namespace, name), run.steps)

    def finish(self, run: KubeValidationRun) -> None:
        self.api.delete_job(run.namespace, run.job_name)
