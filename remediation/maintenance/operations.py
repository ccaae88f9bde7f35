"""The operation's edge: what is done to an empty node, started without waiting and polled
each tick. A handle is JSON (persisted with the node), so a restarted service finds the
operation again; one it cannot find is ``lost`` and started again (operations must be
safe to repeat: a package install, a firmware flash tool's own idempotence, a reboot).

- ``command``: the operator's argv (``{node}`` replaced), e.g. ``ssh {node} apt-get ...``
  or ``pdsh -w {node} ...``; run detached in its own session (a kill -9 of the service
  does not kill it), its exit code written to a file under the state directory.
- ``slurm_reboot``: ``scontrol reboot ASAP nextstate=DOWN reason=...`` (slurm.conf's
  RebootProgram); done once slurmctld shows the node without its reboot flags.
- ``none``: nothing (drain, validate, release: a validation sweep).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
from pathlib import Path
from typing import Any, Protocol

from remediation.backends.runner import Runner
from remediation.maintenance.model import Operation


class Operator(Protocol):
    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]: ...

    def poll(self, handle: dict[str, Any]) -> str:
        """``running``, ``ok``, ``failed: <why>`` or ``lost``."""
        ...


class NoOperation:
    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
        return {"kind": "none"}

    def poll(self, handle: dict[str, Any]) -> str:
        return "ok"


class CommandOperation:
    def __init__(self, argv: tuple[str, ...], state_dir: Path) -> None:
        self.argv, self.state_dir = argv, state_dir
        self.children: dict[int, subprocess.Popen[bytes]] = {}  # reaped when polled

    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
        d = self.state_dir / f"run{run_id}" / f"{node}.{attempt}"
        d.mkdir(parents=True, exist_ok=True)
        (d / "rc").unlink(missing_ok=True)
        argv = [a.replace("{node}", node) for a in self.argv]
        out, rc = shlex.quote(str(d / "out")), shlex.quote(str(d / "rc"))
        script = f'"$@" >{out} 2>&1; echo $? >{rc}.tmp && mv {rc}.tmp {rc}'
        p = subprocess.Popen(["sh", "-c", script, "sh", *argv], start_new_session=True,
                             stdin=subprocess.DEVNULL)  # fmt: skip
        self.children[p.pid] = p
        return {"kind": "command", "dir": str(d), "pid": p.pid}

    def poll(self, handle: dict[str, Any]) -> str:
        d = Path(handle["dir"])
        child = self.children.get(int(handle["pid"]))
        if child is not None and child.poll() is not None:
            self.children.pop(int(handle["pid"]), None)
        try:
            rc = int((d / "rc").read_text().strip())
        except (OSError, ValueError):
            return "running" if _alive(int(handle["pid"])) else "lost"
        if rc == 0:
            return "ok"
        tail = (
            (d / "out").read_text(errors="replace")[-200:].strip() if (d / "out").exists() else ""
        )
        return f"failed: exit {rc}" + (f": {tail}" if tail else "")


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


class SlurmReboot:
    def __init__(self, runner: Runner, reason: str, timeout: float = 15.0) -> None:
        self.runner, self.reason, self.timeout = runner, reason, timeout

    def start(self, run_id: int, node: str, attempt: int) -> dict[str, Any]:
        r = self.runner.run(["scontrol", "reboot", "ASAP", "nextstate=DOWN",
                             f"reason={self.reason}", node], self.timeout)  # fmt: skip
        if r.rc != 0:
            raise RuntimeError(f"scontrol reboot {node}: rc {r.rc}: {r.stderr.strip()[:200]}")
        return {"kind": "slurm_reboot", "node": node, "asked": True}

    def poll(self, handle: dict[str, Any]) -> str:
        r = self.runner.run(["scontrol", "show", "-o", "node", handle["node"]], self.timeout)
        if r.rc != 0:
            return "running"  # slurmctld did not answer: not an outcome
        state = next((w[6:] for w in r.stdout.split() if w.startswith("State=")), "")
        return "running" if "REBOOT" in state else "ok"


def make(op: Operation, state_dir: Path, runner: Runner | None, reason: str) -> Operator:
    if op.kind == "command":
        return CommandOperation(op.argv, state_dir)
    if op.kind == "slurm_reboot":
        if runner is None:
            raise ValueError("operation slurm_reboot needs the Slurm backend")
        return SlurmReboot(runner, reason)
    return NoOperation()


def dumps(handle: dict[str, Any]) -> str:
    return json.dumps(handle, sort_keys=True)
