"""Feature reduction on sharded Prometheus behind a query layer, at 1, 2 and 4 shards (issue 33).

A real distributed engine that runs here: S Prometheus 3.5 shards, each holding only its own
nodes' history (the simulator's fleet of S x N nodes, node ``k`` on shard ``k % S``, every
series labelled ``gpuwarden_shard`` as the scrape relabel would label it:
:mod:`gpuwarden.lab.shards`), and a global Prometheus 3.5 whose only data is ``remote_read``
of every shard (``read_recent: true``). The number of nodes per shard is fixed
(``BENCH_DISTRIBUTED_NODES``, default 256; quick: 64), so the fleet grows with S.

Per S, the groups ``alerts/generate_feature_rules.py`` renders for S shards (read from the
generator at run time) are evaluated as instant queries at the end of the history, each group
best of 3 (its rules one after another, as a rule engine evaluates a group):

- per shard, its node-local group (``node-shard-<i>``) on its own Prometheus: wall seconds and
  that process's CPU seconds (``/proc/<pid>/stat``), its RSS and the raw series it holds; the
  largest and the mean over shards, and their growth against S = 1 (the goal: flat);
- every other recording group (the job statistics, the job-domain groups, whatever else needs
  the global view) through the global Prometheus, in stages (a group reading another group's
  records after it: :func:`gpuwarden.lab.shards.stages`; before each later stage the earlier
  stage's records are backfilled into the global Prometheus's own TSDB by ``promtool tsdb
  create-blocks-from rules``, where its ruler would have recorded them): per stage, wall and
  the CPU of the global process plus the shards it read from.

Correctness, per S: every node-local rule answers the same series and values (within 1e-9) on
its shard as on the global layer, and (for S >= 2) every global group answers the same through
the global layer as on one Prometheus holding the whole fleet (the shards' blocks together,
its own earlier stages' records backfilled the same way).
A mismatch fails the benchmark. TSDBs are cached under ``.bench-cache/distributed/``; building
one writes the whole fleet's OpenMetrics text once (~2 GB per 256 nodes) and backfills each shard
with promtool (~2.6 GB of memory per 256 nodes of a shard).
``BENCH_DISTRIBUTED_SHARDS`` picks the shard counts (default 1,2,4; quick: 1,2).
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import shutil
import tempfile
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import yaml

from alerts.generate_feature_rules import Plan, render_all
from benchmarks.bench_analyzer_prometheus import CACHE as _PROM_CACHE
from benchmarks.bench_analyzer_prometheus import STEP, WINDOW
from benchmarks.fleet_openmetrics import backfill, write
from benchmarks.procstat import cpu_seconds
from gpuwarden.lab.shards import (
    Group,
    backfill_records,
    global_config,
    round_robin,
    split_openmetrics,
    stages,
)
from simulator.fleet import Fleet
from tests.realcomp import (
    generation_dir,
    generation_missing,
    http_get,
    require_binary,
    run_prometheus,
)

REPEATS = 3
TOLERANCE = 1e-9
EMPTY = "global: {scrape_interval: 15s}\nscrape_configs: []\n"
CACHE = _PROM_CACHE.parent.parent / "distributed" / _PROM_CACHE.name
Rules = list[tuple[str, str]]  # (record, expr)


# ------------------------------------------------------------------ the shards' TSDBs
def _cached(shards: int, nodes: int) -> tuple[Path, float] | None:
    if os.environ.get("BENCH_FRESH"):
        return None
    for d in sorted(CACHE.glob(f"{shards}x{nodes}-*"), reverse=True):
        t0 = float(d.name.rsplit("-", 1)[1])
        if not d.name.endswith(".partial") and time.time() - t0 < 7 * 86400:
            return d, t0
    return None


def _tsdbs(shards: int, nodes: int, t0: float, steps: int) -> Path:
    """``<dir>/shard-<i>``: the history of the fleet's nodes on shard ``i``, backfilled."""
    out = CACHE / f"{shards}x{nodes}-{int(t0)}"
    part = out.with_name(out.name + ".partial")
    shutil.rmtree(part, ignore_errors=True)
    part.mkdir(parents=True)
    promtool = require_binary("promtool")
    whole = part / "fleet.om"
    write(whole, shards * nodes, t0, steps, STEP)
    owner = round_robin(Fleet(shards * nodes, seed=0, start=t0 - STEP).nodes, shards)
    oms = [part / f"shard-{i}.om" for i in range(shards)]
    split_openmetrics(whole, oms, owner)
    whole.unlink()
    for i, om in enumerate(oms):
        data = part / f"shard-{i}"
        backfill(promtool, om, data)
        data.chmod(0o777)
    part.rename(out)
    return out


@contextlib.contextmanager
def _whole(shard_dirs: Sequence[Path]) -> Iterator[Path]:
    """One data directory holding every shard's blocks (hard links): one Prometheus over the
    whole fleet, for the correctness check (its compactor may merge them: they are copies)."""
    with tempfile.TemporaryDirectory(prefix="gpuwarden-whole-") as d:
        data = Path(d) / "data"
        data.mkdir()
        for s in shard_dirs:
            for b in s.iterdir():
                if (b / "meta.json").exists():
                    shutil.copytree(b, data / b.name, copy_function=os.link)
        data.chmod(0o777)
        Path(d).chmod(0o777)
        yield data


# ------------------------------------------------------------------ groups and queries
def groups(shards: int) -> tuple[dict[int, Rules], list[tuple[str, Rules]]]:
    """The generator's recording groups for ``shards`` shards: the node-local group of each
    shard, and every other group (the domain groups and any other global one)."""
    node: dict[int, Rules] = {}
    other: list[tuple[str, Rules]] = []
    for name, text in sorted(render_all(Plan(shards=shards)).items()):
        m = re.fullmatch(r"node-shard-(\d+)\.rules\.yml", name)
        for g in (yaml.safe_load(text) or {}).get("groups", []) or []:
            rules = [(r["record"], r["expr"]) for r in g.get("rules", []) if "record" in r]
            if not rules:
                continue
            if m:
                node.setdefault(int(m[1]), []).extend(rules)
            else:
                other.append((g["name"], rules))
    if sorted(node) != list(range(shards)):
        raise RuntimeError(f"the generator rendered node groups {sorted(node)} for {shards} shards")
    return node, other


Result = dict[tuple[tuple[str, str], ...], float]


def _instant(url: str, expr: str, at: float) -> Result:
    q = urllib.parse.urlencode({"query": expr, "time": f"{at:.3f}"})
    body = json.loads(http_get(f"{url}/api/v1/query?{q}", timeout=600))
    if body.get("status") != "success":
        raise RuntimeError(f"{expr[:80]}: {body}")
    return {
        tuple(sorted(r["metric"].items())): float(r["value"][1]) for r in body["data"]["result"]
    }


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def evaluate(
    url: str, rules: Rules, at: float, pids: Sequence[int]
) -> tuple[float, float, list[Result]]:
    """A group's rules one after another, best of ``REPEATS``: (wall s, CPU s of ``pids`` in
    that evaluation, each rule's answer)."""
    best: tuple[float, float, list[Result]] = (math.inf, 0.0, [])
    for _ in range(REPEATS):
        cpu0, t0 = sum(cpu_seconds(p) for p in pids), time.perf_counter()
        answers = [_instant(url, expr, at) for _, expr in rules]
        wall, cpu = time.perf_counter() - t0, sum(cpu_seconds(p) for p in pids) - cpu0
        if wall < best[0]:
            best = (wall, cpu, answers)
    return best


def differences(rules: Rules, a: list[Result], b: list[Result]) -> list[str]:
    """Where two evaluations of the same rules differ: series sets, or a value by more than
    ``TOLERANCE`` (relative above 1; NaN equals NaN)."""
    out = []
    for (record, _), x, y in zip(rules, a, b, strict=True):
        if x.keys() != y.keys():
            out.append(f"{record}: {len(x.keys() ^ y.keys())} series differ "
                       f"({len(x)} vs {len(y)})")  # fmt: skip
            continue
        for k, v in x.items():
            w = y[k]
            if not (math.isnan(v) and math.isnan(w)) and not (
                abs(v - w) <= TOLERANCE * max(1.0, abs(v), abs(w))
            ):
                out.append(f"{record}{dict(k)}: {v!r} vs {w!r}")
                break
    return out


def _series(url: str, at: float) -> float:
    got = _instant(url, 'count({__name__=~"gpuwarden_.+"})', at)
    return sum(got.values())


# ------------------------------------------------------------------ one shard count
RECORDED_STEPS = 4  # a stage's records backfilled for the last 4 steps before the next stage


class Restartable:
    """A Prometheus on ``data`` that can be restarted on it (to load blocks added to it)."""

    def __init__(self, config: str, data: Path) -> None:
        self.config, self.data = config, data
        self._stack = contextlib.ExitStack()
        self.prom = self._stack.enter_context(run_prometheus(config, data_dir=data))

    def restart(self) -> None:
        self._stack.close()
        self._stack = contextlib.ExitStack()
        self.prom = self._stack.enter_context(run_prometheus(self.config, data_dir=self.data))

    def close(self) -> None:
        self._stack.close()


def evaluate_stages(
    box: Restartable, order: list[list[Group]], at: float, pids: Callable[[], list[int]],
    timed: bool,
) -> list[dict[str, Any]]:  # fmt: skip
    """Every stage of global groups on ``box``; before stage k > 0, stage k - 1's records are
    backfilled into its TSDB (where the ruler would have recorded them) and it is restarted on
    it. Per stage: wall, CPU of ``pids()`` (when ``timed``), rules, answers."""
    out = []
    promtool = require_binary("promtool")
    for k, stage in enumerate(order):
        if k:
            backfill_records(promtool, box.prom.url, order[k - 1],
                             at - RECORDED_STEPS * STEP, at, STEP, box.data)  # fmt: skip
            box.restart()
            _instant(box.prom.url, "up", at)
        wall = cpu = 0.0
        rules: Rules = []
        answers: list[Result] = []
        for _, group_rules in stage:
            if timed:
                w, c, a = evaluate(box.prom.url, group_rules, at, pids())
            else:
                w, c, a = 0.0, 0.0, [_instant(box.prom.url, e, at) for _, e in group_rules]
            wall, cpu = wall + w, cpu + c
            rules += group_rules
            answers += a
        out.append({"groups": [n for n, _ in stage], "wall": wall, "cpu": cpu,
                    "rules": rules, "answers": answers})  # fmt: skip
    return out


def measure(shards: int, nodes: int, base: float, steps: int) -> dict[str, Any]:
    hit = _cached(shards, nodes)
    root, t0 = hit if hit else (_tsdbs(shards, nodes, base, steps), base)
    at = t0 + STEP * (steps - 1)
    dirs = [root / f"shard-{i}" for i in range(shards)]
    node_groups, global_groups = groups(shards)
    order = stages(global_groups)
    per_shard: list[dict[str, float]] = []
    wrong: list[str] = []
    # the global TSDB's directory outlives the Prometheus processes (they stop first)
    with tempfile.TemporaryDirectory(prefix="gw-global-") as gd, contextlib.ExitStack() as stack:
        shard_proms = [stack.enter_context(run_prometheus(EMPTY, data_dir=d)) for d in dirs]
        config = global_config([p.url for p in shard_proms])
        gdata = Path(gd) / "data"
        gdata.mkdir()
        Path(gd).chmod(0o777)
        gdata.chmod(0o777)
        box = stack.enter_context(contextlib.closing(Restartable(config, gdata)))
        for p in (*shard_proms, box.prom):
            _instant(p.url, "up", at)  # open the index and the remote-read clients
        for i, prom in enumerate(shard_proms):
            rules = node_groups[i]
            wall, cpu, answers = evaluate(prom.url, rules, at, [prom.proc.pid])
            g_wall, g_cpu, via_global = evaluate(
                box.prom.url, rules, at, [box.prom.proc.pid, prom.proc.pid]
            )
            wrong += [f"shard {i} vs global: {d}" for d in differences(rules, answers, via_global)]
            recorded = sum(len(a) for a in answers)
            per_shard.append({
                "wall": wall, "cpu": cpu, "rss": _rss_mib(prom.proc.pid),
                "series": _series(prom.url, at), "recorded": recorded, "rules": len(rules),
                "via_wall": g_wall, "via_cpu": g_cpu,
            })  # fmt: skip
        via = evaluate_stages(box, order, at,
                      lambda: [box.prom.proc.pid, *(p.proc.pid for p in shard_proms)], True)  # fmt: skip
        glob_rss = _rss_mib(box.prom.proc.pid)
    checked_whole = shards >= 2
    if checked_whole:
        with _whole(dirs) as data, contextlib.closing(Restartable(EMPTY, data)) as one:
            alone = evaluate_stages(one, order, at, list, False)
            for a, b in zip(via, alone, strict=True):
                wrong += [f"global vs one Prometheus: {d}"
                          for d in differences(a["rules"], a["answers"], b["answers"])]  # fmt: skip
    if wrong:
        raise AssertionError(f"{shards} shards: the distributed answers differ:\n" + "\n".join(wrong[:20]))  # fmt: skip
    return {
        "shards": shards, "per_shard": per_shard, "stages": via, "global_rss": glob_rss,
        "checked_whole": checked_whole,
    }  # fmt: skip


# ------------------------------------------------------------------ rows
def rows_of(m: dict[str, Any], nodes: int, first: dict[str, Any] | None) -> list[dict[str, Any]]:
    S, per = m["shards"], m["per_shard"]
    p = f"distributed_{S}x{nodes}"
    rows: list[dict[str, Any]] = []
    for key, unit, what in (("wall", "s", "wall"), ("cpu", "s", "shard Prometheus CPU")):
        vals = [x[key] for x in per]
        mx, mean = max(vals), sum(vals) / len(vals)
        rows += [
            {"name": f"{p}_node_group_{key}_max", "value": round(mx, 4), "unit": unit,
             "note": f"{what}, largest of {S} shard(s), {per[0]['rules']} node-local rules "
                     f"on the shard's own Prometheus, best of {REPEATS}"},
            {"name": f"{p}_node_group_{key}_mean", "value": round(mean, 4), "unit": unit,
             "note": f"{what}, mean over the {S} shard(s)"},
        ]  # fmt: skip
        if first is not None and first is not m:
            ref = [x[key] for x in first["per_shard"]]
            ref_max, ref_mean = max(ref), sum(ref) / len(ref)
            rows.append(
                {"name": f"{p}_node_group_{key}_growth", "value": round(mx / max(ref_max, 1e-12), 3),
                 "unit": "x", "note": f"largest shard vs {first['shards']} shard(s) of {nodes} "
                                      f"nodes (mean: x{mean / max(ref_mean, 1e-12):.3f}); "
                                      "flat = the per-shard cost does not grow with the fleet"}
            )  # fmt: skip
    via = [x["via_wall"] for x in per]
    rows.append(
        {"name": f"{p}_node_group_via_global_wall_mean", "value": round(sum(via) / len(via), 4),
         "unit": "s", "note": "the same group through the global layer (remote_read), mean over "
                              f"shards; CPU global + shard {sum(x['via_cpu'] for x in per) / len(per):.3f} s"}
    )  # fmt: skip
    rows += [
        {"name": f"{p}_shard_rss_max", "value": round(max(x["rss"] for x in per), 1),
         "unit": "MiB", "note": f"largest shard Prometheus RSS after its group; "
                                f"{max(x['series'] for x in per):.0f} raw series on the largest"},
        {"name": f"{p}_node_group_recorded", "value": sum(x["recorded"] for x in per),
         "unit": "series", "note": f"recorded by the {S} node group(s); equal on the global "
                                   "layer (series and values)"},
    ]  # fmt: skip
    total_wall = total_cpu = 0.0
    for k, st in enumerate(m["stages"], 1):
        n = len(st["rules"])
        series = sum(len(a) for a in st["answers"])
        empty = sum(not a for a in st["answers"])
        names = sorted({re.sub(r"-(shard-)?[^-]+$", "-*", g) for g in st["groups"]})
        total_wall, total_cpu = total_wall + st["wall"], total_cpu + st["cpu"]
        rows += [
            {"name": f"{p}_global_stage{k}_wall", "value": round(st["wall"], 4), "unit": "s",
             "note": f"{len(st['groups'])} group(s) {', '.join(names)}: {n} rules through the "
                     f"global Prometheus (remote_read of {S} shard(s)"
                     + ("" if k == 1 else ", the previous stage's records in its own TSDB")
                     + f"); {series} series, {empty} rule(s) answering nothing"
                     + ("; equal to one Prometheus holding the fleet" if m["checked_whole"] else "")},
            {"name": f"{p}_global_stage{k}_cpu", "value": round(st["cpu"], 4), "unit": "s",
             "note": f"CPU of the global Prometheus + the {S} shard(s) it read"},
        ]  # fmt: skip
    rows += [
        {"name": f"{p}_global_groups_cpu", "value": round(total_cpu, 4), "unit": "s",
         "note": f"all global stages, {total_wall:.3f} s wall"},
        {"name": f"{p}_global_rss", "value": round(m["global_rss"], 1), "unit": "MiB",
         "note": "the global Prometheus (no data of its own) after the global groups"},
    ]  # fmt: skip
    return rows


def run(quick: bool) -> list[dict[str, Any]]:
    nodes = int(os.environ.get("BENCH_DISTRIBUTED_NODES", "64" if quick else "256"))
    counts = [int(x) for x in os.environ.get(
        "BENCH_DISTRIBUTED_SHARDS", "1,2" if quick else "1,2,4").split(",")]  # fmt: skip
    steps = round(WINDOW / STEP) + 1 + 8
    base = (time.time() // 7200) * 7200 - 6 * 3600
    rows: list[dict[str, Any]] = []
    missing = generation_missing("current")
    if missing:  # a clear error, not pytest's skip (a BaseException) out of generation_dir
        raise RuntimeError(f"Prometheus 3.5 (the lab's current generation): {', '.join(missing)} "
                           "missing; tests/lab/servers.sh unpacks them")  # fmt: skip
    old_path = os.environ["PATH"]
    with tempfile.TemporaryDirectory() as d:
        # Prometheus 3.5 (the lab's current generation) and its promtool, first on PATH
        os.environ["PATH"] = f"{generation_dir('current', Path(d))}{os.pathsep}{old_path}"
        try:
            first: dict[str, Any] | None = None
            for S in counts:
                m = measure(S, nodes, base, steps)
                first = first or m
                rows += rows_of(m, nodes, first)
        finally:
            os.environ["PATH"] = old_path
    return rows
