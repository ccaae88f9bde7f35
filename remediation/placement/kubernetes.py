"""Kubernetes projection of placement tiers: ``marginal`` is a PreferNoSchedule taint
(``gpuwarden.io/marginal``: the scheduler scores the node down, still uses it when nothing
else fits), ``suspect`` a NoSchedule taint (``gpuwarden.io/suspect``; canary and soak
workloads tolerate it); both carry the label ``gpuwarden.io/health-tier``. Foreign taints
are never touched: every patch rewrites the taint list keeping all keys that are not ours.

Fails open by design: PreferNoSchedule only scores, so a stale marginal taint left by a
stopped gpuwarden costs placement preference, never capacity.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from remediation.backends.kubeapi import KubeApi, Obj
from remediation.placement.projection import Reconciled, Repair

TIER_LABEL = "gpuwarden.io/health-tier"
TAINTS = {"marginal": "PreferNoSchedule", "suspect": "NoSchedule"}
OUR_KEYS = {f"gpuwarden.io/{t}" for t in TAINTS}
# node-pool labels of the common providers, first match wins; else one pool per cluster
POOL_LABELS = (
    "karpenter.sh/nodepool",
    "cloud.google.com/gke-nodepool",
    "eks.amazonaws.com/nodegroup",
    "kubernetes.azure.com/agentpool",
    "gpuwarden.io/pool",
)


def _meta(n: Obj) -> dict[str, Any]:
    return n.get("metadata") or {}


def pool_of(n: Obj) -> str:
    labels = _meta(n).get("labels") or {}
    return next((f"{k}={labels[k]}" for k in POOL_LABELS if labels.get(k)), "cluster")


def shown_tier(n: Obj) -> tuple[str | None, str | None]:
    """The tier the node shows now: (by our taint, by our label); None for neutral."""
    taints = (n.get("spec") or {}).get("taints") or []
    ours = [t for t in taints if t.get("key") in OUR_KEYS]
    taint = str(ours[0]["key"]).split("/", 1)[1] if len(ours) == 1 else None
    if taint is not None and ours[0].get("effect") != TAINTS[taint]:
        taint = "edited"
    elif len(ours) > 1:
        taint = "several"
    return taint, (_meta(n).get("labels") or {}).get(TIER_LABEL) or None


def patch_for(n: Obj, tier: str | None) -> Obj:
    """The node patch showing ``tier`` (None: neutral), foreign taints kept as they are."""
    taints = [t for t in (n.get("spec") or {}).get("taints") or [] if t.get("key") not in OUR_KEYS]
    if tier is not None:
        taints.append({"key": f"gpuwarden.io/{tier}", "value": "true", "effect": TAINTS[tier]})
    return {"metadata": {"labels": {TIER_LABEL: tier}}, "spec": {"taints": taints}}


class KubePlacement:
    name = "kubernetes"

    def __init__(self, api: KubeApi) -> None:
        self.api = api

    def groups(self) -> Mapping[str, frozenset[str]]:
        out: dict[str, set[str]] = {}
        for n in self.api.list_nodes():
            out.setdefault(pool_of(n), set()).add(str(_meta(n).get("name")))
        return {g: frozenset(m) for g, m in out.items()}

    def reconcile(self, wanted: Mapping[str, str], dry_run: bool = False) -> Reconciled:
        changes = []
        for n in self.api.list_nodes():
            name, (taint, label) = str(_meta(n).get("name")), shown_tier(n)
            want = wanted.get(name)
            if taint == want and label == want:
                continue
            shown = taint or label
            kind = "restore" if want is None else ("apply" if shown is None else "repair")
            detail = f"taint {taint or 'none'}, label {label or 'none'} -> {want or 'neutral'}"
            if not dry_run:
                self.api.patch_node(name, patch_for(n, want))
            changes.append(Repair(name, kind, detail))
        return Reconciled(tuple(changes))
