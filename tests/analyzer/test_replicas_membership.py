"""The membership contract on the in-memory fake and on the bare-metal shared directory,
including real processes racing for the directory's leader lease."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from pathlib import Path

import pytest

from analyzer.replicas.filedir import DirectoryMembership
from analyzer.replicas.membership import Membership, MemoryMembership
from tests.analyzer.membership_contract import CONTRACT, T0


@pytest.mark.parametrize("check", CONTRACT, ids=lambda c: c.__name__)
@pytest.mark.parametrize("backend", ["memory", "directory"])
def test_each_backend_keeps_the_membership_contract(
    backend: str, check: Callable[[Membership], None], tmp_path: Path
) -> None:
    m: Membership = MemoryMembership() if backend == "memory" else DirectoryMembership(tmp_path)
    check(m)


def _try_lead(root: str, name: str, start: object, out: object) -> None:
    m = DirectoryMembership(root)
    start.wait()  # type: ignore[attr-defined]
    out.put((name, m.lead(name, T0, 12.0)))  # type: ignore[attr-defined]


def test_processes_racing_for_the_directory_lease_elect_exactly_one(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("fork")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_try_lead, args=(str(tmp_path), f"r-{i}", start, out))
             for i in range(6)]  # fmt: skip
    for p in procs:
        p.start()
    start.set()
    got = dict(out.get(timeout=30) for _ in procs)
    for p in procs:
        p.join(10)
    assert sum(got.values()) == 1
    winner = next(n for n, won in got.items() if won)
    assert not DirectoryMembership(tmp_path).lead("other", T0 + 1, 12.0)
    assert DirectoryMembership(tmp_path).lead(winner, T0 + 1, 12.0)


def test_a_torn_leader_file_restarts_the_lease_instead_of_stopping_the_replica(
    tmp_path: Path,
) -> None:
    m = DirectoryMembership(tmp_path)
    (tmp_path / "leader.json").write_text("{not json")
    assert m.plan(3) is None
    assert m.lead("r-1", T0, 12.0)


def test_an_unwritable_membership_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ValueError, match="membership directory"):
        DirectoryMembership(blocker / "sub")
