"""PCIe link downgrade: a GPU running below its maximum link width, or below its maximum
generation while busy (GPUs legitimately drop the generation at idle to save power).

Reads ``gpu_pcie_link_{generation,width}{,_max}`` and ``gpu_utilization_ratio`` (T, node, gpu).
Where no maximum is served (dcgm-exporter has no maximum-link field) the reference is the
GPU's peers: the median link of the busy GPUs of the same model (at least ``min_nodes`` nodes
of it), and no higher than the median of the GPU's own node, so a GPU is a finding only when
it trained below both its same-model peers and its siblings. A fleet whose GPUs of a model all
run at a lower generation, or a node whose GPUs all do (its platform, a configuration), is no
finding; different models are never compared.
"""

from __future__ import annotations

import math
import warnings

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, mask_findings
from analyzer.detectors.groups import split_by_model
from analyzer.detectors.series import first_true_time, k_of_n_known
from analyzer.findings import Finding
from analyzer.pools import PCIE_GENERATION, PCIE_WIDTH, Pool, medians, pool_of
from analyzer.window import Window
from exporter import catalog


class PcieDetector:
    name = "pcie"

    def __init__(self, k: int = 2, n: int = 3, busy: float = 0.2, peer_n: int = 12,
                 min_nodes: int = 3):  # fmt: skip
        self.k, self.n, self.busy = k, n, busy
        self.peer_n, self.min_nodes = peer_n, min_nodes

    def detect(self, window: Window) -> list[Finding]:
        if window.empty:
            return []
        gen, gmax = (
            window.get(catalog.GPU_PCIE_GENERATION),
            window.get(catalog.GPU_PCIE_GENERATION_MAX),
        )
        width, wmax = window.get(catalog.GPU_PCIE_WIDTH), window.get(catalog.GPU_PCIE_WIDTH_MAX)
        util = window.get(catalog.GPU_UTILIZATION)
        with np.errstate(invalid="ignore"):
            busy = None if util is None else util >= self.busy
        wref = gref = None
        if width is not None:
            wref = self._reference(window, width, wmax, None, PCIE_WIDTH)
        if gen is not None:
            gref = self._reference(window, gen, gmax, busy, PCIE_GENERATION)
        flags = known = None
        with np.errstate(invalid="ignore"):
            if width is not None and wref is not None:
                flags, known = width < wref, ~np.isnan(width) & ~np.isnan(wref)
            if gen is not None and gref is not None:
                g, gk = gen < gref, ~np.isnan(gen) & ~np.isnan(gref)
                if util is not None and busy is not None and util.shape == gen.shape:
                    g &= busy
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
            peers = math.isnan(_last(gmax, n, g)) and math.isnan(_last(wmax, n, g))
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
                    **(
                        {"peer_generation": _last(gref, n, g), "peer_width": _last(wref, n, g)}
                        if peers
                        else {}
                    ),
                ),
                "PCIe link running below its same-model peers' (no maximum exported)"
                if peers
                else "PCIe link running below its maximum",
            )

        return mask_findings(window, mask, since, gpu_subject, make)

    def pools(self, window: Window) -> dict[str, Pool]:
        """Each GPU's typical link width and busy generation, by model (a replica's part:
        the others' peers are the model's whole median)."""
        if window.empty:
            return {}
        util = window.get(catalog.GPU_UTILIZATION)
        with np.errstate(invalid="ignore"):
            busy = None if util is None else util >= self.busy
        out = {}
        for q, cur, b in (
            (PCIE_WIDTH, window.get(catalog.GPU_PCIE_WIDTH), None),
            (PCIE_GENERATION, window.get(catalog.GPU_PCIE_GENERATION), busy),
        ):
            if cur is not None and cur.ndim == 3 and cur.shape[1] == len(window.nodes):
                typical = self._typical(cur, b)
                out[q] = pool_of(typical, _known_models(window))
        return out

    def _reference(self, w: Window, cur: np.ndarray, maxarr: np.ndarray | None,
                   busy: np.ndarray | None, pooled: str) -> np.ndarray:  # fmt: skip
        """(T, N, G): the exported maximum, else (where none is) the peers' link."""
        ref = _ref(maxarr) if maxarr is not None and maxarr.shape == cur.shape else None
        if ref is not None and not np.isnan(ref).any():
            return ref
        peers = np.broadcast_to(self._peers(w, cur, busy, pooled)[None], cur.shape)
        return peers if ref is None else np.where(np.isnan(ref), peers, ref)

    def _typical(self, cur: np.ndarray, busy: np.ndarray | None) -> np.ndarray:
        """(N, G): each GPU's median link over the last ``peer_n`` samples (busy ones only,
        with ``busy``); NaN where none."""
        tail = cur[-self.peer_n :]
        if busy is not None and busy.shape == cur.shape:
            tail = np.where(busy[-self.peer_n :], tail, np.nan)
        with warnings.catch_warnings():  # an all-NaN GPU: no value, expected
            warnings.simplefilter("ignore", RuntimeWarning)
            return np.asarray(np.nanmedian(tail, axis=0))

    def _peers(self, w: Window, cur: np.ndarray, busy: np.ndarray | None,
               pooled: str) -> np.ndarray:  # fmt: skip
        """(N, G): per GPU, the lower of its model's median link (over the nodes of the model
        with a value, at least ``min_nodes``, the other replicas' too: ``pooled``) and its
        node's median; NaN where none."""
        N = len(w.nodes)
        out = np.full(cur.shape[1:], np.nan)
        if cur.ndim != 3 or cur.shape[1] != N:
            return out
        typical = self._typical(cur, busy)
        groups = _known_models(w)
        model = medians(pool_of(typical, groups), w.elsewhere.get(pooled), self.min_nodes)
        with warnings.catch_warnings():  # an all-NaN node: no value, expected
            warnings.simplefilter("ignore", RuntimeWarning)
            for sku, idx in groups:
                if sku in model:  # else too few peers: no judgement
                    node = np.nanmedian(typical[idx], axis=1)
                    out[idx] = np.fmin(model[sku], node)[:, None]
        return out


def _known_models(w: Window) -> list[tuple[str, np.ndarray]]:
    """The window's nodes by GPU model, those of an unknown model left out (no judgement)."""
    return [(k, idx) for k, idx in split_by_model(w, np.arange(len(w.nodes))) if k]


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
