"""The shipped manifests on the lab's real server: what `kubectl apply -k` makes of
deploy/kubernetes/ (rendered by the lab's kubectl, applied server-side), and the tokens of
the ServiceAccounts it creates. Tests of a component's Kubernetes calls use that
component's token, so a call its Role does not grant fails them (403)."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.kubelab import KubeLab, sid_binary

Obj = dict[str, Any]
DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "kubernetes"
NAMESPACE = "gpuwarden"  # the base's namespace (kustomization.yaml)
REMEDIATION_SA = "gpuwarden-remediation"
RBAC_KINDS = {"Namespace", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role",
              "RoleBinding"}  # fmt: skip


def kustomize(path: Path) -> list[Obj]:
    """`kubectl kustomize path`: the objects `kubectl apply -k path` would send."""
    out = subprocess.run(
        [sid_binary("kubectl"), "kustomize", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def apply_remediation_rbac(lab: KubeLab, job_namespaces: list[str]) -> str:
    """The base's namespace, ServiceAccounts and RBAC, and the job-namespace RoleBinding in
    each of ``job_namespaces`` (as `kustomize edit set namespace` would), applied with
    server-side apply; returns the remediation ServiceAccount's token."""
    lab.apply_yaml([d for d in kustomize(DEPLOY / "base") if d["kind"] in RBAC_KINDS])
    job_rbac = [d for d in kustomize(DEPLOY / "job-namespace") if d["kind"] in RBAC_KINDS]
    for ns in job_namespaces:
        for d in job_rbac:
            lab.apply_yaml([{**d, "metadata": {**d["metadata"], "namespace": ns}}])
    tr = lab.http.post(
        f"/api/v1/namespaces/{NAMESPACE}/serviceaccounts/{REMEDIATION_SA}/token",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
         "spec": {"expirationSeconds": 3600}},
    )  # fmt: skip
    return str(tr["status"]["token"])


def granted(lab: KubeLab, user_namespace: str, sa: str) -> set[tuple[str, str, str]]:
    """(apiGroup, resource[/subresource], verb) every Role and ClusterRole bound to the
    ServiceAccount grants, as the server holds them (wildcards are not used by gpuwarden's
    roles and are reported as such)."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    subject = {"kind": "ServiceAccount", "name": sa, "namespace": user_namespace}
    roles: list[Obj] = []
    for b in lab.http.get(f"{rbac}/clusterrolebindings").get("items") or []:
        if subject in [_subject(s) for s in b.get("subjects") or []]:
            roles.append(lab.http.get(f"{rbac}/clusterroles/{b['roleRef']['name']}"))
    for b in lab.http.get(f"{rbac}/rolebindings").get("items") or []:
        if subject not in [_subject(s) for s in b.get("subjects") or []]:
            continue
        ref, ns = b["roleRef"], b["metadata"]["namespace"]
        path = (
            f"{rbac}/clusterroles/{ref['name']}"
            if ref["kind"] == "ClusterRole"
            else f"{rbac}/namespaces/{ns}/roles/{ref['name']}"
        )
        roles.append(lab.http.get(path))
    out = set()
    for role in roles:
        for rule in role.get("rules") or []:
            for g in rule.get("apiGroups") or []:
                for r in rule.get("resources") or []:
                    for v in rule.get("verbs") or []:
                        out.add((g or "core", r, v))
    return out


def _subject(s: Obj) -> Obj:
    return {"kind": s.get("kind"), "name": s.get("name"), "namespace": s.get("namespace")}


def used(events: list[Obj]) -> dict[tuple[str, str, str], set[int]]:
    """(apiGroup, resource[/subresource], verb) -> the HTTP codes answered, from audit
    events (resource requests only; discovery is every authenticated user's)."""
    out: dict[tuple[str, str, str], set[int]] = {}
    for e in events:
        ref = e.get("objectRef")
        if not ref or not ref.get("resource"):
            continue
        res = ref["resource"] + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        key = (ref.get("apiGroup") or "core", res, e["verb"])
        out.setdefault(key, set()).add(int((e.get("responseStatus") or {}).get("code", 0)))
    return out
