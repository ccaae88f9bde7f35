"""NVLink fabric health per GPU (nvmlDeviceGetGpuFabricInfoV's health mask), judged per domain.

Reads ``gpu_fabric_health`` (T, node, gpu, check in :data:`exporter.catalog.FABRIC_HEALTH_CHECKS`
order; 1 set, 0 clear, NaN unreported) and the window's NVLink domains
(``Window.nvlink_domain_of``: from the GPUs' fabric info, cluster UUID + clique id, before
node labels: :func:`common.fabric.nvlink_domains`). A GPU whose route is unhealthy, whose
bandwidth is degraded, whose configuration is wrong or whose global fabric manager is gone,
on each of the last ``k`` samples, is degraded.

Like leaves and NVLink switch domains elsewhere: one GPU degraded in a healthy domain is the
GPU's ``fabric_degraded`` finding (drain: its tray or links); most GPUs of a domain degraded at
once (>= ``domain_fraction`` of the domain's reporting GPUs, from >= ``domain_min_nodes``
nodes) is ONE ``switch_degraded`` finding naming the domain (notify: a switch tray or the
fabric, draining the rack node by node would not fix it), and no per-GPU findings there.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, mask_findings
from analyzer.findings import Finding
from analyzer.window import Window
from exporter import catalog

DEGRADING = ("route_unhealthy", "degraded_bandwidth", "incorrect_configuration", "gfm_disconnected")


class FabricDetector:
    name = "fabric"

    def __init__(self, k: int = 3, domain_fraction: float = 0.5, domain_min_nodes: int = 2) -> None:
        self.k, self.domain_fraction, self.domain_min_nodes = k, domain_fraction, domain_min_nodes

    def detect(self, window: Window) -> list[Finding]:
        a = window.get(catalog.GPU_FABRIC_HEALTH)
        checks = catalog.FABRIC_HEALTH_CHECKS
        if window.empty or a is None or a.ndim != 4 or a.shape[-1] != len(checks):
            return []
        if a.shape[0] < self.k:
            return []
        idx = [checks.index(c) for c in DEGRADING]
        tail = a[-self.k :][..., idx]
        set_ = np.nan_to_num(tail, nan=0.0) >= 0.5
        degraded = set_.any(axis=-1).all(axis=0)  # (N, G): some check set on every sample
        which = set_[-1]  # (N, G, checks) now
        reporting = ~np.isnan(a[-1]).all(axis=-1)  # (N, G)
        since = np.full(degraded.shape, float(window.t[-self.k]))
        out: list[Finding] = []
        covered = np.zeros(degraded.shape[0], dtype=bool)
        for dom, nodes in sorted(domain_nodes(window).items()):
            rep = reporting[nodes]
            bad = degraded[nodes] & rep
            if rep.any(axis=1).sum() < self.domain_min_nodes:  # one tray cannot speak for a switch
                continue
            share = bad.sum() / rep.sum()
            if share < self.domain_fraction:
                continue
            covered[nodes] = True
            out.append(Finding(
                dom, f"nvlink_domain={dom}", "switch_degraded", "critical", "notify", self.name,
                float(share), float(window.t[-self.k]),
                ev(nodes=len(nodes), gpus=int(rep.sum()), degraded=int(bad.sum()),
                   degraded_nodes=int(bad.any(axis=1).sum())),
                "the NVLink fabric of most of this domain's GPUs is degraded at once: a switch"
                " tray or the fabric, not the GPUs",
            ))  # fmt: skip
        mask = degraded & reporting & ~covered[:, None]

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            names = [c for c, on in zip(DEGRADING, which[ix], strict=True) if on]
            return Finding(node, subj, "fabric_degraded", "warning", "drain", self.name, 1.0, s,
                           ev(**{c: 1.0 for c in names}),
                           "NVLink fabric degraded on this GPU: " + ", ".join(names))  # fmt: skip

        return out + mask_findings(window, mask, since, gpu_subject, make)


def domain_nodes(w: Window) -> dict[str, list[int]]:
    """NVLink domain -> its node indices (sorted), from ``Window.nvlink_domain_of``."""
    out: dict[str, list[int]] = defaultdict(list)
    for n, dom in w.nvlink_domain_of.items():
        if 0 <= n < len(w.nodes) and dom:
            out[dom].append(n)
    return {d: sorted(ns) for d, ns in out.items()}
