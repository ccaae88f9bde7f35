"""The two statistics the report needs: the exact chi-squared MTBF interval for a
time-terminated test and the Poisson upper percentile used to call a unit a lemon.

For ``r`` failures in total time ``T`` (time-terminated, units still in service are
right-censored), the two-sided 90 % interval on MTBF is
``[2T / chi2(0.95; 2r+2), 2T / chi2(0.05; 2r)]``; with ``r = 0`` the upper bound does not
exist (None). See NIST/SEMATECH e-Handbook of Statistical Methods, 8.4.5.1.
"""

from __future__ import annotations

import math

from scipy.stats import chi2, poisson


def mtbf_interval(
    failures: int, hours: float, confidence: float = 0.90
) -> tuple[float, float | None]:
    """(lower, upper) MTBF bounds in hours; upper is None when there were no failures."""
    alpha = 1.0 - confidence
    lower = 2.0 * hours / float(chi2.ppf(1.0 - alpha / 2.0, 2 * failures + 2))
    if failures == 0:
        return lower, None
    upper = 2.0 * hours / float(chi2.ppf(alpha / 2.0, 2 * failures))
    return lower, upper


def poisson_upper(mean: float, q: float = 0.99) -> int:
    """The smallest k with P(X <= k) >= q for X ~ Poisson(mean)."""
    if mean <= 0.0:
        return 0
    if mean > 500.0:  # exp(-mean) would underflow the sum below
        return int(poisson.ppf(q, mean))
    k, term = 0, math.exp(-mean)
    cdf = term
    while cdf < q:  # a few terms for the per-unit means a lemon test sees; scipy is slower
        k += 1
        term *= mean / k
        cdf += term
    return k
