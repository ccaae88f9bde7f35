"""The analyzer on the deployed path: reading a real Prometheus at 128, 1,024 and 4,096 nodes.

The TSDB is filled by ``promtool tsdb create-blocks-from openmetrics`` from the fleet
simulator (:mod:`benchmarks.fleet_openmetrics`: every series the analyzer reads, with the
exporter's labels, 15 s steps, a few faults starting inside the span); then a real Prometheus
serves it and the analyzer runs a cold start followed by steady-state cycles at the scrape
interval (virtual time, back to back). Per size: cold start, steady-state cycle wall and
analyzer CPU, MB read, bytes and CPU per node per cycle, the process's peak RSS, and the
engine-only cycle on the same window with the read/engine ratio. The generated TSDB is cached
under ``.bench-cache/`` (``BENCH_FRESH=1`` rebuilds it). ``BENCH_NODES=128,1024,4096`` picks
sizes (default 128 and 1,024; ``make bench-prometheus`` runs all three). promtool holds a
block's series in memory (about 10 GB per 1,024 nodes), so the history is backfilled in
ranges of ``BENCH_PART`` nodes (512) and Prometheus merges the overlapping blocks once.
``BENCH_TELEMETRY=dcgm-exporter`` records the same fleet as dcgm-exporter + node_exporter serve
it (rows ``prom_dcgm_<n>_*``): the analyzer reads it through its dialect readers.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from analyzer.sources.queries import QUERIES
from benchmarks.fleet_openmetrics import backfill, write
from tests.realcomp import require_binary, run_prometheus

STEP, WINDOW, CYCLES = 15.0, 600.0, 8
BASELINE = os.environ.get("BENCH_BASELINE", "")  # a commit measured beside this tree
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "1"))  # analyzer processes per tree
TELEMETRY = os.environ.get("BENCH_TELEMETRY", "gpuwarden")
# a cached TSDB holds the families the recorder wrote: a change to them starts a new cache
_FAMILIES = ",".join(sorted(q.name + (f"+{q.gate.metric.name}" if q.gate else "") for q in QUERIES))
CACHE = (
    Path(__file__).resolve().parents[1] / ".bench-cache" / "analyzer-prometheus"
    / (hashlib.sha256(_FAMILIES.encode()).hexdigest()[:10]
       + ("" if TELEMETRY == "gpuwarden" else f"-{TELEMETRY}"))
)  # fmt: skip


def _cached(nodes: int) -> tuple[Path, float] | None:
    """A TSDB built earlier for this size (any start time within Prometheus's retention)."""
    if os.environ.get("BENCH_FRESH"):
        return None
    for d in sorted(CACHE.glob(f"{nodes}-nodes-*"), reverse=True):
        if (
            not d.name.endswith(".partial")
            and time.time() - float(d.name.rsplit("-", 1)[1]) < 7 * 86400
        ):
            return d, float(d.name.rsplit("-", 1)[1])
    return None


def _tsdb(nodes: int, t0: float, steps: int) -> Path:
    """Backfill the simulator's history in node ranges of ``BENCH_PART`` nodes (promtool holds a
    whole block's series in memory: ~10 GB per 1,024 nodes), then let Prometheus merge the
    overlapping blocks once, so the benchmark queries one block as a long-running server would."""
    out = CACHE / f"{nodes}-nodes-{int(t0)}"
    part = out.with_name(out.name + ".partial")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    promtool = require_binary("promtool")
    size = int(os.environ.get("BENCH_PART", "512"))
    for lo in range(0, nodes, size):
        om = out.parent / f"{nodes}-{int(t0)}-{lo}.om"
        write(om, nodes, t0, steps, STEP, part=(lo, min(lo + size, nodes)), telemetry=TELEMETRY)
        backfill(promtool, om, part)
    part.chmod(0o777)
    if nodes > size:
        _compact(part)
    part.rename(out)
    return out


def _blocks(data: Path) -> list[Path]:
    return [d for d in data.iterdir() if d.is_dir() and (d / "meta.json").exists()]


def _compact(data: Path) -> None:
    """Run Prometheus on ``data`` until its compactor has merged the overlapping blocks."""
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data):
        deadline = time.monotonic() + 3600
        while len(_blocks(data)) > 1 and time.monotonic() < deadline:
            time.sleep(5)
    if len(_blocks(data)) > 1:
        raise RuntimeError(f"{data}: Prometheus left {len(_blocks(data))} overlapping blocks")


def _hwm_mib(pid: int) -> float:
    """Peak RSS of a running process (Prometheus)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _tree(ref: str) -> tuple[Path, str]:
    """The source tree of commit ``ref``, unpacked once under ``.bench-cache/trees/``."""
    root = Path(__file__).resolve().parents[1]
    sha = subprocess.run(["git", "-C", str(root), "rev-parse", "--verify", f"{ref}^{{commit}}"],
                         capture_output=True, text=True, check=True).stdout.strip()  # fmt: skip
    out = root / ".bench-cache" / "trees" / sha[:12]
    if not out.exists():
        part = out.with_name(out.name + ".partial")
        shutil.rmtree(part, ignore_errors=True)
        part.mkdir(parents=True)
        archive = subprocess.run(["git", "-C", str(root), "archive", sha], capture_output=True,
                                 check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(part)], input=archive, check=True)
        part.rename(out)
    return out, sha[:9]


def _child(tree: Path, url: str, t_cold: float) -> dict[str, Any]:
    """The analyzer of ``tree`` in a fresh process (its peak RSS is the analyzer's alone)."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    r = subprocess.run([sys.executable, str(Path(__file__).with_name("prom_cycle_child.py")),
                        url, repr(t_cold)], env=env, cwd=tree, capture_output=True, text=True,
                       timeout=3600, check=False)  # fmt: skip
    if r.returncode != 0:
        raise RuntimeError(f"analyzer of {tree}: {r.stderr[-2000:]}")
    return dict(json.loads(r.stdout))


def _summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over every steady-state cycle of every round; ranges over the rounds."""
    r = dict(runs[0])
    for k in ("walls", "cpus", "engines", "engine_cpus", "reads"):
        r[k] = [x for run in runs for x in run[k]]
    r["wall"], r["wall_max"] = statistics.median(r["walls"]), max(r["walls"])
    r["cpu"], r["mb"] = statistics.median(r["cpus"]), statistics.median(r["reads"]) / 1e6
    r["engine"], r["engine_cpu"] = (
        statistics.median(r["engines"]),
        statistics.median(r["engine_cpus"]),
    )
    r["cpu_range"] = (min(statistics.median(x["cpus"]) for x in runs),
                      max(statistics.median(x["cpus"]) for x in runs))  # fmt: skip
    r["rss"] = max(x["rss"] for x in runs)
    r["verdicts"] = [x["verdicts"] for x in runs]
    return r


def _against(tag: int | str, r: dict[str, Any], b: dict[str, Any], sha: str
             ) -> list[dict[str, Any]]:  # fmt: skip
    """The baseline's figures beside this tree's, and whether every cycle's findings agree."""
    same = sum(x == y for run in r["verdicts"] + b["verdicts"]
               for x, y in zip(run, r["verdicts"][0], strict=True))  # fmt: skip
    total = len(r["verdicts"][0]) * (len(r["verdicts"]) + len(b["verdicts"]))
    return [
        {"name": f"prom_{tag}_baseline_cycle_cpu", "value": round(b["cpu"], 3), "unit": "s",
         "note": f"{sha} (BENCH_BASELINE), same server, rounds interleaved: median of "
                 f"{len(b['cpus'])}; rounds {b['cpu_range'][0]:.3f}-{b['cpu_range'][1]:.3f} s; "
                 f"engine-only {b['engine_cpu']:.3f} s"},
        {"name": f"prom_{tag}_cycle_cpu_vs_baseline", "value": round(r["cpu"] / b["cpu"], 3),
         "unit": "x", "note": f"this tree / {sha}: {r['cpu']:.3f} / {b['cpu']:.3f} s CPU per "
                              f"cycle; wall {r['wall']:.2f} / {b['wall']:.2f} s"},
        {"name": f"prom_{tag}_same_findings", "value": same, "unit": f"/{total}",
         "note": f"cycles whose findings (node, subject, kind, severity, action, detector, "
                 f"since) equal this tree's first round; {r['findings']} findings a cycle"},
    ]  # fmt: skip


def run(quick: bool) -> list[dict[str, Any]]:
    sizes = os.environ.get("BENCH_NODES", "128" if quick else "128,1024")
    steps = round(WINDOW / STEP) + 1 + CYCLES
    base = (time.time() // 7200) * 7200 - 6 * 3600  # well inside the TSDB's head-free past
    rows: list[dict[str, Any]] = []
    for nodes in [int(x) for x in sizes.split(",")]:
        g0 = time.perf_counter()
        hit = _cached(nodes)
        data, t0 = hit if hit else (_tsdb(nodes, base, steps), base)
        fill = time.perf_counter() - g0
        t_cold = t0 + STEP * (steps - 1 - CYCLES)
        here = Path(__file__).resolve().parents[1]
        baseline = _tree(BASELINE) if BASELINE else None
        runs: dict[str, list[dict[str, Any]]] = {"this": [], "baseline": []}
        with run_prometheus(
            "global: {scrape_interval: 15s}\nscrape_configs: []\n", data_dir=data
        ) as p:
            for _ in range(ROUNDS):  # interleaved: both trees see the same server and load
                if baseline is not None:
                    runs["baseline"].append(_child(baseline[0], p.url, t_cold))
                runs["this"].append(_child(here, p.url, t_cold))
            prom_rss = _hwm_mib(p.proc.pid)
        r = _summary(runs["this"])
        n, tag = nodes, (nodes if TELEMETRY == "gpuwarden" else f"dcgm_{nodes}")
        cycles = len(r["cpus"])
        note = f"median of {cycles}; max {r['wall_max']:.2f} s; engine-only {r['engine']:.3f} s"
        rows += [
            {"name": f"prom_{tag}_cold_start", "value": round(r["cold_wall"], 2), "unit": "s",
             "note": f"first read, full window: {r['cold_mb']:.1f} MB, CPU {r['cold_cpu']:.2f} s"},
            {"name": f"prom_{tag}_cycle_wall", "value": round(r["wall"], 3), "unit": "s",
             "note": f"{note} (read/engine {r['wall'] / max(r['engine'], 1e-9):.1f}x)"},
            {"name": f"prom_{tag}_cycle_cpu", "value": round(r["cpu"], 3), "unit": "s",
             "note": f"analyzer process CPU per steady-state cycle (read + engine), median of "
                     f"{cycles}; rounds {r['cpu_range'][0]:.3f}-{r['cpu_range'][1]:.3f} s; "
                     f"engine-only {r['engine_cpu']:.3f} s"},
            {"name": f"prom_{tag}_cycle_read", "value": round(r["mb"], 3), "unit": "MB",
             "note": f"response bytes per steady-state cycle; window holds {r['series']:.0f} series"},
            {"name": f"prom_{tag}_bytes_per_node", "value": round(r["mb"] * 1e6 / n), "unit": "B",
             "note": "per node per cycle"},
            {"name": f"prom_{tag}_cpu_per_node", "value": round(r["cpu"] * 1e6 / n), "unit": "us",
             "note": "analyzer CPU per node per cycle"},
            {"name": f"prom_{tag}_peak_rss", "value": round(r["rss"]), "unit": "MiB",
             "note": f"analyzer process peak RSS; findings: {', '.join(r['kinds'])}"},
            {"name": f"prom_{tag}_prometheus_rss", "value": round(prom_rss), "unit": "MiB",
             "note": "Prometheus peak RSS (serving the window's history)"},
            {"name": f"prom_{tag}_slowest_queries", "value": round(r["slowest"][-1][0], 3), "unit": "s",
             "note": "; ".join(f"{k.removeprefix('gpuwarden_')} {v:.2f}" for v, k in reversed(r["slowest"]))},
            {"name": f"prom_{tag}_tsdb_fill", "value": round(fill, 1), "unit": "s",
             "note": "simulate + promtool backfill (0 when cached)"
             + (f"; MISSING {r['missing']}" if r["missing"] else "")},
        ]  # fmt: skip
        if baseline is not None:
            rows += _against(tag, r, _summary(runs["baseline"]), baseline[1])
    per_node = {r["name"]: r["value"] for r in rows if r["name"].endswith("_per_node")}
    ns: list[int | str] = [int(x) if TELEMETRY == "gpuwarden" else f"dcgm_{x}"
                           for x in sizes.split(",")]  # fmt: skip
    if len(ns) > 1:
        lo, hi = ns[0], ns[-1]
        for what, unit in (("bytes", "B"), ("cpu", "us")):
            a, b = per_node[f"prom_{lo}_{what}_per_node"], per_node[f"prom_{hi}_{what}_per_node"]
            rows.append({"name": f"prom_{what}_per_node_growth", "value": round(b / max(a, 1e-9), 2),
                         "unit": "x", "note": f"{lo} -> {hi} nodes: {a:g} -> {b:g} {unit} per node per cycle"})  # fmt: skip
    return rows
