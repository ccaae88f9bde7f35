"""An AMD node as AMD's ROCm Device Metrics Exporter (DME) serves it (``--telemetry amd-dme``).

Sits between a :class:`~simulator.frame.Frame` and the text a scrape of DME returns: the field
names of :mod:`exporter.catalog_amd` (the lower-cased ``GPUMetricField`` enum, behind an
optional prefix), every field typed gauge (counters included), the GPU named by ``hostname`` +
``serial_number`` + ``gpu_id`` with ``gpu_uuid``, ``card_model``, the partition labels and
``deployment_mode`` beside them, and ``job_id`` on an allocated GPU (DME's Slurm prolog). Units
are DME's: W, Celsius, %, MHz, GT/s, KB for XGMI. Semantics kept as DME has them:

- ``gpu_health`` goes 0 on the first uncorrectable error (DME's default) until a reset;
- ECC per block and type (``gpu_ecc_{correct,uncorrect,deferred}_<block>``) and the totals;
- XGMI traffic per ``link_index`` (one per peer GPU, the own index 0), no link state;
- throttling as violation residency per cause: the share of the last interval (percentage)
  and an accumulated counter (milliseconds held here); PPT is the power cap;
- ``gpu_afid_errors{afid_index,severity}``: the AFIDs of the GPU's *last* RAS event only (two
  events between two scrapes show the second);
- a lost GPU's series are absent (its siblings' stay);
- a compute-partitioned GPU (CPX/DPX/QPX: ``layout``) is one ``gpu_id`` per partition, numbered
  consecutively, each with its ``gpu_partition_id`` and the parent's ``serial_number``; the
  physical sensors (temperatures, clocks, PCIe, violation residency, activity: amdsmi has no
  per-partition activity), ECC/RAS, XGMI and AFIDs are served on partition 0 only, and the
  other partitions report power 0 (DME's metricslist.md: "applicable for primary partition").

State that outlives a scrape (residency counters, the last RAS event) is kept per node by
:class:`DmeNode`; the render itself is a pure function of it and the frame.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import Any

import numpy as np

from exporter import catalog as c
from exporter import catalog_amd as dme
from simulator.amd import RasEvent
from simulator.partitions import Layout
from simulator.state import CORRECTED, UNCORRECTED, VOLATILE
from simulator.topology import gpu_uuid

MODEL = "AMD Instinct MI300X OAM"
GTS = {1: 2.5, 2: 5.0, 3: 8.0, 4: 16.0, 5: 32.0, 6: 64.0}  # PCIe generation -> GT/s
# violation cause -> the throttle reason (exporter.catalog.THROTTLE_REASONS) whose hold it is;
# hbm_thermal stays 0 (the model's thermal fault heats the socket)
CAUSE_REASON = {"ppt": "sw_power_cap", "socket_thermal": "sw_thermal_slowdown",
                "vr_thermal": "hw_slowdown", "processor_hot": "hw_thermal_slowdown",
                "hbm_thermal": ""}  # fmt: skip
_REASON_IX = {r: i for i, r in enumerate(c.THROTTLE_REASONS)}
_WORD = {"correctable": "correct", "uncorrectable": "uncorrect", "deferred": "deferred"}


def _labels(d: Mapping[str, Any]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in sorted(d.items())) + "}"


class DmeNode:
    """One AMD node's DME: ``fields`` (unprefixed names) limits what it serves (None: all)."""

    def __init__(self, node: str, index: int, prefix: str = "",
                 fields: Collection[str] | None = None,
                 layout: Layout | None = None) -> None:  # fmt: skip
        self.node, self.index, self.prefix = node, index, prefix
        self.layout = layout  # the node's compute partitions (simulator.partitions)
        self.fields = None if fields is None else frozenset(fields)
        self.residency_ms = np.zeros((8, len(CAUSE_REASON)))
        self.last_afids: dict[int, tuple[tuple[int, str], ...]] = {}  # gpu -> last event
        self._last_event_t: dict[int, float] = {}
        self._t: float | None = None

    def partitions(self, g: int) -> tuple[str, int, int]:
        """GPU ``g``'s compute partition mode, partitions, and its first partition's gpu_id."""
        parts = [p for p in (self.layout or ()) if p is not None and p.amd]
        if not parts:
            return "spx", 1, g
        per = [p.count if p is not None else 1 for p in (self.layout or ())]
        part = (self.layout or ())[g]
        return (part.profile if part else "spx"), per[g], sum(per[:g])

    def ident(self, g: int, part: int = 0) -> dict[str, Any]:
        mode, _, first = self.partitions(g)
        return {"card_model": MODEL, "deployment_mode": "baremetal",
                "gpu_compute_partition_type": mode, "gpu_id": first + part,
                "gpu_memory_partition_type": "nps1", "gpu_partition_id": part,
                "gpu_uuid": gpu_uuid(self.node, g).removeprefix("GPU-"),
                "hostname": self.node, "serial_number": f"SIM{self.index:06d}-{g:04d}"}  # fmt: skip

    def observe(self, events: Sequence[RasEvent]) -> None:
        """RAS events of this node: each new one replaces its GPU's last-event AFID list (events
        at one instant on one GPU are one record's AFIDs)."""
        for e in events:
            if e.node != self.index:
                continue
            prev = self.last_afids.get(e.gpu, ()) if self._last_event_t.get(e.gpu) == e.t else ()
            self.last_afids[e.gpu] = (*prev, (e.afid, e.severity))
            self._last_event_t[e.gpu] = e.t

    def families(self, frame: Any, jobs: Mapping[str, str] | None = None,
                 events: Sequence[RasEvent] | None = None) -> dict[str, list[str]]:  # fmt: skip
        """Field name (prefixed) -> its series lines (``name{labels} value``) at ``frame``;
        ``events``: the RAS events since the last call (None: the frame's own, when every
        frame is rendered)."""
        self.observe(getattr(frame, "ras_events", ()) if events is None else events)
        i, m = self.index, frame.metrics
        dt = 0.0 if self._t is None else max(0.0, frame.t - self._t)
        self._t = frame.t
        up = m[c.GPU_UP.name][i]
        throttle = m[c.GPU_THROTTLE.name][i]
        held = np.zeros(self.residency_ms.shape)
        for k, reason in enumerate(CAUSE_REASON.values()):
            if reason:
                held[:, k] = np.nan_to_num(throttle[:, _REASON_IX[reason]]) > 0.5
        self.residency_ms += held * dt * 1000.0
        out: dict[str, list[str]] = {}
        for g in range(up.shape[0]):
            if up[g] != 1.0:  # lost (0) or node down (NaN): DME serves nothing for it
                continue
            job = (jobs or {}).get(str(g))
            rows = self._gpu(m, i, g, held[g])
            for part in range(self.partitions(g)[1]):
                base = self.ident(g, part)
                if job:
                    base[dme.JOB_ID] = job
                for name, extra, v in rows if part == 0 else _secondary(rows):
                    if self.fields is not None and name not in self.fields:
                        continue
                    out.setdefault(self.prefix + name, []).append(
                        f"{self.prefix}{name}{_labels({**base, **extra})} {v:.10g}"
                    )
        return out

    def _gpu(self, m: Mapping[str, np.ndarray], i: int, g: int,
             held: np.ndarray) -> list[tuple[str, dict[str, Any], float]]:  # fmt: skip
        def v(metric: c.MetricDef) -> float:
            return float(m[metric.name][i, g])

        ecc = m[c.GPU_ECC_ERRORS.name][i, g]
        ras = m[c.GPU_RAS_ERRORS.name][i, g]
        rows: list[tuple[str, dict[str, Any], float]] = [
            ("gpu_junction_temperature", {}, v(c.GPU_TEMPERATURE)),
            ("gpu_memory_temperature", {}, v(c.GPU_MEMORY_TEMPERATURE)),
            ("gpu_package_power", {}, round(v(c.GPU_POWER))),
            ("gpu_power_usage", {}, round(v(c.GPU_POWER))),
            ("gpu_health", {}, 0.0 if ecc[UNCORRECTED, VOLATILE] > 0 else 1.0),
            ("gpu_gfx_activity", {}, round(100 * v(c.GPU_UTILIZATION))),
            ("gpu_clock", {"clock_index": 0, dme.CLOCK_TYPE: "system"},
             round(v(c.GPU_SM_CLOCK) / 1e6)),
            ("gpu_clock", {"clock_index": 1, dme.CLOCK_TYPE: "memory"},
             round(v(c.GPU_MEMORY_CLOCK) / 1e6)),
            ("pcie_speed", {}, GTS.get(int(v(c.GPU_PCIE_GENERATION)), 32.0)),
            ("pcie_max_speed", {}, GTS.get(int(v(c.GPU_PCIE_GENERATION_MAX)), 32.0)),
            (dme.ECC_TOTALS["corrected"], {}, float(ecc[CORRECTED, VOLATILE])),
            (dme.ECC_TOTALS["uncorrected"], {}, float(ecc[UNCORRECTED, VOLATILE])),
            (dme.DEFERRED_TOTAL, {}, float(ras[:, 2].sum())),
        ]  # fmt: skip
        for b, block in enumerate(c.RAS_BLOCKS):
            for e, error_type in enumerate(c.RAS_ERROR_TYPES):
                rows.append((f"gpu_ecc_{_WORD[error_type]}_{block}", {}, float(ras[b, e])))
        for metric_name, f in dme.XGMI.items():
            kb = m[metric_name][i, g] / dme.XGMI_KB
            rows += [(f, {dme.LINK_INDEX: k}, float(np.floor(x))) for k, x in enumerate(kb)]
        for k, cause in enumerate(CAUSE_REASON):
            acc, pct = dme.violation_fields(cause)
            rows += [(acc, {}, float(self.residency_ms[g, k])), (pct, {}, 100.0 * held[k])]
        for ix, (afid, severity) in enumerate(self.last_afids.get(g, ())):
            rows.append((dme.AFID_ERRORS, {dme.AFID_INDEX: ix, dme.AFID_SEVERITY: severity},
                         float(afid)))  # fmt: skip
        return rows

    def render(self, frame: Any, jobs: Mapping[str, str] | None = None,
               events: Sequence[RasEvent] | None = None) -> bytes:  # fmt: skip
        """The text exposition of one scrape (every family a gauge, as DME types them)."""
        lines = []
        for name, series in self.families(frame, jobs, events).items():
            field = name.removeprefix(self.prefix)
            lines += [f"# HELP {name} DME field {field.upper()}", f"# TYPE {name} gauge", *series]
        return ("\n".join(lines) + "\n").encode()


# what a partition other than 0 serves: power as 0 (no per-XCD sensor) and the GPU's health
_SECONDARY_ZERO = frozenset({"gpu_package_power", "gpu_power_usage"})
_SECONDARY_SAME = frozenset({"gpu_health"})


def _secondary(rows: list[tuple[str, dict[str, Any], float]]
               ) -> list[tuple[str, dict[str, Any], float]]:  # fmt: skip
    return [(n, e, 0.0 if n in _SECONDARY_ZERO else v) for n, e, v in rows
            if n in _SECONDARY_ZERO | _SECONDARY_SAME]  # fmt: skip
