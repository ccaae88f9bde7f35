"""The collector seam: each collector reads its sources once per cycle and returns samples.

A collector that raises loses only its own samples; the loop records
``gpuwarden_exporter_collector_success 0`` for it and the scrape goes on. Partial failures
(one NVML field, one sysfs file) are reported through :class:`ReadErrors`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Protocol

from exporter.catalog import Sample


class Collector(Protocol):
    name: str

    def collect(self) -> Sequence[Sample]: ...


class ReadErrors:
    """Counts reads a collector skipped, keyed by what failed (exported as read_errors_total)."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    def add(self, what: str) -> None:
        self.counts[what] += 1
