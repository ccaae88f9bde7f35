"""``gpuwarden evaluate-partitions``: the analyzer on a fleet of partitioned GPUs, per fault kind.

The composition point of the partitioned-GPU evaluation (issue 34 item 6): drives
:class:`simulator.fleet.Fleet` with MIG-partitioned H100/A100 nodes (1g.10gb x7; 3g.40gb x2 and
7g.80gb beside whole GPUs), MI300X nodes in CPX and DPX compute partitions and training H100
nodes, every instance serving an inference replica whose load follows its deployment's daily
cycle (the fault-free control: load moves, no instance is slow). One fault per slot, shuffled:

- ``mig_xid``: an XID 48 or 95 the driver attributes to one MIG GPU instance. Found: a finding
  naming the *physical* GPU (``gpu=<g>``) on its node; attributed: none names an instance;
- ``amd_hbm_uncorrectable`` on a partitioned MI300X: an ECC error under a partition. Found: a
  finding naming the physical GPU;
- ``instance_stall``: one MIG instance serving far less than its replicas. Found: an
  ``instance_straggler`` naming that instance of that GPU. On MIG only: DME serves no
  per-partition activity (amdsmi has none), so an AMD partition's stall is not observable.

Frames go to the analyzer's FrameBuffer with the fleet's instances (what the exporter's MIG
collector labels: GPU instance id, profile; the replica's deployment). Scored: found, time to
detect, stray findings on partitioned nodes, drains on anything but a hardware fault.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from analyzer.detectors import default_detectors
from analyzer.engine import Engine
from analyzer.findings import Finding
from analyzer.sources.frames import FrameBuffer
from analyzer.window import InstanceInfo
from simulator.fleet import Fleet

GRACE = 300.0
SLOT = 1800.0
KINDS = ("mig_xid", "amd_hbm_uncorrectable", "instance_stall")
# what names a fault: the finding kinds that may stand for it
FOUND_BY = {"mig_xid": {"xid_fatal", "ecc_uncorrectable", "row_remap_pending"},
            "amd_hbm_uncorrectable": {"afid_fatal", "afid_event", "ecc_uncorrectable",
                                      "ras_deferred"},
            "instance_stall": {"instance_straggler"}}  # fmt: skip
MIXED_MIG = "3g.40gb*2,3g.40gb*2,3g.40gb*2,3g.40gb*2,7g.80gb,7g.80gb,-,-"


def partitioned_fleet(nodes: int, seed: int) -> Fleet:
    """Per eight nodes: two H100 in 1g.10gb x7, one H100 in 3g.40gb / 7g.80gb beside two whole
    GPUs, one A100 in 1g.10gb x7, one MI300X in CPX, one in DPX, two H100 training nodes."""
    pattern = [("h100", "1g.10gb*7"), ("h100", "1g.10gb*7"), ("h100", MIXED_MIG),
               ("a100", "1g.10gb*7"), ("mi300x", "cpx"), ("mi300x", "dpx"),
               ("h100", None), ("h100", None)]  # fmt: skip
    rows = [pattern[i % 8] for i in range(nodes)]
    parts = {i: spec for i, (_, spec) in enumerate(rows) if spec is not None}
    return Fleet(nodes, seed, skus=[s for s, _ in rows], partitions=parts, idle_fraction=0.0)


def plan(fleet: Fleet, rng: np.random.Generator, horizon: float) -> list[dict[str, Any]]:
    """One fault per slot at a random instance or GPU of a fitting node; injected now."""
    mig = [x for x in fleet.instances if fleet.sku_of[x.node] != "mi300x"]
    amd = sorted({(x.node, x.gpu) for x in fleet.instances if fleet.sku_of[x.node] == "mi300x"})
    slots = int(horizon // SLOT)
    kinds = [KINDS[i % len(KINDS)] for i in range(slots)]
    rng.shuffle(kinds)
    out = []
    for i, kind in enumerate(kinds):
        onset = i * SLOT + 600.0 + float(rng.uniform(0, 300))
        duration = float(rng.uniform(900, 1200))
        if kind == "amd_hbm_uncorrectable":
            n, g = amd[int(rng.integers(len(amd)))]
            f = fleet.inject(kind, fleet.nodes[n], f"gpu{g}", {"fatal": bool(rng.random() < 0.7)},
                             onset=onset, duration=duration)  # fmt: skip
            out.append({"kind": kind, "node": n, "gpu": g, "instance": None, "onset": f.onset,
                        "end": f.end})  # fmt: skip
            continue
        x = mig[int(rng.integers(len(mig)))]
        params: dict[str, Any] = {"instance": x.instance_id}
        if kind == "mig_xid":
            params["xid"] = int(rng.choice([48, 95]))
        else:
            params["slowdown"] = float(rng.choice([0.5, 0.6, 0.75]))
        f = fleet.inject(kind, fleet.nodes[x.node], f"gpu{x.gpu}", params, onset=onset,
                         duration=duration)  # fmt: skip
        out.append({"kind": kind, "node": x.node, "gpu": x.gpu, "instance": x.instance_id,
                    "onset": f.onset, "end": f.end, **params})  # fmt: skip
    return out


def _names(fault: dict[str, Any], f: Finding, nodes: Sequence[str]) -> bool:
    if f.node != nodes[fault["node"]] or f.kind not in FOUND_BY[fault["kind"]]:
        return False
    if fault["kind"] == "instance_stall":
        return f.subject == f"instance=gpu{fault['gpu']}/{fault['instance']}"
    return f.subject == f"gpu={fault['gpu']}"


def run_seed(seed: int, nodes: int, horizon: float, step: float = 15.0,
             cycle: float = 60.0) -> dict[str, Any]:  # fmt: skip
    started = time.perf_counter()
    fleet = partitioned_fleet(nodes, seed)
    faults = plan(fleet, np.random.default_rng(60_000 + seed), horizon)
    # per-instance activity as the exporter serves it: MIG instances only (DME has none)
    infos = {(x.node, x.gpu, x.slot): InstanceInfo(str(x.instance_id), x.profile, x.job)
             for x in fleet.instances if fleet.sku_of[x.node] != "mi300x"}  # fmt: skip
    buf = FrameBuffer(fleet.nodes, 600.0, step, sku=fleet.models, instances=infos)
    engine = Engine(default_detectors())
    partitioned = {fleet.nodes[n] for n in fleet.layouts}
    first: dict[int, float] = {}
    instance_named = {i: False for i in range(len(faults))}
    stray: set[tuple[str, str, str]] = set()
    false_drains = 0
    t, next_cycle = 0.0, cycle
    while t < horizon:
        t += step
        buf.push(fleet.step(t), fleet.jobs_at(t))
        if t + 1e-9 < next_cycle:
            continue
        next_cycle += cycle
        for f in engine.cycle(buf.window()):
            hit = [i for i, x in enumerate(faults)
                   if x["onset"] <= t <= (x["end"] or horizon) + GRACE
                   and f.node == fleet.nodes[x["node"]]]  # fmt: skip
            named = [i for i in hit if _names(faults[i], f, fleet.nodes)]
            for i in named:
                first.setdefault(i, t - faults[i]["onset"])
            for i in hit:  # a fault on a GPU named on one of its instances: misattributed
                instance_named[i] |= faults[i]["kind"] != "instance_stall" and (
                    f.subject.startswith("instance=")
                )
            if not hit and f.node in partitioned:
                stray.add(f.key)
            hardware = any(faults[i]["kind"] != "instance_stall" for i in hit)
            false_drains += f.action == "drain" and not hardware
    rows = [{**x, "node": fleet.nodes[x["node"]], "found": i in first, "ttd_s": first.get(i),
             "attributed": i in first and not instance_named[i]}
            for i, x in enumerate(faults)]  # fmt: skip
    return {"seed": seed, "nodes": nodes, "horizon_s": horizon, "faults": rows,
            "instances": len(fleet.instances), "stray": sorted(stray),
            "false_drains": false_drains, "wall_s": time.perf_counter() - started}  # fmt: skip


def table(runs: Sequence[dict[str, Any]]) -> str:
    rows = ["| fault | n | found (physical GPU / instance named) | not misattributed |"
            " TTD median (s) | TTD max (s) |", "|---|---|---|---|---|---|"]  # fmt: skip
    faults = [f for r in runs for f in r["faults"]]
    for kind in KINDS:
        fs = [f for f in faults if f["kind"] == kind]
        if not fs:
            continue
        ttd = [f["ttd_s"] for f in fs if f["ttd_s"] is not None]
        med, worst = (f"{np.median(ttd):.0f}", f"{max(ttd):.0f}") if ttd else ("-", "-")
        rows.append(f"| {kind} | {len(fs)} | {sum(f['found'] for f in fs)}/{len(fs)} |"
                    f" {sum(f['attributed'] for f in fs)}/{len(fs)} | {med} | {worst} |")  # fmt: skip
    stray = sum(len(r["stray"]) for r in runs)
    drains = sum(r["false_drains"] for r in runs)
    rows.append(f"| stray findings on partitioned nodes / false drains | - | {stray} / {drains}"
                " | - | - | - |")  # fmt: skip
    return "\n".join(rows)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="gpuwarden evaluate-partitions",
                                description=__doc__.split("\n")[0])  # fmt: skip
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--nodes", type=int, default=16, help="a multiple of 8")
    p.add_argument("--hours", type=float, default=5.0)
    p.add_argument("--json", help="also write every seed's results here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    a = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    if a.nodes < 8 or a.nodes % 8 or a.hours < 1 or a.seeds < 1:
        print("gpuwarden evaluate-partitions: need --nodes >= 8 (a multiple of 8), --hours >= 1,"
              " --seeds >= 1", file=sys.stderr)  # fmt: skip
        return 2
    runs = []
    for seed in range(a.seeds):
        r = run_seed(seed, a.nodes, a.hours * 3600.0)
        print(f"seed {seed}: {r['wall_s']:.0f}s", file=sys.stderr)
        runs.append(r)
    print(f"partitioned fleet: {a.nodes} nodes ({runs[0]['instances']} GPU instances and"
          f" partitions), {a.seeds} seeds x {a.hours:g} h")  # fmt: skip
    print(table(runs))
    if a.json:
        Path(a.json).write_text(json.dumps(runs, indent=1, default=str))
    missed = [f for r in runs for f in r["faults"] if not f["attributed"]]
    return 0 if not missed and not any(r["false_drains"] for r in runs) else 1
