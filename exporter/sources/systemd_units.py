"""systemd unit state for the fabric services, read through ``systemctl show``.

Sits under :class:`exporter.collectors.fabric_services.FabricServicesCollector`. The seam is
:class:`UnitReader`: the real one runs ``systemctl show --property=LoadState,ActiveState,
SubState,NRestarts <unit>`` (systemd.unit(5), systemctl(1): one ``KEY=value`` per line; NRestarts
since systemd 235); tests and the simulator use :class:`FakeUnits`. Output shapes:
fixtures/systemd/ (with their origin).
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

PROPERTIES = ("LoadState", "ActiveState", "SubState", "NRestarts")
TIMEOUT = 5.0  # seconds: a hung systemd must not stall the collection loop for long


@dataclass(frozen=True)
class UnitState:
    load: str  # loaded | not-found | masked | ...
    active: str  # active | activating | deactivating | inactive | failed | reloading
    sub: str  # running | dead | auto-restart | ...
    restarts: int | None  # None: this systemd does not count restarts

    @property
    def installed(self) -> bool:
        return self.load not in ("not-found", "")


class SystemdUnavailable(OSError):
    """No systemd to ask on this host: ``systemctl`` not installed (a container image without
    it: the Kubernetes DaemonSet) or no systemd bus to reach (a container without the host's
    /run/systemd). ``reason`` is the ``exporter_field_unavailable`` reason."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


# systemctl's words when it runs but there is no systemd to talk to (systemctl(1), sd-bus)
NO_SYSTEMD = ("Failed to connect to bus", "System has not been booted with systemd")


class UnitReader(Protocol):
    def show(self, unit: str) -> str:
        """``systemctl show`` output for one unit; raises OSError when systemctl cannot run."""
        ...


def parse_show(text: str) -> UnitState:
    """The unit's state from ``systemctl show`` output (unknown keys ignored)."""
    kv: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            kv[key.strip()] = value.strip()
    restarts = kv.get("NRestarts", "")
    return UnitState(
        load=kv.get("LoadState", ""),
        active=kv.get("ActiveState", ""),
        sub=kv.get("SubState", ""),
        restarts=int(restarts) if restarts.isdigit() else None,
    )


class SystemctlUnits:
    """The real reader: one ``systemctl show`` per unit and cycle."""

    def __init__(self, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run):
        self._run = run

    def show(self, unit: str) -> str:
        try:
            done = self._run(
                ["systemctl", "show", "--property=" + ",".join(PROPERTIES), unit],
                capture_output=True, text=True, timeout=TIMEOUT, check=False,
            )  # fmt: skip
        except FileNotFoundError as e:
            raise SystemdUnavailable("systemctl_missing", f"systemctl show {unit}: {e}") from e
        except subprocess.TimeoutExpired as e:
            raise OSError(f"systemctl show {unit}: {e}") from e
        if done.returncode != 0 and any(w in done.stderr for w in NO_SYSTEMD):
            raise SystemdUnavailable("systemd_unreachable", done.stderr.strip())
        if done.returncode != 0:
            raise OSError(f"systemctl show {unit}: exit {done.returncode}: {done.stderr.strip()}")
        return done.stdout


class FakeUnits:
    """Units by name -> their ``systemctl show`` text; an absent unit is not-found, as systemd
    reports it (LoadState=not-found, ActiveState=inactive)."""

    def __init__(self, units: Mapping[str, str] | None = None) -> None:
        self.units = dict(units or {})
        self.error: OSError | None = None

    def show(self, unit: str) -> str:
        if self.error is not None:
            raise self.error
        return self.units.get(
            unit, "LoadState=not-found\nActiveState=inactive\nSubState=dead\nNRestarts=0\n"
        )

    def set(self, unit: str, active: str, sub: str, restarts: int = 0) -> None:
        self.units[unit] = (
            f"LoadState=loaded\nActiveState={active}\nSubState={sub}\nNRestarts={restarts}\n"
        )
