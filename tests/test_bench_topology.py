"""The fleet-topology TSDB of the scale benchmark (issue 33, 3b): what a replica reads of the
whole fleet there is the topology the benchmark says, on a real Prometheus."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from analyzer.replicas.ownership import units
from analyzer.sources.prometheus import PrometheusSource
from benchmarks import topology_tsdb as tt
from tests.realcomp import run_prometheus

pytestmark = pytest.mark.real


def test_the_topology_tsdb_holds_every_node_its_jobs_and_nvlink_domains(tmp_path: Path) -> None:
    nodes, step, steps = 80, 15.0, 49
    t0 = 1_796_500_000.0
    data = tt.tsdb(nodes, t0, steps, step, cache=tmp_path)
    assert tt.tsdb(nodes, t0, steps, step, cache=tmp_path) == data  # cached: not rebuilt
    with run_prometheus("global: {scrape_interval: 15s}\nscrape_configs: []\n",
                        data_dir=data) as p:  # fmt: skip
        src = PrometheusSource(p.url, window=600.0, step=step, timeout=60.0, discover=True)
        src.scope = lambda topo: set(topo.nodes[:5])
        try:
            w = asyncio.run(src.read(t0 + step * (steps - 1)))
            topo = src.topology
        finally:
            asyncio.run(src.close())
    assert topo is not None and len(topo.nodes) == nodes
    # 36-node jobs, the last node of each idle; 18-node NVLink domains, two a job
    assert sorted(len(m) for m in topo.jobs.values()) == [8, 35, 35]
    assert len(set(topo.nvlink_domain_of.values())) == 5
    assert sorted(len(u) for u in units(topo).values()) == [8, 36, 36]
    assert set(w.nodes) == set(topo.nodes[:5])  # the replica read only its own nodes
