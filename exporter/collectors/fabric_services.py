"""Fabric services collector: Fabric Manager and IMEX systemd units -> ``fabric_service_*``.

Reads, once per cycle, the units of the services the NVLink fabric needs on this node:
``nvidia-fabricmanager`` (HGX H100/H200 with NVSwitch: without it the GPUs never finish fabric
registration) and ``nvidia-imex`` (GB200/GB300 NVL72: IMEX exports GPU memory across the
trays of an NVLink domain; DCGM's DCGM_FR_IMEX_UNHEALTHY). A unit not installed on the node
(Fabric Manager on a GB200 compute tray, where it runs on the switch trays) has no series; a
``systemctl`` that fails costs a read error, not the scrape. Where there is no systemd to ask
(no ``systemctl`` in the image, or no systemd bus in the container: a Kubernetes DaemonSet
without the host's /run/systemd) ``exporter_field_unavailable{metric="gpuwarden_fabric_service_up",
gpu=""}`` says why (``systemctl_missing``, ``systemd_unreachable``) instead of silence.
Where ``nvidia-imex.service`` is installed, the daemon's own status too (``nvidia-imex-ctl -q``:
:mod:`exporter.sources.imex_ctl`) -> ``fabric_imex_ready``; without the binary,
``exporter_field_unavailable{metric="gpuwarden_fabric_imex_ready", reason="imex_ctl_missing"}``.
Unit names: NVIDIA Fabric Manager User Guide and IMEX guide (docs.nvidia.com/datacenter/tesla/).
"""

from __future__ import annotations

from collections.abc import Sequence

from exporter import catalog as c
from exporter.catalog import Sample
from exporter.collectors.base import ReadErrors
from exporter.sources.imex_ctl import ImexCtl, ImexCtlMissing, parse_query
from exporter.sources.systemd_units import SystemdUnavailable, UnitReader, parse_show

SERVICES = {"fabricmanager": "nvidia-fabricmanager.service", "imex": "nvidia-imex.service"}


class FabricServicesCollector:
    name = "fabric_services"

    def __init__(
        self,
        units: UnitReader,
        node: str,
        services: dict[str, str] | None = None,
        imex: ImexCtl | None = None,
    ) -> None:
        self._units = units
        self._imex = imex
        self._node = node
        self._services = dict(SERVICES if services is None else services)
        self.read_errors = ReadErrors()

    def collect(self) -> Sequence[Sample]:
        out: list[Sample] = []
        for service, unit in sorted(self._services.items()):
            try:
                state = parse_show(self._units.show(unit))
            except SystemdUnavailable as e:  # no systemd here: say so once, not per unit
                name = c.FABRIC_SERVICE_UP.name
                return [c.FIELD_UNAVAILABLE.make(1.0, self._node, "", name, e.reason)]
            except OSError:
                self.read_errors.add("systemctl")
                continue
            if not state.installed:
                continue
            up = 1.0 if state.active == "active" else 0.0
            out.append(c.FABRIC_SERVICE_UP.make(up, self._node, service, state.active))
            if state.restarts is not None:
                out.append(c.FABRIC_SERVICE_RESTARTS.make(state.restarts, self._node, service))
            if service == "imex":
                out += self._imex_status()
        return out

    def _imex_status(self) -> list[Sample]:
        """The IMEX daemon's answer, on a node where its unit is installed."""
        if self._imex is None:
            return []
        try:
            status = parse_query(self._imex.query())
        except ImexCtlMissing:
            name = c.FABRIC_IMEX_READY.name
            return [c.FIELD_UNAVAILABLE.make(1.0, self._node, "", name, "imex_ctl_missing")]
        except OSError:
            self.read_errors.add("imex_ctl")
            return []
        return [c.FABRIC_IMEX_READY.make(1.0 if status.ready else 0.0, self._node, status.status)]
