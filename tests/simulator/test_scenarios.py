"""Scenario files: every shipped one loads and runs; bad ones are refused with a reason."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from simulator import scenario
from simulator.faults import KINDS
from simulator.faults import fabric as fabric_faults
from simulator.faults.partitions import PARTITION_KINDS
from simulator.scenario import ScenarioError
from simulator.topology import Topology

SCENARIOS = Path(__file__).resolve().parents[2] / "fixtures" / "scenarios"


@pytest.mark.parametrize("path", sorted(SCENARIOS.glob("*.yaml")), ids=lambda p: p.stem)
def test_every_shipped_scenario_loads_and_steps(path: Path) -> None:
    sc = scenario.load(path)
    fleet = scenario.build(sc, seed=1, nodes=min(int(sc.fleet.get("nodes", 32)), 64))
    assert fleet.faults(), "a scenario without faults tests nothing"
    frame = fleet.step(900)
    assert frame.t == 900 and frame.resets.shape == (fleet.topo.n_nodes,)


def test_every_fault_kind_appears_in_the_every_kind_scenario() -> None:
    sc = scenario.load(SCENARIOS / "every-kind.yaml")
    # the NVL72 fabric kinds act on gb200-nvl72 trays only; the every-kind fleet is HGX
    nvl72_only = {k.name for k in fabric_faults.KINDS}
    amd_only = {k.name for k in KINDS.values() if k.vendor == "amd"}  # mixed-amd.yaml's
    partitioned = set(PARTITION_KINDS)  # need a partitioned GPU: partitioned.yaml's
    assert {f["kind"] for f in sc.faults} == set(KINDS) - nvl72_only - amd_only - partitioned


def test_every_partition_fault_kind_appears_in_the_partitioned_scenario_on_an_instance() -> None:
    fleet = scenario.build(scenario.load(SCENARIOS / "partitioned.yaml"), seed=1)
    assert {f.kind for f in fleet.faults()} == PARTITION_KINDS
    assert all(fleet.layouts[f.nodes[0]][f.gpu] is not None for f in fleet.faults())


def test_every_amd_fault_kind_appears_in_the_mixed_amd_scenario_on_an_mi300x_node() -> None:
    sc = scenario.load(SCENARIOS / "mixed-amd.yaml")
    fleet = scenario.build(sc, seed=1)
    amd_only = {k.name for k in KINDS.values() if k.vendor == "amd"}
    assert amd_only <= {f["kind"] for f in sc.faults}
    assert {
        fleet.sku_of[fleet.topo.index[f["node"]]] for f in sc.faults if f["kind"] in amd_only
    } == {"mi300x"}


def test_default_priors_name_known_kinds_with_rates_per_thousand_node_days() -> None:
    priors = scenario.default_priors()
    assert all(p["kind"] in KINDS and p["rate"] >= 0 for p in priors.values())
    hardware = sum(p["rate"] for p in priors.values() if KINDS[p["kind"]].hardware)
    assert 2.3 <= hardware <= 6.5  # REFERENCE.md §4: 2.3 to 6.5 failures per 1,000 node-days


def test_random_mix_draws_about_rate_times_node_days() -> None:
    rnd = {
        "priors": "none",
        "horizon_s": 86400.0,
        "classes": {
            "s": {"kind": "straggler", "rate": 500.0, "parameters": {"slowdown": [0.03, 0.3]}}
        },
    }
    faults = scenario.random_faults(rnd, Topology(200), seed=4)
    assert 70 <= len(faults) <= 130  # 500 per 1,000 node-days x 200 node-days = 100
    slow = np.array([f["parameters"]["slowdown"] for f in faults])
    assert slow.min() >= 0.03 and slow.max() <= 0.3 and slow.std() > 0.03
    assert all(0 <= f["onset"] <= 86400 for f in faults)


def test_random_mix_is_the_same_for_the_same_seed_and_differs_for_another() -> None:
    rnd = {"horizon_s": 86400.0, "rates": {"xid_79": 50.0}}
    a = scenario.random_faults(rnd, Topology(64), seed=1)
    assert a == scenario.random_faults(rnd, Topology(64), seed=1)
    assert a != scenario.random_faults(rnd, Topology(64), seed=2)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("faults: [{kind: meteor, node: gpu-node-001}]", "unknown kind 'meteor'"),
        ("fleet: {nodez: 3}", "unknown key(s) nodez"),
        ("random: {rates: {no_such_class: 1}}", "unknown class 'no_such_class'"),
        ("random: {rates: {xid_79: -1}}", "rate must be a number >= 0"),
        ("random: {priors: maybe}", "priors must be 'default' or 'none'"),
        ("faults: [{kind: xid, node: gpu-node-999, target: gpu0}]", "unknown node"),
        ("faults: [{kind: xid, node: gpu-node-001, target: gpu9}]", "bad target"),
        (
            "faults: [{kind: xid, node: gpu-node-001, target: gpu0, parameters: {xid: 7}}]",
            "must be one of",
        ),
        ("fleet: {sku: a100}", "sku must be one of"),
        ("[1, 2]", "expected a mapping"),
        ("faults: {a: 1}", "faults must be a list"),
    ],
)
def test_bad_scenarios_are_refused_with_the_reason(tmp_path: Path, text: str, message: str) -> None:
    p = tmp_path / "bad.yaml"
    p.write_text(text)
    with pytest.raises(ScenarioError) as err:
        scenario.build(scenario.load(p), nodes=8)
    assert message in str(err.value)


def test_an_unreadable_scenario_file_is_reported_by_name(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError, match=r"missing\.yaml"):
        scenario.load(tmp_path / "missing.yaml")
    (tmp_path / "broken.yaml").write_text("faults: [")
    with pytest.raises(ScenarioError, match="not valid YAML"):
        scenario.load(tmp_path / "broken.yaml")


def test_a_scenario_with_one_bad_fault_schedules_none_of_them(tmp_path: Path) -> None:
    p = tmp_path / "half.yaml"
    p.write_text(
        "faults:\n"
        "  - {kind: xid, node: gpu-node-001, target: gpu0}\n"
        "  - {kind: xid, node: gpu-node-001, target: gpu0, duration: -5}\n"
    )
    from simulator.fleet import Fleet

    fleet = Fleet(4)
    with pytest.raises(ScenarioError, match="duration"):
        scenario.apply(scenario.load(p), fleet)
    assert fleet.faults() == []
