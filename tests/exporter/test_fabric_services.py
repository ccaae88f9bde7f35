"""Fabric Manager and IMEX units -> fabric_service_up / fabric_service_restarts_total
(systemctl show shapes: fixtures/systemd/README.md)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from exporter import catalog as c
from exporter.collectors.fabric_services import FabricServicesCollector
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
