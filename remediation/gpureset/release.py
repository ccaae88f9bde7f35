"""A manual release while a GPU reset job may still run on the node (``POST
/api/v1/nodes/<node>/release``, the service asks here first).

Released as usual, the node would go back into service with the reset job on it (on Slurm
the release even deletes gpuwarden's reservation under the running job) and the action,
superseded, would never conclude it. So:

- a reset whose action is live (its saga concludes it within ``reset_gpu.deadline_s``,
  cancelling the job itself at the deadline) refuses the release (409) with the action, the
  job and the time by which it ends: a GPU reset is not interrupted half-way, and the
  operator asks again once it ended (the node then goes through the normal release);
- a reset left by an action that ended without concluding it (failed after its retries:
  nothing will ever read the job again) is stopped first: cancelled and read back from the
  scheduler; released only once the scheduler confirms the job ended, else refused.

"Running" is the journal's word: ``reset_start`` begun and no ``reset_verdict`` yet.
"""

from __future__ import annotations

import json
import time
from typing import Any

from remediation.backends.base import BackendError
from remediation.journal import Journal
from remediation.validation.slurm import SuiteCancelled, ValidationRun

ENDED = ("done", "failed", "superseded")  # the executor's terminal action states
RUNNING = (
    "SELECT a.id, a.state, s.detail FROM actions a JOIN steps s ON s.action_id=a.id "
    "AND s.step='reset_start' WHERE a.node=? AND a.action='reset_gpu' "
    "AND s.state IN ('started','done') AND NOT EXISTS (SELECT 1 FROM steps v WHERE "
    "v.action_id=a.id AND v.step='reset_verdict' AND v.state='done') ORDER BY a.id"
)


def _handle(resetter: Any, detail: str) -> Any:
    load = getattr(resetter, "run_from", None)
    raw = json.loads(detail)
    return load(raw) if load is not None else ValidationRun(**raw)


def _stop(journal: Journal, resetter: Any, aid: int, detail: str) -> str | None:
    """Cancel an orphaned reset job and read it back; None once the scheduler says it
    ended (journaled as the action's verdict), else why the release must wait."""
    if resetter is None or not detail:
        return (f"GPU reset of action #{aid} may still run and its job is not known here; "
                "end it by hand, then release")  # fmt: skip
    run = _handle(resetter, detail)
    try:
        resetter.cancel(run)
        ended = resetter.poll(run) is not None
    except SuiteCancelled:
        ended = True  # cancelled, read back as such
    except BackendError as e:
        return f"GPU reset job of action #{aid} not stopped ({e}); ask again"
    if not ended:
        return f"GPU reset job of action #{aid} cancelled, not yet ended; ask again"
    verdict = {"passed": False, "why": "cancelled by a manual release after its action ended"}
    journal.set_step(aid, "reset_verdict", "done", json.dumps(verdict, sort_keys=True))
    return None


def blocked(journal: Journal, resetter: Any, node: str) -> str | None:
    """Why the node cannot be released now because of a GPU reset; None: it can."""
    for r in journal.rows(RUNNING, (node,)):
        aid = int(r["id"])
        if r["state"] in ENDED:
            why = _stop(journal, resetter, aid, str(r["detail"] or ""))
            if why is not None:
                return why
            continue
        deadline = journal.scalar(
            "SELECT deadline FROM steps WHERE action_id=? AND step='reset_done'", (aid,)
        )
        until = (
            f" by {time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime(float(deadline)))} at the "
            "latest (reset_gpu.deadline_s)"
            if deadline
            else ""
        )
        return (
            f"GPU reset (action #{aid}) runs on {node}: released now, the node would be back "
            f"in service with the reset job on it. It ends{until}; release again then"
        )
    return None
