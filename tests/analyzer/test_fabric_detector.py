"""NVLink fabric health judged per domain: one GPU degraded is its own finding; most of a
domain degraded is one switch_degraded finding naming the domain. Domains come from the GPUs'
fabric info (cluster UUID + clique id) before node labels."""

from __future__ import annotations

import numpy as np
import pytest

from analyzer.detectors.fabric import FabricDetector
from analyzer.window import Window
from common.fabric import domains_from_fabric, fabric_domain, nvlink_domains
from exporter import catalog

CHECKS = catalog.FABRIC_HEALTH_CHECKS
T, GPUS = 6, 4
DOM = "9c6f5af3-53bf-49b5-a436-b66766c413c3.4026"


def window(bad: dict[tuple[int, int], str], nodes: int = 4, domains: dict[int, str] | None = None,
           samples: int = T) -> Window:  # fmt: skip
    a = np.zeros((T, nodes, GPUS, len(CHECKS)))
    for (n, g), check in bad.items():
        a[T - samples :, n, g, CHECKS.index(check)] = 1.0
    return Window(
        t=np.arange(T) * 15.0,
        nodes=tuple(f"gb200-{i:03d}" for i in range(nodes)),
        metrics={catalog.GPU_FABRIC_HEALTH.name: a},
        nvlink_domain_of=domains if domains is not None else dict.fromkeys(range(nodes), DOM),
        gpus=GPUS,
    )


@pytest.mark.parametrize(
    "check",
    ["route_unhealthy", "degraded_bandwidth", "incorrect_configuration", "gfm_disconnected"],
)
def test_one_gpu_degraded_in_a_healthy_domain_is_that_gpu_s_finding(check: str) -> None:
    (f,) = FabricDetector().detect(window({(2, 1): check}))
    assert (f.node, f.subject, f.kind, f.action) == (
        "gb200-002",
        "gpu=1",
        "fabric_degraded",
        "drain",
    )
    assert check in f.summary and f.evidence[check] == 1.0


@pytest.mark.parametrize("check", ["route_recovery", "access_timeout_recovery"])
def test_a_recovery_in_progress_is_not_a_degraded_fabric(check: str) -> None:
    assert FabricDetector().detect(window({(2, 1): check})) == []


def test_a_check_set_for_fewer_than_k_samples_is_not_yet_degraded() -> None:
    assert FabricDetector(k=3).detect(window({(2, 1): "route_unhealthy"}, samples=2)) == []


def test_most_of_a_domain_degraded_is_one_switch_finding_naming_the_domain() -> None:
    bad = {(n, g): "route_unhealthy" for n in range(4) for g in range(GPUS) if (n, g) != (3, 3)}
    found = FabricDetector().detect(window(bad))
    assert [(f.node, f.subject, f.kind, f.action) for f in found] == [
        (DOM, f"nvlink_domain={DOM}", "switch_degraded", "notify")
    ]
    assert found[0].evidence["degraded"] == 15 and found[0].evidence["gpus"] == 16


def test_a_degraded_gpu_in_another_domain_keeps_its_own_finding() -> None:
    domains = {0: DOM, 1: DOM, 2: "other.1", 3: "other.1"}
    bad = {(n, g): "degraded_bandwidth" for n in (0, 1) for g in range(GPUS)}
    found = FabricDetector().detect(window(bad | {(2, 0): "route_unhealthy"}, domains=domains))
    assert sorted((f.kind, f.node) for f in found) == [
        ("fabric_degraded", "gb200-002"), ("switch_degraded", DOM)
    ]  # fmt: skip


def test_gpus_that_do_not_report_fabric_health_are_neither_counted_nor_flagged() -> None:
    w = window({(0, g): "route_unhealthy" for g in range(3)} | {(1, 0): "route_unhealthy"})
    w.metrics[catalog.GPU_FABRIC_HEALTH.name][:, 1:] = np.nan  # three trays without the field
    found = FabricDetector().detect(w)
    # one reporting tray cannot speak for the domain's switch: its own GPUs' findings
    assert sorted((f.kind, f.node, f.subject) for f in found) == [
        ("fabric_degraded", "gb200-000", f"gpu={g}") for g in range(3)
    ]


def test_the_domain_is_the_cluster_uuid_and_clique_spelt_as_gfd_labels_it() -> None:
    assert fabric_domain("9c6f5af3-53bf-49b5-a436-b66766c413c3", "4026") == DOM
    assert fabric_domain("", "0") == ""  # a single-node HGX: no multi-node domain


def test_a_node_s_domain_is_what_most_of_its_gpus_report() -> None:
    rows = [("n1", "c", "7")] * 3 + [("n1", "", "0"), ("n2", "", "0")]
    assert domains_from_fabric(rows) == {"n1": "c.7"}


def test_fabric_info_wins_over_node_labels_which_fill_the_rest() -> None:
    merged = nvlink_domains({"n1": "c.7"}, {"n1": "rack-label", "n2": "nvl72-02"})
    assert merged == {"n1": "c.7", "n2": "nvl72-02"}


# ------------------------------------------------------------------ the read path
def _nvl72_sim():
    from simulator.cli import SimulateSettings, make_simulator
    from simulator.simulator import Simulator
    from tests.simulator.test_server import Clock

    clock = Clock()
    sim = Simulator(make_simulator(SimulateSettings(skus="gb200-nvl72:2")).fleet, clock=clock,
                    wall=lambda: 1.8e9)  # fmt: skip
    nodes = sim.fleet.nodes
    sim.inject({"node": nodes[3], "kind": "nvlink_switch_tray_down"})  # rack 0
    sim.inject({"node": nodes[20], "kind": "fabric_route_unhealthy", "target": "gpu2"})  # rack 1
    clock.t += 5.0
    return sim


def test_the_embedded_scrape_path_reads_fabric_domains_and_health_into_the_detector() -> None:
    import asyncio

    from analyzer.sources.scrape import ScrapeSource, Target
    from simulator import nvl72

    sim = _nvl72_sim()

    class Fetch:
        async def fetch(self, url: str) -> str:
            return sim.metrics(url.split("/")[-2]).decode()

    nodes = list(sim.fleet.nodes)
    src = ScrapeSource([Target(f"http://sim/{n}/metrics", {}) for n in nodes], 60.0, 15.0, Fetch())
    for i in range(3):
        w = asyncio.run(src.read(1000.0 + 15.0 * i))
    rack0, rack1 = (fabric_domain(cl, str(cq)) for cl, cq in (nvl72.domain(0), nvl72.domain(1)))
    assert [w.nvlink_domain_of[i] for i in range(36)] == [rack0] * 18 + [rack1] * 18
    got = sorted((f.node, f.subject, f.kind) for f in FabricDetector().detect(w))
    assert got == [(rack0, f"nvlink_domain={rack0}", "switch_degraded"),
                   (nodes[20], "gpu=2", "fabric_degraded")]  # fmt: skip


def test_the_prometheus_read_of_fabric_info_is_one_series_per_node_and_domain_every_5_min():
    from analyzer.sources.queries import QUERIES

    info = next(q for q in QUERIES if q.metric is catalog.GPU_FABRIC_INFO)
    assert info.every == 300.0 and "gpu" not in info.labels
    assert info.identity_expr() == (
        f'count by (node,cluster_uuid,clique_id) ({catalog.GPU_FABRIC_INFO.name}{{cluster_uuid!=""}})'
    )
    health = next(q for q in QUERIES if q.metric is catalog.GPU_FABRIC_HEALTH)
    assert health.expr() == f"max by (node,gpu,check) ({catalog.GPU_FABRIC_HEALTH.name} != 0)"


def test_the_fabric_info_is_read_at_a_cold_start_then_every_5_min_and_holds_between():
    import asyncio

    from analyzer.sources.prometheus import PrometheusSource

    from .fakeprom import FakeProm

    prom = FakeProm()
    cluster = DOM.split(".")[0]
    for t in np.arange(0.0, 1200.0, 15.0):
        for n in ("a", "b"):
            for g in range(GPUS):
                prom.add(catalog.GPU_UP.name, {"node": n, "gpu": str(g)}, t, 1.0)
                clique = "4026" if n == "a" or g else ""  # b's gpu0 lost its registration
                prom.add(catalog.GPU_FABRIC_INFO.name,
                         {"node": n, "gpu": str(g), "state": "completed", "status": "success",
                          "cluster_uuid": cluster if clique else "", "clique_id": clique},
                         t, 1.0)  # fmt: skip
    src = PrometheusSource("http://fake", window=600.0, step=15.0, http=prom)  # type: ignore[arg-type]

    def reads() -> int:
        return sum(q.startswith("count by") for q in prom.calls)

    async def go(at: float) -> Window:
        return await src.read(at + src.settle)

    w = asyncio.run(go(600.0))
    assert w.nvlink_domain_of == {0: DOM, 1: DOM} and reads() == 1
    for at in np.arange(615.0, 900.0, 15.0):
        w = asyncio.run(go(at))
        assert w.nvlink_domain_of == {0: DOM, 1: DOM}
    assert reads() == 1  # held between identity reads
    asyncio.run(go(900.0))
    assert reads() == 2
