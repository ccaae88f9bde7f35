"""Reboot on Kubernetes through medik8s Self Node Remediation (an existing reboot operator).

gpuwarden does not reboot nodes itself. When the executor's reboot step runs (the node is
already cordoned, tainted and empty), this creates a ``SelfNodeRemediation`` named after
the node, in the namespace of the operator's ``SelfNodeRemediationTemplate`` and with that
template's strategy; the operator's agent on the node reboots it (and, with the
OutOfServiceTaint/ResourceDeletion strategies, clears its workloads). A second request while
one exists is a no-op, but not while the one that exists is being deleted (the operator's
finalizer holds it after a release): that answers the same 409, and the reboot fails so the
executor asks again once it is gone, instead of calling it requested. On release gpuwarden deletes the CR it created (only one carrying its
``managed-by`` label), as Node Health Check would once the node is healthy.

Without the operator (no template found) the reboot fails with a clear reason instead of
being reported as done. RBAC: deploy/kubernetes/base/remediation-rbac.yaml.
"""

from __future__ import annotations

from remediation.backends.base import BackendError
from remediation.backends.kubeapi import KubeApi, Obj

GROUP, VERSION = "self-node-remediation.medik8s.io", "v1alpha1"
TEMPLATES, REMEDIATIONS = "selfnoderemediationtemplates", "selfnoderemediations"
MANAGED_BY = "app.kubernetes.io/managed-by"
REASON = "gpuwarden.io/reason"


def _meta(o: Obj) -> Obj:
    return dict(o.get("metadata") or {})


def template(api: KubeApi) -> Obj | None:
    """The operator's template (the automatic-strategy one when there are several)."""
    found = sorted(api.list_custom(GROUP, VERSION, TEMPLATES), key=lambda t: _meta(t)["name"])
    auto = [t for t in found if "automatic" in _meta(t)["name"]]
    return (auto or found)[0] if found else None


def request_reboot(api: KubeApi, node: str, reason: str) -> str:
    tpl = template(api)
    if tpl is None:
        raise BackendError(
            "reboot on Kubernetes goes through medik8s Self Node Remediation, and no "
            "SelfNodeRemediationTemplate was found (install the operator; docs/deploy.md)"
        )
    namespace = str(_meta(tpl)["namespace"])
    spec = dict(((tpl.get("spec") or {}).get("template") or {}).get("spec") or {})
    body = {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": "SelfNodeRemediation",
        "metadata": {
            "name": node,
            "namespace": namespace,
            "labels": {MANAGED_BY: "gpuwarden"},
            "annotations": {REASON: reason},
        },
        "spec": spec or {"remediationStrategy": "Automatic"},
    }
    status = api.create_custom(GROUP, VERSION, namespace, REMEDIATIONS, body)
    if status == 409:
        if _being_deleted(api, namespace, node):  # the last one's finalizer still holds it
            raise BackendError(
                f"SelfNodeRemediation {namespace}/{node} from an earlier reboot is still being "
                "deleted (the operator's finalizer holds it); the reboot is asked again later"
            )
        return f"reboot already requested (SelfNodeRemediation {namespace}/{node})"
    if status not in (200, 201):
        raise BackendError(f"SelfNodeRemediation {namespace}/{node}: HTTP {status}")
    return f"reboot requested from medik8s (SelfNodeRemediation {namespace}/{node})"


def _being_deleted(api: KubeApi, namespace: str, node: str) -> bool:
    for cr in api.list_custom(GROUP, VERSION, REMEDIATIONS):
        meta = _meta(cr)
        if (meta.get("namespace"), meta.get("name")) == (namespace, node):
            return bool(meta.get("deletionTimestamp"))
    return False


def clear(api: KubeApi, node: str) -> bool:
    """Delete the SelfNodeRemediation gpuwarden created for ``node``; True when one was."""
    for cr in api.list_custom(GROUP, VERSION, REMEDIATIONS):
        meta = _meta(cr)
        if meta.get("name") == node and (meta.get("labels") or {}).get(MANAGED_BY) == "gpuwarden":
            api.delete_custom(GROUP, VERSION, str(meta["namespace"]), REMEDIATIONS, node)
            return True
    return False
