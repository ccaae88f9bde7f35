"""A RoCE v2 fleet in virtual time: per-port DCQCN and PFC counters, RoCE faults, controls.

Sits beside :class:`simulator.fleet.Fleet` (which models InfiniBand fabrics) and imitates what
gpuwarden-exporter reads on a RoCE node: each mlx5 port's ``hw_counters/`` congestion and loss
files and its netdev's per-priority PFC pause time (exporter.collectors.roce_pfc). Its
:class:`RoceFrame` has the fleet ``Frame``'s shape (``t``, ``metrics``, ``ib_counters`` keyed as
the analyzer's window keys them, ``xids``, ``resets``, ``events``), so the evaluation feeds it
to the analyzer's :class:`~analyzer.sources.frames.FrameBuffer` like any fleet;
:meth:`RoceFleet.node_view` renders one node as sysfs files and ethtool statistics for the
exporter's own collectors.

Topology: rail-optimized, ``su_size`` nodes per scalable unit, port ``p`` of every node of unit
``k`` on leaf ``su<k>-rail<p>``. Traffic alternates compute and communication phases, the same
for every port (with per-port jitter); lossless priority 3.

Faults (:data:`KINDS`): ``pfc_storm`` (a port's host stops draining its receive queues: it
sends pause most of the time, its traffic collapses), ``leaf_congestion`` (one leaf's uplinks
oversubscribed: ECN marks and CNPs many times the others on every port of that leaf, some
loss), ``bad_cable`` (one port drops packets: out-of-sequence, sequence errors, adaptive
retransmissions). Negative controls: ``congested_phase`` (an all-to-all phase congesting every
port of the given units at once, pauses up to a quarter of the time) is legitimate traffic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from exporter import catalog as c

PORTS = 8
PRIORITY = "3"  # the lossless priority RoCE runs on (NVIDIA's configuration guides)
CONGESTION = c.ROCE_CONGESTION_COUNTERS
LOSS = c.ROCE_RETRANSMIT_COUNTERS
PAUSE = (f"tx_prio{PRIORITY}_pause_seconds", f"rx_prio{PRIORITY}_pause_seconds")
STORM_EVENTS = ("tx_pause_storm_warning_events", "tx_pause_storm_error_events")
COUNTERS = (*CONGESTION, *LOSS, *PAUSE, *STORM_EVENTS)
# per port per second in a communication phase (a compute phase runs at COMPUTE_SHARE of it)
BASE = {
    "np_ecn_marked_roce_packets": 900.0,
    "np_cnp_sent": 450.0,
    "rp_cnp_handled": 450.0,
    "out_of_sequence": 0.05,
    "packet_seq_err": 0.01,
    "implied_nak_seq_err": 0.01,
    "roce_adp_retrans": 0.02,
}
BASE_PAUSE_SHARE = 0.02
COMPUTE_SHARE = 0.15
PHASE_S = 240.0  # a training step's compute + communication cycle, seconds


@dataclass(frozen=True)
class RoceFault:
    id: int
    kind: str
    onset: float
    end: float
    node: int = -1  # pfc_storm, bad_cable
    port: int = -1
    unit: int = -1  # leaf_congestion: the leaf su<unit>-rail<port>
    units: tuple[int, ...] = ()  # congested_phase: the scalable units it spans
    severity: float = 1.0


@dataclass(frozen=True)
class FaultKind:
    name: str
    hardware: bool  # False: a negative control (nothing should be reported)
    finding: str  # the finding kind that names it right ("" for a control)


KINDS = {k.name: k for k in (
    FaultKind("pfc_storm", True, "roce_pfc_storm"),
    FaultKind("leaf_congestion", True, "roce_fabric_congestion"),
    FaultKind("bad_cable", True, "roce_retransmits"),
    FaultKind("congested_phase", False, ""),
)}  # fmt: skip


@dataclass(frozen=True)
class RoceFrame:
    t: float
    metrics: dict[str, np.ndarray]
    ib_counters: dict[str, np.ndarray]  # Window.ib_counters keys -> (nodes, ports), raw
    xids: list[tuple[int, int, int]] = field(default_factory=list)
    resets: np.ndarray = field(default_factory=lambda: np.zeros(0, bool))
    events: tuple[Any, ...] = ()


class RoceFleet:
    def __init__(self, nodes: int = 32, su_size: int = 8, seed: int = 0, step: float = 15.0):
        if nodes < su_size or nodes % su_size:
            raise ValueError(f"nodes ({nodes}) must be a multiple of su_size ({su_size})")
        self.nodes = tuple(f"roce-node-{i:03d}" for i in range(nodes))
        self.ports = tuple(f"mlx5_{p}/1" for p in range(PORTS))
        self.su_size, self.step, self.t = su_size, step, 0.0
        self.rng = np.random.default_rng(seed)
        self.counters = {k: np.zeros((nodes, PORTS)) for k in COUNTERS}
        self.faults: list[RoceFault] = []
        self.leaf_of: dict[int, str] = {}  # per node: none (the fabric is built per port)

    # ------------------------------------------------------------------ topology
    def port_leaf(self) -> dict[tuple[int, int], str]:
        return {(i, p): self.leaf(i, p) for i in range(len(self.nodes)) for p in range(PORTS)}

    def leaf(self, i: int, p: int) -> str:
        return f"su{i // self.su_size}-rail{p}"

    @property
    def units(self) -> int:
        return len(self.nodes) // self.su_size

    # ------------------------------------------------------------------ faults
    def inject(self, kind: str, onset: float, duration: float, **where: Any) -> RoceFault:
        if kind not in KINDS:
            raise ValueError(f"unknown RoCE fault kind {kind!r}; known: {sorted(KINDS)}")
        f = RoceFault(len(self.faults), kind, onset, onset + duration, **where)
        self.faults.append(f)
        return f

    def truth(self) -> list[dict[str, Any]]:
        """Injected faults whose onset has passed, with where a right finding names them."""
        out = []
        for f in self.faults:
            if f.onset > self.t:
                continue
            k = KINDS[f.kind]
            d: dict[str, Any] = {"id": f.id, "kind": f.kind, "onset": f.onset, "end": f.end,
                                 "hardware": k.hardware, "negative_control": not k.hardware,
                                 "finding": k.finding}  # fmt: skip
            if f.kind == "leaf_congestion":
                leaf = f"su{f.unit}-rail{f.port}"
                d |= {"node": leaf, "subject": f"switch={leaf}",
                      "nodes": list(self._unit_nodes(f.unit))}  # fmt: skip
            elif f.kind == "congested_phase":
                d |= {"node": "fabric", "subject": "",
                      "nodes": [n for u in f.units for n in self._unit_nodes(u)],
                      "leaves": [f"su{u}-rail{p}" for u in f.units for p in range(PORTS)]}  # fmt: skip
            else:
                d |= {"node": self.nodes[f.node], "subject": f"port={self.ports[f.port]}",
                      "nodes": [self.nodes[f.node]]}  # fmt: skip
            out.append(d)
        return out

    def _unit_nodes(self, u: int) -> tuple[str, ...]:
        return self.nodes[u * self.su_size : (u + 1) * self.su_size]

    # ------------------------------------------------------------------ time
    def step_frame(self) -> RoceFrame:
        """Advance one step and return what a scrape at the new time reads."""
        self.t += self.step
        rates, share = self._rates()
        dt = self.step
        for k, r in rates.items():
            self.counters[k] += self.rng.poisson(np.maximum(r, 0.0) * dt) if r.max() < 50 else (
                np.maximum(r, 0.0) * dt)  # fmt: skip
        self.counters[PAUSE[0]] += np.clip(share, 0.0, 1.0) * dt
        self.counters[PAUSE[1]] += np.clip(share * 0.3, 0.0, 1.0) * dt
        state = np.full((len(self.nodes), PORTS), 4.0)
        return RoceFrame(self.t, {c.IB_PORT_STATE.name: state},
                         {k: v.copy() for k, v in self.counters.items()},
                         resets=np.zeros(len(self.nodes), bool))  # fmt: skip

    def _busy(self) -> float:
        """Communication share of the current instant: compute then communicate, each half."""
        return 1.0 if (self.t % PHASE_S) >= PHASE_S / 2 else COMPUTE_SHARE

    def _rates(self) -> tuple[dict[str, np.ndarray], np.ndarray]:
        N = len(self.nodes)
        busy = np.full((N, PORTS), self._busy())
        jitter = self.rng.lognormal(0.0, 0.25, (N, PORTS))
        loss_extra = {k: np.zeros((N, PORTS)) for k in LOSS}
        storm_err = np.zeros((N, PORTS))
        share = BASE_PAUSE_SHARE * busy * jitter
        cong_mult = np.ones((N, PORTS))
        for f in self.faults:
            if not f.onset <= self.t < f.end:
                continue
            if f.kind == "congested_phase":
                for u in f.units:
                    rows = slice(u * self.su_size, (u + 1) * self.su_size)
                    cong_mult[rows] *= 10.0 * f.severity
                    share[rows] = np.maximum(share[rows], 0.12 * f.severity * jitter[rows])
            elif f.kind == "leaf_congestion":
                rows = slice(f.unit * self.su_size, (f.unit + 1) * self.su_size)
                cong_mult[rows, f.port] *= 12.0 * f.severity
                share[rows, f.port] = np.maximum(share[rows, f.port], 0.15 * jitter[rows, f.port])
                loss_extra["out_of_sequence"][rows, f.port] += 2.0 * f.severity
            elif f.kind == "bad_cable":
                loss_extra["out_of_sequence"][f.node, f.port] += 30.0 * f.severity
                loss_extra["packet_seq_err"][f.node, f.port] += 6.0 * f.severity
                loss_extra["roce_adp_retrans"][f.node, f.port] += 8.0 * f.severity
                cong_mult[f.node, f.port] *= 1.3
            elif f.kind == "pfc_storm":
                share[f.node, f.port] = min(1.0, 0.9 + 0.08 * self.rng.random())
                cong_mult[f.node, f.port] *= 0.05  # its traffic collapses
                if self.t - f.onset > 60.0:  # the NIC's stall watermark is crossed later
                    storm_err[f.node, f.port] = 1.0 / 60.0
        rates = {k: BASE[k] * busy * jitter * cong_mult for k in CONGESTION}
        rates |= {k: BASE[k] * np.ones((N, PORTS)) + loss_extra[k] for k in LOSS}
        rates["tx_pause_storm_error_events"] = storm_err
        rates["tx_pause_storm_warning_events"] = storm_err * 2
        return rates, share

    # ------------------------------------------------------------------ the exporter's view
    def node_view(self, i: int) -> tuple[dict[str, str], dict[str, dict[str, int]]]:
        """Node ``i`` now as the exporter reads it: sysfs files (``class/infiniband/...``)
        and each RoCE netdev's ethtool statistics (``<rx|tx>_prio3_pause[_duration]`` in
        microseconds, as mlx5 reports them)."""
        files: dict[str, str] = {}
        stats: dict[str, dict[str, int]] = {}
        for p in range(PORTS):
            dev, ndev = f"mlx5_{p}", f"ens{p}f0np0"
            base = f"class/infiniband/{dev}/ports/1"
            files |= {f"{base}/link_layer": "Ethernet\n", f"{base}/state": "4: ACTIVE\n",
                      f"{base}/gid_attrs/ndevs/0": ndev + "\n"}  # fmt: skip
            for k in (*CONGESTION, *LOSS):
                files[f"{base}/hw_counters/{k}"] = f"{int(self.counters[k][i, p])}\n"
            s = {}
            for direction, key in (("tx", PAUSE[0]), ("rx", PAUSE[1])):
                us = int(self.counters[key][i, p] * 1e6 + 0.5)
                s[f"{direction}_prio{PRIORITY}_pause_duration"] = us
                s[f"{direction}_prio{PRIORITY}_pause"] = us // 50  # frames: ~50 us quanta each
            for k in STORM_EVENTS:
                s[k] = int(self.counters[k][i, p])
            stats[ndev] = s
        return files, stats
