"""Slurm projection of placement tiers: a de-preferred node gets a higher ``Weight`` (Slurm
allocates lower weights first), never a drain; the durable record is the node's ``Extra``
field (it survives slurmctld restarts and ``scontrol reconfigure``; a Weight set by scontrol
does not: reconfigure puts slurm.conf's back, so every tick reads back and re-applies).

``plan`` is pure: the node table in, the scontrol updates out. It never lowers a weight it
did not raise, never touches a node drained or weighted by someone else, and restores the
weight slurm.conf gave the node as last seen after a reset.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from remediation.backends import slurmstate
from remediation.backends.base import BackendError
from remediation.backends.runner import Runner, checked
from remediation.model import REASON_PREFIX
from remediation.placement.projection import Reconciled, Repair

WEIGHT_MAX = 4294967279  # below Slurm's INFINITE weight: the node stays allocatable
TAG = "gpuwarden:placement"
_EXTRA = re.compile(rf"^{TAG} tier=(\w+) base=(\d+) weight=(\d+)$")


@dataclass(frozen=True)
class SlurmNode:
    name: str
    weight: int
    extra: str
    partitions: tuple[str, ...]
    out_of_service: bool = False
    reason: str = ""

    @property
    def record(self) -> tuple[str, int, int] | None:
        """(tier, base weight, weight we set) from our Extra record, or None."""
        m = _EXTRA.match(self.extra)
        return (m.group(1), int(m.group(2)), int(m.group(3))) if m else None


@dataclass(frozen=True)
class Change:
    node: str
    kind: str  # apply | repair | restore
    weight: int
    extra: str  # "" clears the record
    detail: str

    def argv(self) -> tuple[str, ...]:
        return (
            "scontrol",
            "update",
            f"NodeName={self.node}",
            f"Weight={self.weight}",
            f"Extra={self.extra}",
        )


def extra(tier: str, base: int, weight: int) -> str:
    return f"{TAG} tier={tier} base={base} weight={weight}"


def _target(n: SlurmNode, nodes: Sequence[SlurmNode], wanted: Mapping[str, str]) -> int:
    """The highest weight of any node not de-preferred in the node's partitions, plus one."""
    peers = [
        m.weight
        for m in nodes
        if m.name not in wanted and m.record is None and set(m.partitions) & set(n.partitions)
    ]
    return min(max(peers, default=n.weight) + 1, WEIGHT_MAX)


def skip_reason(n: SlurmNode, target: int) -> str:
    """Why a wanted node is left alone (someone else's), or ""."""
    if n.record is not None:
        return ""
    if n.out_of_service and not n.reason.startswith(REASON_PREFIX):
        return f"out of service by someone else ({n.reason or 'no reason'})"
    if n.extra:
        return f"Extra holds someone else's record ({n.extra[:60]!r})"
    if n.weight >= target:
        return f"already weighted by someone else (Weight={n.weight} >= {target})"
    return ""


def plan(
    nodes: Sequence[SlurmNode], wanted: Mapping[str, str]
) -> tuple[list[Change], dict[str, str]]:
    """The updates that make the node table show exactly ``wanted`` (node -> tier), and the
    wanted nodes left alone with why."""
    changes, skipped = [], {}
    for n in nodes:
        rec = n.record
        if n.name in wanted:
            tier, target = wanted[n.name], _target(n, nodes, wanted)
            why = skip_reason(n, target)
            if why:
                skipped[n.name] = why
            elif rec is None:
                changes.append(
                    Change(
                        n.name,
                        "apply",
                        target,
                        extra(tier, n.weight, target),
                        f"Weight {n.weight} -> {target}",
                    )
                )
            elif n.weight != rec[2]:  # reset by reconfigure/restart/operator: slurm.conf's now
                changes.append(
                    Change(
                        n.name,
                        "repair",
                        target,
                        extra(tier, n.weight, target),
                        f"Weight read back {n.weight}, expected {rec[2]}",
                    )
                )
            elif target != rec[2] or tier != rec[0]:
                changes.append(
                    Change(
                        n.name,
                        "apply",
                        target,
                        extra(tier, rec[1], target),
                        f"Weight {rec[2]} -> {target} ({tier})",
                    )
                )
        elif rec is not None:
            base = rec[1] if n.weight == rec[2] else n.weight
            changes.append(Change(n.name, "restore", base, "", f"Weight {n.weight} -> {base}"))
    return changes, skipped


def parse_nodes(data: Mapping[str, Any]) -> list[SlurmNode]:
    out = []
    for n in data.get("nodes", []):
        out.append(
            SlurmNode(
                str(n["name"]),
                slurmstate.number(n.get("weight")),
                str(n.get("extra") or ""),
                tuple(str(p) for p in n.get("partitions") or ()),
                slurmstate.out_of_service(n),
                str(n.get("reason") or ""),
            )
        )
    return out


class SlurmPlacement:
    """Reads the node table with sinfo --json and applies a plan with scontrol update."""

    name = "slurm"

    def __init__(self, runner: Runner, timeout: float = 10.0) -> None:
        self.runner, self.timeout = runner, timeout

    def nodes(self) -> list[SlurmNode]:
        try:
            data = json.loads(checked(self.runner, ("sinfo", "--json"), self.timeout))
        except json.JSONDecodeError as e:
            raise BackendError(f"sinfo --json: unreadable output ({e})") from None
        return parse_nodes(data)

    def show_config(self) -> str:
        return checked(self.runner, ("scontrol", "show", "config"), self.timeout)

    def groups(self) -> dict[str, frozenset[str]]:
        groups: dict[str, set[str]] = {}
        for n in self.nodes():
            for p in n.partitions:
                groups.setdefault(p, set()).add(n.name)
        return {g: frozenset(m) for g, m in groups.items()}

    def reconcile(self, wanted: Mapping[str, str], dry_run: bool = False) -> Reconciled:
        changes, skipped = plan(self.nodes(), wanted)
        if not dry_run:
            for c in changes:
                checked(self.runner, c.argv(), self.timeout)
        return Reconciled(tuple(Repair(c.node, c.kind, c.detail) for c in changes), skipped)
