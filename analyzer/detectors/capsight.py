"""Cap sight: whether the window can tell an administrator's power or clock cap from hardware.

Shared by the detectors that read "clocks or power below the peers'" as a fault (fail-slow,
the straggler's clock test, the peer detector). An administrator's power limit or application
clocks look exactly like that, and two inputs tell them apart: the enforced power limit
(configurations are grouped by it: :func:`~analyzer.detectors.groups.configurations`) and the
clock-event reasons (a cap says ``sw_power_cap`` / ``applications_clocks_setting``).
dcgm-exporter's default-counters.csv (4.5.x-4.8.x) enables neither
(``DCGM_FI_DEV_ENFORCED_POWER_LIMIT`` is not listed, ``DCGM_EXP_CLOCK_EVENTS_COUNT`` is
commented out), so on such a node a capped healthy GPU and a slow part are the same series.
The dcgm reader also takes the reasons from DCGM's clock-event reasons bitmask
(``DCGM_FI_DEV_CLOCKS_EVENT_REASONS``, formerly ``..._CLOCK_THROTTLE_REASONS``) and its power
and thermal violation counters where a fleet serves them (``analyzer.sources.dialects.dcgm``):
any of them is sight.
The issue's rule: a verdict must not drain a healthy node on an administrative difference;
so there a finding from those detectors only notifies, and says why (:func:`downgrade`).
Pure numpy, no state.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np

from analyzer.findings import Finding
from analyzer.sources.dialects import DCGM
from analyzer.window import Window
from exporter import catalog

NOTE = "power limit and clock-event reasons not exported: cannot tell an admin cap from hardware"
EVIDENCE = "cap_unknown"  # evidence key: 1.0 where the finding was judged without cap sight
SIGHT = (catalog.GPU_POWER_LIMIT, catalog.GPU_THROTTLE)  # either one tells a cap apart
ACTING = frozenset({"drain", "cordon"})


def blind(window: Window) -> np.ndarray:
    """(N,) bool: nodes with no sample of the power limit nor of clock-event reasons in the
    window (a family absent, or all NaN on that node)."""
    n = len(window.nodes)
    seen = np.zeros(n, dtype=bool)
    for m in SIGHT:
        a = window.get(m)
        if a is None or a.ndim < 2 or a.shape[1] != n:
            continue
        here = np.isfinite(a.reshape(a.shape[0], n, -1)).any(axis=(0, 2))
        if m is catalog.GPU_THROTTLE:
            here |= _quiet_dcgm(window, here)
        seen |= here
    return ~seen


def _quiet_dcgm(window: Window, here: np.ndarray) -> np.ndarray:
    """dcgm-exporter serves ``DCGM_EXP_CLOCK_EVENTS_COUNT`` only for reasons reported within its
    window, so a dcgm node without the series had no clock event when any dcgm node of the
    window has them (the fleet exports the field; one counters CSV per fleet assumed)."""
    dcgm = np.array([DCGM in window.dialect_of.get(i, "") for i in range(len(here))], dtype=bool)
    return dcgm & bool((here & dcgm).any())


def downgrade(found: Sequence[Finding], window: Window,
              applies: Callable[[Finding], bool] = lambda f: True) -> list[Finding]:  # fmt: skip
    """The findings for which ``applies``, on nodes without cap sight: never more than notify,
    with the reason in the evidence (``cap_unknown``) and the summary. Others unchanged."""
    if not found:
        return []
    names = {window.nodes[i] for i in np.flatnonzero(blind(window))}
    out = []
    for f in found:
        if f.node in names and applies(f):
            action = "notify" if f.action in ACTING else f.action
            f = replace(f, action=action, evidence={**f.evidence, EVIDENCE: 1.0},
                        summary=f"{f.summary} [{NOTE}]")  # fmt: skip
        out.append(f)
    return out
