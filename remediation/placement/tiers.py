"""One de-preferred node (or GPU): its tier, evidence and expiry. Pure.

A tier lives ``ttl`` after its last evidence (a firing alert refreshes the evidence every
tick; its resolution starts the clock), the ttl doubling with each recurrence within the
recurrence window, and never longer than ``max_hold_s`` past its start: every tier expires.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from remediation.placement.config import PlacementPolicy

MAX_DOUBLINGS = 30


@dataclass(frozen=True)
class Entry:
    node: str
    tier: str  # marginal | suspect
    reason: str
    since: float
    last_evidence: float
    ttl_s: float
    firing: bool = True
    score: float = 0.0  # higher is worse: budget clips keep the worst
    gpu: str | None = None
    fingerprint: str = ""
    evidence: Mapping[str, Any] = field(default_factory=dict)

    def until(self, p: PlacementPolicy) -> float:
        return min(self.last_evidence + self.ttl_s, self.since + p.max_hold_s)


def ttl_for(p: PlacementPolicy, recurrences: int) -> float:
    """The base ttl doubled per recurrence, capped at the longest hold."""
    return min(p.marginal_ttl_s * 2 ** min(max(recurrences, 0), MAX_DOUBLINGS), p.max_hold_s)


def tier_for(p: PlacementPolicy, recurrences: int) -> str:
    return "suspect" if p.suspect_after and recurrences >= p.suspect_after else "marginal"


def refreshed(e: Entry, now: float) -> Entry:
    """A tick: evidence that still fires is fresh evidence."""
    return replace(e, last_evidence=max(e.last_evidence, now)) if e.firing else e


def resolved(e: Entry, now: float) -> Entry:
    """The alert resolved: the clock starts now."""
    return replace(e, firing=False, last_evidence=max(e.last_evidence, now))


def expired(e: Entry, p: PlacementPolicy, now: float) -> bool:
    return now >= e.until(p)
