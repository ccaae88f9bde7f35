"""A simulated year of a mixed GPU fleet's failures: the ground truth for failure accounting.

Pure and seeded: ``simulate(seed)`` returns incidents and exposure as
``gpuwarden.incident/v1`` / ``gpuwarden.exposure/v1`` lines (docs/accounting.md) plus what
really happened: the true failure rate of every (GPU model, component) and the GPU-hours
the failures cost, tallied as the year unfolds. ``gpuwarden report`` on the lines must find
those rates inside its 90 % intervals about 90 % of the time, and the same GPU-hours.

Failure rates (per unit-hour in service) come from published figures:

* H100, from Llama 3 pre-training (Dubey et al., "The Llama 3 Herd of Models", 2024,
  section 3.3.4, Table 5): 419 unexpected interruptions in 54 days on 16,384 H100 (2,048
  nodes), i.e. 21.2 M GPU-hours and 2.65 M node-hours. gpu: faulty GPU 148 + SRAM 19 + GSP
  17 + thermal/sensor 6 + silent data corruption 6; gpu_memory: HBM3 72; nic: network
  switch/cable 35 + NIC 7; host: host maintenance 32 + PSU 3 + chassis 2 + IO board 2 +
  CPU 2 + system memory 2; storage: SSD 3; software: software bugs 54 + NCCL watchdog 7 +
  dependency 2. The table lists no NVLink cause; NVLink's share of hardware faults varies
  from ~2 % to ~40 % between fleets, and 10 interruptions (~3 %) is assumed here.
* A100: the same mix scaled by Meta's RSC-1 rate, 6.50 failures per 1,000 node-days
  (Kokolis et al., "Revisiting Reliability in Large-Scale Machine Learning Research
  Clusters", 2024), against Llama 3's 419 / (2,048 x 54) = 3.79.

Each failure takes its node out of service from mitigation to return (exposure rows end and
start there); a job on the node is interrupted at onset and resumed on spare nodes, losing
the work since its last checkpoint.
"""

from __future__ import annotations

import math
import random
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

LLAMA3_GPU_HOURS = 16_384 * 54 * 24.0
LLAMA3_NODE_HOURS = 2_048 * 54 * 24.0
LLAMA3_PER_1000_NODE_DAYS = 419 / (2_048 * 54) * 1000
RSC1_PER_1000_NODE_DAYS = 6.50
# interruptions in the Llama 3 window, per component, and the unit they are counted on
LLAMA3_COUNTS = {
    "gpu": (148 + 19 + 17 + 6 + 6, "gpu"),
    "gpu_memory": (72, "gpu"),
    "nvlink": (10, "gpu"),
    "nic": (35 + 7, "node"),
    "host": (32 + 3 + 2 + 2 + 2 + 2, "node"),
    "storage": (3, "node"),
    "software": (54 + 7 + 2, "node"),
}
FAULT_CLASS = {
    "gpu": "xid_fatal",
    "gpu_memory": "memory",
    "nvlink": "nvlink",
    "nic": "infiniband",
    "host": "faulty_machine",
    "storage": "storage",
    "software": "xid_application_repeated",
}
MODEL_SCALE = {"H100": 1.0, "A100": RSC1_PER_1000_NODE_DAYS / LLAMA3_PER_1000_NODE_DAYS}
GPUS_PER_NODE = 8
YEAR_S = 365 * 86400.0
START = datetime(2026, 1, 1, tzinfo=UTC).timestamp()


def rates(model: str, scale: float = 1.0) -> dict[str, float]:
    """Failures per unit-hour in service (GPU-hours for GPU parts, node-hours otherwise)."""
    out = {}
    for comp, (count, unit) in LLAMA3_COUNTS.items():
        hours = LLAMA3_GPU_HOURS if unit == "gpu" else LLAMA3_NODE_HOURS
        out[comp] = count / hours * MODEL_SCALE[model] * scale
    return out


@dataclass(frozen=True)
class Setup:
    fleet: tuple[tuple[str, int], ...] = (("H100", 32), ("A100", 32))  # (model, nodes)
    nodes_per_job: int = 4
    rate_scale: float = 1.0
    lemons: int = 0  # GPUs failing at lemon_factor x their model's gpu rate
    lemon_factor: float = 40.0
    checkpoint_s: float = 3600.0
    seconds: float = YEAR_S


@dataclass
class Year:
    incidents: list[dict[str, Any]] = field(default_factory=list)
    exposure: list[dict[str, Any]] = field(default_factory=list)
    true_rate: dict[tuple[str, str], float] = field(default_factory=dict)  # per unit-hour
    lost: dict[str, float] = field(default_factory=lambda: defaultdict(float))  # GPU-hours
    lemon_units: list[str] = field(default_factory=list)
    since: float = START
    until: float = START


@dataclass
class _Job:
    job_id: str
    gpus: int
    phase: float
    resumed: float  # when it last (re)started: work before is safe up to the checkpoint
    busy_until: float = -math.inf  # restarting until then: a failure now interrupts nothing

    def last_checkpoint(self, at: float, every: float) -> float:
        """The last checkpoint written before ``at`` (every ``every`` s, since the start)."""
        return self.phase + math.floor((at - self.phase) / every) * every


def _delays(rng: random.Random, component: str) -> tuple[float, float, float]:
    """(detect, mitigate, repair) seconds: minutes to detect and drain, hours to days to
    repair (a reboot and checks; an RMA for a GPU)."""
    detect = rng.uniform(10, 600)
    mitigate = rng.uniform(30, 900)
    repair = {
        "gpu": rng.lognormvariate(math.log(48 * 3600), 0.8),
        "gpu_memory": rng.lognormvariate(math.log(24 * 3600), 0.8),
        "software": rng.uniform(60, 600),
    }.get(component, rng.lognormvariate(math.log(8 * 3600), 0.8))
    return detect, mitigate, repair


def _iso(t: float) -> str:
    """RFC 3339 to the microsecond (the other times are written as epoch seconds: the
    interchange format takes both)."""
    return (
        datetime.fromtimestamp(t, tz=UTC).isoformat(timespec="microseconds").replace("+00:00", "Z")
    )


def simulate(seed: int, setup: Setup = Setup()) -> Year:
    rng = random.Random(seed)
    year = Year(until=START + setup.seconds)
    nodes: list[tuple[str, str]] = []
    for model, count in setup.fleet:
        nodes += [(f"{model.lower()}-{i:03d}", model) for i in range(count)]
        for comp, rate in rates(model, setup.rate_scale).items():
            year.true_rate[(model, comp)] = rate
    lemon_gpus = set(
        rng.sample([(n, g) for n, _ in nodes for g in range(GPUS_PER_NODE)], setup.lemons)
    )
    year.lemon_units = sorted(f"{n}/{g}" for n, g in lemon_gpus)
    jobs = {}
    for i in range(0, len(nodes), setup.nodes_per_job):
        job = _Job(
            f"run-{i // setup.nodes_per_job:03d}",
            setup.nodes_per_job * GPUS_PER_NODE,
            START - rng.uniform(0, setup.checkpoint_s),
            START,
        )
        for name, _ in nodes[i : i + setup.nodes_per_job]:
            jobs[name] = job
    for name, model in nodes:
        _node_year(rng, year, setup, name, model, lemon_gpus)
    year.incidents.sort(key=lambda line: (line["onset"], line["id"]))
    for line in year.incidents:  # in time order: a job's state runs across its nodes
        _interrupt(rng, year, setup, line, jobs[line["node"]])
    for job in {id(j): j for j in jobs.values()}.values():
        year.lost["allocated"] += job.gpus * setup.seconds / 3600.0
    return year


def _node_year(
    rng: random.Random,
    year: Year,
    setup: Setup,
    node: str,
    model: str,
    lemon_gpus: set[tuple[str, int]],
) -> None:
    r = rates(model, setup.rate_scale)
    hazards: list[tuple[str, int | None, float]] = []
    for g in range(GPUS_PER_NODE):
        boost = setup.lemon_factor if (node, g) in lemon_gpus else 1.0
        hazards += [
            ("gpu", g, r["gpu"] * boost),
            ("gpu_memory", g, r["gpu_memory"]),
            ("nvlink", g, r["nvlink"]),
        ]
    hazards += [(c, None, r[c]) for c in ("nic", "host", "storage", "software")]
    total = sum(h for _, _, h in hazards) / 3600.0  # per second
    t = in_service_since = year.since
    while True:
        t += rng.expovariate(total)
        if t >= year.until:
            break
        comp, gpu, _ = rng.choices(hazards, weights=[h for _, _, h in hazards])[0]
        back = _failure(rng, year, node, model, comp, gpu, t, in_service_since)
        if back is not None:  # the node was out of service until ``back``
            t = in_service_since = back
    if in_service_since < year.until:
        _exposure(year, node, model, in_service_since, None)


def _failure(
    rng: random.Random,
    year: Year,
    node: str,
    model: str,
    comp: str,
    gpu: int | None,
    onset: float,
    in_service_since: float,
) -> float | None:
    """Record one failure at ``onset``; returns when the node is back in service (None: it
    never left, a software failure)."""
    detect, mitigate, repair = _delays(rng, comp)
    detected = onset + detect
    out = comp != "software"
    mitigated = detected + mitigate if out else None
    returned = (mitigated + repair) if mitigated is not None else detected + repair
    if mitigated is not None and mitigated < year.until:
        year.lost["capacity"] += GPUS_PER_NODE * (min(returned, year.until) - mitigated) / 3600.0
    year.incidents.append({
        "schema": "gpuwarden.incident/v1",
        "id": f"sim-{node}-{len(year.incidents):05d}",
        "node": node, "gpu": None if gpu is None else str(gpu), "gpu_model": model,
        "component": comp, "fault_class": FAULT_CLASS[comp],
        "onset": _iso(onset), "detected": _iso(detected), "mitigated": mitigated,
        "returned": returned if returned < year.until else None,
        "gpus_out": GPUS_PER_NODE if out else 0, "jobs": [],
        "source": "simulator.reliability_year",
    })  # fmt: skip
    if mitigated is None:
        return None
    _exposure(year, node, model, in_service_since, min(mitigated, year.until))
    return min(returned, year.until)


def _interrupt(
    rng: random.Random, year: Year, setup: Setup, line: dict[str, Any], job: _Job
) -> None:
    """The job on the failed node crashes at onset (unless it is restarting already: then
    the failure interrupts nothing) and is requeued on spare nodes minutes after detection,
    losing the work since its last checkpoint."""
    onset = datetime.fromisoformat(line["onset"]).timestamp()
    detected = datetime.fromisoformat(line["detected"]).timestamp()
    if onset < job.busy_until:
        return
    checkpoint = job.last_checkpoint(onset, setup.checkpoint_s)
    resumed = detected + rng.uniform(300, 2400)
    year.lost["restart"] += job.gpus * (min(resumed, year.until) - onset) / 3600.0
    year.lost["recompute"] += job.gpus * (onset - max(checkpoint, job.resumed)) / 3600.0
    line["jobs"].append({
        "job_id": job.job_id, "gpus": job.gpus, "interrupted": onset,
        "resumed": resumed if resumed < year.until else None, "last_checkpoint": checkpoint,
        "start": year.since, "end": year.until,
    })  # fmt: skip
    job.resumed = job.busy_until = job.phase = resumed  # checkpoints restart their cadence


def _exposure(year: Year, node: str, model: str, start: float, end: float | None) -> None:
    if end is not None and end <= start:
        return
    for g in range(GPUS_PER_NODE):
        year.exposure.append({"schema": "gpuwarden.exposure/v1", "unit": f"{node}/{g}",
                              "node": node, "gpu": str(g), "gpu_model": model,
                              "start": start, "end": end})  # fmt: skip
    year.exposure.append({"schema": "gpuwarden.exposure/v1", "unit": node, "node": node,
                          "gpu": None, "gpu_model": model, "start": start, "end": end})  # fmt: skip
