"""The marginal detector's signals: what "marginal" is measured on, one reading per node.

Each :class:`Signal` turns a window into a :class:`Reading`: per node a score (higher is
worse; NaN: not judged, e.g. an idle or capped GPU), the value its PromQL reproduces (the
evidence the placement API shows), and the GPU it comes from (-1: the node as a whole).
Per-GPU signals take the node's worst GPU. The judging (peers, floor, two windows) is
:mod:`analyzer.detectors.marginal`'s; the excuses reuse the detectors that judge the same
hardware (:mod:`~analyzer.detectors.failslow` for clocks under load and clock-event reasons,
:mod:`~analyzer.detectors.throttling` for an administrator's power cap,
:mod:`~analyzer.detectors.pcie` for a link's maximum). Pure; names from ``exporter.catalog``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from analyzer.detectors import workload
from analyzer.detectors.failslow import LOAD, NOT_A_REASON, FailSlow, _busy
from analyzer.detectors.pcie import _ref as pcie_max
from analyzer.detectors.series import last_valid, window_rate
from analyzer.detectors.throttling import admin_capped
from analyzer.window import REMAP_KINDS, THROTTLE_REASONS, Window
from exporter import catalog as c

PCIE_BUSY = 0.2  # the pcie detector's: below it a GPU lowers its generation by design


@dataclass(frozen=True)
class Reading:
    score: np.ndarray  # (N,) higher is worse, judged against the floor and the peers
    value: np.ndarray  # (N,) what ``Signal.promql`` shows for the node
    gpu: np.ndarray  # (N,) the GPU the value comes from; -1: the node as a whole


@dataclass(frozen=True)
class Signal:
    name: str
    floor: float  # on the score: below it nothing is marginal, whatever the peers do
    read: Callable[[Window], Reading | None]
    promql: str  # reproduces the per-node value
    unit: str = "/s"


def _node_sum(rate: np.ndarray) -> Reading:
    v = np.nansum(rate.reshape(rate.shape[0], -1), axis=1)
    return Reading(v, v, np.full(len(v), -1))


def _worst_gpu(score: np.ndarray, value: np.ndarray) -> Reading:
    """(N, G) -> per node the GPU with the highest score (NaN where no GPU is judged)."""
    filled = np.where(np.isnan(score), -np.inf, score)
    g = np.argmax(filled, axis=1) if score.shape[1] else np.zeros(len(score), dtype=int)
    rows = np.arange(len(score))
    judged = np.isfinite(filled[rows, g]) if score.shape[1] else np.zeros(len(score), bool)
    return Reading(np.where(judged, score[rows, g], np.nan),
                   np.where(judged, value[rows, g], np.nan), np.where(judged, g, -1))  # fmt: skip


def nvlink_errors(w: Window) -> Reading | None:
    a = w.get(c.NVLINK_ERRORS)
    if a is None or a.ndim != 5:
        return None
    return _node_sum(window_rate(a, w.t, slice(0, len(w.t))))


def ib_symbol_errors(w: Window) -> Reading | None:
    a = w.ib_counters.get("symbol_error")
    if a is None or a.ndim != 3 or a.shape[0] != len(w.t):
        return None
    return _node_sum(window_rate(a, w.t, slice(0, len(w.t))))


Reference = Callable[[Window, np.ndarray], tuple[np.ndarray, np.ndarray]]


def busy_clocks(w: Window) -> np.ndarray | None:
    """(N, G): each judged GPU's mean SM clock under load, NaN where not judged (an idle or
    lightly loaded GPU, a clock-event reason other than idle, an administrator's cap)."""
    util, clock = w.get(c.GPU_UTILIZATION), w.get(c.GPU_SM_CLOCK)
    if util is None or clock is None or util.ndim != 3 or clock.shape != util.shape:
        return None
    fs = FailSlow(n=len(w.t))
    judged = _busy(util) & ~fs._explained(w) & ~_capped(w)
    return workload.mean_clock(clock, judged)


def sm_clock_deficit(w: Window, reference: Reference | None = None) -> Reading | None:
    """How far the node's slowest GPU under load runs below its configuration's median busy
    clock (0.03: 3 %). Not judged: an idle or lightly loaded GPU (its clock is the idle
    clock), one with a clock-event reason other than idle (a power cap, thermal, an
    administrator's application clocks: the throttling detector's), one at an
    administrator's power limit or below its node's (slower by configuration).
    ``reference``: per node the median busy clock and whether it came from the
    specification (default: of this window's nodes; a replica's: of the whole fleet's)."""
    cm = busy_clocks(w)
    if cm is None:
        return None
    ref, from_spec = (reference or FailSlow(n=len(w.t))._reference)(w, cm)
    with np.errstate(invalid="ignore", divide="ignore"):
        deficit = 1.0 - cm / ref[:, None]
    deficit[from_spec] = np.nan  # too few busy peers: no peer to be the worst 1 % of
    return _worst_gpu(deficit, cm)


def _capped(w: Window) -> np.ndarray:
    """(N, G): a GPU at an administrator's power limit, or below its node's usual limit."""
    lim = w.get(c.GPU_POWER_LIMIT)
    if lim is None or lim.ndim != 3:
        return np.zeros((len(w.nodes), w.gpus), dtype=bool)
    last = last_valid(lim)
    admin, _ = admin_capped(w, last)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # a node without the series
        below = last < 0.99 * np.nanmedian(last, axis=1, keepdims=True)
    return np.asarray(admin | below)


def pcie_below_max(w: Window) -> Reading | None:
    """The share of the window's samples in which the node's worst GPU's link ran below its
    maximum width, or below its maximum generation while busy (as the pcie detector judges
    one sample). The pcie detector drains a link down in 2 of the last 3 samples; a link
    that falls back now and then is marginal (the engine drops the avoid where it drains)."""
    width, wmax = w.get(c.GPU_PCIE_WIDTH), w.get(c.GPU_PCIE_WIDTH_MAX)
    gen, gmax = w.get(c.GPU_PCIE_GENERATION), w.get(c.GPU_PCIE_GENERATION_MAX)
    util = w.get(c.GPU_UTILIZATION)
    down = known = None
    with np.errstate(invalid="ignore"):
        if width is not None and wmax is not None:
            ref = pcie_max(wmax)
            down, known = width < ref, ~np.isnan(width) & ~np.isnan(ref)
        if gen is not None and gmax is not None and util is not None:
            ref = pcie_max(gmax)
            g = (gen < ref) & (util >= PCIE_BUSY)
            down = g if down is None else down | g
            known = ~np.isnan(gen) if known is None else known
    if down is None or known is None:
        return None
    seen = known.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        share = np.where(seen >= 2, (down & known).sum(axis=0) / seen, np.nan)
    return _worst_gpu(share, share)


def correctable_remaps(w: Window) -> Reading | None:
    """Rows the node's worst GPU has remapped for correctable errors so far. A remap pending
    or failed is the memory detector's (reboot, drain); a handful of correctable remaps is
    wear worth keeping the next large job away from."""
    a = w.get(c.GPU_REMAPPED_ROWS)
    if a is None or a.ndim != 4 or a.shape[-1] != len(REMAP_KINDS):
        return None
    rows = last_valid(a[..., REMAP_KINDS.index("correctable")])
    return _worst_gpu(rows, rows)


_REASONS = "|".join(r for r in THROTTLE_REASONS if r not in NOT_A_REASON)
_LOADED = (f"(min_over_time({c.GPU_UTILIZATION.name}[10m]) > 0.05)"
           f" and on (node, gpu) (avg_over_time({c.GPU_UTILIZATION.name}[10m]) >= {LOAD})")  # fmt: skip
SIGNALS = (
    Signal("nvlink_errors", 0.01, nvlink_errors,
           f"sum by (node) (rate({c.NVLINK_ERRORS.name}[10m]))"),
    # per node: healthy ports add up to ~0.013/s (the simulator's stray symbol errors), so a
    # lower floor would make every healthy fleet a "shift"; the IB detector's trend starts at 0.5/s a port
    Signal("ib_symbol_errors", 0.05, ib_symbol_errors,
           f'sum by (node) (rate({c.IB_COUNTER.name}{{counter="symbol_error"}}[10m]))'),
    Signal("sm_clock_deficit", 0.02, sm_clock_deficit,
           f"min by (node) (avg_over_time({c.GPU_SM_CLOCK.name}[10m])"
           f" and on (node, gpu) {_LOADED}"
           f" unless on (node, gpu) (max_over_time({c.GPU_THROTTLE.name}"
           f'{{reason=~"{_REASONS}"}}[10m]) >= 0.5))', " below peers"),
    Signal("pcie_below_max", 0.1, pcie_below_max,
           f"max by (node) (avg_over_time(clamp_max("
           f"({c.GPU_PCIE_WIDTH.name} < bool {c.GPU_PCIE_WIDTH_MAX.name})"
           f" + ({c.GPU_PCIE_GENERATION.name} < bool {c.GPU_PCIE_GENERATION_MAX.name})"
           f" * on (node, gpu) ({c.GPU_UTILIZATION.name} >= bool {PCIE_BUSY}), 1)[10m:]))",
           " of samples"),
    Signal("correctable_remaps", 2.0, correctable_remaps,
           f'max by (node) (max_over_time({c.GPU_REMAPPED_ROWS.name}{{kind="correctable"}}[10m]))',
           " rows"),
)  # fmt: skip
