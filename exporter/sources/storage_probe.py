"""Checkpoint-storage probes: stat, small write + fsync, read back, on each configured mount.

A hung Lustre/GPFS/NFS mount puts the process that touches it into uninterruptible sleep, so
the probe never runs in the exporter's own process: each probe is a child process, waited on
with a timeout. A child that outlives its timeout is reported ``hung`` and no new probe is
started on that mount until it exits (a hung mount must not pile up stuck children). The
prober runs in its own thread at its own interval; the collector only reads the last result,
so a scrape never waits for storage.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from multiprocessing.process import BaseProcess
from typing import Any, Protocol

OPS = ("stat", "write", "fsync", "read")
OUTCOMES = ("ok", "error", "hung")
PROBE_FILE = ".gpuwarden-probe-{node}"


@dataclass(frozen=True)
class ProbeResult:
    """One probe of one mount. ``outcome``: ok | error | hung; ``seconds``: per finished op."""

    mount: str
    outcome: str
    seconds: Mapping[str, float] = field(default_factory=dict)
    error: str = ""
    at: float = 0.0


class ProbeResults(Protocol):
    """What the collector reads: this module's StorageProber, or the simulator's probes."""

    @property
    def mounts(self) -> tuple[str, ...]: ...
    def start(self) -> None: ...
    def last(self) -> dict[str, ProbeResult]: ...
    def counts(self) -> dict[tuple[str, str], int]: ...


def probe_once(
    mount: str, node: str, payload: bytes = b"gpuwarden storage probe\n"
) -> dict[str, Any]:
    """The probe itself (runs in the child): each op timed; the first failure ends it."""
    seconds: dict[str, float] = {}
    path = os.path.join(mount, PROBE_FILE.format(node=node))
    t = time.perf_counter()
    try:
        os.stat(mount)
        seconds["stat"] = time.perf_counter() - t
        t = time.perf_counter()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        try:
            os.write(fd, payload)
            seconds["write"] = time.perf_counter() - t
            t = time.perf_counter()
            os.fsync(fd)
            seconds["fsync"] = time.perf_counter() - t
        finally:
            os.close(fd)
        t = time.perf_counter()
        with open(path, "rb") as f:
            got = f.read()
        seconds["read"] = time.perf_counter() - t
        os.unlink(path)
        if got != payload:
            return {"outcome": "error", "seconds": seconds, "error": "read back differs"}
    except OSError as e:
        return {"outcome": "error", "seconds": seconds, "error": f"{e.strerror or e}"}
    return {"outcome": "ok", "seconds": seconds, "error": ""}


def _child(conn: Connection, mount: str, node: str) -> None:  # pragma: no cover - in child
    conn.send(probe_once(mount, node))
    conn.close()


ProbeFn = Callable[[Connection, str, str], None]


class StorageProber:
    """Probes each mount every ``interval`` seconds in a child process; keeps the last results.

    ``start()`` runs the loop in a daemon thread; ``run_once()`` is the loop's body (tests
    call it directly). ``target`` is the child's function (tests inject a hanging one).
    """

    def __init__(
        self,
        mounts: Sequence[str],
        node: str,
        *,
        timeout: float = 10.0,
        interval: float = 30.0,
        target: ProbeFn = _child,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.mounts = tuple(mounts)
        self.node = node
        self.timeout = timeout
        self.interval = interval
        self._target = target
        self._clock = clock
        self._ctx = mp.get_context("fork") if hasattr(os, "fork") else mp.get_context()
        self._stuck: dict[str, BaseProcess] = {}
        self._lock = threading.Lock()
        self._last: dict[str, ProbeResult] = {}
        self._counts: dict[tuple[str, str], int] = {}  # (mount, outcome) -> probes
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def last(self) -> dict[str, ProbeResult]:
        with self._lock:
            return dict(self._last)

    def counts(self) -> dict[tuple[str, str], int]:
        """Probes so far by (mount, outcome): every probe counted once, however often the
        collector reads (a counter that would miss probes between two collections if the
        reader counted them)."""
        with self._lock:
            return dict(self._counts)

    def run_once(self) -> None:
        for mount in self.mounts:
            result = self._probe(mount)
            key = (mount, result.outcome)
            with self._lock:
                self._last[mount] = result
                self._counts[key] = self._counts.get(key, 0) + 1

    def _probe(self, mount: str) -> ProbeResult:
        now = self._clock()
        stuck = self._stuck.get(mount)
        if stuck is not None:
            if stuck.is_alive():
                return ProbeResult(mount, "hung", {}, "an earlier probe has not returned", now)
            del self._stuck[mount]
        parent, child = self._ctx.Pipe(duplex=False)
        proc = self._ctx.Process(target=self._target, args=(child, mount, self.node), daemon=True)
        proc.start()
        child.close()
        try:
            if not parent.poll(self.timeout):
                if proc.is_alive():
                    proc.kill()  # may not die while in D state; then it stays "stuck"
                    proc.join(0.1)
                    if proc.is_alive():
                        self._stuck[mount] = proc
                return ProbeResult(mount, "hung", {}, f"no answer in {self.timeout:g} s", now)
            try:
                raw = parent.recv()
            except EOFError:
                return ProbeResult(mount, "error", {}, "probe process died", now)
        finally:
            parent.close()
        proc.join(1.0)
        return ProbeResult(mount, raw["outcome"], raw["seconds"], raw["error"], now)

    def start(self) -> None:
        if self._thread is None and self.mounts:
            self._thread = threading.Thread(target=self._loop, name="storage-probe", daemon=True)
            self._thread.start()

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval)

    def stop(self) -> None:
        self._stop.set()
