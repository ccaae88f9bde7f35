"""Turning boolean masks over (node, gpu, ...) into findings: shared by the rule detectors."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np

from analyzer.findings import Finding
from analyzer.window import Window


def mask_findings(
    window: Window,
    mask: np.ndarray,
    since: np.ndarray | None,
    subject: Callable[[tuple[int, ...]], str],
    make: Callable[[str, str, float, tuple[int, ...]], Finding | None],
) -> list[Finding]:
    """One finding per True cell of ``mask`` (axis 0 = node). ``make(node, subject, since, idx)``."""
    out: list[Finding] = []
    for idx in zip(*np.nonzero(mask), strict=False):
        ix = tuple(int(i) for i in idx)
        s = float(since[ix]) if since is not None and np.isfinite(since[ix]) else window.now
        f = make(window.nodes[ix[0]], subject(ix), s, ix)
        if f is not None:
            out.append(f)
    return out


def gpu_subject(ix: tuple[int, ...]) -> str:
    return f"gpu={ix[1]}"


def link_subject(ix: tuple[int, ...]) -> str:
    return f"link=gpu{ix[1]}/{ix[2]}"


def ev(**kw: float) -> Mapping[str, float]:
    return {k: float(v) for k, v in kw.items()}
