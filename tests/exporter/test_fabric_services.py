"""Fabric Manager and IMEX units -> fabric_service_up / fabric_service_restarts_total
(systemctl show shapes: fixtures/systemd/README.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter.collectors.fabric_services import FabricServicesCollector
from exporter.sources.imex_ctl import FakeImexCtl, ImexCtlMissing, ImexCtlRunner, parse_query
from exporter.sources.systemd_units import (
    FakeUnits,
    SystemctlUnits,
    SystemdUnavailable,
    parse_show,
)

FIX = Path(__file__).resolve().parents[2] / "fixtures/systemd"
FM, IMEX = "nvidia-fabricmanager.service", "nvidia-imex.service"


def _by(samples, metric):
    return {s.labels["service"]: (s.value, dict(s.labels)) for s in samples if s.metric is metric}


@pytest.mark.parametrize(
    ("fixture", "active", "restarts", "installed"),
    [
        ("fabricmanager-running.txt", "active", 0, True),
        ("fabricmanager-failed.txt", "failed", 5, True),
        ("imex-auto-restart.txt", "activating", 12, True),
        ("not-installed.txt", "inactive", 0, False),
    ],
)
def test_each_recorded_shape_parses(fixture: str, active: str, restarts: int, installed: bool):
    state = parse_show((FIX / fixture).read_text())
    assert (state.active, state.restarts, state.installed) == (active, restarts, installed)


def test_a_running_unit_is_up_and_a_failed_one_down_with_its_state_and_restarts() -> None:
    units = FakeUnits({FM: (FIX / "fabricmanager-failed.txt").read_text()})
    units.set(IMEX, "active", "running", restarts=2)
    samples = FabricServicesCollector(units, "n1").collect()
    up = _by(samples, c.FABRIC_SERVICE_UP)
    assert up["fabricmanager"][0] == 0 and up["fabricmanager"][1]["state"] == "failed"
    assert up["imex"][0] == 1 and up["imex"][1]["state"] == "active"
    restarts = _by(samples, c.FABRIC_SERVICE_RESTARTS)
    assert (restarts["fabricmanager"][0], restarts["imex"][0]) == (5, 2)


def test_a_unit_not_installed_on_this_node_has_no_series() -> None:
    units = FakeUnits()
    units.set(IMEX, "active", "running")  # a GB200 tray: IMEX yes, Fabric Manager no
    samples = FabricServicesCollector(units, "n1").collect()
    assert set(_by(samples, c.FABRIC_SERVICE_UP)) == {"imex"}


def test_a_systemd_without_nrestarts_still_reports_up() -> None:
    units = FakeUnits({FM: "LoadState=loaded\nActiveState=active\nSubState=running\n"})
    samples = FabricServicesCollector(units, "n1").collect()
    assert set(_by(samples, c.FABRIC_SERVICE_UP)) == {"fabricmanager"}
    assert _by(samples, c.FABRIC_SERVICE_RESTARTS) == {}


def test_systemctl_failing_costs_a_read_error_not_the_collector() -> None:
    units = FakeUnits()
    units.error = OSError("systemctl: not found")
    col = FabricServicesCollector(units, "n1")
    assert list(col.collect()) == []
    assert col.read_errors.counts["systemctl"] == 2


def test_the_real_reader_asks_systemctl_show_for_the_four_properties() -> None:
    seen = []

    def run(argv, **kw):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="ActiveState=active\n", stderr="")

    assert SystemctlUnits(run).show(FM) == "ActiveState=active\n"
    assert seen == [["systemctl", "show",
                     "--property=LoadState,ActiveState,SubState,NRestarts", FM]]  # fmt: skip


def test_the_real_reader_turns_a_missing_or_failing_systemctl_into_oserror() -> None:
    def missing(argv, **kw):
        raise FileNotFoundError("systemctl")

    def failing(argv, **kw):
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr="Failed to connect to bus")

    for run in (missing, failing):
        with pytest.raises(OSError):
            SystemctlUnits(run).show(FM)


@pytest.mark.parametrize(
    ("stderr", "reason"),
    [
        (None, "systemctl_missing"),
        ("Failed to connect to bus: No such file or directory", "systemd_unreachable"),
        ("System has not been booted with systemd as init system (PID 1).", "systemd_unreachable"),
    ],
)
def test_the_real_reader_tells_no_systemd_here_from_a_failing_one(stderr, reason) -> None:
    def run(argv, **kw):
        if stderr is None:
            raise FileNotFoundError("systemctl")
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr=stderr)

    with pytest.raises(SystemdUnavailable) as e:
        SystemctlUnits(run).show(FM)
    assert e.value.reason == reason


def test_a_unit_systemctl_rejects_is_a_plain_read_error_not_a_missing_systemd() -> None:
    def run(argv, **kw):
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr="Access denied")

    with pytest.raises(OSError) as e:
        SystemctlUnits(run).show(FM)
    assert not isinstance(e.value, SystemdUnavailable)


def test_no_systemd_on_the_host_says_why_once_instead_of_silence() -> None:
    units = FakeUnits()
    units.error = SystemdUnavailable("systemctl_missing", "systemctl: not found")
    col = FabricServicesCollector(units, "n1")
    (s,) = col.collect()
    assert s.metric is c.FIELD_UNAVAILABLE and s.value == 1.0
    assert dict(s.labels) == {"node": "n1", "gpu": "", "metric": c.FABRIC_SERVICE_UP.name,
                              "reason": "systemctl_missing"}  # fmt: skip
    assert col.read_errors.counts.get("systemctl", 0) == 0


# ------------------------------------------------------------------ the IMEX daemon's status
IMEX_FIX = Path(__file__).resolve().parents[2] / "fixtures/imex"


def _imex_node(answer: str = "READY\n") -> tuple[FakeUnits, FakeImexCtl]:
    units = FakeUnits()
    units.set(IMEX, "active", "running")
    return units, FakeImexCtl(answer)


def test_the_recorded_ready_answer_parses_as_ready() -> None:
    status = parse_query((IMEX_FIX / "query-ready.txt").read_text())
    assert (status.ready, status.status) == (True, "READY")


def test_any_other_answer_is_not_ready_with_its_first_word_as_a_bounded_status() -> None:
    assert parse_query("UNAVAILABLE: peers 3/18 connected\n") == parse_query("unavailable")
    assert parse_query("UNAVAILABLE: x").ready is False
    assert parse_query("UNAVAILABLE: x").status == "UNAVAILABLE"
    assert parse_query("").status == "UNKNOWN" and len(parse_query("x" * 99).status) == 32


def test_an_active_unit_whose_daemon_is_not_ready_reports_imex_ready_zero() -> None:
    units, imex = _imex_node("NOT_READY\n")
    samples = FabricServicesCollector(units, "n1", imex=imex).collect()
    (s,) = [s for s in samples if s.metric is c.FABRIC_IMEX_READY]
    assert s.value == 0.0 and dict(s.labels) == {"node": "n1", "status": "NOT_READY"}
    assert _by(samples, c.FABRIC_SERVICE_UP)["imex"][0] == 1.0  # the unit alone says fine


def test_a_ready_daemon_reports_imex_ready_one() -> None:
    units, imex = _imex_node()
    samples = FabricServicesCollector(units, "n1", imex=imex).collect()
    assert [s.value for s in samples if s.metric is c.FABRIC_IMEX_READY] == [1.0]


def test_imex_ctl_is_not_asked_where_the_imex_unit_is_not_installed() -> None:
    imex = FakeImexCtl()
    units = FakeUnits()
    units.set(FM, "active", "running")  # an HGX node: Fabric Manager, no IMEX
    samples = FabricServicesCollector(units, "n1", imex=imex).collect()
    assert imex.calls == 0 and not [s for s in samples if s.metric is c.FABRIC_IMEX_READY]


def test_a_missing_imex_ctl_says_why_and_a_failing_one_costs_a_read_error() -> None:
    units, imex = _imex_node()
    imex.error = ImexCtlMissing("nvidia-imex-ctl: not found")
    col = FabricServicesCollector(units, "n1", imex=imex)
    (s,) = [s for s in col.collect() if s.metric is c.FIELD_UNAVAILABLE]
    assert dict(s.labels)["metric"] == c.FABRIC_IMEX_READY.name
    assert dict(s.labels)["reason"] == "imex_ctl_missing"
    imex.error = OSError("nvidia-imex-ctl -q: timed out")
    assert not [s for s in col.collect() if s.metric is c.FABRIC_IMEX_READY]
    assert col.read_errors.counts["imex_ctl"] == 1


def test_the_real_imex_reader_runs_the_query_and_maps_exits() -> None:
    seen = []

    def run(argv, **kw):
        seen.append(argv)
        return subprocess.CompletedProcess(argv, 0, stdout="READY\n", stderr="")

    assert ImexCtlRunner(run).query() == "READY\n" and seen == [["nvidia-imex-ctl", "-q"]]

    def failing(argv, **kw):
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr="")

    assert parse_query(ImexCtlRunner(failing).query()).ready is False

    def missing(argv, **kw):
        raise FileNotFoundError("nvidia-imex-ctl")

    with pytest.raises(ImexCtlMissing):
        ImexCtlRunner(missing).query()
