"""A real Prometheus scrapes a running exporter; what it stores equals what the sources said."""

from __future__ import annotations

import threading
from collections.abc import Iterator

import pytest

from exporter import catalog
from exporter.server import MetricsServer
from tests.exporter.test_golden import Node
from tests.realcomp import Prometheus, free_port, run_prometheus

pytestmark = pytest.mark.real


@pytest.fixture(scope="module")
def served_node() -> Iterator[tuple[Node, int]]:
    node = Node()
    node.loop.run_once()
    port = free_port()
    server = MetricsServer(node.loop, 3600, None, ("127.0.0.1", port))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield node, port
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


@pytest.fixture(scope="module")
def prometheus(served_node: tuple[Node, int]) -> Iterator[Prometheus]:
    _, port = served_node
    config = (
        "global: {scrape_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: gpuwarden-exporter\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    with run_prometheus(config) as prom:
        prom.wait_for(catalog.GPU_UP.name, timeout=30)
        yield prom


def _exposed(body: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_every_exported_series_is_stored_by_prometheus_with_the_source_value(
    served_node: tuple[Node, int], prometheus: Prometheus
) -> None:
    node, _ = served_node
    expected = _exposed(node.loop.snapshot.body.decode())
    got = {}
    for r in prometheus.query('{node="golden-node"}'):
        labels = {k: v for k, v in r["metric"].items() if k not in ("instance", "job")}
        name = labels.pop("__name__")
        got[(name, frozenset(labels.items()))] = float(r["value"][1])
    assert len(expected) > 1000
    missing = set(expected) - set(got)
    assert not missing, f"{len(missing)} series not in Prometheus, e.g. {sorted(missing)[:3]}"
    wrong = {k: (v, got[k]) for k, v in expected.items() if got[k] != pytest.approx(v)}
    assert not wrong, f"values differ: {list(wrong.items())[:3]}"


def test_source_values_survive_the_unit_conversions_on_the_way(
    served_node: tuple[Node, int], prometheus: Prometheus
) -> None:
    node, _ = served_node
    gpu = node.gpus[0]

    def one(metric: catalog.MetricDef, **labels: str) -> float:
        sel = ",".join(f'{k}="{v}"' for k, v in {"node": "golden-node", **labels}.items())
        return float(prometheus.query(f"{metric.name}{{{sel}}}")[0]["value"][1])

    assert one(catalog.GPU_POWER, gpu="0") == gpu.power_mw / 1000
    assert one(catalog.GPU_SM_CLOCK, gpu="0") == gpu.sm_clock_mhz * 1e6
    assert one(catalog.GPU_UTILIZATION, gpu="0") == gpu.util_gpu_pct / 100
    assert one(catalog.GPU_MEMORY_TOTAL, gpu="0") == gpu.memory_total
    raw = int(node.sysfs.read_text("class/infiniband/mlx5_0/ports/1/counters/port_xmit_data"))
    assert one(catalog.IB_TRANSMIT, device="mlx5_0", port="1") == raw * 4
