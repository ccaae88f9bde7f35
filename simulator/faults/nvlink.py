"""NVLink faults: a CRC/replay error ramp on one link (optionally ending in link down), link down.

A failing link shows CRC flit errors first, with data CRC and replays alongside and the
occasional recovery; a link that goes down logs Xid 74 naming the link and stops carrying
traffic (the GPU's other links take it).
"""

from __future__ import annotations

from simulator.faults.base import Fault, FaultKind, Param, Step
from simulator.state import CRC_DATA, CRC_FLIT, RECOVERY, REPLAY


def _link_down(f: Fault, s: Step, at: float) -> None:
    n, g, lk = f.nodes[0], f.gpu, f.link
    if s.t0 < at <= s.t1:
        s.event(n, g, 74, f"nvlink:{lk}", at)
        s.st.nvl_err[n, g, lk, RECOVERY] += 1
        s.eff.stop_jobs.add(n)
    if f.state_at(s.t1) and s.t1 >= at:
        s.eff.link_down[n, g, lk] = True


def nvlink_errors(f: Fault, s: Step) -> None:
    """Error rate doubling every ``doubling_s`` from ``initial_rate`` up to ``max_rate`` (1/s)."""
    n, g, lk = f.nodes[0], f.gpu, f.link
    p = f.parameters
    rate = min(
        float(p["max_rate"]), float(p["initial_rate"]) * 2 ** (f.since(s.t1) / p["doubling_s"])
    )
    down_after = float(p["down_after_s"])
    dt = f.overlap(s.t0, s.t1)
    if down_after > 0 and f.since(s.t1) > down_after:
        dt = max(0.0, min(dt, f.onset + down_after - s.t0))  # a down link counts nothing more
    mean = rate * dt
    err = s.st.nvl_err[n, g, lk]
    err[CRC_FLIT] += s.rng.poisson(mean)
    err[CRC_DATA] += s.rng.poisson(0.2 * mean)
    err[REPLAY] += s.rng.poisson(0.5 * mean)
    err[RECOVERY] += s.rng.poisson(0.01 * mean)
    if down_after > 0:
        _link_down(f, s, f.onset + down_after)


def nvlink_down(f: Fault, s: Step) -> None:
    _link_down(f, s, f.onset)


KINDS = (
    FaultKind(
        "nvlink_errors",
        "link",
        nvlink_errors,
        {
            "initial_rate": Param(0.05, 0.0001, 1e5),
            "doubling_s": Param(600.0, 1, 1e7),
            "max_rate": Param(200.0, 0.001, 1e6),
            "down_after_s": Param(0.0, 0, 1e7),
        },
        help="CRC/replay error ramp on one link; down_after_s > 0 ends it in link down",
    ),
    FaultKind("nvlink_down", "link", nvlink_down, help="link down (Xid 74)"),
)
