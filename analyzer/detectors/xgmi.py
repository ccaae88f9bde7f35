"""XGMI link loss, inferred against the link's siblings: AMD's exporters serve traffic per XGMI
link (one link per peer GPU of the hive) but no link state and no CRC counter, so a dead link
shows as a counter gone flat while the GPU's other links carry traffic.

Reads ``gpuwarden_gpu_xgmi_{transmit,receive}_bytes_total`` (T, node, gpu, link) and, as
corroboration, the GPU's ``xgmi_wafl`` RAS errors. A link is lost when, over the last
``span`` seconds, neither direction moved although it carried data before (a counter at 0
throughout is the GPU's own index, not a link) while at least ``min_rising`` of its sibling
links, and half of those that carry data, rose. An idle GPU (no link rising) says nothing.
"""

from __future__ import annotations

import numpy as np

from analyzer.detectors.emit import ev, link_subject, mask_findings
from analyzer.findings import Finding
from analyzer.window import RAS_BLOCKS, RAS_ERROR_TYPES, Window
from exporter import catalog


class XgmiDetector:
    name = "xgmi"

    def __init__(self, span: float = 180.0, min_rising: int = 2, min_samples: int = 4) -> None:
        self.span, self.min_rising, self.min_samples = span, min_rising, min_samples

    def detect(self, window: Window) -> list[Finding]:
        arrays = [a for a in (window.get(catalog.GPU_XGMI_TRANSMIT),
                              window.get(catalog.GPU_XGMI_RECEIVE)) if a is not None]  # fmt: skip
        if window.empty or not arrays:
            return []
        tail = window.tail(self.span)
        moved, carried, seen = None, None, None
        for a in arrays:
            part = a[tail]
            ok = ~np.isnan(part)
            n = ok.sum(axis=0)
            with np.errstate(invalid="ignore"):
                lo, hi = np.nanmin(np.where(ok, part, np.inf), axis=0), np.nanmax(
                    np.where(ok, part, -np.inf), axis=0)  # fmt: skip
            m = (n >= 2) & (hi > lo)
            c = (n >= 1) & (hi > 0)
            moved = m if moved is None else moved | m
            carried = c if carried is None else carried | c
            seen = n if seen is None else np.maximum(seen, n)
        assert moved is not None and carried is not None and seen is not None
        links = carried & (seen >= self.min_samples)
        rising = (moved & links).sum(axis=-1, keepdims=True)
        live = links.sum(axis=-1, keepdims=True)
        flat = links & ~moved
        others = rising  # a flat link is not among the rising ones
        lost = flat & (others >= self.min_rising) & (2 * others >= live - 1)
        wafl = _wafl_errors(window)

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            n, g, _ = ix
            errs = float(wafl[n, g]) if wafl is not None else 0.0
            return Finding(node, subj, "xgmi_link_lost", "critical", "drain", self.name,
                           0.95 if errs > 0 else 0.8, s,
                           ev(sibling_links_rising=rising[n, g, 0], links=live[n, g, 0],
                              xgmi_wafl_errors=errs),
                           "XGMI link carries nothing while its siblings do: link lost"
                           + (" (xgmi_wafl RAS errors on this GPU)" if errs > 0 else ""))  # fmt: skip

        return mask_findings(window, lost, None, link_subject, make)


def _wafl_errors(window: Window) -> np.ndarray | None:
    """Per (node, gpu): xgmi_wafl RAS errors (any type) that rose within the window."""
    a = window.get(catalog.GPU_RAS_ERRORS)
    if a is None or a.ndim != 5:
        return None
    b = a[:, :, :, RAS_BLOCKS.index("xgmi_wafl"), :]
    ok = ~np.isnan(b)
    with np.errstate(invalid="ignore"):
        hi = np.nanmax(np.where(ok, b, -np.inf), axis=0)
        lo = np.nanmin(np.where(ok, b, np.inf), axis=0)
    rose = np.where(ok.sum(axis=0) >= 2, hi - lo, 0.0)
    return np.clip(rose, 0, None).sum(axis=-1) if rose.shape[-1] == len(RAS_ERROR_TYPES) else None
