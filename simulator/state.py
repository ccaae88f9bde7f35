"""The fleet's counters and slow-moving physical state, as numpy arrays (raw, as hardware has them).

Sits inside :class:`simulator.fleet.Fleet`: the model adds baseline growth each step,
faults add their own increments, a reboot zeroes what a driver reload or a port reset zeroes.
Counters here are *raw*: they restart from zero on a reboot (``Frame.resets`` says where).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from exporter.catalog import RAS_BLOCKS, RAS_ERROR_TYPES
from simulator.topology import GPUS, LINKS, PORTS

# sysfs ports/<p>/counters files the fleet models (data counters are kept in bytes apart).
IB_COUNTERS = (
    "symbol_error",
    "link_error_recovery",
    "link_downed",
    "port_rcv_errors",
    "port_rcv_remote_physical_errors",
    "port_xmit_discards",
    "local_link_integrity_errors",
    "excessive_buffer_overrun_errors",
    "port_xmit_wait",
    "port_xmit_packets",
    "port_rcv_packets",
)
# ports/<p>/hw_counters files (mlx5).
IB_HW_COUNTERS = ("local_ack_timeout_err", "out_of_sequence", "packet_seq_err", "rnr_nak_retry_err")
IB_FILES = IB_COUNTERS + IB_HW_COUNTERS
IB = {name: i for i, name in enumerate(IB_FILES)}

# ECC axes: error_type (corrected, uncorrected) x counter_type (volatile, aggregate).
CORRECTED, UNCORRECTED = 0, 1
VOLATILE, AGGREGATE = 0, 1
# NVLink error axis in catalog.NVLINK_ERROR_TYPES order.
CRC_FLIT, CRC_DATA, REPLAY, RECOVERY = 0, 1, 2, 3


@dataclass
class FleetState:
    energy_j: np.ndarray
    ecc: np.ndarray  # (n, 8, 2, 2)
    remapped: np.ndarray  # (n, 8, 2): correctable, uncorrectable rows (persist across reboots)
    pcie_replay: np.ndarray
    nvl_err: np.ndarray  # (n, 8, 18, 4)
    nvl_tx: np.ndarray
    nvl_rx: np.ndarray
    ib_tx: np.ndarray  # (n, 8) bytes
    ib_rx: np.ndarray
    ib: np.ndarray  # (len(IB_FILES), n, 8)
    temp: np.ndarray  # (n, 8) lagged core temperature
    sbe_rate: np.ndarray  # (n, 8) background corrected-ECC events per second
    symbol_rate: np.ndarray  # (n, 8) background symbol errors per second on a healthy port
    # AMD nodes only (empty until :meth:`enable_amd`, so NVIDIA fleets pay nothing)
    amd: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))  # (n,)
    xgmi_tx: np.ndarray = field(default_factory=lambda: np.zeros((0, GPUS, 8)))  # (n, 8, 8)
    xgmi_rx: np.ndarray = field(default_factory=lambda: np.zeros((0, GPUS, 8)))
    ras: np.ndarray = field(default_factory=lambda: np.zeros((0, GPUS, 0, 3)))  # block x type

    @classmethod
    def new(cls, n: int, rng: np.random.Generator) -> FleetState:
        """A fleet some days into its life: lifetime ECC counts and uptime traffic already there."""
        g = (n, GPUS)
        ecc = np.zeros((*g, 2, 2))
        ecc[:, :, CORRECTED, AGGREGATE] = rng.poisson(3.0, g)
        ib = np.zeros((len(IB_FILES), n, PORTS))
        ib[IB["symbol_error"]] = rng.poisson(20.0, (n, PORTS))
        ib[IB["port_xmit_wait"]] = rng.poisson(1e6, (n, PORTS))
        return cls(
            energy_j=rng.uniform(1e6, 5e7, g),
            ecc=ecc,
            remapped=np.zeros((*g, 2)),
            pcie_replay=rng.poisson(1.0, g).astype(float),
            nvl_err=np.zeros((*g, LINKS, 4)),
            nvl_tx=rng.uniform(1e12, 1e14, (*g, LINKS)),
            nvl_rx=rng.uniform(1e12, 1e14, (*g, LINKS)),
            ib_tx=rng.uniform(1e13, 1e15, (n, PORTS)),
            ib_rx=rng.uniform(1e13, 1e15, (n, PORTS)),
            ib=ib,
            temp=rng.uniform(30.0, 34.0, g),
            sbe_rate=rng.lognormal(np.log(1 / (7 * 86400)), 1.0, g),
            symbol_rate=rng.lognormal(np.log(1 / 900), 1.0, (n, PORTS)),
        )

    def enable_amd(self, amd: np.ndarray) -> None:
        """Model AMD nodes (``amd``: per node): XGMI traffic per link and RAS errors per block
        (no draw from the generator, so the rest of the fleet replays as before)."""
        from simulator.amd import xgmi_start

        n = amd.size
        self.amd = amd.copy()
        self.xgmi_tx = np.where(amd[:, None, None], xgmi_start(n, GPUS), np.nan)
        self.xgmi_rx = self.xgmi_tx * 0.97
        self.ras = np.zeros((n, GPUS, len(RAS_BLOCKS), len(RAS_ERROR_TYPES)))

    def reset(self, nodes: np.ndarray) -> None:
        """A reboot: the driver reloads and the HCAs reset; lifetime counts survive."""
        self.energy_j[nodes] = 0.0
        self.ecc[nodes, :, :, VOLATILE] = 0.0
        self.pcie_replay[nodes] = 0.0
        self.nvl_err[nodes] = 0.0
        self.nvl_tx[nodes] = 0.0
        self.nvl_rx[nodes] = 0.0
        self.ib_tx[nodes] = 0.0
        self.ib_rx[nodes] = 0.0
        self.ib[:, nodes] = 0.0
        self.temp[nodes] = 30.0
        if self.amd.any():  # the amdgpu driver reloads: XGMI and RAS counters restart
            self.xgmi_tx[nodes] = np.where(self.amd[nodes, None, None], 0.0, np.nan)
            self.xgmi_rx[nodes] = self.xgmi_tx[nodes]
            self.ras[nodes] = 0.0
