"""``--check`` for placement tiers: will the projection have the effect it promises here?

Slurm: node weights override topology-aware selection under ``topology/tree`` (the
scheduler takes the lowest weight first, then topology), so the Weight projection is refused
there unless ``placement.allow_topology_tree``; under ``topology/block`` raising one node
splits its block, so raising every node of a degraded block is offered instead. GPU-scoped
faults stay on the node path on Slurm (no per-device taint). Kubernetes: PreferNoSchedule
is a scoring hint that Kueue's topology-aware scheduling does not read.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from remediation.backends.base import BackendError
from remediation.placement.config import PlacementPolicy
from remediation.placement.projection import Projection

if TYPE_CHECKING:
    from remediation.policy import Policy


def topology_plugin(config_text: str) -> str:
    """``TopologyPlugin`` from ``scontrol show config`` ("" when absent)."""
    for line in config_text.splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "TopologyPlugin":
            return value.strip()
    return ""


def slurm_lines(plugin: str, p: PlacementPolicy, live: bool) -> tuple[list[str], list[str]]:
    lines = ["placement: GPU-scoped faults take the node path on Slurm (no per-device taint)"]
    if plugin == "topology/tree" and not p.allow_topology_tree:
        why = (
            "placement: Slurm TopologyPlugin=topology/tree: node Weight overrides topology-aware "
            "placement, so the Weight projection is refused (set placement.allow_topology_tree "
            "to accept it)"
        )
        return (lines, [why]) if live else ([*lines, f"warning: {why}"], [])
    if plugin == "topology/block":
        lines.append(
            "placement: Slurm TopologyPlugin=topology/block: raising one node splits its "
            "block; consider de-preferring every node of a degraded block"
        )
    lines.append(f"placement: Slurm Weight + Extra projection ({plugin or 'no topology plugin'})")
    return lines, []


def kube_lines() -> list[str]:
    return [
        "placement: Kubernetes taints gpuwarden.io/marginal:PreferNoSchedule, "
        "gpuwarden.io/suspect:NoSchedule and label gpuwarden.io/health-tier",
        "warning: placement: PreferNoSchedule only scores nodes; Kueue topology-aware "
        "scheduling ignores it (use tier suspect, NoSchedule, or a node affinity on "
        "gpuwarden.io/health-tier NotIn [marginal] in the workload)",
    ]


def check(projection: Projection, p: PlacementPolicy, live: bool) -> tuple[list[str], list[str]]:
    """(lines to print, problems that stop a live start)."""
    if projection.name == "slurm":
        try:
            text = projection.show_config()  # type: ignore[attr-defined]
        except (BackendError, OSError) as e:
            return [f"warning: placement: cannot read the Slurm config: {e}"], []
        lines, problems = slurm_lines(topology_plugin(text), p, live)
        return lines, problems
    if projection.name == "kubernetes":
        return kube_lines(), []
    return ["placement: no scheduler; tiers are recorded only"], []


def gpu_lines(pol: Policy, backend: Any) -> list[str]:
    """One GPU out and the reset rung on Kubernetes: will they happen here, or does the node
    path stay? ``backend``: the service's (the dry-run one reads through its ``source``)."""
    kube = backend if backend.name == "kubernetes" else getattr(backend, "source", None)
    on_kube = kube is not None and kube.name == "kubernetes"
    lines = []
    if pol.dra_isolation:
        lines.append(_dra_line(kube, pol.dry_run) if on_kube else
                     "warning: kubernetes.dra_isolation: not on Kubernetes here; GPU-scoped "
                     "faults take the node path")  # fmt: skip
    resets = any("reset_gpu" in r.allow for r in pol.rules)
    if on_kube and resets and not pol.validation.kube_image:
        lines.append(
            "warning: reset_gpu: no validation.kubernetes.image to run the reset Job with "
            "(it needs nvidia-smi); the rung falls back to reboot"
        )
    return lines


def _dra_line(kube: Any, dry_run: bool) -> str:
    try:
        nodes = kube.dra.nodes()
    except Exception as e:  # --check observes: a failed read is a warning, not a stop
        return f"warning: kubernetes.dra_isolation: cannot read ResourceSlices ({e})"
    if not nodes:
        return (
            f"warning: kubernetes.dra_isolation: no ResourceSlice of driver {kube.dra.driver} "
            "(GPUs are not allocated through DRA here): GPU-scoped faults take the node path"
        )
    how = "previewed as DeviceTaintRules with effect None (dry-run)" if dry_run else "tainted"
    return (
        f"placement: one GPU out through DRA on {len(nodes)} node(s) ({how}); nodes without "
        f"{kube.dra.driver} ResourceSlices take the node path"
    )
