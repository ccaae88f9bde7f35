"""Start-up checks of the remediation service and the one-line statement of its mode.

Runs after the service is built (cli.py), before it listens: what would otherwise fail at
the first incident fails here, with one line. Today that is the checkpoint ack directory:
a live policy that may checkpoint a job must be able to remove a stale ack there (the
executor unlinks it before signalling the job), so the directory must exist and be
writable by this process. A dry-run policy gets a warning instead, so that observing
never fails to start.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from common.settings import SettingsError
from remediation.backends.base import Backend
from remediation.journal import HELD_STATES, Journal
from remediation.policy import Policy


def mode_line(pol: Policy, backend: Backend) -> str:
    """What this configuration will do, in one line (``--check`` and the start-up log)."""
    if not pol.dry_run and backend.name != "dry-run":
        return f"mode: LIVE: allowed actions are carried out through {backend.name}"
    source = getattr(backend, "source", None)
    reads = (
        f"reading nodes and jobs from {source.name}"
        if source is not None
        else "no scheduler: nodes from --topology only"
    )
    return f"mode: dry-run: decisions are recorded, nothing is changed ({reads})"


def checkpoints_possible(pol: Policy) -> bool:
    return any("checkpoint_restart" in rule.allow for rule in pol.rules)


def ack_dir_problem(ack_dir: str) -> str:
    """Why this process cannot create and remove files in ``ack_dir`` ("" when it can)."""
    d = Path(ack_dir)
    if not d.is_absolute():
        return f"checkpoint.ack_dir {ack_dir!r} is not an absolute path"
    if not d.is_dir():
        return f"checkpoint.ack_dir {ack_dir} does not exist (or is not a directory)"
    try:
        fd, probe = tempfile.mkstemp(prefix=".gpuwarden-probe-", dir=d)
        os.close(fd)
        os.unlink(probe)
    except OSError as e:
        return f"checkpoint.ack_dir {ack_dir} is not writable: {e.strerror or e}"
    return ""


def check(pol: Policy, backend_name: str) -> list[str]:
    """Start-up checks; raises SettingsError (live) or returns warnings (nothing can act:
    a dry-run policy, or the dry-run backend)."""
    from remediation.policy_check import fallback_problems

    problems = fallback_problems(pol)  # even a dry-run: its journal would show false denials
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise SettingsError(f"policy: {problems[0]}{more}")
    if not checkpoints_possible(pol):
        return []
    problem = ack_dir_problem(pol.checkpoint.ack_dir)
    if not problem:
        return []
    if not pol.dry_run and backend_name != "dry-run":
        raise SettingsError(
            f"{problem}; a checkpoint_restart could not remove a stale ack (create it on "
            "storage the jobs share, writable by this service: docs/deploy.md)"
        )
    return [f"warning: {problem} (needed once the policy is live)"]


def leave_dry_run(journal: Journal, backend_name: str, now: float) -> list[str]:
    """Going live on a journal a dry-run wrote: nothing it recorded is carried out for real.

    The dry-run's unfinished actions (a checkpoint_restart waiting for an ack, a deferred
    reboot) would otherwise be resumed at start-up, through the real backend; and nodes held
    only in the dry-run would count against the budgets and go through probation. The
    actions are closed as ``cancelled`` and those nodes marked ``released``; the decisions
    stay in the journal as the record of what was observed. Returns what was done."""
    if backend_name == "dry-run":
        return []
    marks = ",".join("?" * len(HELD_STATES))
    with journal.tx() as db:
        cancelled = db.execute(
            "UPDATE actions SET state='cancelled', outcome=?, finished_at=? "
            "WHERE state IN ('pending','deferred','waiting','paused') AND backend='dry-run'",
            ("journaled in dry-run; not carried out live", now),
        ).rowcount
        held = [
            r[0]
            for r in db.execute(
                f"SELECT node FROM nodes WHERE state IN ({marks}) AND "
                "(SELECT backend FROM actions WHERE actions.node=nodes.node "
                "ORDER BY id DESC LIMIT 1)='dry-run'",
                HELD_STATES,
            )
        ]
        for node in held:
            db.execute("UPDATE nodes SET state='released' WHERE node=?", (node,))
    notes = []
    if cancelled:
        notes.append(f"live: {cancelled} unfinished dry-run action(s) cancelled, not carried out")
    if held:
        notes.append(f"live: nodes held only in the dry-run no longer held: {', '.join(held)}")
    return notes
