"""One simulated node's checkpoint-storage prober: what the exporter's StorageCollector reads.

Sits between the fleet's faults (:mod:`simulator.faults.storage`) and the real
:class:`~exporter.collectors.storage.StorageCollector`, in place of the child-process
:class:`~exporter.sources.storage_probe.StorageProber`. ``advance(t)`` plays the probes the
real prober would have run every ``interval`` virtual seconds up to ``t``: a healthy mount
answers in milliseconds, ``storage_slow`` adds its latency (mostly to fsync; a probe longer
than ``timeout`` is ``hung``), ``storage_hung`` never answers. The mounts probed are the
fleet's ``storage_mounts`` plus every mount a storage fault has named so far, so an injected
fault is visible without configuration (and healthy nodes show the contrast).
Deterministic: the jitter is a hash of node, mount and probe number, never the wall clock.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence

from exporter.sources.storage_probe import OPS, ProbeResult
from simulator.faults import Fault
from simulator.faults.storage import STORAGE_KINDS

# A healthy parallel file system from a client: sub-millisecond metadata, a few ms of fsync.
HEALTHY_S = {"stat": 0.0004, "write": 0.0008, "fsync": 0.004, "read": 0.0004}
SLOW_SHARE = {"stat": 0.05, "write": 0.15, "fsync": 1.0, "read": 0.05}  # of latency_s


class SimStorage:
    def __init__(
        self,
        node: str,
        index: int,
        faults: Sequence[Fault] | None = None,
        mounts: Sequence[str] = (),
        *,
        interval: float = 30.0,
        timeout: float = 10.0,
    ) -> None:
        self.node, self.index = node, index
        self.configured = tuple(mounts)
        self.interval, self.timeout = interval, timeout
        self._faults: Sequence[Fault] = faults or ()
        self._t: float | None = None
        self._last: dict[str, ProbeResult] = {}
        self._counts: dict[tuple[str, str], int] = {}

    @property
    def mounts(self) -> tuple[str, ...]:
        named = [f.target for f in self._storage_faults() if self._t is None or f.onset <= self._t]
        return tuple(dict.fromkeys([*self.configured, *sorted(set(named))]))

    def start(self) -> None:
        """Nothing to start: ``advance`` is driven by the simulator's clock."""

    def last(self) -> dict[str, ProbeResult]:
        return dict(self._last)

    def counts(self) -> dict[tuple[str, str], int]:
        return dict(self._counts)

    def advance(self, t: float, faults: Sequence[Fault] | None = None) -> None:
        """Run the probes due up to virtual time ``t`` (at least one on the first call)."""
        if faults is not None:
            self._faults = faults
        before = self._t
        self._t = t
        due = (
            1
            if before is None
            else math.floor(t / self.interval) - math.floor(before / self.interval)
        )
        if due <= 0:
            return
        for mount in self.mounts:
            result = self.probe(mount, t)
            self._last[mount] = result
            key = (mount, result.outcome)
            self._counts[key] = self._counts.get(key, 0) + due

    def probe(self, mount: str, t: float) -> ProbeResult:
        """The probe of ``mount`` at ``t`` as this node sees it."""
        active = [f for f in self._storage_faults() if f.target == mount and f.state_at(t)
                  and self.index in f.nodes]  # fmt: skip
        if any(f.kind == "storage_hung" for f in active):
            return ProbeResult(mount, "hung", {}, f"no answer in {self.timeout:g} s", t)
        extra = sum(float(f.parameters["latency_s"]) for f in active)
        n = math.floor(t / self.interval)
        seconds = {
            op: HEALTHY_S[op] * _jitter(self.node, mount, n, op) + extra * SLOW_SHARE[op]
            for op in OPS
        }
        if sum(seconds.values()) > self.timeout:
            return ProbeResult(mount, "hung", {}, f"no answer in {self.timeout:g} s", t)
        return ProbeResult(mount, "ok", seconds, "", t)

    def _storage_faults(self) -> list[Fault]:
        return [f for f in self._faults if f.kind in STORAGE_KINDS]


def _jitter(node: str, mount: str, n: int, op: str) -> float:
    """A factor in [0.75, 1.5): the same for the same node, mount, probe and op."""
    h = hashlib.blake2b(f"{node}|{mount}|{n}|{op}".encode(), digest_size=4).digest()
    return 0.75 + 0.75 * int.from_bytes(h, "big") / 2**32
