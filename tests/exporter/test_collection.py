"""The collection loop: one failing collector never costs the scrape; health tracks freshness."""

from __future__ import annotations

from exporter import catalog
from exporter.collection import CollectionLoop
from exporter.collectors.base import ReadErrors


class Steady:
    name = "steady"

    def __init__(self) -> None:
        self.read_errors = ReadErrors()
        self.calls = 0

    def collect(self) -> list[catalog.Sample]:
        self.calls += 1
        return [catalog.GPU_TEMPERATURE.make(40 + self.calls, "n1", "0", "u0")]


class Broken:
    name = "broken"

    def collect(self) -> list[catalog.Sample]:
        raise RuntimeError("NVML Shared Library Not Found")


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def _loop(*collectors: object, clock: Clock | None = None) -> CollectionLoop:
    c = clock or Clock()
    return CollectionLoop(
        collectors,
        "n1",
        source="nvml",
        interval=5,  # type: ignore[arg-type]
        wall=c,
        monotonic=c,
    )


def test_a_failing_collector_costs_only_its_own_series_and_reports_success_zero() -> None:
    steady = Steady()
    body = _loop(steady, Broken()).run_once().body.decode()
    ok = catalog.COLLECTOR_SUCCESS.name
    assert f'{catalog.GPU_TEMPERATURE.name}{{node="n1",gpu="0",uuid="u0"}} 41' in body
    assert f'{ok}{{node="n1",collector="broken"}} 0' in body
    assert f'{ok}{{node="n1",collector="steady"}} 1' in body


def test_read_errors_of_a_collector_are_exported_by_what_failed() -> None:
    steady = Steady()
    steady.read_errors.add("temperature")
    steady.read_errors.add("temperature")
    body = _loop(steady).run_once().body.decode()
    name = catalog.READ_ERRORS.name
    assert f'{name}{{node="n1",collector="steady",what="temperature"}} 2' in body


def test_each_scrape_serves_the_last_snapshot_without_collecting_again() -> None:
    steady = Steady()
    loop = _loop(steady)
    loop.run_once()
    first = loop.snapshot.body
    assert loop.snapshot.body is first and steady.calls == 1
    loop.run_once()
    assert loop.snapshot.body != first and steady.calls == 2


def test_health_is_fresh_after_a_cycle_and_stale_when_cycles_stop() -> None:
    clock = Clock()
    loop = _loop(Steady(), clock=clock)
    assert loop.health(15)[0] is False  # nothing collected yet
    loop.run_once()
    assert loop.health(15) == (True, "ok")
    clock.t += 16
    ok, reason = loop.health(15)
    assert not ok and "16.0s ago" in reason


def test_health_is_bad_when_every_collector_fails_and_says_why() -> None:
    loop = _loop(Broken())
    loop.run_once()
    ok, reason = loop.health(15)
    assert not ok and "NVML Shared Library Not Found" in reason


def test_gzip_body_is_compressed_once_and_decompresses_to_the_body() -> None:
    import gzip

    snap = _loop(Steady()).run_once()
    assert gzip.decompress(snap.gzipped()) == snap.body
    assert snap.gzipped() is snap.gzipped()


def test_the_background_loop_keeps_collecting_until_stopped() -> None:
    import time

    steady = Steady()
    loop = CollectionLoop([steady], "n1", source="nvml", interval=0.05)
    loop.start()
    try:
        deadline = time.monotonic() + 5
        while steady.calls < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    finally:
        loop.stop()
    assert steady.calls >= 3
    calls = steady.calls
    time.sleep(0.15)
    assert steady.calls == calls
