"""``gpuwarden simulate --skus gb200-nvl72:2``: two NVL72 racks of 18 compute trays, each tray
4 GB200 GPUs whose fabric info names its rack's NVLink domain, with IMEX, served through the
exporter's own collectors."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from analyzer import xidcat
from exporter import catalog as c
from simulator import nvl72
from simulator.cli import SimulateSettings, make_simulator
from simulator.simulator import Simulator
from tests.simulator.test_server import Clock


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


def _health(body: bytes, check: str) -> list[float]:
    return [v for labels, v in samples(body, c.GPU_FABRIC_HEALTH.name) if labels["check"] == check]


def test_injected_fabric_faults_reach_the_served_trays_of_their_rack_only() -> None:
    clock = Clock()
    sim = Simulator(make_simulator(NVL72).fleet, clock=clock, wall=lambda: 1.8e9)
    nodes = sim.fleet.nodes
    sim.inject({"node": nodes[3], "kind": "nvlink_switch_tray_down"})  # rack 0
    sim.inject({"node": nodes[20], "kind": "fabric_route_unhealthy", "target": "gpu2"})  # rack 1
    sim.inject({"node": nodes[21], "kind": "imex_unhealthy"})
    sim.inject({"node": nodes[30], "kind": "rack_power_brake"})  # rack 1
    clock.t += 5.0  # past the faults' onset (one tick ahead)
    rack0, other0 = sim.metrics(nodes[0]), sim.metrics(nodes[17])
    assert (
        _health(rack0, "degraded_bandwidth") == [1.0] * 4 == _health(other0, "degraded_bandwidth")
    )
    tray20 = sim.metrics(nodes[20])
    assert _health(tray20, "route_unhealthy") == [0.0, 0.0, 1.0, 0.0]
    assert _health(tray20, "degraded_bandwidth") == [0.0] * 4  # the other rack's switch
    (imex,) = samples(sim.metrics(nodes[21]), c.FABRIC_SERVICE_UP.name)
    assert imex[0]["state"] == "failed" and imex[1] == 0
    brake = [v for labels, v in samples(sim.metrics(nodes[18]), c.GPU_THROTTLE.name)
             if labels["reason"] == "hw_power_brake_slowdown"]  # fmt: skip
    assert brake == [1.0] * 4
    slow = [v for labels, v in samples(sim.metrics(nodes[18]), c.GPU_THROTTLE.name)
            if labels["reason"] == "hw_slowdown"]  # fmt: skip
    assert slow == [1.0] * 4  # NVML sets HW slowdown (0x08) with the brake
    down = [labels["link"] for labels, v in samples(rack0, c.NVLINK_UP.name) if v == 0]
    assert sorted(set(down), key=int) == ["0", "9"] and len(down) == 8  # 2 links of 4 GPUs
    assert not [v for labels, v in samples(tray20, c.NVLINK_UP.name) if v == 0]
    assert not [v for labels, v in samples(rack0, c.GPU_THROTTLE.name)
                if labels["reason"] == "hw_power_brake_slowdown" and v]  # fmt: skip


def test_a_switch_tray_down_logs_xid_149_peer_link_down_for_each_lost_link_of_its_rack() -> None:
    """NVIDIA's decode: XID 149 NETIR_LINK_EVT/NETIR_LINK_DOWN, a sub-code whose investigatory
    action is INVESTIGATE_PEER_DEVICE (the NVSwitch at the link's far end went down)."""
    clock = Clock()
    sim = Simulator(make_simulator(NVL72).fleet, clock=clock, wall=lambda: 1.8e9)
    nodes = sim.fleet.nodes
    sim.inject({"node": nodes[3], "kind": "nvlink_switch_tray_down"})  # rack 0
    clock.t += 5.0
    for i in (0, 17):  # any tray of the rack, not only the named one
        body = sim.metrics(nodes[i])
        xids = {labels["gpu"]: v for labels, v in samples(body, c.GPU_XID_ERRORS.name)
                if labels["xid"] == "149"}  # fmt: skip
        assert xids == {str(g): 2.0 for g in range(4)}, nodes[i]  # links 0 and 9 of each GPU
        rows = {(labels["unit"], labels["error_status"], labels["subcode"])
                for labels, _ in samples(body, c.GPU_XID_NVLINK5_ERRORS.name)}  # fmt: skip
        assert rows == {("NETIR_LINK_EVT/NETIR_LINK_DOWN", "0x00000000", "32")}
        row = xidcat.load_catalog().get(149).subcode("NETIR_LINK_EVT/NETIR_LINK_DOWN", 0, 32)
        assert row is not None and row.nvidia.investigatory == "INVESTIGATE_PEER_DEVICE"
    other = sim.metrics(nodes[18])  # rack 1 keeps its switch trays
    assert not [v for labels, v in samples(other, c.GPU_XID_ERRORS.name) if labels["xid"] == "149"]
    (event, *_) = [e for e in sim.fleet.events if e.xid == 149]
    assert len([e for e in sim.fleet.events if e.xid == 149]) == 18 * 4 * 2
    assert event.t == sim.fleet.truth()[0]["onset"]  # logged once, when the tray went down
