"""Scoring for ``gpuwarden evaluate``: finding episodes against injected truth.

Pure functions, no simulator import. Event-level (no point adjustment): a fault is detected
when a finding on its node (or its switch) first appears between its onset and its end plus
a grace period; time to detect is that cycle's time minus the onset. A finding episode that
matches no fault is a false positive; one on a negative control (reboot, checkpoint,
pipeline imbalance, application XID) is a false positive only when it recommends more than
``notify``. A drain on anything but a hardware fault is a false drain.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from analyzer.findings import Finding

INFORMATIONAL = frozenset({"workload_imbalance"})


@dataclass
class Episode:
    node: str
    subject: str
    kind: str
    detector: str
    start: float  # cycle time the finding first appeared
    end: float  # last cycle time it was still active
    actions: set[str] = field(default_factory=set)

    @property
    def drains(self) -> bool:
        return "drain" in self.actions

    @property
    def actionable(self) -> bool:
        return bool(self.actions - {"notify"})


class EpisodeTracker:
    """Turns per-cycle finding lists into episodes (contiguous activity of one key)."""

    def __init__(self, gap: float) -> None:
        self.gap = gap
        self.open: dict[tuple[str, str, str], Episode] = {}
        self.done: list[Episode] = []

    def observe(self, t: float, findings: Iterable[Finding]) -> None:
        seen = set()
        for f in findings:
            seen.add(f.key)
            ep = self.open.get(f.key)
            if ep is None:
                ep = Episode(f.node, f.subject, f.kind, f.detector, t, t)
                self.open[f.key] = ep
            ep.end = t
            ep.actions.add(f.action)
        for key in [k for k, ep in self.open.items() if k not in seen and t - ep.end > self.gap]:
            self.done.append(self.open.pop(key))

    def episodes(self) -> list[Episode]:
        return self.done + list(self.open.values())


@dataclass(frozen=True)
class Truth:
    id: int
    kind: str
    node: str  # switch name for a switch fault
    nodes: tuple[str, ...]
    target: str  # gpuN, gpuN/L, mlx5_P/1, node, leaf-xx
    onset: float
    end: float | None
    hardware: bool
    negative_control: bool
    cls: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any], horizon: float) -> Truth:
        return cls(int(d["id"]), str(d["kind"]), str(d["node"]), tuple(d.get("nodes") or [d["node"]]),
                   str(d.get("target", "")), float(d["onset"]),
                   None if d.get("end") is None else float(d["end"]), bool(d.get("hardware")),
                   bool(d.get("negative_control")))  # fmt: skip

    def covers(self, t: float, grace: float) -> bool:
        end = math.inf if self.end is None else self.end
        return self.onset <= t <= end + grace


def expected_subject(t: Truth) -> str | None:
    """The finding subject that localises this fault exactly (None: the node is enough)."""
    tg = t.target
    if t.kind == "leaf_outage":
        return f"switch={t.node}"
    if tg.startswith("mlx5_"):
        return f"port={tg}"
    if "/" in tg and tg.startswith("gpu"):
        return f"link={tg}"
    if tg.startswith("gpu"):
        return f"gpu={tg[3:]}"
    return None


def _matches(ep: Episode, t: Truth, grace: float) -> bool:
    if not t.covers(ep.start, grace) and not (
        ep.start <= t.onset <= ep.end and ep.start >= t.onset - 1
    ):
        return False
    if t.kind == "leaf_outage":
        return ep.node == t.node or ep.node in t.nodes
    return ep.node in t.nodes


@dataclass
class Score:
    faults: list[dict[str, Any]]
    episodes: int
    tp_episodes: int
    fp_episodes: int
    false_drains: int
    drains_on_negative_controls: dict[str, int]
    node_days: float
    fp_kinds: dict[str, int] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        hw = [f for f in self.faults if f["hardware"]]
        detected = [f for f in hw if f["detected"]]
        recall = len(detected) / len(hw) if hw else math.nan
        denom = self.tp_episodes + self.fp_episodes
        precision = self.tp_episodes / denom if denom else math.nan
        f1 = (
            2 * precision * recall / (precision + recall)
            if precision + recall > 0 and not math.isnan(precision + recall)
            else math.nan
        )
        loc = [f["localised"] for f in detected if f["localised"] is not None]
        ttd = [f["ttd"] for f in detected]
        return {
            "faults": len(hw),
            "detected": len(detected),
            "recall": recall,
            "precision": precision,
            "f1": f1,
            "ttd_median_s": float(np.median(ttd)) if ttd else math.nan,
            "ttd_p95_s": float(np.percentile(ttd, 95)) if ttd else math.nan,
            "localisation": float(np.mean(loc)) if loc else math.nan,
            "false_drains": self.false_drains,
            "false_drains_per_1000_node_days": 1000.0 * self.false_drains / self.node_days
            if self.node_days
            else math.nan,
            "episodes": self.episodes,
            "fp_episodes": self.fp_episodes,
        }

    def per_kind(self) -> dict[str, dict[str, Any]]:
        out: dict[str, dict[str, Any]] = {}
        for kind in sorted({f["kind"] for f in self.faults if f["hardware"]}):
            fs = [f for f in self.faults if f["kind"] == kind]
            det = [f for f in fs if f["detected"]]
            loc = [f["localised"] for f in det if f["localised"] is not None]
            ttd = [f["ttd"] for f in det]
            out[kind] = {
                "faults": len(fs),
                "recall": len(det) / len(fs),
                "ttd_median_s": float(np.median(ttd)) if ttd else math.nan,
                "ttd_p95_s": float(np.percentile(ttd, 95)) if ttd else math.nan,
                "localisation": float(np.mean(loc)) if loc else math.nan,
            }
        return out


def score(
    episodes: Sequence[Episode],
    truth: Sequence[Truth],
    node_days: float,
    grace: float = 180.0,
) -> Score:
    hardware = [t for t in truth if t.hardware]
    controls = [t for t in truth if not t.hardware]
    faults = []
    tp_eps: set[int] = set()
    for t in hardware:
        hits = [(i, ep) for i, ep in enumerate(episodes) if _matches(ep, t, grace)]
        tp_eps.update(i for i, _ in hits)
        first = min((ep.start for _, ep in hits), default=None)
        want = expected_subject(t)
        localised = None
        if hits and want is not None:
            localised = any(ep.subject == want for _, ep in hits)
        faults.append({
            "id": t.id, "kind": t.kind, "node": t.node, "target": t.target, "onset": t.onset,
            "hardware": True, "detected": first is not None,
            "ttd": None if first is None else max(0.0, first - t.onset), "localised": localised,
        })  # fmt: skip
    fp = 0
    false_drains = 0
    nc_drains: dict[str, int] = {}
    counted = 0
    fp_kinds: dict[str, int] = {}
    for i, ep in enumerate(episodes):
        if i in tp_eps:
            counted += 1
            continue
        on_nc = [t for t in controls if _matches(ep, t, grace)]
        if ep.kind in INFORMATIONAL or (on_nc and not ep.actionable):
            continue
        counted += 1
        fp += 1
        tag = f"{ep.detector}/{ep.kind}" + ("/drain" if ep.drains else "")
        fp_kinds[tag] = fp_kinds.get(tag, 0) + 1
        if ep.drains:
            false_drains += 1
            for t in on_nc:
                nc_drains[t.kind] = nc_drains.get(t.kind, 0) + 1
    return Score(faults, counted, len(tp_eps), fp, false_drains, nc_drains, node_days, fp_kinds)
