"""The keeper (remediation/leader/keeper.py) renews the lease and calls its fail-stop the
moment the lease cannot be proven held; the directory store (remediation/leader/directory.py)
gives the election its compare-and-swap on shared storage."""

from __future__ import annotations

import json
import logging
import multiprocessing
import threading
import time
from pathlib import Path

import pytest

from remediation.leader.directory import RECORD, DirectoryLeaseStore
from remediation.leader.elector import Elector, MemoryLeaseStore, Record
from remediation.leader.keeper import Keeper


def released() -> MemoryLeaseStore:
    return MemoryLeaseStore(Record("", "0", 1.5))


def fast(store: MemoryLeaseStore | DirectoryLeaseStore, name: str = "a") -> Elector:
    return Elector(store, name, lease_s=1.5, renew_deadline_s=1.0)


class Lost:
    def __init__(self) -> None:
        self.reasons: list[str] = []
        self.at: float | None = None
        self.event = threading.Event()

    def __call__(self, reason: str) -> None:
        self.reasons.append(reason)
        self.at = time.monotonic()
        self.event.set()


def test_a_leader_that_keeps_renewing_is_never_stopped() -> None:
    store, lost = released(), Lost()
    k = Keeper(fast(store), 0.1, lost)
    assert k.acquire()
    k.start()
    time.sleep(2.0)  # twice the renew deadline
    k.stop(release=False)
    assert lost.reasons == [] and store.writes >= 10


def test_a_lease_taken_by_another_writer_stops_the_leader_within_the_renew_period() -> None:
    store, lost = released(), Lost()
    k = Keeper(fast(store), 0.1, lost)
    k.acquire()
    k.start()
    assert store.record is not None
    store.record = Record("intruder", "999", 1.5)  # replaced behind our back
    t0 = time.monotonic()
    assert lost.event.wait(2)
    assert lost.at is not None and lost.at - t0 < 0.5  # the next renewal fails the CAS
    assert "lost" in lost.reasons[0]
    k.stop()
    assert store.record.holder == "intruder"  # a lost lease is not "released"


def test_a_store_that_hangs_stops_the_leader_by_its_renew_deadline() -> None:
    """The renewal blocks (a stalled API server or file system); the watch thread, not the
    blocked one, ends the term before a standby may take it (1.5 s)."""
    hang = threading.Event()

    class Hanging(MemoryLeaseStore):
        def read(self) -> Record | None:
            if hang.is_set():
                time.sleep(5)
            return super().read()

    store, lost = Hanging(Record("", "0", 1.5)), Lost()
    e = fast(store)
    k = Keeper(e, 0.1, lost)
    k.acquire()
    k.start()
    hang.set()
    t0 = time.monotonic()
    assert lost.event.wait(3)
    assert lost.at is not None and lost.at - t0 < 1.0 + 0.1 + 0.3  # deadline, a period, a watch
    k._stop.set()


def test_store_errors_are_logged_once_and_the_leader_stops_only_when_the_term_ends(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Flaky(MemoryLeaseStore):
        down = False

        def read(self) -> Record | None:
            if self.down:
                raise OSError("Stale file handle")
            return super().read()

    store, lost = Flaky(Record("", "0", 1.5)), Lost()
    k = Keeper(fast(store), 0.1, lost)
    k.acquire()
    k.start()
    with caplog.at_level(logging.WARNING, "gpuwarden.remediation.leader"):
        store.down = True
        t0 = time.monotonic()
        assert lost.event.wait(3)
    assert lost.at is not None and 0.8 < lost.at - t0 < 1.5
    said = [r.getMessage() for r in caplog.records if "Stale file handle" in r.getMessage()]
    assert len(said) == 1  # once, not once per renewal
    k._stop.set()


def test_a_standby_waits_until_the_holder_releases_and_a_stop_ends_the_wait() -> None:
    store = released()
    holder = fast(store, "holder")
    holder.attempt()
    k = Keeper(fast(store, "standby"), 0.05, Lost())
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(k.acquire()))
    t.start()
    time.sleep(0.3)
    assert got == []
    holder.release()
    t.join(2)
    assert got == [True] and store.record is not None and store.record.holder == "standby"

    stop = threading.Event()
    other = Keeper(fast(store, "third"), 0.05, Lost())
    t = threading.Thread(target=lambda: got.append(other.acquire(stop)))
    t.start()
    stop.set()
    t.join(2)
    assert got == [True, False]


def test_a_stop_that_lands_while_the_lease_is_taken_hands_it_back() -> None:
    stop = threading.Event()

    class Racing(MemoryLeaseStore):
        def write(self, holder: str, lease_s: float, expect: str | None) -> str | None:
            if holder:
                stop.set()  # SIGTERM arrives while the winning write is on its way
            return super().write(holder, lease_s, expect)

    store = Racing(Record("", "0", 1.5))
    k = Keeper(fast(store), 0.05, Lost())
    assert k.acquire(stop) is False
    assert store.record is not None and store.record.holder == ""  # released at once
    assert not k.elector.attempt()  # and closed


def test_a_retry_period_not_shorter_than_the_renew_deadline_is_refused() -> None:
    with pytest.raises(ValueError, match="retry period"):
        Keeper(fast(released()), 1.0, Lost())


def test_release_hands_the_lease_over_and_a_failing_release_only_warns(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = released()
    k = Keeper(fast(store), 0.1, Lost())
    k.acquire()
    k.stop(release=True)
    assert store.record is not None and store.record.holder == ""

    class Refusing(MemoryLeaseStore):
        def write(self, holder: str, lease_s: float, expect: str | None) -> str | None:
            if holder == "":
                raise OSError("read-only file system")
            return super().write(holder, lease_s, expect)

    k = Keeper(fast(Refusing(Record("", "0", 1.5))), 0.1, Lost())
    k.acquire()
    with caplog.at_level(logging.WARNING, "gpuwarden.remediation.leader"):
        k.stop(release=True)
    assert any("expires by itself" in r.getMessage() for r in caplog.records)


# ----------------------------------------------------------------------- the directory store
def test_the_directory_store_creates_replaces_only_the_version_it_read_and_keeps_the_holder(
    tmp_path: Path,
) -> None:
    s = DirectoryLeaseStore(tmp_path)
    assert s.read() is None
    v1 = s.write("a", 14.2, None)
    assert v1 is not None and v1.startswith("1.")
    assert s.write("b", 15, None) is None  # there is one now
    assert s.read() == Record("a", v1, 15.0)  # whole seconds, as a Lease's
    assert s.write("b", 15, "0.x") is None
    v2 = s.write("b", 15, v1)
    assert v2 is not None and v2.startswith("2.")
    assert s.read() == Record("b", v2, 15.0)
    doc = json.loads((tmp_path / RECORD).read_text())
    assert doc == {"holder": "b", "generation": 2, "nonce": v2.split(".")[1], "lease_s": 15}


def test_a_record_removed_and_made_again_never_repeats_a_version(tmp_path: Path) -> None:
    """A standby that saw generation 1 long ago must not take a new generation 1 for the
    same, long-expired record: the nonce tells them apart."""
    s = DirectoryLeaseStore(tmp_path)
    seen = set()
    for _ in range(20):
        v = s.write("a", 15, None)
        assert v is not None and v not in seen
        seen.add(v)
        (tmp_path / RECORD).unlink()


@pytest.mark.parametrize(
    "text",
    ["{", "[]", '{"holder": "a", "generation": "1", "nonce": "x", "lease_s": 15}',
     '{"holder": "a", "generation": 1, "nonce": "x", "lease_s": 0}',
     '{"generation": 1, "nonce": "x", "lease_s": 15}',
     '{"holder": "a", "generation": 1, "lease_s": 15}',
     '{"holder": "a", "generation": true, "nonce": "x", "lease_s": 15}', "\udcff"],
)  # fmt: skip
def test_a_record_that_does_not_read_is_a_clear_error_never_a_free_lease(
    tmp_path: Path, text: str
) -> None:
    (tmp_path / RECORD).write_bytes(text.encode("utf-8", "surrogateescape"))
    s = DirectoryLeaseStore(tmp_path)
    with pytest.raises(ValueError, match=r"not a lease record.*remove it"):
        s.read()
    with pytest.raises(ValueError, match="not a lease record"):
        s.write("a", 15, None)
    e = fast(s)
    with pytest.raises(ValueError):
        e.attempt()
    assert not e.held()


def test_a_missing_or_read_only_directory_is_refused_at_start(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a directory"):
        DirectoryLeaseStore(tmp_path / "nope")
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    try:
        import os

        if os.geteuid() != 0:  # root writes anywhere
            with pytest.raises(ValueError, match="not writable"):
                DirectoryLeaseStore(ro)
    finally:
        ro.chmod(0o700)


def _race(root: str, name: str, start: float, out: multiprocessing.Queue) -> None:  # type: ignore[type-arg]
    s = DirectoryLeaseStore(root)
    while time.time() < start:
        pass
    won = 0
    for _ in range(1000):
        rec = s.read()
        if s.write(name, 15, None if rec is None else rec.version) is not None:
            won += 1
    out.put((name, won))


def test_processes_racing_on_one_directory_never_both_replace_the_same_version(
    tmp_path: Path,
) -> None:
    """Four processes read-then-write 1,000 times each: every successful write replaced a
    distinct generation, so the wins add up to the final generation exactly (without the
    lock, two writers replace the same generation and the sum runs over)."""
    ctx = multiprocessing.get_context("spawn")
    out = ctx.Queue()
    start = time.time() + 1.5
    procs = [ctx.Process(target=_race, args=(str(tmp_path), f"p{i}", start, out)) for i in range(4)]
    for p in procs:
        p.start()
    wins = dict(out.get(timeout=60) for _ in procs)
    for p in procs:
        p.join(10)
    generation = json.loads((tmp_path / RECORD).read_text())["generation"]
    assert generation == sum(wins.values())


# ----------------------------------------------------------------------- the journal's fence
def test_the_fence_ends_a_leader_past_its_term_and_its_transaction_commits_nothing(
    tmp_path: Path,
) -> None:
    from remediation.journal import Journal
    from remediation.leader.keeper import NotLeader
    from tests.remediation.helpers import alert

    now = [0.0]
    e = Elector(released(), "a", lease_s=15, renew_deadline_s=10, clock=lambda: now[0])
    lost = Lost()
    k = Keeper(e, 1.0, lost)
    e.attempt()
    j = Journal(tmp_path / "state.db")
    j.fence = k.fence
    assert j.accept([alert("gpu-node-001")], 1.0) == (1, 0)  # inside the term
    now[0] = 10.0  # the term ran out (a frozen process thawing, say)
    with pytest.raises(NotLeader):
        j.accept([alert("gpu-node-002")], 2.0)
    assert [r["node"] for r in j.read("SELECT node FROM alerts")] == ["gpu-node-001"]
    assert lost.reasons and "before a journal commit" in lost.reasons[0]
    j.close()


def test_a_journal_without_leader_election_commits_as_before(tmp_path: Path) -> None:
    from remediation.journal import Journal
    from tests.remediation.helpers import alert

    j = Journal(tmp_path / "state.db")
    assert j.accept([alert("gpu-node-001")], 1.0) == (1, 0)
    assert len(j.read("SELECT node FROM alerts")) == 1
    j.close()


def test_a_shared_journal_keeps_a_rollback_journal_and_turns_a_wal_one_back(
    tmp_path: Path,
) -> None:
    from remediation.journal import Journal
    from tests.remediation.helpers import alert

    alone = Journal(tmp_path / "state.db")  # as a single instance left it
    alone.accept([alert("gpu-node-001")], 1.0)
    assert alone.scalar("PRAGMA journal_mode") == "wal"
    alone.close()
    shared = Journal(tmp_path / "state.db", shared=True)
    assert shared.scalar("PRAGMA journal_mode") == "delete"
    assert shared.scalar("PRAGMA synchronous") == 2  # FULL: every commit on the disk
    assert shared.accept([alert("gpu-node-002")], 2.0) == (1, 0)
    assert len(shared.read("SELECT node FROM alerts")) == 2  # nothing lost in the change
    shared.close()
    assert not (tmp_path / "state.db-wal").exists()


def test_a_leader_whose_last_steps_outlast_the_drain_exits_without_releasing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hand_over waits for the threads still running steps; one that outlasts the drain
    dies with the process (os._exit), and the lease is left to run out, not released
    beside it."""
    from remediation.leader import run

    store = released()
    k = Keeper(fast(store), 0.1, Lost())
    k.acquire()
    k.start()
    exits: list[int] = []

    def exit_(code: int) -> None:
        exits.append(code)
        raise SystemExit(code)

    monkeypatch.setattr(run.os, "_exit", exit_)
    step = threading.Thread(target=time.sleep, args=(1.5,), name="a-slow-step")
    step.start()
    with pytest.raises(SystemExit):
        run.hand_over(k, drain_s=0.2)
    assert exits == [0]
    assert store.record is not None and store.record.holder == "a"  # not released
    step.join()
    done = Keeper(fast(released()), 0.1, Lost())
    done.acquire()
    run.hand_over(done, drain_s=2.0)  # nothing running: released at once
    assert done.elector.store.read() is not None
    assert done.elector.store.read().holder == ""  # type: ignore[union-attr]
