"""``gpuwarden-analyzer`` / ``gpuwarden analyzer`` / ``python -m analyzer``: wire settings,
source, detectors and service, then serve (or ``--once``: one cycle, findings JSON on stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
from collections.abc import Sequence

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.output import findings_json
from analyzer.service import AnalyzerService
from analyzer.settings import AnalyzerSettings
from analyzer.sources import SeriesSource, SourceError
from analyzer.sources.prometheus import PrometheusSource
from analyzer.sources.scrape import ScrapeSource, load_targets
from common.settings import SettingsError, load


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden-analyzer", description=__doc__)
    p.add_argument("--prometheus", help="Prometheus-compatible API URL (absent: embedded scrape)")
    p.add_argument("--targets", help="file_sd targets to scrape when no Prometheus is given")
    p.add_argument("--listen", help="HOST:PORT to serve /metrics, /findings, /healthz")
    p.add_argument("--interval", help="seconds between analysis cycles")
    p.add_argument("--window", help="seconds of history each cycle looks at")
    p.add_argument("--config", help="YAML settings file (xid_overrides, leaf_of, detectors)")
    p.add_argument("--alertmanager", help="Alertmanager URL for direct v2 pushes")
    p.add_argument("--once", action="store_true", help="run one cycle, print findings, exit")
    return p


def build_source(s: AnalyzerSettings) -> SeriesSource:
    if s.prometheus:
        return PrometheusSource(s.prometheus, s.window, s.interval, leaf_of=s.leaf_of)
    return ScrapeSource(load_targets(s.targets), s.window, s.interval, leaf_of=s.leaf_of)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    flags = {k: v for k, v in vars(args).items() if k not in ("config", "once")}
    try:
        settings = load(AnalyzerSettings, flags, config_file=args.config)
        source = build_source(settings)
        engine = Engine(default_detectors(settings.detector_config()))
    except (SettingsError, SourceError, ValueError) as e:
        print(f"gpuwarden-analyzer: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    service = AnalyzerService(source, engine, settings.interval, settings.alertmanager)
    if args.once:
        return asyncio.run(_once(service))
    from aiohttp import web

    host, port = settings.host_port
    web.run_app(service.app(), host=host, port=port, print=None)
    return 0


async def _once(service: AnalyzerService) -> int:
    await service.run_cycle()
    close = getattr(service.source, "close", None)
    if close is not None:
        await close()
    print(json.dumps(findings_json(service.engine.findings, time.time()), indent=2))
    return 0 if service.last_ok is not None else 1
