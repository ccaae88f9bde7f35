"""The hardware power brake (clocks-event reason 0x80): held for N polls, judged per rack; a
rack-wide brake is one facility finding (notify, never a drain), kept apart from the power cap."""

from __future__ import annotations

import numpy as np

from analyzer.detectors.power_brake import PowerBrakeDetector
from analyzer.detectors.throttling import ThrottlingDetector
from analyzer.findings import Finding
from analyzer.window import THROTTLE_REASONS, Window
from exporter import catalog

T, GPUS = 8, 4
BRAKE = THROTTLE_REASONS.index("hw_power_brake_slowdown")
CAP = THROTTLE_REASONS.index("sw_power_cap")


def window(braked: dict[tuple[int, int], int], nodes: int = 6, *, cap: bool = False,
           racks: dict[int, str] | None = None, domains: dict[int, str] | None = None) -> Window:  # fmt: skip
    """``braked[(node, gpu)] = polls``: the brake held for the last ``polls`` samples."""
    a = np.zeros((T, nodes, GPUS, len(THROTTLE_REASONS)))
    for (n, g), polls in braked.items():
        a[T - polls :, n, g, BRAKE] = 1.0
    if cap:
        a[:, :, :, CAP] = 1.0
    return Window(
        t=np.arange(T) * 15.0,
        nodes=tuple(f"gb200-{i:03d}" for i in range(nodes)),
        metrics={catalog.GPU_THROTTLE.name: a},
        rack_of=racks if racks is not None else {i: "rack-a" if i < 3 else "rack-b" for i in range(nodes)},
        nvlink_domain_of=domains or {},
        gpus=GPUS,
    )  # fmt: skip


def kinds(found: list[Finding]) -> list[tuple[str, str, str, str]]:
    return sorted((f.node, f.subject, f.kind, f.action) for f in found)


def test_a_brake_on_one_node_of_a_rack_is_that_node_s_gpu_findings() -> None:
    found = PowerBrakeDetector().detect(window({(1, 0): 5, (1, 2): 5}))
    assert kinds(found) == [
        ("gb200-001", "gpu=0", "power_brake", "cordon"),
        ("gb200-001", "gpu=2", "power_brake", "cordon"),
    ]
    assert found[0].since == 15.0 * (T - 5)


def test_a_brake_shorter_than_n_consecutive_polls_is_not_held() -> None:
    assert PowerBrakeDetector(consecutive=4).detect(window({(1, 0): 3})) == []
    w = window({(1, 0): 8})
    w.metrics[catalog.GPU_THROTTLE.name][-2, 1, 0, BRAKE] = 0.0  # a gap in the run
    assert PowerBrakeDetector(consecutive=4).detect(w) == []


def test_a_rack_wide_brake_is_one_facility_finding_that_only_notifies() -> None:
    held = {(n, g): 6 for n in (3, 4, 5) for g in range(GPUS)}
    found = PowerBrakeDetector().detect(window(held | {(0, 1): 6}))
    rack = [f for f in found if f.kind == "facility_power_brake"]
    assert len(rack) == 1
    (f,) = rack
    assert (f.node, f.subject, f.action, f.severity) == (
        "rack-b",
        "rack=rack-b",
        "notify",
        "critical",
    )
    assert f.evidence["braked"] == 3 and f.evidence["gpus"] == 12 and f.evidence["positions"] == 4
    # no per-GPU finding for the rack's nodes; the lone brake on rack-a stays its own
    assert kinds([x for x in found if x.kind == "power_brake"]) == [
        ("gb200-000", "gpu=1", "power_brake", "cordon")
    ]
    assert all(x.action in ("notify", "cordon") for x in found)  # never a drain


def test_an_nvl72_rack_is_its_nvlink_domain_when_no_rack_is_named() -> None:
    held = {(n, 0): 6 for n in range(4)}
    w = window(held, racks={}, domains={i: "clique-7" for i in range(6)})
    (f,) = PowerBrakeDetector().detect(w)
    assert (f.kind, f.node) == ("facility_power_brake", "clique-7")


def test_the_software_power_cap_is_not_a_brake_and_the_throttling_detector_leaves_brakes_alone() -> (
    None
):
    assert PowerBrakeDetector().detect(window({}, cap=True)) == []
    w = window({(n, g): T for n in range(6) for g in range(GPUS)})
    assert ThrottlingDetector().detect(w) == []  # no per-GPU cordons for a facility brake
    assert [f.kind for f in PowerBrakeDetector().detect(w)] == ["facility_power_brake"] * 2


def test_a_node_that_stopped_reporting_is_not_counted_as_braked() -> None:
    w = window({(n, 0): 6 for n in (3, 4, 5)})
    w.metrics[catalog.GPU_THROTTLE.name][-1, 4:, :, :] = np.nan
    found = PowerBrakeDetector().detect(w)
    assert [f.kind for f in found] == ["power_brake"] and found[0].node == "gb200-003"


HW_SLOWDOWN = THROTTLE_REASONS.index("hw_slowdown")


def test_a_rack_wide_brake_reported_as_0x88_is_one_facility_finding_and_no_throttling() -> None:
    # NVML sets HW slowdown (0x08) with the brake (0x80): a braked rack reports 0x88.
    w = window({(n, g): T for n in (3, 4, 5) for g in range(GPUS)})
    a = w.metrics[catalog.GPU_THROTTLE.name]
    a[..., HW_SLOWDOWN] = a[..., BRAKE]
    assert ThrottlingDetector().detect(w) == []  # no per-GPU throttle finding, no cordon
    found = PowerBrakeDetector().detect(w)
    assert kinds(found) == [("rack-b", "rack=rack-b", "facility_power_brake", "notify")]


def test_hw_slowdown_without_the_brake_is_still_a_throttling_finding() -> None:
    w = window({})
    w.metrics[catalog.GPU_THROTTLE.name][:, 2, 1, HW_SLOWDOWN] = 1.0
    (f,) = ThrottlingDetector().detect(w)
    assert (f.node, f.subject, f.kind, f.action) == ("gb200-002", "gpu=1", "throttling", "cordon")


def test_a_rack_brake_whose_nodes_are_polls_apart_is_still_one_facility_finding() -> None:
    """Scrapes of a rack's nodes are staggered: at onset one node has held the brake for the
    N polls while the others are a poll or two behind. No node of that rack is cordoned."""
    found = PowerBrakeDetector(consecutive=4).detect(
        window({(3, 0): 4, (4, 0): 2, (5, 0): 3}))  # fmt: skip
    assert [(f.kind, f.action) for f in found] == [("facility_power_brake", "notify")]
    alone = PowerBrakeDetector(consecutive=4).detect(window({(3, 0): 4}))  # the rest unbraked
    assert [(f.kind, f.action) for f in alone] == [("power_brake", "cordon")]
