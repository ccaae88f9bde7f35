"""Prometheus HTTP API source: one ``query_range`` per metric over the analysis window.

Edge of the analyzer (network I/O). Works with any Prometheus-compatible server (Prometheus,
Thanos, Mimir, VictoriaMetrics). The HTTP client sits behind :class:`HttpJson` so tests can
feed recorded responses (``fixtures/prometheus/``). A malformed response or an error status
raises :class:`SourceError` with the reason; a single bad sample is skipped.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

import numpy as np

from analyzer.sources import SourceError
from analyzer.sources.build import QUERIED, BuildReport, RawSeries, build_window
from analyzer.window import Window
from exporter import catalog


class HttpJson(Protocol):
    async def get_json(self, url: str, params: Mapping[str, str]) -> Any: ...


class AiohttpJson:
    """The real client: one aiohttp session, a per-request timeout."""

    def __init__(self, timeout: float = 10.0) -> None:
        self.timeout = timeout
        self._session: Any = None

    async def get_json(self, url: str, params: Mapping[str, str]) -> Any:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        try:
            async with self._session.get(url, params=dict(params)) as r:
                text = await r.text()
                if r.status >= 500:
                    raise SourceError(f"{url}: HTTP {r.status}")
                import json

                # Off the event loop: a big query_range answer takes long to decode, and the
                # service's /metrics and /healthz must keep answering meanwhile.
                return await asyncio.to_thread(json.loads, text)
        except (aiohttp.ClientError, TimeoutError, ValueError) as e:
            raise SourceError(f"{url}: {type(e).__name__}: {e}") from None

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


def parse_matrix(body: Any, name: str, start: float, step: float, T: int) -> list[RawSeries]:
    """Series from a ``query_range`` response body, placed on the window grid."""
    if not isinstance(body, dict):
        raise SourceError(f"query_range {name}: response is not a JSON object")
    if body.get("status") != "success":
        raise SourceError(
            f"query_range {name}: status {body.get('status')!r}: {body.get('error', '')}"
        )
    data = body.get("data")
    if not isinstance(data, dict) or data.get("resultType") != "matrix":
        raise SourceError(f"query_range {name}: expected a matrix result")
    result = data.get("result")
    if not isinstance(result, list):
        raise SourceError(f"query_range {name}: result is not a list")
    out = []
    for item in result:
        if not isinstance(item, dict) or not isinstance(item.get("metric"), dict):
            continue
        idx, vals = _place(item.get("values") or [], start, step, T)
        labels = {str(k): str(v) for k, v in item["metric"].items() if k != "__name__"}
        out.append(RawSeries(name, labels, idx, vals))
    return out


def _place(values: Any, start: float, step: float, T: int) -> tuple[np.ndarray, np.ndarray]:
    """(grid index, value) of ``[[ts, "value"], ...]``; vectorised, with a per-pair fallback
    that skips malformed pairs when the fast path cannot parse them."""
    try:
        arr = np.asarray(values, dtype=float).reshape(-1, 2)
    except (TypeError, ValueError):
        arr = np.asarray(_good_pairs(values), dtype=float).reshape(-1, 2)
    i = np.rint((arr[:, 0] - start) / step).astype(int)
    keep = (i >= 0) & (i < T) & ~np.isinf(arr[:, 1])
    return i[keep], arr[keep, 1]


def _good_pairs(values: Any) -> list[tuple[float, float]]:
    out = []
    for pair in values if isinstance(values, list) else []:
        try:
            out.append((float(pair[0]), float(pair[1])))
        except (TypeError, ValueError, IndexError):
            continue
    return out


class PrometheusSource:
    name = "prometheus"

    def __init__(
        self,
        url: str,
        window: float = 600.0,
        step: float = 15.0,
        http: HttpJson | None = None,
        leaf_of: Mapping[str, str] | None = None,
        metrics: Sequence[catalog.MetricDef] = QUERIED,
    ) -> None:
        self.url = url.rstrip("/")
        self.span, self.step = window, step
        self.http: HttpJson = http or AiohttpJson()
        self.leaf_of = dict(leaf_of or {})
        self.metrics = tuple(metrics)
        self.report = BuildReport()

    async def read(self, now: float) -> Window:
        end = math.floor(now / self.step) * self.step
        start = end - self.span
        T = round(self.span / self.step) + 1
        grid = start + self.step * np.arange(T)
        series: list[RawSeries] = []
        for m in self.metrics:
            params = {
                "query": m.name,
                "start": repr(start),
                "end": repr(end),
                "step": repr(self.step),
            }
            body = await self.http.get_json(f"{self.url}/api/v1/query_range", params)
            series += await asyncio.to_thread(parse_matrix, body, m.name, start, self.step, T)
        self.report = BuildReport()
        return await asyncio.to_thread(
            build_window, series, grid, self.step, self.leaf_of, self.report
        )

    async def close(self) -> None:
        close = getattr(self.http, "close", None)
        if close is not None:
            await close()
