"""A :class:`Frame`: every signal of the fleet at one virtual instant, keyed by catalogue name.

The output of :meth:`simulator.fleet.Fleet.step` and the input of the analyzer's
evaluation harness; the simulator's HTTP side also renders its per-node fakes from it.
Shapes and NaN rules are documented in docs/contracts.md (Fleet simulator in virtual time).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from exporter import catalog as c
from simulator.effects import Effects, Event
from simulator.model import NodeSkus, Sku, link_exists
from simulator.state import IB, IB_FILES, FleetState

MAX_PCIE_GEN, MAX_PCIE_WIDTH = 5, 16


@dataclass(frozen=True)
class Frame:
    t: float
    metrics: dict[str, np.ndarray]
    ib_counters: dict[str, np.ndarray]  # sysfs file name -> (nodes, ports), raw
    xids: list[tuple[int, int, int]]  # (node index, gpu, xid) counted since the last step
    resets: np.ndarray  # (nodes,) True where raw counters restarted from zero (a reboot)
    events: tuple[Event, ...] = ()  # the kernel-log events behind ``xids``, with times
    ras_events: tuple[Any, ...] = ()  # AMD RAS events (simulator.amd.RasEvent) this step

    def __getitem__(self, name: str) -> np.ndarray:
        return self.metrics[name]


def _throttle_axis(bits: np.ndarray) -> np.ndarray:
    masks = np.array(list(c.THROTTLE_REASONS.values()))
    return ((bits[..., None] & masks) != 0).astype(float)


def build(
    t: float,
    st: FleetState,
    g: dict[str, np.ndarray],
    eff: Effects,
    sku: Sku | NodeSkus,
    events: list[Event],
    ras_events: tuple[Any, ...] = (),
) -> Frame:
    """Copy the model's arrays into a frame, NaN where a real scrape would deliver nothing."""
    down = eff.down
    gone = eff.lost | down[:, None]

    def gpu(a: np.ndarray) -> np.ndarray:
        mask = gone.reshape(gone.shape + (1,) * (a.ndim - 2))
        return np.where(mask, np.nan, a).astype(float)

    def full(v: float | np.ndarray) -> np.ndarray:
        return gpu(np.full(eff.lost.shape, v))

    hung = eff.hung
    m = {
        c.GPU_UP.name: np.where(down[:, None], np.nan, (~eff.lost).astype(float)),
        c.GPU_TEMPERATURE.name: gpu(np.round(g["temp"])),
        c.GPU_MEMORY_TEMPERATURE.name: gpu(np.round(g["mem_temp"])),
        c.GPU_POWER.name: gpu(g["power_w"]),
        c.GPU_POWER_LIMIT.name: gpu(g["power_limit_w"]),
        c.GPU_ENERGY.name: gpu(st.energy_j),
        c.GPU_UTILIZATION.name: gpu(np.where(hung, 0.0, g["util"])),
        c.GPU_MEMORY_UTILIZATION.name: gpu(g["mem_util"]),
        c.GPU_SM_CLOCK.name: gpu(np.round(g["sm_mhz"]) * 1e6),
        c.GPU_MEMORY_CLOCK.name: full(sku.mem_mhz * 1e6),
        c.GPU_SM_CLOCK_MAX.name: full(sku.sm_max_mhz * 1e6),
        c.GPU_MEMORY_CLOCK_MAX.name: full(sku.mem_mhz * 1e6),
        c.GPU_THROTTLE.name: gpu(_throttle_axis(g["throttle"])),
        c.GPU_MEMORY_USED.name: gpu(g["mem_used"]),
        c.GPU_MEMORY_FREE.name: gpu(sku.memory_bytes - g["mem_used"]),
        c.GPU_MEMORY_TOTAL.name: full(sku.memory_bytes),
        c.GPU_ECC_ERRORS.name: gpu(st.ecc),
        c.GPU_REMAPPED_ROWS.name: gpu(st.remapped),
        c.GPU_ROW_REMAP_PENDING.name: gpu(eff.remap_pending.astype(float)),
        c.GPU_ROW_REMAP_FAILED.name: gpu(eff.remap_failed.astype(float)),
        c.GPU_PCIE_REPLAY.name: gpu(st.pcie_replay),
        c.GPU_PCIE_GENERATION.name: gpu(np.where(eff.pcie_gen > 0, eff.pcie_gen, MAX_PCIE_GEN)),
        c.GPU_PCIE_GENERATION_MAX.name: full(MAX_PCIE_GEN),
        c.GPU_PCIE_WIDTH.name: gpu(np.where(eff.pcie_width > 0, eff.pcie_width, MAX_PCIE_WIDTH)),
        c.GPU_PCIE_WIDTH_MAX.name: full(MAX_PCIE_WIDTH),
        c.GPU_RECOVERY_ACTION.name: gpu(eff.recovery.astype(float)),
        c.NVLINK_UP.name: gpu((~eff.link_down).astype(float)),
        c.NVLINK_ERRORS.name: gpu(st.nvl_err),
        c.NVLINK_TRANSMIT.name: gpu(st.nvl_tx),
        c.NVLINK_RECEIVE.name: gpu(st.nvl_rx),
    }
    if isinstance(sku, NodeSkus):  # fewer NVLinks than 18 (A100: 12, PCIe: 0): NaN padding
        absent = ~link_exists(sku, down.shape[0])[:, None, :]
        for k in (c.NVLINK_UP, c.NVLINK_ERRORS, c.NVLINK_TRANSMIT, c.NVLINK_RECEIVE):
            a = m[k.name]
            a[np.broadcast_to(absent.reshape(absent.shape + (1,) * (a.ndim - 3)), a.shape)] = np.nan

    if st.amd.any():
        _amd(m, st, gpu)
    for key, metric in (("sm_active", c.GPU_SM_ACTIVE), ("tensor_active", c.GPU_TENSOR_ACTIVE),
                        ("step_s", c.JOB_STEP_SECONDS)):  # fmt: skip
        if key in g:  # only on fleets that model them (Fleet(signals=...))
            m[metric.name] = gpu(g[key])

    def port(a: np.ndarray) -> np.ndarray:
        return np.where(down[:, None], np.nan, a).astype(float)

    m[c.IB_PORT_STATE.name] = port(eff.port_state)
    m[c.IB_PORT_PHYS_STATE.name] = port(eff.port_phys)
    m[c.IB_PORT_RATE.name] = port(sku.hca_bytes_s * eff.port_rate)
    m[c.IB_TRANSMIT.name] = port(st.ib_tx)
    m[c.IB_RECEIVE.name] = port(st.ib_rx)
    ib = {name: port(st.ib[IB[name]]) for name in IB_FILES}
    xids = [(e.node, e.gpu, e.xid) for e in events if e.counted]
    return Frame(t, m, ib, xids, eff.resets.copy(), tuple(events), ras_events)


def _amd(m: dict[str, np.ndarray], st: FleetState, gpu: Any) -> None:
    """AMD nodes: XGMI bytes per link and RAS errors per block (NaN on NVIDIA nodes); the
    NVIDIA-only families (row remapping, NVML's recovery action) NaN on AMD nodes."""
    m[c.GPU_XGMI_TRANSMIT.name] = gpu(st.xgmi_tx)
    m[c.GPU_XGMI_RECEIVE.name] = gpu(st.xgmi_rx)
    m[c.GPU_RAS_ERRORS.name] = gpu(np.where(st.amd[:, None, None, None], st.ras, np.nan))
    for k in (c.GPU_REMAPPED_ROWS, c.GPU_ROW_REMAP_PENDING, c.GPU_ROW_REMAP_FAILED,
              c.GPU_RECOVERY_ACTION):  # fmt: skip
        a = m[k.name]
        a[st.amd] = np.nan
