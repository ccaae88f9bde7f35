"""What one device's read of a cycle produces, whichever vendor's library it reads: gauges as
read, counters made monotonic across the device's own resets (exporter.counters)."""

from __future__ import annotations

from exporter.catalog import MetricDef, Sample
from exporter.counters import Monotonic


class DeviceSamples:
    """Mixed into a vendor's per-device read (GpuRead, AmdRead), which holds the fields."""

    lv: tuple[str, ...]  # (node, gpu, uuid)
    mono: Monotonic
    out: list[Sample]

    def gauge(self, m: MetricDef, v: float | None, *extra: str) -> None:
        if v is not None:
            self.out.append(m.make(v, *self.lv, *extra))

    def counter(self, m: MetricDef, raw: float | None, *extra: str, scale: float = 1.0) -> None:
        if raw is not None:
            labels = (*self.lv, *extra)
            self.out.append(m.make(self.mono.update((m.name, labels), raw) * scale, *labels))
