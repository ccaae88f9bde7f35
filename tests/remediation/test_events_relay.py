"""Events out through the service and the relay, to a real HTTP receiver on loopback."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from remediation import cli
from remediation.app import build_app
from remediation.clock import FakeClock
from remediation.events import capture, cloudevent, outbox
from remediation.events.config import EventsConfig
from remediation.events.filter import build as build_filter
from remediation.events.relay import Relay, backoff
from remediation.events.sink import HttpSink
from remediation.journal import Journal
from remediation.metrics import Metrics
from tests.remediation.events_receiver import Receiver
from tests.remediation.helpers import AUTH, alert, payload, service, topology_file


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.stop()


async def until(cond: Any, timeout: float = 10.0) -> None:
    end = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < end, "timed out"
        await asyncio.sleep(0.02)


@pytest.mark.parametrize("mode", ["structured", "binary"])
async def test_a_finding_its_decision_and_its_action_reach_the_receiver_in_that_order(
    tmp_path: Path, receiver: Receiver, mode: str
):
    svc = service(tmp_path, clock=FakeClock(), topology=topology_file(tmp_path, 4),
                  events_url=receiver.url, events_mode=mode, events_interval_s=0.05)  # fmt: skip
    async with TestClient(TestServer(build_app(svc))) as client:
        r = await client.post(
            "/alertmanager", data=payload(alert("gpu-node-002", gpu="5")), headers=AUTH
        )
        assert r.status == 200
        await svc.worker.idle()
        await until(
            lambda: (
                [e["type"] for e in receiver.acked()][-1:] == ["io.gpuwarden.action.v1"]
                and receiver.acked()[-1]["data"]["state"] == "done"
            )
        )
    got = receiver.acked()
    assert {d.mode for d in receiver.deliveries} == {mode}
    assert all(d.problems == [] for d in receiver.deliveries)
    kinds = [e["type"].split(".")[2] for e in got]
    assert kinds[:2] == ["finding", "decision"] and set(kinds[2:]) == {"action"}
    assert [e["sequence"] for e in got] == sorted(e["sequence"] for e in got)
    assert {e["subject"] for e in got} == {"gpu-node-002/5"}
    assert {e["partitionkey"] for e in got} == {"gpu-node-002"}
    assert {e["severity"] for e in got} == {"critical"}
    finding, decision, done = got[0]["data"], got[1]["data"], got[-1]["data"]
    assert (finding["status"], finding["alertname"], finding["labels"]["gpu"]) == (
        "firing", "GpuXidFatal", "5")  # fmt: skip
    assert decision["verdict"] == "allow" and decision["action"] == "drain"
    assert decision["reason"] and isinstance(decision["evidence"], dict)
    assert done["action"] == "drain" and done["decision_id"] == decision["decision_id"]
    assert len({e["id"] for e in got}) == len(got)  # each event once


async def test_the_filter_keeps_only_the_kinds_severities_and_labels_asked_for(
    tmp_path: Path, receiver: Receiver
):
    svc = service(tmp_path, clock=FakeClock(), topology=topology_file(tmp_path, 4),
                  events_url=receiver.url, events_interval_s=0.05,
                  events_kinds=("decision",), events_min_severity="critical",
                  events_labels=("fault_class=xid_fatal", "team!=ml"))  # fmt: skip
    alerts = [
        alert("gpu-node-001"),  # kept: a critical xid_fatal
        alert("gpu-node-002", severity="warning"),  # below the floor
        alert("gpu-node-003", fault_class="memory", action="drain"),  # other class
        alert("gpu-node-004", team="ml"),  # a label the filter excludes
    ]
    async with TestClient(TestServer(build_app(svc))) as client:
        assert (
            await client.post("/alertmanager", data=payload(*alerts), headers=AUTH)
        ).status == 200
        await svc.worker.idle()
        await until(lambda: len(receiver.acked()) >= 1)
        await asyncio.sleep(0.3)  # a few more cycles: nothing else may arrive
    assert [(e["type"], e["subject"]) for e in receiver.acked()] == [
        ("io.gpuwarden.decision.v1", "gpu-node-001")]  # fmt: skip


def relay_on(tmp_path: Path, url: str, clock: FakeClock, **cfg: Any) -> tuple[Relay, Journal]:
    journal = Journal(tmp_path / "state.db")
    metrics = Metrics()
    conf = EventsConfig(url, **{"backoff_s": 1.0, "backoff_max_s": 8.0, **cfg})
    return Relay(journal, conf, HttpSink(url, 2.0), clock.now, metrics, rng=lambda: 0.0), journal


def put_events(journal: Journal, node: str, n: int, now: float, start: int = 0) -> list[str]:
    ids = []
    with journal.tx() as db:
        for i in range(start, start + n):
            eid = f"ev-{node}-{i}"
            ev = cloudevent.make(id=eid, source="/t", kind="finding", time=capture.rfc3339(now),
                                 data={"i": i}, subject_=node, partition=node)  # fmt: skip
            outbox.put(db, eid, node, "finding", ev, now)
            ids.append(eid)
    return ids


def test_a_failing_receiver_is_retried_with_exponential_backoff_then_gets_everything_in_order(
    tmp_path: Path, receiver: Receiver
):
    clock = FakeClock()
    relay, journal = relay_on(tmp_path, receiver.url, clock)
    ids = put_events(journal, "n1", 3, clock.now()) + put_events(journal, "n2", 2, clock.now())
    receiver.fail_rate = 1.0
    waits = []
    for _ in range(4):  # each cycle: one try (the sink is held back after a failure)
        relay.cycle()
        waits.append(round(relay.gate_until - clock.now(), 3))
        clock.advance(relay.gate_until - clock.now())
    assert waits == [0.5, 1.0, 2.0, 4.0]  # equal jitter with u=0: half of 1, 2, 4, 8 s
    assert len(receiver.settled()) == 4  # one try per backoff, not one per node
    assert relay.metrics.events_failures.labels("503")._value.get() == 4
    receiver.fail_rate = 0.0
    clock.advance(10)
    relay.cycle()
    acked = [e["id"] for e in receiver.acked()]
    assert sorted(acked) == sorted(ids)
    for node in ("n1", "n2"):
        assert [i for i in acked if f"-{node}-" in i] == [i for i in ids if f"-{node}-" in i]
    assert outbox.counts(journal)[outbox.PENDING] == {}
    assert relay.metrics.events_pending._value.get() == 0


def test_a_receiver_that_restarts_on_its_port_gets_the_events_sent_while_it_was_down(
    tmp_path: Path, receiver: Receiver
):
    clock = FakeClock()
    relay, journal = relay_on(tmp_path, receiver.url, clock)
    put_events(journal, "n1", 2, clock.now())
    relay.cycle()
    assert len(receiver.acked()) == 2
    receiver.stop()
    put_events(journal, "n1", 2, clock.now(), start=2)
    relay.cycle()
    assert relay.metrics.events_failures.labels("connection")._value.get() == 1
    assert outbox.oldest_pending(journal) == clock.now()
    receiver.start()  # same port
    clock.advance(60)
    relay.cycle()
    assert [e["data"]["i"] for e in receiver.acked()] == [0, 1, 2, 3]


def test_an_event_the_receiver_refuses_is_dead_lettered_and_the_node_goes_on(
    tmp_path: Path, receiver: Receiver
):
    clock = FakeClock()
    relay, journal = relay_on(tmp_path, receiver.url, clock)
    ids = put_events(journal, "n1", 3, clock.now())
    receiver.status_for[ids[1]] = 400
    relay.cycle()
    assert [e["id"] for e in receiver.acked()] == [ids[0], ids[2]]
    assert relay.metrics.events_dead.labels("finding")._value.get() == 1
    assert outbox.counts(journal)[outbox.DEAD] == {"finding": 1}
    row = journal.rows("SELECT last_error FROM outbox WHERE id=?", (ids[1],))[0]
    assert row["last_error"].startswith("400")


def test_with_max_attempts_an_event_failing_that_often_is_dead_lettered(
    tmp_path: Path, receiver: Receiver
):
    clock = FakeClock()
    relay, journal = relay_on(tmp_path, receiver.url, clock, max_attempts=2)
    put_events(journal, "n1", 1, clock.now())
    receiver.fail_rate = 1.0
    for _ in range(3):
        relay.cycle()
        clock.advance(60)
    assert len(receiver.settled()) == 2
    assert outbox.counts(journal)[outbox.DEAD] == {"finding": 1}


def test_without_max_attempts_an_event_is_retried_until_delivered(
    tmp_path: Path, receiver: Receiver
):
    clock = FakeClock()
    relay, journal = relay_on(tmp_path, receiver.url, clock)
    put_events(journal, "n1", 1, clock.now())
    receiver.fail_rate = 1.0
    for _ in range(12):
        relay.cycle()
        clock.advance(60)
    receiver.fail_rate = 0.0
    relay.cycle()
    assert outbox.counts(journal) == {"pending": {}, "delivered": {"finding": 1}, "dead": {}}
    assert len(receiver.settled()) == 13


def test_backoff_doubles_up_to_its_cap_with_equal_jitter():
    assert [backoff(a, 1.0, 8.0, 0.0) for a in range(1, 7)] == [0.5, 1, 2, 4, 4, 4]
    assert [backoff(a, 1.0, 8.0, 0.999) for a in (1, 5)] == [pytest.approx(1.0, abs=1e-3),
                                                             pytest.approx(8.0, abs=1e-2)]  # fmt: skip


def test_delivered_events_are_pruned_after_the_retention(tmp_path: Path, receiver: Receiver):
    clock = FakeClock()
    relay, journal = relay_on(tmp_path, receiver.url, clock, retention_s=100.0)
    put_events(journal, "n1", 2, clock.now())
    relay.cycle()
    assert outbox.prune(journal, clock.now() - 100) == 0
    assert outbox.prune(journal, clock.now() + 1) == 2


def test_a_filter_on_an_unknown_kind_or_severity_stops_the_start_with_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    base = ["--state-db", str(tmp_path / "s.db"), "--check", "--allow-unauthenticated"]
    for extra, words in [
        (["--events-url", "http://127.0.0.1:1/x", "--events-kinds", "finding,alarm"], "alarm"),
        (["--events-url", "http://127.0.0.1:1/x", "--events-min-severity", "high"], "high"),
        (["--events-url", "http://127.0.0.1:1/x", "--events-labels", "a~b"], "a~b"),
        (["--events-url", "ftp://x"], "--events-url"),
        (["--events-url", "http://h:1/", "--events-mode", "batch"], "--events-mode"),
        (["--events-url", "http://h:1/", "--events-backoff-s", "0"], "--events-backoff-s"),
        (["--events-url", "http://h:1/", "--events-token-file", str(tmp_path / "no")], "token"),
    ]:
        try:
            rc = cli.main([*base, *extra])
        except SystemExit as e:  # argparse's own refusal of a choice
            rc = int(e.code or 0)
        err = capsys.readouterr().err
        assert rc == 2 and words in err, (extra, err)
        assert len(err.strip().splitlines()) <= 2, err  # argparse adds its usage line


def test_a_filter_keeps_everything_by_default():
    f = build_filter()
    assert all(f.passes(k, "", {}) for k in cloudevent.KINDS)


def test_a_kept_alive_connection_the_receiver_closed_is_reopened_without_a_failure(
    tmp_path: Path, receiver: Receiver
):
    clock = FakeClock()
    relay, journal = relay_on(tmp_path, receiver.url, clock)
    put_events(journal, "n1", 1, clock.now())
    relay.cycle()
    receiver.stop()  # closes the relay's kept-alive connection, as an idle timeout would
    receiver.start()
    put_events(journal, "n1", 1, clock.now(), start=1)
    relay.cycle()
    assert [e["data"]["i"] for e in receiver.acked()] == [0, 1]
    assert relay.metrics.events_failures.labels("connection")._value.get() == 0


def test_check_says_where_events_go_and_which(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    rc = cli.main(["--state-db", str(tmp_path / "s.db"), "--check", "--allow-unauthenticated",
                   "--events-url", "https://sink.example.com:8443/ce?token=x",
                   "--events-kinds", "decision,action", "--events-min-severity", "warning"])  # fmt: skip
    out = capsys.readouterr().out
    assert rc == 0
    assert ("events: CloudEvents (structured) to https://sink.example.com:8443/ce, kinds "
            "decision,action; severity >= warning") in out  # fmt: skip
    assert "token=x" not in out


def test_a_stopping_relay_sends_nothing_more_and_its_events_wait_for_the_restart(
    tmp_path: Path, receiver: Receiver
):
    clock = FakeClock()
    relay, journal = relay_on(tmp_path, receiver.url, clock)
    put_events(journal, "n1", 2, clock.now())
    relay.stopping = True
    relay.cycle()
    assert receiver.settled() == []
    again, _ = relay_on(tmp_path, receiver.url, clock)
    again.cycle()
    assert [e["data"]["i"] for e in receiver.acked()] == [0, 1]


def test_events_settings_come_from_the_environment_and_yaml_like_every_other(tmp_path: Path):
    from common import settings as gsettings
    from remediation.settings import Settings

    cfg = tmp_path / "remediation.yaml"
    cfg.write_text("events_url: http://sink:8080/ce\nevents_labels: [fault_class=xid_fatal]\n")
    env = {"GPUWARDEN_EVENTS_KINDS": "finding,decision", "GPUWARDEN_EVENTS_MODE": "binary"}
    s = gsettings.load(Settings, {}, env=env, config_file=cfg)
    assert (s.events_url, s.events_mode, s.events_kinds, s.events_labels) == (
        "http://sink:8080/ce", "binary", ("finding", "decision"), ("fault_class=xid_fatal",))  # fmt: skip
