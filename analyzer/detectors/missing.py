"""Silence and loss: a GPU that reports ``gpu_up 0``, and a node or GPU that stopped reporting.

Scrape gaps are normal (a NaN here and there); only a sustained silence of every series of a
node (or of one GPU while its node still reports) that had reported earlier in the window is
a finding. Reads ``gpu_up`` and a few per-GPU gauges (T, node, gpu).
"""

from __future__ import annotations

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, mask_findings
from analyzer.detectors.series import first_true_time, last_valid
from analyzer.findings import Finding
from analyzer.window import Window
from exporter import catalog

PRESENCE = (catalog.GPU_UP, catalog.GPU_UTILIZATION, catalog.GPU_TEMPERATURE, catalog.GPU_POWER)


class MissingDetector:
    name = "missing"

    def __init__(self, silent_samples: int = 6):
        self.silent = silent_samples

    def detect(self, window: Window) -> list[Finding]:
        if window.empty:
            return []
        out: list[Finding] = []
        up = window.get(catalog.GPU_UP)
        lost = np.zeros((len(window.nodes), window.gpus), dtype=bool)
        if up is not None:
            lost = last_valid(up) < 0.5
            since = first_true_time(np.nan_to_num(up, nan=1.0) < 0.5, window.t)

            def make_lost(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
                return Finding(
                    node,
                    subj,
                    "gpu_lost",
                    "critical",
                    "drain",
                    self.name,
                    1.0,
                    s,
                    ev(up=0.0),
                    "GPU reports up=0 (fallen off the bus or failing)",
                )

            out += mask_findings(window, lost, since, gpu_subject, make_lost)
        present = None
        for m in PRESENCE:
            a = window.get(m)
            if a is not None and a.ndim == 3:
                p = ~np.isnan(a)
                present = p if present is None else (present | p)
        if present is None or present.shape[0] <= self.silent:
            return out
        node_present = present.any(axis=2)
        silent_node = ~node_present[-self.silent :].any(axis=0) & node_present[: -self.silent].any(
            axis=0
        )
        since_node = first_true_time(~node_present, window.t)
        for n in np.nonzero(silent_node)[0]:
            out.append(
                Finding(
                    window.nodes[n],
                    "node",
                    "node_missing",
                    "warning",
                    "notify",
                    self.name,
                    0.9,
                    float(since_node[n]),
                    ev(silent_samples=self.silent),
                    "node stopped reporting",
                )
            )
        silent_gpu = (
            ~present[-self.silent :].any(axis=0)
            & present[: -self.silent].any(axis=0)
            & ~silent_node[:, None]
            & ~lost
        )
        since_gpu = first_true_time(~present, window.t)

        def make_silent(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            return Finding(
                node,
                subj,
                "gpu_lost",
                "warning",
                "cordon",
                self.name,
                0.8,
                s,
                ev(silent_samples=self.silent),
                "GPU stopped reporting",
            )

        out += mask_findings(window, silent_gpu, since_gpu, gpu_subject, make_silent)
        return out
