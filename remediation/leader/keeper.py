"""Keep the lease while the service acts; stop the process the moment it cannot prove it.

Two threads: one renews every ``retry_s`` (a store error is logged and the term runs on), one
watches :meth:`~remediation.leader.elector.Elector.held` every ``watch_s`` and calls
``on_lost`` once it is false: a renewal lost to another writer, or none landed within the
renew deadline (the API server or the shared file system stalled, the process was frozen).
The service's ``on_lost`` ends the process at once (``os._exit``): an instance that stops
acting but keeps running is a second writer waiting to happen, and the journal and the
executor already recover from a kill at any moment (the restart waits as a standby).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from remediation.leader.elector import Elector

log = logging.getLogger("gpuwarden.remediation.leader")


class NotLeader(RuntimeError):
    """A journal write after this instance's term (the fence refused it)."""


class Keeper:
    def __init__(self, elector: Elector, retry_s: float, on_lost: Callable[[str], None],
                 watch_s: float = 0.25) -> None:  # fmt: skip
        if not 0 < retry_s < elector.renew_deadline_s:
            raise ValueError(
                f"the retry period ({retry_s:g} s) must be > 0 and shorter than the renew "
                f"deadline ({elector.renew_deadline_s:g} s)"
            )
        self.elector, self.retry_s, self.on_lost, self.watch_s = elector, retry_s, on_lost, watch_s
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._last_error = ""

    def _try(self) -> bool:
        try:
            got = self.elector.attempt()
        except Exception as e:  # the store did not answer: the term runs on
            msg = f"{type(e).__name__}: {e}"
            if msg != self._last_error:
                log.warning("leader lease %s: %s", self.elector.store.describe(), msg)
            self._last_error = msg
            return self.elector.held()
        self._last_error = ""
        return got

    def acquire(self, stop: threading.Event | None = None) -> bool:
        """Wait as a standby until this instance holds the lease (True), or ``stop`` is set."""
        stop = stop or self._stop
        said = None
        while not stop.is_set():
            if self._try():
                if stop.is_set():  # told to stop while taking it: hand it back
                    self.elector.close()
                    self.elector.release()
                    return False
                log.info("leader lease %s taken by %s", self.elector.store.describe(),
                         self.elector.identity)  # fmt: skip
                return True
            if self.elector.holder != said:
                said = self.elector.holder
                log.info("standby: leader lease %s held by %s", self.elector.store.describe(),
                         said or "nobody")  # fmt: skip
            stop.wait(self.retry_s)
        return False

    def start(self) -> None:
        """Renew in the background, and call ``on_lost`` once the lease is not held."""
        for name, loop in (("renew", self._renew), ("watch", self._watch)):
            t = threading.Thread(target=loop, name=f"leader-{name}", daemon=True)
            t.start()
            self._threads.append(t)

    def _renew(self) -> None:
        while not self._stop.wait(self.retry_s):
            self._try()

    def _watch(self) -> None:
        while not self._stop.wait(self.watch_s):
            if not self.elector.held():
                self._lost("lost")
                return

    def _lost(self, how: str) -> None:
        self._stop.set()
        self.on_lost(
            f"leader lease {self.elector.store.describe()} {how}: no renewal landed within "
            f"{self.elector.renew_deadline_s:g} s, or another instance took it"
        )

    def fence(self) -> None:
        """The journal's check before each commit (``Journal.fence``): past the term, end
        (``on_lost``), so a leader frozen past its lease (SIGSTOP, a stalled VM) commits
        nothing when it thaws, even before the watch thread runs. Raises if ``on_lost``
        returns, so the transaction rolls back."""
        if not self.elector.held():
            self._lost("lost before a journal commit")
            raise NotLeader(f"{self.elector.identity} does not hold the leader lease")

    def stop(self, release: bool = True) -> None:
        """Stop renewing; with ``release``, hand the lease over at once (after the service
        stopped acting)."""
        self._stop.set()
        self.elector.close()  # waits out a renewal under way; none after it
        for t in self._threads:
            t.join(timeout=self.elector.renew_deadline_s)
        if release:
            try:
                if self.elector.release():
                    log.info("leader lease %s released", self.elector.store.describe())
            except Exception as e:
                log.warning("leader lease %s not released (%s): it expires by itself",
                            self.elector.store.describe(), e)  # fmt: skip
