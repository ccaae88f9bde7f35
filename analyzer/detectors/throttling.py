"""Sustained throttling: a hardware or thermal clock-event reason held for most of the recent
window. Power capping and idle are normal and ignored.

Reads ``gpu_clock_throttle_active`` (T, node, gpu, reason in catalogue order).
"""

from __future__ import annotations

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, mask_findings
from analyzer.detectors.groups import like_reference, model_pool, split_by_model
from analyzer.detectors.power_brake import BRAKE
from analyzer.detectors.series import first_true_time, last_valid
from analyzer.findings import Finding
from analyzer.pools import POWER_LIMIT, Pool
from analyzer.window import THROTTLE_REASONS, Window
from exporter import catalog

# hw_power_brake_slowdown is the power-brake detector's (analyzer.detectors.power_brake): the
# brake is the rack's power feed, judged per rack, never one cordon per GPU. NVML sets
# hw_slowdown (0x08) with the brake (0x80) too: "also set when ... External Power Brake
# Assertion is triggered" (nvml.h, nvmlClocksEventReasonHwSlowdown), so a poll with the brake
# asserted does not count its hw_slowdown here (a braked rack reports 0x88 on every GPU).
HARDWARE = ("hw_slowdown", "hw_thermal_slowdown", "sw_thermal_slowdown")


class ThrottlingDetector:
    name = "throttling"

    def __init__(
        self,
        span: float = 60.0,
        fraction: float = 0.75,
        min_samples: int = 3,
        cap_fraction: float = 0.8,
        rack_fraction: float = 0.9,
    ):
        self.span, self.fraction, self.min_samples = span, fraction, min_samples
        self.cap_fraction, self.rack_fraction = cap_fraction, rack_fraction

    def detect(self, window: Window) -> list[Finding]:
        a = window.get(catalog.GPU_THROTTLE)
        if window.empty or a is None or a.ndim != 4 or a.shape[-1] != len(THROTTLE_REASONS):
            return []
        idx = [THROTTLE_REASONS.index(r) for r in HARDWARE]
        hw = a[..., idx]
        active = np.nan_to_num(hw, nan=0.0) >= 0.5
        braked = np.nan_to_num(a[..., THROTTLE_REASONS.index(BRAKE)], nan=0.0) >= 0.5
        active[..., HARDWARE.index("hw_slowdown")] &= ~braked
        anyr = active.any(axis=-1)
        tail = anyr[window.tail(self.span)]
        seen = ~np.isnan(hw[window.tail(self.span)]).all(axis=-1)
        n_seen = seen.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            frac = tail.sum(axis=0) / n_seen
        mask = (n_seen >= self.min_samples) & (frac >= self.fraction)
        since = first_true_time(anyr, window.t)
        which = active[-self.min_samples :].sum(axis=0)

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            n, g = ix
            reason = HARDWARE[int(np.argmax(which[n, g]))]
            action = "notify" if reason == "sw_thermal_slowdown" else "cordon"
            return Finding(
                node,
                subj,
                "throttling",
                "warning",
                action,
                self.name,
                float(frac[n, g]),
                s,
                ev(fraction=frac[n, g]),
                f"clocks held down by {reason}",
            )

        out = mask_findings(window, mask, since, gpu_subject, make)
        return out + self._power_cap(window, mask)

    def pools(self, window: Window) -> dict[str, Pool]:
        """The power limits of this window's GPUs not at an administrator's cap, by model (a
        replica's part: the others judge their GPUs against the model's whole median)."""
        got = self._limits(window)
        if got is None:
            return {}
        last, admin, _ = got
        return {POWER_LIMIT: model_pool(window, np.where(admin, np.nan, last))}

    def _limits(self, window: Window) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """``(last, admin, rack_cap)``, each (N, G): the enforced power limits and which are
        an administrator's (:func:`admin_capped`); None without a limit to judge."""
        lim = window.get(catalog.GPU_POWER_LIMIT)
        if lim is None or lim.ndim != 3:
            return None
        last = last_valid(lim[-self.min_samples :])
        if not np.isfinite(last).any():
            return None
        admin, rack_cap = admin_capped(window, last)
        return last, admin, rack_cap

    def _power_cap(self, window: Window, flagged: np.ndarray) -> list[Finding]:
        """An enforced power limit well below its model's (the same-model peers' median, or
        the specification when they are too few): the GPU is capped (and slow). A cap the
        inventory names, or one every GPU of a rack shares, is configuration, not a fault."""
        got = self._limits(window)
        if got is None:
            return []
        last, admin, rack_cap = got
        # the model's limit from the GPUs at their own (not an administrator's) limit
        ref = like_reference(window, np.where(admin, np.nan, last), lambda s: s.power_limit_w,
                             pooled=POWER_LIMIT)  # fmt: skip
        ref = np.broadcast_to(ref[:, None], last.shape)
        with np.errstate(invalid="ignore"):
            below_model = last < self.cap_fraction * ref
            # below the limit the rest of its rack is configured to: capped further than the
            # administrator's cap (a 500 W rack with a node at 400 W is 0.8x of the rack, not
            # "far below" a 700 W model's limit, but it is not configuration either)
            below_rack = last < self.rack_fraction * rack_cap
            capped = (below_model | below_rack) & ~flagged & ~admin

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            rack = bool(below_rack[ix] and not below_model[ix])
            return Finding(node, subj, "throttling", "warning", "cordon", self.name, 0.8, s,
                           ev(power_limit_w=last[ix], model_limit_w=ref[ix],
                              **({"rack_limit_w": rack_cap[ix]} if rack else {})),
                           "power limit below its rack's configured cap" if rack
                           else "power limit far below its model's")  # fmt: skip

        return mask_findings(window, capped, None, gpu_subject, make)


def admin_capped(
    w: Window, limit: np.ndarray, share: float = 0.75
) -> tuple[np.ndarray, np.ndarray]:
    """``(admin, rack_cap)``, both (N, G). ``admin``: True where a power limit is an
    administrator's: the node's cap in the inventory, or the limit at least ``share`` of a
    rack's GPUs of one model have (a rack of >= 2 nodes; the leaf switch stands in for the
    rack when the inventory names none). ``rack_cap``: that common limit for every GPU of the
    rack and model (NaN where there is none), so a GPU capped below it stands out (one node
    of an 8-node rack is 12.5 % of its GPUs: the rest still say what the rack is set to)."""
    out = np.zeros(limit.shape, dtype=bool)
    rack_cap = np.full(limit.shape, np.nan)
    for n, cap in w.power_cap_w.items():
        if 0 <= n < len(out):
            out[n] = np.abs(limit[n] - cap) <= 0.01 * cap
    rack = w.rack_of or w.leaf_of
    racks: dict[str, list[int]] = {}
    for n, r in rack.items():
        if 0 <= n < len(out):
            racks.setdefault(r, []).append(n)
    for nodes in racks.values():
        for _, idx in split_by_model(w, np.array(nodes, dtype=int)):
            vals = np.rint(limit[idx])
            ok = np.isfinite(vals)
            if len(idx) < 2 or not ok.any():
                continue
            common, count = np.unique(vals[ok], return_counts=True)
            mode = common[np.argmax(count)]
            if count.max() >= share * vals.size:
                out[idx] |= vals == mode
                rack_cap[idx] = mode
    return out, rack_cap
