"""Real replica processes on the shared-directory membership, one killed (SIGKILL) in the
middle of judging its units and restarted: no unit is judged twice in any cycle, and units go
unjudged only in the cycle of the kill; the others carry on and the restarted replica takes
its share back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

INTERVAL = 2.0
UNITS = 12
PER_UNIT = 0.08


def _spawn(root: Path, name: str, ledger: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.analyzer.replica_worker", str(root), name, str(ledger),
         str(INTERVAL), str(UNITS), str(PER_UNIT)],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip


def _rows(ledger: Path) -> list[tuple[int, str, str]]:
    if not ledger.exists():
        return []
    out = []
    for line in ledger.read_text().splitlines():
        k, u, r = line.split()
        out.append((int(k), u, r))
    return out


def _cycle() -> int:
    return int(time.time() // INTERVAL)


def _wait_until(pred, timeout: float) -> None:  # type: ignore[no-untyped-def]
    end = time.time() + timeout
    while not pred():
        assert time.time() < end, "timed out"
        time.sleep(0.01)


def test_a_replica_killed_mid_judgement_costs_at_most_that_cycle(tmp_path: Path) -> None:
    ledger = tmp_path / "ledger"
    procs = {n: _spawn(tmp_path / "m", n, ledger) for n in ("a", "b", "c")}
    try:
        start = _cycle()
        _wait_until(lambda: _cycle() >= start + 3, 30)
        # b is judging: kill it after its first unit of this cycle, before its last
        k = _cycle()
        _wait_until(lambda: any(c == k and r == "b" for c, _, r in _rows(ledger)), 2 * INTERVAL)
        procs["b"].send_signal(signal.SIGKILL)
        procs["b"].wait(10)
        killed_in = k
        _wait_until(lambda: _cycle() >= killed_in + 1, 10)
        procs["b"] = _spawn(tmp_path / "m", "b", ledger)  # restarted, same name
        _wait_until(lambda: _cycle() >= killed_in + 5, 30)
    finally:
        for p in procs.values():
            p.send_signal(signal.SIGTERM)
        for p in procs.values():
            p.wait(20)
    rows = _rows(ledger)
    twice = [key for key, n in Counter((c, u) for c, u, _ in rows).items() if n > 1]
    assert not twice, twice
    units = {f"leaf/l{i:02d}" for i in range(UNITS)}
    by_cycle: dict[int, set[str]] = {}
    for c, u, _ in rows:
        by_cycle.setdefault(c, set()).add(u)
    first, last = min(by_cycle), killed_in + 4
    incomplete = [c for c in range(first, last + 1) if by_cycle.get(c, set()) != units]
    assert incomplete == [killed_in], (incomplete, killed_in)
    assert len(by_cycle[killed_in]) < UNITS  # b's unjudged units: that cycle only
    judged_by_b_after = {c for c, _, r in rows if r == "b" and c > killed_in + 1}
    assert judged_by_b_after, "the restarted replica took its share back"
