"""Record the label sets the alert scenarios may use, from a real scrape (issue 17).

    python -m tests.alerts.record_scrape_labels      # rewrites fixtures/alerts/scrape-labels.json

Runs the real services: the fleet simulator (each node's /metrics rendered by the exporter's
own collectors, with faults injected through ``POST /inject``), the analyzer (querying
Prometheus) and a real Prometheus started with the *shipped* ``deploy/prometheus/prometheus.yml``,
unchanged except for the listen addresses of this run. After the faults have produced
findings it asks Prometheus for every series and writes, per metric name, the label names that
every series has, those that some series have, and one example. The scenario suite
(``alerts/tests/scenarios_*_test.yml``) is checked against this file by
``tests/alerts/test_scenario_labels.py``: input series use exactly these labels.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

from exporter import catalog
from gpuwarden.processes import Supervisor, free_port_block

ROOT = Path(__file__).resolve().parents[2]
OUTPUT = ROOT / "fixtures" / "alerts" / "scrape-labels.json"
SHIPPED = ROOT / "deploy" / "prometheus" / "prometheus.yml"
FAULTS = [
    ("gpu-node-001", "gpu_fallen_off_bus", "gpu3", {}),
    ("gpu-node-002", "xid", "gpu1", {"xid": 48}),
    ("gpu-node-002", "app_xid", "gpu2", {"xid": 13}),
    ("gpu-node-003", "ib_port_down", "mlx5_0/1", {}),
    ("gpu-node-003", "nvlink_down", "gpu2/11", {}),
    ("gpu-node-004", "row_remap_pending", "gpu7", {}),
    ("gpu-node-004", "thermal_throttle", "gpu4", {}),
]
WANT = (catalog.FINDING.name, catalog.GPU_XID_ERRORS.name, "up")


def get(url: str) -> Any:
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def post(url: str, body: dict[str, Any]) -> None:
    req = urllib.request.Request(
        url, json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=10):
        pass


def shipped_config(work: Path, analyzer: str) -> Path:
    """The shipped prometheus.yml with only this run's addresses put in."""
    text = SHIPPED.read_text().replace("127.0.0.1:9837", analyzer)
    (work / "gpuwarden-rules").mkdir()
    (work / "gpuwarden-targets").mkdir()
    path = work / "prometheus.yml"
    path.write_text(text)
    return path


def record(work: Path, timeout: float = 240.0) -> dict[str, Any]:
    base = free_port_block(3)
    sim, analyzer, prom = (f"127.0.0.1:{base + i}" for i in range(3))
    sup = Supervisor(work / "logs")
    try:
        config = shipped_config(work, analyzer)
        py = sys.executable
        sup.start(
            "simulator",
            [py, "-m", "gpuwarden", "simulate", "--nodes", "4", "--seed", "3", "--listen", sim,
             "--file-sd", str(work / "gpuwarden-targets" / "simulated.yml"),
             "--log-level", "warning"],
            ready_url=f"http://{sim}/healthz",
        )  # fmt: skip
        sup.start(
            "prometheus",
            ["prometheus", f"--config.file={config}", f"--storage.tsdb.path={work / 'data'}",
             f"--web.listen-address={prom}", "--log.level=warn"],
            ready_url=f"http://{prom}/-/ready",
        )  # fmt: skip
        sup.start(
            "analyzer",
            [py, "-m", "analyzer", "--listen", analyzer, "--interval", "5",
             "--prometheus", f"http://{prom}"],
            ready_url=f"http://{analyzer}/metrics",
            timeout=90,
        )  # fmt: skip
        for node, kind, target, params in FAULTS:
            post(f"http://{sim}/inject",
                 {"node": node, "kind": kind, "target": target, "parameters": params})  # fmt: skip
        deadline = time.monotonic() + timeout
        while True:
            series = get(f"http://{prom}/api/v1/series?" + urllib.parse.urlencode(
                {"match[]": '{__name__=~"gpuwarden_.+|up"}'}))["data"]  # fmt: skip
            names = {s["__name__"] for s in series}
            if all(w in names for w in WANT) or time.monotonic() > deadline:
                break
            time.sleep(5)
        missing = [w for w in WANT if w not in names]
        if missing:
            raise RuntimeError(f"no {missing} after {timeout:.0f}s; logs in {work / 'logs'}")
        return summarize(series)
    finally:
        sup.stop_all()


def summarize(series: list[dict[str, str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for s in sorted(series, key=lambda s: json.dumps(s, sort_keys=True)):
        name = s["__name__"]
        labels = {k: v for k, v in s.items() if k != "__name__"}
        entry = out.setdefault(name, {"always": sorted(labels), "sometimes": [], "example": labels})
        entry["always"] = sorted(set(entry["always"]) & set(labels))
        entry["sometimes"] = sorted(set(entry["sometimes"]) | set(labels))
    return dict(sorted(out.items()))


def main() -> int:
    work = Path(tempfile.mkdtemp(prefix="gpuwarden-labels-"))
    try:
        data = {
            "origin": "python -m tests.alerts.record_scrape_labels: the fleet simulator (the "
            "exporter's collectors), the analyzer and a real Prometheus with the shipped "
            "deploy/prometheus/prometheus.yml; faults injected: "
            + ", ".join(f"{k} on {n} {t}" for n, k, t, _ in FAULTS),
            "metrics": record(work),
        }
    except BaseException:
        print(f"work directory kept: {work}", file=sys.stderr)
        raise
    OUTPUT.parent.mkdir(parents=True, exist_ok=True)
    OUTPUT.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    print(f"wrote {OUTPUT} ({len(data['metrics'])} metrics)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
