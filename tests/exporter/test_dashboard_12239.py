"""NVIDIA's Grafana dashboard 12239 (vendored from dcgm-exporter) shows data in every panel when a
real Prometheus scrapes gpuwarden in --compat dcgm mode, Tensor Core panel included."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from exporter import catalog
from exporter.collection import CollectionLoop
from exporter.collectors.gpu import GpuCollector
from exporter.server import MetricsServer
from simulator.nvml_fake import hgx_node
from tests.realcomp import Prometheus, free_port, run_prometheus

pytestmark = pytest.mark.real
DASHBOARD = (
    Path(__file__).resolve().parents[2] / "fixtures" / "dcgm" / "dcgm-exporter-dashboard.json"
)


def _panels() -> list[tuple[str, str]]:
    d: dict[str, Any] = json.loads(DASHBOARD.read_text())
    assert d["gnetId"] == 12239
    return [(p["title"], t["expr"]) for p in d["panels"] for t in p.get("targets", [])]


@pytest.fixture(scope="module")
def prometheus() -> Iterator[Prometheus]:
    nvml = hgx_node(gpus=4)
    for g in nvml.gpus:
        g.util_gpu_pct, g.tensor_active_pct, g.memory_used = 90, 55.0, 40 * 1024**3
    loop = CollectionLoop(
        [GpuCollector(nvml, "dcgm-node")], "dcgm-node", source="t", interval=1, dcgm=True
    )
    loop.run_once()
    loop.run_once()  # profiling needs two GPM samples
    port = free_port()
    server = MetricsServer(loop, 3600, None, ("127.0.0.1", port))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    config = (
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: dcgm\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    try:
        with run_prometheus(config) as prom:
            prom.wait_for(catalog.GPU_TEMPERATURE.dcgm[0].name, timeout=30)
            yield prom
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize(("title", "expr"), _panels(), ids=[t for t, _ in _panels()])
def test_every_panel_of_dashboard_12239_has_data(
    prometheus: Prometheus, title: str, expr: str
) -> None:
    query = expr.replace("$instance", ".*").replace("$gpu", ".*")
    result = prometheus.query(query)
    assert result, f"panel {title!r} is empty: {query}"
    assert all(float(r["value"][1]) >= 0 for r in result)


def test_the_dashboards_variables_find_the_instance_and_every_gpu(prometheus: Prometheus) -> None:
    temp = catalog.GPU_TEMPERATURE.dcgm[0].name
    gpus = {r["metric"]["gpu"] for r in prometheus.query(temp)}
    assert gpus == {"0", "1", "2", "3"}
    tensor = prometheus.query(catalog.GPU_TENSOR_ACTIVE.dcgm[0].name)
    assert {float(r["value"][1]) for r in tensor} == {0.55}
