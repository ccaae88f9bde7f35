"""``gpuwarden evaluate``: score the analyzer on the fleet simulator, offline, in virtual time.

The composition point of the evaluation (the umbrella package may import anything): drives
``simulator.Fleet`` step by step, feeds each frame to the analyzer through its
:class:`~analyzer.sources.frames.FrameBuffer` source, runs the full detector set, the
baselines and the ablations on the same windows, and scores their finding episodes against
the fleet's truth (:mod:`gpuwarden.lab.evaluation_metrics`). Output: a table on stdout, JSON and
a PNG of time to detect per fault kind under ``--out``.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.detectors.peer import PeerDetector
from analyzer.engine import Engine, _dedupe
from analyzer.findings import Finding
from analyzer.sources.frames import FrameBuffer
from gpuwarden.lab.evaluation_baselines import Mahalanobis, StaticThresholds, ZScore
from gpuwarden.lab.evaluation_metrics import EpisodeTracker, Truth, score
from gpuwarden.lab.evaluation_scenarios import (
    AMD_HARDWARE,
    EXPLICIT,
    MIXED_CONTROLS,
    NVIDIA_ONLY,
    Planned,
    plan,
)
from simulator.fleet import Fleet
from simulator.model import SKUS
from simulator.telemetry import TELEMETRIES
from simulator.topology import port_name

# simulate's telemetries, and the commonly enabled fields plus dcgm-exporter's clock events
EVAL_TELEMETRIES = (*TELEMETRIES, "dcgm-exporter+clock-events", "dcgm-exporter+reasons")


class Ablation:
    """The full analyzer with its peer detector swapped: reuses the main engine's other
    findings for this cycle, so an ablation costs one detector, not nine."""

    def __init__(self, name: str, peer: PeerDetector) -> None:
        self.name, self.peer = name, peer

    def cycle(self, window: Any, main: list[Finding]) -> list[Finding]:
        return _dedupe([f for f in main if f.detector != "peer"] + self.peer.detect(window))


def _pick_node(fleet: Fleet, p: Planned, busy_until: np.ndarray, t: float,
               rng: np.random.Generator) -> str | None:  # fmt: skip
    free = busy_until <= t
    if p.needs_job:
        job_of = fleet.jobs.job_of
        sizes = np.bincount(np.where(job_of >= 0, job_of - job_of.min(initial=0), 0))
        in_big = (job_of >= 0) & (
            sizes[np.where(job_of >= 0, job_of - job_of.min(initial=0), 0)] >= 3
        )
        free &= in_big if p.kind != "app_xid" else job_of >= 0
    amd = getattr(fleet, "amd", None)
    if amd is not None and amd.any():  # an H100 + MI300X fleet: each vendor's faults on its own
        free &= amd if p.kind in AMD_HARDWARE else ~amd if p.kind in NVIDIA_ONLY else True
    cand = np.flatnonzero(free)
    if len(cand) == 0:
        return None
    return fleet.nodes[int(rng.choice(cand))]


def _inject(
    fleet: Fleet,
    p: Planned,
    busy_until: np.ndarray,
    rng: np.random.Generator,
    leaf_busy: dict[str, float],
) -> None:
    if p.kind == "leaf_outage":
        # one outage per leaf at a time (other faults may sit under it: that is the test)
        leaves = fleet.topo.rail_leaves or set(fleet.leaf_of)  # a rail fabric: a rail's leaf
        free = sorted(lf for lf in leaves if leaf_busy.get(lf, 0.0) <= p.onset)
        if not free:
            return
        leaf = str(rng.choice(free))
        fleet.inject(p.kind, leaf, leaf, p.parameters, onset=p.onset, duration=p.duration)
        leaf_busy[leaf] = p.onset + p.duration + 600
        return
    node = _pick_node(fleet, p, busy_until, p.onset, rng)
    if node is None:
        return
    p = _for_model(fleet, p, node)
    fleet.inject(p.kind, node, p.target, p.parameters, onset=p.onset, duration=p.duration)
    busy_until[fleet.nodes.index(node)] = p.onset + p.duration + 900


def mixed_fleet(nodes: int, seed: int, **kw: Any) -> Fleet:
    """The mixed-fleet evaluation: six racks (leaves), four of H100 SXM (NDR) and two of A100
    SXM (HDR, 12 NVLinks), the second H100 rack capped at 500 W by its administrator."""
    per_leaf = max(1, -(-nodes // 6))
    skus = ["h100" if i // per_leaf < 4 else "a100" for i in range(nodes)]
    return Fleet(nodes, seed, nodes_per_leaf=per_leaf, skus=skus, power_caps={"leaf-02": 500.0},
                 **kw)  # fmt: skip


def mixed_amd_fleet(nodes: int, seed: int, **kw: Any) -> Fleet:
    """The heterogeneous-vendor evaluation: four racks (leaves), two of H100 SXM and two of
    AMD Instinct MI300X (8 GPUs in an XGMI hive, 8 NICs each)."""
    per_leaf = max(1, -(-nodes // 4))
    skus = ["h100" if i // per_leaf < 2 else "mi300x" for i in range(nodes)]
    return Fleet(nodes, seed, nodes_per_leaf=per_leaf, skus=skus, **kw)


def _for_model(fleet: Fleet, p: Planned, node: str) -> Planned:
    """A planned fault fitted to the node's model: a link it has, a power cap below its limit."""
    sku = SKUS[fleet.sku_of[fleet.nodes.index(node)]]
    if p.kind.startswith("nvlink") and sku.links < 18:
        g, k = p.target.split("/")
        return replace(p, target=f"{g}/{int(k) % max(sku.links, 1)}")
    if p.kind == "power_throttle" and sku.power_limit_w < 700:
        return replace(p, parameters={**p.parameters, "cap_w": round(sku.power_limit_w * 4 / 7)})
    return p


def _missing_hook(fraction: float, rng: np.random.Generator) -> Any:
    def hook(name: str, a: np.ndarray) -> np.ndarray:
        a = np.array(a, dtype=float, copy=True)
        a[rng.random(a.shape) < fraction] = np.nan
        return a

    return hook


class _MissedScrapes:
    """Missed scrapes: per step, each node's scrape is lost with probability ``p`` (all of
    its series missing at that step, as Prometheus would see it)."""

    def __init__(self, p: float, nodes: int, rng: np.random.Generator) -> None:
        self.p, self.n, self.rng = p, nodes, rng
        self.rows = np.zeros(nodes, dtype=bool)

    def next(self) -> None:
        if self.p > 0:
            self.rows = self.rng.random(self.n) < self.p

    def __call__(self, name: str, a: np.ndarray) -> np.ndarray:
        if not self.rows.any():
            return a
        a = np.array(a, dtype=float, copy=True)
        a[self.rows] = np.nan
        return a


def run_seed(
    seed: int,
    nodes: int,
    horizon: float,
    step: float = 15.0,
    cycle: float = 30.0,
    per_kind: int = 2,
    controls: int = 2,
    hardware: bool = True,
    missing: float = 0.0,
    compare: bool = True,
    mixed: bool = False,
    rails: bool = False,
    missed_scrapes: float = 0.0,
    tap: Any = None,
    amd: bool = False,
    judged: Any = None,
) -> dict[str, Any]:
    """``missed_scrapes``: the share of node scrapes lost (every series of the node missing
    at that step); ``tap(fleet, frame, jobs, missed)`` sees each frame as pushed
    (``gpuwarden evaluate --via prometheus`` records the scraped history with it);
    ``judged(window, findings)`` sees each cycle's window and the full analyzer's findings
    (the sharded analyzer's equivalence test judges the same windows with it)."""
    fleet = (mixed_amd_fleet(nodes, seed) if amd else
             mixed_fleet(nodes, seed, rails=rails) if mixed else Fleet(nodes, seed))  # fmt: skip
    port_leaf = fleet.port_leaf()  # a rail-optimized fabric: a leaf per port
    rng = np.random.default_rng(20_000 + seed)
    planned = plan(seed, horizon, per_kind, controls, hardware,
                   extra=tuple(MIXED_CONTROLS) if mixed else (), amd=amd)  # fmt: skip
    buf = FrameBuffer(fleet.nodes, 600.0, step, dict(enumerate(fleet.leaf_of)),
                      [port_name(p) for p in range(8)], sku=fleet.models)  # fmt: skip
    if missing > 0:
        buf.missing = _missing_hook(missing, np.random.default_rng(30_000 + seed))
    lost = _MissedScrapes(missed_scrapes, nodes, np.random.default_rng(50_000 + seed))
    if missed_scrapes > 0:
        buf.missing = lost
    engines: dict[str, Engine] = {"gpuwarden": Engine(default_detectors())}
    ablations: list[Ablation] = []
    if compare:
        engines |= {d.name: Engine([d]) for d in (StaticThresholds(), ZScore(), Mahalanobis())}
        ablations = [
            Ablation("no_peer_grouping", PeerDetector(group_by_job=False)),
            Ablation("no_continuity_gate", PeerDetector(continuity=False)),
        ]
    trackers = {k: EpisodeTracker(gap=2 * cycle) for k in [*engines, *(a.name for a in ablations)]}
    busy_until = np.zeros(nodes)
    leaf_busy: dict[str, float] = {}
    timing = {k: 0.0 for k in trackers}
    i_plan, t, next_cycle = 0, 0.0, cycle
    started = time.perf_counter()
    while t < horizon:
        t += step
        while i_plan < len(planned) and planned[i_plan].onset <= t:
            _inject(fleet, replace(planned[i_plan], onset=max(planned[i_plan].onset, fleet.t)),
                    busy_until, rng, leaf_busy)  # fmt: skip
            i_plan += 1
        frame = fleet.step(t)
        jobs = fleet.jobs_at(t)
        lost.next()
        buf.push(frame, jobs)
        if tap is not None:
            tap(fleet, frame, jobs, lost.rows)
        if t + 1e-9 < next_cycle:
            continue
        next_cycle += cycle
        window = buf.window()
        if port_leaf:
            window = replace(window, port_leaf=port_leaf)
        main: list[Finding] = []
        for name, eng in engines.items():
            t0 = time.perf_counter()
            found = eng.cycle(window)
            timing[name] += time.perf_counter() - t0
            trackers[name].observe(t, found)
            if name == "gpuwarden":
                main = found
                if judged is not None:
                    judged(window, found)
        for a in ablations:
            t0 = time.perf_counter()
            trackers[a.name].observe(t, a.cycle(window, main))
            timing[a.name] += time.perf_counter() - t0
    truth = [Truth.from_json(d, horizon) for d in fleet.truth()]
    node_days = nodes * horizon / 86400.0
    results = {}
    for name, tr in trackers.items():
        s = score(tr.episodes(), truth, node_days)
        results[name] = {"summary": s.summary(), "per_kind": s.per_kind(), "faults": s.faults,
                         "drains_on_controls": s.drains_on_negative_controls,
                         "false_positives": s.fp_kinds}  # fmt: skip
    out = {
        "seed": seed, "nodes": nodes, "horizon_s": horizon, "hardware": hardware,
        "mixed": mixed, "missing": missing, "node_days": node_days,
        "wall_s": time.perf_counter() - started, "analysis_s": timing, "truth": len(truth),
        "results": results,
        "detector_errors": dict(engines["gpuwarden"].stats.errors),
    }  # fmt: skip
    if tap is not None:  # the caller scores another path against these episodes
        out["episodes"] = trackers["gpuwarden"].episodes()
    return out


def run_stragglers(seed: int, nodes: int, slowdowns: Sequence[float], trials: int,
                   step: float = 15.0, cycle: float = 30.0, mixed: bool = False,
                   signals: tuple[str, ...] = ()) -> dict[str, Any]:  # fmt: skip
    """One job spanning every node; one slow node at a time (plus pipeline-imbalance
    controls): top-1 localisation, detection, and drains on the controls. ``mixed``: the
    mixed fleet, one job per GPU model, every rank waiting in NCCL at ~100 % utilisation;
    ``signals``: the fleet also serves profiling activity and/or published step times."""
    if mixed:
        fleet = mixed_fleet(nodes, seed, idle_fraction=0.0, busy_wait=True, signals=signals)
        for sku in sorted(set(fleet.sku_of)):
            ranks = np.flatnonzero(np.array(fleet.sku_of) == sku)
            fleet.jobs.place(ranks, 0.0, fleet.rng, end=1e12, stages=4)
    else:
        fleet = Fleet(nodes, seed, idle_fraction=0.0)
        fleet.jobs.place(np.arange(nodes), 0.0, fleet.rng, end=1e12, stages=4)
    rng = np.random.default_rng(40_000 + seed)
    buf = FrameBuffer(fleet.nodes, 600.0, step, dict(enumerate(fleet.leaf_of)),
                      [port_name(p) for p in range(8)], sku=fleet.models)  # fmt: skip
    engine = Engine(default_detectors())
    trial_s, gap = 900.0, 300.0
    schedule = []
    t0 = 900.0
    kinds = [("straggler", s) for s in slowdowns for _ in range(trials)]
    kinds += [("pipeline_imbalance", 0.1) for _ in range(max(2, trials // 2))]
    rng.shuffle(kinds)
    for kind, s in kinds:
        node = fleet.nodes[int(rng.integers(0, nodes))]
        target = (
            "node"
            if kind == "pipeline_imbalance" or rng.random() < 0.5
            else f"gpu{int(rng.integers(0, 8))}"
        )
        params = {"slowdown": s} if kind == "straggler" else {"extra": s, "stages": 4}
        fleet.inject(kind, node, target, params, onset=t0, duration=trial_s)
        schedule.append((kind, s, node, target, t0, t0 + trial_s))
        t0 += trial_s + gap
    horizon = t0
    first: dict[int, tuple[str, float] | None] = {i: None for i in range(len(schedule))}
    drains = {i: 0 for i in range(len(schedule))}
    t, next_cycle = 0.0, cycle
    while t < horizon:
        t += step
        buf.push(fleet.step(t), fleet.jobs_at(t))
        if t + 1e-9 < next_cycle:
            continue
        next_cycle += cycle
        found = engine.cycle(buf.window())
        for i, (_, _, _, _, a, b) in enumerate(schedule):
            if not a <= t <= b + 60:
                continue
            for f in found:
                if f.kind == "straggler" and first[i] is None:
                    first[i] = (f.node, t - a)
                drains[i] += f.action == "drain" and f.kind in ("straggler", "faulty_machine")
    rows: dict[str, Any] = {}
    for s in slowdowns:
        idx = [i for i, k in enumerate(schedule) if k[0] == "straggler" and k[1] == s]
        top1 = [first[i] is not None and first[i][0] == schedule[i][2] for i in idx]  # type: ignore[index]
        ttd = [first[i][1] for i in idx if first[i] is not None and first[i][0] == schedule[i][2]]  # type: ignore[index]
        rows[f"{s:.2f}"] = {"trials": len(idx), "top1": float(np.mean(top1)) if idx else math.nan,
                            "ttd_median_s": float(np.median(ttd)) if ttd else math.nan}  # fmt: skip
    ctrl = [i for i, k in enumerate(schedule) if k[0] == "pipeline_imbalance"]
    return {"seed": seed, "nodes": nodes, "slowdowns": rows, "imbalance_trials": len(ctrl),
            "fleet": "mixed fleet, one job per model, collective waits" if mixed else "",
            "signals": "+".join(signals) or "nvml",
            "imbalance_drains": int(sum(drains[i] > 0 for i in ctrl))}  # fmt: skip


# ---------------------------------------------------------------------------- reporting
def _agg(values: list[float]) -> dict[str, float]:
    v = [x for x in values if x is not None and not math.isnan(x)]
    if not v:
        return {"mean": math.nan, "std": math.nan, "n": 0}
    return {"mean": float(np.mean(v)), "std": float(np.std(v)), "n": len(v)}


def aggregate(runs: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in runs[0]["results"]:
        summ = [r["results"][name]["summary"] for r in runs]
        out[name] = {k: _agg([s[k] for s in summ]) for k in summ[0]}
        faults = [f for r in runs for f in r["results"][name]["faults"]]
        kinds: dict[str, Any] = {}
        for kind in sorted({f["kind"] for f in faults}):
            fs = [f for f in faults if f["kind"] == kind]
            det = [f for f in fs if f["detected"]]
            loc = [f["localised"] for f in det if f["localised"] is not None]
            ttd = [f["ttd"] for f in det]
            kinds[kind] = {
                "faults": len(fs), "recall": len(det) / len(fs),
                "ttd_median_s": float(np.median(ttd)) if ttd else math.nan,
                "ttd_p95_s": float(np.percentile(ttd, 95)) if ttd else math.nan,
                "localisation": float(np.mean(loc)) if loc else math.nan,
                "explicit": kind in EXPLICIT, "ttd": ttd,
            }  # fmt: skip
        out[name]["per_kind"] = kinds
    return out


def _with_exposure(runs: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The aggregate of fault-free runs plus their exposure: node-days and false drains in
    all (a rate of 0 means little without the node-days it was observed over)."""
    if not runs:
        return None
    out = aggregate(runs)
    out["node_days"] = sum(r["node_days"] for r in runs)
    out["false_drains"] = sum(r["results"]["gpuwarden"]["summary"]["false_drains"] for r in runs)
    return out


def _fmt(x: Any, pct: bool = False) -> str:
    if isinstance(x, dict):
        m, s = x["mean"], x["std"]
        return (
            "n/a" if math.isnan(m) else (f"{m:.3f} ± {s:.3f}" if not pct else f"{m:.0f} ± {s:.0f}")
        )
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else (
        f"{x:.0f}" if pct else f"{x:.2f}")  # fmt: skip


def table(agg: dict[str, Any], fault_free: dict[str, Any] | None, missing: dict[str, Any] | None,
          stragglers: list[dict[str, Any]], mixed: dict[str, Any] | None = None,
          fabric: str = "", mixed_free: dict[str, Any] | None = None) -> str:  # fmt: skip
    lines = ["| system | precision | recall | F1 | TTD median s | TTD p95 s | localisation | false drains /1000 node-days |",
             "|---|---|---|---|---|---|---|---|"]  # fmt: skip
    systems = list(agg.items())
    if mixed:  # side by side with the homogeneous fleet's row
        systems.insert(
            1,
            (
                f"gpuwarden, mixed fleet (4 H100 + 2 A100 racks, one capped{fabric})",
                mixed["gpuwarden"],
            ),
        )
    for name, a in systems:
        lines.append(f"| {name} | {_fmt(a['precision'])} | {_fmt(a['recall'])} | {_fmt(a['f1'])} | "
                     f"{_fmt(a['ttd_median_s'], True)} | {_fmt(a['ttd_p95_s'], True)} | "
                     f"{_fmt(a['localisation'])} | {_fmt(a['false_drains_per_1000_node_days'])} |")  # fmt: skip
    lines += ["", "| fault kind (gpuwarden) | faults | recall | TTD median s | TTD p95 s | localisation |",
              "|---|---|---|---|---|---|"]  # fmt: skip
    for kind, k in agg["gpuwarden"]["per_kind"].items():
        tag = " (explicit)" if k["explicit"] else ""
        lines.append(f"| {kind}{tag} | {k['faults']} | {k['recall']:.2f} | {_fmt(k['ttd_median_s'], True)} | "
                     f"{_fmt(k['ttd_p95_s'], True)} | {_fmt(k['localisation'])} |")  # fmt: skip
    if mixed:
        kinds = mixed["gpuwarden"]["per_kind"]
        low = sorted((k["recall"], kind) for kind, k in kinds.items())[:3]
        lines += ["", "mixed fleet, lowest per-kind recall: "
                  + ", ".join(f"{kind} {r:.2f}" for r, kind in low)]  # fmt: skip
    for label, ff in (("", fault_free), (", mixed fleet", mixed_free)):
        if ff:
            g = ff["gpuwarden"]
            lines += ["", f"fault-free seeds{label} (negative controls only): false drains per 1000 node-days "
                      f"{_fmt(g['false_drains_per_1000_node_days'])} over {ff['node_days']:.1f} node-days "
                      f"({ff['false_drains']} false drains), false-positive episodes {_fmt(g['fp_episodes'])}"]  # fmt: skip
    if missing:
        lines += ["", f"30% of series missing: F1 {_fmt(missing['gpuwarden']['f1'])} "
                  f"(complete data: {_fmt(agg['gpuwarden']['f1'])})"]  # fmt: skip
    for s in stragglers:
        rows = ", ".join(
            f"{k}: top-1 {v['top1']:.2f} of {v['trials']}" for k, v in s["slowdowns"].items()
        )
        where = s.get("fleet") or f"one job on {s['nodes']} nodes"
        if s.get("fleet"):
            where += f", signals: {s.get('signals', 'nvml')}"
        lines.append(f"stragglers (seed {s['seed']}, {where}): {rows}; "
                     f"imbalance controls drained {s['imbalance_drains']}/{s['imbalance_trials']}")  # fmt: skip
    return "\n".join(lines)


def plot(agg: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = agg["gpuwarden"]["per_kind"]
    names = [k for k in kinds if kinds[k]["ttd"]]
    if not names:  # nothing detected (a straggler-only run: --per-kind 0): nothing to plot
        return
    fig, ax = plt.subplots(figsize=(10, 5))
    ax.boxplot([kinds[k]["ttd"] for k in names], orientation="horizontal", tick_labels=names)
    ax.axvline(60, ls="--", c="grey", label="gray target (median 60 s)")
    ax.axvline(180, ls=":", c="grey", label="gray target (p95 3 min)")
    ax.set_xlabel("time to detect (s, virtual)")
    ax.set_title("gpuwarden: detection latency per fault kind")
    ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden evaluate", description=__doc__)
    p.add_argument("--nodes", type=int, default=256)
    p.add_argument("--hours", type=float, default=24.0)
    p.add_argument("--seeds", type=int, default=5, help="seeds 0..N-1")
    p.add_argument("--step", type=float, default=15.0, help="scrape interval (virtual s)")
    p.add_argument("--cycle", type=float, default=30.0, help="analysis interval (virtual s)")
    p.add_argument("--per-kind", type=int, default=2, help="faults of each kind per seed")
    p.add_argument("--controls", type=int, default=2, help="negative controls of each kind")
    p.add_argument("--missing", type=float, default=0.3, help="also run with this share missing")
    p.add_argument("--no-fault-free", action="store_true", help="skip the fault-free seeds")
    p.add_argument("--straggler-trials", type=int, default=10)
    p.add_argument("--rails", action="store_true",
                   help="the mixed fleet on a rail-optimized fabric (a leaf per port)")  # fmt: skip
    p.add_argument("--mixed", action="store_true",
                   help="also run each seed on a mixed A100/H100 fleet, rows side by side")  # fmt: skip
    p.add_argument("--jobs", type=int, default=1, help="seeds evaluated in parallel processes")
    p.add_argument("--via", choices=("frames", "prometheus"), default="frames",
                   help="prometheus: also through a real Prometheus (backfilled with promtool), "
                   "both paths side by side with the F1 gap per fault class")  # fmt: skip
    p.add_argument("--missed-scrapes", type=float, default=0.01,
                   help="--via prometheus: share of node scrapes lost (both paths)")  # fmt: skip
    p.add_argument("--telemetry", default="gpuwarden", choices=EVAL_TELEMETRIES,
                   help="--via prometheus: dcgm-exporter also scrapes the fleet as dcgm-exporter "
                   "+ node_exporter would serve it, a third path beside gpuwarden's: with the "
                   "commonly enabled fields (ECC, NVLink errors, power limit, row remaps, PCIe "
                   "link, SM activity); :defaults: only those default-counters.csv enables; "
                   "+clock-events: commonly enabled plus DCGM_EXP_CLOCK_EVENTS_COUNT; "
                   "+reasons: commonly enabled plus the clock-event reasons bitmask "
                   "(DCGM field 112 under its pre-4.0 name) and the power/thermal violation "
                   "counters")  # fmt: skip
    p.add_argument("--fleet", choices=("homogeneous", "mixed-amd"), default="homogeneous",
                   help="--via prometheus: mixed-amd: two H100 racks beside two AMD Instinct "
                   "MI300X racks with AMD's faults too; with --telemetry amd-dme a second path "
                   "serves the MI300X GPUs as AMD's Device Metrics Exporter would")  # fmt: skip
    p.add_argument(
        "--dme-prefix",
        default="",
        help="--telemetry amd-dme: the prefix before DME's field names (amd_)",
    )
    p.add_argument("--replicas", type=int, default=0,
                   help="instead: one analyzer against N replicas sharing the fleet by unit, "
                   "the same windows, findings compared cycle by cycle on every fleet "
                   "(homogeneous, mixed A100/H100, H100 + MI300X) and seed (issue 33); "
                   "exits 1 if any cycle differs")  # fmt: skip
    p.add_argument("--out", default="out/evaluation")
    return p


def _one_seed(
    job: tuple[int, argparse.Namespace],
) -> tuple[dict[str, Any], list[Any], list[Any], list[Any], list[Any]]:
    """Every run of one seed (main, fault-free, missing data, stragglers): seeds are
    independent, so ``--jobs`` runs them in parallel processes with the same results."""
    seed, a = job
    horizon = a.hours * 3600.0
    run = run_seed(seed, a.nodes, horizon, a.step, a.cycle, a.per_kind, a.controls)
    free, miss, strag = [], [], []
    if not a.no_fault_free:
        free.append(run_seed(100 + seed, a.nodes, horizon, a.step, a.cycle, a.per_kind,
                             a.controls, hardware=False, compare=False))  # fmt: skip
    if a.missing > 0:
        miss.append(run_seed(seed, a.nodes, horizon, a.step, a.cycle, a.per_kind, a.controls,
                             missing=a.missing, compare=False))  # fmt: skip
    if a.straggler_trials > 0:
        strag.append(run_stragglers(seed, a.nodes, (0.03, 0.05, 0.1), a.straggler_trials,
                                    a.step, a.cycle))  # fmt: skip
    mixed = []
    if a.mixed:
        mixed.append(run_seed(seed, a.nodes, horizon, a.step, a.cycle, a.per_kind, a.controls,
                              compare=False, mixed=True, rails=a.rails))  # fmt: skip
        if not a.no_fault_free:  # the mixed fleet's own false-drain rate: controls only
            free.append(run_seed(100 + seed, a.nodes, horizon, a.step, a.cycle, a.per_kind,
                                 a.controls, hardware=False, compare=False, mixed=True,
                                 rails=a.rails))  # fmt: skip
        for signals in ((), ("activity",), ("steps",)) if a.straggler_trials > 0 else ():
            strag.append(run_stragglers(seed, a.nodes, (0.03, 0.05, 0.1), a.straggler_trials,
                                        a.step, a.cycle, mixed=True, signals=signals))  # fmt: skip
    return run, free, miss, strag, mixed


class _Inline:
    """``--jobs 1``: the same interface as the process pool, in this process."""

    def __enter__(self) -> _Inline:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def map(self, fn: Any, items: Sequence[Any]) -> Any:
        return map(fn, items)


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if a.nodes < 8 or a.hours <= 0.5 or a.seeds < 1 or a.jobs < 1:
        print("gpuwarden evaluate: need --nodes >= 8, --hours > 0.5, --seeds >= 1, --jobs >= 1",
              file=sys.stderr)  # fmt: skip
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    if a.replicas:
        if a.replicas < 1 or a.via != "frames":
            print("gpuwarden evaluate: --replicas needs N >= 1 and the frames path (no --via "
                  "prometheus)", file=sys.stderr)  # fmt: skip
            return 2
        return _replicas(a, out)
    if a.telemetry != "gpuwarden" and a.via != "prometheus":
        print("gpuwarden evaluate: --telemetry goes with --via prometheus", file=sys.stderr)
        return 2
    if a.via == "prometheus":
        if a.mixed or not 0 <= a.missed_scrapes < 1:
            print("gpuwarden evaluate: --via prometheus runs the homogeneous fleet (no --mixed) "
                  "and needs 0 <= --missed-scrapes < 1", file=sys.stderr)  # fmt: skip
            return 2
        if (a.telemetry == "amd-dme") != (a.fleet == "mixed-amd"):
            print("gpuwarden evaluate: --telemetry amd-dme goes with --fleet mixed-amd (and it "
                  "with amd-dme)", file=sys.stderr)  # fmt: skip
            return 2
        return _via_prometheus(a, out)
    if a.fleet != "homogeneous":
        print("gpuwarden evaluate: --fleet mixed-amd goes with --via prometheus", file=sys.stderr)
        return 2
    runs, free, miss, strag, mixed = [], [], [], [], []
    with ProcessPoolExecutor(a.jobs) if a.jobs > 1 else _Inline() as pool:
        for seed, (r, f, m, st, mx) in zip(
            range(a.seeds), pool.map(_one_seed, [(seed, a) for seed in range(a.seeds)]), strict=True
        ):
            print(f"seed {seed}: {r['wall_s']:.0f}s", file=sys.stderr)
            runs.append(r)
            free += f
            miss += m
            strag += st
            mixed += mx
    agg = aggregate(runs)
    free_mixed = [r for r in free if r["mixed"]]
    free = [r for r in free if not r["mixed"]]
    agg_free = _with_exposure(free)
    agg_free_mixed = _with_exposure(free_mixed)
    agg_miss = aggregate(miss) if miss else None
    agg_mixed = aggregate(mixed) if mixed else None
    text = table(agg, agg_free, agg_miss, strag, agg_mixed,
                 ", rail-optimized" if a.rails else "", agg_free_mixed)  # fmt: skip
    print(text)
    args = vars(a)
    (out / "evaluation.json").write_text(json.dumps(
        {"args": args, "aggregate": agg, "fault_free": agg_free, "missing": agg_miss,
         "mixed": agg_mixed, "mixed_fault_free": agg_free_mixed, "stragglers": strag, "runs": runs, "fault_free_runs": free,
         "missing_runs": miss, "mixed_runs": mixed, "mixed_fault_free_runs": free_mixed},
        indent=1, default=str))  # fmt: skip
    (out / "evaluation.md").write_text(text + "\n")
    plot(agg, out / "ttd_per_kind.png")
    print(f"\nwrote {out}/evaluation.json, evaluation.md, ttd_per_kind.png", file=sys.stderr)
    return 0


def _replica_run(job: tuple[str, int, bool, argparse.Namespace]) -> dict[str, Any]:
    from gpuwarden.lab import replica_eval

    fleet, seed, hardware, a = job
    return replica_eval.run_fleet(fleet, seed, a.replicas, a.nodes, a.hours * 3600.0, a.step,
                                  a.cycle, a.per_kind, a.controls, hardware)  # fmt: skip


def _replicas(a: argparse.Namespace, out: Path) -> int:
    from gpuwarden.lab import replica_eval

    runs = [(fleet, seed, True, a) for fleet in replica_eval.FLEETS for seed in range(a.seeds)]
    if not a.no_fault_free:
        runs += [(fleet, 100 + seed, False, a) for fleet in replica_eval.FLEETS
                 for seed in range(a.seeds)]  # fmt: skip
    rows = []
    with ProcessPoolExecutor(a.jobs) if a.jobs > 1 else _Inline() as pool:
        for row in pool.map(_replica_run, runs):
            print(f"{row['fleet']} seed {row['seed']}: {row['differing']} cycles differ",
                  file=sys.stderr)  # fmt: skip
            rows.append(row)
    _report(out, "evaluation-replicas", replica_eval.table(rows), {"args": vars(a), "runs": rows})
    return 1 if any(r["differing"] for r in rows) else 0


def _report(out: Path, stem: str, text: str, payload: dict[str, Any]) -> None:
    """The table printed, and written beside its runs as ``<stem>.md`` and ``<stem>.json``."""
    print(text)
    (out / f"{stem}.json").write_text(json.dumps(payload, indent=1, default=str))
    (out / f"{stem}.md").write_text(text + "\n")
    print(f"\nwrote {out}/{stem}.json, .md", file=sys.stderr)


def _via_prometheus(a: argparse.Namespace, out: Path) -> int:
    from gpuwarden.lab import via_prometheus as vp

    runs = []
    for seed in range(a.seeds):
        r = vp.run_seed_via_prometheus(seed, a.nodes, a.hours * 3600.0, a.step, a.cycle,
                                       a.per_kind, a.controls, a.missed_scrapes,
                                       a.telemetry, "" if a.fleet == "homogeneous" else a.fleet,
                                       a.dme_prefix)  # fmt: skip
        print(f"seed {seed}: " + ", ".join(f"{k} {v:.0f}s" for k, v in r["seconds"].items()),
              file=sys.stderr)  # fmt: skip
        runs.append(r)
    _report(out, "evaluation-via-prometheus", vp.table(runs), {"args": vars(a), "runs": runs})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
