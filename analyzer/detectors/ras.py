"""RAS errors per hardware block: deferred errors (AMD's "poison caught, not consumed").

Reads ``gpuwarden_gpu_ras_errors_total`` (T, node, gpu, block, error_type). Uncorrectable
errors are judged from the ECC totals by the memory detector, as on every vendor (one policy);
the block they came from (``umc`` is HBM) is named on that finding by the coverage annotation.
What only this family shows is the deferred error: uncorrectable data found and marked
poisoned before anything consumed it. The job may run on, but the memory behind it is bad (AMD
retires the page); one finding per GPU names the blocks and the count within the window.
"""

from __future__ import annotations

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, mask_findings
from analyzer.findings import Finding
from analyzer.window import RAS_BLOCKS, RAS_ERROR_TYPES, Window
from exporter import catalog

BLOCK_NAMES = {"umc": "umc (HBM)", "xgmi_wafl": "xgmi_wafl (XGMI link)"}


def rises(a: np.ndarray) -> np.ndarray:
    """Along axis 0 (time): how much a raw counter rose (resets absorbed: a drop restarts)."""
    d = np.diff(a, axis=0)
    d = np.where(np.isnan(d), 0.0, d)
    return np.where(d < 0, 0.0, d).sum(axis=0) if len(a) > 1 else np.zeros(a.shape[1:])


def blocks_that_rose(window: Window, error_type: str) -> np.ndarray | None:
    """(node, gpu, block): the rise of one error type per block within the window."""
    a = window.get(catalog.GPU_RAS_ERRORS)
    if a is None or a.ndim != 5:
        return None
    return rises(a[..., RAS_ERROR_TYPES.index(error_type)])


class RasDetector:
    name = "ras"

    def detect(self, window: Window) -> list[Finding]:
        rose = blocks_that_rose(window, "deferred") if not window.empty else None
        if rose is None:
            return []
        total = rose.sum(axis=-1)

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            n, g = ix
            blocks = [BLOCK_NAMES.get(b, b) for i, b in enumerate(RAS_BLOCKS) if rose[n, g, i] > 0]
            return Finding(node, subj, "ras_deferred", "warning", "cordon", self.name, 0.9, s,
                           ev(deferred=total[n, g], blocks=len(blocks)),
                           f"{total[n, g]:g} deferred error(s) in {', '.join(blocks)}: poisoned"
                           " data caught before use")  # fmt: skip

        return mask_findings(window, total > 0, None, gpu_subject, make)
