"""The prolog/epilog under a real slurmctld + slurmd (Debian Slurm 22.05), one GPU job end to end.

Layout and pitfalls follow /work/shared/docs/real-components.md section 3: munged on its own
socket, one emulated slurmd (``slurmd -N``), fake ``/dev/nvidiaN`` character devices for GRES.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter.sources.jobmap import DirJobMap
from tests.realcomp import free_port, require_binary, wait_until, world_readable_tmpdir

SLURM = Path(__file__).resolve().parents[2] / "deploy" / "slurm"
NODE = "gpu-node-001"

pytestmark = pytest.mark.real


def slurm_conf(d: Path, host: str) -> str:
    p1, p2, p3 = free_port(), free_port(), free_port()
    return f"""ClusterName=gpuwarden-test
SlurmctldHost={host}(127.0.0.1)
SlurmUser=slurm
SlurmctldPort={p1}
SlurmdPort={p2}
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={d}/munge-run/munge.sock,cred_expire=10
StateSaveLocation={d}/state
SlurmdSpoolDir={d}/spool/%n
SlurmctldPidFile={d}/run/slurmctld.pid
SlurmdPidFile={d}/run/slurmd-%n.pid
SlurmctldLogFile={d}/log/slurmctld.log
SlurmdLogFile={d}/log/slurmd-%n.log
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SchedulerType=sched/backfill
SchedulerParameters=sched_interval=2,bf_interval=1
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
ReturnToService=2
SlurmdTimeout=30
KillWait=2
Prolog={d}/etc/prolog
Epilog={d}/etc/epilog
PrologFlags=Alloc
NodeName={NODE} NodeAddr=127.0.0.1 Port={p3} CPUs=2 RealMemory=1000 Gres=gpu:8
PartitionName=gpu Nodes=ALL Default=YES MaxTime=INFINITE State=UP
"""


def layout(d: Path, jobs: Path) -> None:
    for sub in ("munge-key", "munge-run", "state", "log", "run", f"spool/{NODE}", "fakedev", "etc"):
        (d / sub).mkdir(parents=True)
    (d / "munge-key").chmod(0o700)
    for sub in ("state", "log", "run"):
        shutil.chown(d / sub, "slurm", "slurm")
    for n in range(8):
        os.mknod(d / f"fakedev/nvidia{n}", 0o666 | 0o020000, os.makedev(195, n))
    host = subprocess.run(["hostname", "-s"], capture_output=True, text=True).stdout.strip()
    (d / "etc/slurm.conf").write_text(slurm_conf(d, host))
    (d / "etc/gres.conf").write_text(f"AutoDetect=off\nName=gpu File={d}/fakedev/nvidia[0-7]\n")
    # slurmd builds the prolog's environment itself, so the directory is set by a wrapper, the
    # way deploy/slurm/README.md tells sites that move it away from the default.
    for name in ("prolog", "epilog"):
        wrapper = d / "etc" / name
        wrapper.write_text(
            f"#!/bin/sh\nGPUWARDEN_JOB_MAP_DIR={jobs} exec {SLURM / (name + '.sh')}\n"
        )
        wrapper.chmod(0o755)


@contextlib.contextmanager
def slurm_cluster(jobs: Path) -> Iterator[dict[str, str]]:
    for binary in ("mungekey", "munged", "slurmctld", "slurmd", "sbatch", "sinfo", "squeue"):
        require_binary(binary)
    d = world_readable_tmpdir("gpuwarden-slurm-")
    layout(d, jobs)
    env = {**os.environ, "SLURM_CONF": str(d / "etc/slurm.conf")}
    procs: list[subprocess.Popen[bytes]] = []

    def start(*argv: str) -> None:
        procs.append(
            subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
        )

    try:
        key = d / "munge-key/munge.key"
        subprocess.run(["mungekey", "--create", f"--keyfile={key}"], check=True, timeout=10)
        run_dir = d / "munge-run"
        start("munged", "-F", f"--key-file={key}", f"--socket={run_dir}/munge.sock",
              f"--pid-file={run_dir}/munged.pid", f"--log-file={run_dir}/munged.log",
              f"--seed-file={run_dir}/munged.seed")  # fmt: skip
        wait_until(lambda: (run_dir / "munge.sock").exists(), 10, 0.02, "munged socket")
        start("slurmctld", "-D", "-c", "-f", env["SLURM_CONF"])
        start("slurmd", "-D", "-N", NODE, "-f", env["SLURM_CONF"])
        wait_until(lambda: idle_nodes(env) == [NODE], 30, 0.1, "slurmd idle")
        yield env
    finally:
        stop(env, procs)
        shutil.rmtree(d, ignore_errors=True)


def idle_nodes(env: dict[str, str]) -> list[str]:
    out = subprocess.run(["sinfo", "-h", "-N", "-t", "idle", "-o", "%N"], env=env,
                         capture_output=True, text=True, timeout=10)  # fmt: skip
    return out.stdout.split()


def stop(env: dict[str, str], procs: list[subprocess.Popen[bytes]]) -> None:
    """Jobs first, then slurmd, slurmctld, munged (reverse start order); stray stepds killed."""
    with contextlib.suppress(Exception):
        subprocess.run(["scancel", "--full", "-u", "root"], env=env, timeout=10)
        wait_until(lambda: not squeue(env), 15, 0.2, "jobs gone")
    for proc in reversed(procs):
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
    ours = f"SLURM_CONF={env['SLURM_CONF']}".encode()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        # A slurmstepd left by a dying slurmd ignores SIGTERM; only ours carry this SLURM_CONF.
        with contextlib.suppress(OSError):
            if ours in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
                os.kill(int(pid), signal.SIGKILL)


def squeue(env: dict[str, str]) -> str:
    out = subprocess.run(["squeue", "-h", "-o", "%i %T"], env=env, capture_output=True,
                         text=True, timeout=10)  # fmt: skip
    return out.stdout.strip()


def test_a_real_gpu_job_is_in_the_job_map_while_it_runs_and_gone_after_it_ends():
    jobs = world_readable_tmpdir("gpuwarden-jobs-") / "jobs"
    release = jobs.parent / "release"
    try:
        with slurm_cluster(jobs) as env:
            submitted = subprocess.run(
                ["sbatch", "--parsable", "--gres=gpu:2", "-o", "/dev/null",
                 "--wrap", f"while [ ! -e {release} ]; do sleep 0.1; done"],
                env=env, capture_output=True, text=True, timeout=10, check=True,
            )  # fmt: skip
            job_id = submitted.stdout.strip().split(";")[0]
            job_map = DirJobMap(jobs)
            # The prolog writes one file per GPU, so a poll can land between the two renames.
            wait_until(lambda: len(job_map.allocations()) >= 2, 30, 0.1, "prolog wrote both GPUs")
            assert job_map.allocations() == {"0": job_id, "1": job_id}
            assert job_map.read_errors.counts == {}
            release.touch()
            wait_until(lambda: not squeue(env), 30, 0.1, "job finished")
            wait_until(lambda: job_map.allocations() == {}, 15, 0.1, "epilog cleared the map")
            assert sorted(p.name for p in jobs.iterdir()) == []
            assert idle_nodes(env) == [NODE], "a failing prolog/epilog would have drained it"
    finally:
        shutil.rmtree(jobs.parent, ignore_errors=True)
