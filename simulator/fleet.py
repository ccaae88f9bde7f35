"""The fleet: topology + jobs + counters + faults, stepped in virtual time.

The centre of :mod:`simulator`. ``Fleet.step(t)`` advances everything to ``t`` and
returns a :class:`~simulator.frame.Frame`; the HTTP simulator calls it from a clock,
the analyzer's evaluation harness calls it in a loop. One ``numpy.random.Generator`` from the
seed drives every draw, and nothing reads the wall clock, so a seed replays bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from exporter import catalog as c
from exporter import catalog_specs
from simulator import frame as framing
from simulator import model
from simulator import partitions as parts
from simulator.amd import RasEvent, amd_rows
from simulator.effects import Effects, Event
from simulator.faults import KINDS, Fault, FaultError, make_fault
from simulator.faults.base import Step
from simulator.faults.partitions import PARTITION_KINDS, check_instance
from simulator.jobs import Jobs
from simulator.state import FleetState
from simulator.topology import Topology

FRESH_EPS = 1e-9


class Fleet:
    """``nodes`` nodes of 8 GPUs; see docs/simulator.md for the model and the fault kinds."""

    def __init__(
        self,
        nodes: int = 32,
        seed: int = 0,
        *,
        nodes_per_leaf: int = 32,
        sku: str = "h100",
        idle_fraction: float = 0.1,
        mean_job_s: float = 8 * 3600.0,
        small_job_share: float = 0.3,
        start: float = 0.0,
        skus: Sequence[str] | None = None,
        power_caps: Mapping[str, float] | None = None,
        busy_wait: bool = False,
        storage_mounts: Sequence[str] = (),
        signals: Sequence[str] = (),
        rails: bool = False,
        partitions: Mapping[int, str] | None = None,
    ) -> None:
        if not 0.0 <= idle_fraction < 1.0:
            raise ValueError(f"idle_fraction must be in [0, 1), got {idle_fraction}")
        self.topo = Topology(nodes, nodes_per_leaf, sku, rails)
        self.sku: model.Sku | model.NodeSkus = model.SKUS[sku]
        self.busy_wait = busy_wait  # NCCL collective waits show as ~100 % utilisation
        # checkpoint mounts every node probes (a storage fault adds its own): simulator/storage.py
        self.storage_mounts = tuple(storage_mounts)
        bad = sorted(set(signals) - set(model.SIGNALS))
        if bad:
            raise ValueError(
                f"unknown signal(s) {', '.join(bad)} (known: {', '.join(model.SIGNALS)})"
            )
        self.signals = tuple(signals)  # straggler signals beyond NVML's: profiling, step times
        self.sku_of = tuple(skus) if skus is not None else (sku,) * nodes  # per node
        if skus is not None or power_caps:
            self.sku = _mixed(self.topo, self.sku_of, dict(power_caps or {}))
        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.state = FleetState.new(nodes, self.rng)
        self.amd = amd_rows(self.sku_of)  # per node: an AMD Instinct node (simulator.amd)
        if self.amd.any():
            self.state.enable_amd(self.amd)
        self.ras_events: list[RasEvent] = []  # every AMD RAS event so far, in time order
        # partitioned nodes (node index -> layout spec): inference replicas on their instances,
        # no training job (simulator.partitions)
        self.layouts = _layouts(dict(partitions or {}), self.sku_of)
        self.instances = [x for n, lay in sorted(self.layouts.items())
                          for x in parts.instances(n, self.topo.nodes[n], lay)]  # fmt: skip
        self._serving = np.zeros(nodes, dtype=bool)
        self._serving[list(self.layouts)] = True
        self.jobs = Jobs(nodes, idle_fraction, mean_job_s, small_job_share)
        self.t = float(start)
        self.events: list[Event] = []  # every kernel-log event so far, in time order
        self.node_events: dict[int, list[Event]] = {}  # the same, per node index
        self.last: framing.Frame | None = None
        self._faults: list[Fault] = []
        self._fresh: set[int] = set()  # ids whose onset is the current time (not yet fired)
        self._ja: tuple[int, model.JobArrays] | None = None
        self._blocked = np.zeros(nodes, dtype=bool)
        self.jobs.advance(self.t, self.rng, self._serving if self.layouts else None)

    # ------------------------------------------------------------------ views
    @property
    def models(self) -> tuple[str, ...]:
        """Per node, the peer-group key of its GPU model (``Window.sku``)."""
        return tuple(catalog_specs.model_key(model.SKUS[k].name) for k in self.sku_of)

    @property
    def nodes(self) -> tuple[str, ...]:
        return self.topo.nodes

    @property
    def leaf_of(self) -> tuple[str, ...]:
        return self.topo.leaf_of

    def port_leaf(self) -> dict[tuple[int, int], str]:
        """(node index, port) -> its leaf on a rail-optimized fleet (``Window.port_leaf``)."""
        if not self.topo.rails:
            return {}
        return {(i, p): self.topo.port_leaf(i, p) for i in range(len(self.nodes)) for p in range(8)}

    def jobs_at(self, t: float) -> dict[int, list[int]]:
        return self.jobs.at(t)

    def jobs_multi(self) -> np.ndarray:
        """Per node: part of a multi-node job right now."""
        return self._job_arrays().multi.copy()

    def truth(self) -> list[dict[str, Any]]:
        """Faults whose onset has passed (future scheduled ones stay hidden), by onset."""
        seen = sorted((f for f in self._faults if f.onset <= self.t), key=lambda f: (f.onset, f.id))
        return [f.to_json(self.topo) for f in seen]

    def faults(self) -> list[Fault]:
        return list(self._faults)

    def changed(self, node: int, since: float) -> bool:
        """Did a fault touching ``node`` start, end or (a reboot) come back in (since, now]?"""
        for f in self._faults:
            if node not in f.nodes:
                continue
            back = f.onset + float(f.parameters.get("down_s", 0.0))
            edges = (f.onset, back, math.inf if f.end is None else f.end)
            if any(since < e <= self.t for e in edges):
                return True
        return False

    # ------------------------------------------------------------------ faults in
    def inject(
        self,
        kind: str,
        node: str,
        target: str = "",
        parameters: Mapping[str, Any] | None = None,
        *,
        onset: float | None = None,
        duration: float | None = None,
    ) -> Fault:
        """Add a fault (now, or at ``onset`` >= now). Raises FaultError and changes nothing on bad
        input."""
        at = self.t if onset is None else onset
        fault = make_fault(
            KINDS,
            self.topo,
            len(self._faults) + 1,
            kind,
            node,
            target,
            at,
            duration,
            parameters or {},
        )
        if fault.onset < self.t:
            raise FaultError(f"onset {fault.onset} is in the past (fleet time is {self.t})")
        if KINDS[kind].vendor == "amd" and not all(self.amd[i] for i in fault.nodes):
            raise FaultError(f"{kind} needs an AMD node: {node} is {self.sku_of[fault.nodes[0]]}")
        if kind in PARTITION_KINDS:
            check_instance(fault, self.layouts, node)
        self._faults.append(fault)
        if fault.onset == self.t:
            self._fresh.add(fault.id)
        return fault

    def schedule(self, specs: Iterable[Mapping[str, Any]]) -> list[Fault]:
        """Inject many (scenario entries: kind, node, target, onset, duration, parameters)."""
        return [
            self.inject(
                s["kind"],
                s.get("node", ""),
                s.get("target", ""),
                s.get("parameters"),
                onset=s.get("onset"),
                duration=s.get("duration"),
            )
            for s in specs
        ]

    # ------------------------------------------------------------------ time
    def step(self, t: float) -> framing.Frame:
        """Advance the model to virtual time ``t`` (seconds, >= the current time)."""
        t0, t1 = self.t, float(t)
        if t1 < t0:
            raise ValueError(f"time goes forward only: step({t1}) after {t0}")
        self.jobs.advance(t1, self.rng, self._blocked | self._serving)
        eff = Effects(self.topo.n_nodes)
        s = Step(eff, self.state, self.jobs, t0, t1, self.rng, self.sku_of, self.layouts)
        self._reboots_clear(t0, t1)
        for f in self._active(t0, t1):
            KINDS[f.kind].apply(f, self._step_for(f, s))
        self._fresh.clear()
        for n in sorted(eff.stop_jobs):
            self.jobs.stop_on(n, t1)
        self._blocked = eff.lost.any(axis=1) | eff.hung.any(axis=1) | eff.down
        ja = self._job_arrays()
        g = model.gauges(self.state, ja, eff, self.sku, t0, t1, self.rng, self.busy_wait,
                         self.signals)  # fmt: skip
        events = sorted(eff.events, key=lambda e: (e.t, e.node, e.gpu))
        self.events.extend(events)
        for e in events:
            self.node_events.setdefault(e.node, []).append(e)
        ras = sorted(eff.ras_events, key=lambda e: (e.t, e.node, e.gpu))
        self.ras_events.extend(ras)
        self.t = t1
        self.last = framing.build(t1, self.state, g, eff, self.sku, events, tuple(ras))
        if self.layouts:
            self._instances_into(self.last, eff, t1)
        return self.last

    def _instances_into(self, frame: framing.Frame, eff: Effects, t: float) -> None:
        """Per-instance activity (the serving replicas' load) into the frame, and the parent
        GPUs' utilization as their instances' sum; nothing where the GPU reads nothing."""
        act = parts.activity(self.layouts, self.topo.n_nodes, t, self.rng, eff.instance_speed)
        gone = np.isnan(frame[c.GPU_UP.name]) | (frame[c.GPU_UP.name] == 0)
        act[gone] = np.nan
        util, sm = frame[c.GPU_UTILIZATION.name], frame[c.GPU_SM_CLOCK.name]
        power, idle = frame[c.GPU_POWER.name], frame[c.GPU_THROTTLE.name][..., 0]
        for n, layout in self.layouts.items():
            u = parts.gpu_utilization(layout, act[n])
            serving = ~np.isnan(u) & ~gone[n]
            util[n] = np.where(serving, u, util[n])
            # a serving GPU runs at its clocks and draws its load's power, as a busy one does
            sku, f = model.SKUS[self.sku_of[n]], eff.clock[n]
            dyn = (sku.power_limit_w - sku.idle_w) * np.nan_to_num(u) ** 0.9 * f**2
            sm[n] = np.where(serving, sku.sm_max_mhz * 1e6 * f, sm[n])
            power[n] = np.where(serving, np.minimum(sku.idle_w + dyn, eff.power_cap_w[n]),
                                power[n])  # fmt: skip
            idle[n] = np.where(serving, 0.0, idle[n])
        frame.metrics[c.GPU_MIG_GRAPHICS_ACTIVE.name] = act
        frame.metrics[c.GPU_MIG_TENSOR_ACTIVE.name] = act * 0.6

    def run(self, until: float, every: float) -> Iterable[framing.Frame]:
        """Frames at ``every`` seconds from now until ``until`` (inclusive)."""
        n = int(np.floor((until - self.t) / every + 1e-9))
        start = self.t
        for i in range(1, n + 1):
            yield self.step(start + i * every)

    def _active(self, t0: float, t1: float) -> list[Fault]:
        return [f for f in self._faults if f.onset <= t1 and (f.end is None or f.end > t0)]

    def _step_for(self, f: Fault, s: Step) -> Step:
        return dataclasses.replace(s, t0=s.t0 - FRESH_EPS) if f.id in self._fresh else s

    def _reboots_clear(self, t0: float, t1: float) -> None:
        """A reboot starting now ends the faults on that node that a reboot clears."""
        for r in self._faults:
            if r.kind != "reboot" or not (t0 < r.onset <= t1 or r.id in self._fresh):
                continue
            for i, f in enumerate(self._faults):
                hit = f.nodes == r.nodes and f.onset < r.onset and f.state_at(r.onset)
                if hit and KINDS[f.kind].clears_on_reboot(f):
                    self._faults[i] = dataclasses.replace(f, end=r.onset)

    def _job_arrays(self) -> model.JobArrays:
        if self._ja is None or self._ja[0] != self.jobs.version:
            self._ja = (self.jobs.version, model.JobArrays.of(self.jobs))
        return self._ja[1]


def _mixed(topo: Topology, skus: tuple[str, ...], caps: dict[str, float]) -> model.NodeSkus:
    """Per-node models, and the power caps an administrator set per leaf (the rack's)."""
    if len(skus) != topo.n_nodes:
        raise ValueError(f"skus names {len(skus)} nodes, the fleet has {topo.n_nodes}")
    bad = sorted(set(skus) - set(model.SKUS)) + sorted(set(caps) - set(topo.leaves))
    if bad:
        raise ValueError(f"unknown sku or leaf: {', '.join(bad)} (skus: {', '.join(model.SKUS)})")
    if any(not w > 0 for w in caps.values()):
        raise ValueError("power_caps must be positive watts per leaf")
    cap = [caps.get(leaf, np.inf) for leaf in topo.leaf_of]
    return model.NodeSkus.of([model.SKUS[k] for k in skus], cap)


def _layouts(specs: dict[int, str], skus: tuple[str, ...]) -> dict[int, parts.Layout]:
    """Node index -> its GPUs' partitioning; ValueError naming the node for a bad spec."""
    out = {}
    for n, spec in specs.items():
        if not 0 <= n < len(skus):
            raise ValueError(f"partitions: node index {n} is not in the fleet (0..{len(skus) - 1})")
        try:
            out[n] = parts.parse_layout(spec, skus[n])
        except parts.PartitionError as e:
            raise ValueError(f"partitions of node {n}: {e}") from None
    return out
