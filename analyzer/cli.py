"""``gpuwarden-analyzer`` / ``gpuwarden analyzer`` / ``python -m analyzer``: wire settings,
source, detectors and service, then serve (or ``--once``: one cycle, findings JSON on stdout;
``--at TIME``: the cycle that would have run at TIME; ``--replay FROM TO --step S``: the
cycles from FROM to TO every S seconds, one JSON line each).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import logging
import sys
import time
from collections.abc import Sequence

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.inventory import load_inventory
from analyzer.output import findings_json
from analyzer.replicas.role import ReplicaRole, exchange_from, membership_from
from analyzer.service import AnalyzerService
from analyzer.settings import AnalyzerSettings
from analyzer.sources import SeriesSource, SourceError
from analyzer.sources.dialects import coverage
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
    p.add_argument("--inventory", help="YAML inventory file: model, hca, rack, leaf, power caps")
    p.add_argument("--alertmanager", help="Alertmanager URL for direct v2 pushes")
    p.add_argument("--query-timeout", dest="query_timeout", help="seconds per Prometheus request")
    p.add_argument("--query-retries", dest="query_retries", help="retries on a transient failure")
    p.add_argument("--query-parallel", dest="query_parallel", help="queries in flight at once")
    p.add_argument("--query-gzip", dest="query_gzip", help="ask for gzip answers (true/false)")
    p.add_argument("--resolution", help="query step in seconds (default: the interval)")
    p.add_argument("--node-pattern", dest="node_pattern",
                   help="regex on foreign host names (dcgm-exporter Hostname, node_exporter "
                   "instance); group 1 is the node name")  # fmt: skip
    p.add_argument("--node-map", dest="node_map", help="file of 'host node' lines")
    p.add_argument("--replica", help="sharded mode: this replica's name (a DNS label)")
    p.add_argument("--membership",
                   help="sharded mode: kubernetes:<namespace> (Leases) or dir:<path>")  # fmt: skip
    p.add_argument("--topology-wait", dest="topology_wait",
                   help="sharded mode: how long a replica waits for the leader's topology "
                   "before it reads its own, a fraction of the interval (0: every replica "
                   "reads it)")  # fmt: skip
    p.add_argument("--once", action="store_true", help="run one cycle, print findings, exit")
    p.add_argument("--coverage", action="store_true",
                   help="run one cycle, print what each detector can judge per node group "
                   "(and what would enable the rest), exit")  # fmt: skip
    p.add_argument(
        "--at",
        type=_when,
        metavar="TIME",
        help="analyse a past moment (unix seconds or ISO 8601), print findings, exit",
    )
    p.add_argument(
        "--replay",
        nargs=2,
        type=_when,
        metavar=("FROM", "TO"),
        help="run the cycles from FROM to TO, one JSON line of findings each",
    )
    p.add_argument("--step", type=float, help="seconds between --replay cycles (default: interval)")
    return p


def _when(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        pass
    try:
        t = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{text!r} is neither unix seconds nor an ISO 8601 time"
        ) from None
    return (t if t.tzinfo else t.replace(tzinfo=dt.UTC)).timestamp()


def build_source(s: AnalyzerSettings) -> SeriesSource:
    if s.prometheus:
        return PrometheusSource(
            s.prometheus,
            s.window,
            s.step,
            leaf_of=s.leaf_of,
            timeout=s.query_timeout,
            retries=s.query_retries,
            parallel=s.query_parallel,
            lookback=s.counter_lookback,
            gzip=s.query_gzip,
            discover=True,
            node_map=s.nodes(),
        )
    return ScrapeSource(load_targets(s.targets), s.window, s.interval, leaf_of=s.leaf_of)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    local = ("config", "once", "at", "replay", "step", "coverage")
    flags = {k: v for k, v in vars(args).items() if k not in local}
    try:
        settings = load(AnalyzerSettings, flags, config_file=args.config)
        source = build_source(settings)
        inventory = load_inventory(settings.inventory) if settings.inventory else None
        engine = Engine(default_detectors(settings.detector_config()), inventory=inventory)
        _check_time_travel(args, settings)
        role = None
        if settings.replica and not (args.once or args.at is not None or args.replay
                                     or args.coverage):  # fmt: skip
            role = ReplicaRole(membership_from(settings.membership), settings.replica,
                               settings.interval,
                               exchange=exchange_from(settings.membership),
                               topology_wait=settings.topology_wait * settings.interval,
                               inventory=inventory)  # fmt: skip
    except (SettingsError, SourceError, ValueError) as e:
        print(f"gpuwarden-analyzer: {e}", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    service = AnalyzerService(source, engine, settings.interval, settings.alertmanager,
                              replica=role)  # fmt: skip
    if args.replay:
        start, stop = args.replay
        return asyncio.run(_replay(service, start, stop, args.step or settings.interval))
    if args.coverage:
        return asyncio.run(_coverage(service, args.at))
    if args.once or args.at is not None:
        return asyncio.run(_once(service, args.at))
    from aiohttp import web

    host, port = settings.host_port
    web.run_app(service.app(), host=host, port=port, print=None)
    return 0


def _check_time_travel(args: argparse.Namespace, s: AnalyzerSettings) -> None:
    if (args.at is not None or args.replay) and not s.prometheus:
        raise SettingsError("--at and --replay read history: they need --prometheus URL")
    if args.replay:
        start, stop = args.replay
        if stop < start:
            raise SettingsError(f"--replay: TO ({stop}) is before FROM ({start})")
        if args.step is not None and not args.step > 0:
            raise SettingsError(f"--step must be > 0 seconds, got {args.step}")
    elif args.step is not None:
        raise SettingsError("--step goes with --replay")


async def _close(service: AnalyzerService) -> None:
    close = getattr(service.source, "close", None)
    if close is not None:
        await close()


async def _once(service: AnalyzerService, at: float | None = None) -> int:
    await service.run_cycle(at)
    await _close(service)
    when = time.time() if at is None else at
    print(json.dumps(findings_json(service.engine.findings, when, service.missing), indent=2))
    return 0 if service.last_ok is not None else 1


async def _coverage(service: AnalyzerService, at: float | None = None) -> int:
    await service.run_cycle(at)
    await _close(service)
    if service.last_ok is None:
        print(f"gpuwarden-analyzer: no cycle: {service.last_error}", file=sys.stderr)
        return 1
    print(coverage.text(service.coverage()), end="")
    return 0


async def _replay(service: AnalyzerService, start: float, stop: float, step: float) -> int:
    """Each cycle from ``start`` to ``stop`` as one JSON line: what it would have found
    (incremental reads between cycles, as the live service does)."""
    ok = True
    t = start
    try:
        while t <= stop + 1e-9:
            service.last_ok = None
            await service.run_cycle(t)
            ok &= service.last_ok is not None
            line = findings_json(service.engine.findings, t, service.missing)
            if service.last_ok is None:
                line["error"] = service.last_error
            print(json.dumps(line), flush=True)
            t += step
    finally:
        await _close(service)
    return 0 if ok else 1
