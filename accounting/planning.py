"""The planner's arithmetic: from failure rates to checkpoint intervals, ETTR, the chance of
an uninterrupted stretch and the spare nodes a partition needs. Pure functions of floats
(hours, rates per hour); ``plan.py`` feeds them the report's MTBF cells and repair times.

Failures are taken as a Poisson process (constant rate), the model the report's exact
chi-squared MTBF interval rests on too (stats.py).

* **Checkpoint interval**: Young's first-order optimum ``sqrt(2 C M)`` (Young, "A first
  order approximation to the optimum checkpoint interval", CACM 17(9), 1974) and Daly's
  higher-order one, ``sqrt(2 C M) [1 + sqrt(C / 2M) / 3 + (C / 2M) / 9] - C`` for
  ``C < 2M``, else ``M`` (Daly, "A higher order estimate of the optimum checkpoint interval
  for restart dumps", Future Generation Computer Systems 22(3), 2006), with ``C`` the
  checkpoint's cost, ``M`` the job's MTBF and the interval the compute time between two
  checkpoints. Daly's paper quotes 117, 57 and 9.1 min for M = 24 h, 6 h, 15 min at
  C = 5 min; the tests check those.
* **ETTR** for an interval ``t``: Daly's complete model of the expected wall-clock time per
  unit of work, ``M e^(R/M) (e^((t+C)/M) - 1) / t`` with ``R`` the restart time; ETTR is its
  inverse (useful / wall-clock time).
* **Spare nodes** (``spares``): nodes fail at a rate ``lam`` each and stay out for a repair
  time ``D`` drawn from the measured distribution, so the outages form an M/G/infinity
  queue. A failure at time 0 finds a node within the target ``t`` when its own node is back
  by then (``D <= t``) or a spare is free: the outages that began before 0 and are still
  running at ``t`` number Poisson(``n lam E[(D - t)+]``) (the M/G/infinity occupancy), and
  each holds a spare.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from scipy.stats import poisson

HOURS_PER_DAY = 24.0
MAX_SPARES = 10_000  # a search bound: a partition needing more has no spare problem to plan


def young_interval(cost_h: float, mtbf_h: float) -> float:
    """Young's optimum compute time between checkpoints, hours."""
    if math.isinf(mtbf_h):
        return math.inf
    return math.sqrt(2.0 * cost_h * mtbf_h)


def daly_interval(cost_h: float, mtbf_h: float) -> float:
    """Daly's higher-order optimum compute time between checkpoints, hours."""
    if math.isinf(mtbf_h):
        return math.inf
    if cost_h >= 2.0 * mtbf_h:
        return mtbf_h
    x = cost_h / (2.0 * mtbf_h)
    return math.sqrt(2.0 * cost_h * mtbf_h) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - cost_h


def ettr(interval_h: float, cost_h: float, restart_h: float, mtbf_h: float) -> float:
    """Useful over wall-clock time checkpointing every ``interval_h`` of compute (Daly's
    complete model). No failures: only the checkpoints cost; a zero interval with a zero
    cost is its limit, ``e^(-R/M)``."""
    if math.isinf(mtbf_h):
        if math.isinf(interval_h) or cost_h == 0.0:
            return 1.0
        return interval_h / (interval_h + cost_h)
    if math.isinf(interval_h):
        return 0.0
    if interval_h + cost_h == 0.0:
        return math.exp(-restart_h / mtbf_h)
    wall = mtbf_h * math.exp(restart_h / mtbf_h) * math.expm1((interval_h + cost_h) / mtbf_h)
    return interval_h / wall


def uninterrupted(rate_per_h: float, hours: float) -> float:
    """P(no failure in ``hours``) for failures at ``rate_per_h``."""
    return math.exp(-rate_per_h * hours)


def gpu_hours_lost_per_day(gpus: int, ettr_value: float) -> float:
    """GPU-hours a day the job does no useful work: checkpoints, restarts and recompute."""
    return gpus * HOURS_PER_DAY * (1.0 - ettr_value)


def count_band(mean: float, level: float = 0.90) -> tuple[int, int]:
    """The central ``level`` band of a Poisson(``mean``) count (5th and 95th percentile at
    90 %)."""
    tail = (1.0 - level) / 2.0
    return int(poisson.ppf(tail, mean)), int(poisson.ppf(1.0 - tail, mean))


def restart_probability(
    spares: int, node_rate_per_h: float, nodes: int, repair_h: Sequence[float], target_h: float
) -> float:
    """P(a failed job finds a node within ``target_h``) with ``spares`` spare nodes."""
    quick = sum(1 for d in repair_h if d <= target_h) / len(repair_h)
    residual = sum(max(d - target_h, 0.0) for d in repair_h) / len(repair_h)
    busy = nodes * node_rate_per_h * residual
    own_back = quick * float(poisson.cdf(spares, busy))
    need_spare = (1.0 - quick) * float(poisson.cdf(spares - 1, busy))  # 0 with no spare
    return own_back + need_spare


def spares(
    node_rate_per_h: float,
    nodes: int,
    repair_h: Sequence[float],
    target_h: float,
    probability: float,
) -> int | None:
    """The fewest spare nodes for a restart within ``target_h`` with ``probability``, for a
    partition of ``nodes`` running nodes; None without a measured repair time."""
    if not repair_h:
        return None
    for n in range(MAX_SPARES + 1):
        if restart_probability(n, node_rate_per_h, nodes, repair_h, target_h) >= probability:
            return n
    return None
