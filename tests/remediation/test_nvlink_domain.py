"""A whole NVLink domain down (alerts/fabric.rules.yml, ``scope="domain"``) is one incident
with one action: while it fires no node of the domain is drained, cordoned, rebooted or
reset one by one; the held decisions are journaled as part of the domain incident. A node's
domain is known from the topology, or from the alerts themselves (``nvlink_domain``, joined
from gpuwarden_gpu_fabric_info by the rules). An NVLink alert on a node of a multi-node domain
waits out a settle window, so the domain alert can arrive first. A rack (FindingFacilityPowerBrake's
node label) is never acted on nor denied as an unknown node."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from remediation import nvlink
from remediation import policy as policy_mod
from remediation.backends.dryrun import DryRunBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import DISRUPTIVE, Alert
from tests.remediation.helpers import LIVE_POLICY, alert

DOM_A, DOM_B = "5b1c0e52-1a2b-4c3d-9e8f-0123456789ab.1", "5b1c0e52-1a2b-4c3d-9e8f-0123456789ab.2"
TOPOLOGY = {
    **{f"gpu-node-{i:03d}": {"nvlink_domain": DOM_A, "rack": "rack-a"} for i in range(1, 5)},
    **{f"gpu-node-{i:03d}": {"nvlink_domain": DOM_B, "rack": "rack-b"} for i in range(5, 9)},
}


def domain_alert(
    status: str = "firing", dom: str = DOM_A, name: str = "NvlinkDomainFabricDegraded"
) -> Alert:
    cluster, clique = dom.rsplit(".", 1)
    labels = {
        "alertname": name,
        "severity": "critical",
        "scope": "domain",
        "action": "notify",
        "fault_class": "switch",
        "nvlink_domain": dom,
        "cluster_uuid": cluster,
        "clique_id": clique,
    }
    return Alert(f"fp-{name}-{dom}", "2026-11-29T10:00:00Z", status, labels, {"summary": "x"})


class World:
    def __init__(self, tmp: Path, topology: dict[str, dict[str, str]] | None = None) -> None:
        self.clock = FakeClock()
        self.journal = Journal(tmp / "state.db")
        pol = policy_mod.loads(LIVE_POLICY.replace("|memory", "|memory|nvlink"))
        self.backend = DryRunBackend(self.journal, topology or TOPOLOGY, self.clock.now)
        self.engine = Engine(self.journal, self.backend, pol, self.clock, Metrics())
        self.executor = Executor(self.journal, self.backend, pol, self.clock.now)

    def feed(self, a: Alert) -> dict[str, Any]:
        self.journal.accept([a], self.clock.now())
        aid = self.engine.decide(a)
        if aid is not None:
            self.executor.run({"id": aid})
        self.clock.advance(1)
        return self.journal.rows("SELECT * FROM decisions ORDER BY id DESC LIMIT 1")[0]

    def actions(self) -> list[str]:
        return [r["node"] for r in self.journal.rows("SELECT node FROM actions ORDER BY id")]

    def domain_incidents(self) -> list[dict[str, Any]]:
        return self.journal.rows("SELECT * FROM incidents WHERE node='' ORDER BY id")


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.journal.close()


def test_a_domain_alert_without_a_node_is_one_notify_incident_not_invalid(world: World) -> None:
    d = world.feed(domain_alert())
    assert (d["verdict"], d["guard"], d["action"], d["node"]) == ("allow", "domain", "notify", "")
    assert world.journal.scalar("SELECT COUNT(*) FROM decisions WHERE guard='invalid_alert'") == 0
    world.feed(domain_alert(name="ImexDomainDown"))  # a second alert about the same domain
    (inc,) = world.domain_incidents()
    assert (inc["fault_class"], inc["subject"], inc["acted"], inc["closed"]) == (
        "nvlink_domain",
        DOM_A,
        "notify",
        0,
    )
    assert world.actions() == [] and world.journal.scalar("SELECT COUNT(*) FROM flags") == 0


@pytest.mark.parametrize("action", ["drain", "cordon", "reboot", "checkpoint_restart"])
def test_while_the_domain_is_down_no_node_of_it_is_drained_one_by_one(
    world: World, action: str
) -> None:
    world.feed(domain_alert())
    (inc,) = world.domain_incidents()
    for i in range(1, 5):
        d = world.feed(alert(f"gpu-node-{i:03d}", action=action, alertname="GpuXidFatal"))
        assert (d["verdict"], d["guard"]) == ("deny", "domain")
        assert json.loads(d["evidence"])["domain_incident"] == inc["id"]
        assert d["action"] in DISRUPTIVE  # the ladder's rung for it, held
    assert world.actions() == []  # held, every one, as part of the one incident
    held = world.journal.scalar(
        "SELECT COUNT(*) FROM decisions WHERE guard='domain' "
        "AND json_extract(evidence, '$.domain_incident')=?",
        (inc["id"],),
    )
    assert held == 4
    assert world.journal.scalar("SELECT COUNT(*) FROM flags") == 0  # never a breaker flag


def test_a_reset_gpu_of_a_node_in_the_down_domain_is_held_too(world: World) -> None:
    world.feed(domain_alert())
    d = world.feed(alert("gpu-node-002", action="reset_gpu", gpu="3"))
    assert (d["verdict"], d["guard"]) == ("deny", "domain")
    assert world.actions() == []


def test_a_node_of_another_domain_is_still_drained(world: World) -> None:
    world.feed(domain_alert(dom=DOM_A))
    d = world.feed(alert("gpu-node-006"))
    assert (d["verdict"], d["action"]) == ("allow", "drain")
    assert world.actions() == ["gpu-node-006"]


def test_the_hold_lasts_until_every_domain_alert_resolves(world: World) -> None:
    world.feed(domain_alert())
    world.feed(domain_alert(name="ImexDomainDown"))
    d = world.feed(domain_alert("resolved"))
    assert "still down" in d["reason"]
    assert world.feed(alert("gpu-node-001"))["guard"] == "domain"
    world.feed(domain_alert("resolved", name="ImexDomainDown"))
    assert world.domain_incidents()[0]["closed"] == 1
    d = world.feed(alert("gpu-node-002"))
    assert (d["verdict"], d["action"]) == ("allow", "drain")
    assert world.actions() == ["gpu-node-002"]


def test_a_held_node_alert_is_decided_again_when_repeated_after_recovery(world: World) -> None:
    world.feed(domain_alert())
    node_alert = alert("gpu-node-003")
    assert world.feed(node_alert)["guard"] == "domain"
    world.feed(domain_alert("resolved"))
    world.journal.accept([node_alert], world.clock.now())  # Alertmanager's repeat
    (todo,) = [a for _, a in world.journal.todo() if a.fingerprint == node_alert.fingerprint]
    assert world.engine.decide(todo) is not None
    assert world.actions() == ["gpu-node-003"]


def test_a_facility_power_brake_on_a_rack_is_a_quiet_notification(world: World) -> None:
    brake = alert(
        "rack-a", fault_class="thermal", action="notify", alertname="FindingFacilityPowerBrake"
    )
    d = world.feed(brake)
    assert (d["verdict"], d["action"]) == ("allow", "notify")
    assert world.journal.scalar("SELECT COUNT(*) FROM decisions WHERE verdict='deny'") == 0
    assert world.actions() == [] and world.journal.node("rack-a") is None


# A Slurm site with no nvlink_domain in its topology: the nodes are known, their domain is not.
RACKS_ONLY = {n: {"rack": d["rack"]} for n, d in TOPOLOGY.items()}


@pytest.fixture
def slurm(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path, RACKS_ONLY)
    yield w
    w.journal.close()


def nvlink_down(node: str, dom: str = DOM_A, **labels: str) -> Alert:
    return alert(node, fault_class="nvlink", alertname="NvlinkDown", nvlink_domain=dom, **labels)


def test_without_topology_a_node_alert_naming_its_domain_is_held_by_the_domain_incident(
    slurm: World,
) -> None:
    slurm.feed(domain_alert())
    (inc,) = slurm.domain_incidents()
    d = slurm.feed(alert("gpu-node-002", nvlink_domain=DOM_A))
    assert (d["verdict"], d["guard"]) == ("deny", "domain")
    assert json.loads(d["evidence"])["domain_incident"] == inc["id"]
    assert slurm.feed(alert("gpu-node-006", nvlink_domain=DOM_B))["action"] == "drain"
    assert slurm.actions() == ["gpu-node-006"]


def test_a_domain_learned_from_an_earlier_alert_holds_a_later_alert_without_the_label(
    slurm: World,
) -> None:
    slurm.feed(alert("gpu-node-003", action="notify", nvlink_domain=DOM_A, fp="fp-early"))
    slurm.feed(domain_alert())
    d = slurm.feed(alert("gpu-node-003"))  # e.g. an XID rule that does not join the domain
    assert (d["verdict"], d["guard"]) == ("deny", "domain")
    assert slurm.journal.get(nvlink.MEMBER_KEY + "gpu-node-003") == DOM_A
    assert slurm.actions() == []


def test_a_switch_tray_down_is_one_incident_and_no_drain_though_node_alerts_arrive_first(
    slurm: World,
) -> None:
    # Link XIDs and link-down alerts of every tray fire before the domain alert (for: 5m).
    for i in range(1, 5):
        d = slurm.feed(alert(f"gpu-node-{i:03d}", xid_class="link", nvlink_domain=DOM_A, xid="149"))
        assert (d["verdict"], d["guard"]) == ("deny", nvlink.SETTLE_GUARD)
    slurm.clock.advance(300)
    slurm.feed(domain_alert())
    slurm.clock.advance(nvlink.SETTLE_S)
    slurm.engine.tick()  # the window passed: decided again, now as part of the incident
    todo = slurm.journal.todo()
    assert len(todo) == 4
    for _, a in todo:
        assert slurm.engine.decide(a) is None
    (inc,) = slurm.domain_incidents()
    held = slurm.journal.rows(
        "SELECT node FROM decisions WHERE guard='domain' "
        "AND json_extract(evidence, '$.domain_incident')=?",
        (inc["id"],),
    )
    assert len(held) == 4 and slurm.actions() == []


def test_a_lone_nvlink_fault_is_drained_once_the_settle_window_has_passed(slurm: World) -> None:
    d = slurm.feed(nvlink_down("gpu-node-004", gpu="1", link="0"))
    assert (d["verdict"], d["guard"], d["action"]) == ("deny", nvlink.SETTLE_GUARD, "drain")
    slurm.clock.advance(nvlink.SETTLE_S / 2)
    slurm.engine.tick()
    assert slurm.journal.todo() == []  # still settling
    slurm.clock.advance(nvlink.SETTLE_S / 2)
    slurm.engine.tick()
    ((_, again),) = slurm.journal.todo()
    aid = slurm.engine.decide(again)
    assert aid is not None
    slurm.executor.run({"id": aid})
    assert slurm.actions() == ["gpu-node-004"]


def test_a_settling_alert_that_resolved_is_not_decided_again(slurm: World) -> None:
    firing = nvlink_down("gpu-node-004")
    slurm.feed(firing)
    slurm.feed(nvlink_down("gpu-node-004", status="resolved"))
    slurm.clock.advance(nvlink.SETTLE_S)
    slurm.engine.tick()
    assert [a for _, a in slurm.journal.todo() if a.status == "firing"] == []
    assert slurm.actions() == []


def test_an_alert_of_a_node_in_no_nvlink_domain_is_not_held_to_settle(slurm: World) -> None:
    d = slurm.feed(alert("gpu-node-007", fault_class="nvlink", alertname="NvlinkDown"))
    assert (d["verdict"], d["action"]) == ("allow", "drain")
