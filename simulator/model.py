"""One step of the fleet's physics: jobs + fault effects -> utilisation, clocks, power, traffic.

The vectorised middle of :mod:`simulator`: pure numpy over (nodes, GPUs[, links]) arrays.
Synchronous jobs: every GPU of a job waits at each step for the slowest one, so a slow GPU
(straggler, throttling) works longer per step while its peers idle more; an uneven pipeline
stage makes a whole group of nodes work longer at normal clocks. NCCL waits count as idle,
or (``busy_wait``) as ~100 % utilisation at lower power, as NVML reports real NCCL jobs.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np

from exporter import catalog_specs
from simulator.effects import PORT_ACTIVE, Effects
from simulator.jobs import Jobs
from simulator.state import CORRECTED, CRC_FLIT, IB, FleetState
from simulator.topology import GPUS, LINKS

IDLE_BIT = 0x1  # nvmlClocksEventReasonGpuIdle
NDR_BYTES_S = 400e9 / 8
NVLINK_GPU_BYTES_S = 450e9  # NVLink 4: 900 GB/s bidirectional per GPU
TEMP_TAU_S = 60.0
WAIT_POWER = 0.4  # a rank spinning in an NCCL collective: share of full dynamic power


@dataclass(frozen=True)
class Sku:
    name: str
    sm_max_mhz: float = 1980.0
    sm_idle_mhz: float = 345.0
    mem_mhz: float = 2619.0
    memory_bytes: float = 85_520_809_984.0
    power_limit_w: float = 700.0
    idle_w: float = 70.0
    links: int = LINKS  # NVLinks per GPU (0: PCIe card)
    hca_bytes_s: float = NDR_BYTES_S  # the rate its IB ports train to


_A100, _L40S = catalog_specs.BY_KEY["a100-sxm"], catalog_specs.BY_KEY["l40s"]
_MI300X = catalog_specs.BY_KEY["mi300x"]
SKUS = {
    "h100": Sku("NVIDIA H100 80GB HBM3"),
    "h200": Sku("NVIDIA H200", mem_mhz=3201.0, memory_bytes=150_754_820_096.0),
    # older and PCIe generations for mixed fleets: values from the catalogue's spec table
    "a100": Sku("NVIDIA A100-SXM4-80GB", _A100.sm_clock_max_hz / 1e6, 210.0, 1593.0,
                85_899_345_920.0, _A100.power_limit_w, 55.0, _A100.nvlinks,
                catalog_specs.HCA_RATES["HDR"]),
    "l40s": Sku("NVIDIA L40S", _L40S.sm_clock_max_hz / 1e6, 210.0, 9001.0, 48_305_799_168.0,
                _L40S.power_limit_w, 35.0, _L40S.nvlinks, NDR_BYTES_S),
    # AMD Instinct MI300X OAM (simulator.amd): XGMI, not NVLink (links 0); the catalogue's spec
    "mi300x": Sku("AMD Instinct MI300X OAM", _MI300X.sm_clock_max_hz / 1e6, 132.0, 1300.0,
                  206_141_652_992.0, _MI300X.power_limit_w, 140.0, 0, NDR_BYTES_S),
    # a GB200 NVL72 compute tray (4 GPUs of its 8 frame columns served: simulator.nvl72)
    "gb200-nvl72": Sku("NVIDIA GB200", 2062.0, 345.0, 3996.0, 198_642_237_440.0, 1200.0, 120.0,
                       LINKS),
}  # fmt: skip


@dataclass(frozen=True)
class NodeSkus:
    """A mixed fleet's GPU models: every numeric :class:`Sku` field as an (n, 1) column that
    broadcasts over (nodes, GPUs), so the model's arithmetic is the same as for one model.
    ``power_limit_w`` is the enforced limit (the model's, or an administrator's lower cap)."""

    names: tuple[str, ...]
    sm_max_mhz: np.ndarray
    sm_idle_mhz: np.ndarray
    mem_mhz: np.ndarray
    memory_bytes: np.ndarray
    power_limit_w: np.ndarray
    idle_w: np.ndarray
    links: np.ndarray
    hca_bytes_s: np.ndarray

    @classmethod
    def of(cls, skus: Sequence[Sku], caps_w: Sequence[float] | None = None) -> NodeSkus:
        col = {f.name: np.array([[float(getattr(s, f.name))] for s in skus])
               for f in fields(Sku) if f.name != "name"}  # fmt: skip
        if caps_w is not None:
            col["power_limit_w"] = np.minimum(col["power_limit_w"], np.asarray(caps_w)[:, None])
        return cls(names=tuple(s.name for s in skus), **col)


def link_exists(sku: Sku | NodeSkus, n: int) -> np.ndarray:
    """(n, LINKS) True where the node's GPUs have that NVLink (A100: 12, PCIe: none)."""
    links = np.broadcast_to(np.asarray(sku.links, dtype=float).reshape(-1, 1), (n, 1))
    return np.arange(LINKS)[None, :] < links


@dataclass
class JobArrays:
    """Per-node view of the running jobs, rebuilt only when membership changes."""

    job_of: np.ndarray
    step_s: np.ndarray
    compute: np.ndarray
    start: np.ndarray
    ib_load: np.ndarray
    in_use: np.ndarray  # (n, 8) bool
    multi: np.ndarray  # node is part of a multi-node job

    @classmethod
    def of(cls, jobs: Jobs) -> JobArrays:
        n = jobs.n_nodes
        a = cls(
            jobs.job_of.copy(),
            np.ones(n),
            np.zeros(n),
            np.zeros(n),
            np.zeros(n),
            np.zeros((n, GPUS), dtype=bool),
            np.zeros(n, dtype=bool),
        )
        for j in jobs.running.values():
            a.step_s[j.nodes], a.compute[j.nodes], a.start[j.nodes] = j.step_s, j.compute, j.start
            a.ib_load[j.nodes] = j.ib_load
            a.in_use[j.nodes, : j.gpus] = True
            a.multi[j.nodes] = j.nodes.size > 1
        return a


def busy_share(ja: JobArrays, eff: Effects, active: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(busy share of each GPU, step time / nominal step time per node) for synchronous jobs."""
    comp = np.where(active, ja.compute[:, None] * eff.stage[:, None] / eff.speed, 0.0)
    node_max = comp.max(axis=1)
    slots, inv = np.unique(ja.job_of, return_inverse=True)
    job_max = np.zeros(slots.size)
    np.maximum.at(job_max, inv, node_max)
    job_max = np.where(slots < 0, 0.0, job_max)  # idle nodes are not one job
    step_rel = np.where(ja.job_of >= 0, job_max[inv] + (1.0 - ja.compute), 1.0)
    step_rel = np.maximum(step_rel, np.where(ja.job_of >= 0, node_max + 1 - ja.compute, 1.0))
    return comp / step_rel[:, None], step_rel


def gauges(
    st: FleetState,
    ja: JobArrays,
    eff: Effects,
    sku: Sku | NodeSkus,
    t0: float,
    t1: float,
    rng: np.random.Generator,
    busy_wait: bool = False,
    signals: Sequence[str] = (),
) -> dict[str, np.ndarray]:
    """Advance ``st`` from t0 to t1 and return the instantaneous values at t1. With
    ``busy_wait`` a multi-node job's GPUs show ~100 % utilisation while they wait at the
    collective (a spinning kernel draws ``WAIT_POWER`` of the dynamic power)."""
    dt = t1 - t0
    n = ja.job_of.size
    active = ja.in_use & ~eff.pause[:, None] & ~eff.down[:, None] & ~eff.lost & ~eff.hung
    busy, step_rel = busy_share(ja, eff, active)
    phase = ((t1 - ja.start) / (ja.step_s * step_rel)) % 1.0  # same phase for a job's peers
    wave = 0.06 * np.cos(2 * np.pi * phase)[:, None]
    util = np.clip(busy + wave + rng.normal(0, 0.015, (n, GPUS)), 0.0, 1.0) * active
    load = util  # what draws power: compute (and, busy-waiting, a spinning collective)
    if busy_wait:  # NCCL: peers wait inside collective kernels, so NVML counts them busy
        spin = np.where(ja.multi[:, None] & active, 1.0 - busy, 0.0)
        load = np.clip(busy + WAIT_POWER * spin + wave, 0.0, 1.0) * active
        util = np.where(spin > 0, np.clip(0.99 + rng.normal(0, 0.005, (n, GPUS)), 0, 1), util)
    clock_f = np.where(active, eff.clock, 1.0)
    sm = np.where(active, sku.sm_max_mhz * clock_f, sku.sm_idle_mhz)
    dyn = (sku.power_limit_w - sku.idle_w) * load**0.9 * clock_f**2
    power = np.minimum(sku.idle_w + dyn + rng.normal(0, 3.0, (n, GPUS)), eff.power_cap_w)
    power = np.minimum(power, sku.power_limit_w)
    target = 27.0 + 0.075 * power + eff.temp_add
    st.temp += (target - st.temp) * (1.0 - np.exp(-dt / TEMP_TAU_S))
    st.energy_j += np.where(eff.down[:, None] | eff.lost, 0.0, power * dt)
    mem_used = np.where(ja.in_use, 0.8 * sku.memory_bytes, 555_745_280.0)
    throttle = eff.throttle | np.where(active, 0, IDLE_BIT)
    # Bytes per step are fixed by the job, so a stretched step (a straggler, an uneven stage)
    # moves fewer bytes per second everywhere in the job; waiting is not transmitting.
    comm = np.where(active, ((1.0 - ja.compute) / step_rel)[:, None], 0.0)
    _traffic(st, ja, eff, sku, comm, dt, rng)
    _background(st, eff, dt, rng)
    out = _signals(signals, ja, busy, step_rel, active, busy_wait, rng)
    return out | {
        "util": util,
        "mem_util": util * 0.6,
        "sm_mhz": sm,
        "power_w": power,
        "temp": st.temp.copy(),
        "mem_temp": st.temp + 6.0,
        "mem_used": mem_used,
        "throttle": throttle,
        "power_limit_w": np.minimum(eff.power_cap_w, sku.power_limit_w),
    }


SIGNALS = ("activity", "steps")


def _signals(signals: Sequence[str], ja: JobArrays, busy: np.ndarray, step_rel: np.ndarray,
             active: np.ndarray, busy_wait: bool, rng: np.random.Generator
             ) -> dict[str, np.ndarray]:  # fmt: skip
    """Straggler signals beyond NVML's utilisation. ``activity``: SM and tensor-pipe activity
    (GPM/DCGM profiling): computing keeps the SMs busy, a rank waiting in an NCCL collective
    keeps only the few SMs the collective kernel runs on. ``steps``: the compute seconds per
    step each rank of a multi-node job publishes (``checkpoint.publish_step``)."""
    out: dict[str, np.ndarray] = {}
    n = busy.shape
    if "activity" in signals:
        wait = (1.0 - busy) if busy_wait else 0.0
        out["sm_active"] = (
            np.clip(0.9 * busy + 0.08 * wait + rng.normal(0, 0.004, n), 0, 1) * active
        )
        out["tensor_active"] = np.clip(0.6 * busy + rng.normal(0, 0.004, n), 0, 1) * active
    if "steps" in signals:
        step = (ja.step_s * step_rel)[:, None] * busy * (1 + rng.normal(0, 0.002, n))
        out["step_s"] = np.where(active & ja.multi[:, None], step, np.nan)
    return out


def _traffic(
    st: FleetState,
    ja: JobArrays,
    eff: Effects,
    sku: Sku | NodeSkus,
    comm: np.ndarray,
    dt: float,
    rng: np.random.Generator,
) -> None:
    """NVLink bytes for jobs on several GPUs of a node, IB bytes for multi-node jobs, in
    proportion to the nominal communication share of a step over the actual step time."""
    up = ~eff.link_down & ~eff.lost[:, :, None] & ~eff.down[:, None, None]
    up &= link_exists(sku, up.shape[0])[:, None, :]
    n_up = np.maximum(up.sum(axis=2, keepdims=True), 1)
    nvl = comm * (ja.in_use.sum(axis=1) > 1)[:, None]
    per_link = (NVLINK_GPU_BYTES_S * 0.5 * nvl)[:, :, None] * up / n_up * dt
    st.nvl_tx += per_link
    st.nvl_rx += per_link * rng.uniform(0.97, 1.03, per_link.shape[:2])[:, :, None]
    port_up = eff.port_state == PORT_ACTIVE
    ib = comm * ja.multi[:, None]
    ib_bytes = sku.hca_bytes_s * eff.port_rate * ja.ib_load[:, None] * ib * port_up * dt
    st.ib_tx += ib_bytes
    st.ib_rx += ib_bytes * rng.uniform(0.97, 1.03, ib_bytes.shape)
    st.ib[IB["port_xmit_packets"]] += ib_bytes / 4096.0
    st.ib[IB["port_rcv_packets"]] += ib_bytes / 4096.0
    st.ib[IB["port_xmit_wait"]] += ib_bytes / 65536.0
    if st.amd.any():
        _xgmi(st, eff, nvl, dt, rng)


def _xgmi(st: FleetState, eff: Effects, nvl: np.ndarray, dt: float,
          rng: np.random.Generator) -> None:  # fmt: skip
    """XGMI bytes on AMD nodes: a job's traffic spread over the links to its peer GPUs (the own
    index and a link that is down carry nothing, nor a link to a lost GPU)."""
    from simulator.amd import XGMI_GPU_BYTES_S

    G = nvl.shape[1]
    up = ~eff.xgmi_down & ~np.eye(G, dtype=bool)[None]
    up &= ~eff.lost[:, :, None] & ~eff.lost[:, None, :] & ~eff.down[:, None, None]
    up &= st.amd[:, None, None]
    per = (XGMI_GPU_BYTES_S * 0.5 * nvl / (G - 1))[:, :, None] * up * dt
    st.xgmi_tx += per
    st.xgmi_rx += per * rng.uniform(0.97, 1.03, per.shape[:2])[:, :, None]


def _background(st: FleetState, eff: Effects, dt: float, rng: np.random.Generator) -> None:
    """Rare corrected ECC and symbol errors on healthy hardware: detectors can't rely on zero."""
    alive = ~eff.down[:, None]
    sbe = rng.poisson(st.sbe_rate * dt) * alive * ~eff.lost
    st.ecc[:, :, CORRECTED, :] += sbe[:, :, None]
    sym = rng.poisson(st.symbol_rate * dt) * alive * (eff.port_state == PORT_ACTIVE)
    st.ib[IB["symbol_error"]] += sym
    n_links = st.nvl_err.shape[0] * GPUS * LINKS
    k = rng.poisson(n_links * dt / (3 * 86400.0))  # ~one CRC flit error per link per 3 days
    if k:
        flat = rng.integers(0, n_links, k)
        node, rest = np.divmod(flat, GPUS * LINKS)
        keep = ~eff.down[node]
        np.add.at(st.nvl_err[..., CRC_FLIT], (node[keep], *np.divmod(rest[keep], LINKS)), 1.0)
