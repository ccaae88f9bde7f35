"""Injecting: bad requests are refused with a reason and change nothing; truth tells the rest."""

from __future__ import annotations

from typing import Any

import pytest

from simulator.faults import FaultError
from simulator.fleet import Fleet

CASES = [
    ({"kind": "meteor", "node": "gpu-node-001", "target": "gpu0"}, "unknown fault kind"),
    ({"kind": "xid", "node": "gpu-node-099", "target": "gpu0"}, "unknown node"),
    ({"kind": "xid", "node": "gpu-node-001", "target": "gpu8"}, "bad target"),
    ({"kind": "xid", "node": "gpu-node-001", "target": ""}, "bad target"),
    ({"kind": "nvlink_down", "node": "gpu-node-001", "target": "gpu1/18"}, "bad target"),
    ({"kind": "ib_port_down", "node": "gpu-node-001", "target": "mlx5_8/1"}, "bad target"),
    ({"kind": "leaf_outage", "node": "", "target": "leaf-09"}, "unknown switch"),
    (
        {"kind": "xid", "node": "gpu-node-001", "target": "gpu0", "parameters": {"xid": 13}},
        "must be one of",
    ),
    (
        {
            "kind": "straggler",
            "node": "gpu-node-001",
            "target": "gpu0",
            "parameters": {"slowdown": 2},
        },
        "must be in",
    ),
    (
        {
            "kind": "straggler",
            "node": "gpu-node-001",
            "target": "gpu0",
            "parameters": {"slowness": 0.1},
        },
        "unknown parameter",
    ),
    (
        {
            "kind": "straggler",
            "node": "gpu-node-001",
            "target": "gpu0",
            "parameters": {"slowdown": "fast"},
        },
        "must be a number",
    ),
    (
        {
            "kind": "gpu_fallen_off_bus",
            "node": "gpu-node-001",
            "target": "gpu0",
            "parameters": {"message": 1},
        },
        "true or false",
    ),
    ({"kind": "xid", "node": "gpu-node-001", "target": "gpu0", "duration": 0}, "duration"),
    (
        {
            "kind": "ib_flap",
            "node": "gpu-node-001",
            "target": "mlx5_0/1",
            "parameters": {"period_s": 60, "down_s": 60},
        },
        "down_s must be shorter than period_s",
    ),
    ({"kind": "xid", "node": "gpu-node-001", "target": "gpu0", "onset": 10}, "in the past"),
]


@pytest.mark.parametrize(("request_", "message"), CASES, ids=[m for _, m in CASES])
def test_bad_injection_is_refused_with_a_reason_and_changes_nothing(
    request_: dict[str, Any], message: str
) -> None:
    fleet = Fleet(4, seed=1)
    fleet.step(60)
    before = fleet.step(60)
    args = {k: v for k, v in request_.items() if k in ("onset", "duration")}
    with pytest.raises(FaultError, match=message):
        fleet.inject(
            request_["kind"],
            request_["node"],
            request_["target"],
            request_.get("parameters"),
            **args,
        )
    assert fleet.faults() == [] and fleet.truth() == []
    assert fleet.step(60).xids == before.xids == []


def test_truth_lists_faults_once_their_onset_has_passed_with_id_kind_target_and_flags() -> None:
    fleet = Fleet(4, seed=1)
    fleet.inject("nvlink_down", "gpu-node-002", "gpu3/7", onset=100)
    fleet.inject("app_xid", "gpu-node-001", "gpu0", {"xid": 31}, onset=50, duration=30)
    fleet.step(60)
    (app,) = fleet.truth()
    assert app == {
        "id": 2,
        "kind": "app_xid",
        "node": "gpu-node-001",
        "target": "gpu0",
        "onset": 50.0,
        "end": 80.0,
        "parameters": {"xid": 31, "restart_s": 120.0},
        "hardware": False,
        "negative_control": True,
        "nodes": ["gpu-node-001"],
    }
    fleet.step(120)
    link = fleet.truth()[1]
    assert (link["target"], link["hardware"], link["negative_control"]) == ("gpu3/7", True, False)


def test_a_fault_injected_now_fires_in_the_next_step() -> None:
    fleet = Fleet(4, seed=1)
    fleet.step(30)
    fleet.inject("xid", "gpu-node-004", "gpu6", {"xid": 79})
    assert fleet.truth()[0]["onset"] == 30.0
    assert fleet.step(45).xids == [(3, 6, 79)]
    assert fleet.step(60).xids == []


def test_target_spellings_are_normalised() -> None:
    fleet = Fleet(4, seed=1)
    assert fleet.inject("straggler", "gpu-node-001", "3").target == "gpu3"
    assert fleet.inject("straggler", "gpu-node-001", "").target == "node"
    assert fleet.inject("leaf_outage", "gpu-node-002", "").node == "leaf-01"
