"""The collection loop: polls every collector each interval and renders one snapshot.

Between the collectors and the HTTP server. Collection is decoupled from scraping (as in
dcgm-exporter): a scrape serves the last rendered bytes and never waits on NVML or sysfs.
A collector that raises costs only its own series (``collector_success 0``); the cycle and
the scrape go on.
"""

from __future__ import annotations

import gzip
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

from exporter import __version__, catalog
from exporter.catalog import Sample
from exporter.collectors.base import Collector, ReadErrors
from exporter.exposition import Prefixes, render

log = logging.getLogger(__name__)


@runtime_checkable
class LastXidProvider(Protocol):
    def last_xid(self) -> dict[str, int]: ...


@dataclass(frozen=True)
class Snapshot:
    body: bytes
    finished_at: float  # wall clock (unix seconds)
    monotonic_at: float
    failed: tuple[str, ...]  # collectors that raised in this cycle
    series: int
    _gzip: list[bytes] = field(default_factory=list, compare=False, repr=False)

    def gzipped(self) -> bytes:
        if not self._gzip:  # compressed once per snapshot, on the first scrape that asks
            self._gzip.append(gzip.compress(self.body, compresslevel=5))
        return self._gzip[0]


EMPTY = Snapshot(b"", 0.0, 0.0, (), 0)


@dataclass
class _CollectorState:
    collector: Collector
    duration: float = 0.0
    ok: bool = False
    last_error: str = ""


class CollectionLoop:
    """Runs the collectors; ``run_once`` is the whole cycle (tests call it directly)."""

    def __init__(
        self,
        collectors: Sequence[Collector],
        node: str,
        *,
        source: str,
        interval: float,
        dcgm: bool = False,
        hostname_label: str = "Hostname",
        pod_labels: bool = False,
        virtual_gpus: bool = False,
        dcgm_generation: str = "4.8",
        wall: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        before_cycle: Callable[[float], None] | None = None,
        timer: Callable[[], float] = time.perf_counter,
    ) -> None:
        self._states = [_CollectorState(c) for c in collectors]
        self._node = node
        self._source = source
        self._interval = interval
        self._dcgm = dcgm
        self._hostname_label = hostname_label
        self._pod_labels = pod_labels
        self._virtual_gpus = virtual_gpus  # dcgm compat: a copy per pod of a shared GPU
        self._dcgm_generation = dcgm_generation  # exporter.catalog_dcgm.GENERATIONS
        self._wall = wall
        self._monotonic = monotonic
        self._before_cycle = before_cycle  # the simulated source advances its model here
        self._timer = timer
        self._cycles = 0
        self._prefixes = Prefixes()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.snapshot: Snapshot = EMPTY

    def run_once(self) -> Snapshot:
        if self._before_cycle is not None:
            self._before_cycle(self._wall())
        samples: list[Sample] = []
        last_xid: dict[str, int] = {}
        for st in self._states:
            samples += self._run_collector(st)
            if self._dcgm and isinstance(st.collector, LastXidProvider):
                last_xid.update(st.collector.last_xid())
        self._cycles += 1
        samples += self._self_samples()
        body = render(
            samples,
            dcgm=self._dcgm,
            last_xid=last_xid,
            prefixes=self._prefixes,
            hostname_label=self._hostname_label,
            pod_labels=self._pod_labels,
            dcgm_generation=self._dcgm_generation,
            virtual_gpus=self._virtual_gpus,
        )
        snap = Snapshot(
            body,
            self._wall(),
            self._monotonic(),
            tuple(st.collector.name for st in self._states if not st.ok),
            len(samples),
        )
        self.snapshot = snap
        return snap

    def _run_collector(self, st: _CollectorState) -> list[Sample]:
        t0 = self._timer()
        try:
            out = list(st.collector.collect())
            st.ok, st.last_error = True, ""
        except Exception as e:  # fail soft: one collector, not the scrape
            out = []
            error = f"{type(e).__name__}: {e}"
            if st.ok or st.last_error != error:  # log changes, not every cycle
                log.warning("collector %s failed: %s", st.collector.name, error)
            st.ok, st.last_error = False, error
        st.duration = self._timer() - t0
        return out

    def _self_samples(self) -> list[Sample]:
        n = self._node
        out = [
            catalog.BUILD_INFO.make(1, n, __version__, self._source),
            catalog.COLLECTION_CYCLES.make(self._cycles, n),
            catalog.LAST_COLLECTION.make(self._wall(), n),
        ]
        for st in self._states:
            name = st.collector.name
            out.append(catalog.COLLECTOR_DURATION.make(st.duration, n, name))
            out.append(catalog.COLLECTOR_SUCCESS.make(1 if st.ok else 0, n, name))
            errors = getattr(st.collector, "read_errors", None)
            if isinstance(errors, ReadErrors):
                out += [
                    catalog.READ_ERRORS.make(c, n, name, what)
                    for what, c in sorted(errors.counts.items())
                ]
        return out

    def health(self, stale_after: float) -> tuple[bool, str]:
        """(fresh, reason): fresh while the last completed cycle is younger than stale_after."""
        snap = self.snapshot
        if snap is EMPTY:
            return False, "no collection cycle has completed yet"
        age = self._monotonic() - snap.monotonic_at
        if age > stale_after:
            return False, f"last collection finished {age:.1f}s ago (stale after {stale_after:g}s)"
        failing = [f"{st.collector.name}: {st.last_error}" for st in self._states if not st.ok]
        if failing and len(failing) == len(self._states):
            return False, "every collector failed: " + "; ".join(failing)
        return True, "ok" + (f" (failing: {'; '.join(failing)})" if failing else "")

    # ------------------------------------------------------------------ background thread
    def start(self) -> None:
        self.run_once()
        self._thread = threading.Thread(target=self._loop, name="collection", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        next_at = self._monotonic() + self._interval
        while not self._stop.wait(max(0.0, next_at - self._monotonic())):
            try:
                self.run_once()
            except Exception:  # never let the loop die; health turns stale instead
                log.exception("collection cycle failed")
            next_at = max(next_at + self._interval, self._monotonic())

    def stop(self) -> None:
        self._stop.set()
        if self._thread:
            self._thread.join(timeout=5)
