"""Alert ordering: which of an alert fingerprint's notifications is the newest, by the
alert's own times, never by the order they arrived in.

Alertmanager retries a failed webhook and may deliver an older "firing" after the
"resolved" that ended it. Each notification carries the alert's ``startsAt`` (the same for
every notification of one alert instance; a new instance after a resolve gets a new one).
So, per fingerprint: a "resolved" ends every instance that started at or before its
``startsAt``; a "firing" whose ``startsAt`` is not newer than a "resolved" already seen is
stale (journaled as such, never acted on). Pure; the journal calls it on intake.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from datetime import datetime

_FRACTION = re.compile(r"(\.\d{6})\d+")  # Go prints nanoseconds; Python reads microseconds


def ts(value: str | None) -> float:
    """An RFC 3339 time as a Unix timestamp; NaN when unreadable (never "newest")."""
    if not isinstance(value, str):
        return math.nan
    text = _FRACTION.sub(r"\1", value.strip()).replace("Z", "+00:00").replace("z", "+00:00")
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return math.nan


def _later(a: float, b: float) -> bool:
    return not math.isnan(a) and (math.isnan(b) or a > b)


def stale(status: str, starts_at: str, resolved_starts: Iterable[str]) -> bool:
    """A firing notification older than (or as old as) a resolve already seen."""
    if status != "firing":
        return False
    mine = ts(starts_at)
    for other in resolved_starts:
        theirs = ts(other)
        if not math.isnan(theirs) and not _later(mine, theirs):
            return True
        if other == starts_at:  # unreadable times: the same instance by its text
            return True
    return False


def firing(rows: Iterable[tuple[str, str, str]]) -> set[str]:
    """Fingerprints still firing, from (fingerprint, startsAt, status) rows in any order:
    the newest instance decides; a resolve wins a tie."""
    newest_firing: dict[str, float] = {}
    newest_resolved: dict[str, float] = {}
    for fp, starts, status in rows:
        t = ts(starts)
        if math.isnan(t):  # unreadable: ordered by its text among its own kind
            t = -math.inf
        book = newest_firing if status == "firing" else newest_resolved
        book[fp] = max(book.get(fp, -math.inf), t)
    return {
        fp
        for fp, t in newest_firing.items()
        if fp not in newest_resolved or t > newest_resolved[fp]
    }
