"""The simulator's frames as scraped history: OpenMetrics for ``promtool tsdb create-blocks-from``.

:class:`ScrapeRecorder` receives each frame of a fleet (in virtual time) as Prometheus would
have scraped it at that step and writes, per catalogue family the analyzer reads
(:data:`analyzer.sources.queries.QUERIES`), every series with the exporter's label set
(``node``, ``gpu``, ``uuid``, ``link``, ``device``/``port``, ``counter``, ...) and one sample
per scrape. What a scrape did not return is absent: a node that is down (its ``gpu_up`` is
NaN), a missed scrape of a node (``missed`` rows), a NaN cell. XID counters come from the
fleet's kernel-log events (a series is born at its first XID and never drops), allocation info
from the fleet's jobs (as the Slurm prolog's map would say), ``gpu_info`` from the node's model.

The sums the exporter serves beside the large families (per GPU ``gpu_nvlink_errors_total``,
``gpu_nvlink_links_down``; per port ``infiniband_port_errors_total``: the analyzer's gates) are
derived from the frame's arrays the same way. ``part=(lo, hi)`` records only the nodes ``lo..hi-1``
of the fleet: a fleet too large for one promtool run is backfilled in node ranges.

Families the analyzer never reads (and IB counters it never asks for) are left out: they
change no answer and only make the backfill bigger. Each family is spooled to its own file
step by step (memory stays flat over long runs) and the files are joined at :meth:`write`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.sources.queries import QUERIES
from exporter import catalog as c
from gpuwarden.lab.spool import FamilySpool
from simulator.state import IB_HW_COUNTERS

_SPECIAL = (
    c.GPU_XID_ERRORS,
    c.GPU_ALLOCATION_INFO,
    c.GPU_INFO,
    c.IB_COUNTER,
    c.IB_HW_COUNTER,
    c.GPU_RAS_EVENTS,
)
_AXES: dict[str, tuple[tuple[str, tuple[str, ...]], ...]] = {
    c.GPU_THROTTLE.name: (("reason", tuple(c.THROTTLE_REASONS)),),
    c.GPU_ECC_ERRORS.name: (
        ("error_type", ("corrected", "uncorrected")),
        ("counter_type", ("volatile", "aggregate")),
    ),
    c.NVLINK_ERRORS.name: (("error_type", tuple(c.NVLINK_ERROR_TYPES)),),
    c.GPU_RAS_ERRORS.name: (("block", c.RAS_BLOCKS), ("error_type", c.RAS_ERROR_TYPES)),
    # the frame's (correctable, uncorrectable) rows (simulator.state.FleetState.remapped)
    c.GPU_REMAPPED_ROWS.name: (("kind", ("correctable", "uncorrectable")),),
}
_IB_USED = frozenset(c.IB_ERROR_COUNTERS)  # the counters the analyzer reads
_HW = frozenset(IB_HW_COUNTERS)


def _labels(d: Mapping[str, str]) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in d.items()) + "}"


def type_line(m: c.MetricDef) -> str:
    base = m.name.removesuffix("_total") if m.type == "counter" else m.name
    return f"# TYPE {base} {m.type}\n"


def _gates(name: str, a: np.ndarray) -> list[tuple[str, np.ndarray]]:
    """The per-GPU sums the exporter serves beside a per-link family (NaN where any link of the
    GPU is NaN: the exporter serves a sum only when every link was read)."""
    if name == c.NVLINK_ERRORS.name:
        return [(c.GPU_NVLINK_ERRORS.name, a.sum(axis=(2, 3)))]
    if name == c.NVLINK_UP.name:
        return [(c.GPU_NVLINK_DOWN.name, np.where(np.isnan(a), np.nan, a < 0.5).sum(axis=2))]
    return []


class ScrapeRecorder(FamilySpool):
    """Frames in, OpenMetrics out. ``epoch`` is added to the frames' virtual times."""

    def __init__(
        self,
        nodes: Sequence[str],
        uuid: Any,
        gpu_names: Sequence[str],
        epoch: float,
        workdir: Path | None = None,
        part: tuple[int, int] | None = None,
        native_gpus: Sequence[bool] | None = None,
    ) -> None:
        lo, hi = part or (0, len(nodes))
        # per fleet node: its GPUs served by gpuwarden's exporter (False: by another exporter,
        # e.g. AMD's DME, which another recorder writes; its NICs stay gpuwarden's)
        self.native = np.ones(hi - lo, dtype=bool) if native_gpus is None else \
            np.asarray(native_gpus, dtype=bool)[lo:hi]  # fmt: skip
        self._ras: dict[tuple[int, int, int, str], float] = {}
        self.rows = slice(lo, hi)  # this recorder's nodes in the fleet's arrays
        self.nodes = tuple(nodes)[self.rows]
        self.uuid = uuid  # (node, gpu) -> uuid
        self.gpu_names = tuple(gpu_names)[self.rows]  # per node, the NVML model name
        self.epoch = epoch
        super().__init__("gpuwarden-om-", workdir)
        self.names = [q.name for q in QUERIES if q.metric not in _SPECIAL]
        self._labels: dict[str, np.ndarray] = {}
        self._xid: dict[tuple[int, int, int], float] = {}
        self.samples = 0
        self.steps = 0

    # ------------------------------------------------------------------ per step
    def push(
        self, frame: Any, jobs: Mapping[Any, Sequence[int]], missed: np.ndarray | None = None
    ) -> None:
        """One scrape of every node at ``frame.t``; ``missed`` (bool per node): no sample."""
        N, lo, rows = len(self.nodes), self.rows.start, self.rows
        up = frame.metrics[c.GPU_UP.name][rows]
        present = ~np.isnan(up.reshape(N, -1)[:, 0])
        if missed is not None:
            present &= ~missed[rows]
        ts = f" {self.epoch + frame.t:.3f}\n"
        nodes_present, present = present, present & self.native  # GPU families: native only
        for name in self.names:
            a = frame.metrics.get(name)
            if a is not None:
                a = a[rows]
                here = nodes_present if "device" in c.by_name(name).labels else present
                self._write(name, self._series(name, a.shape), a, here, ts)
                for gate, value in _gates(name, a):
                    self._write(gate, self._series(gate, value.shape), value, here, ts)
        errors = [a[rows] for k, a in frame.ib_counters.items() if k in _IB_USED]
        if errors:  # the exporter's per-port sum of the error counters
            sums = c.IB_PORT_ERRORS.name
            lab = self._labels.get(sums)
            if lab is None:
                lab = self._labels[sums] = np.array([
                    f'{sums}{{node="{n}",device="mlx5_{p}",port="1"}}'
                    for n in self.nodes for p in range(errors[0].shape[1])
                ])  # fmt: skip
            self._write(sums, lab, np.sum(errors, axis=0), nodes_present, ts)
        for counter, a in frame.ib_counters.items():
            a = a[rows]
            if counter in _IB_USED:
                fam = c.IB_HW_COUNTER if counter in _HW else c.IB_COUNTER
                key = f"{fam.name}:{counter}"
                lab = self._labels.get(key)
                if lab is None:
                    lab = self._labels[key] = np.array(
                        [
                            f'{fam.name}{{node="{n}",device="mlx5_{p}",port="1",counter="{counter}"}}'
                            for n in self.nodes
                            for p in range(a.shape[1])
                        ]
                    )
                self._write(fam.name, lab, a, nodes_present, ts)
        self._ras_events(frame, lo, present, ts)
        events = getattr(frame, "events", None)
        hits = (
            [(e.node, e.gpu, e.xid) for e in events if getattr(e, "counted", True)]
            if events
            else list(frame.xids)
        )
        for n, g, x in hits:
            if not lo <= int(n) < rows.stop:
                continue
            k = (int(n) - lo, int(g), int(x))
            self._xid[k] = self._xid.get(k, 0.0) + 1.0
        xid_lines = [
            c.GPU_XID_ERRORS.name
            + _labels(
                {
                    "node": self.nodes[n],
                    "gpu": str(g),
                    "uuid": self.uuid(self.nodes[n], g),
                    "xid": str(x),
                }
            )
            + f" {v:g}{ts}"
            for (n, g, x), v in sorted(self._xid.items())
            if present[n]
        ]
        self._out(c.GPU_XID_ERRORS.name).write("".join(xid_lines))
        G = up.shape[1] if up.ndim > 1 else 1
        alloc = []
        for job, members in sorted(jobs.items(), key=lambda kv: str(kv[0])):
            for n in (int(x) - lo for x in members):
                if 0 <= n < N and present[n]:
                    node = self.nodes[n]
                    alloc += [
                        c.GPU_ALLOCATION_INFO.name
                        + _labels(
                            {
                                "node": node,
                                "gpu": str(g),
                                "uuid": self.uuid(node, g),
                                "job_id": str(job),
                                "scheduler": "slurm",
                            }
                        )
                        + f" 1{ts}"
                        for g in range(G)
                    ]
        self._out(c.GPU_ALLOCATION_INFO.name).write("".join(alloc))
        info = self._labels.get(c.GPU_INFO.name)
        if info is None:
            info = self._labels[c.GPU_INFO.name] = np.array([
                c.GPU_INFO.name + _labels({"node": n, "gpu": str(g), "uuid": self.uuid(n, g),
                                           "name": self.gpu_names[i]})
                for i, n in enumerate(self.nodes) for g in range(G)
            ])  # fmt: skip
        self._write(c.GPU_INFO.name, info, np.ones((N, G)), present, ts)
        self.samples += len(xid_lines) + len(alloc)
        self.steps += 1

    def _ras_events(self, frame: Any, lo: int, present: np.ndarray, ts: str) -> None:
        """AMD RAS events (CPER records) as the exporter counts them: one counter per (GPU,
        AFID, CPER severity), born at its first event, never losing one."""
        for e in getattr(frame, "ras_events", ()):
            if lo <= int(e.node) < self.rows.stop:
                k = (int(e.node) - lo, int(e.gpu), int(e.afid), str(e.severity))
                self._ras[k] = self._ras.get(k, 0.0) + 1.0
        if not self._ras:
            return
        name = c.GPU_RAS_EVENTS.name
        lines = [name + _labels({"node": self.nodes[n], "gpu": str(g),
                                 "uuid": self.uuid(self.nodes[n], g), "afid": str(a),
                                 "severity": sev}) + f" {v:g}{ts}"
                 for (n, g, a, sev), v in sorted(self._ras.items()) if present[n]]  # fmt: skip
        self._out(name).write("".join(lines))
        self.samples += len(lines)

    def _series(self, name: str, shape: tuple[int, ...]) -> np.ndarray:
        """Label strings for every cell of a frame array of ``shape`` (nodes, gpus, ...)."""
        lab = self._labels.get(name)
        if lab is not None and lab.size == int(np.prod(shape)):
            return lab
        m = c.by_name(name)
        out = []
        for idx in np.ndindex(*shape):
            n = self.nodes[idx[0]]
            d: dict[str, str] = {"node": n}
            if "device" in m.labels:
                d |= {"device": f"mlx5_{idx[1]}", "port": "1"}
            else:
                d |= {"gpu": str(idx[1]), "uuid": self.uuid(n, idx[1])}
                rest = list(idx[2:])
                if "link" in m.labels:
                    d["link"] = str(rest.pop(0))
                for label, values in _AXES.get(name, ()):
                    d[label] = values[rest.pop(0)]
            out.append(name + _labels(d))
        lab = self._labels[name] = np.array(out)
        return lab

    def _write(self, family: str, labels: np.ndarray, a: np.ndarray, present: np.ndarray,
               ts: str) -> None:  # fmt: skip
        a = np.asarray(a, dtype=float)
        ok = ~np.isnan(a) & present.reshape((-1,) + (1,) * (a.ndim - 1))
        flat, good = a.reshape(-1), np.flatnonzero(ok.reshape(-1))
        lab = labels.reshape(-1)
        self._out(family).write("".join(f"{lab[i]} {flat[i]:.10g}{ts}" for i in good))
        self.samples += len(good)

    # ------------------------------------------------------------------ output
    def write(self, path: Path) -> Path:
        """Join the spooled families into one OpenMetrics file at ``path``."""
        return self._join(path, lambda family: type_line(c.by_name(family)))
