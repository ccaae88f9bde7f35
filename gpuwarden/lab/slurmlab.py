"""A real Slurm mini-cluster on one machine: munged + slurmctld + emulated slurmd + ghost nodes.

Used by the tests, the benchmarks and `gpuwarden demo` (so it lives in the package).

Follows ../shared/docs/real-components.md §3. Everything lives in one world-readable temp
dir, listens on free ports, and is stopped by PID in ``stop()``. Use it once per session:

    with slurm_cluster(live=2, ghosts=2) as sc:
        sc.live        # ("gpu-node-001", "gpu-node-002"): nodes with a real slurmd
        sc.ghosts      # ("gpu-node-003", "gpu-node-004"): configured, no slurmd
        sc.env         # os.environ + SLURM_CONF, for subprocess calls
        sc.run("scontrol", "show", "node", "gpu-node-001")
        job = sc.sbatch("--wrap", "sleep 5")          # job id (str); as_user="nobody" too
        sc.node_state("gpu-node-003")                # {"state", "flags", "reason"}
        sc.job_state(job)                            # squeue's state, "" once gone
        sc.reset_nodes()                             # cancel jobs, resume every node
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict

from gpuwarden.processes import free_port, wait_until, world_readable_tmpdir

BINARIES = ("munged", "mungekey", "slurmctld", "slurmd", "scontrol", "sbatch")


class MissingBinary(RuntimeError):
    """A Slurm or munge binary is not installed."""


def missing_binaries() -> list[str]:
    return [b for b in BINARIES if shutil.which(b) is None]


def _conf(
    d: Path, host: str, ports: dict[str, int], live: Sequence[str], ghosts: Sequence[str]
) -> str:
    node = "CPUs=2 RealMemory=1000 Gres=gpu:8"
    lines = [
        f"ClusterName=gpuwarden-test\nSlurmctldHost={host}(127.0.0.1)\nSlurmUser=slurm",
        f"SlurmctldPort={ports['ctld']}\nSlurmdPort={ports['slurmd']}",
        "AuthType=auth/munge\nCredType=cred/munge",
        f"AuthInfo=socket={d}/munge-run/munge.sock,cred_expire=10",
        f"StateSaveLocation={d}/state\nSlurmdSpoolDir={d}/spool/%n",
        f"SlurmctldPidFile={d}/run/slurmctld.pid\nSlurmdPidFile={d}/run/slurmd-%n.pid",
        f"SlurmctldLogFile={d}/log/slurmctld.log\nSlurmdLogFile={d}/log/slurmd-%n.log",
        "ProctrackType=proctrack/pgid\nTaskPlugin=task/none\nJobAcctGatherType=jobacct_gather/none",
        "AccountingStorageType=accounting_storage/none\nJobCompType=jobcomp/none",
        "MpiDefault=none\nMailProg=/bin/true",
        "SchedulerType=sched/backfill\nSchedulerParameters=sched_interval=2,bf_interval=1",
        "SelectType=select/cons_tres\nSelectTypeParameters=CR_Core\nGresTypes=gpu",
        "ReturnToService=2\nSlurmdTimeout=30\nKillWait=2\nJobRequeue=1\nMinJobAge=2",
        f"RebootProgram={d}/etc/reboot\nResumeTimeout=60",
    ]
    for name in live:
        lines.append(f"NodeName={name} NodeAddr=127.0.0.1 Port={ports[name]} {node}")
    for name in ghosts:
        lines.append(f"NodeName={name} NodeAddr=127.0.0.1 Port={ports[name]} {node}")
    lines.append("PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP")
    return "\n".join(lines) + "\n"


class NodeState(TypedDict):
    state: str  # sinfo --json "state", e.g. idle, mixed, down, unknown
    flags: list[str]  # "state_flags", e.g. ["DRAIN"], ["NOT_RESPONDING"]
    reason: str


@dataclass
class SlurmCluster:
    dir: Path
    live: tuple[str, ...]
    ghosts: tuple[str, ...]
    env: dict[str, str]
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.live + self.ghosts

    def run(self, *argv: str, timeout: float = 15.0, check: bool = True) -> str:
        p = subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, timeout=timeout
        )
        if check and p.returncode != 0:
            raise RuntimeError(f"{' '.join(argv)}: rc {p.returncode}: {p.stderr.strip()}")
        return p.stdout

    def sbatch(self, *args: str, as_user: str | None = None, cwd: str | None = None) -> str:
        argv = ["sbatch", "--parsable", *args]
        cwd = cwd or str(self.dir)  # default output files land here, not in the caller's cwd
        if as_user:
            cmd = " ".join(f"'{a}'" for a in argv)
            argv = ["su", "-s", "/bin/sh", as_user, "-c", f"cd {cwd or '/tmp'} && {cmd}"]
        out = subprocess.run(
            argv, env=self.env, capture_output=True, text=True, timeout=15, cwd=cwd
        )
        if out.returncode != 0:
            raise RuntimeError(f"sbatch failed: {out.stderr.strip()}")
        return out.stdout.strip().split(";")[0]

    def node_state(self, name: str) -> NodeState:
        data = json.loads(self.run("sinfo", "--json"))
        for n in data["nodes"]:
            if n["name"] == name:
                return NodeState(
                    state=str(n["state"]),
                    flags=[str(f) for f in n.get("state_flags") or []],
                    reason=str(n.get("reason") or ""),
                )
        raise KeyError(name)

    def job_state(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%T", check=False).strip()

    def job_nodes(self, job_id: str) -> str:
        return self.run("squeue", "-h", "-j", job_id, "-o", "%N", check=False).strip()

    def cancel_all(self, timeout: float = 20.0) -> None:
        self.run("scancel", "--full", "-p", "gpu", check=False)
        self.run("scancel", "-p", "gpu", check=False)
        wait_until(
            lambda: not self.run("squeue", "-h", check=False).strip(), timeout, 0.2, "all jobs gone"
        )

    def reset_nodes(self, timeout: float = 30.0) -> None:
        """Leave the cluster neutral between tests: every job cancelled, every reservation
        deleted, weights and ``Extra`` back to slurm.conf's, every node resumed, and the live
        nodes idle with no flag (a node still completing, not responding after a stalled
        slurmctld, or held in a leftover reservation would place the next test's jobs
        elsewhere than it expects)."""
        self.cancel_all()
        for line in self.run("scontrol", "-o", "show", "reservation", check=False).splitlines():
            name = line.split()[0].partition("=")[2] if line.startswith("ReservationName=") else ""
            if name:
                self.run("scontrol", "delete", f"ReservationName={name}", check=False)
        for name in self.nodes:
            st = self.node_state(name)
            if "DRAIN" in st["flags"] or st["state"] in ("down", "fail"):
                self.run("scontrol", "update", f"NodeName={name}", "State=RESUME", check=False)
            self.run("scontrol", "update", f"NodeName={name}", "Weight=1", "Extra=", check=False)

        def live_idle() -> bool:
            return all(
                (st := self.node_state(n))["state"] == "idle" and not st["flags"] for n in self.live
            )

        wait_until(live_idle, timeout, 0.2, "live nodes idle with no flag")

    def stop(self) -> None:
        with contextlib.suppress(Exception):
            self.cancel_all(10)
        for p in reversed(self.procs):  # slurmd first, then slurmctld, munged last
            if p.poll() is None:
                p.terminate()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(8)
            if p.poll() is None:
                p.kill()
                p.wait(5)
        _kill_orphan_stepds(self.env["SLURM_CONF"])


def _kill_orphan_stepds(conf: str) -> None:
    """SIGKILL this lab's slurmstepds and the slurmds its RebootProgram started again (and the
    shells waiting to), none of them a child the lab holds."""
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() not in ("slurmstepd", "slurmd", "sh"):
                continue
            mine = (
                Path(f"/proc/{pid}/environ").read_bytes()
                + Path(f"/proc/{pid}/cmdline").read_bytes()
            )
            if conf.encode() in mine:
                os.kill(int(pid), signal.SIGKILL)
        except OSError:
            continue


# The lab's RebootProgram. slurmd runs it for ``scontrol reboot``; a real node would go down
# and its slurmd start again at boot. Here the slurmd that ran it (found up the process tree,
# its node in its ``-N``) is stopped and started again with ``-b`` (slurmd's "report node
# reboot now"), detached, so slurmctld sees the node come back rebooted. Each reboot is
# appended to log/reboots.
REBOOT = """#!/bin/sh
pid=$PPID
while [ "$pid" -gt 1 ] && [ "$(cat /proc/$pid/comm)" != slurmd ]; do
  pid=$(cut -d' ' -f4 /proc/$pid/stat)
done
[ "$pid" -gt 1 ] || exit 1
name=$(tr '\\0' '\\n' < /proc/$pid/cmdline | sed -n '/^-N$/{{n;p;}}')
echo "$name $(date +%s)" >> {d}/log/reboots
setsid sh -c "kill $pid; while grep -qs '^State:.*[^Z] (' /proc/$pid/status; do sleep 0.1; done; \\
  exec slurmd -D -b -N $name -f {d}/etc/slurm.conf" </dev/null >>{d}/log/daemons.out 2>&1 &
"""


def _prepare(d: Path, names: Sequence[str]) -> None:
    import pwd

    slurm = pwd.getpwnam("slurm")
    for sub in ("munge-key", "munge-run", "state", "log", "run", "etc", "fakedev", "spool"):
        (d / sub).mkdir()
    (d / "munge-key").chmod(0o700)
    for sub in ("state", "log", "run"):
        os.chown(d / sub, slurm.pw_uid, slurm.pw_gid)
    for name in names:
        (d / "spool" / name).mkdir()
    for i in range(8):
        os.mknod(d / "fakedev" / f"nvidia{i}", 0o666 | 0o020000, os.makedev(195, i))
    (d / "etc" / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={d}/fakedev/nvidia[0-7]\n")
    (d / "etc" / "reboot").write_text(REBOOT.format(d=d))
    (d / "etc" / "reboot").chmod(0o755)


@contextlib.contextmanager
def slurm_cluster(
    live: int = 2, ghosts: int = 2, prefix: str = "gpu-node-"
) -> Iterator[SlurmCluster]:
    if missing_binaries():
        raise MissingBinary(f"Slurm binaries missing: {', '.join(missing_binaries())}")
    d = world_readable_tmpdir("gpuwarden-slurm-")
    live_names = tuple(f"{prefix}{i:03d}" for i in range(1, live + 1))
    ghost_names = tuple(f"{prefix}{i:03d}" for i in range(live + 1, live + ghosts + 1))
    _prepare(d, live_names + ghost_names)
    ports = {"ctld": free_port(), "slurmd": free_port()}
    ports.update({n: free_port() for n in live_names + ghost_names})
    host = socket.gethostname().split(".")[0]
    conf = d / "etc" / "slurm.conf"
    conf.write_text(_conf(d, host, ports, live_names, ghost_names))
    env = {**os.environ, "SLURM_CONF": str(conf)}
    sc = SlurmCluster(d, live_names, ghost_names, env)
    try:
        _start(sc, d, conf)
        yield sc
    finally:
        sc.stop()
        shutil.rmtree(d, ignore_errors=True)


def _start(sc: SlurmCluster, d: Path, conf: Path) -> None:
    log = open(d / "log" / "daemons.out", "wb")  # noqa: SIM115 - lives as long as the daemons
    key, run = d / "munge-key" / "munge.key", d / "munge-run"
    subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, capture_output=True)

    def start(argv: list[str]) -> None:
        sc.procs.append(subprocess.Popen(argv, env=sc.env, stdout=log, stderr=subprocess.STDOUT))

    start(
        [
            "munged",
            "-F",
            f"--key-file={key}",
            f"--socket={run}/munge.sock",
            f"--pid-file={run}/munged.pid",
            f"--log-file={run}/munged.log",
            f"--seed-file={run}/munged.seed",
        ]
    )
    wait_until(lambda: (run / "munge.sock").exists(), 10, 0.02, "munged socket")
    start(["slurmctld", "-D", "-c", "-f", str(conf)])
    wait_until(lambda: "UP" in sc.run("scontrol", "ping", check=False), 20, 0.1, "slurmctld")
    for name in sc.live:
        start(["slurmd", "-D", "-N", name, "-f", str(conf)])

    def idle() -> bool:
        out = sc.run("sinfo", "-h", "-N", "-t", "idle", "-o", "%N", check=False).split()
        return set(sc.live) <= set(out)

    wait_until(idle, 30, 0.1, "slurmd nodes idle")
