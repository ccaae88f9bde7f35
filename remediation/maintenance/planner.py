"""Which nodes, in which waves, and what the budgets allow now. Pure: no I/O, no clock.

The budgets are the fault path's (remediation/guards.py: fleet, and per failure domain:
partition, NVLink domain, leaf, rail), counted over every node out of service for any
reason: drained by faults, by someone else, or out for maintenance. A node is admitted only
when the set of nodes out, with it, stays within every budget; when faults alone push the
count over, the run gives back the nodes it has not yet started to operate on.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from common import fabric
from remediation.backends.hostlist import expand
from remediation.guards import budget_limit
from remediation.maintenance.model import SpecError
from remediation.model import NodeView
from remediation.policy import Policy


def select(
    fleet: Sequence[NodeView], sel: Mapping[str, Any], partition: Iterable[str] | None = None
) -> tuple[str, ...]:
    """The nodes a selection names, in the fleet's order. Keys (all given must match):
    ``nodes`` (a list or a hostlist expression), ``partition`` (its members, resolved by the
    caller from the scheduler), and any topology domain kind (``rack``, ``nvlink``, ...)."""
    if not isinstance(sel, Mapping) or not sel:
        raise SpecError("select: name nodes, a partition or a domain (e.g. {rack: r01})")
    known = {n.name for n in fleet}
    chosen = [n.name for n in fleet]
    for key, value in sel.items():
        if key == "nodes":
            wanted = set(_names(value))
            unknown = sorted(wanted - known)
            if unknown:
                raise SpecError(f"select.nodes: unknown to the scheduler: {', '.join(unknown)}")
            chosen = [n for n in chosen if n in wanted]
        elif key == "partition":
            members = set(partition or ())
            if not members:
                raise SpecError(f"select.partition: {value!r} has no node")
            chosen = [n for n in chosen if n in members]
        else:
            inside = {n.name for n in fleet if str(value) in fabric.names(n.domains, str(key))}
            if not inside:
                raise SpecError(f"select.{key}: no node in {key} {value!r} (topology)")
            chosen = [n for n in chosen if n in inside]
    return tuple(chosen)


def _names(value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return tuple(n for part in value.split(",") if part for n in expand(part))
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return tuple(value)
    raise SpecError("select.nodes: a list of names or a hostlist expression")


def _spread_key(policy: Policy, fleet: Mapping[str, NodeView]) -> str | None:
    """The domain kind waves spread over: the first with a budget, else none."""
    return next(iter(sorted(policy.domain_budgets)), None)


def waves(
    nodes: Sequence[str], fleet: Sequence[NodeView], size: int, policy: Policy
) -> tuple[tuple[str, ...], ...]:
    """Nodes in waves of ``size``, round-robin over the budgeted domain kind so that a wave
    takes as few nodes of one domain as it can (a domain budget then rarely holds it up)."""
    views = {n.name: n for n in fleet}
    kind = _spread_key(policy, views)
    groups: dict[str, list[str]] = {}
    for name in nodes:
        view = views.get(name)
        key = min(fabric.names(view.domains, kind)) if view and kind and fabric.names(
            view.domains, kind) else ""  # fmt: skip
        groups.setdefault(key, []).append(name)
    ordered: list[str] = []
    lists = [groups[k] for k in sorted(groups)]
    for i in range(max((len(g) for g in lists), default=0)):
        ordered += [g[i] for g in lists if i < len(g)]
    return tuple(tuple(ordered[i : i + size]) for i in range(0, len(ordered), size))


def violations(out: frozenset[str], fleet: Sequence[NodeView], policy: Policy) -> list[str]:
    """Each budget the set ``out`` of nodes out of service would break (empty: within)."""
    problems = []
    limit = budget_limit(policy.fleet_budget, len(fleet))
    if len(out) > limit:
        problems.append(f"fleet: {len(out)} of {len(fleet)} nodes out (limit {limit})")
    for kind, budget in sorted(policy.domain_budgets.items()):
        members: dict[str, set[str]] = {}
        for n in fleet:
            for name in fabric.names(n.domains, kind):
                members.setdefault(name, set()).add(n.name)
        for name, inside in sorted(members.items()):
            limit = budget_limit(budget, len(inside))
            if len(out & inside) > limit:
                problems.append(
                    f"{kind} {name}: {len(out & inside)} of {len(inside)} nodes out (limit {limit})"
                )
    return problems


def out_now(fleet: Sequence[NodeView], held: Iterable[str]) -> frozenset[str]:
    """Nodes out of service now: by the scheduler's view, plus those gpuwarden holds."""
    return frozenset(n.name for n in fleet if n.out_of_service) | frozenset(held)


def headroom(out: frozenset[str], fleet: Sequence[NodeView], policy: Policy) -> int:
    """How many more nodes the fleet budget lets out now (domain budgets aside)."""
    return max(0, budget_limit(policy.fleet_budget, len(fleet)) - len(out))
