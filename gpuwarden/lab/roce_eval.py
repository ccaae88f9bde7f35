"""``gpuwarden evaluate-roce``: the analyzer on a simulated RoCE fleet, scored per fault kind.

The composition point of the RoCE evaluation: drives :class:`simulator.roce.RoceFleet` in
virtual time with PFC storms, congested leaves and bad cables injected, and negative controls
(a legitimately congested all-to-all phase over the whole fabric, and one confined to a unit),
runs the full default detector set every cycle, and scores each fault: found (a finding of the
kind that names it, on its port or its leaf), told apart (no other RoCE verdict on its nodes
or leaf while it lasted: a bad cable never reported as a congested leaf, a congested leaf
never as port faults), time to detect; each control: findings on its nodes while it ran.

``--via native``: frames into the analyzer's FrameBuffer. ``--via prometheus``: the same
frames written as the exporter would have served them (OpenMetrics, every series with its
catalogue labels), backfilled with ``promtool tsdb create-blocks-from openmetrics`` into a real
Prometheus that the analyzer's real PrometheusSource reads (moved-only counters, incremental
reads) at the same cycle times; the rail-optimized cabling comes in as the inventory would
give it (``Window.port_leaf``).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import IO, Any

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.detectors.roce import ROCE_KINDS
from analyzer.engine import Engine
from analyzer.sources.frames import FrameBuffer
from analyzer.sources.prometheus import PrometheusSource
from exporter import catalog as c
from gpuwarden.lab.evaluation_metrics import Episode, EpisodeTracker
from gpuwarden.lab.openmetrics import type_line
from gpuwarden.lab.via_prometheus import backfill, epoch_for, prometheus
from simulator.roce import CONGESTION, KINDS, LOSS, PAUSE, PORTS, PRIORITY, STORM_EVENTS, RoceFleet

GRACE = 180.0
SLOT = 1800.0  # one fault per half hour: onset, 15-20 minutes of fault, then quiet


def plan(fleet: RoceFleet, rng: np.random.Generator, horizon: float) -> None:
    """Inject one of each kind per slot, in a shuffled order, at random places."""
    order = ["pfc_storm", "leaf_congestion", "bad_cable", "congested_phase", "congested_phase"]
    slots = int(horizon // SLOT)
    kinds = [order[i % len(order)] for i in range(slots)]
    rng.shuffle(kinds)
    n_units = fleet.units
    n_controls = 0
    for i, kind in enumerate(kinds):
        onset = i * SLOT + 300.0 + float(rng.uniform(0, 300))
        duration = float(rng.uniform(900, 1200))
        node, port = int(rng.integers(len(fleet.nodes))), int(rng.integers(PORTS))
        if kind in ("pfc_storm", "bad_cable"):
            fleet.inject(kind, onset, duration, node=node, port=port)
        elif kind == "leaf_congestion":
            fleet.inject(kind, onset, duration, unit=int(rng.integers(n_units)), port=port)
        else:  # every other control spans the fabric, the rest one unit (a job's all-to-all)
            whole = n_controls % 2 == 0
            units = tuple(range(n_units)) if whole else (int(rng.integers(n_units)),)
            fleet.inject(kind, onset, duration, units=units)
            n_controls += 1


def run_seed(seed: int, nodes: int, horizon: float, step: float = 15.0, cycle: float = 30.0,
             via: str = "native") -> dict[str, Any]:  # fmt: skip
    fleet = RoceFleet(nodes, seed=seed, step=step)
    plan(fleet, np.random.default_rng(10_000 + seed), horizon)
    return {"seed": seed, **evaluate_fleet(fleet, horizon, cycle, via)}


def evaluate_fleet(fleet: RoceFleet, horizon: float, cycle: float = 30.0, via: str = "native"
                   ) -> dict[str, Any]:  # fmt: skip
    """Run ``fleet`` (its faults injected) to ``horizon`` through the analyzer, and score."""
    t0 = time.perf_counter()
    if via == "prometheus":
        episodes, extra = _via_prometheus(fleet, horizon, cycle)
    else:
        episodes, extra = _native(fleet, horizon, cycle), {}
    out = score(episodes, fleet.truth(), fleet)
    return {"nodes": len(fleet.nodes), "horizon_s": horizon, "via": via,
            "wall_s": time.perf_counter() - t0, **extra, **out}  # fmt: skip


def _native(fleet: RoceFleet, horizon: float, cycle: float) -> list[Episode]:
    buf = FrameBuffer(fleet.nodes, 600.0, fleet.step, fleet.leaf_of, fleet.ports)
    engine, tracker = Engine(default_detectors()), EpisodeTracker(gap=2 * cycle)
    port_leaf, next_cycle = fleet.port_leaf(), cycle
    while fleet.t < horizon:
        buf.push(fleet.step_frame())
        if fleet.t + 1e-9 < next_cycle:
            continue
        next_cycle += cycle
        tracker.observe(fleet.t, engine.cycle(replace(buf.window(), port_leaf=port_leaf)))
    return tracker.episodes()


# ---------------------------------------------------------------------- through Prometheus
def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


class RoceScrapes:
    """Each frame as gpuwarden-exporter would have served it, as OpenMetrics text per family."""

    def __init__(self, fleet: RoceFleet, epoch: float, workdir: Path) -> None:
        self.fleet, self.epoch = fleet, epoch
        self.fams = (c.IB_PORT_STATE, c.IB_HW_COUNTER, c.ROCE_PFC_PAUSE_SECONDS,
                     c.ROCE_PFC_STORM_EVENTS)  # fmt: skip
        self.files: dict[str, IO[str]] = {
            m.name: (workdir / f"{m.name}.part").open("w") for m in self.fams
        }
        self.workdir = workdir
        self.samples = 0

    def push(self, frame: Any) -> None:
        ts = f" {self.epoch + frame.t:.3f}\n"
        out: dict[str, list[str]] = {m.name: [] for m in self.fams}
        for i, node in enumerate(self.fleet.nodes):
            for p in range(PORTS):
                dev, ndev = f"mlx5_{p}", f"ens{p}f0np0"
                port = {"node": node, "device": dev, "port": "1"}
                state = frame.metrics[c.IB_PORT_STATE.name][i, p]
                out[c.IB_PORT_STATE.name].append(
                    f"{c.IB_PORT_STATE.name}{_labels(**port)} {state:g}{ts}"
                )
                for k in (*CONGESTION, *LOSS):
                    v = int(frame.ib_counters[k][i, p])
                    out[c.IB_HW_COUNTER.name].append(
                        f"{c.IB_HW_COUNTER.name}{_labels(**port, counter=k)} {v}{ts}")  # fmt: skip
                for key, direction in zip(PAUSE, ("tx", "rx"), strict=True):
                    v = frame.ib_counters[key][i, p]
                    lab = _labels(**port, interface=ndev, direction=direction, priority=PRIORITY)
                    out[c.ROCE_PFC_PAUSE_SECONDS.name].append(
                        f"{c.ROCE_PFC_PAUSE_SECONDS.name}{lab} {v:.6f}{ts}")  # fmt: skip
                for key in STORM_EVENTS:
                    level = key.removeprefix("tx_pause_storm_").removesuffix("_events")
                    v = int(frame.ib_counters[key][i, p])
                    lab = _labels(**port, interface=ndev, level=level)
                    out[c.ROCE_PFC_STORM_EVENTS.name].append(
                        f"{c.ROCE_PFC_STORM_EVENTS.name}{lab} {v}{ts}")  # fmt: skip
        for name, lines in out.items():
            self.files[name].write("".join(lines))
            self.samples += len(lines)

    def write(self, path: Path) -> Path:
        with path.open("w") as f:
            for m in self.fams:
                self.files[m.name].close()
                f.write(type_line(m))
                f.write((self.workdir / f"{m.name}.part").read_text())
            f.write("# EOF\n")
        return path


def _via_prometheus(fleet: RoceFleet, horizon: float, cycle: float
                    ) -> tuple[list[Episode], dict[str, Any]]:  # fmt: skip
    epoch = epoch_for(horizon)
    with tempfile.TemporaryDirectory(prefix="gpuwarden-roce-prom-") as tmp:
        work = Path(tmp)
        rec = RoceScrapes(fleet, epoch, work)
        while fleet.t < horizon:
            rec.push(fleet.step_frame())
        om = rec.write(work / "roce.om")
        backfill_s = backfill(om, work / "tsdb")
        times = [cycle * k for k in range(1, int(horizon / cycle + 1e-9) + 1)]
        t1 = time.perf_counter()
        with prometheus(work / "tsdb", fleet.step, work) as url:
            episodes, degraded = asyncio.run(_cycles(url, fleet, epoch, times, cycle))
        return episodes, {
            "samples": rec.samples,
            "promtool_backfill_s": backfill_s,
            "cycles_s": time.perf_counter() - t1,
            "degraded_cycles": degraded,
        }


async def _cycles(url: str, fleet: RoceFleet, epoch: float, times: Sequence[float],
                  cycle: float) -> tuple[list[Episode], int]:  # fmt: skip
    src = PrometheusSource(url, window=600.0, step=fleet.step, timeout=60.0, discover=True)
    engine, tracker = Engine(default_detectors()), EpisodeTracker(gap=2 * cycle)
    port_leaf = {
        (fleet.nodes.index(n), p): leaf
        for (i, p), leaf in fleet.port_leaf().items()
        for n in (fleet.nodes[i],)
    }
    degraded = 0
    try:
        for t in times:
            w = await src.read(epoch + t + src.settle)
            degraded += bool(w.missing)
            # the cabling as the inventory gives it, by node and port name
            ix = {n: i for i, n in enumerate(w.nodes)}
            px = {p: j for j, p in enumerate(w.ports)}
            pl = {(ix[fleet.nodes[i]], px[fleet.ports[p]]): leaf
                  for (i, p), leaf in port_leaf.items()
                  if fleet.nodes[i] in ix and fleet.ports[p] in px}  # fmt: skip
            tracker.observe(t, engine.cycle(replace(w, port_leaf=pl)))
    finally:
        await src.close()
    return tracker.episodes(), degraded


# ---------------------------------------------------------------------- scoring
def _overlaps(ep: Episode, onset: float, end: float) -> bool:
    return ep.start <= end + GRACE and ep.end >= onset


def score(episodes: Sequence[Episode], truth: Sequence[dict[str, Any]], fleet: RoceFleet
          ) -> dict[str, Any]:  # fmt: skip
    faults: list[dict[str, Any]] = []
    controls: list[dict[str, Any]] = []
    matched: set[int] = set()
    for tr in truth:
        where = set(tr["nodes"]) | {tr["node"]} | set(tr.get("leaves", ()))  # a leaf finding
        near = [(i, ep) for i, ep in enumerate(episodes)
                if ep.node in where and _overlaps(ep, tr["onset"], tr["end"])]  # fmt: skip
        if not tr["hardware"]:
            scope = "fabric" if len(tr["nodes"]) == len(fleet.nodes) else "unit"
            controls.append({"kind": tr["kind"], "nodes": len(tr["nodes"]), "scope": scope,
                             "findings": len(near),
                             "actionable": sum(ep.actionable for _, ep in near),
                             "drains": sum(ep.drains for _, ep in near),
                             "kinds": sorted({ep.kind for _, ep in near})})  # fmt: skip
            matched.update(i for i, _ in near)
            continue
        right = [ep for _, ep in near if ep.kind == tr["finding"] and ep.node == tr["node"]
                 and ep.subject == tr["subject"] and tr["onset"] - 1 <= ep.start]  # fmt: skip
        wrong = [ep for _, ep in near if ep.kind in ROCE_KINDS and ep.kind != tr["finding"]]
        matched.update(i for i, ep in near if ep.kind == tr["finding"] or ep.kind in ROCE_KINDS)
        first = min((ep.start for ep in right), default=None)
        faults.append({"kind": tr["kind"], "node": tr["node"], "subject": tr["subject"],
                       "found": first is not None, "told_apart": first is not None and not wrong,
                       "wrong_kinds": sorted({ep.kind for ep in wrong}),
                       "ttd_s": None if first is None else first - tr["onset"]})  # fmt: skip
    stray = [ep for i, ep in enumerate(episodes) if i not in matched]
    return {"faults": faults, "controls": controls,
            "stray": [{"node": ep.node, "subject": ep.subject, "kind": ep.kind,
                       "actions": sorted(ep.actions)} for ep in stray],
            "false_drains": sum(ep.drains for ep in stray)
            + sum(ctl["drains"] for ctl in controls)}  # fmt: skip


def table(runs: Sequence[dict[str, Any]]) -> str:
    """One markdown table over all seeds: a row per fault kind, a row per control."""
    rows = ["| scenario | n | found | told apart | TTD median (s) | TTD max (s) | findings on"
            " control | false drains |", "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    faults = [f for r in runs for f in r["faults"]]
    for kind in [k for k, v in KINDS.items() if v.hardware]:
        fs = [f for f in faults if f["kind"] == kind]
        if not fs:
            continue
        ttd = [f["ttd_s"] for f in fs if f["ttd_s"] is not None]
        med = f"{np.median(ttd):.0f}" if ttd else "-"
        worst = f"{max(ttd):.0f}" if ttd else "-"
        rows.append(f"| {kind} ({KINDS[kind].finding}) | {len(fs)} |"
                    f" {sum(f['found'] for f in fs)}/{len(fs)} |"
                    f" {sum(f['told_apart'] for f in fs)}/{len(fs)} | {med} | {worst} | - | - |")  # fmt: skip
    ctls = [ctl for r in runs for ctl in r["controls"]]
    for label, scope in (
        ("congested_phase, whole fabric (control)", "fabric"),
        ("congested_phase, one unit's all-to-all (control)", "unit"),
    ):
        cs = [ctl for ctl in ctls if ctl["scope"] == scope]
        if cs:
            rows.append(f"| {label} | {len(cs)} | - | - | - | - |"
                        f" {sum(x['findings'] for x in cs)} | {sum(x['drains'] for x in cs)} |")  # fmt: skip
    stray = sum(len(r["stray"]) for r in runs)
    drains = sum(r["false_drains"] for r in runs)
    rows.append(f"| anything else (stray findings) | - | - | - | - | - | {stray} | {drains} |")
    return "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden evaluate-roce", description=__doc__.split("\n")[0])
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=32, help="a multiple of 8 (one unit per 8)")
    p.add_argument("--hours", type=float, default=5.0)
    p.add_argument("--via", choices=("native", "prometheus"), default="native")
    p.add_argument("--json", help="also write every seed's results here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if a.nodes < 16 or a.nodes % 8 or a.hours < 1 or a.seeds < 1:
        print("gpuwarden evaluate-roce: need --nodes >= 16 (a multiple of 8), --hours >= 1,"
              " --seeds >= 1", file=sys.stderr)  # fmt: skip
        return 2
    runs = []
    for seed in range(a.seeds):
        r = run_seed(seed, a.nodes, a.hours * 3600.0, via=a.via)
        print(f"seed {seed}: {r['wall_s']:.0f}s", file=sys.stderr)
        runs.append(r)
    print(f"RoCE fleet: {a.nodes} nodes x {PORTS} ports, {a.seeds} seeds x {a.hours:g} h,"
          f" via {a.via}")  # fmt: skip
    print(table(runs))
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=1, default=_num))
    missed = [f for r in runs for f in r["faults"] if not f["told_apart"]]
    return 0 if not missed and not any(r["false_drains"] for r in runs) else 1


def _num(x: Any) -> Any:
    return None if isinstance(x, float) and math.isnan(x) else str(x)
