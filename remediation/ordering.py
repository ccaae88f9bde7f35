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


def stale(status: str, starts_at: str, resolved_starts: Iterable[str]) -> bool:
    """A firing notification older than (or as old as) a resolve already seen."""
    if status != "firing":
        return False
    mine = ts(starts_at)
    for other in resolved_starts:
        theirs = ts(other)
        if not math.isnan(theirs) and not math.isnan(mine) and mine <= theirs:
            return True
        if other == starts_at:  # unreadable times: the same instance by its text
            return True
    return False


def firing(rows: Iterable[tuple[str, str, str]]) -> set[str]:
    """Fingerprints still firing, from (fingerprint, startsAt, status) rows in arrival
    order: a resolve ends its own instance (the same startsAt) whenever it arrives, and a
    newer instance (a later startsAt) wins over an older one; where the times cannot be
    compared (unreadable), the later arrival wins."""
    state: dict[str, tuple[str, str]] = {}  # fingerprint -> (startsAt, status) now
    for fp, starts, status in rows:
        if fp not in state:
            state[fp] = (starts, status)
            continue
        now_starts = state[fp][0]
        if starts == now_starts:  # the same instance: resolved is final
            if status == "resolved":
                state[fp] = (starts, status)
            continue
        mine, theirs = ts(starts), ts(now_starts)
        if math.isnan(mine) or math.isnan(theirs) or mine >= theirs:
            state[fp] = (starts, status)
    return {fp for fp, (_, status) in state.items() if status == "firing"}
