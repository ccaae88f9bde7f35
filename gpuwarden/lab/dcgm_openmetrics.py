"""The simulator's frames as a dcgm-exporter + node_exporter fleet would have been scraped.

The ``--telemetry dcgm-exporter`` twin of :class:`~gpuwarden.lab.openmetrics.ScrapeRecorder`:
the same frames, written as OpenMetrics for ``promtool tsdb create-blocks-from`` in the names,
labels and units those two exporters serve, with no ``gpuwarden_*`` series and no ``node``
label anywhere:

- every catalogue family that maps to a dcgm-exporter field (``exporter.catalog`` ``dcgm``
  entries: the table ``--compat dcgm`` renders from) and that the analyzer can read (with
  ``fields``: only those, e.g. default-counters.csv's for ``--telemetry dcgm-exporter:defaults``), in
  dcgm's unit (MHz, %, per-GPU NVLink totals), labelled ``gpu``, ``UUID``, ``device``
  (``nvidiaN``), ``modelName``, ``Hostname``, ``DCGM_FI_DRIVER_VERSION``, plus ``hpc_job`` on
  the GPUs of a job (dcgm-exporter's HPC job mapping), and ``instance``/``job`` as Prometheus
  adds them;
- values change only every ``collect`` seconds (dcgm-exporter collects every 30 s by default;
  a faster scrape repeats the last value);
- ``DCGM_FI_DEV_XID_ERRORS``: the last XID code per GPU (0 until the first), ``err_code``
  label as dcgm-exporter prints it; a repeat of the same code changes nothing;
- a GPU that fell off the bus (``gpu_up`` 0) is simply absent, as dcgm-exporter drops it;
- node_exporter's ``node_infiniband_*`` state, rate and error counters, labelled
  ``device``/``port`` and ``instance="<node>:9100"``;
- with ``clock_events`` (a field dcgm-exporter ships commented out): its
  ``DCGM_EXP_CLOCK_EVENTS_COUNT{clock_event=...}``, how often each reason was reported within
  its 5-minute window, a series only for reasons reported;
- with ``clock_reasons`` (a name: ``DCGM_FI_DEV_CLOCK_THROTTLE_REASONS`` or DCGM's newer
  ``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``): the clock-event reasons bitmask of each GPU (NVML's
  bits, ``exporter.catalog.THROTTLE_REASONS``), as collected;
- with ``violations``: ``DCGM_FI_DEV_POWER_VIOLATION`` / ``DCGM_FI_DEV_THERMAL_VIOLATION``,
  cumulative nanoseconds the GPU spent held down by a power reason (power cap, power brake) /
  a thermal one (HW or SW thermal slowdown), as collected.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.sources.queries import QUERIES
from exporter import catalog as c
from exporter import catalog_dcgm
from gpuwarden.lab.openmetrics import _AXES
from gpuwarden.lab.spool import FamilySpool

DRIVER = "550.90.07"
CLOCK_EVENTS_WINDOW = 300.0  # dcgm-exporter's clock-events-count window (default 300000 ms)
THROTTLE = tuple(c.THROTTLE_REASONS)
_EVENT_OF = {v: k for k, v in c.DCGM_CLOCK_EVENT_REASONS.items()}
VIOLATION_REASONS = {  # DCGM's violation counters and the clock-event reasons behind each
    c.dcgm_violation("power"): ("sw_power_cap", "hw_power_brake_slowdown"),
    c.dcgm_violation("thermal"): ("sw_thermal_slowdown", "hw_thermal_slowdown"),
}
_IB = {c.IB_PORT_STATE.name: c.NODE_IB_STATE, c.IB_PORT_RATE.name: c.NODE_IB_RATE}


def _fields() -> list[tuple[c.MetricDef, c.DcgmField]]:
    """The (native family, dcgm field) pairs a dcgm-exporter fleet serves that the analyzer
    reads: single-valued fields, or per-GPU sums over NVLink links."""
    out = []
    for q in QUERIES:
        for f in q.metric.dcgm:
            if f.sum_over in ((), ("link",)):
                out.append((q.metric, f))
    return out


def field_values(metric: c.MetricDef, f: c.DcgmField, a: np.ndarray) -> np.ndarray:
    """A frame array of ``metric`` (nodes, gpus, [links], [label axes]) -> dcgm's (nodes, gpus)
    values of ``f``: the matched label values picked, links summed, scaled into dcgm's unit."""
    axes = _AXES.get(metric.name, ())
    match = dict(f.match)
    link = 2 if "link" in metric.labels else None
    first_axis = 3 if link is not None else 2
    idx: list[Any] = [slice(None)] * a.ndim
    for i, (label, values) in enumerate(axes):
        if label in match:
            idx[first_axis + i] = values.index(match[label])
    v = a[tuple(idx)]
    if link is not None and "link" in f.sum_over:
        v = v.sum(axis=2)
    while v.ndim > 2:  # label axes the field does not pick: dcgm sums them (none today)
        v = v.sum(axis=2)
    return v * f.scale


class DcgmScrapeRecorder(FamilySpool):
    """Frames in, dcgm-exporter + node_exporter OpenMetrics out; ``part=(lo, hi)``: only
    those nodes (a mixed fleet records the rest with the native recorder)."""

    def __init__(
        self,
        nodes: Sequence[str],
        uuid: Any,
        gpu_names: Sequence[str],
        epoch: float,
        workdir: Path | None = None,
        part: tuple[int, int] | None = None,
        collect: float = 30.0,
        hostname_label: str = "Hostname",
        clock_events: bool = False,
        generation: str = catalog_dcgm.DEFAULT,
        fields: Collection[str] | None = None,
        clock_reasons: str = "",
        violations: bool = False,
    ) -> None:
        lo, hi = part or (0, len(nodes))
        self.rows = slice(lo, hi)
        self.nodes = tuple(nodes)[self.rows]
        self.uuid, self.gpu_names = uuid, tuple(gpu_names)[self.rows]
        self.epoch, self.collect, self.host = epoch, collect, hostname_label
        super().__init__("gpuwarden-dcgm-om-", workdir)
        # ``fields`` (4.8 names): only those (simulator.telemetry.dcgm_fields); None: all
        self.fields = [(m, f) for m, f in _fields() if fields is None or f.name in fields]
        self._types: dict[str, str] = {}
        self._held: dict[str, np.ndarray] = {}  # last collected value per field
        self._tick = -1  # the collect interval the held values are from
        self._last_xid: dict[tuple[int, int], int] = {}
        self.clock_events = clock_events
        # dcgm-exporter's naming generation (exporter.catalog_dcgm, as --compat dcgm:<gen>)
        self.generation = generation
        self._renames = catalog_dcgm.RENAMES[generation]
        self._events: deque[tuple[float, np.ndarray]] = deque()  # (t, reasons held) per step
        self.clock_reasons, self.violations = clock_reasons, violations
        self._violation_ns: dict[str, np.ndarray] = {}  # cumulative, per field
        self._last_t: float | None = None
        self.samples = 0
        self.steps = 0

    def _gpu_labels(self, n: int, g: int, job: str) -> str:
        node = self.nodes[n]
        lab = (f'gpu="{g}",UUID="{self.uuid(node, g)}",device="nvidia{g}",'
               f'modelName="{self.gpu_names[n]}",{self.host}="{node}",'
               f'{catalog_dcgm.DRIVER_LABEL[self.generation]}="{DRIVER}",instance="{node}:9400",job="dcgm-exporter"')  # fmt: skip
        return lab + (f',hpc_job="{job}"' if job else "")

    def push(
        self, frame: Any, jobs: Mapping[Any, Sequence[int]], missed: np.ndarray | None = None
    ) -> None:
        """One scrape of every node at ``frame.t`` (``missed`` rows: no sample)."""
        N, lo, rows = len(self.nodes), self.rows.start, self.rows
        up = frame.metrics[c.GPU_UP.name][rows]
        present = ~np.isnan(up.reshape(N, -1)[:, 0])
        if missed is not None:
            present &= ~missed[rows]
        gpu_ok = present[:, None] & (np.nan_to_num(up, nan=0.0) > 0.5)  # dcgm drops lost GPUs
        ts = f" {self.epoch + frame.t:.3f}\n"
        tick = int(frame.t // self.collect)
        fresh = tick != self._tick
        self._tick = tick
        job_of = {int(x) - lo: str(j) for j, members in jobs.items() for x in members}
        G = up.shape[1]
        labels = [[self._gpu_labels(n, g, job_of.get(n, "")) for g in range(G)] for n in range(N)]
        for metric, f in self.fields:
            a = frame.metrics.get(metric.name)
            if a is None:
                continue
            if fresh or f.name not in self._held:
                self._held[f.name] = field_values(metric, f, np.asarray(a[rows], dtype=float))
            name = catalog_dcgm.name_in(self.generation, f.name)
            if name is None:
                continue
            r = self._renames.get(f.name)
            v = self._held[f.name] * (r.factor if r else 1.0)
            self._types[name] = f.type
            integer = f.integer if r is None or r.integer is None else r.integer
            fmt = "{:.0f}" if integer else "{:.6g}"
            out = [f"{name}{{{labels[n][g]}}} {fmt.format(v[n, g])}{ts}"
                   for n, g in zip(*np.nonzero(gpu_ok & ~np.isnan(v)), strict=True)]  # fmt: skip
            self._emit(name, out)
        self._xids(frame, lo, N, G, gpu_ok, labels, ts)
        if self.clock_events:
            self._clock_events(frame, rows, gpu_ok, labels, ts)
        if self.clock_reasons or self.violations:
            self._reasons(frame, rows, gpu_ok, labels, ts, fresh)
        self._ib(frame, rows, present, ts)
        self.steps += 1

    def _xids(self, frame: Any, lo: int, N: int, G: int, gpu_ok: np.ndarray,
              labels: list[list[str]], ts: str) -> None:  # fmt: skip
        events = getattr(frame, "events", None)
        hits = ([(e.node, e.gpu, e.xid) for e in events if getattr(e, "counted", True)]
                if events else list(frame.xids))  # fmt: skip
        for n, g, x in hits:
            if lo <= int(n) < lo + N:
                self._last_xid[(int(n) - lo, int(g))] = int(x)
        name = catalog_dcgm.name_in(self.generation, c.DCGM_LAST_XID.name) or c.DCGM_LAST_XID.name
        self._types[name] = "gauge"
        out = []
        for n in range(N):
            for g in range(G):
                if gpu_ok[n, g]:
                    x = self._last_xid.get((n, g), 0)
                    out.append(f'{name}{{{labels[n][g]},err_code="{x}"}} {x}{ts}')
        self._emit(name, out)

    def _clock_events(self, frame: Any, rows: slice, gpu_ok: np.ndarray,
                      labels: list[list[str]], ts: str) -> None:  # fmt: skip
        a = frame.metrics.get(c.GPU_THROTTLE.name)
        if a is None:
            return
        self._events.append((frame.t, np.nan_to_num(np.asarray(a[rows], dtype=float)) > 0.5))
        while self._events and self._events[0][0] <= frame.t - CLOCK_EVENTS_WINDOW:
            self._events.popleft()
        counts = np.sum([e for _, e in self._events], axis=0)
        name = c.DCGM_CLOCK_EVENTS_COUNT.name
        self._types[name] = "gauge"
        out = []
        for n, g, r in zip(*np.nonzero(counts * gpu_ok[:, :, None]), strict=True):
            ev = _EVENT_OF[THROTTLE[r]]
            out.append(f'{name}{{{labels[n][g]},{c.DCGM_CLOCK_EVENT_LABEL}="{ev}",'
                       f'window_size_in_ms="{int(CLOCK_EVENTS_WINDOW * 1000)}"}} '
                       f"{int(counts[n, g, r])}{ts}")  # fmt: skip
        self._emit(name, out)

    def _reasons(self, frame: Any, rows: slice, gpu_ok: np.ndarray, labels: list[list[str]],
                 ts: str, fresh: bool) -> None:  # fmt: skip
        a = frame.metrics.get(c.GPU_THROTTLE.name)
        if a is None:
            return
        held = np.nan_to_num(np.asarray(a[rows], dtype=float)) > 0.5  # (N, G, reasons)
        dt = 0.0 if self._last_t is None else frame.t - self._last_t
        self._last_t = frame.t
        fields: dict[str, np.ndarray] = {}
        if self.clock_reasons:
            bits = np.array([c.THROTTLE_REASONS[r] for r in THROTTLE])
            fields[self.clock_reasons] = (held * bits).sum(axis=-1)
        if self.violations:
            for name, reasons in VIOLATION_REASONS.items():
                on = held[..., [THROTTLE.index(r) for r in reasons]].any(axis=-1)
                acc = self._violation_ns.setdefault(name, np.zeros(on.shape))
                acc += on * dt * 1e9
                fields[name] = acc
        for name, v in fields.items():
            if fresh or name not in self._held:
                self._held[name] = np.array(v, dtype=float)
            self._types[name] = "counter" if name in VIOLATION_REASONS else "gauge"
            out = [f"{name}{{{labels[n][g]}}} {self._held[name][n, g]:.0f}{ts}"
                   for n, g in zip(*np.nonzero(gpu_ok), strict=True)]  # fmt: skip
            self._emit(name, out)

    def _ib(self, frame: Any, rows: slice, present: np.ndarray, ts: str) -> None:
        def port(n: int, p: int) -> str:
            return f'device="mlx5_{p}",port="1",instance="{self.nodes[n]}:9100",job="node"'

        series = [(_IB[k], a) for k, a in frame.metrics.items() if k in _IB]
        series += [(c.NODE_IB_ERRORS[k], a) for k, a in frame.ib_counters.items()
                   if k in c.NODE_IB_ERRORS]  # fmt: skip
        for name, a in series:
            a = np.asarray(a[rows], dtype=float)
            self._types[name] = "counter" if name.endswith("_total") else "gauge"
            out = [f"{name}{{{port(n, p)}}} {a[n, p]:.10g}{ts}"
                   for n, p in zip(*np.nonzero(present[:, None] & ~np.isnan(a)), strict=True)]  # fmt: skip
            self._emit(name, out)

    def _emit(self, family: str, lines: list[str]) -> None:
        self._out(family).write("".join(lines))
        self.samples += len(lines)

    def write(self, path: Path) -> Path:
        return self._join(path, self._type_line)

    def _type_line(self, family: str) -> str:
        t = self._types.get(family, "gauge")
        base = family.removesuffix("_total") if t == "counter" else family
        # OpenMetrics: a counter's samples end in _total; dcgm's counters do not, so
        # promtool gets them as the gauges Prometheus stores them as anyway
        if t == "counter" and not family.endswith("_total"):
            t, base = "gauge", family
        return f"# TYPE {base} {t}\n"
