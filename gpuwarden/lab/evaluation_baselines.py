"""Baselines for ``gpuwarden evaluate``, run on the same windows in the same run as the
analyzer: static thresholds (what a typical dcgm-exporter alert set does), a plain fleet-wide
z-score, and a Mahalanobis distance over each node's profile. Each is a ``Detector``.
"""

from __future__ import annotations

import warnings

import numpy as np

from analyzer.detectors.series import increases, last_valid
from analyzer.findings import Finding
from analyzer.window import Window
from exporter import catalog

PROFILE = (
    catalog.GPU_TEMPERATURE,
    catalog.GPU_POWER,
    catalog.GPU_SM_CLOCK,
    catalog.GPU_UTILIZATION,
)


def _f(w: Window, n: int, subject: str, kind: str, detector: str) -> Finding:
    return Finding(w.nodes[n], subject, kind, "warning", "drain", detector, 1.0, w.now)


class StaticThresholds:
    """Any XID, GPU up 0, temperature > 85 C, any uncorrectable ECC, remap pending/failed, any
    NVLink error in the last step, IB symbol errors > 10/s or port not active, PCIe below max."""

    name = "static"

    def detect(self, w: Window) -> list[Finding]:
        if w.empty or len(w.t) < 2:
            return []
        hits: dict[tuple[int, str], str] = {}
        for e in w.xids:
            if e.t > w.t[-2]:
                hits[(e.node, f"gpu={e.gpu}")] = "xid_fatal"

        def gpu_mask(mask: np.ndarray | None, kind: str) -> None:
            if mask is None:
                return
            for n, g in zip(*np.nonzero(mask), strict=False):
                hits.setdefault((int(n), f"gpu={g}"), kind)

        up, temp = w.get(catalog.GPU_UP), w.get(catalog.GPU_TEMPERATURE)
        gpu_mask(None if up is None else up[-1] == 0, "gpu_lost")
        gpu_mask(None if temp is None else temp[-1] > 85, "throttling")
        ecc = w.get(catalog.GPU_ECC_ERRORS)
        if ecc is not None and ecc.ndim == 5:
            gpu_mask(
                np.nan_to_num(increases(ecc[-2:, :, :, 1, 0]), nan=0)[-1] > 0, "ecc_uncorrectable"
            )
        for m, kind in ((catalog.GPU_ROW_REMAP_PENDING, "row_remap_pending"),
                        (catalog.GPU_ROW_REMAP_FAILED, "row_remap_failed")):  # fmt: skip
            a = w.get(m)
            gpu_mask(None if a is None else a[-1] >= 1, kind)
        gen, gmax = w.get(catalog.GPU_PCIE_GENERATION), w.get(catalog.GPU_PCIE_GENERATION_MAX)
        if gen is not None and gmax is not None:
            gpu_mask(gen[-1] < gmax[-1], "pcie_downgrade")
        nvl = w.get(catalog.NVLINK_ERRORS)
        if nvl is not None and nvl.ndim == 5:
            inc = np.nan_to_num(increases(nvl[-2:].sum(axis=-1)), nan=0)[-1] > 0
            gpu_mask(inc.any(axis=-1), "nvlink_errors")
        state = w.get(catalog.IB_PORT_STATE)
        sym = w.ib_counters.get("symbol_error")
        for mask, kind in (
            (None if state is None else (last_valid(state[-1:]) != 4) & ~np.isnan(state[-1]), "ib_port_down"),
            (None if sym is None else np.nan_to_num(increases(sym[-2:]), nan=0)[-1] / w.step > 10, "ib_errors"),
        ):  # fmt: skip
            if mask is not None:
                for n, p in zip(*np.nonzero(mask), strict=False):
                    hits.setdefault((int(n), f"port={w.port_name(p)}"), kind)
        return [_f(w, n, s, k, self.name) for (n, s), k in hits.items()]


def _profile(w: Window) -> np.ndarray | None:
    cols = []
    for m in PROFILE:
        a = w.get(m)
        if a is None or a.ndim != 3:
            return None
        cols.append(a[-1])
    return np.stack(cols, axis=-1)  # (nodes, gpus, features)


class ZScore:
    """|z| > 3 against the fleet-wide mean and standard deviation, per GPU, last sample."""

    name = "zscore"

    def __init__(self, z: float = 3.0) -> None:
        self.z = z

    def detect(self, w: Window) -> list[Finding]:
        x = None if w.empty else _profile(w)
        if x is None:
            return []
        with np.errstate(all="ignore"):
            z = (x - np.nanmean(x, axis=(0, 1))) / np.nanstd(x, axis=(0, 1))
        mask = (np.abs(np.nan_to_num(z, nan=0.0)) > self.z).any(axis=-1)
        return [_f(w, int(n), f"gpu={g}", "faulty_machine", self.name)
                for n, g in zip(*np.nonzero(mask), strict=False)]  # fmt: skip


class Mahalanobis:
    """Squared Mahalanobis distance of each node's mean profile from the fleet's, above the
    chi-square 99.9% quantile for 4 degrees of freedom."""

    name = "mahalanobis"

    def __init__(self, threshold: float = 18.47) -> None:
        self.threshold = threshold

    def detect(self, w: Window) -> list[Finding]:
        x = None if w.empty else _profile(w)
        if x is None:
            return []
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            nodes = np.nanmean(x, axis=1)
        ok = np.isfinite(nodes).all(axis=1)
        if ok.sum() < 8:
            return []
        mu = nodes[ok].mean(axis=0)
        inv = np.linalg.pinv(np.cov(nodes[ok], rowvar=False))
        d = nodes - mu
        d2 = np.einsum("ij,jk,ik->i", np.nan_to_num(d), inv, np.nan_to_num(d))
        return [_f(w, int(n), "node", "faulty_machine", self.name)
                for n in np.nonzero(ok & (d2 > self.threshold))[0]]  # fmt: skip
