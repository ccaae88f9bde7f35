"""``gpuwarden simulate --skus gb200-nvl72:2``: two NVL72 racks of 18 compute trays, each tray
4 GB200 GPUs whose fabric info names its rack's NVLink domain, with IMEX, served through the
exporter's own collectors."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from exporter import catalog as c
from simulator import nvl72
from simulator.cli import SimulateSettings, make_simulator


def samples(body: bytes, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for f in text_string_to_metric_families(body.decode())
        for s in f.samples
        if s.name == name
    ]


NVL72 = SimulateSettings(skus="gb200-nvl72:2")


def _info(body: bytes) -> list[dict[str, str]]:
    return [labels for labels, _ in samples(body, c.GPU_FABRIC_INFO.name)]


def test_two_nvl72_racks_are_36_trays_of_4_gpus_in_two_nvlink_domains() -> None:
    sim = make_simulator(NVL72)
    assert len(sim.fleet.nodes) == 36
    domains = {}
    for i, node in enumerate(sim.fleet.nodes):
        if i not in (0, 17, 18, 35):
            continue
        body = sim.metrics(node)
        info = _info(body)
        assert len(info) == 4, node  # 4 GPUs per tray, not 8
        assert {x["state"] for x in info} == {"completed"}
        domains[i] = {(x["cluster_uuid"], x["clique_id"]) for x in info}
        (up,) = samples(body, c.FABRIC_SERVICE_UP.name)
        assert up[0]["service"] == "imex" and up[1] == 1
    assert domains[0] == domains[17] != domains[18] == domains[35]
    cluster, clique = nvl72.domain(1)
    assert domains[35] == {(cluster, str(clique))}


def test_a_rack_of_the_other_skus_still_has_eight_gpus_and_no_imex() -> None:
    sim = make_simulator(SimulateSettings(skus="h100:1,gb200-nvl72:1", nodes_per_leaf=2))
    assert len(sim.fleet.nodes) == 2 + 18
    body = sim.metrics(sim.fleet.nodes[0])
    assert len(_info(body)) == 8
    assert samples(body, c.FABRIC_SERVICE_UP.name) == []
    assert nvl72.rack_of(sim.fleet.sku_of, 2) == 0 and nvl72.rack_of(sim.fleet.sku_of, 0) is None
