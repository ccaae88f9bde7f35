"""The feature path on a real Prometheus (issue 33; 3.5 by default): the generated relabel and
node-shard groups (with their ``query_offset`` on 3.5) loaded as a site would, stand-in exporters whose ECC
counter starts moving; the Prometheus source finds every node covered and reads the same ECC
rows through the recorded moved checks as a raw-only read does."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import numpy as np
import pytest
import yaml

from analyzer.sources.features import FEATURES
from analyzer.sources.prometheus import PrometheusSource
from exporter import catalog as c
from tests.alerts.ruleset import generator
from tests.realcomp import default_generation, run_prometheus, serve_expositions, wait_until

pytestmark = pytest.mark.real

NODES = ("gpu-node-00", "gpu-node-01", "gpu-node-02", "gpu-node-03")


def _body(node: int, ecc: float) -> bytes:
    lines = []
    for g in range(2):
        lab = f'node="{NODES[node]}",gpu="{g}",uuid="GPU-{node}-{g}"'
        lines += [
            f"{c.GPU_UP.name}{{{lab}}} 1",
            f"{c.GPU_UTILIZATION.name}{{{lab}}} 0.5",
            f'{c.GPU_ECC_ERRORS.name}{{{lab},error_type="corrected",counter_type="volatile"}}'
            f" {ecc if g == 1 else 0}",
        ]
    return ("\n".join(lines) + "\n").encode()


def test_the_source_reads_the_recorded_moved_checks_of_a_real_prometheus() -> None:
    gen = generator("generate_feature_rules")
    # Prometheus 2.42 (the stable generation) has no query_offset: the variant without it
    engine = "prometheus" if default_generation() == "current" else "vmalert"
    plan = gen.Plan(shards=2, engine=engine, interval=1.0, scrape_interval=1.0, offset=1.0)
    files = gen.render_all(plan)
    rules = {f"rules/{n}": t for n, t in files.items() if n.startswith("node-shard-")}
    relabel = yaml.safe_load(files["scrape-relabel.yml"])["relabel_configs"]
    bodies = {f"/{n}": _body(i, 0.0) for i, n in enumerate(NODES)}
    with serve_expositions(bodies) as port:
        config = {
            "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
            "rule_files": sorted(rules),
            "scrape_configs": [{
                "job_name": "gpuwarden-exporter", "honor_labels": True,
                "static_configs": [{"targets": [f"127.0.0.1:{port}"],
                                    "labels": {"node": n, "__metrics_path__": f"/{n}"}}
                                   for n in NODES],
                "relabel_configs": relabel,
            }],
        }  # fmt: skip
        with run_prometheus(yaml.safe_dump(config), rules) as prom:
            wait_until(lambda: len(prom.query(c.GPU_UP.name)) == 8, 30, 0.2, "scrapes")
            time.sleep(3)
            bodies["/gpu-node-02"] = _body(2, 5.0)  # node 02's GPU 1 starts counting errors
            changes = "gpuwarden_feature:gpu_ecc_errors:changes10m"
            wait_until(lambda: prom.query(changes), 30, 0.2, "the recorded moved check")
            time.sleep(4)  # the read's end (now - settle) past the scrape that moved
            now = time.time()
            featured = PrometheusSource(prom.url, window=600.0, step=1.0, settle=2.0)
            raw = PrometheusSource(prom.url, window=600.0, step=1.0, settle=2.0, features=())
            assert featured.moved_features  # the window matches the features' 600 s
            asked: list[str] = []
            inner = featured.http

            class Spy:
                async def post(self, path: str, form: Any) -> bytes:
                    asked.append(form["query"])
                    return await inner.post(path, form)

                async def close(self) -> None:
                    await inner.close()  # type: ignore[attr-defined]

            featured.http = Spy()

            async def reads() -> tuple[Any, Any]:
                await featured.read(now - 2)  # a cold read scans raw; the next reads features
                try:
                    return await featured.read(now), await raw.read(now)
                finally:
                    await featured.close()
                    await raw.close()

            w_feat, w_raw = asyncio.run(reads())
            assert featured.covered == set(NODES)
            # the warm read asked the recorded check, and scanned no raw ECC counter
            warm = asked[asked.index(next(q for q in asked if "count_by_node" in q), 1) :]
            assert any(changes in q for q in warm)
            assert not any(f"changes({c.GPU_ECC_ERRORS.name}" in q for q in warm)
            calls = " ".join(featured.stats.seconds)
            assert "features" in calls
    ecc = c.GPU_ECC_ERRORS.name
    assert w_feat.nodes == w_raw.nodes == NODES
    a, b = w_feat.metrics[ecc], w_raw.metrics[ecc]
    assert np.array_equal(a, b, equal_nan=True)
    assert np.nanmax(a) == 5.0  # the moving counter was read, through the feature
    assert any(f.kind == "moved" for f in FEATURES)
