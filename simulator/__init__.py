"""The simulated GPU fleet: a seeded numpy model with fault injection and ground truth.

Virtual time: :class:`Fleet` (``step(t) -> Frame``), used by the analyzer's evaluation.
Serving: :mod:`simulator.server` / ``gpuwarden simulate`` renders each node through the
real exporter collectors. One node for ``gpuwarden-exporter --source simulated``:
:func:`single_node`. See docs/simulator.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from exporter.sources.kmsg import ListKernelLog
from exporter.sources.sysfs import DictSysfs
from simulator.fleet import Fleet
from simulator.frame import Frame
from simulator.node_view import NodeView
from simulator.nvml_fake import FakeNvml

__all__ = ["Fleet", "Frame", "NodeSources", "single_node"]


@dataclass
class NodeSources:
    """The sources of one simulated node, and ``advance(t_wall)`` to move its model on."""

    nvml: FakeNvml
    sysfs: DictSysfs
    kmsg: ListKernelLog
    advance: Callable[[float], None]
    fleet: Fleet


def single_node(
    node: str, seed: int = 0, *, time_scale: float = 1.0, mig_profile: str | None = None
) -> NodeSources:
    """One node of 8 GPUs x 18 NVLinks x 8 IB ports running jobs, healthy until faults are
    injected into ``sources.fleet`` (its only node is ``fleet.nodes[0]``).

    ``advance(t_wall)``: the first call fixes the origin, later ones step the model to
    ``(t_wall - origin) * time_scale`` virtual seconds and refresh the fakes.
    ``mig_profile`` (e.g. "1g.10gb"): a MIG node, every GPU split into such instances.
    """
    fleet = Fleet(1, seed, idle_fraction=0.0)
    view = NodeView(node, 0, fleet.topo.sku, mig_profile)
    origin: list[float] = []

    def advance(t_wall: float) -> None:
        if not origin:
            origin.append(t_wall)
        t = max(fleet.t, (t_wall - origin[0]) * time_scale)
        frame = fleet.step(t) if fleet.last is None or t > fleet.t else fleet.last
        view.refresh(frame, fleet.node_events.get(0, []))

    return NodeSources(view.nvml, view.sysfs, view.kmsg, advance, fleet)
