"""What the active faults do to one model step, as arrays over nodes x GPUs x links/ports.

Sits between :mod:`simulator.faults` (which fill it) and :mod:`simulator.model`
(which turns baselines plus these effects into signal values). A fresh ``Effects`` is made
for every step, so a fault that ends simply stops writing into it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from simulator.partitions import MAX_INSTANCES
from simulator.topology import GPUS, LINKS, PORTS

PORT_ACTIVE, PORT_DOWN = 4, 1
PHYS_LINK_UP, PHYS_POLLING, PHYS_DISABLED = 5, 2, 3


@dataclass(frozen=True)
class Event:
    """A kernel-log event: an Xid line, or the fallen-off-the-bus message (``xid`` 79,
    ``text`` = ``"fallen_off_bus"``). ``pid``/``name`` name the process for application XIDs.
    """

    t: float
    node: int
    gpu: int
    xid: int
    text: str
    counted: bool = True  # the exporter counts it as this XID (the bus message counts as 79)
    instance: int = -1  # MIG: the GPU instance (GPU-I) the driver names in the line; -1 none


@dataclass
class Effects:
    n: int
    speed: np.ndarray = field(init=False)  # compute throughput factor per GPU (1 = nominal)
    clock: np.ndarray = field(init=False)  # SM clock factor per GPU
    temp_add: np.ndarray = field(init=False)  # extra degrees C (cooling trouble)
    power_cap_w: np.ndarray = field(init=False)  # power limit in force (inf = board limit)
    throttle: np.ndarray = field(init=False)  # extra clocks-event reason bits
    lost: np.ndarray = field(init=False)  # GPU off the bus (NVML: GPU is lost)
    hung: np.ndarray = field(init=False)  # GPU answers NVML but runs nothing (GSP timeout)
    recovery: np.ndarray = field(init=False)  # NVML recovery action
    remap_pending: np.ndarray = field(init=False)
    remap_failed: np.ndarray = field(init=False)
    pcie_gen: np.ndarray = field(init=False)  # 0 = maximum
    pcie_width: np.ndarray = field(init=False)  # 0 = maximum
    link_down: np.ndarray = field(init=False)  # (n, 8, 18)
    port_state: np.ndarray = field(init=False)  # (n, 8)
    port_phys: np.ndarray = field(init=False)
    port_rate: np.ndarray = field(init=False)  # rate factor (0.5 = 400 -> 200 Gb/s)
    stage: np.ndarray = field(init=False)  # per node: compute time factor of its stage
    pause: np.ndarray = field(init=False)  # per node: job paused (checkpoint, restart)
    down: np.ndarray = field(init=False)  # per node: rebooting, exporter unreachable
    resets: np.ndarray = field(init=False)  # per node: counters restarted from zero this step
    events: list[Event] = field(default_factory=list)
    ras_events: list[Any] = field(default_factory=list)  # simulator.amd.RasEvent (AMD nodes)
    xgmi_down: np.ndarray = field(init=False)  # (n, 8, 8) an XGMI link carries nothing
    instance_speed: np.ndarray = field(init=False)  # (n, 8, instances) partitioned GPUs
    stop_jobs: set[int] = field(default_factory=set)  # nodes whose job crashes this step

    def __post_init__(self) -> None:
        n, g = self.n, GPUS
        self.speed = np.ones((n, g))
        self.clock = np.ones((n, g))
        self.temp_add = np.zeros((n, g))
        self.power_cap_w = np.full((n, g), np.inf)
        self.throttle = np.zeros((n, g), dtype=np.int64)
        self.lost = np.zeros((n, g), dtype=bool)
        self.hung = np.zeros((n, g), dtype=bool)
        self.recovery = np.zeros((n, g), dtype=np.int64)
        self.remap_pending = np.zeros((n, g), dtype=bool)
        self.remap_failed = np.zeros((n, g), dtype=bool)
        self.pcie_gen = np.zeros((n, g), dtype=np.int64)
        self.pcie_width = np.zeros((n, g), dtype=np.int64)
        self.link_down = np.zeros((n, g, LINKS), dtype=bool)
        self.port_state = np.full((n, PORTS), PORT_ACTIVE, dtype=np.int64)
        self.port_phys = np.full((n, PORTS), PHYS_LINK_UP, dtype=np.int64)
        self.port_rate = np.ones((n, PORTS))
        self.stage = np.ones(n)
        self.pause = np.zeros(n, dtype=bool)
        self.down = np.zeros(n, dtype=bool)
        self.resets = np.zeros(n, dtype=bool)
        self.xgmi_down = np.zeros((n, g, g), dtype=bool)
        self.instance_speed = np.ones((n, g, MAX_INSTANCES))

    def port_down(self, node: int | np.ndarray, port: int | slice, phys: int) -> None:
        self.port_state[node, port] = PORT_DOWN
        self.port_phys[node, port] = phys
