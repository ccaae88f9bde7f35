"""A node's scrape as dcgm-exporter + node_exporter would serve it (``--telemetry dcgm-exporter``).

Two field profiles: ``dcgm-exporter`` serves every field gpuwarden's catalogue maps to
dcgm-exporter, i.e. a fleet whose counters CSV also enables the commonly added ECC,
NVLink-error, power-limit, row-remap, PCIe-link and profiling fields; ``dcgm-exporter:defaults``
serves only the fields dcgm-exporter's own etc/default-counters.csv enables
(:data:`exporter.catalog_dcgm.DEFAULT_COUNTERS`), as a fleet that never edited it.

Pure text transform of the exporter's own ``--compat dcgm`` output (rendered by the same
collectors as always): dcgm-exporter's families are kept as they are (its names, units and
labels: ``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``,
the last-XID gauge), with dcgm-exporter's ``hpc_job`` label on the GPUs of a job (its HPC job
mapping); gpuwarden's InfiniBand series become node_exporter's ``node_infiniband_*``
(``device``, ``port``; the data and error counters by their node_exporter names); every other
``gpuwarden_*`` series is dropped. No ``node`` label is left: Prometheus's ``instance`` and
dcgm's ``Hostname`` are all the analyzer gets, as on a real fleet.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping

from exporter import catalog as c
from exporter import catalog_dcgm

DCGM = "dcgm-exporter"  # commonly enabled fields: every catalogue dcgm field
DCGM_DEFAULTS = "dcgm-exporter:defaults"  # only default-counters.csv's enabled fields
AMD_DME = "amd-dme"  # NVIDIA nodes gpuwarden's, AMD nodes AMD's Device Metrics Exporter
TELEMETRIES = ("gpuwarden", DCGM, DCGM_DEFAULTS, AMD_DME)
HELP = (
    "gpuwarden (default); dcgm-exporter: every node as dcgm-exporter + node_exporter would "
    "serve it (no gpuwarden_* series, no node label) with the commonly enabled fields (ECC, "
    "NVLink errors, power limit, row remaps, PCIe link, profiling: a counters CSV that adds "
    "them); dcgm-exporter:defaults: only the fields dcgm-exporter's default-counters.csv "
    "enables; amd-dme: NVIDIA nodes gpuwarden's, AMD nodes AMD's Device Metrics Exporter's "
    "fields (simulator.dme). Whatever the choice, AMD nodes' GPUs are served as DME serves them"
)
_SERIES = re.compile(r"^(\w+)\{(.*)\} (\S+)$")
_LABEL = re.compile(r'(\w+)="((?:[^"\\]|\\.)*)"')
_GPU = re.compile(r'(?:^|,)gpu="(\d+)"')
_IB_PLAIN = {c.IB_PORT_STATE.name: c.NODE_IB_STATE, c.IB_PORT_RATE.name: c.NODE_IB_RATE,
             c.IB_TRANSMIT.name: c.NODE_IB_DATA["port_xmit_data"],
             c.IB_RECEIVE.name: c.NODE_IB_DATA["port_rcv_data"]}  # fmt: skip
_IB_COUNTERS = (c.IB_COUNTER.name, c.IB_HW_COUNTER.name)


def is_dcgm(telemetry: str) -> bool:
    """Whether ``telemetry`` serves nodes as dcgm-exporter + node_exporter (any profile)."""
    return telemetry.partition(":")[0].partition("+")[0] == DCGM


def dcgm_fields(telemetry: str) -> frozenset[str] | None:
    """The dcgm field names (4.8 names) a profile serves; None: every catalogue field."""
    return frozenset(catalog_dcgm.DEFAULT_COUNTERS) if telemetry == DCGM_DEFAULTS else None


def _ib_line(name: str, labels: str, value: str) -> tuple[str, str] | None:
    """One gpuwarden IB series -> (node_exporter family, line), or None if it has no twin."""
    lab = dict(_LABEL.findall(labels))
    if name in _IB_PLAIN:
        fam = _IB_PLAIN[name]
    elif name in _IB_COUNTERS and lab.get("counter") in c.NODE_IB_ERRORS:
        fam = c.NODE_IB_ERRORS[lab["counter"]]
    else:
        return None
    return fam, f'{fam}{{device="{lab.get("device", "")}",port="{lab.get("port", "")}"}} {value}'


def as_dcgm_exporter(body: bytes, jobs: Mapping[str, str] | None = None,
                     fields: Collection[str] | None = None) -> bytes:  # fmt: skip
    """``body`` (the exporter's text with ``--compat dcgm``) as dcgm-exporter + node_exporter
    serve it; ``jobs``: GPU index -> job id (dcgm-exporter's ``hpc_job`` label); ``fields``:
    only these dcgm families (:func:`dcgm_fields`), None: every one."""
    jobs = jobs or {}
    out: list[str] = []
    ib: dict[str, list[str]] = {}
    keep = False
    for line in body.decode().splitlines():
        if line.startswith("#"):
            parts = line.split(" ", 3)
            keep = len(parts) > 2 and parts[2].startswith("DCGM_")
            keep = keep and (fields is None or parts[2] in fields)
            if keep:
                out.append(line)
            continue
        m = _SERIES.match(line)
        if m is None:
            continue
        name, labels, value = m.groups()
        if name.startswith("DCGM_") and keep:
            g = _GPU.search(labels)
            job = jobs.get(g.group(1), "") if g else ""
            extra = f',{c.DCGM_JOB_LABEL}="{job}"' if job else ""
            out.append(f"{name}{{{labels}{extra}}} {value}")
        elif (got := _ib_line(name, labels, value)) is not None:
            ib.setdefault(got[0], []).append(got[1])
    for fam, lines in ib.items():
        kind = "counter" if fam.endswith("_total") else "gauge"
        out += [f"# HELP {fam} node_exporter infiniband collector", f"# TYPE {fam} {kind}"]
        out += lines
    return ("\n".join(out) + "\n").encode()
