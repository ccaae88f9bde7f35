"""The report's window and the one operation every formula uses: the length of an
interval intersected with it."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from accounting.model import Exposure, Incident, JobRun


@dataclass(frozen=True)
class Window:
    since: float
    until: float

    def clip(self, start: float | None, end: float | None) -> float:
        """Seconds of [start, end] inside the window; a None end runs to the window's end."""
        if start is None:
            return 0.0
        stop = self.until if end is None else min(end, self.until)
        return max(0.0, stop - max(start, self.since))

    def holds(self, t: float) -> bool:
        """An incident is in the window when since <= onset < until."""
        return self.since <= t < self.until


def _times(
    incidents: Iterable[Incident], exposure: Iterable[Exposure], runs: Iterable[JobRun]
) -> Iterator[float]:
    for inc in incidents:
        yield from (inc.onset, inc.detected)
        yield from (t for t in (inc.mitigated, inc.returned) if t is not None)
        for job in inc.jobs:
            yield job.interrupted
            yield from (
                t for t in (job.resumed, job.last_checkpoint, job.start, job.end) if t is not None
            )
    for row in exposure:
        yield row.start
        if row.end is not None:
            yield row.end
    for run in runs:
        yield run.start
        if run.end is not None:
            yield run.end


def resolve(
    incidents: Iterable[Incident],
    exposure: Iterable[Exposure],
    since: float | None = None,
    until: float | None = None,
    runs: Iterable[JobRun] = (),
) -> Window | None:
    """Without ``until`` the report ends at the latest time in the data, without ``since``
    it starts at the earliest; None when there is no time at all to take either from."""
    if since is None or until is None:
        times = list(_times(incidents, exposure, runs))
        if not times and (since is None or until is None):
            return None
        since = min(times) if since is None else since
        until = max(times) if until is None else until
    return Window(since=since, until=until)
