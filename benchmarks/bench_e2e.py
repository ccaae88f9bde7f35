"""Fault-to-drain latency of the whole loop, by stage, over 20 injections (test intervals).

Simulator -> Prometheus (1 s scrape and rule interval, project rules) -> Alertmanager
(project-style route, group_wait 0) -> remediation -> real Slurm. For each injected XID 79:

  scrape    inject -> first sample of the XID counter in Prometheus
  rules     that sample -> alert active (Prometheus activeAt)
  delivery  alert active -> webhook received (remediation journal)
  decision  received -> decision recorded (journal)
  scheduler decision -> drain visible in Slurm (sinfo, polled every 0.2 s)

All timestamps are this machine's wall clock, so the stages add up to the total.
"""

from __future__ import annotations

import sqlite3
import statistics
import time
import urllib.parse
from pathlib import Path
from typing import Any

from exporter import catalog
from gpuwarden.processes import free_port_block
from gpuwarden.stack import Stack, StackOptions
from tests.realcomp import wait_until, world_readable_tmpdir
from tests.slurmcluster import SlurmCluster, slurm_cluster

STAGES = ("scrape", "rules", "delivery", "decision", "scheduler")


def _first_sample(stack: Stack, node: str) -> float | None:
    sel = f'{catalog.GPU_XID_ERRORS.name}{{node="{node}",xid="79"}}[15m]'
    body = stack.get_json(
        f"{stack.urls.prometheus}/api/v1/query?" + urllib.parse.urlencode({"query": sel})
    )
    ts = [float(v[0]) for r in body["data"]["result"] for v in r["values"]]
    return min(ts) if ts else None


def _active_at(stack: Stack, node: str) -> float | None:
    import datetime as dt

    alerts = stack.get_json(f"{stack.urls.prometheus}/api/v1/alerts")["data"]["alerts"]
    times = [
        dt.datetime.fromisoformat(a["activeAt"].replace("Z", "+00:00")).timestamp()
        for a in alerts
        if a["labels"].get("node") == node and a["labels"].get("xid") == "79"
    ]
    return min(times) if times else None


def _journal(db: Path, node: str) -> tuple[float | None, float | None]:
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        rec = con.execute(
            "SELECT min(received_at) FROM alerts WHERE node=? AND status='firing'", (node,)
        ).fetchone()[0]
        dec = con.execute(
            "SELECT min(at) FROM decisions WHERE node=? AND verdict='allow'", (node,)
        ).fetchone()[0]
    finally:
        con.close()
    return rec, dec


def _drained(sc: SlurmCluster) -> set[str]:
    out = sc.run("sinfo", "-h", "-N", "-t", "drain,draining,drained", "-o", "%N", check=False)
    return set(out.split())


def _measure(stack: Stack, sc: SlurmCluster, targets: list[str], gap: float) -> dict[str, Any]:
    injected: dict[str, float] = {}
    drained_at: dict[str, float] = {}
    for node in targets:
        injected[node] = time.time()
        stack.inject(node, "xid", "gpu0", xid=79)
        end = time.monotonic() + gap
        while time.monotonic() < end:
            for n in _drained(sc) - set(drained_at):
                drained_at[n] = time.time()
            time.sleep(0.2)
    deadline = time.monotonic() + 60
    while set(targets) - set(drained_at) and time.monotonic() < deadline:
        for n in _drained(sc) - set(drained_at):
            drained_at[n] = time.time()
        time.sleep(0.2)
    return {"injected": injected, "drained": drained_at}


def _stages(stack: Stack, node: str, t_inject: float, t_drain: float) -> dict[str, float]:
    scraped = _first_sample(stack, node)
    active = _active_at(stack, node)
    received, decided = _journal(stack.opts.workdir / "remediation.db", node)
    points = [t_inject, scraped, active, received, decided, t_drain]
    if any(p is None for p in points):
        return {}
    vals = [float(p) for p in points if p is not None]
    return {s: max(0.0, b - a) for s, a, b in zip(STAGES, vals, vals[1:], strict=False)}


def run(quick: bool = False) -> list[dict[str, Any]]:
    n = 6 if quick else 20
    with slurm_cluster(live=1, ghosts=n + 1) as sc:
        stack = Stack(
            StackOptions(
                workdir=world_readable_tmpdir("gpuwarden-bench-e2e-"),
                nodes=n + 2,
                seed=9,
                base_port=free_port_block(5),
                scrape_interval_s=1,
                analyzer_interval_s=2,
                slurm_env=sc.env,
                policy={
                    "budgets": {
                        "fleet": {"max_fraction": 1.0, "max_nodes": 1000},
                        "per_job_max_nodes": 100,
                    },
                    "ladders": {"xid_fatal": ["drain", "reboot", "inspect"]},
                    "storm": {"max_nodes": 1000, "window_s": 60, "quiet_s": 60},
                    "rate_limit": {"max_actions": 1000, "window_s": 60},
                },
            )
        )
        try:
            stack.start()
            wait_until(lambda: _first_up(stack), 60, 0.5, "first scrape in Prometheus")
            targets = [f"gpu-node-{i:03d}" for i in range(2, n + 2)]
            got = _measure(stack, sc, targets, gap=2.0)
            rows = [
                _stages(stack, t, got["injected"][t], got["drained"][t])
                for t in targets
                if t in got["drained"]
            ]
        finally:
            stack.stop()
    rows = [r for r in rows if r]
    out: list[dict[str, Any]] = [
        {
            "name": "injections measured",
            "value": len(rows),
            "unit": "",
            "note": f"of {n}; XID 79, 1 s intervals",
        }
    ]
    totals = [sum(r.values()) for r in rows]
    for stage in STAGES:
        xs = [r[stage] for r in rows]
        out.append(
            {
                "name": f"{stage} p50",
                "value": statistics.median(xs),
                "unit": "s",
                "note": f"p95 {_p95(xs):.2f} s, max {max(xs):.2f} s",
            }
        )
    out.append(
        {
            "name": "fault-to-drain p50",
            "value": statistics.median(totals),
            "unit": "s",
            "note": f"p95 {_p95(totals):.2f} s, max {max(totals):.2f} s",
        }
    )
    slowest = max(STAGES, key=lambda s: statistics.median(r[s] for r in rows))
    out.append({"name": "slowest stage (p50)", "value": slowest, "unit": "", "note": ""})
    return out


def _first_up(stack: Stack) -> bool:
    body = stack.get_json(
        f"{stack.urls.prometheus}/api/v1/query?query=" + urllib.parse.quote(catalog.GPU_UP.name)
    )
    return bool(body["data"]["result"])


def _p95(xs: list[float]) -> float:
    return sorted(xs)[min(len(xs) - 1, int(0.95 * len(xs)))]
