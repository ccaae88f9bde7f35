"""Fabric Manager and IMEX units judged per NVLink domain: a service down on most of a domain is
one finding naming the domain (notify, never a drain per node); one node's service down in an
otherwise fine domain is that node's finding; a node without the units says nothing."""

from __future__ import annotations

import numpy as np

from analyzer.detectors.fabric_services import FabricServicesDetector
from analyzer.findings import subject_labels
from analyzer.window import Window
from exporter import catalog

SERVICES = catalog.FABRIC_SERVICES
T = 6
DOM = "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"


def window(down: dict[tuple[int, str], int], nodes: int = 4, runs: tuple[str, ...] = SERVICES,
           domains: dict[int, str] | None = None) -> Window:  # fmt: skip
    """``down``: (node, service) -> for how many of the last samples its unit is not active;
    every node runs the services in ``runs`` (the others have no series)."""
    a = np.full((T, nodes, len(SERVICES)), np.nan)
    for s in runs:
        a[:, :, SERVICES.index(s)] = 1.0
    for (n, s), samples in down.items():
        a[T - samples :, n, SERVICES.index(s)] = 0.0
    return Window(
        t=np.arange(T) * 15.0,
        nodes=tuple(f"gb200-{i:03d}" for i in range(nodes)),
        metrics={catalog.FABRIC_SERVICE_UP.name: a},
        nvlink_domain_of=domains if domains is not None else dict.fromkeys(range(nodes), DOM),
    )


def keys(found: list) -> list[tuple[str, str, str, str]]:
    return sorted((f.node, f.subject, f.kind, f.action) for f in found)


def test_fabric_manager_down_on_every_node_of_a_domain_is_one_finding_naming_the_domain():
    found = FabricServicesDetector().detect(window({(n, "fabricmanager"): T for n in range(4)}))
    assert keys(found) == [(DOM, f"nvlink_domain={DOM}", "domain_fabric_service_down", "notify")]
    (f,) = found
    assert f.severity == "critical" and f.fault_class == "switch"
    assert f.evidence["fabricmanager_down"] == 4 and f.evidence["imex_down"] == 0
    assert "Fabric Manager" in f.summary and subject_labels(f.subject) == {"nvlink_domain": DOM}


def test_imex_down_on_one_node_of_a_healthy_domain_is_that_node_s_finding():
    (f,) = FabricServicesDetector().detect(window({(2, "imex"): T}))
    assert (f.node, f.subject, f.kind, f.action) == (
        "gb200-002",
        "service=imex",
        "fabric_service_down",
        "notify",
    )
    assert subject_labels(f.subject) == {"service": "imex"} and "IMEX" in f.summary


def test_imex_down_on_half_a_domain_is_the_domain_s_finding_and_no_node_findings():
    found = FabricServicesDetector().detect(window({(0, "imex"): T, (3, "imex"): T}))
    assert keys(found) == [(DOM, f"nvlink_domain={DOM}", "domain_fabric_service_down", "notify")]
    assert found[0].evidence["imex_down"] == 2 and found[0].confidence == 0.5


def test_the_domain_share_counts_only_the_nodes_that_run_the_service():
    # GB200 compute trays: no Fabric Manager unit; IMEX down on 2 of 4 trays is half the domain
    found = FabricServicesDetector().detect(
        window({(0, "imex"): T, (1, "imex"): T}, runs=("imex",))
    )
    assert [f.kind for f in found] == ["domain_fabric_service_down"]


def test_a_node_without_the_units_says_nothing():
    assert FabricServicesDetector().detect(window({}, runs=())) == []
    w = window({})
    assert (
        FabricServicesDetector().detect(
            Window(t=w.t, nodes=w.nodes, metrics={}, nvlink_domain_of=w.nvlink_domain_of)
        )
        == []
    )


def with_imex_ready(w: Window, not_ready: list[int]) -> Window:
    """``w`` with every node's IMEX daemon READY but those in ``not_ready`` (all samples)."""
    r = np.ones((T, len(w.nodes)))
    r[:, not_ready] = 0.0
    metrics = {**w.metrics, catalog.FABRIC_IMEX_READY.name: r}
    return Window(t=w.t, nodes=w.nodes, metrics=metrics, nvlink_domain_of=w.nvlink_domain_of)


def test_an_active_imex_unit_whose_daemon_is_not_ready_is_imex_down_on_that_node():
    (f,) = FabricServicesDetector().detect(with_imex_ready(window({}), [1]))
    assert (f.node, f.subject, f.kind) == ("gb200-001", "service=imex", "fabric_service_down")


def test_daemons_not_ready_on_half_a_domain_are_the_domain_s_finding():
    found = FabricServicesDetector().detect(with_imex_ready(window({(0, "imex"): T}), [1, 2]))
    assert keys(found) == [(DOM, f"nvlink_domain={DOM}", "domain_fabric_service_down", "notify")]
    assert found[0].evidence["imex_down"] == 3


def test_ready_daemons_add_nothing():
    assert FabricServicesDetector().detect(with_imex_ready(window({}), [])) == []


def test_a_unit_down_for_fewer_than_k_samples_is_not_yet_down():
    assert FabricServicesDetector(k=3).detect(window({(2, "imex"): 2})) == []


def test_a_node_outside_any_nvlink_domain_is_judged_alone():
    # an HGX node: its NVLink domain is the node itself, so no cluster UUID and no domain
    found = FabricServicesDetector().detect(
        window({(0, "fabricmanager"): T, (1, "fabricmanager"): T}, nodes=2, domains={})
    )
    assert keys(found) == [
        ("gb200-000", "service=fabricmanager", "fabric_service_down", "notify"),
        ("gb200-001", "service=fabricmanager", "fabric_service_down", "notify"),
    ]


def test_one_domain_down_leaves_the_other_domain_s_single_node_finding():
    domains = {0: "a.1", 1: "a.1", 2: "b.2", 3: "b.2"}
    found = FabricServicesDetector().detect(
        window({(0, "imex"): T, (1, "imex"): T, (3, "imex"): T}, domains=domains)
    )
    # b.2: one of its two nodes down is half, but one node cannot speak for a domain
    assert keys(found) == [
        ("a.1", "nvlink_domain=a.1", "domain_fabric_service_down", "notify"),
        ("gb200-003", "service=imex", "fabric_service_down", "notify"),
    ]


def test_the_detector_is_in_the_default_set_and_its_input_in_the_coverage_needs():
    from analyzer.detectors import default_detectors
    from analyzer.sources.build import QUERIED_NAMES
    from analyzer.sources.dialects.coverage import NEEDS

    assert any(isinstance(d, FabricServicesDetector) for d in default_detectors())
    assert [n.what for n in NEEDS["fabric_services"]] == [
        catalog.FABRIC_SERVICE_UP.name,
        catalog.FABRIC_IMEX_READY.name,
    ]
    assert [n.essential for n in NEEDS["fabric_services"]] == [True, False]
    assert {catalog.FABRIC_SERVICE_UP.name, catalog.FABRIC_IMEX_READY.name} <= QUERIED_NAMES


def test_the_prometheus_read_is_per_node_and_service_without_the_state_label():
    from analyzer.sources.queries import QUERIES

    q = next(q for q in QUERIES if q.metric is catalog.FABRIC_SERVICE_UP)
    assert q.expr() == f"max by (node,service) ({catalog.FABRIC_SERVICE_UP.name})"


# ------------------------------------------------------------------ the read path
def test_the_embedded_scrape_path_finds_the_simulator_s_unhealthy_imex_on_its_tray():
    import asyncio

    from analyzer.sources.scrape import ScrapeSource, Target
    from simulator.cli import SimulateSettings, make_simulator
    from simulator.simulator import Simulator
    from tests.simulator.test_server import Clock

    clock = Clock()
    sim = Simulator(make_simulator(SimulateSettings(skus="gb200-nvl72:1")).fleet, clock=clock,
                    wall=lambda: 1.8e9)  # fmt: skip
    nodes = list(sim.fleet.nodes)
    sim.inject({"node": nodes[5], "kind": "imex_unhealthy"})
    clock.t += 5.0

    class Fetch:
        async def fetch(self, url: str) -> str:
            return sim.metrics(url.split("/")[-2]).decode()

    src = ScrapeSource([Target(f"http://sim/{n}/metrics", {}) for n in nodes], 60.0, 15.0, Fetch())
    for i in range(3):
        w = asyncio.run(src.read(1000.0 + 15.0 * i))
    assert keys(FabricServicesDetector().detect(w)) == [
        (nodes[5], "service=imex", "fabric_service_down", "notify")
    ]


def test_the_prometheus_path_places_each_service_on_its_axis_and_finds_the_domain():
    import asyncio

    from analyzer.sources.prometheus import PrometheusSource

    from .fakeprom import FakeProm

    prom = FakeProm()
    cluster, clique = DOM.split(".")
    for t in np.arange(0.0, 700.0, 15.0):
        for n in ("a", "b", "c"):
            prom.add(catalog.GPU_UP.name, {"node": n, "gpu": "0"}, t, 1.0)
            prom.add(catalog.GPU_FABRIC_INFO.name,
                     {"node": n, "gpu": "0", "state": "completed", "status": "success",
                      "cluster_uuid": cluster, "clique_id": clique}, t, 1.0)  # fmt: skip
            # c's daemon answers READY under two status series (a restart): merged per node
            prom.add(catalog.FABRIC_IMEX_READY.name,
                     {"node": n, "status": "READY" if n == "c" or t < 600.0 else "NOT_READY"},
                     t, 1.0 if n == "c" or t < 600.0 else 0.0)  # fmt: skip
            down = n != "c" and t >= 600.0  # IMEX fails on a and b; c runs no Fabric Manager
            prom.add(catalog.FABRIC_SERVICE_UP.name,
                     {"node": n, "service": "imex", "state": "failed" if down else "active"},
                     t, 0.0 if down else 1.0)  # fmt: skip
    src = PrometheusSource("http://fake", window=600.0, step=15.0, http=prom)  # type: ignore[arg-type]
    w = asyncio.run(src.read(690.0 + src.settle))
    a = w.get(catalog.FABRIC_SERVICE_UP)
    assert a is not None and a.shape[1:] == (3, len(SERVICES))
    assert np.isnan(a[:, :, SERVICES.index("fabricmanager")]).all()
    r = w.get(catalog.FABRIC_IMEX_READY)
    assert r is not None and r.shape == (len(w.t), 3) and r[-1].tolist() == [0.0, 0.0, 1.0]
    assert keys(FabricServicesDetector().detect(w)) == [
        (DOM, f"nvlink_domain={DOM}", "domain_fabric_service_down", "notify")
    ]


def test_the_scrape_window_merges_a_daemon_s_status_series_per_node_and_keeps_services_apart():
    from analyzer.sources.build import RawSeries, build_window

    grid = np.arange(4) * 15.0
    i01, i23 = np.array([0, 1]), np.array([2, 3])
    up, ready = catalog.FABRIC_SERVICE_UP.name, catalog.FABRIC_IMEX_READY.name
    w = build_window([
        RawSeries(up, {"node": "a", "service": "imex", "state": "active"}, i01, np.ones(2)),
        RawSeries(up, {"node": "a", "service": "imex", "state": "failed"}, i23, np.zeros(2)),
        RawSeries(up, {"node": "a", "service": "nonsense", "state": "active"}, i01, np.ones(2)),
        RawSeries(ready, {"node": "a", "status": "READY"}, i01, np.ones(2)),
        RawSeries(ready, {"node": "a", "status": "NOT_READY"}, i23, np.zeros(2)),
    ], grid, 15.0)  # fmt: skip
    a, r = w.get(catalog.FABRIC_SERVICE_UP), w.get(catalog.FABRIC_IMEX_READY)
    assert a is not None and r is not None
    assert a[:, 0, SERVICES.index("imex")].tolist() == [1.0, 1.0, 0.0, 0.0]
    assert np.isnan(a[:, 0, SERVICES.index("fabricmanager")]).all()
    assert r[:, 0].tolist() == [1.0, 1.0, 0.0, 0.0]
