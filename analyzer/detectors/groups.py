"""Peer groups: who a node is compared with. The nodes of the same job; idle nodes fall back
to same-SKU fleet peers. Pure function of the window's job map."""

from __future__ import annotations

import numpy as np

from analyzer.window import Window


def peer_groups(window: Window, min_size: int = 3) -> list[tuple[str, np.ndarray]]:
    """``[(group name, node indices)]``: each job with >= ``min_size`` nodes, then the
    remaining nodes per SKU ("idle/<sku>")."""
    n = len(window.nodes)
    taken = np.zeros(n, dtype=bool)
    out: list[tuple[str, np.ndarray]] = []
    for job, members in sorted(window.jobs.items()):
        idx = np.array(sorted({m for m in members if 0 <= m < n}), dtype=int)
        if len(idx) >= min_size:
            out.append((f"job/{job}", idx))
        taken[idx] = True
    skus = window.sku if len(window.sku) == n else ("",) * n
    for sku in sorted(set(skus)):
        idx = np.array([i for i in range(n) if not taken[i] and skus[i] == sku], dtype=int)
        if len(idx) >= min_size:
            out.append((f"idle/{sku}" if sku else "idle", idx))
    return out
