"""The seam between failure accounting and remediation: what the ledger reads of the journal.

Where it sits: under ``ledger``. Remediation writes the journal and owns its schema; its
read API, ``remediation.history``, is the one module of remediation that accounting imports
(the import contracts in pyproject.toml), and only here. ``History`` is what the ledger
needs of it, so that a test can hand the ledger another source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from remediation.history import (
    DEFAULT_STATE_DB,
    AlertSeen,
    IncidentRow,
    JournalHistory,
    Mitigation,
)

__all__ = ["DEFAULT_STATE_DB", "AlertSeen", "History", "IncidentRow", "Mitigation", "open_journal"]


class History(Protocol):
    def incidents(self) -> list[IncidentRow]: ...

    def alerts(self, inc: IncidentRow) -> list[AlertSeen]: ...

    def mitigation(self, incident_id: int) -> Mitigation | None: ...

    def release_after(self, node: str, after: float) -> float | None: ...

    def acks(self, incident_id: int) -> dict[str, float]: ...

    def first_event(self) -> float | None: ...

    def decision_span(self) -> tuple[float | None, float | None]: ...

    def close(self) -> None: ...


def open_journal(path: str | Path) -> History:
    """The journal file at ``path``, opened read-only."""
    return JournalHistory(path)
