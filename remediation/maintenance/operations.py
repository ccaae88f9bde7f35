"""The operation's edge: what is done to an empty node, started without waiting and polled
each tick. A handle is JSON (persisted with the node), so a restarted service finds the
operation again; one it cannot find is ``lost`` and started again (operations must be
safe to repeat: a package install, a firmware flash tool's own idempotence, a reboot).

- ``command``: the operator's argv (``{node}`` replaced), e.g. ``ssh {node} apt-get ...``
  or ``pdsh -w {node} ...``; run detached in its own session (a kill -9 of the service
  does not kill it), its exit code written to a file under the state directory.
- ``slurm_reboot``: ``scontrol reboot ASAP nextstate=DOWN reason=...`` (slurm.conf's
  RebootProgram); done once slurmctld shows the node without its reboot flags.
- ``kube_job``: the operator's batch/v1 Job manifest (``{node}`` replaced in every string),
  created once per node and attempt in its namespace (else the validation Jobs' one) under
  a deterministic name, bound to the node (``nodeName``: the cordon does not stop it) and
  tolerating gpuwarden's taint (:mod:`remediation.backends.kubejob`, as the validation and
  GPU-reset Jobs); done when the Job controller writes its Complete condition, failed with
  its Failed condition's reason and message. A create that answers 409 (a restart between
  the create and the commit of the handle) adopts the Job of that name.
- ``none``: nothing (drain, validate, release: a validation sweep).
"""

from __future__ import annotations

import json
import logging
import math
import os
import shlex
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol

from remediation.backends import kubejob
from remediation.backends.base import BackendError, Unavailable
from remediation.backends.runner import Runner
from remediation.maintenance.model import Operation


class Operator(Protocol):
    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]: ...

    def poll(self, handle: dict[str, Any]) -> str:
        """``running``, ``ok``, ``failed: <why>`` or ``lost``."""
        ...


class NoOperation:
    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
        return {"kind": "none"}

    def poll(self, handle: dict[str, Any]) -> str:
        return "ok"


class CommandOperation:
    def __init__(self, argv: tuple[str, ...], state_dir: Path) -> None:
        self.argv, self.state_dir = argv, state_dir
        self.children: dict[int, subprocess.Popen[bytes]] = {}  # reaped when polled

    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
        d = self.state_dir / f"run{run_id}" / f"{node}.{attempt}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "rc").unlink(missing_ok=True)
        argv = [a.replace("{node}", node) for a in self.argv]
        out, rc = shlex.quote(str(d / "out")), shlex.quote(str(d / "rc"))
        script = f'"$@" >{out} 2>&1; echo $? >{rc}.tmp && mv {rc}.tmp {rc}'
        p = subprocess.Popen(["sh", "-c", script, "sh", *argv], start_new_session=True,
                             stdin=subprocess.DEVNULL)  # fmt: skip
        self.children[p.pid] = p
        return {"kind": "command", "dir": str(d), "pid": p.pid}

    def poll(self, handle: dict[str, Any]) -> str:
        d = Path(handle["dir"])
        child = self.children.get(int(handle["pid"]))
        if child is not None and child.poll() is not None:
            self.children.pop(int(handle["pid"]), None)
        try:
            rc = int((d / "rc").read_text().strip())
        except (OSError, ValueError):
            return "running" if _alive(int(handle["pid"])) else "lost"
        if rc == 0:
            return "ok"
        tail = (
            (d / "out").read_text(errors="replace")[-200:].strip() if (d / "out").exists() else ""
        )
        return f"failed: exit {rc}" + (f": {tail}" if tail else "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SlurmReboot:
    def __init__(self, runner: Runner, reason: str, timeout: float = 15.0) -> None:
        self.runner, self.reason, self.timeout = runner, reason, timeout

    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
        r = self.runner.run(["scontrol", "reboot", "ASAP", "nextstate=DOWN",
                             f"reason={self.reason}", node], self.timeout)  # fmt: skip
        if r.rc != 0:
            raise RuntimeError(f"scontrol reboot {node}: rc {r.rc}: {r.stderr.strip()[:200]}")
        return {"kind": "slurm_reboot", "node": node, "asked": True}

    def poll(self, handle: dict[str, Any]) -> str:
        r = self.runner.run(["scontrol", "show", "-o", "node", handle["node"]], self.timeout)
        if r.rc != 0:
            return "running"  # slurmctld did not answer: not an outcome
        state = next((w[6:] for w in r.stdout.split() if w.startswith("State=")), "")
        return "running" if "REBOOT" in state else "ok"


log = logging.getLogger("gpuwarden.remediation")
APP = "gpuwarden-maintenance"
RUN_LABEL = "gpuwarden.io/maintenance-run"
KEEP_S = 86400  # ttlSecondsAfterFinished unless the manifest says: a day to read a failure


def fill(value: Any, node: str) -> Any:
    """``value`` with ``{node}`` replaced by the node's name in every string."""
    if isinstance(value, str):
        return value.replace("{node}", node)
    if isinstance(value, Mapping):
        return {k: fill(v, node) for k, v in value.items()}
    if isinstance(value, list):
        return [fill(v, node) for v in value]
    return value


class KubeJob:
    """``api``: a :class:`~remediation.backends.kubeapi.KubeApi` with the Job calls;
    ``namespace``: where the Job runs when its manifest names none."""

    def __init__(
        self, api: Any, manifest: Mapping[str, Any], namespace: str, timeout_s: float
    ) -> None:
        self.api, self.manifest, self.timeout_s = api, manifest, timeout_s
        self.namespace = str((manifest.get("metadata") or {}).get("namespace") or namespace)

    def body(self, run_id: int | str, node: str, attempt: int) -> dict[str, Any]:
        name = kubejob.job_name("gpuwarden-maint", run_id, node, attempt)
        labels = {"app.kubernetes.io/name": APP, RUN_LABEL: str(run_id)}
        job = kubejob.pinned(fill(self.manifest, node), node, name, self.namespace, labels)
        # the Job controller ends it by the run's timeout (the machine fails the node then)
        job["spec"].setdefault("activeDeadlineSeconds", max(1, math.ceil(self.timeout_s)))
        job["spec"].setdefault("ttlSecondsAfterFinished", KEEP_S)
        return job

    def check(self, node: str) -> str | None:
        """A server-side dry run of ``node``'s Job (nothing stored): None when the API
        server would create it, else why not (the manifest, the namespace, RBAC, admission)."""
        dry_run = getattr(self.api, "dry_run_create_job", None)
        if dry_run is None:
            return None
        body = self.body("plan", node, 0)
        try:
            status, message = self.api.dry_run_create_job(self.namespace, body)
        except Unavailable as e:
            return f"the Kubernetes API server did not answer a dry-run create: {e}"
        if status in (200, 201):
            return None
        return (f"the API server refuses {node}'s Job in namespace {self.namespace!r} "
                f"(a dry run, nothing created): HTTP {status}: {message}")  # fmt: skip

    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
        body = self.body(run_id, node, attempt)
        name = body["metadata"]["name"]
        handle = {"kind": "kube_job", "namespace": self.namespace, "name": name, "node": node}
        try:
            status = self.api.create_job(self.namespace, body)
        except Unavailable as e:  # made or not: the poll reads it (404: lost, created again)
            log.warning("maintenance: creating Job %s for %s: %s", name, node, e)
            return handle
        if status == 409:  # a restart before the handle was committed: that Job is ours
            try:
                there = self.api.read_job(self.namespace, name)
            except Unavailable:
                return handle
            labels = ((there or {}).get("metadata") or {}).get("labels") or {}
            if there is not None and labels.get(kubejob.NODE_LABEL) != node:
                raise BackendError(f"Job {self.namespace}/{name} exists for another node")
        elif status not in (200, 201):
            raise BackendError(f"Job {self.namespace}/{name} for {node}: HTTP {status}")
        return handle

    def poll(self, handle: dict[str, Any]) -> str:
        try:
            job = self.api.read_job(handle["namespace"], handle["name"])
        except Unavailable:
            return "running"  # the API server did not answer: not an outcome
        except Exception as e:  # the client's ApiException: a refusal is an outcome
            status = getattr(e, "status", None)
            if isinstance(status, int) and 400 <= status < 500 and status != 429:
                return f"failed: reading Job {handle['name']}: HTTP {status}"
            log.warning("maintenance: reading Job %s: %s", handle["name"], e)
            return "running"
        if job is None:
            return "lost"  # deleted: started again (operations must be safe to repeat)
        return kubejob.outcome(job)


def make(
    op: Operation,
    state_dir: Path,
    runner: Runner | None,
    reason: str,
    kube: Any = None,
    namespace: str = "gpuwarden",
) -> Operator:
    """``kube``: the Kubernetes API (kube_job), None elsewhere; ``namespace``: where a Job
    whose manifest names none runs (the policy's validation.kubernetes.namespace)."""
    if op.kind == "command":
        return CommandOperation(op.argv, state_dir)
    if op.kind == "slurm_reboot":
        if runner is None:
            raise ValueError("operation slurm_reboot needs the Slurm backend")
        return SlurmReboot(runner, reason)
    if op.kind == "kube_job":
        if kube is None:
            raise ValueError("operation kube_job needs the Kubernetes backend (live)")
        return KubeJob(kube, op.job, namespace, op.timeout_s)
    return NoOperation()


def dumps(handle: dict[str, Any]) -> str:
    return json.dumps(handle, sort_keys=True)
