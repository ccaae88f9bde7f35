"""GB200 NVL72 racks for the simulator: 18 compute trays x 4 GPUs in one NVLink domain.

Each tray is a :class:`~simulator.nvml_fake.FakeNvml` of four GB200 GPUs (NVLink5, 18 links
each) whose fabric info names the rack's cluster UUID and clique id, plus the tray's systemd
units (:class:`~exporter.sources.systemd_units.FakeUnits`: IMEX runs on the trays; Fabric
Manager does not, on GB200 it runs on the NVLink switch trays: gpud's product table,
pkg/nvidia/product/capabilities.go). A tray is served by the exporter's own collectors
(:func:`tray_collectors`), so what the simulator shows is what the real exporter would render.

Faults (:class:`Nvl72Rack` methods) change the fakes as the hardware would show them:
``route_unhealthy`` (one GPU's fabric route), ``switch_tray_down`` (every GPU of the rack
loses bandwidth and 2 of its 18 links: a switch tray carries one ninth of every GPU's links),
``fabric_manager_stopped`` (the global fabric manager unreachable: every GPU's GFM bit set to
disconnected; the fabric state stays ``completed``, registered GPUs keep their routes),
``imex_unhealthy`` (the IMEX unit failed on some trays) and ``power_brake`` (the rack's power
brake asserted: clocks-event reasons 0x88 on every GPU, the brake 0x80 and the HW slowdown
0x08 that NVML documents the brake also sets).

Shapes not recorded on real hardware (no GB200 was lent to this work): the GB200 GPU
(:meth:`simulator.nvml_fake.FakeGpuState.gb200`, beside the other models' shapes, so the fake
never imports this module) has NVIDIA's datasheet name and memory and the PCI domains of
gpud's GB200 log examples.

``gpuwarden simulate --skus gb200-nvl72:N`` lays N racks of 18 trays out (simulator.cli.racks);
each tray serves 4 of the frame's 8 GPU columns (simulator.topology.GPUS), with its rack's
cluster UUID and clique id (:func:`attach`) and IMEX. The fleet's fault kinds reach these
nodes as any other's, and the fabric kinds of :mod:`simulator.faults.fabric` (``POST /inject``)
are applied to a served tray's fakes by :func:`apply_faults`.
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import pynvml

from exporter.catalog import Sample
from exporter.collectors.fabric_services import SERVICES, FabricServicesCollector
from exporter.collectors.gpu import GpuCollector
from exporter.sources.systemd_units import FakeUnits
from simulator.faults import fabric as fabric_faults
from simulator.faults.base import Fault
from simulator.nvml_fake import (
    GB200_PCI_DOMAINS,
    NVLINK5_LINKS,
    FakeGpuState,
    FakeNvml,
    fabric_mask,
)
from simulator.topology import (
    NVL72_GPUS_PER_TRAY,
    NVL72_SKU,
    NVL72_SWITCH_TRAY_LINKS,
    NVL72_TRAYS,
    nvl72_rack_of,
)

TRAYS, GPUS_PER_TRAY, LINKS = NVL72_TRAYS, NVL72_GPUS_PER_TRAY, NVLINK5_LINKS
SKU = NVL72_SKU  # simulator.model.SKUS key
GPUS_PER_NODE = {SKU: GPUS_PER_TRAY}  # SKUs whose nodes have fewer GPUs than the frame's 8
PCI_DOMAINS = GB200_PCI_DOMAINS
HW_POWER_BRAKE = pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown  # 0x80
# NVML's nvmlClocksEventReasonHwSlowdown (0x08) "is also set when ... External Power Brake
# Assertion is triggered" (nvml.h): a braked GPU reports 0x88, as the brake fault shows it.
BRAKE_REASONS = HW_POWER_BRAKE | pynvml.nvmlClocksEventReasonHwSlowdown
IMEX = SERVICES["imex"]
FABRIC_KINDS = frozenset(
    {fabric_faults.ROUTE, fabric_faults.SWITCH_TRAY, fabric_faults.FABRIC_MANAGER,
     fabric_faults.IMEX, fabric_faults.POWER_BRAKE}
)  # fmt: skip


def gb200(index: int, node: str, cluster: str, clique: int) -> FakeGpuState:
    """One idle GB200 GPU of a compute tray, registered in its rack's NVLink domain (the shape
    is the NVML fake's, beside the other GPU models': :meth:`FakeGpuState.gb200`)."""
    return FakeGpuState.gb200(index, node, cluster, clique)


@dataclass
class Tray:
    node: str
    nvml: FakeNvml
    units: FakeUnits = field(default_factory=FakeUnits)


@dataclass
class Nvl72Rack:
    """One NVL72 rack: its trays, cluster UUID and clique id (its NVLink domain)."""

    name: str
    cluster_uuid: str
    clique_id: int
    trays: list[Tray]

    @classmethod
    def build(cls, rack: int, prefix: str = "gb200") -> Nvl72Rack:
        cluster, clique = domain(rack)  # any clique id; unique per rack within the cluster
        trays = []
        for t in range(TRAYS):
            node = f"{prefix}-r{rack + 1:02d}-t{t + 1:02d}"
            gpus = [gb200(g, node, cluster, clique) for g in range(GPUS_PER_TRAY)]
            tray = Tray(node, FakeNvml(gpus, driver_version="570.133.20"))
            tray.units.set(IMEX, "active", "running")
            trays.append(tray)
        return cls(f"nvl72-{rack + 1:02d}", cluster, clique, trays)

    @property
    def domain(self) -> str:
        """As common.fabric.fabric_domain and GFD's nvidia.com/gpu.clique spell it."""
        return f"{self.cluster_uuid}.{self.clique_id}"

    def gpus(self) -> list[FakeGpuState]:
        return [g for t in self.trays for g in t.nvml.gpus]

    # ------------------------------------------------------------------ faults
    def route_unhealthy(self, tray: int, gpu: int) -> None:
        fab = self.trays[tray].nvml.gpus[gpu].fabric
        assert fab is not None
        fab.health_mask = fabric_mask(ROUTE_UNHEALTHY=1)

    def switch_tray_down(self) -> None:
        for g in self.gpus():
            assert g.fabric is not None
            g.fabric.health_mask = fabric_mask(DEGRADED_BW=1)
            g.nvlink_state = tray_down_links(len(g.nvlink_state))

    def fabric_manager_stopped(self) -> None:
        for g in self.gpus():
            assert g.fabric is not None
            g.fabric.health_mask = fabric_mask(GFM_STATE=2)

    def imex_unhealthy(self, trays: range | list[int]) -> None:
        for t in trays:
            self.trays[t].units.set(IMEX, "failed", "failed", restarts=5)

    def power_brake(self) -> None:
        for g in self.gpus():
            g.throttle_reasons |= BRAKE_REASONS


def tray_down_links(links: int) -> list[int]:
    """A GPU's link states with one of the rack's 9 NVLink switch trays down: the tray carries
    2 of each GB200's 18 links (links 0 and 9 here), which go inactive."""
    return [0 if link in NVL72_SWITCH_TRAY_LINKS else 1 for link in range(links)]


def rack_of(skus: Sequence[str], i: int) -> int | None:
    """The NVL72 rack (0, 1, ...) of fleet node ``i``, None for other SKUs (the layout is
    simulator.topology's, which the fabric faults read too)."""
    return nvl72_rack_of(skus, i)


def domain(rack: int) -> tuple[str, int]:
    """(cluster UUID, clique id) of NVL72 rack ``rack``, as :meth:`Nvl72Rack.build` gives it."""
    return str(
        uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"gpuwarden/nvl72/cluster/{rack}")
    ), 32766 - rack


def attach(nvml: FakeNvml, skus: Sequence[str], i: int) -> FakeUnits | None:
    """Give fleet node ``i``'s GPUs its rack's NVLink domain; the tray's systemd units (IMEX
    active) for the exporter's fabric-services collector, or None for a node that is not a
    GB200 tray."""
    rack = rack_of(skus, i)
    if rack is None:
        return None
    cluster, clique = domain(rack)
    for g in nvml.gpus:
        if g.fabric is not None:
            g.fabric.cluster_uuid, g.fabric.clique_id = cluster, clique
    units = FakeUnits()
    units.set(IMEX, "active", "running")
    return units


def apply_faults(
    nvml: FakeNvml,
    units: FakeUnits | None,
    faults: list[Fault],
    skus: Sequence[str],
    i: int,
    t: float,
) -> None:
    """Fleet node ``i``'s fakes as the fabric faults active at ``t`` leave them (after the
    node view copied the frame in): simulator.faults.fabric. A node that is no GB200 tray is
    left alone."""
    rack = rack_of(skus, i)
    if rack is None:
        return
    bw, gfm = 2, 1  # degraded bandwidth FALSE, global fabric manager CONNECTED
    route: set[int] = set()
    imex_failed = brake = tray_down = False
    for f in faults:
        if f.kind not in FABRIC_KINDS or not f.state_at(t) or not f.nodes:
            continue
        here, same_rack = f.nodes[0] == i, rack_of(skus, f.nodes[0]) == rack
        if f.kind == fabric_faults.ROUTE and here:
            route.add(f.gpu)
        elif f.kind == fabric_faults.SWITCH_TRAY and same_rack:
            bw, tray_down = 1, True  # degraded bandwidth TRUE; the tray's links inactive
        elif f.kind == fabric_faults.FABRIC_MANAGER and same_rack:
            gfm = 2  # DISCONNECTED
        elif f.kind == fabric_faults.IMEX and here:
            imex_failed = True
        elif f.kind == fabric_faults.POWER_BRAKE and same_rack:
            brake = True
    for g, gpu in enumerate(nvml.gpus):
        if gpu.fabric is not None:
            unhealthy = 1 if g in route else 2  # ROUTE_UNHEALTHY TRUE / FALSE
            gpu.fabric.health_mask = fabric_mask(
                DEGRADED_BW=bw, GFM_STATE=gfm, ROUTE_UNHEALTHY=unhealthy
            )
        if tray_down:
            gpu.nvlink_state = tray_down_links(len(gpu.nvlink_state))
        if brake:
            gpu.throttle_reasons |= BRAKE_REASONS
    if units is not None:
        if imex_failed:
            units.set(IMEX, "failed", "failed", restarts=5)
        else:
            units.set(IMEX, "active", "running")


def tray_collectors(tray: Tray) -> tuple[GpuCollector, FabricServicesCollector]:
    return GpuCollector(tray.nvml, tray.node), FabricServicesCollector(tray.units, tray.node)


def scrape(rack: Nvl72Rack) -> list[Sample]:
    """One collection of every tray of the rack through the exporter's collectors."""
    out: list[Sample] = []
    for tray in rack.trays:
        for col in tray_collectors(tray):
            out += col.collect()
    return out
