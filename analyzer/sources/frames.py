"""The simulator's virtual-time stream as a series source (``gpuwarden evaluate``).

Edge of the analyzer, without I/O: takes the fleet's ``Frame`` objects (docs/contracts.md:
``t``, ``metrics`` keyed by catalogue name, ``ib_counters``, ``xids`` / ``events``, AMD's
``ras_events``) one by one
and keeps the last ``window`` seconds in preallocated arrays, so building a :class:`Window`
is a view, not a copy of the history. Knows the frame's shape by duck typing only; the
analyzer never imports the simulator.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from analyzer.sources.build import QUERIED_NAMES
from analyzer.window import AfidEvent, InstanceInfo, Window, XidEvent
from exporter import catalog

INSTANCE_NAMES = frozenset({catalog.GPU_MIG_GRAPHICS_ACTIVE.name})  # what instances are judged on


class FrameBuffer:
    name = "frames"

    def __init__(
        self,
        nodes: Sequence[str],
        window: float = 600.0,
        step: float = 15.0,
        leaf_of: Mapping[int, str] | None = None,
        ports: Sequence[str] = (),
        metrics: Iterable[str] = QUERIED_NAMES,
        sku: Sequence[str] = (),
        instances: Mapping[tuple[int, int, int], InstanceInfo] | None = None,
    ) -> None:
        self.nodes = tuple(nodes)
        self.instances = dict(instances or {})  # partitioned GPUs: what each slot holds
        self.sku = tuple(sku)  # per node model key (the simulator's Fleet.models)
        self.step = step
        self.T = round(window / step) + 1
        self.leaf_of = dict(leaf_of or {})
        self.ports = tuple(ports)
        # a partitioned fleet's per-instance arrays come along with its instances
        self.wanted = frozenset(metrics) | (INSTANCE_NAMES if self.instances else frozenset())
        self._buf: dict[str, np.ndarray] = {}
        self._ib: dict[str, np.ndarray] = {}
        self._t = np.zeros(2 * self.T)
        self._n = 0  # frames stored
        self._start = 0
        self._xids: deque[XidEvent] = deque()
        self._afids: deque[AfidEvent] = deque()
        self.jobs: dict[str, tuple[int, ...]] = {}
        self.missing: Any = None  # optional callable(name, array) -> array with NaN holes

    def push(self, frame: Any, jobs: Mapping[Any, Sequence[int]] | None = None) -> None:
        if self._start + self._n == 2 * self.T:
            self._shift()
        i = self._start + self._n
        for name, a in frame.metrics.items():
            if name not in self.wanted:
                continue
            if self.missing is not None:
                a = self.missing(name, a)
            self._slot(self._buf, name, a)[i] = a
        for name, a in frame.ib_counters.items():
            if self.missing is not None:
                a = self.missing(name, a)
            self._slot(self._ib, name, a)[i] = a
        self._t[i] = frame.t
        events = getattr(frame, "events", None)
        if events:
            for e in events:
                if getattr(e, "counted", True):
                    self._xids.append(XidEvent(float(e.t), int(e.node), int(e.gpu), int(e.xid)))
        else:
            for n, g, x in frame.xids:
                self._xids.append(XidEvent(float(frame.t), int(n), int(g), int(x)))
        if self._n < self.T:
            self._n += 1
        else:
            self._start += 1
        while self._xids and self._xids[0].t < frame.t - self.T * self.step:
            self._xids.popleft()
        # AMD RAS events (CPER records, counted: none lost), by duck typing as the XIDs
        for e in getattr(frame, "ras_events", ()):
            self._afids.append(AfidEvent(float(e.t), int(e.node), int(e.gpu), int(e.afid),
                                         str(e.severity)))  # fmt: skip
        while self._afids and self._afids[0].t < frame.t - self.T * self.step:
            self._afids.popleft()
        if jobs is not None:
            self.jobs = {str(k): tuple(int(x) for x in v) for k, v in jobs.items()}

    def _slot(self, store: dict[str, np.ndarray], name: str, a: np.ndarray) -> np.ndarray:
        buf = store.get(name)
        if buf is None or buf.shape[1:] != a.shape:
            buf = np.full((2 * self.T, *a.shape), np.nan)
            store[name] = buf
        return buf

    def _shift(self) -> None:
        s, n = self._start, self._n
        for store in (self._buf, self._ib):
            for buf in store.values():
                buf[:n] = buf[s : s + n]
        self._t[:n] = self._t[s : s + n]
        self._start = 0

    def window(self) -> Window:
        sl = slice(self._start, self._start + self._n)
        return Window(
            t=self._t[sl],
            nodes=self.nodes,
            metrics={k: v[sl] for k, v in self._buf.items()},
            ib_counters={k: v[sl] for k, v in self._ib.items()},
            ports=self.ports,
            xids=tuple(self._xids),
            afids=tuple(self._afids),
            jobs=self.jobs,
            leaf_of=self.leaf_of,
            sku=self.sku,
            step=self.step,
            instances=self.instances,
        )

    async def read(self, now: float) -> Window:
        return self.window()
