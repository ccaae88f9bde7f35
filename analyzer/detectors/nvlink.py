"""NVLink: a link that went down, and a per-link error rate that creeps up.

Reads ``nvlink_up`` (T, node, gpu, link) and ``nvlink_errors_total`` (T, node, gpu, link,
error_type), only the last few samples (the arrays are the largest in the window). Per-link
findings (``link=gpu3/7``). A healthy link sees about one CRC error in days, so errors in
``k`` of the last ``n`` samples with at least ``min_errors`` in total are already a trend;
a rate above ``drain_rate`` recommends a drain. On a node read through dcgm-exporter the
error counters are per-GPU sums over the GPU's links (the reader places them on link 0): the
finding names the GPU (``gpu=5``), never a link index nobody measured (an engineer would
reseat the wrong cable).

On NVL72 racks the GPUs of 18 nodes share one NVLink switch domain (the inventory's
``nvlink_domain``): a switch tray that fails takes the same links down on every GPU of the
domain. When most nodes of a domain (>= ``domain_fraction`` of >= ``domain_min_nodes``) have
links down at once, their link findings become one ``switch_degraded`` finding naming the
domain (notify: the tray is the rack's, draining its nodes would not fix it); a link down on
one node of a healthy domain stays the node's own finding.
"""

from __future__ import annotations

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, link_subject, mask_findings
from analyzer.detectors.series import increases, last_valid
from analyzer.findings import Finding
from analyzer.sources.dialects import DCGM
from analyzer.window import Window
from exporter import catalog


class NvlinkDetector:
    name = "nvlink"

    def __init__(
        self, k: int = 2, n: int = 6, min_errors: float = 3.0, drain_rate: float = 2.0,
        domain_fraction: float = 0.75, domain_min_nodes: int = 3,
    ) -> None:  # fmt: skip
        self.k, self.n, self.min_errors, self.drain_rate = k, n, min_errors, drain_rate
        self.domain_fraction, self.domain_min_nodes = domain_fraction, domain_min_nodes

    def detect(self, window: Window) -> list[Finding]:
        if window.empty:
            return []
        out: list[Finding] = []
        up = window.get(catalog.NVLINK_UP)
        down = None
        if up is not None:
            tail = up[-self.n :]
            down = last_valid(tail) < 0.5
            run = np.nan_to_num(tail, nan=1.0) < 0.5
            since = window.t[-self.n :][np.argmax(run, axis=0)]

            def make_down(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
                return Finding(node, subj, "nvlink_down", "critical", "drain", self.name, 1.0, s,
                               ev(up=0.0), "NVLink is down")  # fmt: skip

            out += mask_findings(window, down, since, link_subject, make_down)
            out = self._domains(window, out)
        err = window.get(catalog.NVLINK_ERRORS)
        if err is not None and err.ndim == 5 and err.shape[0] > self.n:
            out += self._errors(window, err[-self.n - 1 :], down)
        return out

    def _domains(self, w: Window, found: list[Finding]) -> list[Finding]:
        """Links down on most nodes of one NVLink switch domain: one finding for the domain."""
        members: dict[str, set[str]] = {}
        for n, dom in w.nvlink_domain_of.items():
            if 0 <= n < len(w.nodes):
                members.setdefault(dom, set()).add(w.nodes[n])
        out = found
        for dom, nodes in sorted(members.items()):
            hit = [f for f in out if f.node in nodes and f.kind == "nvlink_down"]
            bad = {f.node for f in hit}
            if len(nodes) < self.domain_min_nodes or len(bad) < self.domain_fraction * len(nodes):
                continue
            out = [f for f in out if f not in hit]
            out.append(Finding(dom, f"nvlink_domain={dom}", "switch_degraded", "critical",
                               "notify", self.name, len(bad) / len(nodes),
                               min(f.since for f in hit),
                               ev(nodes=len(nodes), degraded=len(bad), links=len(hit)),
                               "NVLinks down on most nodes of this NVLink switch domain at once"))  # fmt: skip
        return out

    def _errors(self, window: Window, err: np.ndarray, down: np.ndarray | None) -> list[Finding]:
        # the error types read at a step (Prometheus' moved-only read holds only the types that
        # moved; one that did not has no increase); a step with none stays NaN, a gap that
        # increases() bridges
        total = np.where(np.isnan(err).all(axis=-1), np.nan, np.nansum(err, axis=-1))
        inc = np.nan_to_num(increases(total), nan=0.0)
        hits = (inc > 0).sum(axis=0)
        errors = inc.sum(axis=0)
        mask = (hits >= self.k) & (errors >= self.min_errors)
        if down is not None and down.shape == mask.shape:
            mask &= ~down
        if not mask.any():
            return []
        t = window.t[-self.n - 1 :]
        span = float(t[-1] - t[0]) or 1.0
        rate = errors / span
        since = t[1:][np.argmax(inc > 0, axis=0)]

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            r = float(rate[ix])
            action = "drain" if r >= self.drain_rate else "cordon"
            conf = min(1.0, 0.6 + r / (2 * self.drain_rate))
            return Finding(node, subj, "nvlink_errors", "warning", action, self.name, conf, s,
                           ev(errors_per_s=r, errors=errors[ix]), "NVLink errors recurring")  # fmt: skip

        summed = {i for i, d in window.dialect_of.items() if DCGM in d.split("+")}

        def subject(ix: tuple[int, ...]) -> str:
            return gpu_subject(ix) if ix[0] in summed else link_subject(ix)

        return mask_findings(window, mask, since, subject, make)
