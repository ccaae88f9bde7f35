"""The leader election: compare-and-swap writes on a lease record, expiry by the candidate's
own clock (the scheme of Kubernetes' client-go leader election).

Pure logic on a :class:`LeaseStore`. Why two instances never lead at once:

- The leader counts its term from the moment it *started* its last successful write and
  holds only ``renew_deadline_s`` from there (:meth:`Elector.held`); the keeper stops the
  process when that runs out (:mod:`remediation.leader.keeper`).
- A candidate takes the lease only after it has seen the same record version, unchanged, for
  the record's whole ``lease_s`` on its own monotonic clock, counted from when its read
  returned (after that write landed). Wall clocks are never compared across hosts.
- Every write names the version it replaces, so a renewal and a takeover cannot both land.

So the term a candidate waits out (``lease_s``) starts after the leader's (``renew_deadline_s``)
and is longer: the two never overlap while the clocks' rates differ by less than
``(lease_s - renew_deadline_s) / (lease_s + renew_deadline_s)`` (20 % at the defaults 15 s
and 10 s). A released record (holder ``""``) is free at once. A missing record counts as one
more version: only the instance holding the lease makes it again at once (it was deleted
under it); the others wait a whole term of it missing, read at most half a renew deadline
apart (a longer gap starts the wait again: a record may have come and gone unseen). That is
safe for a record deleted by hand once it has lived that long; one deleted again and again
within seconds of being made can still give two holders (stop the instances first). A
record is ours to renew only if we wrote that very version, so a second process given our
name is just another candidate.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Record:
    """The lease as stored: its holder (``""``: released), a version that changes on every
    write, and the term its holder asked for."""

    holder: str
    version: str
    lease_s: float


class LeaseStore(Protocol):
    def read(self) -> Record | None:
        """The record, None when there is none (OSError or the API's error when unreadable)."""

    def write(self, holder: str, lease_s: float, expect: str | None) -> str | None:
        """Replace the record if its version is still ``expect`` (None: create it where there
        is none): the new version, never one the record had before (a record deleted and
        made again included); None when another writer came first."""

    def describe(self) -> str:
        """Where the lease lives, for log lines."""


@dataclass
class MemoryLeaseStore:
    """An in-process store with the same compare-and-swap (the fake for tests)."""

    record: Record | None = None
    writes: int = 0

    def read(self) -> Record | None:
        return self.record

    def write(self, holder: str, lease_s: float, expect: str | None) -> str | None:
        current = None if self.record is None else self.record.version
        if current != expect:
            return None
        self.writes += 1
        self.record = Record(holder, str(self.writes), float(math.ceil(lease_s)))
        return self.record.version

    def describe(self) -> str:
        return "memory"


def _boottime() -> float:
    """A clock that keeps counting while the host is suspended (monotonic does not)."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


DEFAULT_CLOCK: Callable[[], float] = (
    _boottime if hasattr(time, "CLOCK_BOOTTIME") else time.monotonic
)
ABSENT = "\0absent"  # the version a reader sees when there is no record at all


@dataclass
class Elector:
    """One instance's side of the election. ``attempt`` takes or renews the lease;
    ``held`` says whether this instance may still act."""

    store: LeaseStore
    identity: str
    lease_s: float = 15.0
    renew_deadline_s: float = 10.0
    clock: Callable[[], float] = DEFAULT_CLOCK
    _seen: tuple[str, float] | None = field(default=None, init=False)  # version, first seen
    _renewed: float | None = field(default=None, init=False)  # start of the last good write
    _written: str | None = field(default=None, init=False)  # the version that write made
    _read_at: float | None = field(default=None, init=False)  # when the last read came back
    _closed: bool = field(default=False, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)
    holder: str = field(default="", init=False)  # the holder last read ("": none)

    def __post_init__(self) -> None:
        if not self.identity:
            raise ValueError("the leader identity is empty")
        if not 0 < self.renew_deadline_s < self.lease_s:
            raise ValueError(
                f"the renew deadline ({self.renew_deadline_s:g} s) must be > 0 and shorter "
                f"than the lease ({self.lease_s:g} s)"
            )

    def held(self) -> bool:
        """True while the last successful write is younger than the renew deadline."""
        return self._renewed is not None and self.clock() < self._renewed + self.renew_deadline_s

    def attempt(self) -> bool:
        """Take the lease if it is free or expired, renew it if ours; whether we hold it now.
        A store error propagates and changes nothing (the term runs on)."""
        with self._lock:
            if self._closed:
                return False
            start = self.clock()
            rec = self.store.read()
            now = self.clock()
            version = ABSENT if rec is None else rec.version
            # A record can come and go between two reads (made, then deleted by hand), so
            # absence only counts as unbroken while the reads come at most a gap apart.
            gap = self._read_at is None or now - self._read_at > self.renew_deadline_s / 2
            if self._seen is None or self._seen[0] != version or (rec is None and gap):
                self._seen = (version, now)
            self._read_at = now
            if rec is None:
                # No record: the leader makes it again at once (someone deleted it under
                # us); anyone else waits a whole term of it missing, since a record deleted
                # by hand may still be held (so a first start waits one term too).
                if not self.held() and now < self._seen[1] + self.lease_s:
                    self.holder = ""
                    return False
                return self._wrote(start, self.store.write(self.identity, self.lease_s, None))
            self.holder = rec.holder
            # ours only if we made this very version: another process given our name (one
            # config file on two hosts) is another holder like any other
            mine = rec.holder == self.identity and rec.version == self._written
            expired = now >= self._seen[1] + rec.lease_s
            if not mine and rec.holder and not expired:
                self._renewed = None  # another holds it: whatever we held is gone
                return False
            return self._wrote(start, self.store.write(self.identity, self.lease_s, rec.version))

    def _wrote(self, start: float, version: str | None) -> bool:
        if version is not None:
            self._renewed, self._written, self.holder = start, version, self.identity
        else:
            self._renewed = None  # someone wrote between our read and our write
        return self.held()

    def close(self) -> None:
        """No attempt from now on (an attempt under way finishes first): the service is
        stopping, and a renewal must not take back the lease it is about to release."""
        with self._lock:
            self._closed = True

    def release(self) -> bool:
        """Give the lease up (holder ``""``) so a standby takes it at once; only if we still
        hold it. True when released."""
        with self._lock:
            if not self.held():
                return False
            rec = self.store.read()
            if rec is None or rec.holder != self.identity or rec.version != self._written:
                self._renewed = None
                return False
            ok = self.store.write("", self.lease_s, rec.version) is not None
            self._renewed = self._written = None
            return ok
