"""Memory faults: uncorrectable ECC, row remap pending/failed, a rising single-bit-error rate.

Reads ``gpu_ecc_errors_total`` (T, node, gpu, error_type, counter_type), ``gpu_row_remap_
pending`` / ``gpu_row_remap_failed`` (T, node, gpu) from the window; emits per-GPU findings.
"""

from __future__ import annotations

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, mask_findings
from analyzer.detectors.series import first_true_time, increases, last_valid, window_rate
from analyzer.findings import Finding
from analyzer.window import Window
from exporter import catalog


class MemoryDetector:
    name = "memory"

    def __init__(self, hold: float = 600.0, sbe_rate: float = 0.05, sbe_growth: float = 1.5):
        self.hold, self.sbe_rate, self.sbe_growth = hold, sbe_rate, sbe_growth

    def detect(self, window: Window) -> list[Finding]:
        if window.empty:
            return []
        out: list[Finding] = []
        ecc = window.get(catalog.GPU_ECC_ERRORS)
        if ecc is not None and ecc.ndim == 5 and len(window.t) >= 2:
            out += self._uncorrectable(window, ecc)
            out += self._sbe(window, ecc)
        for metric, kind, sev, action in (
            (catalog.GPU_ROW_REMAP_PENDING, "row_remap_pending", "warning", "reboot"),
            (catalog.GPU_ROW_REMAP_FAILED, "row_remap_failed", "critical", "drain"),
        ):
            a = window.get(metric)
            if a is None:
                continue
            flag = np.nan_to_num(a, nan=0.0) >= 1
            mask = last_valid(a) >= 1
            since = first_true_time(flag, window.t)

            def make(
                node: str,
                subj: str,
                s: float,
                ix: tuple[int, ...],
                k: str = kind,
                sv: str = sev,
                ac: str = action,
            ) -> Finding:
                return Finding(node, subj, k, sv, ac, self.name, 1.0, s, ev(value=1.0))

            out += mask_findings(window, mask, since, gpu_subject, make)
        return out

    def _uncorrectable(self, window: Window, ecc: np.ndarray) -> list[Finding]:
        inc = increases(ecc[:, :, :, 1, :])  # uncorrected, volatile + aggregate
        inc = np.nanmax(np.where(np.isnan(inc), -1, inc), axis=-1)
        recent = window.t[1:] > window.now - self.hold
        hits = (inc > 0) & recent.reshape(-1, 1, 1)
        mask = hits.any(axis=0)
        first = np.argmax(hits, axis=0)
        since = window.t[1:][first]
        count = np.where(hits, inc, 0).sum(axis=0)

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            return Finding(
                node,
                subj,
                "ecc_uncorrectable",
                "critical",
                "drain",
                self.name,
                1.0,
                s,
                ev(errors=count[ix]),
                "uncorrectable ECC errors",
            )

        return mask_findings(window, mask, since, gpu_subject, make)

    def _sbe(self, window: Window, ecc: np.ndarray) -> list[Finding]:
        sbe = ecc[:, :, :, 0, 0]
        recent = window.tail(300)
        half = window.tail(150)
        rate = window_rate(sbe, window.t, recent)
        late = window_rate(sbe, window.t, half)
        early_sl = slice(recent.start, half.start)
        early = window_rate(sbe, window.t, early_sl)
        rising = late >= early * self.sbe_growth
        mask = (
            (rate > self.sbe_rate) & (late > self.sbe_rate) & (rising | (late >= 5 * self.sbe_rate))
        )

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            conf = float(min(1.0, late[ix] / (10 * self.sbe_rate)))
            return Finding(
                node,
                subj,
                "sbe_rate_high",
                "warning",
                "notify",
                self.name,
                max(conf, 0.5),
                s,
                ev(rate_per_s=late[ix], earlier=early[ix]),
                "single-bit ECC error rate rising",
            )

        return mask_findings(window, mask, None, gpu_subject, make)
