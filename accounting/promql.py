"""The PromQL failure accounting asks: GPU presence and job allocation with the labels the
ledger reads (``node``, ``gpu``, ``uuid``, ``name``, ``serial``; ``job_id``), from
gpuwarden's exporter or from dcgm-exporter, whichever the fleet runs.

dcgm-exporter has no info series: every GPU it reports carries its presence field
(``catalog.DCGM_PRESENCE_FIELDS[0]``) with the identity labels (``Hostname``, or ``hostname``
from 4.x on, ``gpu``, ``UUID``, ``modelName``) and, with ``--hpc-job-mapping-dir``, the Slurm
job as ``hpc_job``. ``label_replace`` renames them into the native names; the two dialects'
series never share a label set, so ``or`` keeps both (a mixed fleet counts each GPU once,
by the exporter that serves it).
"""

from __future__ import annotations

from exporter import catalog as c

PRESENCE = c.DCGM_PRESENCE_FIELDS[0]
RENAMES = (("name", "modelName"), ("uuid", "UUID"))


def _sel(**labels: str | None) -> str:
    return ",".join(f'{k}="{v}"' for k, v in labels.items() if v is not None)


def _series(name: str, **labels: str | None) -> str:
    sel = _sel(**labels)
    return f"{name}{{{sel}}}" if sel else name


def _rename(expr: str, pairs: tuple[tuple[str, str], ...]) -> str:
    for dst, src in pairs:
        expr = f'label_replace({expr}, "{dst}", "$1", "{src}", "(.+)")'
    return expr


def _dcgm(node: str | None, keep: tuple[str, ...], renames: tuple[tuple[str, str], ...],
          matchers: tuple[str, ...] = ()) -> str:  # fmt: skip
    """dcgm-exporter's presence field counted per GPU (always 1, whatever it measures),
    under each host label spelling, its labels renamed into the native ones."""
    parts = []
    for host in c.HOSTNAME_LABELS:
        sel = ",".join((f'{host}="{node}"' if node else f'{host}!=""', *matchers))
        by = ", ".join((host, "gpu", *keep))
        parts.append(_rename(f"count by ({by}) ({PRESENCE}{{{sel}}})", (("node", host), *renames)))
    return " or ".join(parts)


def gpus(node: str | None = None) -> str:
    """One series per GPU with its identity (``gpuwarden_gpu_info``'s labels)."""
    dcgm = _dcgm(node, ("UUID", "modelName"), RENAMES)
    return f"{_series(c.GPU_INFO.name, node=node)} or {dcgm}"


def allocations(node: str | None = None, job_id: str | None = None) -> str:
    """One series per (GPU, job) while the job holds the GPU (``job_id``)."""
    job = c.DCGM_JOB_LABEL
    held = f'{job}="{job_id}"' if job_id is not None else f'{job}!=""'
    dcgm = _dcgm(node, (job,), (("job_id", job),), (held,))
    return f"{_series(c.GPU_ALLOCATION_INFO.name, node=node, job_id=job_id)} or {dcgm}"
