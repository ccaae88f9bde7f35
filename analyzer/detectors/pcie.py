"""PCIe link downgrade: a GPU running below its maximum link width, or below its maximum
generation while busy (GPUs legitimately drop the generation at idle to save power).

Reads ``gpu_pcie_link_{generation,width}{,_max}`` and ``gpu_utilization_ratio`` (T, node, gpu).
"""

from __future__ import annotations

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, mask_findings
from analyzer.detectors.series import first_true_time, k_of_n_known
from analyzer.findings import Finding
from analyzer.window import Window
from exporter import catalog


class PcieDetector:
    name = "pcie"

    def __init__(self, k: int = 2, n: int = 3, busy: float = 0.2):
        self.k, self.n, self.busy = k, n, busy

    def detect(self, window: Window) -> list[Finding]:
        if window.empty:
            return []
        gen, gmax = (
            window.get(catalog.GPU_PCIE_GENERATION),
            window.get(catalog.GPU_PCIE_GENERATION_MAX),
        )
        width, wmax = window.get(catalog.GPU_PCIE_WIDTH), window.get(catalog.GPU_PCIE_WIDTH_MAX)
        util = window.get(catalog.GPU_UTILIZATION)
        flags = known = None
        with np.errstate(invalid="ignore"):
            if width is not None and wmax is not None:
                wref = _ref(wmax)
                flags, known = width < wref, ~np.isnan(width) & ~np.isnan(wref)
            if gen is not None and gmax is not None:
                gref = _ref(gmax)
                g, gk = gen < gref, ~np.isnan(gen) & ~np.isnan(gref)
                if util is not None:
                    g &= util >= self.busy
                    gk &= ~np.isnan(util)
                flags = g if flags is None else (flags | g)
                known = gk if known is None else (known & gk)
        if flags is None or known is None:
            return []
        # healthy only where every check was seen; a gap is neither healthy nor faulty:
        # k of the last n samples that were seen
        known = known | flags
        mask = k_of_n_known(flags, known, self.k, self.n)
        since = first_true_time(flags, window.t)

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            n, g = ix
            return Finding(
                node,
                subj,
                "pcie_downgrade",
                "warning",
                "drain",
                self.name,
                0.9,
                s,
                ev(
                    generation=_last(gen, n, g),
                    generation_max=_last(gmax, n, g),
                    width=_last(width, n, g),
                    width_max=_last(wmax, n, g),
                ),
                "PCIe link running below its maximum",
            )

        return mask_findings(window, mask, since, gpu_subject, make)


def _ref(maxarr: np.ndarray) -> np.ndarray:
    # a max that is missing at one sample is the same max as before: fill from the window
    m = np.max(np.nan_to_num(maxarr, nan=-np.inf), axis=0, keepdims=True)
    m = np.where(np.isinf(m), np.nan, m)
    return np.where(np.isnan(maxarr), m, maxarr)


def _last(a: np.ndarray | None, n: int, g: int) -> float:
    if a is None:
        return float("nan")
    col = a[:, n, g]
    ok = col[~np.isnan(col)]
    return float(ok[-1]) if len(ok) else float("nan")
