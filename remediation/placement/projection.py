"""The seam between placement decisions and a scheduler: a projection shows a set of
de-preferred nodes (node -> tier) and reports what it had to change to get there."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Repair:
    node: str
    kind: str  # apply | repair (drift read back) | restore (expired / released)
    detail: str


@dataclass(frozen=True)
class Reconciled:
    changes: tuple[Repair, ...] = ()
    skipped: Mapping[str, str] = field(default_factory=dict)  # node -> why left alone


class Projection(Protocol):
    name: str

    def groups(self) -> Mapping[str, frozenset[str]]:
        """Partition / node pool -> its nodes (the placement budget's groups)."""
        ...

    def reconcile(self, wanted: Mapping[str, str], dry_run: bool = False) -> Reconciled:
        """Make the scheduler show exactly ``wanted``; under ``dry_run`` only report."""
        ...


class RecordOnly:
    """No scheduler to project to (dry-run without one): one group of the known nodes."""

    name = "none"

    def __init__(self, nodes: Callable[[], Iterable[str]] = tuple) -> None:
        self.nodes = nodes

    def groups(self) -> Mapping[str, frozenset[str]]:
        known = frozenset(self.nodes())
        return {"fleet": known} if known else {}

    def reconcile(self, wanted: Mapping[str, str], dry_run: bool = False) -> Reconciled:
        return Reconciled(tuple(Repair(n, "apply", f"mark {t}") for n, t in wanted.items()))
