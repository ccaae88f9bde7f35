"""Series sources: where the analyzer's window comes from.

Edge of the analyzer's data flow. Three implementations of :class:`SeriesSource`:
:class:`~analyzer.sources.prometheus.PrometheusSource` (any Prometheus-compatible
``query_range`` API), :class:`~analyzer.sources.scrape.ScrapeSource` (the embedded default:
scrape exporter/simulator targets into memory), and
:class:`~analyzer.sources.frames.FrameBuffer` (the simulator's virtual-time frames, for
``gpuwarden evaluate``). All produce the same :class:`~analyzer.window.Window`.
"""

from __future__ import annotations

from typing import Protocol

from analyzer.window import Window


class SourceError(RuntimeError):
    """The source could not deliver a window (server down, malformed response)."""


class SeriesSource(Protocol):
    name: str

    async def read(self, now: float) -> Window: ...
