"""The fleet on a clock: virtual time from wall time, per-node exporter views, render cache.

Sits between :class:`~exporter.fleet.fleet.Fleet` (virtual time) and the HTTP server. Each
node gets, on its first scrape, a :class:`~exporter.fleet.node_view.NodeView` and the *real*
exporter collection loop (``exporter.assemble.collectors_for`` + ``CollectionLoop``); the
collectors live as long as the simulator, so their Monotonic counters and XID counts persist.
A node's body is rendered at most once per model step. The clock is injected.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from exporter import catalog as c
from exporter.assemble import collectors_for
from exporter.collection import CollectionLoop
from exporter.fleet.faults import Fault, FaultError
from exporter.fleet.fleet import Fleet
from exporter.fleet.node_view import NodeView

INJECT_KEYS = {"node", "kind", "target", "parameters", "duration"}


class NodeDown(Exception):
    """The node is rebooting: a real exporter there would not answer."""


@dataclass
class _Served:
    view: NodeView
    loop: CollectionLoop
    steps: int = -1  # model step the body was rendered at
    body: bytes = b""


class Simulator:
    """``fleet`` driven by ``clock`` (seconds) at ``time_scale`` virtual seconds per second;
    the model steps when ``tick_s`` wall seconds have passed since its last step."""

    def __init__(
        self,
        fleet: Fleet,
        *,
        dcgm: bool = False,
        time_scale: float = 1.0,
        tick_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        if not time_scale > 0:
            raise ValueError(f"time_scale must be > 0, got {time_scale}")
        self.fleet, self.dcgm, self.time_scale, self.tick_s = fleet, dcgm, time_scale, tick_s
        self._clock, self._wall = clock, wall
        self._origin = (clock(), fleet.t)
        self._served: dict[str, _Served] = {}
        self._injected = False  # a fault waits to fire: step at the next read, tick or not
        self.steps = 0
        self.frame = fleet.step(fleet.t)

    def virtual_now(self) -> float:
        c0, t0 = self._origin
        return t0 + (self._clock() - c0) * self.time_scale

    def sync(self) -> None:
        """Step the model to now if a tick has passed (cheap when it has not)."""
        t = max(self.virtual_now(), self.fleet.t)
        if self._injected or t - self.fleet.t >= self.tick_s * self.time_scale:
            self.frame = self.fleet.step(t)
            self.steps += 1
            self._injected = False

    def metrics(self, node: str) -> bytes:
        """``node``'s exporter output now; KeyError if unknown, NodeDown while it reboots."""
        i = self.fleet.topo.index[node]
        self.sync()
        up = self.frame[c.GPU_UP.name][i]
        if up[0] != up[0]:  # NaN: the whole node is unreachable
            raise NodeDown(node)
        served = self._served.get(node) or self._serve(node, i)
        if served.steps != self.steps:
            served.view.refresh(self.frame, self.fleet.node_events.get(i, []))
            served.body = served.loop.run_once().body
            served.steps = self.steps
        return served.body

    def _serve(self, node: str, i: int) -> _Served:
        view = NodeView(node, i, self.fleet.topo.sku)
        cols = collectors_for(node, view.nvml, view.sysfs, view.kmsg)
        loop = CollectionLoop(cols, node, source="simulated", interval=15.0, dcgm=self.dcgm,
                              wall=self._wall)  # fmt: skip
        self._served[node] = served = _Served(view, loop)
        return served

    def inject(self, request: Any) -> Fault:
        """``POST /inject`` body -> fault now; FaultError (nothing changed) on any bad input."""
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
        params = request.get("parameters", {})
        self.sync()
        fault = self.fleet.inject(
            request["kind"], request["node"], target, params, duration=request.get("duration")
        )
        self._injected = True
        return fault  # fmt: skip

    def truth(self) -> dict[str, Any]:
        self.sync()
        return {"time": self.fleet.t, "seed": self.fleet.seed, "faults": self.fleet.truth()}

    def nodes(self) -> list[dict[str, str]]:
        return [
            {"node": n, "leaf": leaf, "metrics_path": f"/nodes/{n}/metrics"}
            for n, leaf in zip(self.fleet.nodes, self.fleet.leaf_of, strict=True)
        ]
