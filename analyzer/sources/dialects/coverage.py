"""Coverage: per detector and node group, what the analyzer can judge with the data present.

Pure (a :class:`~analyzer.window.Window` in, a report out). Nodes are grouped by the dialect
their series were read in (``Window.dialect_of``); for each group and detector the report
says which of the detector's inputs hold data on those nodes, what it therefore cannot
judge and why, and what would enable the rest: the exact dcgm-exporter CSV lines
(``etc/default-counters.csv`` format: ``field, type, help``) from the catalogue's field
table, or that only gpuwarden's exporter serves it. Nothing degrades silently: the same
notes travel on the findings a reduced signal produced (:func:`annotate`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from analyzer.detectors import capsight
from analyzer.findings import Finding
from analyzer.sources.dialects import AMD, DCGM, NATIVE, NODE_EXPORTER
from analyzer.sources.dialects.amd_coverage import NO_SIGNAL as AMD_NO_SIGNAL
from analyzer.sources.dialects.amd_coverage import REDUCED as AMD_REDUCED
from analyzer.sources.dialects.amd_coverage import enable as amd_enable
from analyzer.sources.dialects.dcgm import REDUCED
from analyzer.window import Window
from exporter import catalog as c
from exporter import catalog_dcgm

XID = "xid events"  # a pseudo input: events, not an array
AFID = "afid events"  # AMD RAS events (Window.afids)
JOBS = "job attribution"


@dataclass(frozen=True)
class Need:
    what: str  # catalogue name, or XID / JOBS
    role: str
    essential: bool = True


def _n(m: c.MetricDef, role: str, essential: bool = True) -> Need:
    return Need(m.name, role, essential)


# the RoCE detector's inputs, per-port counters in Window.ib_counters (analyzer.detectors.roce)
ROCE_PFC, ROCE_CONGESTION, ROCE_LOSS = "roce:pfc", "roce:congestion", "roce:loss"
ROCE_KEYS: Mapping[str, tuple[str, ...]] = {
    ROCE_PFC: tuple(f"{d}_prio{p}_pause_seconds" for d in ("rx", "tx") for p in range(8)),
    ROCE_CONGESTION: c.ROCE_CONGESTION_COUNTERS,
    ROCE_LOSS: c.ROCE_RETRANSMIT_COUNTERS,
}
ROCE_ENABLE = {
    ROCE_PFC: "gpuwarden-exporter (RoCE ports' ethtool statistics), or node_exporter's ethtool"
    " collector (--collector.ethtool); no data also means no pause moved in the window",
    ROCE_CONGESTION: "gpuwarden-exporter (mlx5 hw_counters/); no data also means no congestion",
    ROCE_LOSS: "gpuwarden-exporter (mlx5 hw_counters/); no data also means no loss",
}
FAIL_SLOW = "fail-slow"  # part of the straggler detector, reported on its own line
# what tells an administrator's power or clock cap from a slow part
CAP_SIGHT = (_n(c.GPU_POWER_LIMIT, "power limit (tells an admin cap from hardware)", False),
             _n(c.GPU_THROTTLE, "clock event reasons (tell an admin cap from hardware)",
                False))  # fmt: skip
NOTIFY_ONLY = f"notify-only here: {capsight.NOTE}"

NEEDS: Mapping[str, tuple[Need, ...]] = {
    "xid": (Need(XID, "XID events per GPU"),),
    "afid": (Need(AFID, "AMD RAS events (AFIDs) per GPU"),),
    "missing": (_n(c.GPU_UP, "GPU presence / lost GPUs"),),
    # each judged alone (dcgm-exporter's defaults: remap failures without ECC)
    "memory": (_n(c.GPU_ECC_ERRORS, "ECC errors", False),
               _n(c.GPU_ROW_REMAP_PENDING, "row remaps pending", False),
               _n(c.GPU_ROW_REMAP_FAILED, "row remap failures", False)),
    "ras": (_n(c.GPU_RAS_ERRORS, "RAS errors per block (deferred: poison caught)"),),
    "nvlink": (_n(c.NVLINK_ERRORS, "NVLink error counters"),
               _n(c.NVLINK_UP, "NVLink state per link", False)),
    "xgmi": (_n(c.GPU_XGMI_TRANSMIT, "XGMI traffic per link (written)"),
             _n(c.GPU_XGMI_RECEIVE, "XGMI traffic per link (read)", False)),
    "infiniband": (_n(c.IB_PORT_STATE, "IB port state"),
                   _n(c.IB_PORT_RATE, "IB port rate", False),
                   Need(c.IB_COUNTER.name, "IB error counters", False)),
    # without the maximum link a GPU is judged against its same-model peers and siblings
    "pcie": (_n(c.GPU_PCIE_GENERATION, "PCIe link generation"),
             _n(c.GPU_PCIE_WIDTH, "PCIe link width"),
             _n(c.GPU_PCIE_GENERATION_MAX, "PCIe maximum generation", False),
             _n(c.GPU_PCIE_WIDTH_MAX, "PCIe maximum width", False)),
    "fabric": (_n(c.GPU_FABRIC_HEALTH, "NVLink fabric health per GPU"),),
    "fabric_services": (_n(c.FABRIC_SERVICE_UP, "Fabric Manager / IMEX unit state"),
                        _n(c.FABRIC_IMEX_READY, "IMEX daemon readiness", False)),
    "throttling": (_n(c.GPU_THROTTLE, "clock event reasons"),
                   _n(c.GPU_POWER_LIMIT, "power limit", False)),
    "power_brake": (_n(c.GPU_THROTTLE, "clock event reasons (the power-brake reason)"),),
    "peer": (_n(c.GPU_UTILIZATION, "utilization"), _n(c.GPU_SM_CLOCK, "SM clock"),
             _n(c.GPU_POWER, "power", False), _n(c.GPU_TEMPERATURE, "temperature", False),
             *CAP_SIGHT),
    "straggler": (_n(c.GPU_UTILIZATION, "utilization"), Need(JOBS, "which GPUs run one job"),
                  _n(c.GPU_SM_CLOCK, "SM clock", False),
                  _n(c.GPU_SM_ACTIVE, "SM activity (survives collective waits)", False),
                  _n(c.GPU_TENSOR_ACTIVE, "tensor activity", False),
                  _n(c.JOB_STEP_SECONDS, "published step times", False), *CAP_SIGHT),
    # the straggler detector's judgement of nodes no job comparison reaches
    FAIL_SLOW: (_n(c.GPU_UTILIZATION, "utilization"), _n(c.GPU_SM_CLOCK, "SM clock"),
                *CAP_SIGHT),
    # partitioned GPUs: each instance against its same-profile peers (analyzer.detectors
    # .instances); only where per-instance activity is read
    "instances": (_n(c.GPU_MIG_GRAPHICS_ACTIVE, "per-instance activity of partitioned GPUs"),),
    "storage": (_n(c.STORAGE_PROBE_UP, "checkpoint storage probes"),),
    # RoCE ports: any of them (read moved-only: an idle or InfiniBand fabric shows none)
    "roce": (Need(ROCE_PFC, "PFC pause time per priority (storms)", False),
             Need(ROCE_CONGESTION, "ECN/CNP counters (congestion vs the leaf)", False),
             Need(ROCE_LOSS, "out-of-sequence / retransmit counters (bad NIC or cable)", False)),
    # any signal suffices: the detector judges each it has (state "cannot" with none)
    "marginal": (_n(c.NVLINK_ERRORS, "NVLink error counters (rate vs peers)", False),
                 Need(c.IB_COUNTER.name, "IB symbol-error counter (rate vs peers)", False),
                 _n(c.GPU_SM_CLOCK, "SM clock under load (a GPU a few percent slow)", False),
                 _n(c.GPU_PCIE_WIDTH_MAX, "PCIe maximum width (a link below it)", False),
                 _n(c.GPU_REMAPPED_ROWS, "correctable row remaps", False)),
}  # fmt: skip
# detectors whose "clocks or power below the peers'" may be an admin's cap: without either
# input they only notify (analyzer.detectors.capsight)
CAP_LIKE = ("peer", "straggler", FAIL_SLOW)

_ENABLE_ONLY_NATIVE = {
    c.NVLINK_UP.name: "dcgm-exporter has no per-link NVLink state field",
    c.GPU_PCIE_GENERATION_MAX.name: "dcgm-exporter has no maximum-link field (a link is"
    " judged against its same-model peers' and its node's instead)",
    c.GPU_PCIE_WIDTH_MAX.name: "dcgm-exporter has no maximum-link field (a link is judged"
    " against its same-model peers' and its node's instead)",
    c.JOB_STEP_SECONDS.name: "published by the training job (gpuwarden-exporter --step-dir)",
    c.STORAGE_PROBE_UP.name: "gpuwarden-exporter's storage probes",
    c.GPU_MIG_GRAPHICS_ACTIVE.name: "gpuwarden-exporter's MIG collector (GPM per GPU instance,"
    " Hopper and newer); DME serves no per-partition activity (amdsmi has none)",
    c.GPU_FABRIC_HEALTH.name: "DCGM has no fabric-health field (NVML's GPU fabric info)",
    c.GPU_REMAPPED_ROWS.name: "gpuwarden-exporter (the dcgm reader does not read remap counts)",
    c.FABRIC_SERVICE_UP.name: "gpuwarden-exporter's fabric_services collector (systemd units)",
    c.FABRIC_IMEX_READY.name: "gpuwarden-exporter's fabric_services collector (nvidia-imex-ctl)",
}
_IB_FAMILIES = (c.IB_PORT_STATE.name, c.IB_PORT_RATE.name, c.IB_COUNTER.name)
NODE_EXPORTER_IB = ("node_exporter's infiniband collector (on by default; "
                    "--collector.infiniband), or gpuwarden-exporter")  # fmt: skip
# node_exporter reads a port's hw_counters/ (local_ack_timeout_err, rnr_nak_retry_err) from
# v1.11.0 on (prometheus/node_exporter#2827); 1.5.0 (Debian 12) serves only counters/
NODE_EXPORTER_HW = ("local_ack_timeout_err", "rnr_nak_retry_err")


def csv_lines(family: str, generation: str = catalog_dcgm.DEFAULT) -> list[str]:
    """The dcgm-exporter CSV lines that make ``family`` readable (default-counters.csv), in
    the names of the nodes' naming generation (exporter.catalog_dcgm)."""
    try:
        m = c.by_name(family)
    except KeyError:
        return []
    out = []
    for f in m.dcgm:
        name = catalog_dcgm.name_in(generation, f.name)
        if name is not None:
            out.append(f"{name}, {f.type}, {f.help or m.help}")
    return out


def enable(need: Need, dialect: str, generation: str = catalog_dcgm.DEFAULT) -> str:
    if need.what in ROCE_ENABLE:
        return ROCE_ENABLE[need.what]
    if AMD in dialect.split("+") and DCGM not in dialect:
        if need.what in _IB_FAMILIES and NODE_EXPORTER not in dialect:
            return NODE_EXPORTER_IB
        return amd_enable(need.what)
    if need.what == AFID:
        return ("AFIDs are AMD's (DME's gpu_afid_errors, or gpuwarden-exporter's amdsmi source);"
                " NVIDIA GPUs report XIDs (the xid line)")  # fmt: skip
    if need.what == JOBS:
        if DCGM in dialect:
            return ("dcgm-exporter --hpc-job-mapping-dir (label hpc_job) or its Kubernetes pod "
                    "labels; or gpuwarden-exporter --job-map-dir")  # fmt: skip
        return "gpuwarden-exporter --job-map-dir (Slurm prolog/epilog map)"
    if need.what == XID:
        xid = catalog_dcgm.name_in(generation, c.DCGM_LAST_XID.name) or c.DCGM_LAST_XID.name
        return f"{xid}, gauge, {c.DCGM_LAST_XID_HELP}"
    if need.what in _IB_FAMILIES and DCGM in dialect and NODE_EXPORTER not in dialect:
        return NODE_EXPORTER_IB
    if DCGM in dialect and need.what == c.GPU_THROTTLE.name:
        # the bitmask (each reason as collected) or dcgm-exporter's per-reason count
        lines = [f"{f.name}, {f.type}, {f.help}"
                 for f in (c.DCGM_CLOCK_EVENTS, c.DCGM_CLOCK_EVENTS_COUNT)]  # fmt: skip
        return "add to dcgm-exporter's counters CSV (either):\n" + "\n".join(lines)
    if DCGM in dialect and need.what not in _ENABLE_ONLY_NATIVE:
        lines = csv_lines(need.what, generation)
        if lines:
            return "add to dcgm-exporter's counters CSV:\n" + "\n".join(lines)
    why = _ENABLE_ONLY_NATIVE.get(need.what, "not served by this dialect")
    return f"{why}: gpuwarden-exporter serves it (with --compat dcgm beside dcgm's names)"


def _has(w: Window, need: Need, nodes: np.ndarray, xid_read: bool, dialect: str = "") -> bool:
    if need.what == XID:
        return xid_read
    if need.what == AFID:
        on = set(nodes.tolist())
        return AMD in dialect.split("+") or any(e.node in on for e in w.afids)
    if need.what == JOBS:
        on = {n for members in w.jobs.values() for n in members}
        return bool(on & set(nodes.tolist()))
    if need.what == c.IB_COUNTER.name:
        return any(not np.isnan(a[:, nodes]).all() for a in w.ib_counters.values())
    if need.what in ROCE_KEYS:
        return any(not np.isnan(w.ib_counters[k][:, nodes]).all()
                   for k in ROCE_KEYS[need.what] if k in w.ib_counters)  # fmt: skip
    a = w.metrics.get(need.what)
    return a is not None and a.shape[0] == len(w.t) and not np.isnan(a[:, nodes]).all()


def _ib_counters_unserved(w: Window, nodes: np.ndarray) -> list[str]:
    """On a node_exporter group whose IB error counters hold data, the hw_counters/ ones that
    hold none: they may only not have moved (counters are read moved-only), or be unserved by
    a node_exporter before v1.11.0, so "judges IB error counters" does not hide them."""
    served = [k for k, a in w.ib_counters.items() if not np.isnan(a[:, nodes]).all()]
    lack = [k for k in NODE_EXPORTER_HW if k not in served]
    if not served or not lack:
        return []
    return [f"IB error counters without data here: {', '.join(lack)} (unmoved, or unserved: "
            "node_exporter reads hw_counters/ from v1.11.0 on)"]  # fmt: skip


def groups(w: Window) -> dict[str, np.ndarray]:
    out: dict[str, list[int]] = {}
    for i in range(len(w.nodes)):
        out.setdefault(w.dialect_of.get(i, NATIVE), []).append(i)
    return {k: np.array(v, dtype=int) for k, v in sorted(out.items())}


def report(w: Window, xid_dialects: Sequence[str] = (NATIVE, DCGM)) -> dict[str, Any]:
    """The coverage of every detector on every node group, as JSON-ready data."""
    out: dict[str, Any] = {"groups": []}
    blind = capsight.blind(w)
    for dialect, nodes in groups(w).items():
        xid_read = any(d in dialect for d in xid_dialects)
        gens = sorted({w.dcgm_generation_of[i] for i in nodes.tolist()
                       if i in w.dcgm_generation_of}, key=catalog_dcgm.GENERATIONS.index)  # fmt: skip
        # the CSV lines to add, in the group's names (its newest generation: mid-upgrade)
        gen = gens[-1] if gens else catalog_dcgm.DEFAULT
        dets = []
        for det, needs in NEEDS.items():
            amd_only = AMD in dialect.split("+") and DCGM not in dialect
            have = [n for n in needs if _has(w, n, nodes, xid_read, dialect)
                    and not (amd_only and det in AMD_NO_SIGNAL)]  # fmt: skip
            lack = [n for n in needs if n not in have]
            state = ("cannot" if not have or any(n.essential for n in lack)
                     else "partial" if lack else "full")  # fmt: skip
            notes = [v for k, v in REDUCED.items() if DCGM in dialect and any(
                n.what == k for n in have)]  # fmt: skip
            if det in CAP_LIKE and blind[nodes].all():
                notes.append(NOTIFY_ONLY)
            if det == "infiniband" and NODE_EXPORTER in dialect:
                notes += _ib_counters_unserved(w, nodes)
            if det == "xid" and DCGM in dialect:
                notes.append("dcgm's XID field is the last code: a repeat of it is invisible")
            if AMD in dialect.split("+") and det in AMD_REDUCED and have:
                notes.append(AMD_REDUCED[det])
            dets.append({
                "detector": det, "state": state,
                "judges": [n.role for n in have],
                "cannot": [{"input": n.role, "why": "no data on these nodes",
                            "enable": AMD_NO_SIGNAL.get(det, "") if amd_only
                            and det in AMD_NO_SIGNAL else enable(n, dialect, gen)}
                           for n in lack],
                "notes": notes,
            })  # fmt: skip
        group: dict[str, Any] = {"dialect": dialect, "nodes": [w.nodes[i] for i in nodes],
                                 "detectors": dets}  # fmt: skip
        if gens:
            group["dcgm_generations"] = gens
        out["groups"].append(group)
    return out


def text(rep: Mapping[str, Any]) -> str:
    """The report as an SRE reads it in a terminal."""
    lines = []
    for g in rep["groups"]:
        names = g["nodes"]
        span = f"{names[0]} .. {names[-1]}" if len(names) > 2 else ", ".join(names)
        gens = g.get("dcgm_generations")
        naming = f" [dcgm-exporter naming {', '.join(gens)}]" if gens else ""
        lines.append(f"== {g['dialect']}{naming}: {len(names)} node(s) ({span})")
        for d in g["detectors"]:
            judges = ", ".join(d["judges"]) or "nothing"
            lines.append(f"  {d['detector']:<11} {d['state']:<8} judges: {judges}")
            for note in d["notes"]:
                lines.append(f"  {'':<20} note: {note}")
            for miss in d["cannot"]:
                lines.append(f"  {'':<20} cannot: {miss['input']} ({miss['why']})")
                for ln in miss["enable"].splitlines():
                    lines.append(f"  {'':<22} {ln}")
    return "\n".join(lines) + "\n"


def annotate(found: Sequence[Finding], w: Window) -> list[Finding]:
    """Findings on nodes read through a reduced dialect say so (evidence and summary); an
    uncorrectable ECC finding on a GPU with per-block RAS data names the blocks (umc: HBM)."""
    found = _blocks(found, w)
    if not any(DCGM in d or AMD in d for d in w.dialect_of.values()):
        return list(found)
    foreign = {w.nodes[i] for i, d in w.dialect_of.items() if DCGM in d}
    amd_nodes = {w.nodes[i] for i, d in w.dialect_of.items() if AMD in d.split("+")}
    out = []
    for f in found:
        note = ""
        if f.node in amd_nodes and f.kind == "throttling":
            note = AMD_REDUCED["throttling"]
        elif f.node in foreign and f.kind.startswith("nvlink"):
            note = REDUCED[c.NVLINK_ERRORS.name]
        elif f.node in foreign and f.kind == "throttling":
            note = REDUCED[c.GPU_THROTTLE.name]
        elif f.node in foreign and f.kind.startswith("xid"):
            note = "dcgm-exporter's last-XID gauge: repeats of one code are invisible"
        if note:
            f = replace(f, evidence={**f.evidence, "reduced_signal": 1.0},
                        summary=f"{f.summary} [{note}]" if f.summary else f"[{note}]")  # fmt: skip
        out.append(f)
    return out


def _blocks(found: Sequence[Finding], w: Window) -> list[Finding]:
    """``ecc_uncorrectable`` findings on GPUs whose per-block RAS counters rose name the blocks."""
    from analyzer.detectors.ras import BLOCK_NAMES, blocks_that_rose

    rose = None
    out = []
    for f in found:
        if f.kind == "ecc_uncorrectable" and f.subject.startswith("gpu="):
            if rose is None:
                rose = blocks_that_rose(w, "uncorrectable")
                if rose is None:
                    return list(found)
            n, g = w.nodes.index(f.node) if f.node in w.nodes else -1, int(f.subject[4:])
            if n >= 0 and g < rose.shape[1]:
                names = [BLOCK_NAMES.get(b, b) for i, b in enumerate(c.RAS_BLOCKS)
                         if rose[n, g, i] > 0]  # fmt: skip
                if names:
                    f = replace(f, summary=f"{f.summary} [in {', '.join(names)}]")
        out.append(f)
    return out
