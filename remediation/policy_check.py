"""`gpuwarden-remediation --check`: what the policy's budgets mean on this topology.

A budget is ``min(max_nodes, floor(max_fraction x size))``; on a small failure domain that
can be 0, which silently denies every disruptive action on its nodes. The check prints each
domain's effective limit and fails on a limit of 0 unless the budget says ``allow_zero:
true``. Pure: policy and topology in, lines and problems out.

:func:`fallback_problems` (run by ``--check`` and at start-up, preflight.py) rejects a
policy that allows an action but not what that action falls back to or climbs to: the
``checkpoint.on_storage_unhealthy`` fallback of a rule allowing ``checkpoint_restart``, and
every rung (and ``inspect``) of the ladder of a fault class a rule allows to disrupt. Such
a policy would deny, at the worst moment, the action its own settings chose.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

from remediation.guards import budget_limit
from remediation.model import DISRUPTIVE
from remediation.policy import Policy, Rule


def _names_class(rule: Rule, fault_class: str) -> bool:
    """Could this rule decide an alert of ``fault_class`` (other labels aside)?"""
    want = rule.match.get("fault_class")
    return want is None or Rule({"fault_class": want}, rule.allow).matches(
        {"fault_class": fault_class}
    )


def fallback_problems(p: Policy) -> list[str]:
    """Rules that allow an action but not the fallback or rung the policy can choose next."""
    problems = []
    fallback = p.checkpoint.on_storage_unhealthy
    for i, rule in enumerate(p.rules):
        allowed = set(rule.allow)
        if "checkpoint_restart" in allowed and fallback != "hold" and fallback not in allowed:
            problems.append(
                f"rules[{i}] allows checkpoint_restart but not {fallback}, the fallback "
                "checkpoint.on_storage_unhealthy chooses while checkpoint storage is unhealthy "
                f"(allow {fallback}, or choose another fallback)"
            )
        if "reset_gpu" in allowed and "reboot" not in allowed:
            problems.append(
                f"rules[{i}] allows reset_gpu but not reboot, which a failed or repeated GPU "
                "reset falls back to (allow reboot)"
            )
        for fc, ladder in sorted(p.ladders.items()):
            if not _names_class(rule, fc) or not allowed & DISRUPTIVE & set(ladder):
                continue
            missing = sorted((set(ladder) | {"inspect"}) & DISRUPTIVE - allowed)
            if missing:
                problems.append(
                    f"rules[{i}] allows {fc} to disrupt but not {', '.join(missing)}, which its "
                    f"ladder {list(ladder)} (or inspect_after {p.inspect_after}) can choose"
                )
    return problems


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
