"""A real Prometheus scrapes 32 simulated nodes through --file-sd; an injected XID 79 shows."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from exporter import catalog as c
from tests.realcomp import free_port, http_get, run_prometheus, wait_until, world_readable_tmpdir

pytestmark = pytest.mark.real
NODES = 32
SCRAPE_S = 3


@pytest.fixture
def simulator() -> Iterator[tuple[str, Path]]:
    d = world_readable_tmpdir("gpuwarden-sim-")
    sd = d / "targets.json"
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "gpuwarden", "simulate", "--nodes", str(NODES), "--seed", "1",
         "--listen", f"127.0.0.1:{port}", "--file-sd", str(sd), "--log-level", "warning"],
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: http_get(f"{url}/healthz", 1.0) and sd.exists(), 30, 0.1, "simulator")
        yield url, sd
    finally:
        proc.terminate()
        proc.wait(10)


def test_prometheus_scrapes_every_node_and_sees_an_injected_xid_79_within_two_scrapes(
    simulator: tuple[str, Path],
) -> None:
    url, sd = simulator
    config = (
        f"global: {{scrape_interval: {SCRAPE_S}s, scrape_timeout: {SCRAPE_S}s}}\n"
        "scrape_configs:\n"
        "  - job_name: fleet\n"
        "    honor_labels: true\n"
        f"    file_sd_configs: [{{files: ['{sd}']}}]\n"
    )
    up, xid = c.GPU_UP.name, c.GPU_XID_ERRORS.name
    with run_prometheus(config) as prom:
        per_node = f"count by (node) ({up})"
        rows = wait_until(lambda: len(prom.query(per_node)) == NODES and prom.query(per_node),
                          60, 0.5, "every node's series")  # fmt: skip
        assert {r["metric"]["node"] for r in rows} == {f"gpu-node-{i:03d}" for i in range(1, 33)}
        assert all(r["value"][1] == "8" for r in rows)
        ib = prom.query(f"count({c.IB_PORT_STATE.name} == 4)")
        assert ib[0]["value"][1] == str(NODES * 8)

        req = {"node": "gpu-node-007", "kind": "xid", "target": "gpu3", "parameters": {"xid": 79}}
        post = urllib.request.Request(f"{url}/inject", json.dumps(req).encode(), method="POST",
                                      headers={"Content-Type": "application/json"})  # fmt: skip
        injected = time.monotonic()
        with urllib.request.urlopen(post, timeout=10) as r:
            assert r.status == 201
        seen = f'{xid}{{node="gpu-node-007",gpu="3",xid="79"}} == 1'
        wait_until(lambda: prom.query(seen), 2 * SCRAPE_S, 0.2, "xid 79 in prometheus")
        assert time.monotonic() - injected <= 2 * SCRAPE_S
        lost = prom.query(f'{up}{{node="gpu-node-007",gpu="3"}}')
        assert lost[0]["value"][1] == "0" and lost[0]["metric"]["reason"] == "gpu_lost"
        truth = json.loads(http_get(f"{url}/truth"))
        assert [f["node"] for f in truth["faults"]] == ["gpu-node-007"]
