"""The fleet on a clock: virtual time from wall time, per-node exporter views, render cache.

Sits between :class:`~simulator.fleet.Fleet` (virtual time) and the HTTP server. Each
node gets, on its first scrape, a :class:`~simulator.node_view.NodeView` and the *real*
exporter collection loop (``exporter.assemble.collectors_for`` + ``CollectionLoop``); the
collectors live as long as the simulator, so their Monotonic counters and XID counts persist.
A node's body is rendered at most once per model step. The clock is injected.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter import catalog as c
from exporter.assemble import collectors_for
from exporter.collection import CollectionLoop
from exporter.collectors.base import Collector
from exporter.collectors.gpu import GpuCollector
from exporter.collectors.jobs import JobsCollector
from exporter.collectors.steps import StepsCollector
from exporter.collectors.storage import StorageCollector
from exporter.sources.systemd_units import FakeUnits
from simulator import nvl72
from simulator.dme import DmeNode
from simulator.faults import Fault, FaultError
from simulator.fleet import Fleet
from simulator.node_view import DRIVER, NodeView
from simulator.nvml_fake import FakeNvml
from simulator.storage import SimStorage
from simulator.telemetry import TELEMETRIES, as_dcgm_exporter, dcgm_fields, is_dcgm

INJECT_KEYS = {"node", "kind", "target", "parameters", "duration", "onset"}


class NodeDown(Exception):
    """The node is rebooting: a real exporter there would not answer."""


@dataclass
class _Served:
    view: NodeView
    loop: CollectionLoop
    storage: SimStorage
    cols: list[Collector]
    units: FakeUnits | None = None  # an NVL72 tray's systemd units (IMEX)
    dme: DmeNode | None = None  # an AMD node: DME serves its GPUs (simulator.dme)
    ras_seen: int = 0  # the fleet's RAS events this node's DME has observed
    steps: int = -1  # model step the body was rendered at
    t: float = -math.inf  # model time the body was rendered at
    wall: float = -math.inf  # wall time it was rendered at
    body: bytes = b""


class Simulator:
    """``fleet`` on a clock: virtual time = (clock - epoch) x ``time_scale``, stepped on a grid of
    ``tick_s`` wall seconds. Every grid point is stepped, in order, whoever asks, so workers
    that share seed, scenario, epoch and injections hold the same fleet (``--workers``);
    ``shard=(i, k)`` serves the nodes whose index is i modulo k."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        dcgm: bool = False,
        time_scale: float = 1.0,
        tick_s: float = 1.0,
        clock: Callable[[], float] = time.time,
        wall: Callable[[], float] = time.time,
        epoch: float | None = None,
        shard: tuple[int, int] = (0, 1),
        max_stale_s: float = 0.0,
        telemetry: str = "gpuwarden",
        dme_prefix: str = "",
    ) -> None:
        if not time_scale > 0 or not tick_s > 0:
            raise ValueError(f"time_scale and tick must be > 0, got {time_scale}, {tick_s}")
        if telemetry not in TELEMETRIES:
            raise ValueError(f"telemetry {telemetry!r} is not one of {', '.join(TELEMETRIES)}")
        self.telemetry = telemetry  # dcgm-exporter: serve what dcgm-exporter + node_exporter would
        dcgm = dcgm or is_dcgm(telemetry)
        self._dcgm_fields = dcgm_fields(telemetry)
        self.fleet, self.dcgm, self.time_scale, self.tick_s = fleet, dcgm, time_scale, tick_s
        self.shard, self.max_stale_s = shard, max_stale_s
        self.dme_prefix = dme_prefix  # AMD nodes' DME field prefix (amd_ in DME's example)
        self._clock, self._wall = clock, wall
        self._epoch = clock() if epoch is None else epoch
        self._t0 = fleet.t
        self._served: dict[str, _Served] = {}
        self.steps = 0  # grid points stepped so far
        self.frame = fleet.step(fleet.t)

    @property
    def tick_v(self) -> float:
        """One tick in virtual seconds."""
        return self.tick_s * self.time_scale

    def grid(self, k: int) -> float:
        return self._t0 + k * self.tick_v

    def virtual_now(self) -> float:
        return self._t0 + (self._clock() - self._epoch) * self.time_scale

    def sync(self) -> None:
        """Step every grid point up to now, in order (cheap when none has passed)."""
        due = math.floor((self.virtual_now() - self._t0) / self.tick_v + 1e-9)
        while self.steps < due:
            self.steps += 1
            self.frame = self.fleet.step(self.grid(self.steps))

    def metrics(self, node: str) -> bytes:
        """``node``'s exporter output now; KeyError if unknown (or another worker's),
        NodeDown while it reboots."""
        i = self.fleet.topo.index[node]
        if i % self.shard[1] != self.shard[0]:
            raise KeyError(node)
        self.sync()
        up = self.frame[c.GPU_UP.name][i]
        if up[0] != up[0]:  # NaN: the whole node is unreachable
            raise NodeDown(node)
        served = self._served.get(node) or self._serve(node, i)
        if served.steps != self.steps and self._due(served, i):
            events = self.fleet.node_events.get(i, [])
            served.view.refresh(self.frame, events, self._allocation(i))
            nvl72.apply_faults(served.view.nvml, served.units, self.fleet.faults(),
                               self.fleet.sku_of, i, self.fleet.t)  # fmt: skip
            served.storage.advance(self.fleet.t, self.fleet.faults())
            self._probe_storage(served, node)
            served.body = served.loop.run_once().body
            if is_dcgm(self.telemetry):
                served.body = as_dcgm_exporter(served.body, self._allocation(i),
                                               self._dcgm_fields)  # fmt: skip
            if served.dme is not None:  # an AMD node: its GPUs as DME serves them
                new = self.fleet.ras_events[served.ras_seen :]  # every step's, not the last's
                served.ras_seen = len(self.fleet.ras_events)
                served.body += served.dme.render(self.frame, self._allocation(i), new)
            served.steps, served.t, served.wall = self.steps, self.fleet.t, self._clock()
        return served.body

    def _due(self, served: _Served, i: int) -> bool:
        """Render again? Always, unless ``max_stale_s`` lets a body live that long (a load
        shedder for big fleets); a fault edge on the node always renders at once."""
        if self._clock() - served.wall >= self.max_stale_s:
            return True
        return self.fleet.changed(i, served.t)

    def _allocation(self, i: int) -> dict[str, str]:
        """GPU index -> job id on node ``i`` now, as the Slurm prolog's map would say."""
        jobs = self.fleet.jobs
        jid = int(jobs.job_of[i])
        job = jobs.running.get(jid)
        if jid < 0 or job is None:
            return {}
        return {str(g): str(jid) for g in range(job.gpus)}

    def _serve(self, node: str, i: int) -> _Served:
        view = NodeView(node, i, self.fleet.sku_of[i], layout=self.fleet.layouts.get(i))
        dme = None
        if self.fleet.amd[i]:  # NVML sees no GPU here: the exporter serves the node's NICs
            view.nvml = FakeNvml([], driver_version=DRIVER)
            dme = DmeNode(node, i, self.dme_prefix, layout=self.fleet.layouts.get(i))
        units = nvl72.attach(view.nvml, self.fleet.sku_of, i)  # NVL72 trays: domain, IMEX
        cols = collectors_for(node, view.nvml, view.sysfs, view.kmsg, fabric_units=units)
        gpu = next(x for x in cols if isinstance(x, GpuCollector))
        if dme is None:  # (an AMD node's jobs are DME's job_id label, from its Slurm prolog)
            cols.append(JobsCollector(view.jobs, gpu.identities, node))  # the prolog's job map
        if "steps" in self.fleet.signals:  # the training side's published step times
            cols.append(StepsCollector(view.steps, gpu.identities, node, view.jobs))
        storage = SimStorage(node, i, self.fleet.faults(), self.fleet.storage_mounts)
        self._served[node] = served = _Served(
            view, self._loop(node, cols), storage, cols, units, dme=dme
        )
        return served

    def _probe_storage(self, served: _Served, node: str) -> None:
        """From the first mount to probe on (configured, or named by a storage fault), the
        node also runs the exporter's storage collector (no NFS or Lustre client here)."""
        if not served.storage.mounts or any(isinstance(x, StorageCollector) for x in served.cols):
            return
        storage = StorageCollector(served.storage, node, mountstats=lambda: "", lustre=lambda m: [])
        served.cols.append(storage)
        served.loop = self._loop(node, served.cols)

    def _loop(self, node: str, cols: list[Collector]) -> CollectionLoop:
        """The collection loop of one node; its collectors (and their counters) outlive it."""
        return CollectionLoop(cols, node, source="simulated", interval=15.0, dcgm=self.dcgm,
                              wall=self._wall)  # fmt: skip

    def inject(self, request: Any, *, lead_ticks: int = 1, late_ok: bool = False) -> Fault:
        """``POST /inject`` body -> a fault at the grid point ``lead_ticks`` ahead (or at the
        request's ``onset``); FaultError, nothing changed, on any bad input. ``late_ok``: a
        forwarded request whose onset this worker has already passed starts now instead."""
        if not isinstance(request, Mapping):
            raise FaultError("body must be a JSON object with node, kind, target, parameters")
        extra = sorted(set(request) - INJECT_KEYS)
        if extra:
            raise FaultError(f"unknown field(s) {', '.join(map(str, extra))}")
        for key in ("node", "kind"):
            if not isinstance(request.get(key), str) or not request[key]:
                raise FaultError(f"field {key!r} is required (a string)")
        target = request.get("target", "")
        if not isinstance(target, str):
            raise FaultError("field 'target' must be a string")
        self.sync()
        onset = request.get("onset", self.grid(self.steps + lead_ticks))
        if late_ok and isinstance(onset, (int, float)):
            onset = max(float(onset), self.fleet.t)
        return self.fleet.inject(request["kind"], request["node"], target,
                                 request.get("parameters", {}), onset=onset,
                                 duration=request.get("duration"))  # fmt: skip

    def truth(self) -> dict[str, Any]:
        self.sync()
        return {"time": self.fleet.t, "seed": self.fleet.seed, "faults": self.fleet.truth()}

    def nodes(self) -> list[dict[str, str]]:
        return [
            {"node": n, "leaf": leaf, "metrics_path": f"/nodes/{n}/metrics"}
            for n, leaf in zip(self.fleet.nodes, self.fleet.leaf_of, strict=True)
        ]
