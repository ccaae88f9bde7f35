"""One simulated node as the real exporter sees it: FakeNvml, DictSysfs and ListKernelLog.

Sits between a :class:`~simulator.frame.Frame` (the fleet's arrays) and the exporter's
real collectors. :meth:`NodeView.refresh` copies one node's slice of a frame into the fakes in
each source's own units (NVML mW / mJ / MHz / %, sysfs text with data in 4-byte words), and
appends that node's new kernel-log events. Views are made lazily and refreshed only when a
node is scraped, so a big fleet costs nothing for nodes nobody reads.
"""

from __future__ import annotations

import numpy as np
import pynvml

from exporter import catalog as c
from exporter.collectors.base import ReadErrors
from exporter.sources.kmsg import ListKernelLog
from exporter.sources.steps import StepReport
from exporter.sources.sysfs import DictSysfs
from simulator.effects import Event
from simulator.frame import Frame
from simulator.kernel_log import kmsg_lines
from simulator.nvl72 import GPUS_PER_NODE
from simulator.nvml_fake import FACTORIES, FakeGpuState, FakeNvml
from simulator.partitions import MIG_PROFILES, Layout
from simulator.state import IB_COUNTERS, IB_HW_COUNTERS
from simulator.topology import GPUS, PORTS, gpu_uuid, pci_bus_id

DRIVER = "550.127.05"
ECC_COUNTER = (pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC)
ECC_KEYS = [
    [(pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, ct) for ct in ECC_COUNTER],
    [(pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, ct) for ct in ECC_COUNTER],
]  # frame axes: error_type x counter_type
NVLINK_COUNTER = (
    pynvml.NVML_NVLINK_ERROR_DL_CRC_FLIT,
    pynvml.NVML_NVLINK_ERROR_DL_CRC_DATA,
    pynvml.NVML_NVLINK_ERROR_DL_REPLAY,
    pynvml.NVML_NVLINK_ERROR_DL_RECOVERY,
)  # catalog.NVLINK_ERROR_TYPES order
THROTTLE_BITS = np.array(list(c.THROTTLE_REASONS.values()))
STATE = {1: "1: DOWN", 2: "2: INIT", 3: "3: ARMED", 4: "4: ACTIVE"}
PHYS = {2: "2: Polling", 3: "3: Disabled", 5: "5: LinkUp"}
SPEED = {400: "400 Gb/sec (4X NDR)", 200: "200 Gb/sec (4X HDR)", 100: "100 Gb/sec (4X EDR)"}
STATIC_COUNTERS = ("VL15_dropped", "port_rcv_constraint_errors", "port_rcv_switch_relay_errors",
                   "port_xmit_constraint_errors")  # fmt: skip


class SimJobMap:
    """This node's job map as the Slurm prolog writes it (GPU index -> job id): an exporter
    ``JobMap`` for the simulator's own jobs, so nodes serve ``gpu_allocation_info``."""

    scheduler = "slurm"

    def __init__(self) -> None:
        self.current: dict[str, str] = {}

    def allocations(self) -> dict[str, str]:
        return dict(self.current)


class SimSteps:
    """This node's published step times (what ``checkpoint.publish_step`` would have written),
    for fleets that model them: an exporter ``StepSource``."""

    def __init__(self) -> None:
        self.current: list[StepReport] = []
        self.read_errors = ReadErrors()

    def reports(self) -> list[StepReport]:
        return list(self.current)


def _base(p: int) -> str:
    return f"class/infiniband/mlx5_{p}"


class NodeView:
    """The fakes of node ``index``; ``name`` is what the exporter calls the node."""

    def __init__(
        self,
        name: str,
        index: int,
        sku: str = "h100",
        mig_profile: str | None = None,
        layout: Layout | None = None,
    ) -> None:
        self.name, self.index, self.sku = name, index, sku
        factory = FACTORIES.get(sku, FakeGpuState.h100)
        gpus = [factory(g, seed=name) for g in range(GPUS_PER_NODE.get(sku, GPUS))]
        for g, gpu in enumerate(gpus):
            gpu.uuid = gpu_uuid(name, g)
            if sku not in GPUS_PER_NODE:  # an NVL72 tray keeps its own PCI domains
                gpu.pci_bus_id = pci_bus_id(g)
            if mig_profile:  # a MIG node: every GPU split into instances of this profile
                gpu.partition(mig_profile)
            part = layout[g] if layout is not None and g < len(layout) else None
            if part is not None and not part.amd:  # the fleet's MIG layout for this GPU
                gpu.partition(part.profile, part.count, part.instance_ids(),
                              MIG_PROFILES[part.profile][1])  # fmt: skip
        self.nvml = FakeNvml(gpus, driver_version=DRIVER)
        self.sysfs = DictSysfs(self._static_files(index))
        self.kmsg = ListKernelLog()
        self.jobs = SimJobMap()
        self.steps = SimSteps()
        self.events_seen = 0
        self._seq = 1000

    @staticmethod
    def _static_files(index: int) -> dict[str, str]:
        files: dict[str, str] = {}
        for p in range(PORTS):
            b = _base(p)
            files |= {f"{b}/board_id": "MT_0000000838", f"{b}/fw_ver": "28.39.1002",
                      f"{b}/hca_type": "MT4129", f"{b}/node_guid": f"b83f:d203:{index:04x}:{p:04x}",
                      f"{b}/ports/1/link_layer": "InfiniBand"}  # fmt: skip
            files |= {f"{b}/ports/1/counters/{n}": "0" for n in STATIC_COUNTERS}
        return files

    def refresh(
        self, frame: Frame, events: list[Event], allocation: dict[str, str] | None = None
    ) -> None:
        """Copy this node's values from ``frame``, log its events not yet logged, and (when
        given) set its job map: GPU index -> job id."""
        i = self.index
        if allocation is not None:
            self.jobs.current = allocation
        up = frame[c.GPU_UP.name][i]
        if np.isnan(up).all():
            return  # the node is down: nothing to read (the server answers 503)
        for g, gpu in enumerate(self.nvml.gpus):
            gpu.lost = bool(up[g] == 0)
            if not gpu.lost:
                _gpu(gpu, frame, i, g)
                _instances(gpu, frame, i, g)
        self._ports(frame, i)
        self._steps(frame, i)
        for e in events[self.events_seen :]:
            self._seq += 1
            self.kmsg.extend(kmsg_lines(e, self._seq, self.sku))
        self.events_seen = len(events)

    def _steps(self, frame: Frame, i: int) -> None:
        if c.JOB_STEP_SECONDS.name not in frame.metrics:
            return
        st = frame[c.JOB_STEP_SECONDS.name][i]
        self.steps.current = [
            StepReport(job, gpu, float(st[int(gpu)]), frame.t)
            for gpu, job in self.jobs.current.items()
            if int(gpu) < len(st) and np.isfinite(st[int(gpu)])
        ]

    def _ports(self, frame: Frame, i: int) -> None:
        state = frame[c.IB_PORT_STATE.name][i].astype(int).tolist()
        phys = frame[c.IB_PORT_PHYS_STATE.name][i].astype(int).tolist()
        gbps = (frame[c.IB_PORT_RATE.name][i] * 8 / 1e9).round().astype(int).tolist()
        tx = (frame[c.IB_TRANSMIT.name][i] // 4).astype(np.int64).tolist()
        rx = (frame[c.IB_RECEIVE.name][i] // 4).astype(np.int64).tolist()
        counters = {n: frame.ib_counters[n][i].astype(np.int64).tolist() for n in IB_COUNTERS}
        hw = {n: frame.ib_counters[n][i].astype(np.int64).tolist() for n in IB_HW_COUNTERS}
        s = self.sysfs
        for p in range(PORTS):
            b = f"{_base(p)}/ports/1"
            s.set(f"{b}/state", STATE[state[p]])
            s.set(f"{b}/phys_state", PHYS[phys[p]])
            s.set(f"{b}/rate", SPEED.get(gbps[p], f"{gbps[p]} Gb/sec"))
            s.set(f"{b}/counters/port_xmit_data", str(tx[p]))
            s.set(f"{b}/counters/port_rcv_data", str(rx[p]))
            for n, v in counters.items():
                s.set(f"{b}/counters/{n}", str(v[p]))
            for n, v in hw.items():
                s.set(f"{b}/hw_counters/{n}", str(v[p]))


def _gpu(gpu: FakeGpuState, f: Frame, i: int, g: int) -> None:
    """One GPU's NVML state, in NVML's units."""
    v = {m.name: float(f[m.name][i, g]) for m in (c.GPU_TEMPERATURE, c.GPU_MEMORY_TEMPERATURE,
         c.GPU_POWER, c.GPU_POWER_LIMIT, c.GPU_ENERGY, c.GPU_UTILIZATION,
         c.GPU_MEMORY_UTILIZATION, c.GPU_SM_CLOCK, c.GPU_MEMORY_CLOCK, c.GPU_MEMORY_USED,
         c.GPU_PCIE_REPLAY, c.GPU_PCIE_GENERATION, c.GPU_PCIE_WIDTH, c.GPU_RECOVERY_ACTION,
         c.GPU_ROW_REMAP_PENDING, c.GPU_ROW_REMAP_FAILED)}  # fmt: skip
    gpu.temperature_c = int(v[c.GPU_TEMPERATURE.name])
    gpu.memory_temperature_c = int(v[c.GPU_MEMORY_TEMPERATURE.name])
    gpu.power_mw = int(v[c.GPU_POWER.name] * 1000)
    gpu.power_limit_mw = int(v[c.GPU_POWER_LIMIT.name] * 1000)
    gpu.energy_mj = int(v[c.GPU_ENERGY.name] * 1000)
    gpu.util_gpu_pct = round(v[c.GPU_UTILIZATION.name] * 100)
    gpu.util_memory_pct = round(v[c.GPU_MEMORY_UTILIZATION.name] * 100)
    gpu.sm_clock_mhz = round(v[c.GPU_SM_CLOCK.name] / 1e6)
    gpu.mem_clock_mhz = round(v[c.GPU_MEMORY_CLOCK.name] / 1e6)
    gpu.memory_used = int(v[c.GPU_MEMORY_USED.name])
    gpu.throttle_reasons = int(THROTTLE_BITS[f[c.GPU_THROTTLE.name][i, g] > 0].sum())
    ecc = f[c.GPU_ECC_ERRORS.name][i, g]
    gpu.ecc = {ECC_KEYS[e][ct]: int(ecc[e, ct]) for e in (0, 1) for ct in (0, 1)}
    rows = f[c.GPU_REMAPPED_ROWS.name][i, g]
    gpu.remapped_rows = (int(rows[0]), int(rows[1]), int(v[c.GPU_ROW_REMAP_PENDING.name]),
                         int(v[c.GPU_ROW_REMAP_FAILED.name]))  # fmt: skip
    gpu.pcie_replay = int(v[c.GPU_PCIE_REPLAY.name])
    gpu.pcie_gen = int(v[c.GPU_PCIE_GENERATION.name])
    gpu.pcie_width = int(v[c.GPU_PCIE_WIDTH.name])
    gpu.recovery_action = int(v[c.GPU_RECOVERY_ACTION.name])
    links = len(gpu.nvlink_state)  # the model's (A100 12, PCIe 0); the frame's rest is NaN
    gpu.nvlink_state = f[c.NVLINK_UP.name][i, g, :links].astype(int).tolist()
    err = f[c.NVLINK_ERRORS.name][i, g, :links].astype(np.int64).tolist()
    gpu.nvlink_errors = {
        (lk, NVLINK_COUNTER[k]): err[lk][k] for lk in range(links) for k in range(4) if err[lk][k]
    }
    gpu.nvlink_tx_bytes = f[c.NVLINK_TRANSMIT.name][i, g, :links].astype(np.int64).tolist()
    gpu.nvlink_rx_bytes = f[c.NVLINK_RECEIVE.name][i, g, :links].astype(np.int64).tolist()
    # GPM profiling: the fleet's activity where it models it, else what utilisation implies
    util = v[c.GPU_UTILIZATION.name]
    sm = f.metrics.get(c.GPU_SM_ACTIVE.name)
    tensor = f.metrics.get(c.GPU_TENSOR_ACTIVE.name)
    gpu.sm_active_pct = 100 * (float(sm[i, g]) if sm is not None else 0.9 * util)
    gpu.tensor_active_pct = 100 * (float(tensor[i, g]) if tensor is not None else 0.6 * util)
    gpu.gr_engine_active_pct = 100 * util


def _instances(gpu: FakeGpuState, f: Frame, i: int, g: int) -> None:
    """Each MIG device's own activity, where the fleet models its instances."""
    act = f.metrics.get(c.GPU_MIG_GRAPHICS_ACTIVE.name)
    if act is None or not gpu.mig_devices:
        return
    for slot, mig in enumerate(gpu.mig_devices):
        v = float(act[i, g, slot]) if slot < act.shape[2] else float("nan")
        mig.gr_engine_active_pct = None if v != v else 100.0 * v
