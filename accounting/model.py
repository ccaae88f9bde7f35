"""The ledger's records: frozen dataclasses shared by the interchange format and the report.

Times are epoch seconds (float). ``None`` means "not yet" (still out, not resumed) or
"not known" (no checkpoint time), as the interchange format says.
"""

from __future__ import annotations

from dataclasses import dataclass, field

INCIDENT_SCHEMA = "gpuwarden.incident/v1"
EXPOSURE_SCHEMA = "gpuwarden.exposure/v1"

# Components whose natural unit is a GPU / a node; the rest have no unit to be exposed.
GPU_COMPONENTS = ("gpu", "gpu_memory", "nvlink")
NODE_COMPONENTS = ("nic", "host", "storage")
UNITLESS_COMPONENTS = ("software", "unknown")
COMPONENTS = GPU_COMPONENTS + NODE_COMPONENTS + UNITLESS_COMPONENTS
# Incident ids, job ids and unit names are given back as they were read: a string, or an
# integer (Slurm job ids, ticket numbers) stays an integer in the report.
Ident = str | int


@dataclass(frozen=True)
class JobHit:
    """One job an incident interrupted. ``start``/``end`` (allocation of the run) are an
    optional extension: they let ETTR be computed; other readers ignore them."""

    job_id: Ident
    gpus: int
    interrupted: float
    resumed: float | None = None
    last_checkpoint: float | None = None
    start: float | None = None
    end: float | None = None


@dataclass(frozen=True)
class Incident:
    id: Ident
    node: str
    gpu: str | None
    gpu_model: str
    component: str
    fault_class: str
    onset: float
    detected: float
    mitigated: float | None
    returned: float | None
    gpus_out: int
    jobs: tuple[JobHit, ...] = field(default_factory=tuple)


@dataclass(frozen=True)
class Exposure:
    """One in-service interval of one physical unit (a GPU, or with ``gpu`` None the node)."""

    unit: Ident
    node: str
    gpu: str | None
    gpu_model: str
    start: float
    end: float | None


@dataclass(frozen=True)
class JobRun:
    """A job run's allocation (from the scheduler or the allocation series), requeues of
    the same ``job_id`` joined; ``end`` None while it still runs. Needed for ETTR only."""

    job_id: Ident
    gpus: int
    start: float
    end: float | None
