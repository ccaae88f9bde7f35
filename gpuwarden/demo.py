"""`gpuwarden demo`: the whole stack on a simulated fleet, with a short story of faults.

Starts the simulator, remediation, (real Prometheus and Alertmanager with the project's
rules and routes, when installed), and the analyzer; injects a story (an XID 79, an NVLink
error ramp, a straggler, and an application XID that must be ignored), and prints a live
timeline of injections, alerts, findings, decisions and node states. Ctrl-C (or
``--duration``) stops everything it started.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from gpuwarden import demojob
from gpuwarden.lab import slurmlab
from gpuwarden.processes import StartError, wait_until
from gpuwarden.stack import Stack, StackOptions, servers_installed
from gpuwarden.timeline import Event, Seen, diff, http_fetch, snapshot
from simulator.telemetry import TELEMETRIES


@dataclass(frozen=True)
class Step:
    at: float
    node: str
    kind: str
    target: str
    parameters: dict[str, Any]
    note: str


JOB_NODE = "{job}"  # the node the demo training job runs on (gpu-node-003 without Slurm)
DEFAULT_STORY = [
    Step(
        10,
        JOB_NODE,
        "xid",
        "gpu2",
        {"xid": 79},
        "GPU 2 falls off the bus under the training job: XID 79, NVML says GPU lost",
    ),
    Step(
        25,
        "gpu-node-007",
        "nvlink_errors",
        "gpu5/3",
        {"initial_rate": 5, "doubling_s": 20, "max_rate": 500},
        "NVLink 3 of GPU 5 starts failing: CRC errors double every 20 s",
    ),
    Step(
        40,
        "gpu-node-018",  # in a 4-node job the XID above does not end (seed 1)
        "straggler",
        "gpu4",
        {"slowdown": 0.15},
        "GPU 4 runs 15% slow; its job peers wait for it at every step",
    ),
    Step(
        55,
        "gpu-node-021",  # a job of its own: its restart leaves the straggler's job alone
        "app_xid",
        "gpu1",
        {"xid": 13},
        "the job on GPU 1 hits an out-of-range access: XID 13, the job's fault (ignore)",
    ),
]


# --fleet mixed-amd: two racks of H100 (gpu-node-001..016) beside two of AMD Instinct MI300X
# (gpu-node-017..032, their GPUs served as AMD's Device Metrics Exporter serves them)
# (the analyzer posts its findings to Alertmanager too: the AMD findings have no alert rule yet,
# issue 34 item 5, so they reach remediation's one policy that way)
MIXED_AMD = {"skus": "h100:2,mi300x:2", "nodes_per_leaf": 8, "analyzer_push": True}
MIXED_AMD_STORY = [
    Step(10, "gpu-node-020", "amd_hbm_uncorrectable", "gpu1", {"fatal": True},
         "MI300X GPU 1 takes an uncorrectable HBM error: umc errors, AFID 20 (fatal)"),
    Step(20, "gpu-node-005", "xid", "gpu2", {"xid": 79},
         "H100 GPU 2 falls off the bus: XID 79, NVML says GPU lost"),
    Step(30, "gpu-node-027", "amd_afid_event", "gpu6", {"afid": 27, "then": 22},
         "MI300X GPU 6: a watchdog timeout (AFID 27), then a contained HBM error (22) before "
         "the next scrape: DME's gauge shows only the second"),
]  # fmt: skip


def load_story(path: str | None, fleet: str = "") -> list[Step]:
    if not path:
        return MIXED_AMD_STORY if fleet == "mixed-amd" else DEFAULT_STORY
    data = yaml.safe_load(Path(path).read_text()) or []
    return [
        Step(
            float(s["at"]),
            s["node"],
            s["kind"],
            s.get("target", ""),
            dict(s.get("parameters") or {}),
            s.get("note", ""),
        )
        for s in data
    ]


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="gpuwarden demo",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--nodes", type=int, default=32, help="simulated nodes (default 32)")
    p.add_argument(
        "--duration",
        type=float,
        default=0,
        help="stop after this many seconds (default: run until Ctrl-C)",
    )
    p.add_argument("--scenario", help="simulator scenario YAML (background fault mix)")
    p.add_argument(
        "--story",
        help="YAML list of {at, node, kind, target, parameters, note} "
        "to inject instead of the built-in story",
    )
    p.add_argument(
        "--base-port",
        type=int,
        default=9840,
        help="ports used: simulator +0, analyzer +1, remediation +2, "
        "Prometheus +3, Alertmanager +4 (default 9840)",
    )
    p.add_argument("--workdir", default=".demo", help="configs, logs and state (default .demo)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument(
        "--scrape-interval",
        type=float,
        default=5.0,
        help="Prometheus scrape and rule interval in seconds (default 5)",
    )
    p.add_argument(
        "--no-servers",
        action="store_true",
        help="do not start Prometheus/Alertmanager even when installed",
    )
    p.add_argument(
        "--check",
        action="store_true",
        help="exit 1 unless every injected fault was found and reached a decision and no "
        "negative control was acted on (needs --duration; `make demo-check`)",
    )
    p.add_argument(
        "--telemetry",
        choices=TELEMETRIES,
        default="gpuwarden",
        help="dcgm-exporter: the fleet serves only what dcgm-exporter + node_exporter would "
        "(no gpuwarden exporter anywhere) with the commonly enabled fields (ECC, NVLink errors, "
        "power limit, ...); dcgm-exporter:defaults: only the fields dcgm-exporter's "
        "default-counters.csv enables; either needs the real Prometheus",
    )
    p.add_argument(
        "--fleet",
        choices=("homogeneous", "mixed-amd"),
        default="homogeneous",
        help="mixed-amd: two H100 racks beside two AMD Instinct MI300X racks (32 nodes; the "
        "MI300X GPUs served as AMD's Device Metrics Exporter serves them, read through the "
        "real Prometheus), with a story of AMD and NVIDIA faults decided under one policy",
    )
    p.add_argument(
        "--no-slurm",
        action="store_true",
        help="dry-run remediation even when Slurm is installed (Slurm needs root)",
    )
    return p


def _say(msg: str) -> None:
    print(msg, flush=True)


def _banner(stack: Stack, backend: str) -> None:
    u = stack.urls
    _say("gpuwarden demo is running. Open:")
    _say(f"  simulator     {u.simulator}/nodes   (truth: {u.simulator}/truth)")
    _say(f"  analyzer      {u.analyzer}/findings")
    _say(
        f"  remediation   {u.remediation}/api/v1/decisions  (backend: {backend}; "
        f"token in {stack.opts.workdir / 'webhook.token'})"
    )
    if u.prometheus:
        _say(f"  Prometheus    {u.prometheus}/alerts")
        _say(f"  Alertmanager  {u.alertmanager}/#/alerts")
    else:
        _say(
            "  (Prometheus/Alertmanager not installed: the analyzer scrapes the simulator "
            "itself and no alerts reach remediation; `make demo` as root installs them)"
        )
    _say("Ctrl-C stops everything.\n")


def _want_slurm(ns: argparse.Namespace) -> bool:
    return not ns.no_slurm and os.geteuid() == 0 and not slurmlab.missing_binaries()


def run(ns: argparse.Namespace) -> int:
    workdir = Path(ns.workdir).resolve()
    shutil.rmtree(workdir, ignore_errors=True)
    with contextlib.ExitStack() as exits:
        slurm = None
        if _want_slurm(ns):
            _say(f"starting a Slurm cluster: 3 slurmd + {ns.nodes - 3} ghost nodes ...")
            slurm = exits.enter_context(slurmlab.slurm_cluster(live=3, ghosts=ns.nodes - 3))
        return _run_stack(ns, workdir, slurm)
    return 1


def _run_stack(ns: argparse.Namespace, workdir: Path, slurm: slurmlab.SlurmCluster | None) -> int:
    (workdir / "job").mkdir(parents=True, exist_ok=True)  # remediation checks it at start
    checkpoint = {
        "ack_dir": str(workdir / "job"),
        "deadline_s": 20,
        "on_timeout": "requeue",
        "restart_deadline_s": 60,
    }
    stack = Stack(
        StackOptions(
            workdir=workdir,
            nodes=ns.nodes,
            seed=ns.seed,
            base_port=ns.base_port,
            scrape_interval_s=ns.scrape_interval,
            analyzer_interval_s=max(10.0, ns.scrape_interval),
            real_servers=not ns.no_servers,
            slurm_env=slurm.env if slurm else None,
            scenario=Path(ns.scenario).resolve() if ns.scenario else None,
            policy={"checkpoint": checkpoint},
            storage_mounts=(DEMO_MOUNT,),  # the "Checkpoint storage" dashboard row has data
            telemetry=ns.telemetry,
            **(MIXED_AMD if ns.fleet == "mixed-amd" else {}),  # type: ignore[arg-type]
        )
    )
    story = sorted(load_story(ns.story, ns.fleet), key=lambda s: s.at)
    _say(f"starting the stack on {ns.nodes} simulated nodes (logs in {workdir / 'logs'}) ...")
    t0 = time.monotonic()
    try:
        stack.start()
    except StartError as e:
        _say(f"gpuwarden demo: a service did not start: {e}")
        return 1
    _say(
        f"stack up in {time.monotonic() - t0:.0f}s "
        f"({'real Prometheus + Alertmanager' if stack.urls.prometheus else 'embedded'})"
    )
    _banner(stack, stack.opts.backend)
    job_node = _start_job(slurm, workdir / "job")
    tally = Tally()
    try:
        _loop(stack, story, ns.duration, job_node, tally)
    except KeyboardInterrupt:
        _say("\ninterrupted")
    finally:
        _say("stopping everything the demo started ...")
        stack.stop()
    problems = tally.problems()
    if ns.check and problems:
        _say("demo check FAILED: " + "; ".join(problems))
        return 1
    if ns.check:
        _say("demo check passed: every fault found and decided, no negative control acted on")
    return 0


def _start_job(slurm: slurmlab.SlurmCluster | None, d: Path) -> str:
    """With Slurm: a training job that checkpoints on request; returns the node it runs on."""
    if slurm is None:
        return "gpu-node-003"
    d.mkdir(parents=True, exist_ok=True)
    d.chmod(0o777)
    job = demojob.submit(slurm, d)
    wait_until(lambda: demojob.lines(d), 30, 0.2, "demo job started")
    node = demojob.lines(d)[0].split("node=")[1].strip()
    _say(f"[    0.0s] JOB      {node:<14} training job {job} running (output: {d / 'job.out'})")
    return node


def _job_events(d: Path, seen: Seen, t: float) -> list[str]:
    out = []
    for i, line in enumerate(demojob.lines(d)[1:], 1):
        if not seen.new(f"job/{i}", line):
            continue
        what, _, node = line.partition(" node=")  # "start step=N" / "checkpoint step=N"
        if node:
            out.append(f"[{t:7.1f}s] JOB      {node:<14} {what}")
        else:  # Slurm's own lines (requeue, cancel notices)
            out.append(f"[{t:7.1f}s] JOB      {'':<14} {line.strip()}")
    return out


# finding kinds that detect each story fault kind (for the closing table)
DETECTED_BY = {
    "xid": ("xid_fatal", "gpu_lost"),
    "app_xid": ("xid_fatal", "xid_repeated_application"),
    "nvlink_errors": ("nvlink_errors", "nvlink_down"),
    "nvlink_down": ("nvlink_down",),
    "straggler": ("straggler",),
    "ib_port_down": ("ib_port_down",),
    "ib_symbol_errors": ("ib_errors",),
    "amd_hbm_uncorrectable": ("afid_fatal", "afid_event", "ecc_uncorrectable"),
    "amd_afid_event": ("afid_fatal", "afid_event"),
    "amd_deferred_errors": ("ras_deferred",),
    "amd_gpu_lost": ("gpu_lost",),
    "xgmi_link_down": ("xgmi_link_lost", "afid_fatal"),
}
DEMO_MOUNT = "/mnt/ckpt"  # the checkpoint mount every demo node probes
NEGATIVE_CONTROLS = ("app_xid", "pipeline_imbalance", "checkpoint_pause", "reboot", "job_stop")
QUARANTINED = ("quarantined", "inspection", "draining", "drained")


@dataclass
class Outcome:
    """One injected story fault: when it was injected, found, and what was decided."""

    step: Step
    node: str
    injected: float
    found: float | None = None
    finding: str = ""
    decision: str = ""


class Tally:
    """Follows the timeline's events: node states (so a decision that changes nothing is shown
    as a no-op), and per injected fault its first finding and first decision."""

    def __init__(self) -> None:
        self.state: dict[str, str] = {}
        self.outcomes: list[Outcome] = []

    def injected(self, step: Step, node: str, t: float) -> None:
        self.outcomes.append(Outcome(step, node, t))

    def see(self, e: Event) -> Event:
        if e.kind == "NODE":
            self.state[e.node] = e.text.removeprefix("now ").strip()
        if e.kind == "DECISION" and "-> ALLOW" in e.text and self.state.get(e.node) in QUARANTINED:
            e = Event(e.t, e.kind, e.node, f"{e.text} [no-op: node already {self.state[e.node]}]")
        for o in self.outcomes:
            if o.node != e.node or e.t < o.injected:
                continue
            kind = e.text.split(" ", 1)[0]
            if o.found is None and (
                (e.kind == "FINDING" and kind in DETECTED_BY.get(o.step.kind, ()))
                or (e.kind == "ALERT" and o.step.kind != "app_xid")  # a rule on the raw series
            ):
                o.found, o.finding = e.t, f"{e.kind.lower()} {e.text.split(' severity=')[0]}"
            elif e.kind == "DECISION" and o.found is not None and not o.decision:
                o.decision = e.text.split(" (guard")[0]
        return e

    def problems(self) -> list[str]:
        """What keeps the story from completing: a fault not found or without a decision, a
        negative control that got an allowed action."""
        out = []
        for o in self.outcomes:
            what = f"{o.node} {o.step.kind}"
            if o.step.kind in NEGATIVE_CONTROLS:
                if "-> ALLOW" in o.decision and "[no-op" not in o.decision:
                    out.append(f"{what} (negative control) acted on: {o.decision}")
            elif o.found is None:
                out.append(f"{what} not detected")
            elif not o.decision:
                out.append(f"{what} found but no decision")
        return out

    def table(self) -> list[str]:
        out = ["", "injected fault                          found after  finding / decision"]
        for o in self.outcomes:
            what = f"{o.node} {o.step.kind} {o.step.target}"
            if o.found is None:
                out.append(f"{what:<40}{'-':>11}  not detected")
                continue
            decided = o.decision or "no decision"
            out.append(f"{what:<40}{o.found - o.injected:>10.0f}s  {o.finding} / {decided}")
        return out


def _loop(stack: Stack, story: list[Step], duration: float, job_node: str, tally: Tally) -> None:
    try:
        _watch(stack, story, duration, job_node, tally)
    finally:
        for line in tally.table():
            _say(line)


def _watch(stack: Stack, story: list[Step], duration: float, job_node: str, tally: Tally) -> None:
    fetch = http_fetch(stack.token)
    seen = Seen()
    start = time.monotonic()
    pending = list(story)
    while not duration or time.monotonic() - start < duration:
        t = time.monotonic() - start
        while pending and pending[0].at <= t:
            step = pending.pop(0)
            node = job_node if step.node == JOB_NODE else step.node
            _say(f"[{t:7.1f}s] STORY    {node:<14} {step.note}")
            tally.injected(step, node, t)
            try:
                stack.inject(node, step.kind, step.target, **step.parameters)
            except OSError as e:  # HTTPError included: say so, keep the demo going
                _say(f"[{t:7.1f}s] STORY    {step.node:<14} injection failed: {e}")
        snap = snapshot(
            fetch,
            stack.urls.simulator,
            stack.urls.analyzer,
            stack.urls.remediation,
            stack.urls.prometheus,
        )
        for event in diff(seen, snap, t):
            _say(tally.see(event).line())
        for line in _job_events(stack.opts.workdir / "job", seen, t):
            _say(line)
        dead = stack.sup.failed()
        if dead:
            _say(f"{dead[0].name} exited unexpectedly:\n{dead[0].tail()}")
            return
        if not pending and not duration and int(t) % 60 == 0:
            _say(f"[{t:7.1f}s] ...       story told; watching (Ctrl-C to stop)")
        time.sleep(1.0)


def main(argv: Sequence[str] | None = None) -> int:
    ns = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if ns.fleet == "mixed-amd":
        if ns.nodes != 32 or ns.telemetry not in ("gpuwarden", "amd-dme"):
            print("gpuwarden demo: --fleet mixed-amd is 32 nodes (2 H100 + 2 MI300X racks) on "
                  "amd-dme telemetry", file=sys.stderr)  # fmt: skip
            return 2
        ns.nodes, ns.telemetry = 32, "amd-dme"
    if ns.nodes < 21 and not ns.story:
        print(
            "gpuwarden demo: --nodes must be >= 21 for the built-in story (it uses "
            "gpu-node-021); pass --story for a smaller fleet",
            file=sys.stderr,
        )
        return 2
    if ns.telemetry != "gpuwarden" and (ns.no_servers or not servers_installed()):
        print(
            f"gpuwarden demo: --telemetry {ns.telemetry} is read through Prometheus: it needs "
            "the real servers (Debian prometheus, prometheus-alertmanager)",
            file=sys.stderr,
        )
        return 2
    if not servers_installed() and not ns.no_servers and os.geteuid() == 0:
        print(
            "note: Debian prometheus/prometheus-alertmanager missing; `make demo` installs "
            "them as root",
            file=sys.stderr,
        )
    signal.signal(signal.SIGTERM, _interrupt)  # stop cleanly when killed, as on Ctrl-C
    return run(ns)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
