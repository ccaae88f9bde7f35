"""The PromQL failure accounting asks: GPU presence and job allocation with the labels the
ledger reads (``node``, ``gpu``, ``uuid``, ``name``, ``serial``; ``job_id``), from
gpuwarden's exporter or from dcgm-exporter, whichever the fleet runs.

dcgm-exporter has no info series: every GPU it reports carries its presence field
(``catalog.DCGM_PRESENCE_FIELDS[0]``) with the identity labels (``Hostname``, or ``hostname``
from 4.x on, ``gpu``, ``UUID``, ``modelName``) and, with ``--hpc-job-mapping-dir``, the Slurm
job as ``hpc_job``. AMD's Device Metrics Exporter (DME) has none either: every GPU it reports
has ``gpu_health`` (exporter/catalog_amd.py), labelled ``hostname``, ``gpu_id``,
``card_model`` (amd-smi's market name, "AMD Instinct MI300X OAM"), ``gpu_uuid``,
``serial_number`` and, from its Slurm prolog, ``job_id``. ``label_replace`` renames them into
the native names; the dialects' series never share a label set, so ``or`` keeps each (a mixed
fleet of H100s and MI300Xs counts each GPU once, by the exporter that serves it).
"""

from __future__ import annotations

from exporter import catalog as c
from exporter import catalog_amd as dme

PRESENCE = c.DCGM_PRESENCE_FIELDS[0]
RENAMES = (("name", "modelName"), ("uuid", "UUID"))
AMD_PRESENCE = "gpu_health"  # DME serves it for every GPU (catalog_amd.PRESENCE)
AMD_RENAMES = (("gpu", dme.GPU_ID), ("name", dme.MODEL), ("uuid", dme.GPU_UUID),
               ("serial", dme.SERIAL))  # fmt: skip


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


def _amd(node: str | None, keep: tuple[str, ...], renames: tuple[tuple[str, str], ...],
         matchers: tuple[str, ...] = ()) -> str:  # fmt: skip
    """DME's health field counted per GPU (1 whatever its value: an unhealthy GPU is still
    there), its labels renamed into the native ones."""
    host = dme.HOSTNAME
    sel = ",".join((f'{host}="{node}"' if node else f'{host}!=""', *matchers))
    by = ", ".join((host, dme.GPU_ID, *keep))
    return _rename(f"count by ({by}) ({AMD_PRESENCE}{{{sel}}})", (("node", host), *renames))


def gpus(node: str | None = None) -> str:
    """One series per GPU with its identity (``gpuwarden_gpu_info``'s labels)."""
    dcgm = _dcgm(node, ("UUID", "modelName"), RENAMES)
    amd = _amd(node, (dme.MODEL, dme.GPU_UUID, dme.SERIAL), AMD_RENAMES)
    return f"{_series(c.GPU_INFO.name, node=node)} or {dcgm} or {amd}"


def allocations(node: str | None = None, job_id: str | None = None) -> str:
    """One series per (GPU, job) while the job holds the GPU (``job_id``)."""
    job = c.DCGM_JOB_LABEL
    held = f'{job}="{job_id}"' if job_id is not None else f'{job}!=""'
    dcgm = _dcgm(node, (job,), (("job_id", job),), (held,))
    amd_held = f'{dme.JOB_ID}="{job_id}"' if job_id is not None else f'{dme.JOB_ID}!=""'
    amd = _amd(node, (dme.JOB_ID,), (("gpu", dme.GPU_ID),), (amd_held,))
    native = _series(c.GPU_ALLOCATION_INFO.name, node=node, job_id=job_id)
    return f"{native} or {dcgm} or {amd}"
