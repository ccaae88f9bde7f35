"""A replica process for the kill test: the real coordinator on the shared-directory
membership and the wall clock, judging fixed units slowly (so a kill lands mid-judgement)
and appending ``cycle unit replica`` to a ledger. SIGTERM: leave, then exit.

``python -m tests.analyzer.replica_worker ROOT NAME LEDGER INTERVAL UNITS PER_UNIT_S``
"""

from __future__ import annotations

import os
import signal
import sys
import time

from analyzer.replicas.coordinator import Coordinator, Timing
from analyzer.replicas.filedir import DirectoryMembership


def main(argv: list[str]) -> int:
    root, name, ledger, interval, count, per_unit = argv
    units = [f"leaf/l{i:02d}" for i in range(int(count))]
    coord = Coordinator(DirectoryMembership(root), name, Timing(float(interval)), time.time())
    stop = False

    def on_term(*_: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, on_term)
    fd = os.open(ledger, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    while not stop:
        plan = coord.turn(time.time())
        if plan is not None:
            for u in coord.mine(plan, units):
                time.sleep(float(per_unit))  # the judgement
                os.write(fd, f"{plan.cycle} {u} {name}\n".encode())
        time.sleep(float(interval) / 50)
    coord.leave()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
