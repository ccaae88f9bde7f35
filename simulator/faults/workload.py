"""Negative controls: things that move the signals but are not broken hardware.

An uneven pipeline stage (a whole stage of a job slower, at normal clocks), a checkpoint
pause (the whole job idles together), a job stop, a reboot (node gone for a while, then
every volatile counter back at zero) and a driver reload (GPU counters back at zero, no gap). A detector that drains on these is wrong.
"""

from __future__ import annotations

import numpy as np

from simulator.faults.base import Fault, FaultKind, Param, Step
from simulator.state import VOLATILE


def _job_nodes(s: Step, n: int) -> np.ndarray:
    jid = s.jobs.job_of[n]
    return np.flatnonzero(s.jobs.job_of == jid) if jid >= 0 else np.array([n])


def pipeline_imbalance(f: Fault, s: Step) -> None:
    """The stage holding the target node computes ``extra`` longer per step; its peers wait."""
    if not f.state_at(s.t1):
        return
    nodes = _job_nodes(s, f.nodes[0])
    if nodes.size < 2:
        return
    stages = np.array_split(nodes, min(int(f.parameters["stages"]), nodes.size))
    stage = next(st for st in stages if f.nodes[0] in st)
    s.eff.stage[stage] = 1.0 + float(f.parameters["extra"])


def checkpoint_pause(f: Fault, s: Step) -> None:
    """The job writes a checkpoint: every GPU of every node of the job idles at once."""
    if f.state_at(s.t1) and f.since(s.t1) < float(f.parameters["pause_s"]):
        s.eff.pause[_job_nodes(s, f.nodes[0])] = True


def job_stop(f: Fault, s: Step) -> None:
    if f.starts_in(s.t0, s.t1):
        s.eff.stop_jobs.add(f.nodes[0])


def reboot(f: Fault, s: Step) -> None:
    """Unreachable for ``down_s``; counters restart from zero (reported when it comes back)."""
    n, down = f.nodes[0], float(f.parameters["down_s"])
    if f.starts_in(s.t0, s.t1):
        s.st.reset(np.array([n]))
        s.eff.stop_jobs.add(n)
    if f.onset <= s.t1 < f.onset + down:
        s.eff.down[n] = True
    if s.t0 < f.onset + down <= s.t1:
        s.eff.resets[n] = True


def driver_reload(f: Fault, s: Step) -> None:
    """The NVIDIA driver unloaded and loaded again, no reboot (after an update or a GPU reset
    with ``nvidia-smi -r``): the node stays reachable, its job is stopped first (a reload needs
    idle GPUs), and the GPUs' volatile counters restart from zero; the HCAs are untouched."""
    if not f.starts_in(s.t0, s.t1):
        return
    n = f.nodes[0]
    s.eff.stop_jobs.add(n)
    st = s.st
    for a in (st.energy_j, st.pcie_replay, st.nvl_err, st.nvl_tx, st.nvl_rx):
        a[n] = 0.0
    st.ecc[n, :, :, VOLATILE] = 0.0


KINDS = (
    FaultKind(
        "pipeline_imbalance",
        "node",
        pipeline_imbalance,
        {"extra": Param(0.2, 0.01, 2.0), "stages": Param(4, 2, 64)},
        hardware=False,
        negative_control=True,
        help="a whole pipeline stage slower",
    ),
    FaultKind(
        "checkpoint_pause",
        "node",
        checkpoint_pause,
        {"pause_s": Param(180.0, 1, 86400)},
        hardware=False,
        negative_control=True,
        help="the job on this node checkpoints",
    ),
    FaultKind("job_stop", "node", job_stop, hardware=False, negative_control=True),
    FaultKind(
        "reboot",
        "node",
        reboot,
        {"down_s": Param(300.0, 0, 86400)},
        hardware=False,
        negative_control=True,
        help="reboot: gap, then counters reset",
    ),
    FaultKind(
        "driver_reload",
        "node",
        driver_reload,
        hardware=False,
        negative_control=True,
        help="driver reload: GPU counters reset, node stays up",
    ),
)
