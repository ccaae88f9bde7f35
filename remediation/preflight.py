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


def check(pol: Policy) -> list[str]:
    """Start-up checks; raises SettingsError (live) or returns warnings (dry-run)."""
    if not checkpoints_possible(pol):
        return []
    problem = ack_dir_problem(pol.checkpoint.ack_dir)
    if not problem:
        return []
    if not pol.dry_run:
        raise SettingsError(
            f"{problem}; a checkpoint_restart could not remove a stale ack (create it on "
            "storage the jobs share, writable by this service: docs/deploy.md)"
        )
    return [f"warning: {problem} (needed once the policy is live)"]
