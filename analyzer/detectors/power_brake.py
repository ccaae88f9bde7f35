"""Hardware power brake: clocks held by the power-brake input (clocks-event reason 0x80).

Reads ``gpu_clock_throttle_active`` (T, node, gpu, reason) at reason
``hw_power_brake_slowdown`` (NVML ``nvmlClocksEventReasonHwPowerBrakeSlowdown``, 0x80: "an
external power brake assertion", driven by the board's or the rack's power system, not the
GPU). The software power cap (``sw_power_cap``, 0x4) is normal under load and never counts.

A brake asserted on ``consecutive`` polls in a row is held, not a blip. The brake is the
facility's: when it is asserted on most nodes of one rack at once (``rack_fraction`` of the
rack's reporting nodes in any of the last polls, at least ``rack_min_nodes``) and held on one
of them, it is ONE ``facility_power_brake`` finding
naming the rack (an NVL72 rack is its NVLink domain where the inventory names no rack):
notify only, never a drain, since the machines are fine and draining a rack for its power
feed loses its work for nothing. A brake on a node of an otherwise unbraked rack is the node's
own ``power_brake`` finding per GPU (cordon: its board or power shelf; jobs there run slow).
One 288-node GB200 cluster had 9 nodes held this way for 36 hours unnoticed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import numpy as np

from analyzer.detectors.emit import ev, gpu_subject, mask_findings
from analyzer.findings import Finding
from analyzer.window import THROTTLE_REASONS, Window
from exporter import catalog

BRAKE = "hw_power_brake_slowdown"


class PowerBrakeDetector:
    name = "power_brake"

    def __init__(
        self, consecutive: int = 4, rack_fraction: float = 0.5, rack_min_nodes: int = 2
    ) -> None:
        if consecutive < 1:
            raise ValueError(f"consecutive must be >= 1, got {consecutive}")
        self.consecutive = consecutive
        self.rack_fraction, self.rack_min_nodes = rack_fraction, rack_min_nodes

    def detect(self, window: Window) -> list[Finding]:
        a = window.get(catalog.GPU_THROTTLE)
        if window.empty or a is None or a.ndim != 4 or a.shape[-1] != len(THROTTLE_REASONS):
            return []
        if a.shape[0] < self.consecutive:
            return []
        brake = a[..., THROTTLE_REASONS.index(BRAKE)]
        tail = brake[-self.consecutive :]
        on = np.nan_to_num(tail, nan=0.0) >= 0.5
        held = on.all(axis=0)  # (N, G): every poll braked
        # asserted in any recent poll: a rack's nodes are scraped at different moments, so at
        # a facility brake's onset some are held while the rest are a poll or two behind; they
        # count toward the rack (a per-node cordon for a facility event is wrong)
        asserted = on.any(axis=0).any(axis=1)
        seen = ~np.isnan(brake[-1])  # the node reports now (a missing node is not braked)
        held &= seen
        if not held.any():
            return []
        since = _since(brake, window.t)
        out: list[Finding] = []
        racked = np.zeros(held.shape[0], dtype=bool)
        for rack, nodes in sorted(_racks(window).items()):
            reporting = [n for n in nodes if seen[n].any()]
            braked = [n for n in reporting if held[n].any()]
            if len(reporting) < self.rack_min_nodes or not braked:
                continue
            if sum(bool(asserted[n]) for n in reporting) < self.rack_fraction * len(reporting):
                continue
            racked[braked] = True
            positions = {int(g) for n in braked for g in np.flatnonzero(held[n])}
            start = float(np.nanmin([since[n][held[n]].min() for n in braked]))
            evidence = ev(nodes=len(reporting), braked=len(braked),
                          gpus=int(held[braked].sum()), positions=len(positions))  # fmt: skip
            out.append(self._rack(rack, len(braked) / len(reporting), start, evidence))
        mask = held & ~racked[:, None]

        def make(node: str, subj: str, s: float, ix: tuple[int, ...]) -> Finding:
            return Finding(node, subj, "power_brake", "warning", "cordon", self.name, 1.0, s,
                           ev(polls=self.consecutive),
                           "clocks held by the hardware power brake (not the power cap)")  # fmt: skip

        return out + mask_findings(window, mask, since, gpu_subject, make)

    def _rack(
        self, rack: str, share: float, since: float, evidence: Mapping[str, float]
    ) -> Finding:
        return Finding(
            rack,
            f"rack={rack}",
            "facility_power_brake",
            "critical",
            "notify",
            self.name,
            share,
            since,
            evidence,
            "hardware power brake held on most of this rack: the facility's power, not the machines",
        )


def _racks(w: Window) -> dict[str, list[int]]:
    """Rack -> nodes: the inventory's rack, else the NVLink domain (an NVL72 rack), else none."""
    out: dict[str, list[int]] = defaultdict(list)
    for n in range(len(w.nodes)):
        rack = w.rack_of.get(n) or w.nvlink_domain_of.get(n)
        if rack:
            out[rack].append(n)
    return out


def _since(brake: np.ndarray, t: np.ndarray) -> np.ndarray:
    """(N, G): the time of the first sample of the brake's current run."""
    on = np.nan_to_num(brake, nan=0.0) >= 0.5
    # index after the last "off" sample; 0 when braked through the whole window
    off_rev = np.argmax(~on[::-1], axis=0)
    all_on = on.all(axis=0)
    start = np.where(all_on, 0, on.shape[0] - off_rev)
    start = np.clip(start, 0, len(t) - 1)
    return t[start]
