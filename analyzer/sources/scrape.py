"""The embedded default source: scrape exporter (or simulator) targets into memory.

Edge of the analyzer (HTTP I/O), used when no Prometheus is configured (``--targets
FILE_SD``; ``gpuwarden demo`` points it at the simulator's ``--file-sd`` output). Each
``read`` scrapes every target once, keeps the rounds within the window, and builds the same
:class:`Window` as the Prometheus source. A target that fails costs its own error count and
leaves NaN in its series (so the node's silence is seen by the missing detector).
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import yaml
from prometheus_client.parser import text_string_to_metric_families

from analyzer.sources import SourceError
from analyzer.sources.build import QUERIED_NAMES, BuildReport, RawSeries, build_window
from analyzer.window import Window

Key = tuple[str, tuple[tuple[str, str], ...]]


@dataclass(frozen=True)
class Target:
    url: str
    labels: Mapping[str, str]


def load_targets(path: str | Path) -> list[Target]:
    """Prometheus file_sd (JSON or YAML): ``[{targets: [host:port], labels: {...}}]``."""
    try:
        text = Path(path).read_text()
        data = json.loads(text) if str(path).endswith(".json") else yaml.safe_load(text)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise SourceError(f"targets file {path}: {e}") from None
    if not isinstance(data, list):
        raise SourceError(f"targets file {path}: expected a list of target groups")
    out = []
    for group in data:
        if not isinstance(group, dict):
            raise SourceError(f"targets file {path}: a target group is not a mapping")
        labels = {str(k): str(v) for k, v in (group.get("labels") or {}).items()}
        scheme = labels.pop("__scheme__", "http")
        path_ = labels.pop("__metrics_path__", "/metrics")
        for t in group.get("targets") or []:
            out.append(Target(f"{scheme}://{t}{path_}", labels))
    return out


def parse_exposition(text: str, target_labels: Mapping[str, str]) -> dict[Key, float]:
    """Samples of the metrics the detectors read; target labels fill in missing ones."""
    out: dict[Key, float] = {}
    extra = {k: v for k, v in target_labels.items() if not k.startswith("__")}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name not in QUERIED_NAMES:
                continue
            labels = {**extra, **s.labels}
            out[(s.name, tuple(sorted(labels.items())))] = float(s.value)
    return out


class Fetcher(Protocol):
    async def fetch(self, url: str) -> str: ...


class AiohttpFetcher:
    def __init__(self, timeout: float = 5.0) -> None:
        self.timeout = timeout
        self._session: Any = None

    async def fetch(self, url: str) -> str:
        import aiohttp

        if self._session is None:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout))
        async with self._session.get(url) as r:
            if r.status != 200:
                raise SourceError(f"{url}: HTTP {r.status}")
            return str(await r.text())

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()


class ScrapeSource:
    name = "scrape"

    def __init__(
        self,
        targets: list[Target],
        window: float = 600.0,
        step: float = 15.0,
        fetcher: Fetcher | None = None,
        leaf_of: Mapping[str, str] | None = None,
    ) -> None:
        self.targets = targets
        self.span, self.step = window, step
        self.fetcher: Fetcher = fetcher or AiohttpFetcher()
        self.leaf_of = dict(leaf_of or {})
        self.rounds: deque[tuple[float, dict[Key, float]]] = deque()
        self.errors = 0
        self.report = BuildReport()

    async def _one(self, t: Target) -> dict[Key, float]:
        try:
            text = await self.fetcher.fetch(t.url)
            return await asyncio.to_thread(parse_exposition, text, t.labels)  # off the loop
        except Exception:
            self.errors += 1
            return {}

    async def read(self, now: float) -> Window:
        parts = await asyncio.gather(*(self._one(t) for t in self.targets))
        merged: dict[Key, float] = {}
        for p in parts:
            merged.update(p)
        self.rounds.append((now, merged))
        while self.rounds and self.rounds[0][0] < now - self.span:
            self.rounds.popleft()
        return await asyncio.to_thread(self.window)

    def window(self) -> Window:
        grid = np.array([t for t, _ in self.rounds], dtype=float)
        idx: dict[Key, list[int]] = {}
        vals: dict[Key, list[float]] = {}
        for i, (_, samples) in enumerate(self.rounds):
            for k, v in samples.items():
                idx.setdefault(k, []).append(i)
                vals.setdefault(k, []).append(v)
        series = [RawSeries(k[0], dict(k[1]), np.array(idx[k]), np.array(vals[k])) for k in idx]
        self.report = BuildReport()
        return build_window(series, grid, self.step, self.leaf_of, self.report)

    async def close(self) -> None:
        close = getattr(self.fetcher, "close", None)
        if close is not None:
            await close()
