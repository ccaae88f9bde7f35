"""The Node conditions and Events gpuwarden writes (remediation/backends/nodehealth.py), on the
in-memory API: the Event object as core/v1 has it, its name (unique within one clock tick),
its aggregation (a bump of the first, a new one once that expired or was not created, the
least recently seen forgotten first), condition reasons in CamelCase, UTC times, and the log
line when a write fails (never raised). The same over real HTTP: test_node_health.py."""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Iterator

import pytest

from remediation.backends import nodehealth
from remediation.backends.base import BlockedPod
from remediation.backends.nodehealth import NodeHealth
from tests.remediation.fakekube import FakeKube, node
from tests.remediation.logcapture import captured

N1 = "gpu-node-001"
NOW = 1_767_225_600.25  # 2026-01-01T00:00:00.25Z


class Answering(FakeKube):
    """Event creates answered with ``create_answer`` (the event is kept only on 201)."""

    def __init__(self, create_answer: int = 201) -> None:
        super().__init__(node(N1))
        self.create_answer = create_answer
        self.bumps: list[tuple[str, dict[str, object]]] = []

    def create_event(self, namespace: str, body: dict[str, object]) -> int:
        if self.create_answer in (200, 201):
            super().create_event(namespace, body)
        return self.create_answer

    def patch_event(self, namespace: str, name: str, body: dict[str, object]) -> int:
        self.bumps.append((name, body))
        return super().patch_event(namespace, name, body)


def health(api: FakeKube, instance: str | None = "gpuwarden-remediation-0") -> NodeHealth:
    return NodeHealth(api, clock=lambda: NOW, instance=instance)  # type: ignore[arg-type]


@pytest.fixture
def new_york() -> Iterator[None]:
    """A local time zone that is not UTC (the machine's may be)."""
    old = os.environ.get("TZ")
    os.environ["TZ"] = "America/New_York"
    time.tzset()
    yield
    if old is None:
        del os.environ["TZ"]
    else:
        os.environ["TZ"] = old
    time.tzset()


# ---------------------------------------------------------------- the Event


def test_an_event_is_a_core_v1_event_on_the_node_from_this_instance() -> None:
    api = Answering()
    health(api).event(N1, "Warning", "Quarantined", "cordoned: xid 79")
    [e] = api.events
    assert e == {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{N1}.{int(NOW * 1e9):x}", "namespace": "default"},
        "involvedObject": {"apiVersion": "v1", "kind": "Node", "name": N1, "uid": N1},
        "type": "Warning",
        "reason": "Quarantined",
        "message": "cordoned: xid 79",
        "source": {"component": "gpuwarden-remediation", "host": "gpuwarden-remediation-0"},
        "reportingComponent": "gpuwarden.io/remediation",
        "reportingInstance": "gpuwarden-remediation-0",
        "action": "Quarantined",
        "count": 1,
        "firstTimestamp": "2026-01-01T00:00:00Z",
        "lastTimestamp": "2026-01-01T00:00:00Z",
    }


def test_events_in_one_clock_tick_get_successive_names() -> None:
    api = Answering()
    h = health(api)
    for reason in ("Quarantined", "EvacuationBlocked", "Released"):
        h.event(N1, "Normal", reason, "m")
    base = int(NOW * 1e9)
    assert [e["metadata"]["name"] for e in api.events] == [
        f"{N1}.{base:x}",
        f"{N1}.{base + 1:x}",
        f"{N1}.{base + 2:x}",
    ]


def test_without_an_instance_name_the_host_name_reports_the_event() -> None:
    api = Answering()
    h = health(api, instance=None)
    assert h.instance == socket.gethostname()
    h.event(N1, "Normal", "Released", "m")
    assert api.events[0]["reportingInstance"] == socket.gethostname()


# ---------------------------------------------------------------- aggregation


def test_an_event_created_with_200_is_bumped_when_it_repeats() -> None:
    api = Answering(create_answer=200)
    h = health(api)
    h.event(N1, "Warning", "EvacuationBlocked", "ml/train: HTTP 429")
    h.event(N1, "Warning", "EvacuationBlocked", "ml/train: HTTP 429")
    assert len(api.events) == 1
    assert api.events[0]["count"] == 2


def test_an_event_whose_create_failed_is_created_again_not_bumped() -> None:
    api = Answering(create_answer=500)
    h = health(api)
    h.event(N1, "Warning", "Quarantined", "m")
    api.create_answer = 201
    h.event(N1, "Warning", "Quarantined", "m")
    assert api.bumps == []
    assert [e["count"] for e in api.events] == [1]


def test_an_expired_event_is_created_anew_with_a_count_of_one() -> None:
    api = Answering()
    h = health(api)
    h.event(N1, "Warning", "EvacuationBlocked", "m")
    h.event(N1, "Warning", "EvacuationBlocked", "m")
    api.events.clear()  # the API server's event TTL
    h.event(N1, "Warning", "EvacuationBlocked", "m")
    assert [e["count"] for e in api.events] == [1]
    h.event(N1, "Warning", "EvacuationBlocked", "m")
    assert [e["count"] for e in api.events] == [2]


def test_the_least_recently_seen_event_is_forgotten_first(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nodehealth, "REMEMBERED", 2)
    api = Answering()
    h = health(api)
    for reason in ("A", "B", "C"):
        h.event(N1, "Normal", reason, "m")
    h.event(N1, "Normal", "C", "m")  # the newest is remembered: bumped
    h.event(N1, "Normal", "B", "m")  # and the one before it
    h.event(N1, "Normal", "A", "m")  # the oldest was forgotten: a new Event
    assert [(e["reason"], e["count"]) for e in api.events] == [
        ("A", 1),
        ("B", 2),
        ("C", 2),
        ("A", 1),
    ]


# ---------------------------------------------------------------- failures are logged


def test_an_event_the_server_refuses_is_logged_with_its_status_and_not_raised() -> None:
    api = Answering(create_answer=403)
    with captured("gpuwarden.remediation") as records:
        health(api).event(N1, "Warning", "Quarantined", "m")
    assert [r.getMessage() for r in records] == [
        f"node {N1}: event Quarantined not recorded: RuntimeError: create answered HTTP 403"
    ]
    assert records[0].levelno == logging.WARNING


def test_conditions_the_server_refuses_are_logged_and_not_raised() -> None:
    api = Answering()
    with captured("gpuwarden.remediation") as records:
        health(api).set("gone-node", {nodehealth.QUARANTINED: (True, "Cordoned", "x"),
                                      nodehealth.HEALTHY: (False, "GpuFault", "x")})  # fmt: skip
    assert [r.getMessage() for r in records] == [
        "node gone-node: conditions ['GpuHealthy', 'GpuwardenQuarantined'] not written: "
        "LookupError: node gone-node not found"
    ]


# ---------------------------------------------------------------- words and times


def test_a_state_becomes_a_camel_case_condition_reason() -> None:
    assert nodehealth.camel("action_failed") == "ActionFailed"
    assert nodehealth.camel("re-image") == "ReImage"
    assert nodehealth.camel("quarantined") == "Quarantined"
    assert nodehealth.camel("drain-pending__now") == "DrainPendingNow"


def test_times_are_utc_whatever_the_local_time_zone(new_york: None) -> None:
    assert nodehealth.stamp(0) == "1970-01-01T00:00:00Z"
    assert nodehealth.stamp(NOW) == "2026-01-01T00:00:00Z"


def test_a_blocked_evacuation_names_each_pod_with_the_server_s_words() -> None:
    pods = [
        BlockedPod("ml/a", 429, "TooManyRequests", "budget a"),
        BlockedPod("ml/b", 500, "InternalError", "etcd"),
    ]
    assert nodehealth.blocked_message(pods) == (
        "ml/a: HTTP 429 TooManyRequests: budget a; ml/b: HTTP 500 InternalError: etcd"
    )
