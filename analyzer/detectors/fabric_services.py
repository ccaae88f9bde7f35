"""Fabric Manager and IMEX units per node, judged per NVLink domain.

Reads ``fabric_service_up`` (T, node, service in :data:`exporter.catalog.FABRIC_SERVICES`
order; 1 active, 0 not, NaN: a node without the unit has no series) and the window's NVLink domains
(``Window.nvlink_domain_of``, as :mod:`analyzer.detectors.fabric`). A service is down on a node
when its unit was not active on each of the last ``k`` samples; IMEX also when its daemon did not
answer READY (``fabric_imex_ready`` 0, where the exporter reads it) on each of them.

Like the fabric detector's ``switch_degraded``: a service down on most nodes of a domain
(>= ``domain_fraction`` of the domain's nodes that run it, and >= ``domain_min_nodes``) is ONE
``domain_fabric_service_down`` finding naming the domain (its IMEX configuration, nodes file or
network, or its fabric manager: one incident, never a drain per node), and no node findings
there. A service down on a node whose domain is otherwise fine (one tray's IMEX, an HGX node's
Fabric Manager) is that node's ``fabric_service_down``. Both notify: the fix is the daemon.
"""

from __future__ import annotations

import numpy as np

from analyzer.detectors.emit import ev
from analyzer.detectors.fabric import domain_nodes
from analyzer.findings import Finding
from analyzer.window import Window
from exporter import catalog

LABEL = {"fabricmanager": "Fabric Manager", "imex": "IMEX"}


class FabricServicesDetector:
    name = "fabric_services"

    def __init__(self, k: int = 3, domain_fraction: float = 0.5, domain_min_nodes: int = 2) -> None:
        self.k, self.domain_fraction, self.domain_min_nodes = k, domain_fraction, domain_min_nodes

    def detect(self, window: Window) -> list[Finding]:
        a = window.get(catalog.FABRIC_SERVICE_UP)
        services = catalog.FABRIC_SERVICES
        if window.empty or a is None or a.ndim != 3 or a.shape[-1] != len(services):
            return []
        if a.shape[0] < self.k:
            return []
        tail = a[-self.k :]
        down = (~np.isnan(tail) & (tail < 0.5)).all(axis=0)  # (N, S)
        runs = ~np.isnan(a[-1])
        ready = window.get(catalog.FABRIC_IMEX_READY)
        if ready is not None and ready.shape == a.shape[:2]:  # an active unit, daemon not ready
            r = ready[-self.k :]
            i = services.index("imex")
            down[:, i] |= (~np.isnan(r) & (r < 0.5)).all(axis=0)
            runs[:, i] |= ~np.isnan(ready[-1])
        since = float(window.t[-self.k])
        out: list[Finding] = []
        for dom, nodes in sorted(domain_nodes(window).items()):
            f = self._domain(dom, nodes, down, runs, since)
            if f is not None:
                out.append(f)
                down[nodes] = False  # counted in the domain's finding
        for n, s in zip(*np.nonzero(down), strict=True):
            svc = services[int(s)]
            out.append(Finding(
                window.nodes[int(n)], f"service={svc}", "fabric_service_down", "warning",
                "notify", self.name, 1.0, since, ev(down=1.0),
                f"{LABEL[svc]} (nvidia-{svc}.service) is not active or not ready on this node"
                " while the rest of its NVLink domain runs it: restart the daemon, do not drain",
            ))  # fmt: skip
        return out

    def _domain(self, dom: str, nodes: list[int], down: np.ndarray, runs: np.ndarray,
                since: float) -> Finding | None:  # fmt: skip
        counts = down[nodes].sum(axis=0)  # per service: nodes of the domain where it is down
        running = runs[nodes].sum(axis=0)  # per service: nodes of the domain that report it
        wide = (counts >= self.domain_min_nodes) & (counts >= self.domain_fraction * running)
        if not wide.any():
            return None
        services = catalog.FABRIC_SERVICES
        names = [LABEL[services[i]] for i in np.flatnonzero(wide)]
        return Finding(
            dom, f"nvlink_domain={dom}", "domain_fabric_service_down", "critical", "notify",
            self.name, float((counts / np.maximum(running, 1)).max()), since,
            ev(nodes=len(nodes), **{f"{s}_down": float(c) for s, c in zip(services, counts,
                                                                            strict=True)}),
            " and ".join(names) + " down on most nodes of this NVLink domain at once: the"
            " domain's service (configuration, nodes file, network), one incident, not a drain"
            " per node",
        )  # fmt: skip
