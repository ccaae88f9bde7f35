"""The placement budget: how many nodes of a partition / node pool (and of a failure domain)
may be de-preferred at once. Pure; separate from the drain budgets, which soft actions never
count against.

Per group of size n: at most max(1, floor(max_fraction x n)); per failure domain: at most
max(1, floor(max_domain_fraction x n)). A candidate beyond it displaces the lowest-scored
holder that blocks it when the candidate scores higher, else it is denied (recorded).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Member:
    node: str
    score: float
    groups: frozenset[str]  # partition / node-pool names, and "domain:<key>=<value>"


@dataclass(frozen=True)
class Admission:
    allow: bool
    reason: str
    displace: str | None = None


def limit(size: int, fraction: float) -> int:
    return max(1, math.floor(fraction * size))


def limits(
    sizes: Mapping[str, int], max_fraction: float, max_domain_fraction: float
) -> dict[str, int]:
    return {
        g: limit(n, max_domain_fraction if g.startswith("domain:") else max_fraction)
        for g, n in sizes.items()
    }


def admit(cand: Member, held: Sequence[Member], caps: Mapping[str, int]) -> Admission:
    others = [m for m in held if m.node != cand.node]
    full = [g for g in sorted(cand.groups) if sum(g in m.groups for m in others) >= caps.get(g, 1)]
    if not full:
        return Admission(True, "within the placement budget")
    blocking = [m for m in others if all(g in m.groups for g in full)]
    weakest = min(blocking, key=lambda m: (m.score, m.node), default=None)
    counts = ", ".join(f"{g} {sum(g in m.groups for m in others)}/{caps.get(g, 1)}" for g in full)
    if weakest is not None and weakest.score < cand.score:
        return Admission(
            True,
            f"placement budget full ({counts}); displaces {weakest.node} "
            f"(score {weakest.score:g} < {cand.score:g})",
            weakest.node,
        )
    return Admission(False, f"placement budget full ({counts}); score {cand.score:g} not above")


def within(held: Sequence[Member], caps: Mapping[str, int]) -> bool:
    """The invariant: no group holds more than its cap."""
    return all(sum(g in m.groups for m in held) <= n for g, n in caps.items())
