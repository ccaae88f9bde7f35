"""InfiniBand faults: symbol-error ramp, link flap, port down, rate downgrade, leaf switch outage.

A port that goes down counts ``link_downed``, its state becomes 1 (DOWN) with phys_state 2
(Polling) or 3 (Disabled), and its data counters stop growing. Any link-down event is fatal
to the jobs running over it (REFERENCE.md §3).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from simulator.effects import PHYS_DISABLED, PHYS_POLLING
from simulator.faults.base import Fault, FaultKind, Param, Step
from simulator.state import IB


def _down_event(s: Step, nodes: tuple[int, ...], port: int | slice) -> None:
    for n in nodes:
        s.st.ib[IB["link_downed"], n, port] += 1
        s.st.ib[IB["link_error_recovery"], n, port] += 1
        s.eff.stop_jobs.add(n)


def _crossings(first: float, period: float, t0: float, t1: float) -> int:
    """How many of first, first + period, ... fall in (t0, t1]."""
    if t1 < first:
        return 0
    hi = math.floor((t1 - first) / period)
    lo = math.floor((t0 - first) / period) if t0 >= first else -1
    return max(0, hi - lo)


def symbol_errors(f: Fault, s: Step) -> None:
    """Symbol errors ramp to ``peak_rate``/s over ``ramp_s``; ``fail_after_s`` > 0 downs the port."""
    n, p, par = f.nodes[0], f.port, f.parameters
    fail = float(par["fail_after_s"])
    ramp = min(1.0, f.since(s.t1) / float(par["ramp_s"]))
    dt = f.overlap(s.t0, s.t1)
    if fail > 0:
        dt = max(0.0, min(dt, f.onset + fail - s.t0))
    mean = float(par["peak_rate"]) * ramp * dt
    s.st.ib[IB["symbol_error"], n, p] += s.rng.poisson(mean)
    s.st.ib[IB["port_rcv_errors"], n, p] += s.rng.poisson(0.3 * mean)
    s.st.ib[IB["link_error_recovery"], n, p] += s.rng.poisson(mean / 500.0)
    if fail > 0 and s.t0 < f.onset + fail <= s.t1:
        _down_event(s, f.nodes, p)
    if fail > 0 and f.state_at(s.t1) and f.since(s.t1) >= fail:
        s.eff.port_down(n, p, PHYS_POLLING)


def flap(f: Fault, s: Step) -> None:
    """Down for ``down_s`` at the start of every ``period_s`` cycle, up the rest of it."""
    n, p = f.nodes[0], f.port
    period, down = float(f.parameters["period_s"]), float(f.parameters["down_s"])
    last = s.t1 if f.end is None else min(s.t1, f.end - 1e-9)
    for _ in range(_crossings(f.onset, period, s.t0, last)):
        _down_event(s, f.nodes, p)
    if f.state_at(s.t1) and f.since(s.t1) % period < down:
        s.eff.port_down(n, p, PHYS_POLLING)


def port_down(f: Fault, s: Step) -> None:
    if f.starts_in(s.t0, s.t1):
        _down_event(s, f.nodes, f.port)
    if f.state_at(s.t1):
        phys = PHYS_DISABLED if f.parameters["disabled"] else PHYS_POLLING
        s.eff.port_down(f.nodes[0], f.port, phys)


def rate_downgrade(f: Fault, s: Step) -> None:
    if f.state_at(s.t1):
        s.eff.port_rate[f.nodes[0], f.port] = float(f.parameters["rate_gbps"]) / 400.0


def _flap_check(p: Mapping[str, Any]) -> str:
    return "" if p["down_s"] < p["period_s"] else "down_s must be shorter than period_s"


def leaf_outage(f: Fault, s: Step) -> None:
    """The leaf switch dies: every IB port cabled to it goes down at once (every port of its
    nodes; on a rail-optimized fabric, the one port of each node of the unit on that rail)."""
    ports: int | slice = f.port if f.port >= 0 else slice(None)
    if f.starts_in(s.t0, s.t1):
        _down_event(s, f.nodes, ports)
    if f.state_at(s.t1):
        for n in f.nodes:
            s.eff.port_down(n, ports, PHYS_POLLING)


KINDS = (
    FaultKind(
        "ib_symbol_errors",
        "port",
        symbol_errors,
        {
            "peak_rate": Param(50.0, 0.01, 1e6),
            "ramp_s": Param(1800.0, 1, 1e7),
            "fail_after_s": Param(0.0, 0, 1e7),
        },
        help="symbol-error ramp towards failure (fail_after_s > 0: port goes down)",
    ),
    FaultKind(
        "ib_flap",
        "port",
        flap,
        {"period_s": Param(600.0, 2, 1e6), "down_s": Param(30.0, 1, 1e6)},
        help="link flap: down for down_s every period_s",
        check=_flap_check,
    ),
    FaultKind("ib_port_down", "port", port_down, {"disabled": Param(False)}),
    FaultKind(
        "ib_rate_downgrade",
        "port",
        rate_downgrade,
        {"rate_gbps": Param(200, choices=(100, 200))},
        help="400 -> 200 (or 100) Gb/s",
    ),
    FaultKind("leaf_outage", "switch", leaf_outage, help="all IB ports of the leaf's nodes down"),
)
