"""`gpuwarden-remediation --check`: what the policy's budgets mean on this topology.

A budget is ``min(max_nodes, floor(max_fraction x size))``; on a small failure domain that
can be 0, which silently denies every disruptive action on its nodes. The check prints each
domain's effective limit and fails on a limit of 0 unless the budget says ``allow_zero:
true``. Pure: policy and topology in, lines and problems out.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from remediation.guards import budget_limit
from remediation.policy import Policy


def domain_sizes(topology: Mapping[str, Mapping[str, str]]) -> dict[str, dict[str, int]]:
    sizes: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for doms in topology.values():  # a node with a leaf per port counts once in each
        for kind, name in {(k.split(".")[0], v) for k, v in doms.items()}:
            sizes[kind][name] += 1
    return {k: dict(v) for k, v in sizes.items()}


def check(p: Policy, topology: Mapping[str, Mapping[str, str]]) -> tuple[list[str], list[str]]:
    """(lines to print, problems). A problem is a domain whose limit is 0 (not allowed)."""
    lines, problems = [], []
    fleet = len(topology)
    if fleet:
        lines.append(
            f"fleet: {fleet} nodes in the topology -> limit {budget_limit(p.fleet_budget, fleet)} "
            "(the scheduler's fleet size decides at run time)"
        )
    sizes = domain_sizes(topology)
    for kind, budget in sorted(p.domain_budgets.items()):
        for name, size in sorted(sizes.get(kind, {}).items()):
            limit = budget_limit(budget, size)
            lines.append(f"{kind} {name}: {size} nodes -> limit {limit}")
            if limit == 0 and not budget.allow_zero:
                problems.append(
                    f"budgets.domains.{kind}: {name} ({size} nodes) has a limit of 0, so no "
                    "disruptive action can ever be allowed on its nodes (raise max_fraction, "
                    "or set allow_zero: true if that is meant)"
                )
    return lines, problems
