"""Small builders shared by the fleet tests: a fleet where every node trains, and a runner."""

from __future__ import annotations

from typing import Any

import numpy as np

from exporter import catalog as c
from simulator.fleet import Fleet
from simulator.frame import Frame

UP = c.GPU_UP.name
UTIL = c.GPU_UTILIZATION.name
SM = c.GPU_SM_CLOCK.name
POWER = c.GPU_POWER.name
TEMP = c.GPU_TEMPERATURE.name
ECC = c.GPU_ECC_ERRORS.name
NVL_ERR = c.NVLINK_ERRORS.name
NVL_UP = c.NVLINK_UP.name
NVL_TX = c.NVLINK_TRANSMIT.name
IB_STATE = c.IB_PORT_STATE.name
IB_PHYS = c.IB_PORT_PHYS_STATE.name
IB_TX = c.IB_TRANSMIT.name
IB_RX = c.IB_RECEIVE.name
IB_RATE = c.IB_PORT_RATE.name


def busy_fleet(nodes: int = 8, seed: int = 3, **kw: Any) -> Fleet:
    """Every node in a long multi-node training job (no churn, no single-node jobs)."""
    opts: dict[str, Any] = {"idle_fraction": 0.0, "small_job_share": 0.0, "mean_job_s": 1e12}
    return Fleet(nodes, seed, **{**opts, **kw})


def run(fleet: Fleet, until: float, every: float = 15.0) -> list[Frame]:
    return list(fleet.run(until, every))


def at(frames: list[Frame], t: float) -> Frame:
    return next(f for f in frames if f.t >= t)


def xids(frames: list[Frame]) -> list[tuple[int, int, int]]:
    return [x for f in frames for x in f.xids]


def peers(fleet: Fleet, node: int) -> np.ndarray:
    jid = fleet.jobs.job_of[node]
    return np.array([n for n in np.flatnonzero(fleet.jobs.job_of == jid) if n != node])
