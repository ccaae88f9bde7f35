"""The ``placement:`` block of the remediation policy, validated at start-up."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from common.settings import SettingsError

TIERS = ("marginal", "suspect")
_KEYS = {
    "marginal_ttl_s",
    "recurrence_window_s",
    "max_hold_s",
    "max_fraction",
    "max_domain_fraction",
    "allow_topology_tree",
    "suspect_after",
}


@dataclass(frozen=True)
class PlacementPolicy:
    marginal_ttl_s: float = 86400.0  # after the last evidence; doubles per recurrence
    recurrence_window_s: float = 7 * 86400.0
    max_hold_s: float = 14 * 86400.0  # no tier outlives this without fresh evidence
    max_fraction: float = 0.10  # of a partition / node pool: max(1, floor(f x size))
    max_domain_fraction: float = 0.25  # of a failure domain (leaf, rack, block)
    allow_topology_tree: bool = False  # weights override topology/tree: refuse unless set
    suspect_after: int = 0  # recurrences before marginal becomes suspect; 0 = never


def _frac(d: Mapping[str, Any], key: str, default: float) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < v <= 1:
        raise SettingsError(f"policy placement.{key}: expected a number in (0, 1], got {v!r}")
    return float(v)


def _secs(d: Mapping[str, Any], key: str, default: float) -> float:
    v = d.get(key, default)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
        raise SettingsError(f"policy placement.{key}: expected seconds > 0, got {v!r}")
    return float(v)


def parse(raw: Any) -> PlacementPolicy:
    if raw is None:
        return PlacementPolicy()
    if not isinstance(raw, dict):
        raise SettingsError("policy placement: expected a mapping")
    unknown = sorted(set(raw) - _KEYS)
    if unknown:
        raise SettingsError(f"policy placement: unknown key(s) {', '.join(unknown)}")
    tree = raw.get("allow_topology_tree", False)
    if not isinstance(tree, bool):
        raise SettingsError("policy placement.allow_topology_tree: expected true or false")
    after = raw.get("suspect_after", 0)
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise SettingsError(
            f"policy placement.suspect_after: expected an integer >= 0, got {after!r}"
        )
    p = PlacementPolicy(
        marginal_ttl_s=_secs(raw, "marginal_ttl_s", 86400.0),
        recurrence_window_s=_secs(raw, "recurrence_window_s", 7 * 86400.0),
        max_hold_s=_secs(raw, "max_hold_s", 14 * 86400.0),
        max_fraction=_frac(raw, "max_fraction", 0.10),
        max_domain_fraction=_frac(raw, "max_domain_fraction", 0.25),
        allow_topology_tree=tree,
        suspect_after=after,
    )
    if p.max_hold_s < p.marginal_ttl_s:
        raise SettingsError("policy placement.max_hold_s: must be >= marginal_ttl_s")
    return p
