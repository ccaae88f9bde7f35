"""The events path at a 100,000-GPU fleet's rate: Alertmanager -> remediation (issue 33, 3c).

A generator fires health events into a real Alertmanager (Prometheus 3.5's generation, 0.33,
the shipped route of deploy/alertmanager/alertmanager.yml: group by alertname, node and
fault_class, group_wait 10 s, group_interval 1 m) at ``BENCH_EVENT_RATE`` events/s (default
500, NVSentinel's estimate for 100k nodes) for ``BENCH_EVENT_SECONDS`` (default 60; `make soak`
runs 600), each event a new alert on one GPU of one of 12,500 nodes. Alertmanager delivers them
to the remediation service (its own process, dry-run backend, the 12,500-node fleet's
topology) as webhooks; the service journals each before answering and decides it.

Reported: events fired, alerts journaled, lost (fired, never journaled: must be 0), alerts
still undecided at the end, webhooks Alertmanager sent and failed, fire-to-journal latency
(p50/p99/max: Alertmanager's grouping waits are most of it), and the service's CPU seconds per
1,000 events; the baseline is the generator alone posting into Alertmanager (no webhook path).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import sqlite3
import statistics
import subprocess
import tempfile
import time
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from benchmarks.procstat import cpu_seconds
from gpuwarden.processes import wait_until
from tests.realcomp import free_port, generation_dir, http_get, run_alertmanager
from tests.remediation.helpers import TOKEN, start_service

ROOT = Path(__file__).resolve().parents[1]
NODES = 12_500
KINDS = (  # alert, the shipped policy's fault class, the action its rule recommends
    ("GpuXidFatal", "xid_fatal", "checkpoint_restart"),
    ("GpuEccUncorrectable", "memory", "drain"),
    ("GpuLost", "gpu_lost", "checkpoint_restart"),
    ("InfinibandPortErrors", "infiniband", "drain"),
    ("NvlinkErrors", "nvlink", "drain"),
)
BATCH_S = 0.1  # the generator posts every 100 ms (a rule engine posts in evaluation batches)


def _setup(tmp: Path) -> None:
    """The shipped observe-first policy (dry-run) and the fleet's leaves and racks."""
    policy = (ROOT / "remediation" / "default_policy.yaml").read_text()
    (tmp / "acks").mkdir()
    (tmp / "policy.yaml").write_text(policy.replace("/var/lib/gpuwarden/acks", str(tmp / "acks")))
    nodes = {f"gpu{i:05d}": {"leaf": f"leaf-{i // 32:03d}", "rack": f"r{i // 16:04d}"}
             for i in range(NODES)}  # fmt: skip
    (tmp / "topology.yaml").write_text(yaml.safe_dump({"nodes": nodes}))


def _am_config(port: int, token_file: Path) -> str:
    """The shipped Alertmanager configuration, its remediation webhook pointed at ``port``."""
    cfg = yaml.safe_load((ROOT / "deploy" / "alertmanager" / "alertmanager.yml").read_text())
    for r in cfg["receivers"]:
        for w in r.get("webhook_configs", []):
            if r["name"] == "gpuwarden-remediation":
                w["url"] = f"http://127.0.0.1:{port}/alertmanager"
                w["http_config"]["authorization"]["credentials_file"] = str(token_file)
            else:  # people's receivers: nothing listens (their failures are not ours)
                r["webhook_configs"] = []
    return yaml.safe_dump(cfg)


def _events(rate: int, seconds: int) -> list[list[dict[str, Any]]]:
    """Batches of distinct alerts, one batch per BATCH_S, spread over nodes, GPUs and kinds."""
    per_batch = max(1, round(rate * BATCH_S))
    ends = (datetime.now(UTC) + timedelta(hours=6)).isoformat()
    batches, i = [], 0
    for _ in range(round(seconds / BATCH_S)):
        batch = []
        for _ in range(per_batch):
            name, fc, act = KINDS[i % len(KINDS)]
            node, gpu = (i * 7919) % NODES, (i // NODES) % 8
            labels = {
                "alertname": name,
                "node": f"gpu{node:05d}",
                "gpu": str(gpu),
                "fault_class": fc,
                "action": act,
                "severity": "critical",
                "event": str(i),
            }
            batch.append({"labels": labels, "annotations": {"summary": f"event {i}"},
                          "endsAt": ends})  # fmt: skip
            i += 1
        batches.append(batch)
    return batches


def _fire(am_url: str, batches: list[list[dict[str, Any]]]) -> tuple[dict[str, float], float]:
    """Post each batch on time (a small pool, so a slow answer does not delay the next
    batch); returns event id -> time fired, and the wall seconds the firing took."""
    fired: dict[str, float] = {}

    def post(batch: list[dict[str, Any]]) -> None:
        req = urllib.request.Request(
            f"{am_url}/api/v2/alerts",
            data=json.dumps(batch).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(req, timeout=30) as r:
            assert r.status == 200

    t0 = time.monotonic()
    with ThreadPoolExecutor(4) as pool:
        futures = []
        for k, batch in enumerate(batches):
            delay = t0 + k * BATCH_S - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            now = time.time()
            for a in batch:
                fired[a["labels"]["event"]] = now
            futures.append(pool.submit(post, batch))
        for f in futures:
            f.result()
    return fired, time.monotonic() - t0


def _journaled(db: Path) -> dict[str, tuple[float, int]]:
    """event id -> (received_at, processed) for every alert the service journaled."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=30)
    try:
        rows = con.execute("SELECT labels, received_at, processed FROM alerts").fetchall()
    finally:
        con.close()
    return {json.loads(lab).get("event", ""): (at, done) for lab, at, done in rows}


def _am_counter(am_url: str, name: str, integration: str = "webhook") -> float:
    """Summed over reasons; only the remediation receiver has webhook configs here."""
    total = 0.0
    for line in http_get(f"{am_url}/metrics", 10).decode().splitlines():
        if line.startswith(name + "{") and f'integration="{integration}"' in line:
            total += float(line.rsplit(" ", 1)[1])
    return total


def _pct(xs: list[float], q: float) -> float:
    return sorted(xs)[int(q * (len(xs) - 1))] if xs else float("nan")


def _baseline(gen: Path, batches: list[list[dict[str, Any]]]) -> float:
    """The generator into an Alertmanager with no receiver reachable: what firing costs."""
    cfg = {"route": {"receiver": "none"}, "receivers": [{"name": "none"}]}
    os.environ["PATH"] = f"{gen}:{os.environ['PATH']}"
    with run_alertmanager(yaml.safe_dump(cfg)) as am:
        return _fire(am.url, batches)[1]


def measure(rate: int, seconds: int, drain_s: float = 150.0) -> dict[str, Any]:
    batches = _events(rate, seconds)
    n = sum(len(b) for b in batches)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        gen = generation_dir("current", tmp / "bin")
        # the soak skips it (BENCH_EVENT_BASELINE=0): ten more minutes for one ratio
        base = os.environ.get("BENCH_EVENT_BASELINE", "1") != "0"
        base_wall = _baseline(gen, batches) if base else float("nan")
        _setup(tmp)
        token = tmp / "token"
        token.write_text(TOKEN)
        port = free_port()
        svc = start_service(tmp, port)
        try:
            cpu0 = cpu_seconds(svc.pid)
            with run_alertmanager(_am_config(port, token)) as am:
                fired, wall = _fire(am.url, batches)

                def arrived() -> bool:
                    got = _journaled(tmp / "state.db")
                    return len(fired.keys() & got.keys()) == n and all(p for _, p in got.values())

                with contextlib.suppress(TimeoutError):  # reported as lost / undecided below
                    wait_until(arrived, drain_s, 1.0, "every event journaled and decided")
                sent = _am_counter(am.url, "alertmanager_notifications_total")
                failed = _am_counter(am.url, "alertmanager_notifications_failed_total")
            cpu = cpu_seconds(svc.pid) - cpu0
            rss_kib = int(
                next(
                    ln.split()[1]
                    for ln in Path(f"/proc/{svc.pid}/status").read_text().splitlines()
                    if ln.startswith("VmHWM:")
                )
            )
        finally:
            svc.terminate()
            try:
                svc.wait(60)  # a worker deciding a backlog finishes its batch first
            except subprocess.TimeoutExpired:
                svc.kill()
                svc.wait(10)
        got = _journaled(tmp / "state.db")
    lat = [got[e][0] - t for e, t in fired.items() if e in got]
    return {
        "fired": n,
        "rate": n / wall,
        "journaled": len(fired.keys() & got.keys()),
        "lost": n - len(fired.keys() & got.keys()),
        "undecided": sum(1 for e in fired if e in got and not got[e][1]),
        "webhooks": sent,
        "webhooks_failed": failed,
        "p50": statistics.median(lat) if lat else float("nan"),
        "p99": _pct(lat, 0.99),
        "max": max(lat, default=float("nan")),
        "cpu_per_1000": 1000 * cpu / n,
        "rss_mib": rss_kib / 1024,
        "wall": wall,
        "base_wall": base_wall,
        "self_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
    }


def run(quick: bool) -> list[dict[str, Any]]:
    rate = int(os.environ.get("BENCH_EVENT_RATE", "500"))
    seconds = int(os.environ.get("BENCH_EVENT_SECONDS", "20" if quick else "60"))
    m = measure(rate, seconds, drain_s=max(150.0, seconds / 2))
    note = f"{m['fired']} events at {rate}/s for {seconds} s over {NODES:,} nodes"
    return [
        {"name": "events_fired_per_s", "value": round(m["rate"], 1), "unit": "events/s",
         "note": note},
        {"name": "events_lost", "value": m["lost"], "unit": "events",
         "note": f"fired into Alertmanager 0.33, never journaled by remediation (of {m['fired']})"},
        {"name": "events_undecided_at_end", "value": m["undecided"], "unit": "events",
         "note": "journaled but no decision when the drain wait ended"},
        {"name": "webhooks_sent", "value": m["webhooks"], "unit": "webhooks",
         "note": f"{m['webhooks_failed']:.0f} failed (Alertmanager's own counters)"},
        {"name": "fire_to_journal_p50", "value": round(m["p50"], 2), "unit": "s",
         "note": "Alertmanager's group_wait 10 s / group_interval 1 m are most of it"},
        {"name": "fire_to_journal_p99", "value": round(m["p99"], 2), "unit": "s", "note": ""},
        {"name": "remediation_cpu_per_1000_events", "value": round(m["cpu_per_1000"], 3),
         "unit": "s", "note": f"service peak RSS {m['rss_mib']:.0f} MiB"},
        {"name": "firing_wall_vs_baseline", "value": round(m["wall"] / m["base_wall"], 3),
         "unit": "x time", "note": "same events into an Alertmanager with no webhook path"
         if m["base_wall"] == m["base_wall"] else "not measured (BENCH_EVENT_BASELINE=0)"},
    ]  # fmt: skip
