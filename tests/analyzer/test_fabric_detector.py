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
