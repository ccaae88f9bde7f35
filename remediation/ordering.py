"""Alert ordering: which of an alert fingerprint's notifications is the newest, by the
alert's own times, never by the order they arrived in.

Alertmanager retries a failed webhook and may deliver an older "firing" after the
"resolved" that ended it. Each notification carries the alert's ``startsAt`` (the same for
every notification of one alert instance; a new instance after a resolve gets a new one)
and ``endsAt`` (zero while firing: Alertmanager hides an end not reached yet; the end on a
"resolved"). So, per fingerprint, each notification is news as of its own time: a firing
as of its ``startsAt``, a resolve as of its ``endsAt`` (its ``startsAt`` where the end is
missing or unreadable). A "resolved" ends its own instance whenever it arrives; a
"firing" that began before a resolve already seen ended (``startsAt`` < that ``endsAt``,
or not newer than its ``startsAt``) is stale (journaled as such, never acted on); an
instance beginning exactly when the last one ended is new. Alertmanager merges an alert
whose new instance overlaps the last one into it (one ``startsAt``), so a genuine new
instance never begins before the last one's end. Pure; the journal calls it on intake.

One exception: a "firing" of the very instance a resolve ended (the same ``startsAt``)
heard more than ``REFIRE_AFTER_S`` after that resolve is a re-fire, not a retry. Its source
kept firing while Alertmanager could not hear it (Prometheus restarted or out of reach for
longer than the alert's ``endsAt``, so Alertmanager resolved it), and Alertmanager, which
merges only overlapping instances, sends it again with its original ``startsAt``. A retry
cannot lag that far: Alertmanager retries a notification only within the flush that sent
it, and a flush is bounded by ``group_interval`` (5 m by default), begun before the resolve
was sent. A re-fire is the same fault firing again (the journal un-resolves the instance;
the engine holds the node again as the same incident); a retry stays stale.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from datetime import datetime

_FRACTION = re.compile(r"(\.\d{6})\d+")  # Go prints nanoseconds; Python reads microseconds


# No retry of a notification sent before a resolve is heard later than this after the
# resolve (twice Alertmanager's default group_interval, its retries' bound)
REFIRE_AFTER_S = 600.0


def refired(resolve_heard_at: float, now: float) -> bool:
    """A firing of an instance whose resolve was heard at ``resolve_heard_at`` is a re-fire
    (the same fault firing again), not a stale retry."""
    return now - resolve_heard_at > REFIRE_AFTER_S


def ts(value: str | None) -> float:
    """An RFC 3339 time as a Unix timestamp; NaN when unreadable (never "newest")."""
    if not isinstance(value, str):
        return math.nan
    text = _FRACTION.sub(r"\1", value.strip()).replace("Z", "+00:00").replace("z", "+00:00")
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return math.nan


def ended(ends_at: str | None) -> float:
    """A resolve's ``endsAt``; NaN when missing, unreadable or Go's zero time (year 1)."""
    t = ts(ends_at)
    return t if t > ts("1970-01-02T00:00:00Z") else math.nan


def stale(status: str, starts_at: str, resolved: Iterable[str | Sequence[str]]) -> bool:
    """A firing notification older than a resolve already seen: it began at or before that
    resolve's instance began, or before that resolve's ``endsAt``. ``resolved``: each
    resolve as its ``startsAt``, or ``(startsAt, endsAt)``."""
    if status != "firing":
        return False
    mine = ts(starts_at)
    for other in resolved:
        starts, ends = (other, "") if isinstance(other, str) else (other[0], other[1])
        theirs, end = ts(starts), ended(ends)
        if not math.isnan(mine) and not math.isnan(theirs) and mine <= theirs:
            return True
        if not math.isnan(mine) and not math.isnan(end) and mine < end:
            return True
        if starts == starts_at:  # unreadable times: the same instance by its text
            return True
    return False


def _news(starts: str, status: str, ends: str) -> tuple[float, bool]:
    """When a notification is news as of, and whether that is a resolve's own end."""
    if status == "resolved" and not math.isnan(end := ended(ends)):
        return end, True
    return ts(starts), False


def firing(rows: Iterable[Sequence[str]]) -> set[str]:
    """Fingerprints still firing, from (fingerprint, startsAt, status[, endsAt]) rows in
    arrival order: a resolve ends its own instance (the same startsAt) whenever it arrives;
    between two instances the newer news wins (a firing as of its startsAt, a resolve as of
    its endsAt; a resolve overrides a firing only if it ended after that firing began);
    where the times cannot be compared (unreadable), the later arrival wins."""
    state: dict[str, tuple[str, str, str]] = {}  # fingerprint -> (startsAt, status, endsAt)
    for row in rows:
        fp, starts, status = row[0], row[1], row[2]
        ends = row[3] if len(row) > 3 else ""
        if fp not in state:
            state[fp] = (starts, status, ends)
            continue
        now_starts, now_status, _ = state[fp]
        if starts == now_starts:  # the same instance: resolved is final
            if status == "resolved":
                state[fp] = (starts, status, ends)
            continue
        (mine, by_end), (theirs, _) = _news(starts, status, ends), _news(*state[fp])
        # a resolve ending exactly when a firing began does not end that firing
        tie_ok = not (by_end and now_status == "firing")
        if math.isnan(mine) or math.isnan(theirs) or mine > theirs or (mine == theirs and tie_ok):
            state[fp] = (starts, status, ends)
    return {fp for fp, (_, status, _) in state.items() if status == "firing"}
