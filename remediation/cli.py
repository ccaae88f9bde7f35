"""`gpuwarden-remediation` (= `gpuwarden remediation`, `python -m remediation`): run the service.

Secrets never come from the command line: the webhook token is read from
GPUWARDEN_WEBHOOK_TOKEN or --webhook-token-file.
"""

from __future__ import annotations

import argparse
import logging
import sqlite3
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING

from common import settings as gsettings
from common.settings import SettingsError
from remediation.settings import BACKENDS, LEADER_ELECT, Settings

if TYPE_CHECKING:
    from remediation.leader.keeper import Keeper
    from remediation.service import CollectorsFor, Service


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuwarden-remediation",
        description="Receive Alertmanager webhooks and act on Slurm/Kubernetes, when policy allows.",
    )
    p.add_argument("--config", help="YAML settings file (flags > env GPUWARDEN_* > file)")
    p.add_argument("--listen", help="HOST:PORT (default 127.0.0.1:9836)")
    p.add_argument("--policy", help="policy YAML (default: the shipped dry-run policy)")
    p.add_argument("--state-db", help="SQLite journal path")
    p.add_argument("--backend", choices=BACKENDS)
    p.add_argument("--webhook-token-file", help="file holding the bearer token")
    p.add_argument("--webhook-basic-auth-file", help="file holding one line user:password")
    p.add_argument("--allow-unauthenticated", action="store_const", const=True, default=None)
    p.add_argument("--tls-cert-file")
    p.add_argument("--tls-key-file")
    p.add_argument("--alertmanager", help="Alertmanager URL, for silences (per-node pause)")
    p.add_argument(
        "--prometheus",
        help="Prometheus URL the failure-accounting series read (exposure, job runs, ETTR)",
    )
    p.add_argument("--topology", help="failure-domain topology YAML")
    p.add_argument("--tick-s", help="probation/release check interval (s)")
    p.add_argument(
        "--command-timeout-s",
        help="timeout of each scheduler command and of each Kubernetes API call (s)",
    )
    events_flags(p)
    leader_flags(p)
    p.add_argument("--check", action="store_true", help="validate settings + policy, then exit")
    return p


def events_flags(p: argparse.ArgumentParser) -> None:
    """The events-out flags (docs/remediation.md#events-out); also ``python -m
    remediation.events``'s."""
    g = p.add_argument_group("events out (CloudEvents over HTTP)")
    g.add_argument("--events-url", help="receiver URL; unset: no events")
    g.add_argument(
        "--events-mode", help="structured (default), binary, or otlp (OTLP/HTTP JSON logs)"
    )
    g.add_argument("--events-source", help="CloudEvents source (default /gpuwarden/remediation)")
    g.add_argument("--events-kinds", help="comma list: finding,decision,action,maintenance")
    g.add_argument("--events-min-severity", help="info|warning|critical")
    g.add_argument("--events-labels", help="comma list of name=value / name!=value")
    g.add_argument("--events-token-file", help="file holding the receiver's bearer token")
    g.add_argument("--events-max-attempts", help="dead-letter after N failures (0: never)")
    g.add_argument("--events-backoff-s", help="first retry wait (s), doubled up to the max")
    g.add_argument("--events-backoff-max-s", help="longest retry wait (s)")
    g.add_argument("--events-timeout-s", help="HTTP timeout per delivery (s)")
    g.add_argument("--events-interval-s", help="capture/delivery cycle (s)")
    g.add_argument("--events-retention-s", help="keep delivered/dead events this long (s)")


def leader_flags(p: argparse.ArgumentParser) -> None:
    """One active instance among several (docs/deploy.md, "Remediation: one active
    instance"; remediation/leader)."""
    g = p.add_argument_group("leader election (a warm standby)")
    g.add_argument("--leader-elect", choices=LEADER_ELECT,
                   help="off (default): act alone; kubernetes: a Lease; directory: a shared "
                   "directory's lock file")  # fmt: skip
    g.add_argument("--leader-dir", help="directory: where the lease lives (flock between hosts)")
    g.add_argument(
        "--leader-namespace", help="kubernetes: the Lease's namespace (default: the pod's)"
    )
    g.add_argument("--leader-lease-name", help="kubernetes: the Lease (gpuwarden-remediation)")
    g.add_argument("--leader-identity", help="this instance's name (default: host, pid, random)")
    g.add_argument("--leader-lease-s", help="the term a standby waits out (15)")
    g.add_argument("--leader-renew-deadline-s", help="the leader stops unless renewed by (10)")
    g.add_argument("--leader-retry-s", help="renew / try every (2)")


def load_settings(argv: Sequence[str]) -> tuple[Settings, bool]:
    args = vars(parser().parse_args(list(argv)))
    config, check = args.pop("config"), args.pop("check")
    return gsettings.load(Settings, args, config_file=config), check


def placement_lines(svc: Service) -> tuple[list[str], list[str]]:
    """Will the placement projection do what it promises here? (lines, problems that stop a
    live start). Only where a rule allows ``avoid``: no tier, nothing to refuse."""
    if svc.engine.placement is None or not any("avoid" in r.allow for r in svc.policy.rules):
        return [], []
    from remediation.placement import check as placement_check

    return placement_check.check(
        svc.engine.placement.projection, svc.policy.placement, not svc.policy.dry_run
    )


def job_namespace_problem(svc: Service) -> str | None:
    """Live on Kubernetes with a Job image: may Jobs be created in their namespace?
    (remediation/job_namespace.py; a server-side dry-run create)."""
    vp = svc.policy.validation
    api = getattr(svc.backend, "api", None)
    if svc.policy.dry_run or svc.backend.name != "kubernetes" or not vp.kube_image:
        return None
    if not hasattr(api, "dry_run_create_job"):
        return None
    from remediation import job_namespace

    return job_namespace.problem(api, vp.kube_namespace, vp.kube_image)


def main(argv: Sequence[str] | None = None, collectors: CollectorsFor | None = None) -> int:
    """Run the service; ``collectors`` adds series to its /metrics (the umbrella's
    ``gpuwarden remediation`` adds failure accounting's, gpuwarden/remediation_service.py).
    With ``--leader-elect``, first wait as a standby until this instance holds the lease."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        s, check = load_settings(sys.argv[1:] if argv is None else argv)
    except SettingsError as e:
        print(f"gpuwarden-remediation: {e}", file=sys.stderr)
        return 2
    keeper = None
    if s.elects and not check:
        try:
            keeper = standby(s)
        except (SettingsError, ValueError) as e:
            print(f"gpuwarden-remediation: {e}", file=sys.stderr)
            return 2
        if keeper is None:  # stopped while a standby
            return 0
    try:
        return serve(s, check, collectors, keeper)
    finally:
        if keeper is not None:  # its last steps done, hand the lease over
            from remediation.leader.run import hand_over

            hand_over(keeper)


def standby(s: Settings) -> Keeper | None:
    """Check what a takeover would need (the policy and topology read), then wait as a
    standby until the lease is ours: the keeper, renewing (None: stopped first)."""
    from remediation import policy, topology
    from remediation.leader import run as leader
    from remediation.service import ssl_context

    policy.load(s.policy)  # a standby with a bad policy says so now, not when it takes over
    topology.load(s.topology)
    k = leader.keeper(s)
    if not leader.wait_as_standby(s, k, ssl_context(s)):
        return None
    k.start()
    return k


def serve(
    s: Settings, check: bool, collectors: CollectorsFor | None, keeper: Keeper | None = None
) -> int:
    try:
        from remediation import preflight
        from remediation.service import build

        svc = build(s, collectors=collectors)
        if keeper is not None:  # no commit after the term (remediation/leader/keeper.py)
            svc.journal.fence = keeper.fence
        try:
            warnings = preflight.check(svc.policy, svc.backend.name)
        except SettingsError:
            svc.journal.close()
            raise
    except SettingsError as e:
        print(f"gpuwarden-remediation: {e}", file=sys.stderr)
        return 2
    except sqlite3.Error as e:  # e.g. a state DB in a directory this user cannot write
        print(f"gpuwarden-remediation: --state-db {s.state_db}: {e}", file=sys.stderr)
        return 2
    mode = preflight.mode_line(svc.policy, svc.backend)
    if check:
        from remediation import policy_check, topology

        lines, problems = policy_check.check(svc.policy, topology.load(s.topology))
        more, stop = placement_lines(svc)
        from remediation.placement.check import gpu_lines

        lines, problems = [*lines, *more, *gpu_lines(svc.policy, svc.backend)], [*problems, *stop]
        svc.journal.close()
        from remediation.events.config import describe as events_line

        print("\n".join([mode, *warnings, *lines, *svc.policy.validation.describe(),
                         events_line(s)]))  # fmt: skip
        for problem in problems:
            print(f"gpuwarden-remediation: {problem}", file=sys.stderr)
        if problems:
            return 2
        print(f"ok: backend={svc.backend.name} dry_run={svc.policy.dry_run}")
        return 0
    more, stop = placement_lines(svc)
    if not stop and (job_ns := job_namespace_problem(svc)):
        stop = [job_ns]
    if stop:  # what --check refuses, a start refuses too (one line, like a bad setting)
        svc.journal.close()
        print(f"gpuwarden-remediation: {stop[0]}", file=sys.stderr)
        return 2
    warnings = [*warnings, *(line for line in more if line.startswith("warning:"))]
    import time

    notes = preflight.leave_dry_run(svc.journal, svc.backend.name, time.time())
    from remediation.events.config import describe as events_line

    for line in [mode, *warnings, *notes, events_line(s)]:
        logging.getLogger("gpuwarden.remediation").info("%s", line)
    from aiohttp import web

    from remediation.app import build_app

    host, port = s.host_port
    try:
        web.run_app(
            build_app(svc),
            host=host,
            port=port,
            ssl_context=svc.ssl_context(),
            print=None,
            access_log=None,
        )
    finally:
        svc.journal.close()
    return 0
