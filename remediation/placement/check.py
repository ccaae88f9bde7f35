"""``--check`` for placement tiers: will the projection have the effect it promises here?

Slurm: node weights override topology-aware selection under ``topology/tree`` (the
scheduler takes the lowest weight first, then topology), so the Weight projection is refused
there unless ``placement.allow_topology_tree``; under ``topology/block`` raising one node
splits its block, so raising every node of a degraded block is offered instead. GPU-scoped
faults stay on the node path on Slurm (no per-device taint). Kubernetes: PreferNoSchedule
is a scoring hint that Kueue's topology-aware scheduling does not read.
"""

from __future__ import annotations

from remediation.backends.base import BackendError
from remediation.placement.config import PlacementPolicy
from remediation.placement.projection import Projection


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
