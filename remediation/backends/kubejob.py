"""A batch/v1 Job bound to one node, the one shape every Job gpuwarden makes shares: the
validation suites' and the GPU reset's (remediation/validation/kubernetes.py,
remediation/gpureset/kubernetes.py) and rolling maintenance's ``kube_job`` operation
(remediation/maintenance/operations.py). Pure: dicts in, dicts out; the callers do the I/O.

Bound with ``spec.template.spec.nodeName``: that bypasses the scheduler, so the node's
cordon stays in place for everyone else, and the pod tolerates gpuwarden's own quarantine
taint (any effect: a NoExecute taint would evict it otherwise), nothing else.
"""

from __future__ import annotations

import copy
import hashlib
import re
from collections.abc import Mapping
from typing import Any

from remediation.backends.kubernetes import TAINT_KEY

Obj = dict[str, Any]
MANAGED_BY = "gpuwarden"  # app.kubernetes.io/managed-by on every Job gpuwarden makes
NODE_LABEL = "gpuwarden.io/node"
# A Job's name is a DNS-1123 subdomain, but the Job controller copies it into its pods'
# ``job-name`` label, whose values stop at 63 characters: a longer name is refused.
MAX_NAME = 63
TOLERATION = {"key": TAINT_KEY, "operator": "Exists"}


def job_name(*parts: object) -> str:
    """A deterministic DNS-1123 name from ``parts`` (lowercased, other characters as
    ``-``); one over 63 characters is cut and ends with a hash of the whole, so two long
    node names never share a Job."""
    full = "-".join(str(p) for p in parts)
    name = re.sub(r"[^a-z0-9.-]+", "-", full.lower()).strip("-.")
    if len(name) <= MAX_NAME:
        return name
    digest = hashlib.sha256(full.encode()).hexdigest()[:10]
    return f"{name[: MAX_NAME - 11].rstrip('-.')}-{digest}"


def pinned(
    body: Mapping[str, Any], node: str, name: str, namespace: str, labels: Mapping[str, str]
) -> Obj:
    """``body`` (a batch/v1 Job, left as it is) copied and bound to ``node``: the name,
    namespace and ``labels`` (over the body's own, on the Job and its pods) set, the pod's
    ``nodeName`` set, gpuwarden's taint tolerated (the body's tolerations kept), restart
    policy ``Never`` and ``backoffLimit`` 0 unless the body says otherwise."""
    job = copy.deepcopy(dict(body))
    ours = {"app.kubernetes.io/managed-by": MANAGED_BY, NODE_LABEL: node, **labels}
    meta = job.setdefault("metadata", {})
    meta.pop("generateName", None)
    meta.update(name=name, namespace=namespace, labels={**(meta.get("labels") or {}), **ours})
    spec = job.setdefault("spec", {})
    spec.setdefault("backoffLimit", 0)
    template = spec.setdefault("template", {})
    tmeta = template.setdefault("metadata", {})
    tmeta["labels"] = {**(tmeta.get("labels") or {}), **ours}
    pod = template.setdefault("spec", {})
    pod["nodeName"] = node
    pod.setdefault("restartPolicy", "Never")
    tolerations = list(pod.get("tolerations") or [])
    if TOLERATION not in tolerations:
        tolerations.append(dict(TOLERATION))
    pod["tolerations"] = tolerations
    return job


def outcome(job: Mapping[str, Any]) -> str:
    """``ok`` (condition Complete), ``failed: <reason>: <message>`` (condition Failed, as
    the Job controller wrote it) or ``running``."""
    for c in (job.get("status") or {}).get("conditions") or []:
        if c.get("status") != "True":
            continue
        if c.get("type") == "Complete":
            return "ok"
        if c.get("type") == "Failed":
            why = ": ".join(str(c[k]) for k in ("reason", "message") if c.get(k))
            return f"failed: {why or 'Job failed'}"[:300]
    return "running"
