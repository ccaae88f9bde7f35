"""Kubernetes projection of placement tiers: ``marginal`` is a PreferNoSchedule taint
(``gpuwarden.io/marginal``: the scheduler scores the node down, still uses it when nothing
else fits), ``suspect`` a NoSchedule taint (``gpuwarden.io/suspect``; canary and soak
workloads tolerate it); both carry the label ``gpuwarden.io/health-tier``. Foreign taints
are never touched: the taints change by a JSON patch (RFC 6902) of gpuwarden's own entries
only, each tested where it was read before it is removed, so a taint someone else adds at
the same moment (a cordon's quarantine taint) is kept; a patch whose test fails (the list
moved under it) is rejected whole, and the node is read again and patched again.

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


TRIES = 3  # a rejected patch (the taints moved since the read): read again, patch again


def _taint(tier: str) -> Obj:
    return {"key": f"gpuwarden.io/{tier}", "value": "true", "effect": TAINTS[tier]}


def taint_ops(n: Obj, tier: str | None) -> list[Obj]:
    """The JSON patch that makes the node's taints show ``tier`` (None: neutral), touching
    only ours: each of ours tested at its index and removed (highest index first), ours
    appended. A node read without a taint list gets one only if its spec is still as read."""
    spec = n.get("spec") or {}
    taints = spec.get("taints") or []
    if not taints:
        if tier is None:
            return []
        return [
            {"op": "test", "path": "/spec", "value": spec},
            {"op": "add", "path": "/spec/taints", "value": [_taint(tier)]},
        ]
    ops: list[Obj] = []
    for i in reversed(range(len(taints))):
        if taints[i].get("key") in OUR_KEYS:
            ops.append({"op": "test", "path": f"/spec/taints/{i}", "value": taints[i]})
            ops.append({"op": "remove", "path": f"/spec/taints/{i}"})
    if tier is not None:
        ops.append({"op": "add", "path": "/spec/taints/-", "value": _taint(tier)})
    return ops


def label_patch(tier: str | None) -> Obj:
    """A merge patch of our label alone (None removes it); other labels are kept."""
    return {"metadata": {"labels": {TIER_LABEL: tier}}}


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
                self._show(name, n, want)
            changes.append(Repair(name, kind, detail))
        return Reconciled(tuple(changes))

    def _show(self, name: str, n: Obj, want: str | None) -> None:
        """Our taint, then our label, as ``want``; a rejected taint patch is planned again
        from a fresh read (TRIES in all, then the error: the tick retries)."""
        for attempt in range(TRIES):
            if shown_tier(n)[0] == want:
                break
            try:
                self.api.patch_node(name, taint_ops(n, want))
                break
            except Exception:
                if attempt == TRIES - 1:
                    raise
                n = self.api.read_node(name) or n
        if shown_tier(n)[1] != want:
            self.api.patch_node(name, label_patch(want))
