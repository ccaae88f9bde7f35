"""The fleet pass split across analyzer replicas (issue 33, item 3b), by simulation: one
fleet's window (:func:`benchmarks.bench_analyzer.synthetic_window`: 16-node jobs, 32-node
leaves), judged whole by the single-process analyzer and then by 1, 2, 4 and 8 replicas that
own its units by rendezvous hash (:mod:`analyzer.replicas`): each replica first leaves its
marginal scores and pools (:func:`_leave`), then judges its part against the others' (decoded
and joined, as the service does). Each judgement runs in its own
fresh process (spawned, imports warmed on a small window first), so the CPU seconds and the
peak RSS are that replica's own: per replica count, the slowest replica's cycle wall time and
CPU, its peak RSS, the bytes of the window part it holds (what a node-restricted read
would fetch) and of the detector memory it leaves on the board after the cycle
(:mod:`analyzer.replicas.handover`), with ratios against the single process measured in the
same run.

``BENCH_SCALE_PARTS`` picks the parts (default ``split,weak,read``);
``BENCH_SCALE_NODES`` picks the fleet size (default 2048; quick: 512; 12500 for the
issue's fleet, about 10 minutes on 2 cores). The window is the analyzer's dense arrays.

Then a fixed share per replica as the fleet grows (rows ``scale_weak_*``, :func:`_weak`).

Then the reads (rows ``scale_read_*``): a simulated fleet of ``BENCH_SCALE_READ_NODES`` nodes
(default 256; quick: 128) backfilled into a real Prometheus (the TSDB of
:mod:`benchmarks.bench_analyzer_prometheus`, cached alike), read by one analyzer and by each
replica of 1, 2, 4 and 8 reading only the nodes it owns (the topology, then its nodes' series):
a cold start and steady-state cycles at the scrape interval. Per replica count: the bytes the
largest reader fetched a steady cycle and at its cold start, the bytes of all replicas
together, the read's CPU, and whether the replicas' findings together equal the single
analyzer's on every cycle (``marginal`` included: the replicas exchange their scores).
``BENCH_TELEMETRY=dcgm-exporter`` reads the fleet as dcgm-exporter + node_exporter serve it
(rows ``scale_read_dcgm_<n>_*``): each replica narrows the foreign families to its hosts;
with ``BENCH_NODE_PATTERN`` (rows ``scale_read_dcgm_pattern_<n>_*``) by that pattern around
its nodes, as under a site's ``--node-pattern``.
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

from analyzer.replicas.configmaps import MAX_BLOB
from analyzer.replicas.exchange import encode_memory
from analyzer.replicas.ownership import assign, owned_nodes, units
from analyzer.replicas.slicing import subwindow, window_bytes
from analyzer.window import Window
from benchmarks.bench_analyzer import synthetic_window

REPLICAS = (1, 2, 4, 8)


def _peak_rss_mib() -> float:
    """This process's peak RSS: ``VmHWM`` (``ru_maxrss`` would carry the parent's peak over
    the spawn's exec on Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _warm() -> None:
    from analyzer.detectors import default_detectors
    from analyzer.engine import Engine

    Engine(default_detectors()).cycle(synthetic_window(32))


def _leave(window: Window) -> tuple[bytes, float]:
    """In the child: what a replica owning ``window`` leaves for the others each cycle (its
    marginal scores and pools, encoded), and the CPU that took."""
    from analyzer.detectors import default_detectors
    from analyzer.engine import Engine
    from analyzer.replicas.exchange import encode
    from analyzer.replicas.judge import scores

    _warm()
    cpu0 = time.process_time()
    blob = encode(scores(Engine(default_detectors()), window, range(len(window.nodes))))
    return blob, time.process_time() - cpu0


def _judge(window: Window, whole: bool, others: list[bytes] | None = None) -> dict[str, float]:
    """In the child: warm up on a small window, then one measured cycle; a replica (not
    ``whole``) first decodes and joins ``others``, the other replicas' blobs, and judges
    against them as it does in the service (None: judges its part alone)."""
    from analyzer.detectors import default_detectors
    from analyzer.engine import Engine
    from analyzer.replicas.exchange import decode
    from analyzer.replicas.judge import joined, judge

    _warm()
    engine = Engine(default_detectors())
    everyone = range(len(window.nodes))
    cpu0 = time.process_time()
    theirs = None if whole or others is None else joined(decode(b) for b in others)
    others_cpu = time.process_time() - cpu0
    wall0, cpu0 = time.perf_counter(), time.process_time()
    found = engine.cycle(window) if whole else judge(engine, window, everyone, theirs)
    wall, cpu = time.perf_counter() - wall0, time.process_time() - cpu0
    cpu0 = time.process_time()  # what the replica leaves on the memory board after a cycle
    blob = encode_memory(window.nodes, engine.remember(frozenset(window.nodes)))
    return {
        "wall": wall,
        "cpu": cpu,
        "rss": _peak_rss_mib(),
        "findings": float(len(found)),
        "memory_bytes": float(len(blob)),
        "memory_cpu": time.process_time() - cpu0,
        "others_cpu": others_cpu,
    }


def _in_child(window: Window, whole: bool, others: list[bytes] | None = None) -> dict[str, float]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_judge, (window, whole, others))


def _left_in_child(window: Window) -> tuple[bytes, float]:
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        return pool.apply(_leave, (window,))


PARTS = ("split", "weak", "read", "fleet")


def run(quick: bool) -> list[dict[str, Any]]:
    parts = os.environ.get("BENCH_SCALE_PARTS", ",".join(PARTS)).split(",")
    unknown = set(parts) - set(PARTS)
    if unknown:
        raise ValueError(f"BENCH_SCALE_PARTS: {sorted(unknown)} not among {', '.join(PARTS)}")
    do = {"split": _split, "weak": _weak, "read": _reads, "fleet": _fleet_reads}
    return [row for part in PARTS if part in parts for row in do[part](quick)]


def _split(quick: bool) -> list[dict[str, Any]]:
    nodes = int(os.environ.get("BENCH_SCALE_NODES", "512" if quick else "2048"))
    window = synthetic_window(nodes)
    parts = units(window)
    single = _in_child(window, whole=True)
    full_bytes = window_bytes(window)
    rows: list[dict[str, Any]] = [
        {"name": f"scale_{nodes}_single_cycle_cpu", "value": round(single["cpu"], 3),
         "unit": "s", "note": f"one process, whole fleet; wall {single['wall']:.2f} s, "
                              f"{single['findings']:.0f} findings"},
        {"name": f"scale_{nodes}_single_peak_rss", "value": round(single["rss"], 1),
         "unit": "MiB", "note": f"window {full_bytes / 2**20:.0f} MiB; {len(parts)} units"},
    ]  # fmt: skip
    for r in REPLICAS:
        names = [f"analyzer-{i}" for i in range(r)]
        split = [subwindow(window, owned_nodes(parts, mine))
                 for mine in assign(parts, names).values()]  # fmt: skip
        left = [_left_in_child(part) for part in split]  # every replica's blob, then the cycles
        per = []
        for i, part in enumerate(split):
            others = [blob for j, (blob, _) in enumerate(left) if j != i]
            got = _in_child(part, whole=False, others=others)
            per.append({**got, "bytes": window_bytes(part), "nodes": len(part.nodes),
                        "scores_bytes": float(len(left[i][0])), "scores_cpu": left[i][1]})  # fmt: skip
        worst = max(per, key=lambda p: p["cpu"])
        found = sum(p["findings"] for p in per)
        nodes_max = max(p["nodes"] for p in per)
        rows += [
            {"name": f"scale_{nodes}_{r}_replicas_cycle_cpu", "value": round(worst["cpu"], 3),
             "unit": "s", "note": f"slowest replica ({nodes_max} nodes max), judged against "
                                  f"the others' scores and pools; "
                                  f"{worst['cpu'] / single['cpu']:.2f}x single; "
                                  f"wall {worst['wall']:.2f} s; {found:.0f} findings in all"},
            {"name": f"scale_{nodes}_{r}_replicas_others_cpu",
             "value": round(max(p["others_cpu"] for p in per), 3), "unit": "s",
             "note": f"most CPU a replica spent decoding and joining the other {r - 1} "
                     "replicas' scores and pools before its cycle"},
            {"name": f"scale_{nodes}_{r}_replicas_peak_rss",
             "value": round(max(p["rss"] for p in per), 1), "unit": "MiB",
             "note": f"{max(p['rss'] for p in per) / single['rss']:.2f}x single "
                     "(its window part, received pickled, and the loaded detectors included)"},
            {"name": f"scale_{nodes}_{r}_replicas_memory_kib",
             "value": round(max(p["memory_bytes"] for p in per) / 2**10, 1), "unit": "KiB",
             "note": f"largest detector memory left on the board after a cycle (a ConfigMap "
                     f"holds {MAX_BLOB / 2**10:.0f} KiB); encoded in "
                     f"{max(p['memory_cpu'] for p in per) * 1e3:.0f} ms of CPU; the whole "
                     f"fleet's {single['memory_bytes'] / 2**10:.0f} KiB"},
            {"name": f"scale_{nodes}_{r}_replicas_scores_kib",
             "value": round(max(p["scores_bytes"] for p in per) / 2**10, 1), "unit": "KiB",
             "note": "largest marginal scores and model-median pools left for the others each "
                     f"cycle (a ConfigMap holds {MAX_BLOB / 2**10:.0f} KiB); computed and "
                     f"encoded in {max(p['scores_cpu'] for p in per):.2f} s of CPU, "
                     "besides the cycle's"},
            {"name": f"scale_{nodes}_{r}_replicas_window_bytes",
             "value": round(max(p["bytes"] for p in per) / 2**20, 1), "unit": "MiB",
             "note": f"largest part; {max(p['bytes'] for p in per) / full_bytes:.2f}x the fleet's"},
        ]  # fmt: skip
    return rows


def _weak(quick: bool) -> list[dict[str, Any]]:
    """A fixed share per replica as the fleet grows (rows ``scale_weak_*``): fleets of
    ``BENCH_SCALE_WEAK`` nodes per replica (default 256, quick 128; 1563 gives 12,504 nodes
    at 8) split over 1, 2, 4 and 8 replicas; the largest replica's part judged in a fresh
    process as above, ``BENCH_SCALE_REPEATS`` times (default 3), the least CPU kept. Its cost
    should follow its own nodes, not the fleet's: the CPU and window bytes per node it owns
    against 1 replica. Rendezvous hashing does not split units evenly, so the largest part
    is over the mean share; the notes say by how much."""
    per = int(os.environ.get("BENCH_SCALE_WEAK", "128" if quick else "256"))
    repeats = int(os.environ.get("BENCH_SCALE_REPEATS", "1" if quick else "3"))
    rows: list[dict[str, Any]] = []
    base: dict[str, float] = {}
    for r in REPLICAS:
        window = synthetic_window(per * r)
        parts = units(window)
        names = [f"analyzer-{i}" for i in range(r)]
        largest = max(assign(parts, names).values(), key=lambda m: len(owned_nodes(parts, m)))
        part = subwindow(window, owned_nodes(parts, largest))
        del window
        runs = [_in_child(part, whole=False) for _ in range(repeats)]
        got = min(runs, key=lambda g: g["cpu"])  # the least disturbed of the fresh processes
        n = len(part.nodes)
        per_node = got["cpu"] / n * 1e3
        part_kib = window_bytes(part) / n / 2**10
        base = base or {"cpu": per_node, "bytes": part_kib}
        rows += [
            {"name": f"scale_weak_{per * r}_{r}_replicas_cycle_cpu", "value": round(got["cpu"], 3),
             "unit": "s", "note": f"largest replica: {n} nodes ({n / per:.2f}x the mean share), "
                                  f"{per_node:.3f} ms a node "
                                  f"({per_node / base['cpu']:.2f}x at 1 replica); "
                                  f"wall {got['wall']:.2f} s; {len(parts)} units"},
            {"name": f"scale_weak_{per * r}_{r}_replicas_peak_rss", "value": round(got["rss"], 1),
             "unit": "MiB", "note": f"window part {window_bytes(part) / 2**20:.0f} MiB, "
                                    f"{part_kib:.0f} KiB a node "
                                    f"({part_kib / base['bytes']:.2f}x at 1 replica)"},
        ]  # fmt: skip
    return rows


READ_CYCLES = 4  # steady-state cycles after the cold start
# BENCH_NODE_PATTERN: the foreign hosts mapped to nodes by this regex (a site's
# --node-pattern), so each replica narrows its reads by the pattern around its nodes
# (analyzer/sources/dialects/hostpattern.py) instead of by the host names themselves
PATTERN = os.environ.get("BENCH_NODE_PATTERN", "")


def _mine(topology: Window, me: str, names: list[str]) -> set[str]:
    parts = units(topology)
    return {topology.nodes[i] for i in owned_nodes(parts, assign(parts, names)[me])}


async def _read_cycles(url: str, t_cold: float, names: list[str], share: bool = False,
                       server: int | None = None) -> list[dict[str, Any]]:  # fmt: skip
    """Readers (one, of the whole fleet, when ``names`` is empty) through a cold start and
    :data:`READ_CYCLES` steady cycles, each cycle all replicas' reads then their judgement
    with the marginal scores exchanged (as the service does): per reader its bytes, read CPU
    and node count; in the first, every cycle's findings of all readers together, the
    topology fallbacks and, given the ``server``'s pid, its CPU each cycle (all readers).
    ``share``: the first replica leads, reads the topology and leaves it on an in-memory
    exchange (:mod:`analyzer.replicas.sharing`); the others take it from there."""
    from analyzer.detectors import default_detectors
    from analyzer.engine import Engine
    from analyzer.replicas.exchange import MemoryExchange
    from analyzer.replicas.judge import joined, judge, scores
    from analyzer.replicas.membership import Plan
    from analyzer.replicas.role import ReplicaStats
    from analyzer.replicas.sharing import SharedTopology
    from analyzer.sources.dialects.identity import NodeMap
    from analyzer.sources.prometheus import PrometheusSource
    from benchmarks.bench_analyzer_prometheus import STEP, WINDOW
    from benchmarks.procstat import cpu_seconds

    who = names or [""]
    pattern = NodeMap(pattern=PATTERN) if PATTERN else None
    srcs = {me: PrometheusSource(url, window=WINDOW, step=STEP, timeout=120.0, discover=True,
                                 node_map=pattern)
            for me in who}  # fmt: skip
    for me, src in srcs.items():
        if names:
            src.scope = lambda topo, me=me: _mine(topo, me, names)
    engines = {me: Engine(default_detectors()) for me in who}
    board, counts = MemoryExchange(), {me: ReplicaStats(me) for me in who}
    out: list[dict[str, Any]] = [{"bytes": [], "cpu": [], "found": [], "nodes": 0,
                                  "server": [], "fallbacks": 0} for _ in who]  # fmt: skip
    try:
        for k in range(READ_CYCLES + 1):
            windows = {}
            plan = Plan(k, tuple(who), who[0])
            s0 = cpu_seconds(server) if server is not None else 0.0
            for me, o in zip(who, out, strict=True):
                if share and names:  # the leader reads first, as it would (the followers wait)
                    srcs[me].share = SharedTopology(board, plan, me, 30.0, counts[me])
                c0 = time.process_time()
                windows[me] = w = await srcs[me].read(t_cold + k * STEP + 5)
                o["cpu"].append(time.process_time() - c0)
                o["bytes"].append(srcs[me].stats.cycle_bytes)
                o["nodes"] = len(w.nodes)
            if server is not None:
                out[0]["server"].append(cpu_seconds(server) - s0)
            keep = {me: range(len(w.nodes)) for me, w in windows.items()}
            mine = {me: scores(engines[me], w, keep[me]) for me, w in windows.items() if names}
            found = set()
            for me, w in windows.items():
                others = joined(s for o, s in mine.items() if o != me) if names else None
                found |= {(f.node, f.subject, f.kind, f.severity, f.action)
                          for f in judge(engines[me], w, keep[me], others, me == min(who))}  # fmt: skip
            out[0]["found"].append(found)
        out[0]["fallbacks"] = sum(c.topology_fallbacks for c in counts.values())
    finally:
        for src in srcs.values():
            await src.close()
    return out


def _reads(quick: bool) -> list[dict[str, Any]]:
    from benchmarks.bench_analyzer_prometheus import (
        CYCLES,
        STEP,
        TELEMETRY,
        WINDOW,
        _cached,
        _tsdb,
    )
    from tests.realcomp import run_prometheus

    nodes = int(os.environ.get("BENCH_SCALE_READ_NODES", "128" if quick else "256"))
    tag = f"{'' if TELEMETRY == 'gpuwarden' else 'dcgm_'}{'pattern_' if PATTERN else ''}{nodes}"
    steps = round(WINDOW / STEP) + 1 + CYCLES
    base = (time.time() // 7200) * 7200 - 6 * 3600
    hit = _cached(nodes)
    data, t0 = hit if hit else (_tsdb(nodes, base, steps), base)
    t_cold = t0 + STEP * (steps - 1 - CYCLES)
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n",
                        data_dir=data) as p:  # fmt: skip
        (single,) = asyncio.run(_read_cycles(p.url, t_cold, []))
        per_count = {}
        for r in REPLICAS:
            names = [f"analyzer-{i}" for i in range(r)]
            per_count[r] = asyncio.run(_read_cycles(p.url, t_cold, names))
    steady = statistics.median(single["bytes"][1:])
    rows: list[dict[str, Any]] = [
        {"name": f"scale_read_{tag}_single_bytes", "value": round(steady / 1e6, 3),
         "unit": "MB", "note": f"one analyzer, whole fleet, steady cycle (median of "
                               f"{READ_CYCLES}); cold start {single['bytes'][0] / 1e6:.1f} MB; "
                               f"read CPU {statistics.median(single['cpu'][1:]):.3f} s; "
                               f"{len(single['found'][-1])} findings the last cycle, "
                               f"{sum(x[2] == 'marginal' for x in single['found'][-1])} "
                               "marginal"},
    ]  # fmt: skip
    for r, per in per_count.items():
        each = [statistics.median(x["bytes"][1:]) for x in per]
        cold = [x["bytes"][0] for x in per]
        cpu = max(statistics.median(x["cpu"][1:]) for x in per)
        same = sum(per[0]["found"][k] == single["found"][k] for k in range(READ_CYCLES + 1))
        rows += [
            {"name": f"scale_read_{tag}_{r}_replicas_bytes", "value": round(max(each) / 1e6, 3),
             "unit": "MB", "note": f"largest replica's steady cycle "
                                   f"({max(x['nodes'] for x in per)} nodes max); "
                                   f"{max(each) / steady:.2f}x single; all replicas "
                                   f"{sum(each) / steady:.2f}x; cold start "
                                   f"{max(cold) / 1e6:.1f} MB ({max(cold) / single['bytes'][0]:.2f}x)"},
            {"name": f"scale_read_{tag}_{r}_replicas_read_cpu", "value": round(cpu, 3),
             "unit": "s", "note": f"slowest replica's read, steady cycle; "
                                  f"{cpu / statistics.median(single['cpu'][1:]):.2f}x single"},
            {"name": f"scale_read_{tag}_{r}_replicas_same_findings", "value": same,
             "unit": f"/{READ_CYCLES + 1}",
             "note": "cycles whose findings, all replicas together, equal the single analyzer's"},
        ]  # fmt: skip
    return rows


def _fleet_reads(quick: bool) -> list[dict[str, Any]]:
    """Rows ``scale_fleet_*``: the replicas' reads on a TSDB holding a whole fleet's topology
    families (:mod:`benchmarks.topology_tsdb`; ``BENCH_SCALE_FLEET_NODES``, default 12500,
    quick 1000): each replica of 1, 2, 4 and 8 reads the topology of every node, then every
    family of its own nodes, a cold start and steady cycles; its bytes, read CPU and
    Prometheus' CPU per replica read; then Prometheus' CPU a steady cycle with every replica
    reading the topology and with the leader's read shared (:func:`_shared_rows`). The node
    families here are the topology's own: the per-node bytes of a full read come from the
    ``scale_read`` rows."""
    from benchmarks.bench_analyzer_prometheus import CYCLES, STEP, WINDOW
    from benchmarks.procstat import cpu_seconds
    from benchmarks.topology_tsdb import cached_start, tsdb
    from tests.realcomp import run_prometheus

    nodes = int(os.environ.get("BENCH_SCALE_FLEET_NODES", "1000" if quick else "12500"))
    steps = round(WINDOW / STEP) + 1 + CYCLES
    t0 = cached_start(nodes, steps) or (time.time() // 7200) * 7200 - 6 * 3600
    built = time.perf_counter()
    data = tsdb(nodes, t0, steps, STEP)
    built = time.perf_counter() - built
    t_cold = t0 + STEP * (steps - 1 - CYCLES)
    rows: list[dict[str, Any]] = []
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n",
                        data_dir=data) as p:  # fmt: skip
        base: dict[str, float] = {}
        # warm the server (its page cache, postings) first: else the first reader pays for it
        asyncio.run(_read_cycles(p.url, t_cold, ["analyzer-0"]))
        for r in REPLICAS:
            names = [f"analyzer-{i}" for i in range(r)]
            server0 = cpu_seconds(p.proc.pid)
            per = asyncio.run(_read_cycles(p.url, t_cold, names, server=p.proc.pid))
            server = (cpu_seconds(p.proc.pid) - server0) / (r * (READ_CYCLES + 1))
            shared = asyncio.run(_read_cycles(p.url, t_cold, names, True, p.proc.pid))
            rows += _shared_rows(nodes, r, per, shared, base.get("server"))
            base.setdefault("server", statistics.median(per[0]["server"][1:]))
            each = [statistics.median(x["bytes"][1:]) for x in per]
            cpu = max(statistics.median(x["cpu"][1:]) for x in per)
            base.setdefault("bytes", max(each))
            base.setdefault("cpu", cpu)
            rows += [
                {"name": f"scale_fleet_{nodes}_{r}_replicas_bytes", "value": round(max(each) / 1e6, 3),
                 "unit": "MB", "note": f"largest replica's steady read "
                                       f"({max(x['nodes'] for x in per)} nodes of {nodes}); "
                                       f"{max(each) / base['bytes']:.2f}x 1 replica; cold start "
                                       f"{max(x['bytes'][0] for x in per) / 1e6:.2f} MB"},
                {"name": f"scale_fleet_{nodes}_{r}_replicas_read_cpu", "value": round(cpu, 3),
                 "unit": "s", "note": f"slowest replica's read, steady; "
                                      f"{cpu / base['cpu']:.2f}x 1 replica; Prometheus "
                                      f"{server:.3f} s CPU a replica read"},
            ]  # fmt: skip
    rows.append({"name": f"scale_fleet_{nodes}_tsdb_build", "value": round(built, 1), "unit": "s",
                 "note": "0 when cached; the topology families only"})  # fmt: skip
    return rows


def _shared_rows(nodes: int, r: int, per: list[dict[str, Any]], shared: list[dict[str, Any]],
                 one: float | None) -> list[dict[str, Any]]:  # fmt: skip
    """Rows ``scale_fleet_<n>_<r>_replicas_prometheus_cpu`` (each replica reads the topology)
    and ``..._shared_prometheus_cpu`` (the leader reads it once for all): Prometheus' CPU a
    steady cycle, all replicas' reads together, measured in the same run."""
    alone = statistics.median(per[0]["server"][1:])
    once = statistics.median(shared[0]["server"][1:])
    one = one or alone
    same = sum(a == b for a, b in zip(per[0]["found"], shared[0]["found"], strict=True))
    each = max(statistics.median(x["bytes"][1:]) for x in shared)
    cpu = max(statistics.median(x["cpu"][1:]) for x in shared)
    return [
        {"name": f"scale_fleet_{nodes}_{r}_replicas_prometheus_cpu", "value": round(alone, 3),
         "unit": "s", "note": f"Prometheus CPU a steady cycle, every replica reading the "
                              f"topology; {alone / one:.2f}x 1 replica; cold start "
                              f"{per[0]['server'][0]:.2f} s"},
        {"name": f"scale_fleet_{nodes}_{r}_replicas_shared_prometheus_cpu", "value": round(once, 3),
         "unit": "s", "note": f"the leader reads the topology once, shared; {once / alone:.2f}x "
                              f"unshared, {once / one:.2f}x 1 replica; cold start "
                              f"{shared[0]['server'][0]:.2f} s; largest replica's steady read "
                              f"{each / 1e6:.2f} MB, read CPU {cpu:.3f} s; "
                              f"{shared[0]['fallbacks']} fallbacks; findings as unshared in "
                              f"{same}/{READ_CYCLES + 1} cycles"},
    ]  # fmt: skip
