"""`gpuwarden report`: what failures cost, from the journal (plus Prometheus) and/or
imported interchange files (docs/accounting.md).

    gpuwarden report [--since T --until T] [--format text|json] [--html FILE]
                     [--incidents F --exposure F] [--export-incidents F --export-exposure F]
                     [--state-db PATH] [--prometheus URL]
                     [--plan MODEL --plan-gpus N[,N] --checkpoint-cost D --restart-time D|measured
                      --plan-hours H --partition-nodes N --restart-target D
                      --restart-probability P]

Sources merge: the journal (when ``--state-db`` is given, or when no file is) and the files;
an incident id in both is taken once, the journal's. Exit 2 with one line on stderr when an
input does not parse (``FILE:LINE: why``); nothing is printed or written then.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from accounting import interchange, plan, report, text, writer
from accounting.interchange import InterchangeError
from accounting.journal import DEFAULT_STATE_DB
from accounting.model import Exposure, Incident, JobRun


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden report", description=__doc__.split("\n\n")[0])
    p.add_argument("--since", help="window start: RFC 3339 or epoch seconds (default: earliest)")
    p.add_argument(
        "--until", help="window end: RFC 3339, epoch seconds or 'now' (default: latest time known)"
    )
    p.add_argument("--format", choices=("text", "json"), default="text")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    p.add_argument("--incidents", metavar="FILE", help="import gpuwarden.incident/v1 lines")
    p.add_argument("--exposure", metavar="FILE", help="import gpuwarden.exposure/v1 lines")
    p.add_argument("--export-incidents", metavar="FILE", help="write the ledger's incidents")
    p.add_argument("--export-exposure", metavar="FILE", help="write the ledger's exposure")
    p.add_argument("--state-db", help=f"remediation journal (default {DEFAULT_STATE_DB})")
    p.add_argument("--prometheus", metavar="URL", help="onset, exposure and jobs from here")
    p.add_argument("--gpus-per-node", type=int, default=8, help="when Prometheus cannot say")
    g = p.add_argument_group("planning (docs/accounting.md, Planning)")
    g.add_argument("--plan", metavar="MODEL[,MODEL]", help="plan jobs of these GPU models")
    g.add_argument("--plan-gpus", metavar="N[,N]", help="the jobs' GPU counts (with --plan)")
    g.add_argument("--checkpoint-cost", default="5m", help="time to write a checkpoint (5m)")
    g.add_argument(
        "--restart-time",
        default="10m",
        help="failure to running again, or 'measured': the report's mean (10m)",
    )
    g.add_argument("--plan-hours", type=float, default=24.0, help="P(this long uninterrupted)")
    g.add_argument("--partition-nodes", type=int, help="nodes the spares serve (the job's)")
    g.add_argument("--restart-target", default="10m", help="restart within this (10m)")
    g.add_argument("--restart-probability", type=float, default=0.99, help="... this often")
    return p


def plan_settings(args: argparse.Namespace) -> plan.Settings | None:
    """The planner's settings, checked before anything is read; None without --plan."""
    if args.plan is None:
        if args.plan_gpus is not None:
            raise ValueError("--plan-gpus needs --plan MODEL")
        return None
    if args.plan_gpus is None:
        raise ValueError("--plan needs --plan-gpus N[,N]")
    settings = plan.Settings(
        models=tuple(m.strip() for m in args.plan.split(",")),
        gpus=plan.counts(args.plan_gpus, "--plan-gpus"),
        checkpoint_s=plan.duration(args.checkpoint_cost, "--checkpoint-cost"),
        restart_s=None
        if args.restart_time.strip() == plan.MEASURED
        else plan.duration(args.restart_time, "--restart-time"),
        hours=args.plan_hours,
        gpus_per_node=args.gpus_per_node,
        partition_nodes=args.partition_nodes,
        restart_target_s=plan.duration(args.restart_target, "--restart-target"),
        restart_probability=args.restart_probability,
    )
    settings.check()
    return settings


def parse_flag_time(value: str | None, flag: str) -> float | None:
    """RFC 3339 or epoch seconds; a date or time without an offset is taken as UTC; ``now``
    is now (a live fleet's report counts what is still out up to the present)."""
    if value is None:
        return None
    if value == "now":
        return time.time()
    try:
        return float(value)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError(f"{flag}: {value!r} is not an RFC 3339 time or epoch seconds") from None
    return (parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)).timestamp()


class Ledger:
    """Incidents, exposure and job runs gathered from every source given."""

    def __init__(self) -> None:
        self.incidents: list[Incident] = []
        self.exposure: list[Exposure] = []
        self.runs: list[JobRun] = []

    def add(
        self,
        incidents: Sequence[Incident],
        exposure: Sequence[Exposure],
        runs: Sequence[JobRun] = (),
    ) -> None:
        # names are kept as given: report.build puts the spellings of one SKU in one cell
        known = {i.id for i in self.incidents}
        self.incidents += [i for i in incidents if i.id not in known]
        units = {(r.unit, r.start) for r in self.exposure}
        self.exposure += [r for r in exposure if (r.unit, r.start) not in units]
        self.runs += list(runs)


def gather(
    args: argparse.Namespace, since: float | None = None, until: float | None = None
) -> Ledger:
    ledger = Ledger()
    files = args.incidents is not None or args.exposure is not None
    if args.state_db is not None or not files:
        from accounting import ledger as journal_ledger

        path = Path(args.state_db) if args.state_db else DEFAULT_STATE_DB
        if not path.exists():
            raise FileNotFoundError(
                f"--state-db: no journal at {path} (give --state-db, or --incidents/--exposure)"
            )
        evidence = journal_ledger.evidence_for(args.prometheus, args.gpus_per_node)
        ledger.add(*journal_ledger.from_journal(path, evidence, since=since, until=until))
    incidents = interchange.load_incidents(args.incidents) if args.incidents else []
    exposure = interchange.load_exposure(args.exposure) if args.exposure else []
    ledger.add(incidents, exposure)
    return ledger


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(sys.argv[1:] if argv is None else list(argv))
    try:
        since = parse_flag_time(args.since, "--since")
        until = parse_flag_time(args.until, "--until")
        if since is not None and until is not None and until <= since:
            raise ValueError("--until must be after --since")
        if args.gpus_per_node <= 0:
            raise ValueError("--gpus-per-node must be > 0")
        settings = plan_settings(args)
        ledger = gather(args, since, until)
        built = report.build(ledger.incidents, ledger.exposure, since, until, ledger.runs)
        rows = plan.plan(built, settings) if settings is not None else []
    except InterchangeError as exc:  # already "FILE:LINE: why"
        sys.stderr.write(f"{exc}\n")
        return 2
    except (ValueError, OSError) as exc:
        sys.stderr.write(f"gpuwarden report: {exc}\n")
        return 2
    _export(args, ledger)
    if args.html:
        from accounting import html

        page = html.render(built, rows, settings)
        Path(args.html).write_text(page, encoding="utf-8")
    if args.format == "json":
        doc = report.to_json(built)
        if settings is not None:
            doc["plan"] = plan.to_json(rows, settings)
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    else:
        sys.stdout.write(text.render(built))
        if settings is not None:
            sys.stdout.write("\n" + text.plan(rows, settings))
    return 0


def _export(args: argparse.Namespace, ledger: Ledger) -> None:
    if args.export_incidents:
        with open(args.export_incidents, "w", encoding="utf-8") as out:
            writer.write_lines(out, map(writer.incident_line, ledger.incidents))
    if args.export_exposure:
        with open(args.export_exposure, "w", encoding="utf-8") as out:
            writer.write_lines(out, map(writer.exposure_line, ledger.exposure))
