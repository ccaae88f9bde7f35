"""Checkpoint-storage alerts through the engine: a cluster alert about a mount is accepted
(not invalid, never a drain, never a breaker flag), journaled as one cluster incident, and
while it fires a checkpoint_restart becomes the policy's fallback, with the reason recorded.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from common.settings import SettingsError
from remediation import policy as policy_mod
from remediation.backends.slurm import SlurmBackend
from remediation.clock import FakeClock
from remediation.engine import Engine
from remediation.executor import Executor
from remediation.journal import Journal
from remediation.metrics import Metrics
from remediation.model import Alert
from tests.remediation.fakeslurm import FakeJob, FakeSlurm
from tests.remediation.helpers import LIVE_POLICY, alert

NODES = [f"gpu-node-{i:03d}" for i in range(1, 9)]


def storage_alert(
    status: str = "firing",
    mount: str = "/mnt/ckpt",
    starts_at: str = "2026-11-29T10:00:00Z",
    **extra: str,
) -> Alert:
    labels = {
        "alertname": "CheckpointStorageDegraded",
        "severity": "critical",
        "scope": "cluster",
        "fault_class": "storage",
        "action": "notify",
        "mount": mount,
        **extra,
    }
    summary = f"checkpoint storage {mount} fails on 6 nodes"
    return Alert(f"fp-storage-{mount}", starts_at, status, labels, {"summary": summary})


class World:
    def __init__(self, tmp: Path, policy_text: str = LIVE_POLICY) -> None:
        self.clock = FakeClock()
        self.slurm = FakeSlurm(NODES)
        self.slurm.jobs["101"] = FakeJob("RUNNING", ["gpu-node-001", "gpu-node-002"])
        self.journal = Journal(tmp / "state.db")
        pol = policy_mod.loads(policy_text)
        self.backend = SlurmBackend(self.slurm, {}, requeue_wait_s=1)
        self.metrics = Metrics()
        self.engine = Engine(self.journal, self.backend, pol, self.clock, self.metrics)
        self.executor = Executor(self.journal, self.backend, pol, self.clock.now)

    def feed(self, a: Alert) -> dict[str, Any]:
        """Accept and decide one alert, run its action (if any); the decision recorded."""
        self.journal.accept([a], self.clock.now())
        aid = self.engine.decide(a)
        if aid is not None:
            self.executor.run({"id": aid})
        return self.journal.rows("SELECT * FROM decisions ORDER BY id DESC LIMIT 1")[0]

    def signalled(self) -> int:
        return self.slurm.jobs["101"].signals


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    w = World(tmp_path)
    yield w
    w.journal.close()


def test_a_cluster_storage_alert_without_a_node_is_accepted_not_invalid(world: World) -> None:
    d = world.feed(storage_alert())
    assert (d["verdict"], d["guard"], d["action"], d["node"]) == ("allow", "storage", "notify", "")
    assert "/mnt/ckpt unhealthy" in d["reason"] and "drains no node" in d["reason"]
    assert world.journal.scalar("SELECT COUNT(*) FROM decisions WHERE guard='invalid_alert'") == 0
    assert world.journal.scalar("SELECT COUNT(*) FROM flags") == 0  # never a breaker flag
    assert world.journal.scalar("SELECT COUNT(*) FROM actions") == 0  # never a drain


def test_a_storage_alert_asking_for_a_drain_still_drains_nothing(world: World) -> None:
    d = world.feed(storage_alert(action="drain", node="gpu-node-003", scope="node"))
    assert (d["action"], d["guard"]) == ("notify", "storage")
    assert world.journal.scalar("SELECT COUNT(*) FROM actions") == 0
    assert not world.slurm.nodes["gpu-node-003"].flags


def test_firing_repeats_and_a_second_alert_are_one_cluster_incident_closed_by_the_last_resolve(
    world: World,
) -> None:
    world.feed(storage_alert())
    world.clock.advance(3600)  # far beyond incident_window_s: still the same incident
    world.feed(storage_alert(alertname="CheckpointStorageSlow"))
    rows = world.journal.rows("SELECT * FROM incidents")
    assert len(rows) == 1 and (rows[0]["node"], rows[0]["subject"]) == ("", "/mnt/ckpt")
    world.feed(storage_alert("resolved"))
    assert world.journal.scalar("SELECT closed FROM incidents") == 0  # Slow still fires
    d = world.feed(storage_alert("resolved", alertname="CheckpointStorageSlow"))
    assert world.journal.scalar("SELECT closed FROM incidents") == 1
    assert "healthy again" in d["reason"]


def test_while_checkpoint_storage_is_unhealthy_checkpoint_restart_requeues_without_asking(
    world: World,
) -> None:
    world.feed(storage_alert())
    d = world.feed(alert("gpu-node-001", action="checkpoint_restart"))
    assert (d["verdict"], d["action"]) == ("allow", "requeue")
    assert d["reason"].startswith("checkpoint held back: storage /mnt/ckpt unhealthy")
    assert "CheckpointStorageDegraded" in json.loads(d["evidence"])["checkpoint_held_back"]
    assert world.signalled() == 0  # no checkpoint was asked for
    assert world.slurm.jobs["101"].restarts == 1  # restarted without one


def test_after_the_resolve_checkpoints_are_asked_for_again(world: World) -> None:
    world.feed(storage_alert())
    world.feed(storage_alert("resolved"))
    d = world.feed(alert("gpu-node-001", action="checkpoint_restart"))
    assert d["action"] == "checkpoint_restart" and "held back" not in d["reason"]
    assert world.signalled() == 1


def test_storage_health_survives_a_restart_of_the_service(world: World, tmp_path: Path) -> None:
    world.feed(storage_alert())
    world.journal.close()
    again = World(tmp_path)
    d = again.feed(alert("gpu-node-001", action="checkpoint_restart"))
    assert d["action"] == "requeue" and "held back" in d["reason"]
    again.journal.close()
    world.journal = Journal(tmp_path / "state.db")  # for the fixture's close


def test_a_node_level_storage_alert_holds_back_only_jobs_on_that_node(world: World) -> None:
    world.feed(storage_alert(node="gpu-node-002", scope="node",
                             alertname="CheckpointStorageProbeFailing"))  # fmt: skip
    assert world.journal.scalar("SELECT COUNT(*) FROM incidents") == 0  # not a cluster incident
    d = world.feed(alert("gpu-node-001", action="checkpoint_restart"))  # job 101 spans 002
    assert d["action"] == "requeue" and "unhealthy on gpu-node-002" in d["reason"]


def test_policy_hold_denies_transiently_so_the_repeat_is_decided_again(tmp_path: Path) -> None:
    text = LIVE_POLICY.replace("restart_deadline_s: 30}", "restart_deadline_s: 30, "
                               "on_storage_unhealthy: hold, mount: /mnt/ckpt}")  # fmt: skip
    w = World(tmp_path, text)
    w.feed(storage_alert(mount="/mnt/other"))
    assert w.feed(alert("gpu-node-001", action="checkpoint_restart"))["action"] == (
        "checkpoint_restart"  # another mount than the policy's checkpoint mount: no effect
    )
    w.feed(storage_alert())
    a = alert("gpu-node-005", action="checkpoint_restart")
    d = w.feed(a)
    assert (d["verdict"], d["guard"]) == ("deny", "storage")
    assert w.journal.accept([a], w.clock.now()) == (0, 1)
    assert [x.key for _, x in w.journal.todo()] == [a.key]  # the repeat is decided again
    w.journal.close()


@pytest.mark.parametrize(
    "ckpt",
    ["{on_storage_unhealthy: reboot}", "{mount: relative/path}"],
)
def test_a_bad_storage_setting_stops_the_start_with_a_reason(ckpt: str) -> None:
    with pytest.raises(SettingsError, match=r"checkpoint\.(on_storage_unhealthy|mount)"):
        policy_mod.loads(f"checkpoint: {ckpt}\n")


def test_storage_failing_after_the_decision_still_gets_no_checkpoint_request(world: World) -> None:
    a = alert("gpu-node-001", action="checkpoint_restart")
    world.journal.accept([a], world.clock.now())
    aid = world.engine.decide(a)  # healthy storage: checkpoint_restart as recommended
    assert aid is not None
    world.feed(storage_alert())  # the mount fails before the executor signals the job
    world.executor.run({"id": aid})
    assert world.signalled() == 0 and world.slurm.jobs["101"].restarts == 1  # requeued
    why = world.journal.step_detail(aid, "signal:101")
    assert why.startswith("checkpoint held back: storage /mnt/ckpt unhealthy")


def test_a_flap_within_the_incident_window_is_still_the_same_incident(world: World) -> None:
    world.feed(storage_alert())
    world.clock.advance(10)
    world.feed(storage_alert("resolved"))
    world.clock.advance(30)  # within incident_window_s (120 s): the same incident, reopened
    world.feed(storage_alert(starts_at="2026-11-29T10:01:00Z"))
    assert world.journal.rows("SELECT id, closed FROM incidents") == [{"id": 1, "closed": 0}]
    world.feed(storage_alert("resolved", starts_at="2026-11-29T10:01:00Z"))
    world.clock.advance(600)  # long after: a new incident
    world.feed(storage_alert(starts_at="2026-11-29T11:00:00Z"))
    assert [r["closed"] for r in world.journal.rows("SELECT closed FROM incidents")] == [1, 0]
